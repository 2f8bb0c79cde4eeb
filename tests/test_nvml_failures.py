"""Failure semantics of the nvml backend (docs/compatibility.md, "The nvml backend"), each pinned by a test.

In-process against the fake libnvidia-ml loaded by the real bindings: zero devices, lifecycle errors and
re-init, a collection stuck in the driver, unreadable fields, soft per-process and extras failures, and
startup refusals.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from nvidia_gpu_exporter.app import build_backend
from nvidia_gpu_exporter.backends import BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import STILL_IN_PROGRESS, NvmlBackend, open_backend
from nvidia_gpu_exporter.backends.nvml.api import GPU_IS_LOST
from nvidia_gpu_exporter.backends.nvml.backend import nvlink_bandwidth, nvlink_throughput_bytes
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Backend as BackendName
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.model.snapshot import Readings
from nvml_fixtures import InProcessFake

GPU_IS_LOST_CODE = 15
DRIVER_NOT_LOADED = 9


@pytest.fixture
def backend(fake_nvml: InProcessFake) -> Iterator[NvmlBackend]:
    """A backend on the fake's current scenario, without the XID thread; closed by the test's teardown."""
    opened = open_backend(FieldRequest(), watch_xids=False, compute_apps=True)
    yield opened
    opened.session.close(5)


def cell(backend: NvmlBackend, readings: Readings, field: str, gpu: int = 0) -> str:
    return readings.gpus.rows[gpu][[f.qfield for f in backend.fields].index(field)]


def test_zero_devices_is_a_failed_collection_with_code_minus_one(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command("count 0")
    with pytest.raises(CollectionError) as raised:
        backend.collect_blocking()
    assert raised.value.status_code == -1
    assert not raised.value.fatal


def test_a_lost_gpu_fails_the_cycle_as_fatal_and_nvml_is_reinitialized(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command("reset lost")  # GPU 1 is lost during cycles 2 and 3, then recovers
    assert len(backend.collect_blocking().gpus.rows) == 2
    inits = fake_nvml.calls("nvmlInitWithFlags")
    with pytest.raises(CollectionError) as raised:
        backend.collect_blocking()
    assert (raised.value.status_code, raised.value.fatal, raised.value.exit_code) == (GPU_IS_LOST_CODE, True, 1)
    assert backend.session.needs_reinit
    with pytest.raises(CollectionError):  # still lost, after a re-init
        backend.collect_blocking()
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 1
    recovered = backend.collect_blocking()
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 2
    assert len(recovered.gpus.rows) == 2
    assert fake_nvml.refcount() == 1  # every re-init shut the old session down first


def test_a_failed_reinit_is_fatal_with_its_return_code(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    fake_nvml.command("lose 0")
    with pytest.raises(CollectionError):
        backend.collect_blocking()
    fake_nvml.command("recover 0", f"rc nvmlInitWithFlags {DRIVER_NOT_LOADED}")
    with pytest.raises(CollectionError) as raised:
        backend.collect_blocking()
    assert (raised.value.status_code, raised.value.fatal) == (DRIVER_NOT_LOADED, True)
    assert "failed to re-initialize NVML: ERROR_DRIVER_NOT_LOADED" in str(raised.value)
    fake_nvml.command("rc nvmlInitWithFlags 0")
    assert backend.collect_blocking().gpus.rows


def test_a_non_lifecycle_count_failure_fails_the_cycle_with_its_code(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command("rc nvmlDeviceGetCount_v2 999")
    with pytest.raises(CollectionError) as raised:
        backend.collect_blocking()
    assert (raised.value.status_code, raised.value.fatal) == (999, False)
    assert not backend.session.needs_reinit


def test_unsupported_and_forbidden_fields_are_absent_and_warned_about_once(
    fake_nvml: InProcessFake, backend: NvmlBackend, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.command("rc nvmlDeviceGetEccMode 4", "rc nvmlDeviceGetC2cModeInfoV 13", "rc nvmlDeviceGetFanSpeed 3")
    with caplog.at_level(logging.WARNING):
        readings = backend.collect_blocking()
        backend.collect_blocking()
    assert cell(backend, readings, "ecc.mode.current") == "[Insufficient Permissions]"
    assert cell(backend, readings, "c2c.mode") == "[Function Not Found]"
    assert cell(backend, readings, "fan.speed") == "[N/A]"
    warnings = [record for record in caplog.records if "cannot be read" in record.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].fields == "c2c.mode,ecc.mode.current,ecc.mode.pending"  # type: ignore[attr-defined]


def test_an_unknown_return_code_is_an_unknown_error_cell_not_a_failure(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command("rc nvmlDeviceGetTemperatureV 12345")
    assert cell(backend, backend.collect_blocking(), "temperature.gpu") == "[Unknown Error]"


def test_lifecycle_error_in_a_field_getter_is_fatal(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    fake_nvml.command(f"rc nvmlDeviceGetPowerUsage {GPU_IS_LOST}")
    with pytest.raises(CollectionError) as raised:
        backend.collect_blocking()
    assert raised.value.fatal
    assert raised.value.status_code == GPU_IS_LOST


def test_per_process_failures_are_soft(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    fake_nvml.command("rc nvmlDeviceGetComputeRunningProcesses_v3 4")
    readings = backend.collect_blocking()
    assert readings.processes is not None
    assert not readings.processes.succeeded
    assert readings.gpus.rows


def test_lifecycle_errors_in_soft_parts_keep_the_cycle_but_schedule_a_reinit(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command(f"rc nvmlDeviceGetTotalEnergyConsumption {GPU_IS_LOST}")
    readings = backend.collect_blocking()
    assert readings.extras is not None
    assert readings.extras.gpus[0].energy_joules is None
    assert backend.session.needs_reinit
    inits = fake_nvml.calls("nvmlInitWithFlags")
    backend.collect_blocking()
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 1


def test_energy_and_pcie_extras(fake_nvml: InProcessFake) -> None:
    opened = open_backend(FieldRequest(), watch_xids=False, pcie_throughput=True)
    try:
        extras = opened.collect_blocking().extras
    finally:
        opened.session.close(5)
    assert extras is not None
    gpu = extras.gpus[0]
    assert (gpu.energy_joules, gpu.pcie_tx_bytes_per_second, gpu.pcie_rx_bytes_per_second) == (
        123456.789,
        1234000.0,
        5678000.0,
    )
    assert extras.mig_devices == ()
    assert extras.mig_instances == ()


def test_pcie_throughput_is_not_sampled_without_the_flag(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    extras = backend.collect_blocking().extras
    assert extras is not None
    assert extras.gpus[0].pcie_tx_bytes_per_second is None
    assert fake_nvml.calls("nvmlDeviceGetPcieThroughput") == 0


def test_a_garbage_mig_slot_count_does_not_spin_the_cycle(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    fake_nvml.command("reset mig", "set 0 max_mig 100000")
    fake_nvml.reset_calls()
    extras = backend.collect_blocking().extras
    assert extras is not None
    assert len(extras.mig_devices) == 3
    assert fake_nvml.calls("nvmlDeviceGetMigDeviceHandleByIndex") <= 64


def test_cuda_version_is_reread_and_the_last_good_value_kept(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    assert backend.collect_blocking().cuda_version == "13.1"
    fake_nvml.command("cuda 13020")
    assert backend.collect_blocking().cuda_version == "13.2"
    fake_nvml.command("rc nvmlSystemGetCudaDriverVersion 999")
    assert backend.collect_blocking().cuda_version == "13.2"


def test_a_collection_stuck_in_the_driver_is_abandoned_and_later_ones_fail_fast(fake_nvml: InProcessFake) -> None:
    """The stuck thread is not piled on; the cycle after it returns works again."""
    opened = open_backend(FieldRequest(), watch_xids=False)

    async def main() -> None:
        collector = Collector(opened, timeout_seconds=0.2)
        fake_nvml.command("delay nvmlDeviceGetTemperatureV 1500")
        first = await collector.scrape()
        assert first.attempt is not None
        assert first.attempt.status_code == -1
        assert "timed out" in (first.attempt.error or "")
        second = await collector.scrape()
        assert second.attempt is not None
        assert second.attempt.status_code == -1
        assert second.attempt.error == STILL_IN_PROGRESS
        fake_nvml.command("delay nvmlDeviceGetTemperatureV 0")
        worker = opened._worker
        assert worker is not None
        await asyncio.to_thread(worker.join)
        third = await collector.scrape()
        assert third.attempt is not None
        assert third.attempt.succeeded
        assert third.failed_collections == 2
        await opened.aclose()

    asyncio.run(main())
    assert fake_nvml.refcount() == 0


def test_back_to_back_collections_never_see_the_previous_one_in_progress(fake_nvml: InProcessFake) -> None:
    """The busy flag is down before a cycle's result is published, so the next cycle can start at once."""
    opened = open_backend(FieldRequest("temperature.gpu"), watch_xids=False)

    async def main() -> None:
        for _ in range(50):
            await opened.collect()
        await opened.aclose()

    asyncio.run(main())


