"""Parsers of nvidia-smi output: GPU CSV, compute apps, --help-query-gpu, --version.

The rules: docs/compatibility.md, "CSV parsing", "Field resolution" and "CUDA version".
"""

from __future__ import annotations

import logging

import pytest

from nvidia_gpu_exporter.backends.exec.output import (
    CsvShapeError,
    parse_compute_apps,
    parse_cuda_version,
    parse_gpu_csv,
    parse_help_query_gpu,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid

# -- GPU CSV ------------------------------------------------------------------------------------------------


def test_csv_header_and_rows_trimmed() -> None:
    csv = parse_gpu_csv("temperature.gpu, fan.speed [%]\n45, 38 %\n[N/A], 57 %\n", 2)
    assert csv.header == ("temperature.gpu", "fan.speed [%]")
    assert csv.rows == (("45", "38 %"), ("[N/A]", "57 %"))


def test_csv_header_count_mismatch_message() -> None:
    """`field count mismatch: query fields: N, returned fields: M`."""
    with pytest.raises(CsvShapeError) as caught:
        parse_gpu_csv("a, b\n1, 2\n", 3)
    assert str(caught.value) == "field count mismatch: query fields: 3, returned fields: 2"


def test_csv_ragged_row_message() -> None:
    """`row K: has X columns, want N: "<row>"` (Go %q of the trimmed row, K counts data rows from 1)."""
    with pytest.raises(CsvShapeError) as caught:
        parse_gpu_csv("a, b\n1, 2\n  3, 4, 5  \n", 2)
    assert str(caught.value) == 'row 2: has 3 columns, want 2: "3, 4, 5"'


def test_csv_ragged_row_number_and_counts() -> None:
    with pytest.raises(CsvShapeError, match=r"^row 1: has 1 columns, want 2"):
        parse_gpu_csv("a, b\nonly-one\n", 2)


def test_csv_blank_middle_line_is_fatal() -> None:
    """A blank line in the middle is a one-cell row, fatal to the collection."""
    with pytest.raises(CsvShapeError, match=r"^row 2: has 1 columns, want 2"):
        parse_gpu_csv("a, b\n1, 2\n\n3, 4\n", 2)


def test_csv_header_only_is_zero_gpus() -> None:
    """Header-only output is a successful collection with zero GPUs."""
    assert parse_gpu_csv("a, b\n", 2).rows == ()


def test_csv_carriage_returns_trimmed() -> None:
    """A trailing \\r disappears with the cell trimming."""
    csv = parse_gpu_csv("a, b\r\n1, 2 \r\n3,4\r\n", 2)
    assert csv.header == ("a", "b")
    assert csv.rows == (("1", "2"), ("3", "4"))


def test_csv_no_quote_handling() -> None:
    """Every comma splits, quotes are not special."""
    csv = parse_gpu_csv('a, b, c\n"x, y", z\n', 3)
    assert csv.rows == (('"x', 'y"', "z"),)


def test_csv_surrounding_whitespace_of_output_trimmed() -> None:
    """Whole stdout trimmed first, so leading blank lines do not become the header."""
    csv = parse_gpu_csv("\n\n  a, b\n1, 2\n\n\n", 2)
    assert csv.header == ("a", "b")
    assert csv.rows == (("1", "2"),)


def test_csv_go_trim_keeps_ascii_separators() -> None:
    """Go's TrimSpace keeps \\x1c-\\x1f, so such a cell keeps them."""
    csv = parse_gpu_csv("a\n5\x1c\n", 1)
    assert csv.rows == (("5\x1c",),)


def test_csv_empty_cells_kept() -> None:
    assert parse_gpu_csv("a, b, c\n, ,\n", 3).rows == (("", "", ""),)


# -- compute apps -------------------------------------------------------------------------------------------

APPS_HEADER = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"


def test_compute_apps_outside_in_names_with_commas() -> None:
    rows = parse_compute_apps(
        APPS_HEADER
        + "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA, 4242, python3, 40950 MiB\n"
        + "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA, 977, /usr/bin/a, b, [N/A]\n"
    )
    assert [(normalize_uuid(r.gpu_uuid), r.pid, r.process_name, r.used_memory) for r in rows] == [
        ("df6e7a7c-7314-46f8-abc4-b88b36dcf3aa", "4242", "python3", "40950 MiB"),
        ("df6e7a7c-7314-46f8-abc4-b88b36dcf3aa", "977", "/usr/bin/a, b", "[N/A]"),
    ]


def test_compute_apps_many_commas_and_empty_name() -> None:
    rows = parse_compute_apps(APPS_HEADER + "GPU-A, 1, a,,b , c, 5 MiB\nGPU-A, 2, , 1 MiB\n")
    assert [(r.process_name, r.used_memory) for r in rows] == [("a,,b , c", "5 MiB"), ("", "1 MiB")]


@pytest.mark.parametrize(
    "stdout",
    ["", "  \n\n", APPS_HEADER, APPS_HEADER + "\n\n"],
    ids=["empty output", "whitespace output", "header only", "header and blank lines"],
)
def test_compute_apps_no_processes(stdout: str) -> None:
    assert parse_compute_apps(stdout) == ()


@pytest.mark.parametrize(
    "header",
    ["gpu_uuid, pid, process_name", "a,b,c,d,e", "single"],
    ids=["three header cells", "five header cells", "one header cell"],
)
def test_compute_apps_bad_header(header: str) -> None:
    with pytest.raises(CsvShapeError, match="unexpected compute apps header"):
        parse_compute_apps(header + "\nGPU-A, 1, p, 1 MiB\n")


def test_compute_apps_header_names_not_checked() -> None:
    rows = parse_compute_apps("w, x, y, z\nGPU-A, 1, p, 1 MiB\n")
    assert [r.pid for r in rows] == ["1"]


def test_compute_apps_blank_lines_between_rows_ignored() -> None:
    rows = parse_compute_apps(APPS_HEADER + "GPU-A, 1, p, 1 MiB\n   \n\nGPU-A, 2, q, 2 MiB\n")
    assert [r.pid for r in rows] == ["1", "2"]


PIDS_KEPT = [("007", "007"), ("0", "0"), ("18446744073709551615", "18446744073709551615"), (" 12 ", "12")]


@pytest.mark.parametrize(
    ("pid", "label"),
    PIDS_KEPT,
    ids=["leading zeros kept raw", "zero", "uint64 max", "pid trimmed"],
)
def test_compute_apps_pid_accepted(pid: str, label: str) -> None:
    rows = parse_compute_apps(f"{APPS_HEADER}GPU-A,{pid}, p, 1 MiB\n")
    assert [r.pid for r in rows] == [label]


PID_ABSENT = ["", "N/A", "n/a", "[N/A]", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]"]


@pytest.mark.parametrize("pid", PID_ABSENT, ids=[f"absent pid token {p!r} skipped silently" for p in PID_ABSENT])
def test_compute_apps_absent_pid_silent(pid: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        rows = parse_compute_apps(f"{APPS_HEADER}GPU-A, {pid}, p, 1 MiB\nGPU-A, 5, q, 1 MiB\n")
    assert [r.pid for r in rows] == ["5"]
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


PID_BAD = ["abc", "-1", "+5", "1.0", "18446744073709551616", "0x10", "١٢", "1 2"]


@pytest.mark.parametrize("pid", PID_BAD, ids=[f"bad pid {p!r} skipped with warning" for p in PID_BAD])
def test_compute_apps_bad_pid_warns(pid: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        rows = parse_compute_apps(f"{APPS_HEADER}GPU-A, {pid}, p, 1 MiB\n")
    assert rows == ()
    assert [record for record in caplog.records if record.levelno == logging.WARNING]


def test_compute_apps_empty_uuid_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        rows = parse_compute_apps(APPS_HEADER + " , 12, p, 1 MiB\nGPU-B, 13, q, 1 MiB\n")
    assert [r.pid for r in rows] == ["13"]
    assert [record for record in caplog.records if record.levelno == logging.WARNING]


def test_compute_apps_short_rows_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        rows = parse_compute_apps(APPS_HEADER + "GPU-A, 1, 1 MiB\nGPU-A\nGPU-A, 2, p, 1 MiB\n")
    assert [r.pid for r in rows] == ["2"]
    assert len([record for record in caplog.records if record.levelno == logging.WARNING]) == 2


def test_compute_apps_carriage_returns() -> None:
    rows = parse_compute_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\r\nGPU-A, 1, p, 1 MiB\r\n")
    assert [(r.pid, r.process_name, r.used_memory) for r in rows] == [("1", "p", "1 MiB")]


# -- --help-query-gpu ----------------------------------------------------------------------------------------

HELP_TEXT = (
    'List of valid properties to query for the switch "--query-gpu=":\n'
    "\n"
    '"timestamp"\n'
    'The timestamp of when the query was made in format "YYYY/MM/DD HH:MM:SS.msec".\n'
    "\n"
    '"driver_version"\n'
    "The version of the installed NVIDIA display driver.\n"
    "\n"
    '"name" or "gpu_name"\n'
    "The official product name of the GPU.\n"
    "\n"
    '"compute_mode"\n'
    "The compute mode flag indicates whether individual or multiple compute applications may run on the GPU.\n"
    '"0: Default" means multiple contexts are allowed per device.\n'
    '"1: Exclusive_Thread", deprecated since CUDA 8.0, use Exclusive_Process instead\n'
    '"2: Prohibited" means no contexts are allowed per device (no compute apps).\n'
    '"3: Exclusive_Process" means only one context is allowed per device.\n'
    "\n"
    '"bad,name"\n'
    "Names with a comma are dropped.\n"
    "  \t \n"
    '"fan.speed"\n'
    "Preceded by a whitespace-only line.\n"
    "\n"
    '  "indented"\n'
    "Not at the start of a line.\n"
    '"unpreceded"\n'
    "No blank line before it.\n"
    "\n"
    '""\n'
    "\n"
    '"clocks.max.memory" or "clocks.max.mem"\n'
)


def test_help_query_gpu_regex() -> None:
    assert parse_help_query_gpu(HELP_TEXT) == [
        "timestamp",
        "driver_version",
        "name",
        "compute_mode",
        "fan.speed",
        "clocks.max.memory",
    ]


HELP_CASES: list[tuple[str, list[str], str]] = [
    ('\n\n"name" or "gpu_name"\n', ["name"], "first quoted token of the line only"),
    ('"first"\n\n"second"\n', ["second"], "the very first line has no preceding blank line"),
    ('x\n"a"\n', [], "needs a blank line before"),
    ('x\r\n\r\n"a"\r\n', ["a"], "CRLF blank line counts ([\\t\\n\\f\\r ]*)"),
    ('x\n\x0c\n"a"\n', ["a"], "form feed counts as blank"),
    ('x\n\x0b\n"a"\n', [], "vertical tab is not in the class"),
    ('x\n\n"a\rb"\n', [], "names with CR dropped"),
    ('x\n\n"a\nb"\n', [], "names with LF dropped"),
    ('x\n\n"a,b"\n\n"c"\n', ["c"], "names with comma dropped"),
    ('x\n\n\n\n"a"\n\n"b"\n', ["a", "b"], "several blank lines"),
    ("no fields at all\n", [], "no matches"),
    ("", [], "empty output"),
    ('x\n\n"a b"\n', ["a b"], "spaces inside the name kept"),
]


@pytest.mark.parametrize(("text", "expected"), [c[:2] for c in HELP_CASES], ids=[c[2] for c in HELP_CASES])
def test_help_query_gpu_cases(text: str, expected: list[str]) -> None:
    assert parse_help_query_gpu(text) == expected


# -- CUDA version -------------------------------------------------------------------------------------------

VERSION_535 = (
    "NVIDIA-SMI version  : 535.54.03\n"
    "NVML version        : 12.535.54.03\n"
    "DRIVER version      : 535.54.03\n"
    "CUDA Version        : 12.2\n"
)
VERSION_610 = (
    "NVIDIA-SMI version  : 610.10\n"
    "NVML version        : 610.10\n"
    "DRIVER version      : 610.10\n"
    'CUDA version        : Deprecated, see "CUDA UMD version" instead\n'
    "CUDA UMD version    : 13.3\n"
    "CUDA KMD version    : 13.4\n"
)

CUDA_CASES: list[tuple[str, str, str]] = [
    ("CUDA Version        : 13.2", "13.2", "CUDA Version line"),
    (VERSION_535, "12.2", "full --version output"),
    (VERSION_610, "13.3", "610 driver: Deprecated ignored, UMD wins"),
    ("CUDA UMD version : 13.3\nCUDA Version : 12.2\n", "13.3", "UMD wins even before"),
    ("CUDA Version : 12.2\nCUDA UMD version : 13.3\n", "13.3", "UMD wins even after"),
    ("CUDA Version : 12.2\nCUDA Version : 12.4\n", "12.4", "of several CUDA Version lines the last counts"),
    ("CUDA UMD version : 13.3\nCUDA UMD version : 13.4\n", "13.3", "of several UMD lines the first counts"),
    ("CUDA Version : 12.4\nCUDA Version : n/a\n", "12.4", "a later CUDA Version line without a version is ignored"),
    ("cuda   VERSION:12.4", "12.4", "key whitespace collapsed and lowercased"),
    ("CUDA\tVersion\t: 12.0\r\n", "12.0", "tabs collapse, CR trimmed"),
    ("CUDA Version : 12", "", "value must be digits.digits"),
    ("CUDA Version : 12.2.1", "", "three components rejected"),
    ("CUDA Version : v12.2", "", "prefix rejected"),
    ("CUDA Version : 12.2 : x", "", "split at the first colon only"),
    ("CUDA Version 12.2", "", "lines without a colon ignored"),
    ("CUDA Versions : 12.2", "", "other keys ignored"),
    ("", "", "empty output"),
    ("CUDA Version : ١٢.٢", "", "ASCII digits only"),
    ("CUDA VERS\u0130ON : 12.4", "12.4", "key lowered rune by rune as Go does: U+0130 becomes a plain i"),
    ("CUDA UMD VERS\u0130ON : 13.0\nCUDA Version : 1.1", "13.0", "a UMD key with U+0130 still wins"),
]


@pytest.mark.parametrize(("stdout", "expected"), [c[:2] for c in CUDA_CASES], ids=[c[2] for c in CUDA_CASES])
def test_parse_cuda_version(stdout: str, expected: str) -> None:
    assert parse_cuda_version(stdout) == expected
