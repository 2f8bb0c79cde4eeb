"""``--version``'s branch, revision and build date: recorded at build time (support/buildinfo.py, written by the
hatchling hook hatch_build.py), read back by the version block, ``unknown`` where nothing was recorded."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import StartExporter
from harness import FIXTURE_CAPTURES, fake_smi_command
from nvidia_gpu_exporter import __version__, cli
from nvidia_gpu_exporter.exposition.families import BUILD_INFO
from nvidia_gpu_exporter.exposition.selfmetrics import build_info_values
from nvidia_gpu_exporter.support import buildinfo
from nvidia_gpu_exporter.support.buildinfo import UNKNOWN, BuildInfo
from optional_tools import needs_tool

SHA = "0123456789abcdef0123456789abcdef01234567"
RECORDED = BuildInfo(branch="main", revision=SHA, date="2026-01-02T03:04:05Z")

# (the file's text, what it reads as, rule)
FILES: list[tuple[str | None, BuildInfo, str]] = [
    (RECORDED.to_json(), RECORDED, "a build's file reads back as written"),
    (None, BuildInfo(), "no file (an editable install): every field unknown"),
    ("{not json", BuildInfo(), "a damaged file: unknown, never an exception"),
    ("[1, 2]", BuildInfo(), "not an object: unknown"),
    (json.dumps({"branch": 7, "revision": SHA}), BuildInfo(revision=SHA), "a field of the wrong type is unknown"),
    (json.dumps({"revision": "x" * 201}), BuildInfo(), "an overlong field is unknown"),
    (json.dumps({"revision": "a\nb"}), BuildInfo(), "a field with a control character is unknown"),
    (json.dumps({"revision": "  "}), BuildInfo(), "a blank field is unknown"),
]


@pytest.mark.parametrize(("text", "expected", "rule"), FILES, ids=[row[2] for row in FILES])
def test_parse(text: str | None, expected: BuildInfo, rule: str) -> None:
    assert buildinfo.parse(text) == expected, rule


def test_version_block_names_the_recorded_branch_and_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildinfo, "installed", lambda: RECORDED)
    lines = cli.version_text().splitlines()
    assert lines[0] == f"nvidia_gpu_exporter, version {__version__} (branch: main, revision: {SHA})"
    assert lines[2] == "  build date:       2026-01-02T03:04:05Z"


def test_version_block_says_unknown_without_build_metadata() -> None:
    text = cli.version_text(BuildInfo())
    assert "(branch: unknown, revision: unknown)" in text
    assert "  build date:       unknown\n" in text


def _git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


needs_git = needs_tool("git", "these tests read the build info from a throwaway git checkout")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q", "-b", "release-1")
    (tmp_path / "f").write_text("x\n")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-q", "-m", "one", "--date=@1700000000")
    return tmp_path


@needs_git
def test_from_a_git_checkout(checkout: Path) -> None:
    info = buildinfo.from_source(checkout, {"SOURCE_DATE_EPOCH": "1767225600"})
    assert info == BuildInfo(
        branch="release-1", revision=_git(checkout, "rev-parse", "HEAD"), date="2026-01-01T00:00:00Z"
    )


@needs_git
def test_the_environment_wins_over_git(checkout: Path) -> None:
    environ = {buildinfo.ENV_BRANCH: "HEAD", buildinfo.ENV_REVISION: SHA, "SOURCE_DATE_EPOCH": "0"}
    assert buildinfo.from_source(checkout, environ) == BuildInfo("HEAD", SHA, "1970-01-01T00:00:00Z")


def test_without_git_or_environment_nothing_is_recorded(tmp_path: Path) -> None:
    info = buildinfo.from_source(tmp_path, {"SOURCE_DATE_EPOCH": "1767225600"})
    assert info == BuildInfo()
    assert not info.known


def test_a_bad_source_date_epoch_leaves_the_date_unknown() -> None:
    environ = {buildinfo.ENV_REVISION: SHA, buildinfo.ENV_BRANCH: "main", "SOURCE_DATE_EPOCH": "yesterday"}
    assert buildinfo.from_source(Path("/nonexistent"), environ).date == UNKNOWN


# --------------------------------------------------------------------------------------------------------------
# nvidia_gpu_exporter_build_info: the Go exporter's carries the branch and revision; so does ours, the same values
# as --version (outside the byte-compared nvidia_smi_* families, so no golden pins them).


@pytest.mark.parametrize(
    ("build", "branch", "revision"),
    [(RECORDED, "main", SHA), (BuildInfo(), UNKNOWN, UNKNOWN)],
    ids=["a-build-record-gives-its-branch-and-revision", "no-record-says-unknown-as-version-does"],
)
def test_build_info_labels_carry_the_recorded_branch_and_revision(build: BuildInfo, branch: str, revision: str) -> None:
    labels = dict(zip(BUILD_INFO.labels, build_info_values(build), strict=True))
    assert (labels["branch"], labels["revision"], labels["version"]) == (branch, revision, __version__)


SITECUSTOMIZE = f"""
from nvidia_gpu_exporter.support import buildinfo
buildinfo.installed = lambda: buildinfo.BuildInfo(branch="main", revision="{SHA}", date="2026-01-02T03:04:05Z")
"""


def test_the_served_build_info_names_the_installed_build(exporter: StartExporter, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")  # as if a wheel recorded it
    capture = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
    running = exporter("--nvidia-smi-command", fake_smi_command(capture), env={"PYTHONPATH": str(tmp_path)})
    line = next(line for line in running.scrape().splitlines() if line.startswith("nvidia_gpu_exporter_build_info{"))
    assert 'branch="main"' in line
    assert f'revision="{SHA}"' in line


def _package(root: Path, name: str, record: bytes | None) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    if record is not None:
        (root / name / buildinfo.FILE_NAME).write_bytes(record)


@pytest.mark.parametrize("zipped", [pytest.param(False, id="directory"), pytest.param(True, id="zipapp-archive")])
@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(RECORDED.to_json().encode(), RECORDED, id="reads-the-build-record-beside-the-package"),
        pytest.param(None, BuildInfo(), id="no-record-reads-unknown"),
        pytest.param(b"\xff\xfe{", BuildInfo(), id="undecodable-record-reads-unknown"),
    ],
)
def test_installed_reads_the_record_through_the_package_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zipped: bool, record: bytes | None, expected: BuildInfo
) -> None:
    name = f"buildinfo_probe_{tmp_path.name}"  # a fresh package per case: imported packages stay imported
    tree = tmp_path / "tree"
    _package(tree, name, record)
    entry = tree
    if zipped:
        entry = tmp_path / "app.pyz"
        with zipfile.ZipFile(entry, "w") as archive:
            for path in sorted(tree.rglob("*")):
                archive.write(path, path.relative_to(tree).as_posix())
    monkeypatch.syspath_prepend(str(entry))
    assert buildinfo.installed(name) == expected


def test_machine_names_the_architecture_as_platform_would_in_gos_spelling() -> None:
    raw = platform.machine().lower()
    assert buildinfo.machine() == {"x86_64": "amd64", "aarch64": "arm64"}.get(raw, raw)


def test_python_version_is_platforms_without_loading_it() -> None:
    assert buildinfo.python_version() == platform.python_version()


def test_operating_system_is_gos_name_for_it() -> None:
    assert buildinfo.operating_system() == ("windows" if sys.platform == "win32" else sys.platform)
