#!/usr/bin/env python3
"""Regenerate the hashed locks: ``packaging/requirements.lock`` (every runtime dependency),
``packaging/requirements-kubernetes.lock`` (the ``kubernetes`` extra) and ``packaging/requirements-fleet.lock``
(the ``fleet`` extra), the last two for the container image.

``requirements.lock`` drives the single-file build (pex), the deb/rpm (which ship that file) and the container
image, so they all carry the same dependency bytes. It holds, for every Python from 3.10 on and for Linux on
x86_64 and aarch64:

* pure-Python wheels (``py3-none-any``) for everything that publishes one (h11, nvidia-ml-py; one file serves
  every CPython version);
* the abi3 wheels of ``bcrypt`` for both architectures (it has no pure-Python implementation);
* the sdist of ``PyYAML`` (no pure wheel exists; the build scripts build it with ``PYYAML_FORCE_LIBYAML=0``).

Dependencies behind environment markers are followed when the marker holds for *any* supported Python
version on Linux (aiohttp's ``async-timeout`` for 3.10 did), so pip's habit of evaluating markers against the
running interpreter does not drop them.

``requirements-kubernetes.lock`` adds what the ``kubernetes`` extra needs beyond that (grpcio, protobuf): the
container image installs both locks, the single file and the packages only the first (packaging/README.md says
why). grpcio publishes no pure or abi3 wheel, only one per CPython version and architecture, so it is locked for
the image's CPython (``IMAGE_PYTHON``, Debian 12's 3.11) on x86_64 and aarch64; protobuf's pure wheel serves
every version, as does typing-extensions' (grpcio's). Dependencies the first lock already pins are not
repeated; the script stops when such a pin falls outside what the extra asks for.

``requirements-fleet.lock`` does the same for the ``fleet`` extra (asyncssh, for ``--fleet.targets-file``) beyond
both other locks: asyncssh and pycparser are pure wheels, cryptography ships abi3 wheels (one per architecture, as
bcrypt), and cffi, like grpcio, one wheel per CPython version and architecture, locked for ``IMAGE_PYTHON``.

``windows/requirements.txt`` is what the frozen Windows build (``packaging/windows/build.py``, CPython
``WINDOWS_PYTHON`` on Windows x64) installs over ``requirements.lock``: the Windows wheels of the lock's compiled
packages (bcrypt, PyYAML) at the lock's versions, so each version is decided once, by the lock's resolution; the
``windows`` extra (pywin32); and PyInstaller (``WINDOWS_BUILD_TOOLS``) with what it needs on Windows. Markers are
evaluated for that one Python on Windows. The lock's pure-Python pins serve there as they are and are not repeated.

Usage (needs network access to PyPI and the ``packaging`` library, which ``build`` brings along)::

    python3 packaging/update_lock.py            # rewrite the three locks and windows/requirements.txt
    python3 packaging/update_lock.py --check    # exit 1 when one of them misses or mis-pins a dependency (offline)
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "packaging" / "requirements.lock"
KUBERNETES_LOCK = ROOT / "packaging" / "requirements-kubernetes.lock"
KUBERNETES_EXTRA = "kubernetes"
FLEET_LOCK = ROOT / "packaging" / "requirements-fleet.lock"
FLEET_EXTRA = "fleet"
WINDOWS_REQUIREMENTS = ROOT / "packaging" / "windows" / "requirements.txt"
WINDOWS_EXTRA = "windows"
# The frozen Windows build's CPython (packaging/windows/build.py, the release workflow's windows job) and platform.
WINDOWS_PYTHON = "3.12"
WINDOWS_PLATFORM = "win_amd64"
# What freezes it: the bootloader is inside PyInstaller's wheel, so this pin is the executable's too.
WINDOWS_BUILD_TOOLS = ("pyinstaller>=6.22.3,<7",)
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
# The container image's CPython: Debian 12's, as in deploy/docker/Dockerfile (its builder and distroless runtime).
IMAGE_PYTHON = "3.11"
ARCHES = ("x86_64", "aarch64")
ABI3_ONLY = frozenset({"bcrypt", "cryptography"})  # compiled, stable-ABI wheels per architecture
PER_PYTHON = frozenset({"grpcio", "cffi"})  # compiled per CPython version and architecture: for IMAGE_PYTHON only
SDIST_ONLY = frozenset({"pyyaml"})  # built without libyaml by the build scripts
COMPILED = ABI3_ONLY | PER_PYTHON | SDIST_ONLY  # locked for Linux: the Windows build takes their Windows wheels
GLIBC = "manylinux_2_28"
# grpcio's and cffi's wheels are manylinux2014 (glibc 2.17); pip matches a --platform tag exactly, so name both.
PER_PYTHON_GLIBC = ("manylinux_2_28", "manylinux_2_17", "manylinux2014")

HEADER = """\
# Generated by packaging/update_lock.py: every runtime dependency of nvidia-gpu-exporter, pinned and hashed.
# Used by packaging/zipapp/build.sh (single file, deb, rpm) and deploy/docker/Dockerfile (pip --require-hashes).
# Pure-Python wheels, except bcrypt (abi3 wheels for x86_64 and aarch64) and PyYAML (sdist, built pure).
"""
KUBERNETES_HEADER = f"""\
# Generated by packaging/update_lock.py: the '{KUBERNETES_EXTRA}' extra of nvidia-gpu-exporter (kubelet PodResources
# client), pinned and hashed, beyond what requirements.lock already pins. Used by deploy/docker/Dockerfile only:
# grpcio's CPython {IMAGE_PYTHON} wheels for x86_64 and aarch64 (the image's Python), protobuf's pure wheel.
"""
FLEET_HEADER = f"""\
# Generated by packaging/update_lock.py: the '{FLEET_EXTRA}' extra of nvidia-gpu-exporter (asyncssh, the SSH client of
# --fleet.targets-file), pinned and hashed, beyond what the two other locks pin. Used by deploy/docker/Dockerfile
# only: cffi's CPython {IMAGE_PYTHON} wheels and cryptography's abi3 wheels for x86_64 and aarch64, pure wheels else.
"""
WINDOWS_HEADER = f"""\
# Generated by packaging/update_lock.py: what the frozen Windows build (packaging/windows/build.py) adds to
# packaging/requirements.lock for CPython {WINDOWS_PYTHON} on Windows x64, pinned and hashed. The lock's pure-Python
# wheels serve as they are; the packages pinned here replace the lock's entries of the same name (bcrypt and PyYAML:
# their Windows wheels, at the lock's versions). `build.py requirements` prints the combined, hashed list the
# release workflow installs with pip --require-hashes --no-deps.
#
"""
WINDOWS_SECTIONS = (
    "# The compiled runtime dependencies, Windows wheels:\n",
    f"# The `{WINDOWS_EXTRA}` extra (the service, the Event Log):\n",
    "# PyInstaller and what it needs on Windows (its bootloader is inside its wheel):\n",
)


@dataclass(frozen=True)
class Platform:
    """Where a lock's files install: the Python versions and the marker variables of the operating system."""

    pythons: tuple[str, ...]
    sys_platform: str
    platform_system: str
    os_name: str
    platform_machine: str


