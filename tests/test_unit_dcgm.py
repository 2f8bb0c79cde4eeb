"""The DCGM output profile (docs/dcgm.md): names, units, absent values, label order, XIDs, and its wiring."""

from __future__ import annotations

import asyncio
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness import FIXTURE_CAPTURES, FIXTURES, SHARED, assert_golden
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.capture.engine import Scenario, answer
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.config import Profile
from nvidia_gpu_exporter.exposition.dcgm import LABEL_FAMILIES, DcgmExposition, default_families, node_hostname
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.flags import FlagError, parse_args
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuExtras,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
    XidRecord,
)
from unit_helpers import FakeRunner, gpu_row, query_fields, success_snapshot

PINNED = Generation.V4_8  # these tests read generation 4.8's names and units; the default is the newest
DCGM_SHARED = SHARED / "dcgm"
GOLDEN = FIXTURES / "dcgm"
UUID = "GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
LABELS = (
    'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"'
)
IDENTITY = {"uuid": UUID, "name": "NVIDIA A100-SXM4-80GB", "pci.bus_id": "00000000:07:00.0", "index": "0"}


def render_one(qfield: str, rfield: str, cell: str, *, xids: tuple[XidRecord, ...] = ()) -> str:
    fields = query_fields([(qfield, rfield), ("driver_version", "driver_version")])
    row = gpu_row(fields, **{**IDENTITY, "driver_version": "550.54.15", qfield.replace(".", "_"): cell})
    snapshot = success_snapshot([row])
    return DcgmExposition(fields, hostname="node-1", xids=bool(xids), generation=PINNED).render(
        Snapshot(snapshot.attempt, 0, snapshot.last_success_at, xids=xids)
    )


def samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