def test_mig_devices_instances_and_gpm_windows(fake_nvml: InProcessFake) -> None:
    """First sight seeds; a window under 1 s repeats; a real window computes; > 10 min or new devices reseed."""
    now = [1000.0]
    fake_nvml.command("reset mig")
    opened = open_backend(FieldRequest(), watch_xids=False, gpm_clock=lambda: now[0])
    try:
        first = opened.collect_blocking().extras
        assert first is not None
        assert sorted((d.gpu_instance_id, d.compute_instance_id, d.profile) for d in first.mig_devices) == [
            (2, 0, "1c.3g.71gb"),
            (2, 1, "1c.3g.71gb"),
            (7, 0, "1g.18gb"),
        ]
        assert all(d.mig_uuid.startswith("MIG-") for d in first.mig_devices)
        instance = {reading.gpu_instance_id: reading for reading in first.mig_instances}
        assert instance[2].memory_total_bytes == 71 * 1024 * 1048576.0
        assert instance[2].memory_used_bytes == 10 * 1024 * 1048576.0
        assert instance[2].sm_activity_ratio is None  # seeded only

        now[0] += 0.5
        quick = opened.collect_blocking().extras
        assert quick is not None
        assert {r.gpu_instance_id: r.sm_activity_ratio for r in quick.mig_instances} == {
            2: None,
            7: None,
        }

        now[0] += 15
        window = opened.collect_blocking().extras
        assert window is not None
        computed = {r.gpu_instance_id: r for r in window.mig_instances}
        assert (computed[2].graphics_activity_ratio, computed[2].sm_activity_ratio) == (0.455, 0.4025)
        assert (computed[2].sm_occupancy_ratio, computed[2].tensor_activity_ratio) == (0.3, 0.125)
        assert computed[2].pcie_tx_bytes_per_second == 100.0 * 1048576
        assert computed[2].pcie_rx_bytes_per_second == 200.0 * 1048576

        now[0] += 0.5
        repeated = opened.collect_blocking().extras
        assert repeated is not None
        assert {r.gpu_instance_id: r.sm_activity_ratio for r in repeated.mig_instances}[2] == 0.4025

        fake_nvml.command("gpmrc 5 3")  # tensor activity fails: only that series goes
        now[0] += 15
        partial = {r.gpu_instance_id: r for r in (opened.collect_blocking().extras or first).mig_instances}
        assert partial[2].tensor_activity_ratio is None
        assert partial[2].sm_activity_ratio == 0.4025

        now[0] += 601
        stale = opened.collect_blocking().extras
        assert stale is not None
        assert all(r.sm_activity_ratio is None for r in stale.mig_instances)

        fake_nvml.command("mig 0 7 1 1c.1g.18gb 1 0")  # GI 7 gains a compute instance: its membership changed
        now[0] += 15
        changed = {r.gpu_instance_id: r for r in (opened.collect_blocking().extras or first).mig_instances}
        assert changed[7].sm_activity_ratio is None
        assert changed[2].sm_activity_ratio == 0.4025
    finally:
        opened.session.close(5)


