"""Release builds whose bytes do not depend on the builder's umask or on where the source came from:
packaging/normalize_wheel.py (the rebuilt PyYAML wheel's modes) and packaging/source_date_epoch.py (the
timestamp a build from a git checkout and one from its sdist share). .ci/steps/30-packaging.sh checks the whole
release end to end: two builds, umask 0022 and 0002, checkout and sdist, different paths."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import REPO, load_script
from optional_tools import needs_tool

EPOCH = 1_700_000_000  # 2023-11-14T22:13:20Z


normalize_wheel = load_script(REPO / "packaging" / "normalize_wheel.py")
source_date_epoch = load_script(REPO / "packaging" / "source_date_epoch.py")


def _wheel(path: Path, modes: dict[str, int]) -> Path:
    """A zip as `pip wheel` writes one: each entry's Unix mode in external_attr, fixed timestamps."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, mode in modes.items():
            info = zipfile.ZipInfo(name, date_time=(2023, 11, 14, 22, 13, 20))
            info.compress_type = zipfile.ZIP_STORED if name.endswith("/") else zipfile.ZIP_DEFLATED
            info.external_attr = mode << 16
            archive.writestr(info, b"" if name.endswith("/") else f"content of {name}\n".encode())
    return path


UMASK_0022 = {"yaml/": 0o40755, "yaml/__init__.py": 0o100644, "bin/tool": 0o100755, "x.dist-info/RECORD": 0o100644}
UMASK_0002 = {"yaml/": 0o40775, "yaml/__init__.py": 0o100664, "bin/tool": 0o100775, "x.dist-info/RECORD": 0o100664}


@pytest.mark.parametrize(
    ("mode", "directory", "expected"),
    [
        pytest.param(0o100664, False, 0o100644, id="group-writable-file-becomes-0644"),
        pytest.param(0o100600, False, 0o100644, id="private-file-becomes-0644"),
        pytest.param(0o100775, False, 0o100755, id="group-writable-executable-becomes-0755"),
        pytest.param(0o100744, False, 0o100755, id="any-execute-bit-makes-0755"),
        pytest.param(0o40775, True, 0o40755, id="directory-becomes-0755"),
        pytest.param(0, False, 0o100644, id="no-mode-recorded-becomes-0644"),
    ],
)
def test_normalized_mode(mode: int, directory: bool, expected: int) -> None:
    assert normalize_wheel.normalized_mode(mode, directory=directory) == expected


def test_wheels_built_under_umask_0002_and_0022_become_byte_identical(tmp_path: Path) -> None:
    strict = _wheel(tmp_path / "a.whl", UMASK_0022)
    loose = _wheel(tmp_path / "b.whl", UMASK_0002)
    assert strict.read_bytes() != loose.read_bytes()
    normalize_wheel.normalize(strict)
    normalize_wheel.normalize(loose)
    assert strict.read_bytes() == loose.read_bytes()


def test_normalizing_keeps_names_order_contents_and_timestamps(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "b.whl", UMASK_0002)
    before = [(i.filename, i.date_time, i.compress_type, i.CRC) for i in zipfile.ZipFile(wheel).infolist()]
    assert normalize_wheel.normalize(wheel) is True
    with zipfile.ZipFile(wheel) as archive:
        after = [(i.filename, i.date_time, i.compress_type, i.CRC) for i in archive.infolist()]
        assert archive.testzip() is None
        assert {i.filename: i.external_attr >> 16 for i in archive.infolist()} == UMASK_0022
    assert after == before


def test_an_already_normalized_wheel_is_left_untouched(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "a.whl", UMASK_0022)
    normalize_wheel.normalize(wheel)  # the Unix "made by" system, as written by this script
    data = wheel.read_bytes()
    assert normalize_wheel.normalize(wheel) is False
    assert wheel.read_bytes() == data


def test_a_file_that_is_not_a_zip_is_refused_with_its_name(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.whl"
    bogus.write_bytes(b"not a zip")
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "normalize_wheel.py"), str(bogus)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"{bogus}: File is not a zip file" in result.stderr
    assert bogus.read_bytes() == b"not a zip"


needs_git = needs_tool("git", "these tests stamp a build from a throwaway git checkout")


def _git(root: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": f"@{EPOCH - 86_400} +0000",  # the author date is not what a build stamps
        "GIT_COMMITTER_DATE": f"@{EPOCH} +0000",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env, timeout=60)


def _checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "pyproject.toml").write_text("[project]\n", encoding="utf-8")
    _git(root, "add", "pyproject.toml")
    _git(root, "commit", "-q", "-m", "release")
    return root


def _sdist(root: Path, mtime: int) -> Path:
    root.mkdir(parents=True)
    pkg_info = root / "PKG-INFO"
    pkg_info.write_text("Metadata-Version: 2.4\n", encoding="utf-8")
    os.utime(pkg_info, (mtime, mtime))
    return root


@needs_git
def test_a_git_checkout_stamps_the_commit_time(tmp_path: Path) -> None:
    assert source_date_epoch.source_date_epoch(_checkout(tmp_path / "repo")) == EPOCH


def test_an_unpacked_sdist_stamps_the_mtime_of_pkg_info(tmp_path: Path) -> None:
    assert source_date_epoch.source_date_epoch(_sdist(tmp_path / "sdist", EPOCH)) == EPOCH


@needs_git
def test_an_sdist_unpacked_inside_another_git_checkout_still_stamps_pkg_info(tmp_path: Path) -> None:
    outer = _checkout(tmp_path / "repo")
    assert source_date_epoch.source_date_epoch(_sdist(outer / "unpacked", EPOCH - 5)) == EPOCH - 5


NOT_A_SOURCE = "neither an unpacked sdist (no PKG-INFO) nor the top of a git work tree"


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        pytest.param("plain", NOT_A_SOURCE, id="plain-dir"),
        pytest.param("subdir", NOT_A_SOURCE, id="git-subdir", marks=needs_git),
        pytest.param("empty-repo", "is a git work tree without a commit", id="repo-without-commit", marks=needs_git),
    ],
)
def test_a_tree_without_a_timestamp_is_refused(tmp_path: Path, layout: str, reason: str) -> None:
    if layout == "plain":
        root = tmp_path / "export"
        root.mkdir()
    elif layout == "subdir":
        root = _checkout(tmp_path / "repo") / "packaging"
        root.mkdir()
    else:
        root = tmp_path / "empty"
        root.mkdir()
        _git(root, "init", "-q")
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "source_date_epoch.py"), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert reason in result.stderr
    assert "set SOURCE_DATE_EPOCH" in result.stderr
