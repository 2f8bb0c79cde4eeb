"""A machine with only what the README installs (issue 33): the tests that run git skip there, saying so, and the
end of a run counts the skips by reason (tests/conftest.py) instead of listing each, which `pytest -ra` still does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import skip_group
from harness import REPO

GIT_TESTS = ("tests/test_buildinfo.py", "tests/test_release_reproducibility.py", "tests/test_packaging_identity.py")
GIT_SKIPS = 14


def _path_without(tool: str, into: Path) -> str:
    """A PATH of one directory that holds every command of this PATH but ``tool`` (as links)."""
    into.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in sorted(Path(directory).iterdir()):
            link = into / entry.name
            if entry.name != tool and not link.exists() and entry.is_file() and os.access(entry, os.X_OK):
                link.symlink_to(entry)
    return str(into)


def _run_without_git(tmp_path: Path, *options: str) -> str:
    """The git tests' output, run by two xdist workers (as the default run is) where git is not on PATH."""
    command = [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", *options, *GIT_TESTS]
    environ = {**os.environ, "PATH": _path_without("git", tmp_path / "bin")}
    result = subprocess.run(command, cwd=REPO, env=environ, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    return result.stdout


def test_the_git_tests_skip_without_git_and_the_end_counts_the_skips_by_reason(tmp_path: Path) -> None:
    output = _run_without_git(tmp_path)
    assert "skipped, by reason (pytest -ra lists each)" in output
    assert f"{GIT_SKIPS:6d}  git is not installed\n" in output
    assert "SKIPPED [" not in output


def test_dash_ra_lists_every_skip_instead(tmp_path: Path) -> None:
    output = _run_without_git(tmp_path, "-ra")
    assert "skipped, by reason" not in output
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED [") and "git is not installed" in line]
    assert sum(int(line.split("[", 1)[1].split("]", 1)[0]) for line in skipped) == GIT_SKIPS


@pytest.mark.parametrize(
    ("reason", "group"),
    [
        ("git is not installed: these tests stamp a build", ("git is not installed", "")),
        ("git is not installed", ("git is not installed", "")),
        (
            "no C compiler (cc/gcc, or $CC) on this machine: the fake libnvidia-ml cannot be built",
            ("no C compiler on this machine", ""),
        ),
        (
            "/root/shared/conformance is absent: the shared conformance captures are not beside this checkout",
            ("../shared is absent", ""),
        ),
        ("../shared/conformance is absent (/root/shared/conformance)", ("../shared is absent", "")),
        (
            "promtool (set $PROMETHEUS_BIN_DIR) is not installed: run .ci/steps/40-kubernetes.sh (it installs ...)",
            ("not installed, .ci/steps/40-kubernetes.sh installs them", "promtool"),
        ),
        (
            "Playwright is not installed (.ci/steps/80-browser.sh installs it)",
            ("not installed, .ci/steps/80-browser.sh installs them", "Playwright"),
        ),
        (
            "grpcio/protobuf are not installed: pip install -e '.[kubernetes]'",
            ("grpcio/protobuf are not installed", ""),
        ),
    ],
)
def test_a_skip_reason_counts_under_its_missing_tool(reason: str, group: tuple[str, str]) -> None:
    assert skip_group(reason) == group
