"""The DCGM fields public counters files ask for that NVML can give (issue 27, item 4), and dcgm-exporter's 1.x
compatibility file: served in DCGM's units when a counters file lists them, never by default."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from harness import FIXTURES, REPO, start_exporter
from nvidia_gpu_exporter.backends.demo.extras import ExtrasSynthesizer, parse_extras
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.backend import DCGM_FIELD_VALUES
from nvidia_gpu_exporter.exposition.dcgm import LEGACY_NAMES, LISTED_ONLY_FAMILIES, DcgmExposition, default_families
from nvidia_gpu_exporter.exposition.dcgm_counters import CountersError, parse_counters, read_counters_file
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.model.snapshot import (
    DCGM_FIELD_COUNTERS,
    Attempt,
    GpuExtras,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    Readings,
    Snapshot,
)
from nvml_fixtures import InProcessFake
from test_unit_dcgm import IDENTITY, UUID, gpm_snapshot, samples
from unit_helpers import gpu_row, query_fields, success_snapshot

COMPATIBILITY_FILE = FIXTURES / "dcgm-exporter" / "1.x-compatibility-metrics.csv"
BASE = (
    'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",hostname="node-1"'
)
MIB = 1_048_576


def render_listed(name: str, qfield: str, rfield: str, cell: str) -> list[str]:
    fields = query_fields([(qfield, rfield)])
    row = gpu_row(fields, **{**IDENTITY, qfield.replace(".", "_"): cell})
    counters = parse_counters(f"{name}, gauge, h\n", "c.csv")
    return samples(DcgmExposition(fields, "node-1", counters=counters).render(success_snapshot([row])))


@pytest.mark.parametrize(
    ("name", "qfield", "rfield", "cell", "value"),
    [
        ("DCGM_FI_DEV_VIDEO_CLOCK", "clocks.current.video", "clocks.current.video [MHz]", "1275 MHz", "1275"),
        ("DCGM_FI_DEV_MAX_SM_CLOCK", "clocks.max.sm", "clocks.max.sm [MHz]", "1980 MHz", "1980"),
        ("DCGM_FI_DEV_MAX_MEM_CLOCK", "clocks.max.memory", "clocks.max.memory [MHz]", "2619 MHz", "2619"),
        ("DCGM_FI_DEV_FAN_SPEED", "fan.speed", "fan.speed [%]", "37 %", "37"),  # percent, as DCGM's
        ("DCGM_FI_DEV_POWER_USAGE_INSTANT", "power.draw.instant", "power.draw.instant [W]", "88.12 W", "88.12"),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power.limit", "power.limit [W]", "400.00 W", "400"),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", "power.min_limit", "power.min_limit [W]", "100.00 W", "100"),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "power.max_limit", "power.max_limit [W]", "700.00 W", "700"),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "power.default_limit", "power.default_limit [W]", "700.00 W", "700"),
        ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "enforced.power.limit", "enforced.power.limit [W]", "350.50 W", "350.5"),
        ("DCGM_FI_DEV_FB_TOTAL", "memory.total", "memory.total [MiB]", "81559 MiB", "81559"),  # MiB, not bytes
    ],
)
def test_a_listed_field_is_served_from_its_query_field_in_dcgms_unit(
    name: str, qfield: str, rfield: str, cell: str, value: str
) -> None:
    assert render_listed(name, qfield, rfield, cell) == [f"{name}{{{BASE}}} {value}"]


@pytest.mark.parametrize(
    ("name", "qfield", "rfield", "cell"),
    [
        ("DCGM_FI_DEV_FAN_SPEED", "fan.speed", "fan.speed [%]", "[N/A]"),  # a fanless data-center GPU
        ("DCGM_FI_DEV_MAX_SM_CLOCK", "clocks.max.sm", "clocks.max.sm [GHz]", "1.98 GHz"),  # not DCGM's unit
    ],
)
def test_an_unreadable_or_foreign_unit_cell_is_absent(name: str, qfield: str, rfield: str, cell: str) -> None:
    assert render_listed(name, qfield, rfield, cell) == []


@pytest.mark.parametrize("generation", list(Generation))
def test_no_listed_only_field_is_served_without_a_counters_file(generation: Generation) -> None:
    """dcgm-exporter's default files list none of them: the built-in set stays theirs (and the goldens stay)."""
    served = {family.field for family in default_families(generation)}
    assert not served & {family.name for family in LISTED_ONLY_FAMILIES}


