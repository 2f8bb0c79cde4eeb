"""The README opens with the commands that work on a fresh machine (tests/readmedoc.py reads them), CI runs the
test one verbatim, and .ci/steps/35-fresh-debian.sh runs all three, read from the README, in a fresh Debian image."""

from __future__ import annotations

from pathlib import Path

import pytest

import readmedoc
from harness import REPO


def test_readme_opens_with_install_run_and_test_commands() -> None:
    commands = readmedoc.opening()
    assert "pip install ." in commands["install-and-run"]
    assert "nvidia_gpu_exporter --collect.backend=demo" in commands["install-and-run"]
    assert "python -m pytest" in commands["run-tests"]


def test_the_apt_line_first_fills_the_package_lists() -> None:
    """A fresh image has empty package lists: `apt-get install` alone finds nothing there (issue 33)."""
    assert readmedoc.opening()["apt"].startswith("apt-get update && apt-get install -y ")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    run_tests = readmedoc.opening()["run-tests"]
    assert run_tests in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_fresh_image_step_reads_every_command_from_the_readme() -> None:
    step = (REPO / ".ci" / "steps" / "35-fresh-debian.sh").read_text(encoding="utf-8")
    assert 'readme() { python3 "$image$clone/tests/readmedoc.py" "$1"; }' in step  # the clone's own README
    for name in readmedoc.NAMES:
        assert f"=$(readme {name})\n" in step, name


def test_an_opening_without_the_apt_line_is_refused_naming_the_file(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n```sh\nrun\n```\n\n```sh\ntest\n```\n\n---\n\n`apt-get update && x`\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{readme}: .* found 2 blocks and 0 apt lines"):
        readmedoc.opening(readme)
