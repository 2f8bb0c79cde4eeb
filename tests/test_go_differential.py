"""A short differential fuzz against the real Go exporter (benchmarks/diff_go.py runs the wide one).

Needs the Go binary: set GO_EXPORTER_BIN to it (benchmarks/go-exporter/README.md says how to build one).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from conftest import conformance_dir_or_skip
from exposition_reader import comparable
from go_differential import capture_text, make_round, make_setup, run
from go_differential_cli import run_cli
from harness import CONFORMANCE, fake_smi_command, start_listening


def go_binary_or_skip() -> str:
    binary = os.environ.get("GO_EXPORTER_BIN", "")
    if not binary:
        pytest.skip("GO_EXPORTER_BIN is unset: no Go nvidia_gpu_exporter to compare with")
    if not os.access(binary, os.X_OK):
        pytest.skip(f"GO_EXPORTER_BIN={binary} is not an executable file")
    return binary


def test_a_seed_draws_the_same_cases() -> None:
    first, second = random.Random(5), random.Random(5)
    setups = make_setup(first), make_setup(second)
    assert setups[0] == setups[1]
    assert capture_text(setups[0], make_round(first, setups[0])) == capture_text(
        setups[1], make_round(second, setups[1])
    )


def _conformance_cases() -> list[str]:
    return sorted(path.stem for path in (CONFORMANCE / "expected").glob("*.metrics")) or ["absent"]


@pytest.mark.slow
@pytest.mark.parametrize("case", _conformance_cases())
def test_the_go_binary_is_the_one_the_conformance_files_came_from(case: str) -> None:
    """The comparison is only worth something if the Go binary itself reproduces the recorded outputs."""
    binary = go_binary_or_skip()
    root = conformance_dir_or_skip()
    capture, _, state = case.rpartition("__")
    command = fake_smi_command(root / "captures" / f"{capture}.txt", "--state", state)
    exporter = start_listening(
        [binary, "--web.listen-address=127.0.0.1:0", "--nvidia-smi-command", command, "--collect.compute-apps"]
    )
    try:
        scraped = comparable(exporter.scrape())
    finally:
        exporter.stop()
    assert scraped == (root / "expected" / f"{case}.metrics").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_random_outputs_scrape_the_same_as_the_go_exporter(seed: int, tmp_path: Path) -> None:
    tally = run(go_binary_or_skip(), seed, setups=2, rounds=4, workdir=tmp_path)
    assert tally.setups == 2  # a setup both refuse to start (a flag exec refuses) is one round, not four
    assert [difference.report() for difference in tally.differences] == []
    assert [difference.report() for difference in tally.http_differences] == []


@pytest.mark.slow
def test_random_command_lines_end_as_with_the_go_exporter() -> None:
    tally = run_cli(go_binary_or_skip(), 11, cases=6)
    assert tally.cases == 6
    assert [difference.report() for difference in tally.differences] == []
