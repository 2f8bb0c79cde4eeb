"""Issue 27's NVML gaps: the clock event counters' unit, DCGM_EXP_P2P_STATUS, fabric health on NVSwitch systems and
the NVML supplement's failures as a self-metric (docs/dcgm.md)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from harness import start_exporter
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.demo.extras import ExtrasSynthesizer, parse_extras
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.backend import STILL_IN_PROGRESS
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, failure_reason, open_supplement
from nvidia_gpu_exporter.exposition.dcgm import FABRIC_FAMILIES, DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import parse_counters
from nvidia_gpu_exporter.exposition.dcgm_p2p import link_status
from nvidia_gpu_exporter.model.fabric import fabric_manager_error, fabric_manager_status
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuExtras,
    GpuTable,
    NvmlExtras,
    P2PStatus,
    Readings,
    Snapshot,
)
from nvml_fixtures import ControlFile, FakeNvmlLibrary, InProcessFake
from test_docs import served_families, undocumented
from test_exec_nvml_supplement import (
    SAME_GPUS,
    UUIDS,
    _supplemented,  # noqa: F401 - the supplemented fixture
    exec_backend,
)
from test_unit_dcgm import IDENTITY, UUID, samples
from test_unit_dcgm_nvml_fields import docs_table
from unit_helpers import exposition as unit_exposition
from unit_helpers import gpu_row, query_fields, success_snapshot


def collect_nvml(*, dcgm_readings: bool = False) -> tuple[dict[str, str], Readings]:
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=dcgm_readings)
    try:
        readings = backend.collect_blocking()
    finally:
        backend.session.close(5)
    row = {field.qfield: cell for field, cell in zip(backend.fields, readings.gpus.rows[0], strict=True)}
    return row, readings


# NVML's clock event reason counters (field values) count nanoseconds, as DCGM's violation fields read field 74
# unscaled and document ns (dcgm_fields.h since DCGM 4.1.0; dcgm-exporter #589); nvidia-smi prints microseconds.
@pytest.mark.parametrize(
    ("fake_field", "qfield"),
    [
        ("fv_sw_power_cap", "clocks_event_reasons_counters.sw_power_cap"),
        ("fv_sync_boost", "clocks_event_reasons_counters.sync_boost"),
        ("fv_sw_thermal", "clocks_event_reasons_counters.sw_thermal_slowdown"),
        ("fv_hw_thermal", "clocks_event_reasons_counters.hw_thermal_slowdown"),
        ("fv_hw_power_brake", "clocks_event_reasons_counters.hw_power_brake_slowdown"),
    ],
)
def test_a_clock_event_counter_in_ns_is_printed_in_us(fake_nvml: InProcessFake, fake_field: str, qfield: str) -> None:
    fake_nvml.command("reset h200", f"set 0 {fake_field} 212553937999")
    row, _ = collect_nvml()
    assert row[qfield] == "212553937 us"


def test_the_power_violation_is_field_74_in_ns_unscaled(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset h200", "set 0 fv_sw_power_cap 212553937999")
    row, readings = collect_nvml(dcgm_readings=True)
    assert readings.extras is not None
    assert readings.extras.gpus[0].power_violation_ns == 212553937999.0
    assert row["clocks_event_reasons_counters.sw_power_cap"] == "212553937 us"  # one reading, two units


# -- the NVML supplement's failures (exec backend under the DCGM profile) ----------------------------------------


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (("rc nvmlDeviceGetCount_v2 3",), (("not_supported", 2),)),  # NVML's return code, without ERROR_
        (("rc nvmlDeviceGetCount_v2 15",), (("gpu_is_lost", 2),)),
        ((), ()),
    ],
)
def test_failed_supplement_cycles_are_counted_by_nvmls_return_code(
    supplemented: NvmlSupplemented, fake_nvml: InProcessFake, commands: tuple[str, ...], expected: object
) -> None:
    fake_nvml.command(*commands)
    asyncio.run(supplemented.collect())
    asyncio.run(supplemented.collect())
    assert supplemented.supplement_failures() == expected


def test_a_cycle_still_in_the_driver_counts_as_in_progress() -> None:
    assert failure_reason(CollectionError(STILL_IN_PROGRESS)) == "in_progress"
    assert failure_reason(CollectionError("NVML reports no GPUs", -1)) == "error"


def test_only_the_supplemented_backend_has_supplement_failures(supplemented: NvmlSupplemented) -> None:
    assert supplemented.inner.supplement_failures() is None
    assert supplemented.nvml.supplement_failures() is None


SUPPLEMENT_FAILURES = "nvidia_gpu_exporter_nvml_supplement_failures_total"


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        ((("gpu_is_lost", 1), ("not_supported", 3)), ['reason="gpu_is_lost"} 1', 'reason="not_supported"} 3']),
        ((), None),  # none failed yet: no series
        (None, None),  # no supplement
    ],
)
def test_the_supplement_failures_are_an_own_counter_served_under_every_profile(
    failures: tuple[tuple[str, int], ...] | None, expected: list[str] | None
) -> None:
    snapshot = replace(success_snapshot([]), supplement_failures=failures)
    exposition, _ = unit_exposition()
    text = exposition.render(snapshot)
    lines = [line.split("{", 1)[1] for line in text.splitlines() if line.startswith(SUPPLEMENT_FAILURES + "{")]
    if expected is None:
        assert SUPPLEMENT_FAILURES not in text
        return
    assert f"# TYPE {SUPPLEMENT_FAILURES} counter\n" in text
    assert lines == expected


def test_the_supplement_failures_family_is_documented() -> None:
    snapshot = replace(success_snapshot([]), supplement_failures=(("timeout", 1),))
    exposition, _ = unit_exposition()
    served = served_families(exposition.render(snapshot))
    assert SUPPLEMENT_FAILURES in served
    assert undocumented({SUPPLEMENT_FAILURES: served[SUPPLEMENT_FAILURES]}) == []


# -- DCGM_EXP_P2P_STATUS -------------------------------------------------------------------------------------------

UUID_1 = "GPU-8d42e1b5-0c9f-4a73-b2e6-5f17c3d9a804"
P2P_FIELDS = query_fields([("driver_version", "driver_version")])
GPU_0 = (
    f'gpu="0",UUID="{UUID}",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",'
    'hostname="node-1"'
)
GPU_1 = (
    GPU_0.replace('gpu="0"', 'gpu="1"').replace(UUID, UUID_1).replace("07:00", "0A:00").replace("nvidia0", "nvidia1")
)


def p2p_snapshot(p2p: P2PStatus | None) -> Snapshot:
    rows = tuple(
        gpu_row(P2P_FIELDS, **{**IDENTITY, "index": str(index), "uuid": uuid, "pci.bus_id": bus})
        for index, (uuid, bus) in enumerate(((UUID, "00000000:07:00.0"), (UUID_1, "00000000:0A:00.0")))
    )
    extras = NvmlExtras(gpus=(GpuExtras(UUID), GpuExtras(UUID_1)), p2p=p2p)
    return Snapshot(Attempt(Readings(GpuTable(rows), None, "12.4", extras), 0, 0.1, 1.0), 0, 1.0)


def p2p_exposition(extras: bool = True) -> DcgmExposition:
    counters = parse_counters("DCGM_EXP_P2P_STATUS, counter, P2P NvLink status\n", "c.csv")
    return DcgmExposition(P2P_FIELDS, "node-1", counters=counters, extras=extras)


def test_p2p_status_is_one_series_per_ordered_gpu_pair_with_dcgm_exporters_labels() -> None:
    """p2p_status_collector.go: every GPU to every other, peer_gpu and link_status after the GPU's labels (Go's
    template writes its label map in key order), the value the status code."""
    text = p2p_exposition().render(p2p_snapshot(P2PStatus((UUID, UUID_1), ((0, 3), (0, 0)))))
    assert "# HELP DCGM_EXP_P2P_STATUS P2P NvLink status\n# TYPE DCGM_EXP_P2P_STATUS counter\n" in text
    assert samples(text) == [
        f'DCGM_EXP_P2P_STATUS{{{GPU_0},link_status="TopologyNotSupported",peer_gpu="1"}} 3',
        f'DCGM_EXP_P2P_STATUS{{{GPU_1},link_status="OK",peer_gpu="0"}} 0',
    ]


@pytest.mark.parametrize(
    ("status", "word"),
    [
        (0, "OK"),
        (1, "ChipsetNotSupported"),
        (2, "GPUNotSupported"),
        (3, "TopologyNotSupported"),
        (4, "DisabledByRegKey"),
        (5, "NotSupported"),
        (6, "Unknown"),
        (99, "Unknown"),  # p2pStatusToString's default
    ],
)
def test_each_p2p_status_is_named_as_dcgm_exporter_names_it(status: int, word: str) -> None:
    assert link_status(status) == word


def test_no_p2p_series_where_nvml_did_not_answer_for_every_pair() -> None:
    assert samples(p2p_exposition().render(p2p_snapshot(None))) == []


def test_p2p_status_is_served_only_when_the_counters_file_lists_it() -> None:
    served = DcgmExposition(P2P_FIELDS, "node-1").render(p2p_snapshot(P2PStatus((UUID, UUID_1), ((0, 0), (0, 0)))))
    assert "DCGM_EXP_P2P_STATUS" not in served


def test_p2p_status_without_nvml_readings_is_named_in_the_startup_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        p2p_exposition(extras=False)
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "DCGM_EXP_P2P_STATUS (line 1: needs NVML's P2P status" in warning.__dict__["fields"]


def test_the_nvml_backend_reads_the_nvlink_p2p_status_of_every_pair_when_asked(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset mig", "p2p 0 1 2 4", "p2p * * 0 5")  # NVLink index 2; the read index 0 is not asked
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True, p2p_status=True)
    try:
        readings = backend.collect_blocking()
    finally:
        backend.session.close(5)
    assert readings.extras is not None
    p2p = readings.extras.p2p
    assert p2p is not None
    assert p2p.uuids == tuple(gpu.gpu_uuid for gpu in readings.extras.gpus)
    assert [p2p.statuses[0][1], p2p.statuses[1][0]] == [4, 0]


@pytest.mark.parametrize(("asked", "commands"), [(False, ()), (True, ("rc nvmlDeviceGetP2PStatus 3",))])
def test_no_p2p_status_unless_asked_and_none_when_a_pair_fails(
    fake_nvml: InProcessFake, asked: bool, commands: tuple[str, ...]
) -> None:
    fake_nvml.command("reset mig", *commands)
    fake_nvml.reset_calls()
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True, p2p_status=asked)
    try:
        readings = backend.collect_blocking()
    finally:
        backend.session.close(5)
    assert readings.extras is not None
    assert readings.extras.p2p is None
    assert fake_nvml.calls("nvmlDeviceGetP2PStatus") == (1 if asked else 0)  # DCGM stops at the first failure


def test_the_exec_backends_supplement_reads_p2p_status_when_asked(fake_nvml: InProcessFake) -> None:
    fake_nvml.command(*SAME_GPUS)
    backend = NvmlSupplemented(exec_backend(), open_supplement(p2p_status=True))
    try:
        readings = asyncio.run(backend.collect())
    finally:
        asyncio.run(backend.aclose())
    assert readings.extras is not None
    assert readings.extras.p2p is not None
    assert readings.extras.p2p.uuids == UUIDS


def test_the_demo_simulates_an_nvlink_node_every_pair_ok() -> None:
    synthesizer = ExtrasSynthesizer(parse_extras(None), 1)
    extras = synthesizer.cycle(1.0, [UUID, UUID_1], [100.0, 100.0])
    assert extras.p2p == P2PStatus((UUID, UUID_1), ((0, 0), (0, 0)))


# -- fabric health on NVSwitch systems ---------------------------------------------------------------------------

FABRIC_FIELDS = query_fields(
    [
        ("fabric.state", "fabric.state"),
        ("fabric.status", "fabric.status"),
        ("fabric.cliqueId", "fabric.cliqueId"),
        ("fabric.clusterUuid", "fabric.clusterUuid"),
    ]
)
FABRIC_COUNTERS = (
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS, gauge, s\nDCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE, gauge, e\n"
    "DCGM_FI_DEV_FABRIC_CLIQUE_ID, gauge, c\nDCGM_FI_DEV_FABRIC_CLUSTER_UUID, label, u\n"
)
CLUSTER = "5b3c1e2a-9d8f-4c7b-a6e5-0f1d2c3b4a59"


def render_fabric(state: str, status: str, counters: str = FABRIC_COUNTERS) -> list[str]:
    cells = {"fabric_state": state, "fabric_status": status, "fabric_cliqueId": "7", "fabric_clusterUuid": CLUSTER}
    row = gpu_row(FABRIC_FIELDS, **{**IDENTITY, **cells})
    exposition = DcgmExposition(FABRIC_FIELDS, "node-1", counters=parse_counters(counters, "c.csv"))
    return [line.replace(GPU_0, "GPU") for line in samples(exposition.render(success_snapshot([row])))]


# DCGM's ReadFabricManagerStatusField / GetFMStatusFromStruct: dcgmFabricManagerStatus_t from NVML's fabric state,
# the error code (a DCGM return code) only once the state is completed.
@pytest.mark.parametrize(
    ("state", "status", "fm_status", "error_code"),
    [
        ("Completed", "Success", "3", "0"),  # DcgmFMStatusSuccess, DCGM_ST_OK
        ("Completed", "Not Supported", "4", "-6"),  # DcgmFMStatusFailure, NvmlReturnToDcgmReturn(NOT_SUPPORTED)
        ("Completed", "Timeout", "4", "-11"),
        ("Completed", "Some Future Error", "4", "-8"),  # the switch's default: DCGM_ST_NVML_ERROR
        ("In Progress", "N/A", "2", None),  # the error is blank before completion
        ("Not Started", "N/A", "1", None),
    ],
)
def test_the_fabric_manager_status_and_error_are_dcgms_encodings(
    state: str, status: str, fm_status: str, error_code: str | None
) -> None:
    lines = render_fabric(state, status)
    assert f'DCGM_FI_DEV_FABRIC_MANAGER_STATUS{{GPU,DCGM_FI_DEV_FABRIC_CLUSTER_UUID="{CLUSTER}"}} {fm_status}' in lines
    errors = [line for line in lines if line.startswith("DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE{")]
    assert errors == ([] if error_code is None else [errors[0].rsplit(" ", 1)[0] + f" {error_code}"])
    assert f'DCGM_FI_DEV_FABRIC_CLIQUE_ID{{GPU,DCGM_FI_DEV_FABRIC_CLUSTER_UUID="{CLUSTER}"}} 7' in lines


def test_a_gpu_without_fabric_has_no_fabric_series() -> None:
    """NVML's NOT_SUPPORTED (a PCIe GPU): nvidia-smi prints N/A and DCGM's fields are blank, which dcgm-exporter
    skips."""
    row = gpu_row(FABRIC_FIELDS, **{**IDENTITY, "fabric_state": "[N/A]", "fabric_status": "[N/A]"})
    exposition = DcgmExposition(FABRIC_FIELDS, "node-1", counters=parse_counters(FABRIC_COUNTERS, "c.csv"))
    assert samples(exposition.render(success_snapshot([row]))) == []


def test_the_error_field_is_served_under_its_dcgm_4_name_too() -> None:
    lines = render_fabric("Completed", "Success", "DCGM_FI_DEV_FABRIC_MANAGER_ERROR, gauge, e\n")
    assert lines == ["DCGM_FI_DEV_FABRIC_MANAGER_ERROR{GPU} 0"]


def test_the_fabric_fields_need_the_fabric_query_fields(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        DcgmExposition(P2P_FIELDS, "node-1", counters=parse_counters(FABRIC_COUNTERS, "c.csv"))
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "DCGM_FI_DEV_FABRIC_MANAGER_STATUS (line 1: fabric.state is not queried)" in warning.__dict__["fields"]


def test_the_docs_table_of_fabric_fields_is_the_code_s() -> None:
    rows = docs_table("<!-- fabric fields table -->", "<!-- end of fabric fields table -->")
    assert [(row[0], row[1]) for row in rows] == [(family.name, family.metric_type) for family in FABRIC_FAMILIES]


# -- through the real server -------------------------------------------------------------------------------------


def test_the_exporter_on_the_fake_nvml_serves_p2p_status_and_fabric_fields(
    fake_nvml_library: FakeNvmlLibrary, tmp_path: Path
) -> None:
    """The nvml backend on the fake's two H200s (fabric registered), GPU 0 to GPU 1 without NVLink P2P topology."""
    counters = tmp_path / "counters.csv"
    counters.write_text(FABRIC_COUNTERS + "DCGM_EXP_P2P_STATUS, counter, P2P NvLink status\n", encoding="utf-8")
    control = ControlFile(tmp_path / "control")
    control.send("p2p 0 1 2 3")
    exporter = start_exporter(
        ["--collect.backend=nvml", "--metrics.profile=dcgm", "--collect.xid-source=off", f"-f={counters}"],
        env={**fake_nvml_library.env("h200", control=control.path, gpus=2), "NODE_NAME": "node-1"},
    )
    try:
        text = exporter.scrape()
    finally:
        exporter.stop()
    p2p = [line for line in text.splitlines() if line.startswith("DCGM_EXP_P2P_STATUS{")]
    assert [line.split('hostname="node-1",', 1)[1] for line in p2p] == [
        'DCGM_FI_DEV_FABRIC_CLUSTER_UUID="00000000-0000-0000-0000-000000000000",link_status="TopologyNotSupported",'
        'peer_gpu="1"} 3',
        'DCGM_FI_DEV_FABRIC_CLUSTER_UUID="00000000-0000-0000-0000-000000000000",link_status="OK",peer_gpu="0"} 0',
    ]
    assert p2p[0].startswith('DCGM_EXP_P2P_STATUS{gpu="0",')
    assert len([line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FABRIC_MANAGER_STATUS{")]) == 2
    assert 'DCGM_FI_DEV_FABRIC_MANAGER_STATUS{gpu="0",' in text
    assert "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE{" in text


@pytest.mark.parametrize("status", ["[N/A]", "", "[Unknown Error]"])
def test_a_completed_registration_without_a_readable_status_is_neither_success_nor_failure(status: str) -> None:
    assert (fabric_manager_status("Completed", status), fabric_manager_error("Completed", status)) == (None, None)
