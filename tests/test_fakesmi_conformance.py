"""The fake against every real capture in ``../shared/conformance`` (skipped when that folder is absent):
projecting the full recorded field list gives back the recorded CSV, other recorded commands replay
verbatim, and replication and fluctuation keep every cell parseable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvidia_gpu_exporter.capture.engine import FLUCTUATE_FIELDS, Scenario, answer, generated_uuid
from nvidia_gpu_exporter.capture.format import (
    COMPUTE_APPS_LABEL_PREFIX,
    GPU_CSV_LABEL_PREFIX,
    Capture,
    Section,
    load_capture,
)

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance"
CAPTURE_DIR = CONFORMANCE / "captures"
CAPTURE_NAMES = sorted(path.name for path in CAPTURE_DIR.glob("*.txt")) if CAPTURE_DIR.is_dir() else []
NUMERIC = re.compile(r"[+-]?[0-9]+(?:\.([0-9]+))?([^0-9]*)")


def shared_capture(name: str) -> Capture:
    if not CAPTURE_DIR.is_dir():
        pytest.skip(f"../shared/conformance is absent: no real captures beside this checkout ({CONFORMANCE})")
    return load_capture(CAPTURE_DIR / name)


def capture_params() -> list[str]:
    return CAPTURE_NAMES or ["absent"]


def recorded_fields(section: Section) -> list[str]:
    (token,) = [word for word in section.command.split() if word.startswith("--query-")]
    return token.partition("=")[2].split(",")


def recorded_lines(section: Section) -> list[str]:
    return [", ".join(cell.strip() for cell in line.split(",")) for line in section.body.split("\n")]


def test_every_shared_capture_offers_the_states_the_go_exporter_was_recorded_in() -> None:
    """The parametrized tests below cover what the Go exporter's outputs cover: no capture and no state missed."""
    expected_dir = CONFORMANCE / "expected"
    if not expected_dir.is_dir():
        pytest.skip(f"../shared/conformance is absent ({CONFORMANCE})")
    recorded: dict[str, set[str]] = {}
    for path in expected_dir.glob("*.metrics"):
        capture, _, state = path.stem.rpartition("__")
        recorded.setdefault(f"{capture}.txt", set()).add(state)
    offered = {name: set(shared_capture(name).states()) for name in CAPTURE_NAMES}
    assert offered == recorded


@pytest.mark.parametrize("name", capture_params())
@pytest.mark.parametrize("label", [GPU_CSV_LABEL_PREFIX, COMPUTE_APPS_LABEL_PREFIX], ids=["query-gpu", "compute-apps"])
def test_full_projection_reproduces_the_recorded_csv(name: str, label: str) -> None:
    capture = shared_capture(name)
    assert capture.states(), name
    for state in capture.states():
        section = capture.find(state, label)
        assert section is not None, (name, state, label)
        flag = section.command.split()[1].partition("=")[0]
        result = answer(
            Scenario(capture, state=state), [f"{flag}={','.join(recorded_fields(section))}", "--format=csv"]
        )
        assert (result.exit_code, result.stderr) == (0, ""), (name, state, result)
        assert result.stdout.split("\n")[:-1] == recorded_lines(section), (name, state)


@pytest.mark.parametrize("name", capture_params())
def test_recorded_commands_replay_verbatim(name: str) -> None:
    capture = shared_capture(name)
    checked = 0
    for state in capture.states():
        for section in capture.sections:
            if section.state not in (state, "capabilities") or not section.command.startswith("nvidia-smi"):
                continue
            args = section.command.split()[1:]
            if (
                len(args) == 2
                and args[1] == "--format=csv"
                and args[0].startswith(("--query-gpu=", "--query-compute-apps="))
            ):
                continue
            first = next(
                s
                for s in capture.sections
                if s.state in (state, "capabilities") and s.command and s.command.split()[1:] == args
            )
            assert answer(Scenario(capture, state=state), args).stdout == first.body + "\n", (name, section.label)
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", capture_params())
def test_replication_and_fluctuation_keep_every_cell_in_shape(name: str) -> None:
    capture = shared_capture(name)
    for state in capture.states():
        section = capture.find(state, GPU_CSV_LABEL_PREFIX)
        assert section is not None
        fields = recorded_fields(section)
        recorded = [cell.strip() for cell in section.body.split("\n")[1].split(",")]
        result = answer(
            Scenario(capture, state=state, gpus=2, seed=1, fluctuate=True),
            [f"--query-gpu={','.join(fields)}", "--format=csv"],
        )
        assert result.exit_code == 0, (name, state, result)
        lines = result.stdout.split("\n")[1:-1]
        assert len(lines) == 2
        for index, line in enumerate(lines):
            cells = line.split(", ")
            assert len(cells) == len(fields)
            assert cells[fields.index("uuid")] == generated_uuid(index)
            for field, before, after in zip(fields, recorded, cells, strict=True):
                if field in ("uuid", "index", "count", "pci.bus", "pci.bus_id", "memory.free"):
                    continue
                if field not in FLUCTUATE_FIELDS:
                    assert after == before, (name, state, field)
                    continue
                shape_before = NUMERIC.fullmatch(before)
                if shape_before is None or re.search(r"[0-9]|^[xX]", shape_before.group(2)):
                    assert after == before, (name, state, field)
                    continue
                shape_after = NUMERIC.fullmatch(after)
                assert shape_after is not None, (name, state, field, after)
                assert (len(shape_after.group(1) or ""), shape_after.group(2)) == (
                    len(shape_before.group(1) or ""),
                    shape_before.group(2),
                ), (name, state, field, before, after)