LINUX = Platform(PYTHONS, "linux", "Linux", "posix", "x86_64")
WINDOWS = Platform((WINDOWS_PYTHON,), "win32", "Windows", "nt", "AMD64")


def project_requirements(pyproject: Path) -> list[Requirement]:
    """``[project].dependencies`` of pyproject.toml (read without tomllib, which Python 3.10 lacks)."""
    text = pyproject.read_text(encoding="utf-8")
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    return [Requirement(match) for match in re.findall(r'^\s*"([^"]+)",?\s*(?:#.*)?$', block, flags=re.MULTILINE)]


def extra_requirements(pyproject: Path, extra: str) -> list[Requirement]:
    """One line of ``[project.optional-dependencies]`` (``extra = ["a>=1", "b>=2"]``), read without tomllib."""
    text = pyproject.read_text(encoding="utf-8")
    block = text.split("\n[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    match = re.search(rf"^{re.escape(extra)} = \[([^\]]*)\]$", block, flags=re.MULTILINE)
    if match is None:
        raise SystemExit(f"pyproject.toml has no one-line optional dependency list {extra!r}")
    return [Requirement(item) for item in re.findall(r'"([^"]+)"', match.group(1))]


def marker_applies(marker: Marker | None, platform: Platform = LINUX) -> bool:
    """Whether a dependency's marker holds on ``platform`` for any of its Python versions (no extras requested)."""
    if marker is None:
        return True
    for version in platform.pythons:
        environment = {
            "python_version": version,
            "python_full_version": f"{version}.0",
            "sys_platform": platform.sys_platform,
            "platform_system": platform.platform_system,
            "os_name": platform.os_name,
            "platform_machine": platform.platform_machine,
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "extra": "",
        }
        if marker.evaluate(environment):
            return True
    return False


