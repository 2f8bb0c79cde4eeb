"""Issue 27: the opt-in fields of dcgm-exporter's newest shipped counters files that NVML can give: the fabric health
mask and summary (NVSwitch systems) and the retired-page pending status (docs/dcgm.md)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nvidia_gpu_exporter.backends.demo.extras import ExtrasSynthesizer, parse_extras
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, open_supplement
from nvidia_gpu_exporter.exposition.dcgm import LEGACY_NAMES, DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import parse_counters
from nvidia_gpu_exporter.model.fabric import HEALTHY_FABRIC_MASK, FabricHealthSummary
from nvidia_gpu_exporter.model.snapshot import Attempt, GpuExtras, GpuTable, NvmlExtras, Readings, Snapshot
from nvml_fixtures import InProcessFake
from test_exec_nvml_supplement import SAME_GPUS, exec_backend
from test_unit_dcgm import IDENTITY, UUID, samples
from unit_helpers import gpu_row, query_fields, success_snapshot

GPU = 'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
GPU += 'modelName="NVIDIA A100-SXM4-80GB",hostname="node-1"'
HEALTH_COUNTERS = "DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, m\nDCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, s\n"
FIELDS = query_fields([("driver_version", "driver_version")])


def render_health(extras: GpuExtras, *, nvml: bool = True) -> list[str]:
    row = gpu_row(FIELDS, **{**IDENTITY, "driver_version": "550.54.15"})
    readings = Readings(GpuTable((row,)), None, "12.4", NvmlExtras(gpus=(extras,)))
    exposition = DcgmExposition(FIELDS, "node-1", counters=parse_counters(HEALTH_COUNTERS, "c.csv"), extras=nvml)
    return samples(exposition.render(Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0)))


# -- fabric health ------------------------------------------------------------------------------------------------


def test_the_fabric_health_mask_and_summary_are_nvmls_values_as_dcgm_reads_them() -> None:
    """DCGM's ReadFabricManagerStatusField appends NVML's healthMask and (v3) healthSummary unchanged."""
    lines = render_health(GpuExtras(UUID, fabric_health_mask=426.0, fabric_health_summary=2.0))
    assert lines == [f"DCGM_FI_DEV_FABRIC_HEALTH_MASK{{{GPU}}} 426", f"DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY{{{GPU}}} 2"]


def test_a_gpu_nvml_gives_no_fabric_health_has_no_series() -> None:
    """NVML's error (a PCIe GPU), or a v2-only driver's summary (DCGM's NOT_SUPPORTED blank): no sample."""
    assert render_health(GpuExtras(UUID, fabric_health_mask=426.0)) == [f"DCGM_FI_DEV_FABRIC_HEALTH_MASK{{{GPU}}} 426"]
    assert render_health(GpuExtras(UUID)) == []


def test_the_fabric_health_fields_need_nvml(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert render_health(GpuExtras(UUID, fabric_health_mask=1.0), nvml=False) == []
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert "DCGM_FI_DEV_FABRIC_HEALTH_MASK (line 1: needs the nvml or demo backend)" in warning.__dict__["fields"]


def test_the_healthy_mask_is_every_health_bit_saying_no_trouble() -> None:
    """Degraded bandwidth, route recovery, route unhealthy and access timeout recovery each FALSE (2), incorrect
    configuration NONE (1), at NVML's shifts 0, 2, 4, 6 and 8."""
    assert HEALTHY_FABRIC_MASK == 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
    assert int(FabricHealthSummary.HEALTHY) == 1


def test_the_demo_serves_a_healthy_fabrics_health() -> None:
    extras = ExtrasSynthesizer(parse_extras(None), 1).cycle(1.0, [UUID], [100.0])
    assert (extras.gpus[0].fabric_health_mask, extras.gpus[0].fabric_health_summary) == (426.0, 1.0)


def collect_nvml_extras() -> GpuExtras:
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True)
    try:
        readings = backend.collect_blocking()
    finally:
        backend.session.close(5)
    assert readings.extras is not None
    return readings.extras.gpus[0]


def test_the_nvml_backend_reads_the_v3_fabric_struct(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset h200", "set 0 fabric_health_mask 426", "set 0 fabric_health_summary 3")
    gpu = collect_nvml_extras()
    assert (gpu.fabric_health_mask, gpu.fabric_health_summary) == (426.0, 3.0)


def test_a_driver_without_the_v3_struct_gives_the_mask_alone(fake_nvml: InProcessFake) -> None:
    """DCGM falls back to v2 on ARGUMENT_VERSION_MISMATCH and reports the summary NOT_SUPPORTED."""
    fake_nvml.command("reset h200", "set 0 fabric_health_mask 426", "set 0 fabric_v2_only 1")
    gpu = collect_nvml_extras()
    assert (gpu.fabric_health_mask, gpu.fabric_health_summary) == (426.0, None)


def test_a_gpu_without_fabric_info_has_no_health_readings(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset h200", "rc nvmlDeviceGetGpuFabricInfoV 3 0")  # NOT_SUPPORTED
    gpu = collect_nvml_extras()
    assert (gpu.fabric_health_mask, gpu.fabric_health_summary) == (None, None)


# -- retired pages pending ----------------------------------------------------------------------------------------

PENDING_FIELDS = query_fields([("retired_pages.pending", "retired_pages.pending")])


@pytest.mark.parametrize(("cell", "value"), [("Yes", "1"), ("No", "0")])
def test_retired_pending_is_nvmls_pending_status_as_one_or_zero(cell: str, value: str) -> None:
    """DCGM reads nvmlDeviceGetRetiredPagesPendingStatus (an enable state): 1 pending, 0 not, as nvidia-smi's
    Yes/No and dcgm-exporter's newest HELP text say."""
    counters = parse_counters("DCGM_FI_DEV_RETIRED_PENDING, gauge, p\n", "c.csv")
    row = gpu_row(PENDING_FIELDS, **{**IDENTITY, "retired_pages_pending": cell})
    text = DcgmExposition(PENDING_FIELDS, "node-1", counters=counters).render(success_snapshot([row]))
    assert samples(text) == [f"DCGM_FI_DEV_RETIRED_PENDING{{{GPU}}} {value}"]


def test_retired_pending_under_its_1x_name() -> None:
    assert LEGACY_NAMES["dcgm_retired_pages_pending"] == "DCGM_FI_DEV_RETIRED_PENDING"


# -- on the exec backend, through NVML ----------------------------------------------------------------------------


def test_the_exec_backend_reads_fabric_health_and_placements_through_nvml(fake_nvml: InProcessFake) -> None:
    fake_nvml.command(*SAME_GPUS, "set 0 fabric_health_mask 426", "set 0 fabric_health_summary 1")
    supplemented = NvmlSupplemented(exec_backend(), open_supplement(mig_placements=True))  # --kubernetes.dra-claims
    try:
        readings = asyncio.run(supplemented.collect())
    finally:
        asyncio.run(supplemented.aclose())
    assert readings.extras is not None
    gpu = readings.extras.gpus[0]
    assert (gpu.fabric_health_mask, gpu.fabric_health_summary) == (426.0, 1.0)
    assert {device.placement for device in readings.extras.mig_devices} == {(2, 0, 4), (0, 6, 1)}
