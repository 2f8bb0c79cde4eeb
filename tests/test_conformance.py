"""Byte parity with the Go exporter: every shared capture x state, scraped over HTTP as a user would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StartExporter, conformance_dir_or_skip
from exposition_reader import comparable
from harness import CONFORMANCE, fake_smi_command


def _cases() -> list[tuple[str, str]]:
    expected = CONFORMANCE / "expected"
    if not expected.is_dir():
        return [("absent", "absent")]
    cases = []
    for path in sorted(expected.glob("*.metrics")):
        capture, _, state = path.stem.rpartition("__")
        cases.append((capture, state))
    return cases


@pytest.mark.parametrize(("capture", "state"), _cases(), ids=[f"{c}__{s}" for c, s in _cases()])
def test_scrape_matches_go_exporter_byte_for_byte(exporter: StartExporter, capture: str, state: str) -> None:
    root = conformance_dir_or_skip()
    capture_file = root / "captures" / f"{capture}.txt"
    expected = (root / "expected" / f"{capture}__{state}.metrics").read_text(encoding="utf-8")
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture_file, "--state", state),
        "--collect.compute-apps",
    )
    assert comparable(handle.scrape()) == expected


def test_every_capture_state_has_an_expected_file() -> None:
    root = conformance_dir_or_skip()
    from nvidia_gpu_exporter.capture.format import load_capture

    missing = []
    for capture_path in sorted((root / "captures").glob("*.txt")):
        for state in load_capture(capture_path).states():
            if not (root / "expected" / f"{capture_path.stem}__{state}.metrics").is_file():
                missing.append(f"{capture_path.stem}__{state}")
    assert missing == []
    assert len(list(Path(root / "expected").glob("*.metrics"))) >= 14