def test_whole_gpu_gpm_windows_only_where_gpm_is_supported(fake_nvml: InProcessFake) -> None:
    """A whole GPU's GPM ratios from the second collection on; none on a MIG GPU, nor where GPM is unsupported."""
    now = [1000.0]
    fake_nvml.command("reset mig", "gpmdev 1 45.5 12.5 30")
    opened = open_backend(FieldRequest(), watch_xids=False, gpm_clock=lambda: now[0], gpm_whole_gpus=True)

    def activity() -> list[tuple[float | None, float | None, float | None]]:
        extras = opened.collect_blocking().extras
        assert extras is not None
        return [(g.graphics_activity_ratio, g.tensor_activity_ratio, g.dram_activity_ratio) for g in extras.gpus]

    try:
        assert activity() == [(None, None, None), (None, None, None)]  # seeded only
        now[0] += 15
        assert activity() == [(None, None, None), (0.455, 0.125, 0.3)]  # GPU 0 is in MIG mode
        fake_nvml.command("gpmrc 10 3")  # the DRAM metric fails: only that value goes
        now[0] += 15
        assert activity()[1] == (0.455, 0.125, None)
        fake_nvml.command("set 1 gpm_supported 0")
        now[0] += 15
        assert activity()[1] == (None, None, None)
        assert fake_nvml.calls("nvmlGpmSampleGet") == 3
    finally:
        opened.session.close(5)