def pip_download(
    requirement: str,
    destination: Path,
    *,
    arch: str | None = None,
    sdist: bool = False,
    per_python: bool = False,
    windows: bool = False,
) -> Path:
    """Download one distribution file for ``requirement`` and return its path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q"]
    command += ["--dest", str(destination)]
    command += ["--python-version", WINDOWS_PYTHON if windows else IMAGE_PYTHON if per_python else PYTHONS[0]]
    if windows:  # the best wheel CPython WINDOWS_PYTHON takes there: its own ABI's, abi3 or pure
        command += ["--only-binary", ":all:", "--platform", WINDOWS_PLATFORM, "--implementation", "cp"]
        command += ["--abi", "cp" + WINDOWS_PYTHON.replace(".", ""), "--abi", "abi3", "--abi", "none"]
    elif sdist:
        command += ["--no-binary", ":all:"]
    elif per_python and arch is not None:
        command += ["--only-binary", ":all:", "--implementation", "cp", "--abi", "cp" + IMAGE_PYTHON.replace(".", "")]
        command += [arg for glibc in PER_PYTHON_GLIBC for arg in ("--platform", f"{glibc}_{arch}")]
    elif arch is not None:
        command += ["--only-binary", ":all:", "--platform", f"{GLIBC}_{arch}", "--implementation", "cp"]
        command += ["--abi", "abi3"]
    else:
        command += ["--only-binary", ":all:", "--platform", "any", "--implementation", "py", "--abi", "none"]
    before = set(destination.iterdir())
    subprocess.run([*command, requirement], check=True)
    (downloaded,) = set(destination.iterdir()) - before
    return downloaded


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(archive.read(name).decode("utf-8"))
    return [Requirement(value) for value in metadata.get_all("Requires-Dist") or []]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_of(path: Path) -> str:
    stem = path.name.removesuffix(".tar.gz")
    return stem.split("-")[1] if path.suffix == ".whl" else stem.rsplit("-", 1)[1]


def resolve(
    roots: Iterable[Requirement],
    workdir: Path,
    already: Mapping[str, Version] | None = None,
    platform: Platform = LINUX,
) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes), following dependencies whose markers can apply on ``platform``. Names pinned in
    ``already`` (another lock installed alongside) are left out when their pin satisfies what is asked for. On
    Windows, one file per name: the wheel pip picks for WINDOWS_PYTHON there."""
    already = already or {}
    specifiers: dict[str, SpecifierSet] = {}
    pending = [requirement for requirement in roots if marker_applies(requirement.marker, platform)]
    resolved: dict[str, tuple[str, list[str]]] = {}
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        specifiers[name] = specifiers.get(name, SpecifierSet()) & requirement.specifier
        if name in already:
            if already[name] not in specifiers[name]:
                raise SystemExit(
                    f"{name}=={already[name]}, pinned by another lock, is outside {specifiers[name]}: "
                    "raise it in pyproject.toml or regenerate the locks"
                )
            continue
        if name in resolved and Version(resolved[name][0]) in specifiers[name]:
            continue
        spec = f"{name}{specifiers[name]}"
        if platform is WINDOWS:
            files = [pip_download(spec, workdir, windows=True)]
        elif name in SDIST_ONLY:
            files = [pip_download(spec, workdir, sdist=True)]
        elif name in ABI3_ONLY:
            files = [pip_download(spec, workdir, arch=arch) for arch in ARCHES]
        elif name in PER_PYTHON:
            files = [pip_download(spec, workdir, arch=arch, per_python=True) for arch in ARCHES]
        else:
            files = [pip_download(spec, workdir)]
        if files[0].suffix == ".whl":
            pending += [dep for dep in wheel_requirements(files[0]) if marker_applies(dep.marker, platform)]
        if len({version_of(path) for path in files}) != 1:
            raise SystemExit(f"{name}: the architectures resolved to different versions: {[p.name for p in files]}")
        resolved[name] = (version_of(files[0]), sorted(sha256(path) for path in files))
    return resolved