NVML_ONLY = {
    "DCGM_FI_DEV_POWER_VIOLATION": ("power_violation_ns", 4_000_000_000.0, "4000000000"),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("thermal_violation_ns", 2_500_000.0, "2500000"),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": ("sync_boost_violation_ns", 0.0, "0"),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": ("board_limit_violation_ns", 7.0, "7"),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": ("low_util_violation_ns", 9_000_000_000.0, "9000000000"),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": ("reliability_violation_ns", 0.0, "0"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_crc_flit_errors", 2.0, "2"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_crc_data_errors", 1.0, "1"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_replay_errors", 5.0, "5"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_recovery_errors", 0.0, "0"),
}


@pytest.mark.parametrize("name", list(NVML_ONLY))
def test_violation_times_and_nvlink_errors_are_nvml_readings_served_as_counters(name: str) -> None:
    attribute, reading, value = NVML_ONLY[name]
    readings: dict[str, Any] = {attribute: reading}
    fields, snapshot = gpm_snapshot(NvmlExtras(gpus=(GpuExtras(UUID, **readings),)))
    counters = parse_counters(f"{name}, counter, h\n", "c.csv")
    text = DcgmExposition(fields, "node-1", counters=counters).render(snapshot)
    assert f"# TYPE {name} counter\n" in text
    assert samples(text) == [f"{name}{{{BASE}}} {value}"]


def test_a_gpu_that_cannot_report_an_nvml_reading_has_no_series() -> None:
    fields, snapshot = gpm_snapshot(NvmlExtras(gpus=(GpuExtras(UUID),)))
    counters = parse_counters("".join(f"{name}, counter, h\n" for name in NVML_ONLY), "c.csv")
    assert samples(DcgmExposition(fields, "node-1", counters=counters).render(snapshot)) == []


def test_the_nvml_readings_are_warned_about_on_a_backend_without_nvml(caplog: pytest.LogCaptureFixture) -> None:
    fields, _ = gpm_snapshot(NvmlExtras())
    counters = parse_counters("DCGM_FI_DEV_POWER_VIOLATION, counter, h\n", "c.csv")
    with caplog.at_level(logging.WARNING):
        DcgmExposition(fields, "node-1", counters=counters, energy=False, extras=False)
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.__dict__["fields"] == "DCGM_FI_DEV_POWER_VIOLATION (line 1: needs the nvml or demo backend)"


def test_fb_total_of_a_gpu_instance_is_its_own_in_whole_mib() -> None:
    fields = query_fields([("memory.total", "memory.total [MiB]")])
    row = gpu_row(fields, **{**IDENTITY, "memory_total": "81559 MiB"})
    extras = NvmlExtras(
        mig_devices=(MigDevice(UUID, "MIG-1", 2, 0, "3g.71gb"),),
        mig_instances=(MigInstanceReading(UUID, 2, memory_total_bytes=71_680 * MIB + 5),),
    )
    snapshot = Snapshot(Attempt(Readings(GpuTable((row,)), None, "12.4", extras), 0, 0.1, 1.0), 0, 1.0)
    counters = parse_counters("DCGM_FI_DEV_FB_TOTAL, gauge, h\n", "c.csv")
    (line,) = samples(DcgmExposition(fields, "node-1", counters=counters).render(snapshot))
    assert line.startswith("DCGM_FI_DEV_FB_TOTAL{")
    assert 'GPU_I_PROFILE="3g.71gb",GPU_I_ID="2"' in line
    assert line.endswith("} 71680")


def test_the_nvml_backend_reads_the_violation_times_and_nvlink_errors_as_dcgm_does(fake_nvml: InProcessFake) -> None:
    """NVML field values 74-79 (NVML_FI_DEV_PERF_POLICY_*, ns) and 38/45/52/59 (NVLink error totals); a GPU
    without NVLink (field errors) has no NVLink error reading, and none is read outside the DCGM profile."""
    fake_nvml.command("reset h200", "set 0 fv_sw_power_cap 4000000000", "fieldrc 0 52 3")
    opened = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True)
    try:
        extras = opened.collect_blocking().extras
    finally:
        opened.session.close(5)
    assert extras is not None
    gpu = extras.gpus[0]
    assert (gpu.power_violation_ns, gpu.thermal_violation_ns, gpu.low_util_violation_ns) == (4e9, 2.5e6, 9e9)
    assert (gpu.nvlink_crc_flit_errors, gpu.nvlink_crc_data_errors, gpu.nvlink_recovery_errors) == (2.0, 1.0, 0.0)
    assert gpu.nvlink_replay_errors is None  # NVML answered an error for field 52


