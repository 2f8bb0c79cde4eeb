"""Issue 27's NVML gaps: the clock event counters' unit, DCGM_EXP_P2P_STATUS, fabric health on NVSwitch systems and
the NVML supplement's failures as a self-metric (docs/dcgm.md)."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.model.snapshot import Readings
from nvml_fixtures import InProcessFake


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
