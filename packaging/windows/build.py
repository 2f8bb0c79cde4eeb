#!/usr/bin/env python3
"""Build the Windows release file ``nvidia_gpu_exporter-V-windows-amd64.zip``: the exporter frozen by PyInstaller
(one folder: ``nvidia_gpu_exporter.exe`` and its ``_internal`` folder, at the zip's root), pywin32 and bcrypt
included, so that it runs, and runs as a service, without a Python installation.

    python packaging/windows/build.py requirements          # the hashed pins to install (pip --require-hashes)
    python packaging/windows/build.py build OUTPUT_DIR      # PyInstaller, then the zip; prints the zip's path
    python packaging/windows/build.py checksums DIR         # DIR/checksums-windows.txt: sha256sum lines, LF
    python packaging/windows/build.py compare FIRST SECOND  # exit 1 unless two zips are byte-identical, listing
                                                            # the entries that differ

The release workflow (.github/workflows/release.yml, job ``windows``) runs it on a Windows runner with CPython
3.12 into which it installed ``requirements`` and the release's wheel, tests the executable
(packaging/windows/smoke_test.py) and zips it; job ``windows-rebuild`` builds it again on another Windows image
from the sdist and compares (docs/windows.md).

Reproducible by construction, not by luck: PyInstaller's own inputs are pinned (packaging/windows/requirements.txt,
which packaging/update_lock.py writes with the other locks; the wheel; the CPython patch release),
``PYTHONHASHSEED=0`` (PyInstaller's documented condition for a
reproducible build), ``SOURCE_DATE_EPOCH`` (PyInstaller writes it as the executable's PE build timestamp; taken
from the tree, as packaging/build-release.sh does, when unset), and the zip is written here with sorted entries, one
fixed time and fixed attributes, whatever the files' times and the builder's umask.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOCK = ROOT / "packaging" / "requirements.lock"
WINDOWS_REQUIREMENTS = HERE / "requirements.txt"
ENTRY = HERE / "entry.py"
NAME = "nvidia_gpu_exporter"
ARCHIVE = "nvidia_gpu_exporter-{version}-windows-amd64.zip"
PYTHON = (3, 12)  # the wheels of requirements.txt are CPython 3.12's
# Imported by name at run time (importlib.import_module in windows/), so PyInstaller's analysis cannot see them;
# win32timezone is what pywin32's service framework imports lazily.
HIDDEN_IMPORTS = (
    "servicemanager",
    "win32service",
    "win32serviceutil",
    "win32evtlogutil",
    "win32con",
    "win32timezone",
)
CHECKSUMS = "checksums-windows.txt"
ZIP_EPOCH_FLOOR = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_blocks(text: str) -> dict[str, str]:
    """The requirements of a hashed lock, by canonical name: each ``name==version \\`` line with its hash lines."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            if current is None:
                raise ValueError(f"a continuation line before any requirement: {line.strip()}")
            current.append(line)
            continue
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if match is None:
            raise ValueError(f"not a pinned requirement: {line}")
        current = blocks.setdefault(canonical(match[1]), [])
        if current:
            raise ValueError(f"{match[1]} is pinned twice")
        current.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def pinned_version(block: str) -> str:
    return block.split("==", 1)[1].split(maxsplit=1)[0]


def requirements() -> str:
    """The hashed pins of the frozen build: the lock, with the packages requirements.txt pins for Windows replaced."""
    lock = requirement_blocks(LOCK.read_text(encoding="utf-8"))
    windows = requirement_blocks(WINDOWS_REQUIREMENTS.read_text(encoding="utf-8"))
    merged = {**lock, **windows}
    return "".join(merged[name] + "\n" for name in sorted(merged))


def zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    stamp = time.gmtime(epoch)[:6]
    return max(stamp, ZIP_EPOCH_FLOOR)


def write_zip(folder: Path, archive: Path, epoch: int) -> None:
    """Zip every file under ``folder`` (paths relative to it) with sorted entries, one time, fixed attributes."""
    files: list[tuple[str, Path]] = []
    for path in folder.rglob("*"):
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link: a zip for Windows holds files only")
        if path.is_file():
            files.append((path.relative_to(folder).as_posix(), path))
    if not files:
        raise ValueError(f"{folder} holds no file")
    stamp = zip_time(epoch)
    with zipfile.ZipFile(archive, "w") as output:
        for name, path in sorted(files):
            info = zipfile.ZipInfo(name, stamp)
            info.create_system = 0  # MS-DOS attributes, as on Windows, whichever system writes it
            info.external_attr = 0
            info.compress_type = zipfile.ZIP_DEFLATED
            output.writestr(info, path.read_bytes(), compresslevel=9)