@pytest.mark.parametrize(
    ("qfield", "rfield", "cell", "expected"),
    [
        ("clocks.current.sm", "clocks.current.sm [MHz]", "1410 MHz", "DCGM_FI_DEV_SM_CLOCK 1410"),
        ("clocks.current.memory", "clocks.current.memory [MHz]", "1593 MHz", "DCGM_FI_DEV_MEM_CLOCK 1593"),
        ("temperature.gpu", "temperature.gpu", "31", "DCGM_FI_DEV_GPU_TEMP 31"),
        ("temperature.memory", "temperature.memory", "44", "DCGM_FI_DEV_MEMORY_TEMP 44"),
        ("power.draw", "power.draw [W]", "61.47 W", "DCGM_FI_DEV_POWER_USAGE 61.47"),
        ("utilization.gpu", "utilization.gpu [%]", "45 %", "DCGM_FI_DEV_GPU_UTIL 45"),  # percent, not a ratio
        ("utilization.memory", "utilization.memory [%]", "7 %", "DCGM_FI_DEV_MEM_COPY_UTIL 7"),
        ("utilization.encoder", "utilization.encoder [%]", "12 %", "DCGM_FI_DEV_ENC_UTIL 12"),
        ("utilization.decoder", "utilization.decoder [%]", "0 %", "DCGM_FI_DEV_DEC_UTIL 0"),
        ("memory.free", "memory.free [MiB]", "81358 MiB", "DCGM_FI_DEV_FB_FREE 81358"),  # MiB stays MiB
        ("memory.used", "memory.used [MiB]", "37 MiB", "DCGM_FI_DEV_FB_USED 37"),
        ("memory.reserved", "memory.reserved [MiB]", "525 MiB", "DCGM_FI_DEV_FB_RESERVED 525"),
        ("remapped_rows.correctable", "remapped_rows.correctable", "3", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS 3"),
        (
            "remapped_rows.uncorrectable",
            "remapped_rows.uncorrectable",
            "1",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS 1",
        ),
        ("remapped_rows.failure", "remapped_rows.failure", "No", "DCGM_FI_DEV_ROW_REMAP_FAILURE 0"),
        ("remapped_rows.failure", "remapped_rows.failure", "Yes", "DCGM_FI_DEV_ROW_REMAP_FAILURE 1"),
        (
            "ecc.errors.corrected.volatile.total",
            "ecc.errors.corrected.volatile.total",
            "5",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL 5",
        ),
        (
            "ecc.errors.uncorrected.aggregate.total",
            "ecc.errors.uncorrected.aggregate.total",
            "2",
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL 2",
        ),
        ("retired_pages.single_bit_ecc.count", "retired_pages.single_bit_ecc.count", "4", "DCGM_FI_DEV_RETIRED_SBE 4"),
        ("retired_pages.double_bit.count", "retired_pages.double_bit.count", "0", "DCGM_FI_DEV_RETIRED_DBE 0"),
    ],
)
def test_each_field_maps_to_its_dcgm_name_in_dcgm_units(qfield: str, rfield: str, cell: str, expected: str) -> None:
    name, value = expected.split(" ")
    assert samples(render_one(qfield, rfield, cell)) == [f"{name}{{{LABELS}}} {value}"]


@pytest.mark.parametrize("cell", ["[N/A]", "[Not Supported]", "N/A", "", "[Insufficient Permissions]"])
def test_an_unreadable_cell_is_absent_never_a_sentinel(cell: str) -> None:
    assert render_one("temperature.gpu", "temperature.gpu", cell) == ""


def test_a_field_the_query_lacks_is_absent() -> None:
    text = render_one("fan.speed", "fan.speed [%]", "30 %")
    assert text == ""


@pytest.mark.parametrize(
    ("qfield", "rfield", "cell"),
    [
        ("memory.free", "memory.free [GiB]", "2 GiB"),  # not the MiB DCGM serves: no guessing
        ("power.draw", "power.draw [mW]", "61470 mW"),
        ("utilization.gpu", "utilization.gpu", "0.45"),  # no % in the header: not a percent we can vouch for
    ],
)
def test_a_header_in_another_unit_is_not_served(qfield: str, rfield: str, cell: str) -> None:
    assert render_one(qfield, rfield, cell) == ""


def test_help_and_type_lines_precede_the_samples() -> None:
    text = render_one("temperature.gpu", "temperature.gpu", "31")
    assert text == (
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 31\n"
    )


def test_gpus_are_ordered_by_index_and_labels_escaped() -> None:
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    rows = [
        gpu_row(fields, uuid="GPU-b", index="10", name='Odd "name"', temperature_gpu="40"),
        gpu_row(fields, uuid="GPU-a", index="2", name="Plain", temperature_gpu="30"),
    ]
    text = DcgmExposition(fields, hostname="h", generation=PINNED).render(success_snapshot(rows))
    lines = samples(text)
    assert lines[0].startswith('DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-a",')
    assert 'modelName="Odd \\"name\\""' in lines[1]
    assert 'device="nvidia10"' in lines[1]


def xid(code: int, last_seen: float | None, uuid: str = UUID, count: int = 1) -> XidRecord:
    return XidRecord(uuid, code, count, last_seen)


def test_xid_errors_is_the_latest_code_with_dcgm_exporters_text() -> None:
    records = (xid(79, 100.0), xid(48, 200.0), xid(13, 150.0, count=9))
    text = render_one("temperature.gpu", "temperature.gpu", "31", xids=records)
    xid_lines = [line for line in samples(text) if line.startswith("DCGM_FI_DEV_XID_ERRORS")]
    assert xid_lines == [f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="48",err_msg="Double Bit ECC Error"}} 48']
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n" in text


@pytest.mark.parametrize(
    ("code", "message"),
    [
        pytest.param(13, "Graphics Engine Exception", id="a-code-in-its-table"),
        pytest.param(172, "Uncorrectable SRAM Error", id="its-last-code"),
        pytest.param(173, "Unknown Error", id="past-its-table"),
        pytest.param(999, "Unknown Error", id="far-past-its-table"),
    ],
)
def test_xid_matching_ignores_uuid_case_and_err_msg_is_dcgm_exporters(code: int, message: str) -> None:
    records = (xid(code, 5.0, uuid=UUID.lower()),)
    text = render_one("temperature.gpu", "temperature.gpu", "31", xids=records)
    assert f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="{code}",err_msg="{message}"}} {code}' in samples(text)


