"""The README opens with the two commands that work on a fresh machine, and CI runs the test one verbatim."""

from __future__ import annotations

import re

from harness import REPO


def _code_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)]


def test_readme_opens_with_install_run_and_test_commands() -> None:
    blocks = _code_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    install_and_run, run_tests = blocks[0], blocks[1]
    assert "pip install ." in install_and_run
    assert "nvidia_gpu_exporter --collect.backend=demo" in install_and_run
    assert "python -m pytest" in run_tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    run_tests = _code_blocks((REPO / "README.md").read_text(encoding="utf-8"))[1]
    assert run_tests in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
