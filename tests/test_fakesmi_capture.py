"""Capture file parsing (docs/fake-nvidia-smi.md, "Capture file format"): fences, headings, bodies, CRLF,
lookup and the errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvidia_gpu_exporter.capture.format import (
    FENCE,
    Capture,
    CaptureError,
    Section,
    load_capture,
    parse_capture,
    render_capture,
)
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"

TWO_SPACES = "  "
SAMPLE = f"""\
{FENCE}
# nvidia_gpu_exporter GPU capture
# free-form header
{FENCE}
collected_at:   2026-01-01T00:00:00Z


{FENCE}
# capabilities :: version
# $ nvidia-smi --version
{FENCE}

NVIDIA-SMI version  : 1.0
  indented line keeps its spaces{TWO_SPACES}


{FENCE}
#  idle  ::  query-gpu (csv, what the exporter parses)
# a comment line before the command
# $   nvidia-smi --query-gpu=uuid --format=csv{TWO_SPACES}
# $ nvidia-smi --ignored
{FENCE}
uuid
GPU-1
{FENCE}
# load :: pmon (per-process monitor)
{FENCE}
# gpu   pid
    0     -
"""


def test_sections_are_parsed_in_file_order() -> None:
    capture = parse_capture(SAMPLE, name="sample.txt")
    assert capture.name == "sample.txt"
    assert capture.sections == (
        Section(
            "capabilities",
            "version",
            "nvidia-smi --version",
            "NVIDIA-SMI version  : 1.0\n  indented line keeps its spaces  ",
        ),
        Section(
            "idle",
            "query-gpu (csv, what the exporter parses)",
            "nvidia-smi --query-gpu=uuid --format=csv",
            "uuid\nGPU-1",
        ),
        Section("load", "pmon (per-process monitor)", "", "# gpu   pid\n    0     -"),
    )


def test_blocks_without_separator_form_the_metadata() -> None:
    assert parse_capture(SAMPLE).metadata == "collected_at:   2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("state", "prefix", "expected_label"),
    [
        ("idle", "query-gpu (csv", "query-gpu (csv, what the exporter parses)"),
        ("capabilities", "vers", "version"),
        ("load", "", "pmon (per-process monitor)"),
    ],
    ids=["label-prefix", "short-prefix", "empty-prefix-first-of-state"],
)
def test_find_matches_state_and_label_prefix(state: str, prefix: str, expected_label: str) -> None:
    section = parse_capture(SAMPLE).find(state, prefix)
    assert section is not None
    assert section.label == expected_label


@pytest.mark.parametrize(
    ("state", "prefix"),
    [("idle", "version"), ("IDLE", "query-gpu"), ("load", "pmon (per-process monitor) x")],
    ids=["wrong-state", "state-is-case-sensitive", "longer-than-label"],
)
def test_find_returns_none_without_a_match(state: str, prefix: str) -> None:
    assert parse_capture(SAMPLE).find(state, prefix) is None


def test_find_returns_the_first_match() -> None:
    text = f"{FENCE}\n# idle :: a one\n{FENCE}\nfirst\n{FENCE}\n# idle :: a two\n{FENCE}\nsecond\n"
    section = parse_capture(text).find("idle", "a")
    assert section is not None
    assert section.body == "first"


def test_states_lists_states_with_a_gpu_csv_section() -> None:
    assert parse_capture(SAMPLE).states() == ("idle",)


def test_crlf_parses_like_lf() -> None:
    assert parse_capture(SAMPLE.replace("\n", "\r\n")) == parse_capture(SAMPLE)


def test_windows_fixture_is_crlf_and_parses_without_carriage_returns() -> None:
    raw = (FIXTURES / "fixture-windows-1gpu.txt").read_bytes()
    assert b"\r\n" in raw
    assert raw.count(b"\n") == raw.count(b"\r\n")
    capture = load_capture(FIXTURES / "fixture-windows-1gpu.txt")
    assert capture.name == "fixture-windows-1gpu.txt"
    assert capture.states() == ("idle", "load")
    assert all("\r" not in section.body and "\r" not in section.command for section in capture.sections)


def test_linux_fixture_sections() -> None:
    capture = load_capture(FIXTURES / "fixture-linux-2gpu-mig.txt")
    assert capture.states() == ("idle", "load")
    assert [(s.state, s.label) for s in capture.sections if s.state == "capabilities"] == [
        ("capabilities", "version"),
        ("capabilities", "help-query-gpu"),
        ("capabilities", "list (-L)"),
        ("capabilities", "query-gpu field list (derived, used for query-gpu above)"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the capture has no sections"),
        (f"{FENCE}\n# header only\n{FENCE}\nbody\n", "the capture has no sections"),
        ("stray text\n", "line 1: text outside a block"),
        (f"\n  \n{FENCE}\n# a :: b\n{FENCE}\n".replace(FENCE, "#" * 79, 1), "line 3: text outside a block"),
        (f"{'#' * 81}\n# a :: b\n{FENCE}\n", "line 1: text outside a block"),
        (f"{FENCE}\n# a :: b\nno hash\n{FENCE}\n", "line 3: heading line does not start with '#'"),
        (f"{FENCE}\n# a :: b", "block heading is not closed by a fence"),
        (f"{FENCE}\n{FENCE}\nbody\n", "block without a heading"),
    ],
    ids=[
        "empty",
        "metadata-only",
        "text-outside",
        "short-fence-is-text",
        "long-fence-is-text",
        "heading-without-hash",
        "unterminated-heading",
        "empty-heading",
    ],
)
def test_malformed_capture_raises_capture_error(text: str, message: str) -> None:
    with pytest.raises(CaptureError, match=message.replace("(", r"\(")):
        parse_capture(text)


def test_whitespace_only_lines_outside_blocks_are_allowed() -> None:
    text = f"  \n\t\n{FENCE}\n# s :: l\n{FENCE}\nx\n   \n"
    assert parse_capture(text).sections == (Section("s", "l", "", "x\n   "),)


def test_body_ends_at_the_next_fence_and_drops_only_empty_edge_lines() -> None:
    text = f"{FENCE}\n# s :: l\n{FENCE}\n\n\n a\n\nb \n\n{FENCE}\n# s :: m\n{FENCE}\n"
    capture = parse_capture(text)
    assert [s.body for s in capture.sections] == [" a\n\nb ", ""]


def test_load_capture_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="No such file"):
        load_capture(tmp_path / "missing.txt")


@pytest.mark.parametrize("name", ["fixture-linux-2gpu-mig.txt", "fixture-windows-1gpu.txt"])
def test_render_round_trips_the_fixtures(name: str) -> None:
    capture = load_capture(FIXTURES / name)
    again = parse_capture(render_capture(capture), name=name)
    assert again == capture


def test_capture_is_immutable() -> None:
    capture = parse_capture(SAMPLE)
    assert isinstance(capture, Capture)
    with pytest.raises(AttributeError):
        capture.sections = ()  # type: ignore[misc]


HELP_FIELD = re.compile(r'\n[\t\n\f\r ]*\n^"([^"]+)"', re.MULTILINE)


@pytest.mark.parametrize(
    ("name", "count"), [("fixture-linux-2gpu-mig.txt", 27), ("fixture-windows-1gpu.txt", 22)], ids=["linux", "windows"]
)
def test_fixture_help_fields_match_the_recorded_query(name: str, count: int) -> None:
    capture = load_capture(FIXTURES / name)
    help_section = capture.find("capabilities", "help-query-gpu")
    assert help_section is not None
    discovered = HELP_FIELD.findall(help_section.body)
    assert len(discovered) == count
    assert "compute_mode" in discovered
    assert not any(field.startswith(("0:", "1:", "2:", "3:")) for field in discovered)
    assert set(IDENTITY_FIELDS) <= set(discovered)
    for state in ("idle", "load"):
        section = capture.find(state, "query-gpu (csv")
        assert section is not None
        assert section.command == f"nvidia-smi --query-gpu={','.join(discovered)} --format=csv"
        header = [cell.strip().split(" [")[0] for cell in section.body.split("\n")[0].split(",")]
        assert header == discovered
        apps = capture.find(state, "query-compute-apps")
        assert apps is not None
        assert apps.command == "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv"