@pytest.mark.parametrize(
    ("generation", "code", "message"),
    [
        pytest.param(Generation.V3, 109, "Context Switch Timeout  Error", id="3-its-two-spaces"),
        pytest.param(Generation.V4_5, 136, "Reserved", id="4.5-reserved-before-4.7.1"),
        pytest.param(Generation.V4_5, 143, "GPU Initialization Failure", id="4.5-its-last-code"),
        pytest.param(Generation.V4_5, 144, "Unknown Error", id="4.5-past-its-table"),
        pytest.param(Generation.V4_8, 136, "ALI Training Fail", id="4.8-the-v580-table"),
        pytest.param(Generation.V4_10, 109, "Context Switch Timeout Error", id="4.10-one-space"),
        pytest.param(Generation.V4_10, 172, "Uncorrectable SRAM Error", id="4.10-its-last-code"),
    ],
)
def test_err_msg_is_the_chosen_generations_table(generation: Generation, code: int, message: str) -> None:
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    snapshot = success_snapshot([gpu_row(fields, **IDENTITY, temperature_gpu="31")])
    exposition = DcgmExposition(fields, hostname="node-1", generation=generation)
    text = exposition.render(Snapshot(snapshot.attempt, 0, snapshot.last_success_at, xids=(xid(code, 5.0),)))
    assert f'err_code="{code}",err_msg="{message}"}} {code}' in text


def test_a_gpu_without_xids_gets_dcgm_exporters_no_error_series() -> None:
    records = (xid(79, 1.0, uuid="GPU-other"),)
    text = render_one("temperature.gpu", "temperature.gpu", "31", xids=records)
    xid_lines = [line for line in samples(text) if line.startswith("DCGM_FI_DEV_XID_ERRORS")]
    assert xid_lines == [f'DCGM_FI_DEV_XID_ERRORS{{{LABELS},err_code="0",err_msg="No Error"}} 0']


def test_no_xid_family_when_xids_are_not_read() -> None:
    """--collect.xid-source=off: nothing says a GPU had none, so no "No Error" series either."""
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    snapshot = success_snapshot([gpu_row(fields, **IDENTITY, temperature_gpu="31")])
    assert "DCGM_FI_DEV_XID_ERRORS" not in DcgmExposition(fields, hostname="h", xids=False, generation=PINNED).render(
        snapshot
    )


def test_an_xid_with_a_time_beats_one_without() -> None:
    records = (xid(31, 50.0), xid(43, None))
    text = render_one("temperature.gpu", "temperature.gpu", "31", xids=records)
    assert 'err_code="31"' in text
    assert 'err_code="43"' not in text


def test_total_energy_comes_from_nvml_in_millijoules() -> None:
    fields = query_fields([("driver_version", "driver_version")])
    row = gpu_row(fields, **{**IDENTITY, "driver_version": "550.54.15"})
    extras = NvmlExtras(gpus=(GpuExtras(UUID, energy_joules=123456.789),))
    readings = Readings(GpuTable((row,)), None, "12.4", extras)
    snapshot = Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0)
    text = DcgmExposition(fields, hostname="node-1", xids=False, generation=PINNED).render(snapshot)
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert samples(text) == [f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{LABELS}}} 123456789"]


def gpm_snapshot(extras: NvmlExtras) -> tuple[list[QueryField], Snapshot]:
    fields = query_fields([("driver_version", "driver_version")])
    row = gpu_row(fields, **{**IDENTITY, "driver_version": "550.54.15"})
    return fields, Snapshot(Attempt(Readings(GpuTable((row,)), None, "12.4", extras), 0, 0.1, 1.0), 0, 1.0)


PROF = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE")