def pins(resolved: Mapping[str, tuple[str, list[str]]]) -> list[str]:
    """One ``name==version \\`` block a name, with its hash lines, sorted by name."""
    return [
        f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{digest}" for digest in hashes)
        for name, (version, hashes) in sorted(resolved.items())
    ]


def render(resolved: dict[str, tuple[str, list[str]]], header: str = HEADER) -> str:
    return "\n".join([header, *pins(resolved)]) + "\n"


def render_windows(*sections: Mapping[str, tuple[str, list[str]]]) -> str:
    """windows/requirements.txt: the compiled runtime dependencies, the windows extra, the build tools."""
    parts = [WINDOWS_HEADER]
    for title, resolved in zip(WINDOWS_SECTIONS, sections, strict=True):
        parts += [title, *(block + "\n" for block in pins(resolved))]
    return "".join(parts)


def resolve_windows(
    core: Mapping[str, tuple[str, list[str]]], extra: Iterable[Requirement], workdir: Path
) -> tuple[dict[str, tuple[str, list[str]]], ...]:
    """The three sections of windows/requirements.txt, from the runtime lock's resolution ``core``: its compiled
    packages at its versions, then the windows extra and the build tools beyond all pinned before them."""
    pinned = {name: Version(version) for name, (version, _) in core.items()}
    pure = {name: version for name, version in pinned.items() if name not in COMPILED}
    compiled_roots = [Requirement(f"{name}=={pinned[name]}") for name in sorted(pinned.keys() & COMPILED)]
    compiled = resolve(compiled_roots, workdir, already=pure, platform=WINDOWS)
    windows_extra = resolve(extra, workdir, already=pinned, platform=WINDOWS)
    pinned |= {name: Version(version) for name, (version, _) in windows_extra.items()}
    tools = resolve(map(Requirement, WINDOWS_BUILD_TOOLS), workdir, already=pinned, platform=WINDOWS)
    return compiled, windows_extra, tools


def locked_versions(lock: Path) -> dict[str, Version]:
    pins = [
        line.split(" ", 1)[0].split("==", 1)
        for line in lock.read_text(encoding="utf-8").splitlines()
        if line and not line[0].isspace() and not line.startswith("#")
    ]
    return {canonicalize_name(name): Version(version) for name, version in pins}


def lock_problems(roots: Iterable[Requirement], lock: Path, also: Path | Sequence[Path] = ()) -> list[str]:
    """Direct dependencies of pyproject.toml the lock lacks or pins outside their version range. With ``also``
    (the locks installed alongside), a name may be pinned by one of them, never by two."""
    pins = locked_versions(lock)
    problems = []
    for other_lock in [also] if isinstance(also, Path) else also:
        other = locked_versions(other_lock)
        problems += [f"repeats {name}, pinned by {other_lock.name}" for name in sorted(pins.keys() & other.keys())]
        pins = {**other, **pins}
    return problems + requirement_problems(roots, pins)


