"""The frozen Windows build's scripts (packaging/windows/): its pins, its reproducible zip, the comparison the second
Windows runner makes, the checksums it hands to the release job, the PyInstaller command and the smoke test.

PyInstaller and Windows do not run here: the release workflow's ``windows`` job freezes and tests the executable on
a Windows runner (docs/windows.md). What runs here is everything that does not need them, and the smoke test's
console part against ``python -m nvidia_gpu_exporter``, which is what the frozen executable runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import runpy
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from harness import REPO
from nvidia_gpu_exporter import __version__

WINDOWS = REPO / "packaging" / "windows"
LOCK = REPO / "packaging" / "requirements.lock"
WINDOWS_SOURCES = REPO / "src" / "nvidia_gpu_exporter" / "windows"
EPOCH = 1_764_547_200  # 2025-12-01T00:00:00Z


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"windows_{name}", WINDOWS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look their module up
    spec.loader.exec_module(module)
    return module


build = _load("build")
smoke = _load("smoke_test")


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


FILES = {
    "nvidia_gpu_exporter.exe": b"MZ frozen",
    "_internal/python312.dll": b"dll",
    "_internal/nvidia_gpu_exporter/web/assets/view.js": b"js",
    "_internal/base_library.zip": b"zip",
}


# --------------------------------------------------------------------------------------------------------------
# The pins


def _versions(text: str) -> dict[str, str]:
    return {name: build.pinned_version(block) for name, block in build.requirement_blocks(text).items()}


@pytest.mark.parametrize(
    "package",
    sorted(set(_versions(build.WINDOWS_REQUIREMENTS.read_text("utf-8"))) & set(_versions(LOCK.read_text("utf-8")))),
)
def test_windows_pins_of_locked_packages_are_the_locks_versions(package: str) -> None:
    # bcrypt and PyYAML: their Windows wheels, of the versions every other artifact ships.
    windows = _versions(build.WINDOWS_REQUIREMENTS.read_text("utf-8"))
    assert windows[package] == _versions(LOCK.read_text("utf-8"))[package]


def test_the_windows_build_pins_pywin32_bcrypt_and_pyinstaller() -> None:
    assert {"pywin32", "bcrypt", "pyinstaller", "pyinstaller-hooks-contrib"} <= set(
        _versions(build.WINDOWS_REQUIREMENTS.read_text("utf-8"))
    )


def test_every_pin_of_the_combined_list_is_hashed() -> None:
    blocks = build.requirement_blocks(build.requirements())
    assert [name for name, block in blocks.items() if not re.search(r"--hash=sha256:[0-9a-f]{64}", block)] == []


def test_the_combined_list_is_the_lock_with_the_windows_wheels_in_place_of_the_linux_ones() -> None:
    combined = build.requirement_blocks(build.requirements())
    lock = build.requirement_blocks(LOCK.read_text("utf-8"))
    windows = build.requirement_blocks(build.WINDOWS_REQUIREMENTS.read_text("utf-8"))
    assert set(combined) == set(lock) | set(windows)
    assert combined["bcrypt"] == windows["bcrypt"]  # the abi3 win_amd64 wheel, not the manylinux ones
    assert combined["h11"] == lock["h11"]  # a pure-Python pin the Windows list has no reason to replace


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("aiohttp>=3\n", "not a pinned requirement", id="unpinned"),
        pytest.param("a==1 \\\n    --hash=sha256:00\na==2\n", "pinned twice", id="pinned-twice"),
        pytest.param("    --hash=sha256:00\n", "continuation line before any requirement", id="stray-hash"),
    ],
)
def test_requirement_blocks_refuse_what_is_not_a_hashed_lock(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build.requirement_blocks(text)


# --------------------------------------------------------------------------------------------------------------
# The zip


def test_the_zip_is_byte_identical_whatever_the_files_times_modes_and_order(tmp_path: Path) -> None:
    first = _tree(tmp_path / "one", FILES)
    second = _tree(tmp_path / "two", dict(reversed(FILES.items())))  # created in another order
    for index, path in enumerate(sorted(second.rglob("*"))):
        os.utime(path, (EPOCH + 1000 * index, EPOCH + 1000 * index))
        path.chmod(0o775 if path.is_dir() else 0o664)  # as a checkout under umask 0002
    build.write_zip(first, tmp_path / "one.zip", EPOCH)
    build.write_zip(second, tmp_path / "two.zip", EPOCH)
    assert (tmp_path / "one.zip").read_bytes() == (tmp_path / "two.zip").read_bytes()


def test_the_zip_holds_the_executable_at_its_root_with_sorted_entries_of_one_time(tmp_path: Path) -> None:
    build.write_zip(_tree(tmp_path / "frozen", FILES), tmp_path / "out.zip", EPOCH)
    with zipfile.ZipFile(tmp_path / "out.zip") as archive:
        infos = archive.infolist()
        assert [info.filename for info in infos] == sorted(FILES)
        assert {info.date_time for info in infos} == {(2025, 12, 1, 0, 0, 0)}
        assert archive.read("nvidia_gpu_exporter.exe") == FILES["nvidia_gpu_exporter.exe"]


def test_a_time_before_1980_becomes_the_earliest_a_zip_can_carry() -> None:
    assert build.zip_time(0) == (1980, 1, 1, 0, 0, 0)


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need a privilege on Windows")
def test_the_zip_refuses_a_symbolic_link(tmp_path: Path) -> None:
    folder = _tree(tmp_path / "frozen", FILES)
    (folder / "link.dll").symlink_to(folder / "_internal" / "python312.dll")
    with pytest.raises(ValueError, match="symbolic link"):
        build.write_zip(folder, tmp_path / "out.zip", EPOCH)


def test_identical_zips_compare_equal(tmp_path: Path) -> None:
    build.write_zip(_tree(tmp_path / "frozen", FILES), tmp_path / "a.zip", EPOCH)
    shutil.copy(tmp_path / "a.zip", tmp_path / "b.zip")
    assert build.differences(tmp_path / "a.zip", tmp_path / "b.zip") == []
    assert build.main(["compare", str(tmp_path / "a.zip"), str(tmp_path / "b.zip")]) == 0


@pytest.mark.parametrize(
    ("changed", "found"),
    [
        pytest.param(
            {"_internal/python312.dll": b"DLL"},
            "content differs: _internal/python312.dll (3 and 3 bytes)",
            id="one-entry-differs",
        ),
        pytest.param({"_internal/extra.pyd": b"x"}, "only in b.zip: _internal/extra.pyd", id="an-extra-entry"),
    ],
)
def test_the_comparison_names_what_differs_and_fails(
    changed: dict[str, bytes], found: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build.write_zip(_tree(tmp_path / "a", FILES), tmp_path / "a.zip", EPOCH)
    build.write_zip(_tree(tmp_path / "b", {**FILES, **changed}), tmp_path / "b.zip", EPOCH)
    assert build.main(["compare", str(tmp_path / "a.zip"), str(tmp_path / "b.zip")]) == 1
    assert capsys.readouterr().out.splitlines() == [found]


def test_the_comparison_fails_on_a_different_zip_time_too(tmp_path: Path) -> None:
    folder = _tree(tmp_path / "frozen", FILES)
    build.write_zip(folder, tmp_path / "a.zip", EPOCH)
    build.write_zip(folder, tmp_path / "b.zip", EPOCH + 86_400)
    found = build.differences(tmp_path / "a.zip", tmp_path / "b.zip")
    assert found[0] == "metadata differs: _internal/base_library.zip"


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs sha256sum (coreutils), as the release job")
def test_the_checksums_are_lines_sha256sum_checks(tmp_path: Path) -> None:
    folder = _tree(tmp_path / "windows", {"b.yaml": b"b", "a.zip": b"a"})
    listing = build.write_checksums(folder)
    assert listing.read_text("utf-8") == (
        f"{hashlib.sha256(b'a').hexdigest()}  a.zip\n{hashlib.sha256(b'b').hexdigest()}  b.yaml\n"
    )
    result = subprocess.run(
        ["sha256sum", "--check", "--strict", listing.name], cwd=folder, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (0, "a.zip: OK\nb.yaml: OK\n")


# --------------------------------------------------------------------------------------------------------------
# The PyInstaller command and the entry point


def _modules_imported_by_name() -> set[str]:
    pattern = re.compile(r'(?:import_module|_import)\("([A-Za-z0-9_.]+)"\)')
    return {name for path in WINDOWS_SOURCES.glob("*.py") for name in pattern.findall(path.read_text("utf-8"))}


def test_every_module_the_windows_code_imports_by_name_is_a_hidden_import(tmp_path: Path) -> None:
    # PyInstaller's analysis follows import statements only; a module missing here is missing from the executable.
    names = _modules_imported_by_name()
    assert names >= {"win32service", "servicemanager"}  # the pattern still finds them
    command = build.pyinstaller_command(tmp_path)
    hidden = {command[index + 1] for index, word in enumerate(command) if word == "--hidden-import"}
    assert names - hidden == set()


def test_the_build_is_one_folder_with_every_module_and_data_file_of_the_package(tmp_path: Path) -> None:
    command = build.pyinstaller_command(tmp_path)
    assert "--onedir" in command  # one process: the SCM's, and a stable path for the Event Log's message file
    assert "--onefile" not in command
    for option in ("--collect-submodules", "--collect-data"):
        assert command[command.index(option) + 1] == "nvidia_gpu_exporter"
    assert command[-1] == str(build.ENTRY)


def test_the_entry_point_is_the_exporters_main_on_the_processs_own_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [str(build.ENTRY), "--version"])  # what the frozen executable's process has
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(build.ENTRY), run_name="__main__")
    assert exited.value.code == 0
    assert f"version {__version__} " in capsys.readouterr().err  # on stderr, as kingpin prints it


def test_the_build_refuses_to_run_off_windows(tmp_path: Path) -> None:
    if sys.platform == "win32" and sys.version_info[:2] == build.PYTHON:
        pytest.skip("this is the platform the build runs on")
    with pytest.raises(SystemExit, match=r"runs on Windows with CPython 3\.12"):
        build.build(tmp_path)


# --------------------------------------------------------------------------------------------------------------
# The smoke test


def _smoke(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WINDOWS / "smoke_test.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_smoke_test_passes_on_the_exporter() -> None:
    result = _smoke("--expect-version", __version__, "--", sys.executable, "-m", "nvidia_gpu_exporter")
    assert result.returncode == 0, result.stderr
    assert re.search(r"console run: process \d+ on 127\.0\.0\.1:\d+ served nvidia_smi_ metrics", result.stdout)


@pytest.mark.parametrize(
    ("script", "failure"),
    [
        pytest.param(
            "print('nvidia_gpu_exporter, version 9.9.90 (branch: b)')\n",
            "--version does not say version 9.9.9",
            id="another-version",
        ),
        pytest.param(
            "import sys\nif '--version' in sys.argv: print('x, version 9.9.9 (branch: b)')\nelse: sys.exit(3)\n",
            "the exporter exited 3",
            id="exits-instead-of-listening",
        ),
        pytest.param(
            "import sys\nif '--version' in sys.argv: print('x, version 9.9.9 (branch: b)')\n"
            "else: print('msg=\"Listening on\" address=127.0.0.1:9 tls=False', flush=True); sys.exit(0)\n",
            "the exporter exited 0",
            id="names-a-port-it-does-not-hold",
        ),
    ],
)
def test_the_smoke_test_fails_on_an_exporter_that_is_not_right(script: str, failure: str, tmp_path: Path) -> None:
    (tmp_path / "fake.py").write_text(script, encoding="utf-8")
    result = _smoke("--expect-version", "9.9.9", "--", sys.executable, str(tmp_path / "fake.py"))
    assert result.returncode == 1
    assert failure in result.stderr


def test_the_service_check_says_it_needs_windows() -> None:
    with pytest.raises(smoke.SmokeError, match="--service needs Windows"):
        smoke.check_service(["nvidia_gpu_exporter.exe"], platform="linux")


@pytest.mark.parametrize(
    ("netstat", "pids"),
    [
        pytest.param(
            "  TCP    127.0.0.1:9835    0.0.0.0:0    LISTENING    4242\n"
            "  TCP    127.0.0.1:98350   0.0.0.0:0    LISTENING    7\n"
            "  TCP    127.0.0.1:50000   127.0.0.1:9835  ESTABLISHED  8\n",
            {4242},
            id="the-listener-only",
        ),
        pytest.param("  TCP    0.0.0.0:9835    0.0.0.0:0    LISTENING    5\n", set(), id="another-address"),
    ],
)
def test_the_listener_is_read_from_netstat(netstat: str, pids: set[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smoke, "run", lambda command, check=True: subprocess.CompletedProcess(command, 0, netstat, ""))
    assert smoke.listening_pids(9835) == pids


@pytest.mark.parametrize(
    ("output", "state"),
    [
        pytest.param(
            "SERVICE_NAME: nvidia_gpu_exporter\n        STATE              : 4  RUNNING\n"
            "        PID                : 4242\n",
            ("RUNNING", 4242),
            id="running",
        ),
        pytest.param(
            "        STATE              : 1  STOPPED\n        PID                : 0\n", ("STOPPED", 0), id="stopped"
        ),
    ],
)
def test_the_service_state_is_read_from_sc_queryex(
    output: str, state: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(smoke, "run", lambda command, check=True: subprocess.CompletedProcess(command, 0, output, ""))
    assert smoke.service_state("nvidia_gpu_exporter") == state


def test_a_missing_service_reads_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = subprocess.CompletedProcess(["sc.exe"], smoke.ERROR_SERVICE_DOES_NOT_EXIST, "FAILED 1060", "")
    monkeypatch.setattr(smoke, "run", lambda command, check=True: missing)
    assert smoke.service_state("nvidia_gpu_exporter") is None


class FakeScm:
    """``sc.exe``, ``netstat`` and the executable's ``install``/``uninstall``, as the smoke test calls them."""

    def __init__(self, exe: str, *, listener: int = 4242) -> None:
        self.exe = exe
        self.listener = listener
        self.calls: list[str] = []
        self.installed = False
        self.state, self.pid, self.port = "STOPPED", 0, 0

    def run(self, command: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        verb = command[1] if command[0] in {self.exe, "sc.exe"} else command[0]
        self.calls.append(verb)
        out, code = "", 0
        if verb == "install":
            self.installed = True
            self.port = int(command[-1].rsplit(":", 1)[1])
        elif verb == "uninstall":
            self.installed = False
        elif verb == "qc":
            out = f"        BINARY_PATH_NAME   : {self.exe} --collect.backend=demo\n"
        elif verb == "start":
            self.state, self.pid = "RUNNING", 4242
        elif verb == "stop":
            self.state, self.pid = "STOPPED", 0
        elif verb == "queryex" and not self.installed:
            out, code = "[SC] EnumQueryServicesStatus:OpenService FAILED 1060", smoke.ERROR_SERVICE_DOES_NOT_EXIST
        elif verb == "queryex":
            out = f"        STATE              : 4  {self.state}\n        PID                : {self.pid}\n"
        elif verb == "netstat":
            out = f"  TCP    127.0.0.1:{self.port}    0.0.0.0:0    LISTENING    {self.listener}\n"
        return subprocess.CompletedProcess(command, code, out, "")


def _fake_service(monkeypatch: pytest.MonkeyPatch, scm: FakeScm) -> None:
    monkeypatch.setattr(smoke, "run", scm.run)
    monkeypatch.setattr(smoke, "scrape", lambda port: 'nvidia_smi_gpu_info{uuid="GPU-1"} 1\n')
    monkeypatch.setattr(smoke, "POLL_SECONDS", 0.0)


def test_the_service_check_installs_runs_scrapes_its_own_process_stops_and_uninstalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scm = FakeScm(r"D:\a\_temp\unpacked\nvidia_gpu_exporter.exe")
    _fake_service(monkeypatch, scm)
    smoke.check_service([scm.exe], platform="win32")
    expected = ["queryex", "install", "qc", "start", "queryex", "netstat", "stop", "queryex", "uninstall", "queryex"]
    assert scm.calls == expected
    assert not scm.installed


def test_the_service_check_fails_when_another_process_holds_the_port_and_still_uninstalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scm = FakeScm(r"D:\a\_temp\unpacked\nvidia_gpu_exporter.exe", listener=999)
    _fake_service(monkeypatch, scm)
    with pytest.raises(smoke.SmokeError, match=r"held by process\(es\) \[999\], not the service \(process 4242\)"):
        smoke.check_service([scm.exe], platform="win32")
    assert scm.calls[-1] == "uninstall"
    assert not scm.installed


def test_the_service_check_refuses_a_service_it_did_not_install(monkeypatch: pytest.MonkeyPatch) -> None:
    scm = FakeScm("nvidia_gpu_exporter.exe")
    scm.installed = True  # someone else's
    _fake_service(monkeypatch, scm)
    with pytest.raises(smoke.SmokeError, match="exists before the test"):
        smoke.check_service([scm.exe], platform="win32")
    assert scm.calls == ["queryex"]  # nothing installed, nothing removed