def test_gpm_ratios_of_a_whole_gpu_are_served_as_dcgms_profiling_ratios() -> None:
    extras = NvmlExtras(
        gpus=(GpuExtras(UUID, graphics_activity_ratio=0.455, tensor_activity_ratio=0.125, dram_activity_ratio=0.3),)
    )
    fields, snapshot = gpm_snapshot(extras)
    text = DcgmExposition(fields, hostname="node-1", gpm=True, generation=PINNED).render(snapshot)
    assert "# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.\n" in text
    assert "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\n" in text
    assert [line for line in samples(text) if line.startswith("DCGM_FI_PROF_")] == [
        f"{name}{{{LABELS}}} {value}" for name, value in zip(PROF, ("0.455", "0.125", "0.3"), strict=True)
    ]


def test_no_profiling_series_without_a_gpm_window_or_without_the_nvml_backend() -> None:
    """The first collection (no window), a GPU without GPM, and the exec backend (gpm=False) serve none."""
    fields, unread = gpm_snapshot(NvmlExtras(gpus=(GpuExtras(UUID),)))
    assert "DCGM_FI_PROF_" not in DcgmExposition(fields, hostname="node-1", gpm=True, generation=PINNED).render(unread)
    extras = NvmlExtras(gpus=(GpuExtras(UUID, tensor_activity_ratio=0.5),))
    fields, read = gpm_snapshot(extras)
    assert "DCGM_FI_PROF_" not in DcgmExposition(fields, hostname="node-1", generation=PINNED).render(read)


def test_a_gpu_instance_serves_its_own_gpm_ratios_but_no_dram_activity() -> None:
    extras = NvmlExtras(
        gpus=(GpuExtras(UUID, graphics_activity_ratio=0.9, tensor_activity_ratio=0.9, dram_activity_ratio=0.9),),
        mig_devices=(MigDevice(UUID, "MIG-aaaaaaaa-0000-4000-8000-000000000002", 2, 0, "3g.40gb"),),
        mig_instances=(MigInstanceReading(UUID, 2, graphics_activity_ratio=0.455, tensor_activity_ratio=0.125),),
    )
    fields, snapshot = gpm_snapshot(extras)
    text = DcgmExposition(fields, hostname="node-1", gpm=True, generation=PINNED).render(snapshot)
    mig_labels = LABELS.replace(",hostname=", ',GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",hostname=')
    assert [line for line in samples(text) if line.startswith("DCGM_FI_PROF_")] == [
        f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{mig_labels}}} 0.455",
        f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{mig_labels}}} 0.125",
    ]


def test_a_failed_collection_renders_no_dcgm_series() -> None:
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    failed = Snapshot(Attempt(None, 1, 0.1, 1.0, error="boom"), 1, None, xids=(xid(79, 1.0),))
    assert DcgmExposition(fields, hostname="h", generation=PINNED).render(failed) == ""


def test_node_name_wins_over_the_host_name() -> None:
    assert node_hostname({"NODE_NAME": "worker-7"}) == "worker-7"
    assert node_hostname({"NODE_NAME": ""}) == node_hostname({})
    assert node_hostname({})


# -- the flag and the wiring ----------------------------------------------------------------------------


def test_profile_flag_defaults_to_nvidia_smi_and_takes_the_three_values() -> None:
    assert parse_args([]).config.metrics_profile is Profile.NVIDIA_SMI
    for value in ("nvidia_smi", "dcgm", "both"):
        assert parse_args([f"--metrics.profile={value}"]).config.metrics_profile is Profile(value)
    with pytest.raises(FlagError, match="enum value must be one of nvidia_smi,dcgm,both, got 'x'"):
        parse_args(["--metrics.profile=x"])


def wired(profile: Profile, fields: list[QueryField]) -> Exposition:
    dcgm = None if profile is Profile.NVIDIA_SMI else DcgmExposition(fields, hostname="node-1", generation=PINNED)
    return Exposition(fields, StatusFamily.COMMAND_EXIT_CODE, nvidia_smi=profile is not Profile.DCGM, dcgm=dcgm)


