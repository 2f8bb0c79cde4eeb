"""Issue 27's NVML gaps: the clock event counters' unit, DCGM_EXP_P2P_STATUS, fabric health on NVSwitch systems and
the NVML supplement's failures as a self-metric (docs/dcgm.md)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.backend import STILL_IN_PROGRESS
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, failure_reason
from nvidia_gpu_exporter.model.snapshot import Readings
from nvml_fixtures import InProcessFake
from test_docs import served_families, undocumented
from test_exec_nvml_supplement import _supplemented  # noqa: F401 - the supplemented fixture
from unit_helpers import exposition as unit_exposition
from unit_helpers import success_snapshot


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