def requirement_problems(
    roots: Iterable[Requirement], pins: Mapping[str, Version], platform: Platform = LINUX
) -> list[str]:
    """The requirements (those whose marker can apply on ``platform``) that ``pins`` lacks or pins out of range."""
    problems = []
    for requirement in roots:
        name = canonicalize_name(requirement.name)
        if not marker_applies(requirement.marker, platform):
            continue
        if name not in pins:
            problems.append(f"lacks {name}")
        elif pins[name] not in requirement.specifier:
            problems.append(f"pins {name}=={pins[name]}, outside {requirement.specifier}")
    return problems


def windows_problems(extra: Iterable[Requirement], windows: Path, lock: Path) -> list[str]:
    """What windows/requirements.txt gets wrong against the runtime lock beside it: each compiled package of the lock
    at the lock's version, no pure pin of the lock repeated, the windows extra and the build tools pinned in range."""
    pins, core = locked_versions(windows), locked_versions(lock)
    problems = []
    for name in sorted(core):
        if name not in COMPILED:
            if name in pins:
                problems.append(f"repeats {name}, pinned by {lock.name}")
        elif name not in pins:
            problems.append(f"lacks {name} (the Windows wheel of {lock.name}'s {name}=={core[name]})")
        elif pins[name] != core[name]:
            problems.append(f"pins {name}=={pins[name]}, {lock.name} pins {name}=={core[name]}")
    roots = [*extra, *map(Requirement, WINDOWS_BUILD_TOOLS)]
    return problems + requirement_problems(roots, {**core, **pins}, WINDOWS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the lock covers pyproject.toml")
    options = parser.parse_args(argv)
    roots = project_requirements(ROOT / "pyproject.toml")
    extra = extra_requirements(ROOT / "pyproject.toml", KUBERNETES_EXTRA)
    fleet = extra_requirements(ROOT / "pyproject.toml", FLEET_EXTRA)
    windows = extra_requirements(ROOT / "pyproject.toml", WINDOWS_EXTRA)
    if options.check:
        problems = [(LOCK, problem) for problem in lock_problems(roots, LOCK)]
        for lock, requirements, also in (
            (KUBERNETES_LOCK, extra, (LOCK,)),
            (FLEET_LOCK, fleet, (LOCK, KUBERNETES_LOCK)),
        ):
            if not lock.is_file():
                problems.append((lock, "is missing"))
            else:
                problems += [(lock, problem) for problem in lock_problems(requirements, lock, also=also)]
        if not WINDOWS_REQUIREMENTS.is_file():
            problems.append((WINDOWS_REQUIREMENTS, "is missing"))
        else:
            problems += [
                (WINDOWS_REQUIREMENTS, problem) for problem in windows_problems(windows, WINDOWS_REQUIREMENTS, LOCK)
            ]
        for lock, problem in problems:
            print(f"{lock.relative_to(ROOT)} {problem}: run python3 packaging/update_lock.py", file=sys.stderr)
        return 1 if problems else 0
    with tempfile.TemporaryDirectory() as workdir:
        core = resolve(roots, Path(workdir))
        LOCK.write_text(render(core), encoding="utf-8")
        pinned = {name: Version(version) for name, (version, _) in core.items()}
        kubernetes = resolve(extra, Path(workdir), already=pinned)
        KUBERNETES_LOCK.write_text(render(kubernetes, KUBERNETES_HEADER), encoding="utf-8")
        pinned |= {name: Version(version) for name, (version, _) in kubernetes.items()}
        FLEET_LOCK.write_text(render(resolve(fleet, Path(workdir), already=pinned), FLEET_HEADER), encoding="utf-8")
        WINDOWS_REQUIREMENTS.write_text(
            render_windows(*resolve_windows(core, windows, Path(workdir))), encoding="utf-8"
        )
    written = (LOCK, KUBERNETES_LOCK, FLEET_LOCK, WINDOWS_REQUIREMENTS)
    print(f"wrote {', '.join(str(lock.relative_to(ROOT)) for lock in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