def test_no_violation_reading_outside_the_dcgm_profile(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset h200")
    opened = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=False)
    try:
        extras = opened.collect_blocking().extras
    finally:
        opened.session.close(5)
    assert extras is not None
    assert extras.gpus[0].power_violation_ns is None


# -- dcgm-exporter's 1.x compatibility file ----------------------------------------------------------------------


def test_the_compatibility_file_parses_with_its_legacy_names_and_its_repeated_record() -> None:
    counters = read_counters_file(str(COMPATIBILITY_FILE))
    names = [counter.name for counter in counters]
    assert names[:2] == ["dcgm_sm_clock", "dcgm_memory_clock"]
    assert names.count("dcgm_fi_prof_pcie_tx_bytes") == 2  # listed twice by dcgm-exporter; the first one serves


LEGACY_FIELDS = query_fields(
    [
        ("clocks.current.sm", "clocks.current.sm [MHz]"),
        ("clocks.current.memory", "clocks.current.memory [MHz]"),
        ("temperature.memory", "temperature.memory"),
        ("temperature.gpu", "temperature.gpu"),
        ("power.draw", "power.draw [W]"),
        ("utilization.gpu", "utilization.gpu [%]"),
        ("utilization.memory", "utilization.memory [%]"),
        ("utilization.encoder", "utilization.encoder [%]"),
        ("utilization.decoder", "utilization.decoder [%]"),
        ("memory.free", "memory.free [MiB]"),
        ("memory.used", "memory.used [MiB]"),
    ]
)


def compatibility_exposition(*, nvml: bool) -> DcgmExposition:
    counters = read_counters_file(str(COMPATIBILITY_FILE))
    return DcgmExposition(LEGACY_FIELDS, "node-1", counters=counters, energy=nvml, gpm=nvml, extras=nvml)


def test_the_compatibility_file_serves_each_field_under_its_legacy_name() -> None:
    row = gpu_row(
        LEGACY_FIELDS,
        **IDENTITY,
        clocks_current_sm="1410 MHz",
        clocks_current_memory="1593 MHz",
        temperature_memory="44",
        temperature_gpu="31",
        power_draw="61.47 W",
        utilization_gpu="45 %",
        utilization_memory="7 %",
        utilization_encoder="0 %",
        utilization_decoder="0 %",
        memory_free="81358 MiB",
        memory_used="37 MiB",
    )
    text = compatibility_exposition(nvml=False).render(success_snapshot([row]))
    assert "# HELP dcgm_sm_clock SM clock frequency (in MHz).\n# TYPE dcgm_sm_clock gauge\n" in text
    served = [line.split("{", 1)[0] for line in samples(text)]
    assert served == [
        "dcgm_sm_clock",
        "dcgm_memory_clock",
        "dcgm_memory_temp",
        "dcgm_gpu_temp",
        "dcgm_power_usage",
        "dcgm_gpu_utilization",
        "dcgm_mem_copy_utilization",
        "dcgm_enc_utilization",
        "dcgm_dec_utilization",
        "dcgm_xid_errors",
        "dcgm_fb_free",
        "dcgm_fb_used",
    ]
    assert f"dcgm_gpu_temp{{{BASE}}} 31" in samples(text)


def test_with_the_old_namespace_the_compatibility_file_serves_dcgm_exporter_1xs_series() -> None:
    """dcgm-exporter -o -f 1.x-compatibility-metrics.csv: 1.x's names from the file, its ``uuid`` label from -o."""
    counters = read_counters_file(str(COMPATIBILITY_FILE))
    exposition = DcgmExposition(LEGACY_FIELDS, "node-1", counters=counters, extras=False, old_namespace=True)
    row = gpu_row(LEGACY_FIELDS, **IDENTITY, temperature_gpu="31")
    lines = samples(exposition.render(success_snapshot([row])))
    assert f"dcgm_gpu_temp{{{BASE.replace('UUID=', 'uuid=')}}} 31" in lines