@pytest.mark.parametrize(("scenario", "whole_gpus"), [("rtx", True), ("h200", False)])
def test_no_whole_gpu_gpm_on_a_gpu_without_gpm_or_unless_asked(
    fake_nvml: InProcessFake, scenario: str, whole_gpus: bool
) -> None:
    """A GPU without GPM (the RTX) has no values; without the DCGM profile (the default) no sample is taken."""
    now = [1000.0]
    fake_nvml.command(f"reset {scenario}", "gpmdev 0 45.5 12.5 30")
    opened = open_backend(FieldRequest(), watch_xids=False, gpm_clock=lambda: now[0], gpm_whole_gpus=whole_gpus)
    try:
        for _ in range(2):
            extras = opened.collect_blocking().extras
            assert extras is not None
            assert extras.gpus[0].tensor_activity_ratio is None
            now[0] += 15
        assert fake_nvml.calls("nvmlGpmSampleGet") == 0
    finally:
        opened.session.close(5)


def test_startup_refuses_a_library_that_fails_to_initialize(fake_nvml: InProcessFake) -> None:
    fake_nvml.command(f"rc nvmlInitWithFlags {DRIVER_NOT_LOADED}")
    with pytest.raises(BackendSetupError) as raised:
        open_backend(FieldRequest(), watch_xids=False)
    assert str(raised.value) == "failed to initialize NVML: ERROR_DRIVER_NOT_LOADED"


def test_startup_leaves_the_event_loop_turning_while_nvml_initializes(fake_nvml: InProcessFake) -> None:
    """``nvmlInit`` can block for seconds on a sick driver: the loop (signals, the other startup work) goes on."""
    fake_nvml.command("delay nvmlInitWithFlags 2000")

    async def main() -> bool:
        starting = asyncio.create_task(build_backend(Config(backend=BackendName.NVML), watch_xids=False))
        for _ in range(3):
            await asyncio.sleep(0)
        turned_meanwhile = not starting.done()
        await (await starting).aclose()
        return turned_meanwhile

    assert asyncio.run(main())
    assert fake_nvml.calls("nvmlInitWithFlags") == 1


def test_startup_refuses_unsupported_explicit_fields_and_shuts_nvml_down(fake_nvml: InProcessFake) -> None:
    with pytest.raises(BackendSetupError) as raised:
        open_backend(FieldRequest("fan.speed,kmd_version"), watch_xids=False)
    assert str(raised.value) == 'query field "kmd_version" is not supported by this backend'
    assert fake_nvml.refcount() == 0


def test_aclose_stops_the_watcher_and_shuts_nvml_down(fake_nvml: InProcessFake) -> None:
    opened = open_backend(FieldRequest())
    assert opened.watcher is not None

    async def main() -> None:
        await opened.collect()
        await opened.aclose()
        with pytest.raises(CollectionError):
            await opened.collect()

    asyncio.run(main())
    assert not opened.watcher.alive
    assert fake_nvml.refcount() == 0