def differences(first: Path, second: Path) -> list[str]:
    """What differs between two zips, entry by entry (empty when they are byte-identical)."""
    if first.read_bytes() == second.read_bytes():
        return []
    with zipfile.ZipFile(first) as one, zipfile.ZipFile(second) as other:
        left = {info.filename: info for info in one.infolist()}
        right = {info.filename: info for info in other.infolist()}
        found = [f"only in {first.name}: {name}" for name in sorted(set(left) - set(right))]
        found += [f"only in {second.name}: {name}" for name in sorted(set(right) - set(left))]
        for name in sorted(set(left) & set(right)):
            a, b = left[name], right[name]
            if (a.CRC, a.file_size) != (b.CRC, b.file_size):
                found.append(f"content differs: {name} ({a.file_size} and {b.file_size} bytes)")
            elif (a.date_time, a.external_attr, a.create_system) != (b.date_time, b.external_attr, b.create_system):
                found.append(f"metadata differs: {name}")
    return found or [f"{first.name} and {second.name} differ in their zip structure, not in any entry"]


def write_checksums(folder: Path) -> Path:
    """``CHECKSUMS`` in ``folder``: ``sha256sum`` lines (two spaces, byte order of names, LF) of every other file, so
    that the release job checks them with ``sha256sum --check`` and appends them to checksums.txt."""
    listing = folder / CHECKSUMS
    names = sorted(path.name for path in folder.iterdir() if path.is_file() and path.name != CHECKSUMS)
    if not names:
        raise ValueError(f"{folder} holds no file to list")
    lines = [f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}  {name}\n" for name in names]
    listing.write_bytes("".join(lines).encode("utf-8"))
    return listing


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value:
        return int(value)
    script = ROOT / "packaging" / "source_date_epoch.py"  # as packaging/build-release.sh reads it
    result = subprocess.run([sys.executable, str(script), str(ROOT)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(result.stderr.strip())
    return int(result.stdout)


def pyinstaller_command(work: Path) -> list[str]:
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level=WARN"]
    command += ["--onedir", "--console", "--name", NAME]
    command += ["--distpath", str(work / "dist"), "--workpath", str(work / "build"), "--specpath", str(work)]
    for module in HIDDEN_IMPORTS:
        command += ["--hidden-import", module]
    # Every module (some are imported only for one flag), the web assets and the build record beside them.
    command += ["--collect-submodules", NAME, "--collect-data", NAME, "--copy-metadata", "nvidia_gpu_exporter"]
    command.append(str(ENTRY))
    return command


def build(output: Path) -> Path:
    if sys.platform != "win32" or sys.version_info[:2] != PYTHON:
        raise SystemExit(f"the frozen build runs on Windows with CPython {PYTHON[0]}.{PYTHON[1]} (the pinned wheels')")
    from nvidia_gpu_exporter import __version__  # noqa: PLC0415 -- the installed wheel's, not the tree's

    epoch = source_date_epoch()
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        environment = {**os.environ, "PYTHONHASHSEED": "0", "SOURCE_DATE_EPOCH": str(epoch)}
        subprocess.run(pyinstaller_command(work), check=True, env=environment)
        archive = output / ARCHIVE.format(version=__version__)
        write_zip(work / "dist" / NAME, archive, epoch)
    print(f"{archive} sha256={hashlib.sha256(archive.read_bytes()).hexdigest()} SOURCE_DATE_EPOCH={epoch}")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("requirements")
    build_parser = commands.add_parser("build")
    build_parser.add_argument("output", type=Path)
    checksums_parser = commands.add_parser("checksums")
    checksums_parser.add_argument("folder", type=Path)
    compare_parser = commands.add_parser("compare")
    compare_parser.add_argument("first", type=Path)
    compare_parser.add_argument("second", type=Path)
    arguments = parser.parse_args(argv)
    if arguments.command == "requirements":
        sys.stdout.write(requirements())
        return 0
    if arguments.command == "build":
        build(arguments.output)
        return 0
    if arguments.command == "checksums":
        write_checksums(arguments.folder)
        return 0
    found = differences(arguments.first, arguments.second)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