def test_the_profiles_keep_the_nvidia_smi_bytes_and_add_or_replace_the_dcgm_block() -> None:
    fields = query_fields([("temperature.gpu", "temperature.gpu"), ("driver_version", "driver_version")])
    snapshot = success_snapshot(
        [gpu_row(fields, **{**IDENTITY, "driver_version": "550.54.15", "temperature_gpu": "31"})]
    )
    plain = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).render(snapshot)
    dcgm_only = DcgmExposition(fields, hostname="node-1", generation=PINNED).render(snapshot)
    assert wired(Profile.NVIDIA_SMI, fields).render(snapshot) == plain
    assert wired(Profile.BOTH, fields).render(snapshot) == dcgm_only + plain
    dcgm_text = wired(Profile.DCGM, fields).render(snapshot)
    assert dcgm_text.startswith(dcgm_only)
    assert "nvidia_smi_" not in dcgm_text


# -- golden output and dcgm-exporter's counters file ---------------------------------------------------


def captured_readings(name: str) -> tuple[tuple[QueryField, ...], Snapshot]:
    """The fixture capture through the real exec pipeline, answered in memory by the fake nvidia-smi."""
    scenario = Scenario(load_capture(FIXTURE_CAPTURES / name))

    def reply(args: Sequence[str]) -> RunResult:
        result = answer(scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)

    async def collect() -> tuple[tuple[QueryField, ...], Readings]:
        smi = await SmiBackend.start(FakeRunner({"": reply}), FieldRequest(), timeout_seconds=10.0, compute_apps=False)
        return smi.fields, await smi.collect()

    fields, readings = asyncio.run(collect())
    records = (XidRecord("GPU-8D42E1B5-0C9F-4A73-B2E6-5F17C3D9A804", 79, 2, 1_773_480_000.5),)
    return fields, Snapshot(Attempt(readings, 0, 0.2, 1_773_480_013.0), 0, 1_773_480_013.0, xids=records)


@pytest.mark.parametrize("capture", ["fixture-linux-2gpu-mig", "fixture-windows-1gpu"])
def test_golden_dcgm_output_of_the_fixture_captures(capture: str) -> None:
    fields, snapshot = captured_readings(capture + ".txt")
    assert_golden(
        GOLDEN / f"{capture}.prom", DcgmExposition(fields, hostname="node-1", generation=PINNED).render(snapshot)
    )


def shared_counters() -> dict[str, tuple[str, str]]:
    """dcgm-exporter's counters file, its disabled lines included: field -> (Prometheus type, HELP)."""
    path = DCGM_SHARED / "default-counters.csv"
    if not path.is_file():
        pytest.skip(f"{path} is absent: dcgm-exporter's reference data is not beside this checkout")
    counters: dict[str, tuple[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("#").strip()
        if not text.startswith(("DCGM_FI_", "DCGM_EXP_")):
            continue
        name, kind, help_text = next(csv.reader([text], skipinitialspace=True))
        counters[name.strip()] = (kind.strip(), help_text.strip())
    return counters


def test_every_dcgm_family_has_the_counters_file_type_and_help() -> None:
    """The reference file is 4.8.2's: every field of generation 4.5's defaults is in it, as we declare it."""
    counters = shared_counters()
    for family in (*default_families(Generation.V4_5), *LABEL_FAMILIES):
        assert counters.get(family.name) == (family.metric_type, family.help), family.name


@pytest.mark.parametrize("capture", ["fixture-linux-2gpu-mig", "fixture-windows-1gpu"])
def test_every_served_family_has_the_counters_file_type_and_help(capture: str) -> None:
    counters = shared_counters()
    lines = (GOLDEN / f"{capture}.prom").read_text(encoding="utf-8").splitlines()
    helps = {line.split(" ", 3)[2]: line.split(" ", 3)[3] for line in lines if line.startswith("# HELP ")}
    types = {line.split(" ")[2]: line.split(" ")[3] for line in lines if line.startswith("# TYPE ")}
    assert helps.keys() == types.keys()
    assert helps
    for name, help_text in helps.items():
        assert counters[name] == (types[name], help_text), name
    assert counters["DCGM_FI_DRIVER_VERSION"][0] == "label"  # why it is a label on every series, not a family


def test_the_counters_file_checks_skip_with_a_reason_when_the_reference_data_is_absent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "DCGM_SHARED", tmp_path / "dcgm")
    with pytest.raises(pytest.skip.Exception, match="dcgm-exporter's reference data is not beside this checkout"):
        shared_counters()


NVML_DEVICE = ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
PCIE = ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            GpuExtras(UUID, pcie_replay_count=7.0),
            [f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{LABELS}}} 7"],
            id="replay-counter-as-nvml-counts-it",
        ),
        pytest.param(
            GpuExtras(UUID, nvlink_mib_per_second=2400.0),
            [f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{LABELS}}} 2400"],
            id="nvlink-bandwidth-in-dcgms-mib-per-second",
        ),
        pytest.param(
            GpuExtras(UUID, pcie_tx_bytes_per_second=1234000.0, pcie_rx_bytes_per_second=5678000.0),
            [f"DCGM_FI_PROF_PCIE_TX_BYTES{{{LABELS}}} 1234000", f"DCGM_FI_PROF_PCIE_RX_BYTES{{{LABELS}}} 5678000"],
            id="pcie-rates-in-bytes-per-second",
        ),
        pytest.param(GpuExtras(UUID), [], id="unread-is-absent"),
    ],
)
def test_nvml_device_readings_are_served_in_dcgms_names_and_units(extra: GpuExtras, expected: list[str]) -> None:
    fields, snapshot = gpm_snapshot(NvmlExtras(gpus=(extra,)))
    text = DcgmExposition(fields, hostname="node-1", generation=PINNED).render(snapshot)
    assert [line for line in samples(text) if line.startswith((*NVML_DEVICE, *PCIE))] == expected


