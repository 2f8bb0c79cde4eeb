"""dcgm-exporter's counters file (``-f`` / ``--dcgm.collectors``): its grammar, its bounds, and what it selects."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from nvidia_gpu_exporter.config import Config, ConfigError, Profile, validate
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import (
    MAX_BYTES,
    MAX_LINES,
    Counter,
    CountersError,
    parse_counters,
    read_counters_file,
)
from nvidia_gpu_exporter.flags import FlagError, parse_args, usage
from test_unit_dcgm import DCGM_SHARED, IDENTITY, samples
from unit_helpers import gpu_row, query_fields, success_snapshot

# -- the grammar ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n",
            [("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 1)],
        ),
        (
            "# a comment\n\nDCGM_FI_DEV_SM_CLOCK,  gauge, SM clock.\n",
            [("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock.", 3)],
        ),
        (
            "DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).",
            [("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", 1)],
        ),
        ('DCGM_FI_DEV_FB_USED, counter, "Used, in MiB"\n', [("DCGM_FI_DEV_FB_USED", "counter", "Used, in MiB", 1)]),
        (
            "DCGM_FI_DRIVER_VERSION, label, Driver Version\r\n",
            [("DCGM_FI_DRIVER_VERSION", "label", "Driver Version", 1)],
        ),
        (
            "DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs\n",
            [("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs", 1)],
        ),
        ("DCGM_FI_DEV_GPU_TEMP, gauge,\n", [("DCGM_FI_DEV_GPU_TEMP", "gauge", "", 1)]),
        ("   # an indented comment\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n", [("DCGM_FI_DEV_GPU_TEMP", "gauge", "t", 2)]),
    ],
    ids=[
        "one",
        "comment-blank",
        "space-before-comma",
        "quoted-help",
        "label-crlf",
        "exporter-field",
        "empty-help",
        "indented-comment",
    ],
)
def test_the_counters_grammar(text: str, expected: list[tuple[str, str, str, int]]) -> None:
    assert parse_counters(text, "c.csv") == tuple(Counter(*row) for row in expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge\n", "c.csv:1: expected 3 fields (DCGM field, Prometheus type, help), got 2"),
        (
            "# x\nDCGM_FI_DEV_GPU_TEMP, gauge, a, b\n",
            "c.csv:2: expected 3 fields (DCGM field, Prometheus type, help), got 4",
        ),
        (
            "GPU_TEMP, gauge, t\n",
            "c.csv:1: 'GPU_TEMP' is not a DCGM field name (DCGM_FI_*, DCGM_EXP_* or 1.x's dcgm_*)",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gauges, t\n",
            "c.csv:1: unknown Prometheus type 'gauges' (gauge, counter, histogram, summary or label)",
        ),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "open\n', "c.csv:1: not a CSV record"),
        ("# only comments\n\n", "c.csv: lists no DCGM field"),
    ],
    ids=["too-few", "too-many", "bad-name", "bad-type", "open-quote", "empty"],
)
def test_a_bad_counters_file_names_file_and_line(text: str, message: str) -> None:
    with pytest.raises(CountersError) as caught:
        parse_counters(text, "c.csv")
    assert str(caught.value).startswith(message)


def test_the_line_count_is_bounded() -> None:
    text = "# x\n" * MAX_LINES + "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
    with pytest.raises(CountersError, match=f"c.csv: more than {MAX_LINES} lines"):
        parse_counters(text, "c.csv")


def test_reading_a_file(tmp_path: Path) -> None:
    path = tmp_path / "counters.csv"
    path.write_bytes(b"\xef\xbb\xbfDCGM_FI_DEV_GPU_TEMP, gauge, t\n")  # a byte-order mark is not part of the name
    assert read_counters_file(str(path)) == (Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "t", 1),)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the counters file {path}: "),
        (b"x" * (MAX_BYTES + 1), f"{{path}}: larger than {MAX_BYTES} bytes: not a counters file"),
        (b"DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_SM_CLOCK, gauge, \xff\n", "{path}:2: not UTF-8 text"),
        ("directory", "{path}: not a regular file"),
    ],
    ids=["missing", "too-large", "not-utf8", "directory"],
)
def test_an_unreadable_file_is_a_clear_error(tmp_path: Path, content: bytes | str | None, message: str) -> None:
    path = tmp_path / "counters.csv"
    if content == "directory":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(CountersError) as caught:
        read_counters_file(str(path))
    assert str(caught.value).startswith(message.format(path=path))


def test_dcgm_exporters_default_file_parses() -> None:
    path = DCGM_SHARED / "default-counters.csv"
    if not path.is_file():
        pytest.skip(f"{path} is absent: dcgm-exporter's reference data is not beside this checkout")
    counters = read_counters_file(str(path))
    assert counters[0].name == "DCGM_FI_DEV_SM_CLOCK"
    assert ("DCGM_FI_DRIVER_VERSION", "label") in {(counter.name, counter.metric_type) for counter in counters}
    assert not [counter for counter in counters if counter.name == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]  # disabled there


# -- the flag ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["--dcgm.collectors=/etc/c.csv"], ["--dcgm.collectors", "/etc/c.csv"], ["-f", "/etc/c.csv"], ["-f/etc/c.csv"]],
    ids=["long-inline", "long", "short", "short-attached"],
)
def test_the_collectors_flag_and_its_dcgm_exporter_short_form(argv: list[str]) -> None:
    assert parse_args(argv).config.dcgm_collectors == "/etc/c.csv"


def test_the_short_flag_needs_a_value_and_other_short_flags_stay_unknown() -> None:
    with pytest.raises(FlagError, match=re.escape("expected argument for flag '-f'")):
        parse_args(["-f"])
    with pytest.raises(FlagError, match="unknown short flag '-q'"):  # -x is dcgm-exporter's (docs/dcgm.md)
        parse_args(["-q"])
    assert parse_args([]).config.dcgm_collectors == ""
    assert "  -f, --dcgm.collectors=<string>\n" in usage()


def test_the_collectors_file_needs_the_dcgm_profile() -> None:
    with pytest.raises(ConfigError, match=re.escape("--dcgm.collectors requires --metrics.profile=dcgm or both")):
        validate(Config(dcgm_collectors="c.csv"))
    validate(Config(dcgm_collectors="c.csv", metrics_profile=Profile.BOTH))


# -- what the file selects --------------------------------------------------------------------------------------

FIELDS = [
    ("temperature.gpu", "temperature.gpu"),
    ("clocks.current.sm", "clocks.current.sm [MHz]"),
    ("driver_version", "driver_version"),
    ("vbios_version", "vbios_version"),
    ("serial", "serial"),
]
CELLS = {
    "temperature_gpu": "31",
    "clocks_current_sm": "1410 MHz",
    "driver_version": "550.54.15",
    "vbios_version": "92.00.45.00.03",
    "serial": "[N/A]",
}
BASE = (
    'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",hostname="node-1"'
)


def render_with(counters_text: str, *, energy: bool = True) -> str:
    fields = query_fields(FIELDS)
    counters = parse_counters(counters_text, "c.csv")
    exposition = DcgmExposition(fields, hostname="node-1", counters=counters, energy=energy)
    return exposition.render(success_snapshot([gpu_row(fields, **{**IDENTITY, **CELLS})]))


@pytest.mark.parametrize(
    ("counters_text", "expected"),
    [
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, T\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n",
            [f'DCGM_FI_DEV_GPU_TEMP{{{BASE},DCGM_FI_DRIVER_VERSION="550.54.15"}} 31'],
        ),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, T\n", [f"DCGM_FI_DEV_GPU_TEMP{{{BASE}}} 31"]),  # no label field: no label
        (
            "DCGM_FI_DEV_SM_CLOCK, gauge, S\nDCGM_FI_DEV_GPU_TEMP, gauge, T\n",  # the file's order
            [f"DCGM_FI_DEV_SM_CLOCK{{{BASE}}} 1410", f"DCGM_FI_DEV_GPU_TEMP{{{BASE}}} 31"],
        ),
        (
            "DCGM_FI_DEV_VBIOS_VERSION, label, V\nDCGM_FI_DEV_GPU_TEMP, gauge, T\nDCGM_FI_DRIVER_VERSION, label, D\n",
            [
                f'DCGM_FI_DEV_GPU_TEMP{{{BASE},DCGM_FI_DEV_VBIOS_VERSION="92.00.45.00.03",'
                'DCGM_FI_DRIVER_VERSION="550.54.15"} 31'
            ],
        ),
        (
            "DCGM_FI_DEV_SERIAL, label, S\nDCGM_FI_DEV_GPU_TEMP, gauge, T\n",  # an unreadable label value: no label
            [f"DCGM_FI_DEV_GPU_TEMP{{{BASE}}} 31"],
        ),
    ],
    ids=["driver-label", "no-label-field", "file-order", "label-order", "unreadable-label"],
)
def test_the_file_selects_fields_and_label_fields(counters_text: str, expected: list[str]) -> None:
    assert samples(render_with(counters_text)) == expected


def test_the_file_gives_type_and_help() -> None:
    text = render_with("DCGM_FI_DEV_GPU_TEMP, counter, My temperature.\n")
    assert text.startswith("# HELP DCGM_FI_DEV_GPU_TEMP My temperature.\n# TYPE DCGM_FI_DEV_GPU_TEMP counter\n")


def test_fields_that_cannot_be_served_are_warned_about_once_at_construction(caplog: pytest.LogCaptureFixture) -> None:
    counters_text = (
        "DCGM_FI_DEV_GPU_TEMP, gauge, T\n"
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, G\n"  # no GPM source (exec)
        "DCGM_FI_DEV_NOT_A_FIELD, gauge, X\n"  # unknown to us
        "DCGM_FI_DEV_FB_FREE, gauge, F\n"  # not in this query
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, E\n"  # no energy source (exec)
        "DCGM_FI_DEV_SM_CLOCK, label, S\n"  # a metric, not a label
        "DCGM_FI_DRIVER_VERSION, gauge, D\n"  # a label, not a metric
        "DCGM_FI_DEV_MEM_CLOCK, histogram, M\n"  # not a type a single value can have
    )
    fields = query_fields(FIELDS)
    snapshot = success_snapshot([gpu_row(fields, **{**IDENTITY, **CELLS})])
    with caplog.at_level(logging.WARNING):
        exposition = DcgmExposition(fields, "node-1", counters=parse_counters(counters_text, "c.csv"), energy=False)
        for _ in range(3):
            assert samples(exposition.render(snapshot)) == [f"DCGM_FI_DEV_GPU_TEMP{{{BASE}}} 31"]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage() == "not serving DCGM fields"
    assert warnings[0].__dict__["fields"] == (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE (line 2: needs the nvml backend: NVML GPM), "
        "DCGM_FI_DEV_NOT_A_FIELD (line 3: not offered by this exporter), "
        "DCGM_FI_DEV_FB_FREE (line 4: memory.free is not queried), "
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (line 5: needs the nvml or demo backend), "
        "DCGM_FI_DEV_SM_CLOCK (line 6: a value, not a label), "
        "DCGM_FI_DRIVER_VERSION (line 7: a label field, not a gauge), "
        "DCGM_FI_DEV_MEM_CLOCK (line 8: a single value cannot be a histogram)"
    )