def test_the_compatibility_file_starts_with_one_warning_naming_what_cannot_be_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        compatibility_exposition(nvml=True)
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.getMessage() == "not serving DCGM fields"
    assert warning.__dict__["file"] == str(COMPATIBILITY_FILE)
    assert warning.__dict__["fields"] == (
        "dcgm_fi_prof_pcie_tx_bytes (line 70: listed again, first on line 23: the first record is served), "
        "dcgm_fi_prof_pcie_rx_bytes (line 71: listed again, first on line 24: the first record is served)"
    )


def test_the_exporter_starts_with_the_compatibility_file_and_serves_its_legacy_names() -> None:
    exporter = start_exporter(
        ["--collect.backend=demo", "--metrics.profile=dcgm", f"--dcgm.collectors={COMPATIBILITY_FILE}"]
    )
    try:
        text = exporter.scrape()
    finally:
        exporter.stop()
    assert "\ndcgm_gpu_temp{" in text
    assert "\ndcgm_total_energy_consumption{" in text
    assert "DCGM_FI_DEV_GPU_TEMP" not in text


def test_a_field_listed_again_is_served_once_as_its_first_record(caplog: pytest.LogCaptureFixture) -> None:
    """As dcgm-exporter, whose own 1.x file lists two fields twice: not a reason to refuse the file."""
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    row = gpu_row(fields, **{**IDENTITY, "temperature_gpu": "31"})
    counters = parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, first\nDCGM_FI_DEV_GPU_TEMP, counter, second\n", "c.csv")
    with caplog.at_level(logging.WARNING):
        exposition = DcgmExposition(fields, "node-1", counters=counters)
    assert exposition.render(success_snapshot([row])) == (
        f"# HELP DCGM_FI_DEV_GPU_TEMP first\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{{BASE}}} 31\n"
    )
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.__dict__["fields"] == (
        "DCGM_FI_DEV_GPU_TEMP (line 2: listed again, first on line 1: the first record is served)"
    )


@pytest.mark.parametrize("name", ["Dcgm_gpu_temp", "dcgm-gpu-temp", "DCGM_gpu_temp"])
def test_only_dcgm_and_lower_case_legacy_names_parse(name: str) -> None:
    with pytest.raises(CountersError, match="is not a DCGM field name"):
        parse_counters(f"{name}, gauge, t\n", "c.csv")


def test_a_legacy_name_this_exporter_does_not_offer_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    fields, _ = gpm_snapshot(NvmlExtras())
    with caplog.at_level(logging.WARNING):
        DcgmExposition(fields, "node-1", counters=parse_counters("dcgm_pcie_tx_throughput, counter, t\n", "c.csv"))
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.__dict__["fields"] == "dcgm_pcie_tx_throughput (line 1: not offered by this exporter)"


def test_the_nvml_backend_reads_every_dcgm_field_counter_the_snapshot_carries() -> None:
    assert [name for name, _ in DCGM_FIELD_VALUES] == list(DCGM_FIELD_COUNTERS)


def test_the_demo_serves_the_violation_and_nvlink_error_counters_of_a_healthy_gpu() -> None:
    synthesizer = ExtrasSynthesizer(parse_extras(None), seed=1)
    (gpu,) = synthesizer.cycle(100.0, ["GPU-1"], [50.0]).gpus
    assert [getattr(gpu, name) for name in DCGM_FIELD_COUNTERS] == [0.0] * len(DCGM_FIELD_COUNTERS)


def docs_table(start: str, end: str) -> list[list[str]]:
    text = (REPO / "docs" / "dcgm.md").read_text(encoding="utf-8")
    assert start in text, f"docs/dcgm.md lost its {start} marker"
    rows = text.split(start, 1)[1].split(end, 1)[0].strip().splitlines()[2:]
    return [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]


def test_the_docs_table_of_listed_only_fields_is_the_code_s() -> None:
    rows = docs_table("<!-- listed-only fields table -->", "<!-- end of listed-only fields table -->")
    assert [(row[0], row[1]) for row in rows] == [(family.name, family.metric_type) for family in LISTED_ONLY_FAMILIES]


def test_the_docs_table_of_legacy_names_is_the_code_s() -> None:
    rows = docs_table("<!-- legacy names table -->", "<!-- end of legacy names table -->")
    assert {row[0]: row[1] for row in rows} == LEGACY_NAMES