@pytest.mark.parametrize(
    ("name", "metric_type"),
    [
        pytest.param("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", id="replay-is-a-counter"),
        pytest.param("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge", id="nvlink-is-a-gauge-as-4.8.3-types-it"),
        pytest.param("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", id="pcie-tx-is-a-gauge"),
        pytest.param("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", id="pcie-rx-is-a-gauge"),
    ],
)
def test_nvml_device_families_have_dcgms_type(name: str, metric_type: str) -> None:
    extra = GpuExtras(UUID, 1.0, 2.0, 3.0, pcie_replay_count=4.0, nvlink_mib_per_second=5.0)
    fields, snapshot = gpm_snapshot(NvmlExtras(gpus=(extra,)))
    assert f"# TYPE {name} {metric_type}\n" in DcgmExposition(fields, hostname="node-1", generation=PINNED).render(
        snapshot
    )


def test_no_nvml_device_series_on_a_backend_without_nvml_readings() -> None:
    """The exec backend (extras=False) serves none, even from readings that carry them."""
    extra = GpuExtras(UUID, 1.0, 2.0, 3.0, pcie_replay_count=4.0, nvlink_mib_per_second=5.0)
    fields, snapshot = gpm_snapshot(NvmlExtras(gpus=(extra,)))
    text = DcgmExposition(fields, hostname="node-1", energy=False, extras=False, generation=PINNED).render(snapshot)
    assert not [line for line in samples(text) if line.startswith((*NVML_DEVICE, *PCIE))]


def test_a_gpu_instance_serves_its_own_pcie_rates_and_its_gpus_device_counters() -> None:
    extras = NvmlExtras(
        gpus=(GpuExtras(UUID, pcie_tx_bytes_per_second=9.0, pcie_replay_count=2.0, nvlink_mib_per_second=8.0),),
        mig_devices=(MigDevice(UUID, "MIG-aaaaaaaa-0000-4000-8000-000000000002", 2, 0, "3g.40gb"),),
        mig_instances=(MigInstanceReading(UUID, 2, pcie_tx_bytes_per_second=104857600.0),),
    )
    fields, snapshot = gpm_snapshot(extras)
    text = DcgmExposition(fields, hostname="node-1", generation=PINNED).render(snapshot)
    mig_labels = LABELS.replace(",hostname=", ',GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",hostname=')
    assert [line for line in samples(text) if line.startswith((*NVML_DEVICE, *PCIE))] == [
        f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{mig_labels}}} 2",
        f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{mig_labels}}} 8",
        f"DCGM_FI_PROF_PCIE_TX_BYTES{{{mig_labels}}} 104857600",
    ]