@pytest.mark.parametrize(
    ("commands", "dcgm_readings", "expected", "replay_calls"),
    [
        pytest.param((), True, (3.0, 0.0), 1, id="read-under-the-dcgm-profile-nvlink-0-on-its-first-reading"),
        pytest.param((), False, (None, None), 0, id="not-read-under-the-nvidia-smi-profile"),
        pytest.param(("fieldrc 0 139 3",), True, (3.0, None), 1, id="one-nvlink-field-failing-drops-only-nvlink"),
        pytest.param(("rc nvmlDeviceGetPcieReplayCounter 3",), True, (None, 0.0), 1, id="replay-failing"),
    ],
)
def test_pcie_replays_and_nvlink_bandwidth_only_for_the_dcgm_profile(
    fake_nvml: InProcessFake,
    commands: tuple[str, ...],
    dcgm_readings: bool,
    expected: tuple[float | None, float | None],
    replay_calls: int,
) -> None:
    fake_nvml.command("reset h200", *commands)
    opened = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=dcgm_readings)
    try:
        extras = opened.collect_blocking().extras
        assert extras is not None
        assert (extras.gpus[0].pcie_replay_count, extras.gpus[0].nvlink_mib_per_second) == expected
        assert fake_nvml.calls("nvmlDeviceGetPcieReplayCounter") == replay_calls
    finally:
        opened.session.close(5)


@pytest.mark.parametrize(
    ("previous", "total", "stamp", "expected"),
    [
        pytest.param(None, 3000, 5_000_000, 0.0, id="first-reading-is-0-as-dcgm"),
        pytest.param((1000, 1_000_000), 0, 2_000_000, 0.0, id="counters-reading-0-give-0"),
        pytest.param((1000, 1_000_000), 5000, 1_000_000, 0.0, id="no-time-passed-gives-0"),
        pytest.param((1000, 1_000_000), 1_001_000, 2_000_000, 1000.0, id="kib-per-second-over-1000"),
        pytest.param((1000, 1_000_000), 3999, 3_000_000, 1.0, id="truncated-to-a-whole-number"),
        pytest.param((5_000_000, 1_000_000), 1000, 2_000_000, -4999.0, id="a-counter-reset-as-dcgm-computes-it"),
    ],
)
def test_nvlink_bandwidth_is_computed_as_dcgm_does(
    previous: tuple[int, int] | None, total: int, stamp: int, expected: float
) -> None:
    assert nvlink_bandwidth(previous, total, stamp) == expected


@pytest.mark.parametrize(
    ("previous", "total", "stamp", "expected"),
    [
        pytest.param(None, 3000, 5_000_000, 0.0, id="first-reading-is-0"),
        pytest.param((1000, 1_000_000), 0, 2_000_000, 0.0, id="counters-reading-0-give-0"),
        pytest.param((1000, 1_000_000), 5000, 1_000_000, 0.0, id="no-time-passed-gives-0"),
        pytest.param((1000, 1_000_000), 3999, 3_000_000, 1499.5 * 1024, id="kib-per-second-in-bytes-untruncated"),
    ],
)
def test_nvlink_throughput_in_bytes_is_the_kib_per_second_times_1024(
    previous: tuple[int, int] | None, total: int, stamp: int, expected: float
) -> None:
    assert nvlink_throughput_bytes(previous, total, stamp) == expected


def test_nvlink_bandwidth_is_the_data_moved_between_two_collections(fake_nvml: InProcessFake) -> None:
    """The payload counters only (fields 138 and 139), summed over TX and RX, against the previous reading."""
    fake_nvml.command("reset h200", "set 0 nvlink_raw_tx_kib 999999999")  # protocol overhead: never counted
    opened = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True)
    try:
        first = opened.collect_blocking().extras
        fake_nvml.command("set 0 nvlink_data_tx_kib 1000000000", "set 0 nvlink_data_rx_kib 1000000000")
        second = opened.collect_blocking().extras
        assert first is not None
        assert second is not None
        assert first.gpus[0].nvlink_mib_per_second == first.gpus[0].nvlink_bytes_per_second == 0.0
        assert (second.gpus[0].nvlink_mib_per_second or 0.0) > 0.0
        assert (second.gpus[0].nvlink_bytes_per_second or 0.0) > (second.gpus[0].nvlink_mib_per_second or 0.0) * 1e6
    finally:
        opened.session.close(5)
