"""The nvml backend: one collection cycle reads libnvidia-ml in-process and renders nvidia-smi's text.

NVML calls are blocking C calls, so a cycle runs in a worker thread of its own. When the collector gives
up on it (timeout) the thread keeps going until the driver returns; until then further cycles fail at
once with ``a previous collection is still in progress`` rather than pile up threads stuck in the driver.
Lifecycle failures (GPU lost, driver gone) fail the cycle as fatal and schedule an NVML re-init for the
next one; fields a GPU cannot report are simply absent, exactly as their nvidia-smi text would be.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvidia_gpu_exporter._go.text import GO_SPACE
from nvidia_gpu_exporter.backends import BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError
from nvidia_gpu_exporter.backends.nvml.api import (
    DEPRECATED,
    FUNCTION_NOT_FOUND,
    NA_UINT64,
    NO_INSTANCE,
    NO_PERMISSION,
    NOT_FOUND,
    Failure,
    bindings_problem,
    call,
    exports,
    read_string,
    return_name,
)
from nvidia_gpu_exporter.backends.nvml.catalog import ResolvedField, resolve_fields
from nvidia_gpu_exporter.backends.nvml.mig import (
    DRAM,
    GRAPHICS,
    TENSOR,
    WHOLE_GPU,
    GpmSampler,
    PlacementCache,
    gpm_supported,
    percent_ratio,
    read_mig,
)
from nvidia_gpu_exporter.backends.nvml.session import NvmlSession
from nvidia_gpu_exporter.backends.nvml.sources import CYCLE_FIELDS, fabric_health, field_value, sources_for
from nvidia_gpu_exporter.backends.nvml.text import DEPRECATED_FIELDS, NA, Cell, mib, token
from nvidia_gpu_exporter.backends.nvml.xid import XidWatcher
from nvidia_gpu_exporter.model.snapshot import (
    DCGM_FIELD_COUNTERS,
    NVLINK_MAX_LINKS,
    GpuExtras,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvLinkReading,
    NvmlExtras,
    P2PStatus,
    ProcessList,
    ProcessRow,
    ProcessUsage,
    ProcessUsageRow,
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)

log = logging.getLogger(__name__)

STILL_IN_PROGRESS = "a previous collection is still in progress"
CLOSE_WAIT_SECONDS = 2.0
PCIE_KB = 1000.0  # NVML reports PCIe throughput in KB/s
# nvmlDeviceGetFieldValues: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX and _DATA_RX (payload only, counted in KiB), with
# the scope that sums every link: the counters DCGM computes DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL from.
ALL_LINKS = 0xFFFFFFFF
NVLINK_DATA_KIB = ((138, ALL_LINKS), (139, ALL_LINKS))
# The same counters of one link (scope = the link), which DCGM's DCGM_FI_DEV_NVLINK_BANDWIDTH_L<n> reads.
NVLINK_DATA_TX, NVLINK_DATA_RX = 138, 139
# nvmlDeviceGetNvLinkErrorCounter's counters (nvmlNvLinkErrorCounter_t), by NvLinkReading attribute.
NVLINK_ERROR_COUNTERS = (("replay_errors", 0), ("recovery_errors", 1), ("crc_flit_errors", 2), ("crc_data_errors", 3))
# The other DCGM fields DCGM itself reads as NVML field values (its dcgm_fields.cpp), by GpuExtras attribute: the
# NVML_FI_DEV_PERF_POLICY_* violation times (ns) and the NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL counts (all links).
DCGM_FIELD_VALUES: tuple[tuple[str, int], ...] = (
    ("power_violation_ns", 74),
    ("thermal_violation_ns", 75),
    ("sync_boost_violation_ns", 76),
    ("board_limit_violation_ns", 77),
    ("low_util_violation_ns", 78),
    ("reliability_violation_ns", 79),
    ("nvlink_crc_flit_errors", 38),
    ("nvlink_crc_data_errors", 45),
    ("nvlink_replay_errors", 52),
    ("nvlink_recovery_errors", 59),
)
MICROSECONDS = 1_000_000
P2P_CAPS_INDEX_NVLINK = 2  # NVML_P2P_CAPS_INDEX_NVLINK: the capability DCGM's NVLink P2P status asks for


def nvlink_bandwidth(previous: tuple[int, int] | None, total_kib: int, timestamp_us: int) -> float:
    """DCGM's NVLink bandwidth of a GPU from its data counters' total (KiB) read at ``timestamp_us``, and the
    previous ``(total, timestamp)``: as DcgmCacheManager::ReadAndCacheNvLinkBandwidth computes it (DCGM 4.6.0),
    0 on the first reading, while the counters read 0 or when no time passed; else the KiB moved per second
    divided by 1000 (DCGM's own "KiB/sec -> MiB/sec"), truncated to a whole number."""
    if previous is None or total_kib == 0 or timestamp_us == previous[1]:
        return 0.0
    elapsed = (timestamp_us - previous[1]) / MICROSECONDS
    return float(int((total_kib - previous[0]) / elapsed / 1000.0))


def nvlink_throughput_bytes(previous: tuple[int, int] | None, total_kib: int, timestamp_us: int) -> float:
    """The same data counters as bytes per second, the unit of DCGM 4.7's NVLink throughput field that
    dcgm-exporter 4.9 serves (docs/dcgm.md, "Generations"): the KiB moved per second times 1024, untruncated; 0
    where :func:`nvlink_bandwidth` says 0."""
    if previous is None or total_kib == 0 or timestamp_us == previous[1]:
        return 0.0
    return (total_kib - previous[0]) / ((timestamp_us - previous[1]) / MICROSECONDS) * 1024


UNKNOWN_ERROR = -1  # any code outside the token table renders "[Unknown Error]"
MAX_PERCENT = 100  # a larger per-process value is a driver's junk sample (nvtop#110), never a reading


class _LifecycleError(Exception):
    """A lifecycle-class NVML failure inside a cycle: fatal, and NVML must be re-initialized."""

    def __init__(self, code: int, where: str) -> None:
        super().__init__(f"{where}: {return_name(code)}")
        self.code = code


@dataclass(frozen=True, slots=True)
class _Gpu:
    handle: Any
    uuid: str


def cuda_version_text(version: int) -> str:
    """``nvmlSystemGetCudaDriverVersion``'s integer as nvidia-smi prints it: 13010 -> ``13.1``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def timestamp_text(now: float) -> str:
    """The ``timestamp`` cell: local time as nvidia-smi prints it, ``YYYY/MM/DD HH:MM:SS.mmm``."""
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


class NvmlBackend:
    """Reads the GPUs through NVML; ``collect`` runs one cycle in a worker thread."""

    def __init__(
        self,
        session: NvmlSession,
        fields: Sequence[ResolvedField],
        *,
        compute_apps: bool = False,
        process_usage: bool = False,
        pcie_throughput: bool = False,
        watcher: XidWatcher | None = None,
        gpm_clock: Callable[[], float] = time.monotonic,
        gpm_whole_gpus: bool = False,
        dcgm_readings: bool = False,
        p2p_status: bool = False,
        mig_placements: bool = False,
        nvlink_links: bool = False,
    ) -> None:
        self.session = session
        self.resolved = tuple(fields)
        self.compute_apps = compute_apps
        self.process_usage = process_usage  # --collect.process-usage
        # Per GPU uuid: the newest process utilization sample time (µs) read so far, passed back as lastSeen so that
        # each collection reads the samples since the previous one: none twice, none older.
        self._last_sample_us: dict[str, int] = {}
        self.pcie_throughput = pcie_throughput
        self.gpm_whole_gpus = gpm_whole_gpus  # only the DCGM profile serves a whole GPU's GPM: no samples otherwise
        self.dcgm_readings = dcgm_readings  # PCIe replays and NVLink bandwidth: read only for the DCGM profile
        self.p2p_status = p2p_status  # every GPU pair's NVLink P2P status: only when DCGM_EXP_P2P_STATUS is listed
        self.nvlink_links = nvlink_links  # each link's bandwidth and errors: only when a per-link field is listed
        # Per GPU and link scope: the last NVLink data total (KiB) and its time (µs).
        self._nvlink: dict[tuple[str, int], tuple[int, int]] = {}
        self.watcher = watcher
        self.sampler = GpmSampler(gpm_clock)
        # --kubernetes.dra-claims: the MIG devices' placements, for the dra_mig_* labels; never read otherwise.
        self.placements = PlacementCache() if mig_placements else None
        session.on_teardown(self.sampler.release_all)
        self._fields = tuple(field.query for field in self.resolved)
        device_fields = {field.source for field in self.resolved} - CYCLE_FIELDS - DEPRECATED_FIELDS
        self._plan = sources_for(sorted(device_fields))
        self._needs_driver_version = any(field.source == "driver_version" for field in self.resolved)
        self._cuda_version = ""
        self._warned_unreadable: set[str] = set()
        self._busy = threading.Lock()
        self._worker: threading.Thread | None = None
        self._closed = False

    # -- Backend protocol -------------------------------------------------------------------------------

    @property
    def status_family(self) -> StatusFamily:
        return StatusFamily.NVML_RETURN_CODE

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._fields

    async def collect(self) -> Readings:
        if self._closed:
            raise CollectionError("the nvml backend is closed")
        if not self._busy.acquire(blocking=False):
            raise CollectionError(STILL_IN_PROGRESS)
        future: concurrent.futures.Future[Readings] = concurrent.futures.Future()
        worker = threading.Thread(target=self._work, args=(future,), name="nvml-collection", daemon=True)
        try:
            worker.start()
        except RuntimeError as error:
            self._busy.release()
            raise CollectionError(f"cannot start the collection thread: {error}") from error
        self._worker = worker
        return await asyncio.wrap_future(future)

    def xid_records(self) -> tuple[XidRecord, ...]:
        return self.watcher.records() if self.watcher is not None else ()

    def stuck_children(self) -> StuckChildren | None:
        """NVML runs in a thread of ours (a stuck one is STILL_IN_PROGRESS): no children."""
        return None

    def supplement_failures(self) -> SupplementFailures | None:
        """No NVML supplement: ``None``."""
        return None

    async def aclose(self) -> None:
        """Stop the watcher, wait briefly for a cycle in the driver, then shut NVML down if nobody is inside."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._close_blocking)

    def _close_blocking(self) -> None:
        if self.watcher is not None:
            self.watcher.stop(CLOSE_WAIT_SECONDS)
        worker = self._worker
        if worker is not None and worker.is_alive():
            worker.join(CLOSE_WAIT_SECONDS)
        if not self.session.close(CLOSE_WAIT_SECONDS):
            log.warning("NVML is still busy in another thread; leaving it initialized at exit")

    # -- one cycle --------------------------------------------------------------------------------------

    def _work(self, future: concurrent.futures.Future[Readings]) -> None:
        # The busy flag is released before the outcome is published: the next cycle may start the moment the
        # collector sees this one finish, and it must not find the flag still set.
        readings: Readings | None = None
        failure: CollectionError | None = None
        try:
            if not future.set_running_or_notify_cancel():
                return
            try:
                readings = self.collect_blocking()
            except CollectionError as error:
                failure = error
            except Exception as error:  # a bug here must fail the cycle, never the process
                log.exception("the NVML collection raised an unexpected error")
                failure = CollectionError(f"unexpected error: {error!r}")
        finally:
            self._busy.release()
        if failure is not None or readings is None:
            future.set_exception(failure or CollectionError("the collection produced nothing"))
        else:
            future.set_result(readings)

    def collect_blocking(self) -> Readings:
        """One cycle, in the calling thread (the worker; tests and benchmarks call it directly)."""
        session = self.session
        if session.needs_reinit or not session.initialized:
            failure = session.reinit(session.generation)
            if failure is not None:
                raise CollectionError(
                    f"failed to re-initialize NVML: {return_name(failure.code)}", failure.code, fatal=True
                )
        with session.lock.reading():
            try:
                return self._read()
            except _LifecycleError as error:
                session.mark_lost()
                raise CollectionError(f"NVML lifecycle error: {error}", error.code, fatal=True) from error

    def _check(self, value: Any, where: str) -> Any:
        """A result that must succeed for the cycle to go on: lifecycle failures are fatal, others fail it."""
        if isinstance(value, Failure):
            if value.lifecycle:
                raise _LifecycleError(value.code, where)
            raise CollectionError(f"{where}: {return_name(value.code)}", value.code)
        return value

    def _read(self) -> Readings:
        cuda = call("nvmlSystemGetCudaDriverVersion")
        if isinstance(cuda, int) and cuda > 0:
            self._cuda_version = cuda_version_text(cuda)
        count = int(self._check(call("nvmlDeviceGetCount"), "failed to get the device count"))
        if count == 0:
            raise CollectionError("NVML reports no GPUs", -1)
        cycle: dict[str, str] = {"timestamp": timestamp_text(time.time()), "count": str(count)}
        if self._needs_driver_version:
            driver = read_string("nvmlSystemGetDriverVersion", 80)
            if isinstance(driver, Failure) and driver.lifecycle:
                raise _LifecycleError(driver.code, "failed to read the driver version")
            cycle["driver_version"] = token(driver.code) if isinstance(driver, Failure) else str(driver)
        unreadable: set[str] = set()
        rows: list[tuple[str, ...]] = []
        gpus: list[_Gpu] = []
        for index in range(count):
            handle = self._check(call("nvmlDeviceGetHandleByIndex", index), f"failed to get GPU {index}")
            cells = self._device_cells(handle, index)
            row = tuple(self._cell(cells, cycle, field, unreadable) for field in self.resolved)
            rows.append(row)
            uuid = cells.get("uuid")
            gpus.append(_Gpu(handle, uuid if isinstance(uuid, str) else token(UNKNOWN_ERROR)))
        self._warn_unreadable(unreadable)
        processes = self._processes(gpus) if self.compute_apps else None
        usage = self._process_usage(gpus) if self.process_usage else None
        return Readings(GpuTable(tuple(rows)), processes, self._cuda_version, self._extras(gpus), usage)

    def _device_cells(self, handle: Any, index: int) -> dict[str, Cell]:
        cells: dict[str, Cell] = {}
        for entry, wanted in self._plan:
            result = entry.read(handle, wanted)
            if isinstance(result, Failure):
                if result.lifecycle:
                    raise _LifecycleError(result.code, f"GPU {index}: {entry.name}")
                cells.update(dict.fromkeys(wanted, result))
            else:
                cells.update(result)
        return cells

    def _cell(self, cells: dict[str, Cell], cycle: dict[str, str], field: ResolvedField, unreadable: set[str]) -> str:
        source = field.source
        if source in DEPRECATED_FIELDS:
            return token(DEPRECATED)
        value: Cell | None = cycle.get(source) if source in CYCLE_FIELDS else cells.get(source)
        if value is None:
            return NA
        if isinstance(value, Failure):
            if value.lifecycle:
                raise _LifecycleError(value.code, source)
            if value.code in (NO_PERMISSION, FUNCTION_NOT_FOUND):
                unreadable.add(field.query.qfield)
            return token(value.code, source)
        return value.strip(GO_SPACE)

    def _warn_unreadable(self, fields: set[str]) -> None:
        """NO_PERMISSION / FUNCTION_NOT_FOUND fields, listed once: they are absent, not broken."""
        new = sorted(fields - self._warned_unreadable)
        if new:
            self._warned_unreadable.update(new)
            log.warning(
                "some query fields cannot be read (insufficient permissions or not in this driver); they are absent",
                extra={"fields": ",".join(new)},
            )

    # -- soft parts: processes and NVML-only readings ---------------------------------------------------

    def _soft(self, value: Any) -> Any:
        """A per-process or extras result: failures never fail the cycle, lifecycle ones schedule a re-init."""
        if isinstance(value, Failure) and value.lifecycle:
            self.session.mark_lost()
        return value

    def _processes(self, gpus: Sequence[_Gpu]) -> ProcessList:
        rows: list[ProcessRow] = []
        names: dict[int, str] = {}
        for gpu in gpus:
            processes = self._soft(call("nvmlDeviceGetComputeRunningProcesses", gpu.handle))
            if isinstance(processes, Failure):
                log.warning("failed to collect per-process data", extra={"reason": return_name(processes.code)})
                return ProcessList(succeeded=False)
            for process in processes:
                pid = int(process.pid)
                if pid not in names:
                    name = self._soft(read_string("nvmlSystemGetProcessName", 1024, ctypes.c_uint(pid)))
                    names[pid] = token(name.code) if isinstance(name, Failure) else str(name).strip(GO_SPACE)
                memory = process.usedGpuMemory
                used = NA if memory is None or int(memory) == NA_UINT64 else mib(int(memory))
                rows.append(
                    ProcessRow(
                        gpu_uuid=gpu.uuid,
                        pid=str(pid),
                        process_name=names[pid],
                        used_memory=used,
                        gpu_instance_id=_instance_id(process.gpuInstanceId),
                        compute_instance_id=_instance_id(process.computeInstanceId),
                    )
                )
        return ProcessList(succeeded=True, rows=tuple(rows))

    def _process_name(self, pid: int, names: dict[int, str]) -> str:
        if pid not in names:
            name = self._soft(read_string("nvmlSystemGetProcessName", 1024, ctypes.c_uint(pid)))
            names[pid] = token(name.code) if isinstance(name, Failure) else str(name).strip(GO_SPACE)
        return names[pid]

    def _running(self, gpu: _Gpu) -> dict[int, float | None] | Failure:
        """pid -> used bytes (``None`` when unknown) of the GPU's compute and graphics processes and MPS clients."""
        compute = self._soft(call("nvmlDeviceGetComputeRunningProcesses", gpu.handle))
        if isinstance(compute, Failure):
            return compute
        others = [
            self._soft(call(function, gpu.handle))
            for function in ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses")
        ]
        running: dict[int, float | None] = {}
        for process in [
            *compute,
            *(process for listed in others if not isinstance(listed, Failure) for process in listed),
        ]:
            memory = process.usedGpuMemory
            used = None if memory is None or int(memory) == NA_UINT64 else float(int(memory))
            running[int(process.pid)] = used if running.get(int(process.pid)) is None else running[int(process.pid)]
        return running

    def _samples(self, gpu: _Gpu, running: dict[int, float | None]) -> dict[int, Any] | None:
        """The newest sample per running pid since the last collection; ``None`` when the GPU has none to give
        (MIG mode, an old GPU); an empty dict when no process ran a kernel since (NVML's NOT_FOUND)."""
        last = self._last_sample_us.get(gpu.uuid, 0)
        samples = self._soft(call("nvmlDeviceGetProcessUtilization", gpu.handle, last))
        if isinstance(samples, Failure):
            return {} if samples.code == NOT_FOUND else None
        newest: dict[int, Any] = {}
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            values = (sample.smUtil, sample.memUtil, sample.encUtil, sample.decUtil)
            if stamp <= last or pid not in running or any(int(value) > MAX_PERCENT for value in values):
                continue  # zero-filled entries, a zombie's, junk values, an old sample
            if pid not in newest or int(newest[pid].timeStamp) < stamp:
                newest[pid] = sample
        self._last_sample_us[gpu.uuid] = max([last, *(int(sample.timeStamp) for sample in newest.values())])
        return newest

    def _process_usage(self, gpus: Sequence[_Gpu]) -> ProcessUsage:
        """Each running process with its utilization sample; one without a new sample used nothing since the last
        collection (NVML samples only processes with non-zero use), so it reads 0 where the GPU can sample."""
        rows: list[ProcessUsageRow] = []
        names: dict[int, str] = {}
        for gpu in gpus:
            running = self._running(gpu)
            if isinstance(running, Failure):
                log.warning("failed to collect per-process usage", extra={"reason": return_name(running.code)})
                return ProcessUsage(succeeded=False)
            samples = self._samples(gpu, running)
            for pid, used in running.items():
                sm, memory, encoder, decoder = _percents(samples, pid)
                name = self._process_name(pid, names)
                rows.append(ProcessUsageRow(gpu.uuid, str(pid), name, sm, memory, encoder, decoder, used))
        return ProcessUsage(succeeded=True, rows=tuple(rows))

    def _extras(self, gpus: Sequence[_Gpu]) -> NvmlExtras:
        per_gpu: list[GpuExtras] = []
        mig_devices: list[MigDevice] = []
        mig_instances: list[MigInstanceReading] = []
        nvlink_totals: dict[tuple[str, int], tuple[int, int]] = {}
        in_mig_mode: set[str] = set()
        self.sampler.begin_cycle()
        for gpu in gpus:
            energy = self._soft(call("nvmlDeviceGetTotalEnergyConsumption", gpu.handle))
            tx = rx = None
            if self.pcie_throughput:
                tx = self._soft(call("nvmlDeviceGetPcieThroughput", gpu.handle, 0))
                rx = self._soft(call("nvmlDeviceGetPcieThroughput", gpu.handle, 1))
            mode = self._soft(call("nvmlDeviceGetMigMode", gpu.handle))
            in_mig = not isinstance(mode, Failure) and bool(mode[0])
            # A MIG GPU's activity is its GPU instances' (read_mig); a whole GPU's is sampled at device level.
            gpm = (
                self.sampler.activity(gpu.handle, gpu.uuid, WHOLE_GPU, ())
                if self.gpm_whole_gpus and not in_mig and gpm_supported(gpu.handle)
                else None
            )
            values = gpm or {}
            dcgm = self._dcgm_readings(gpu, nvlink_totals) if self.dcgm_readings else {}
            per_gpu.append(
                GpuExtras(
                    gpu_uuid=gpu.uuid,
                    energy_joules=None if isinstance(energy, Failure) else int(energy) / 1000.0,
                    pcie_tx_bytes_per_second=None if tx is None or isinstance(tx, Failure) else int(tx) * PCIE_KB,
                    pcie_rx_bytes_per_second=None if rx is None or isinstance(rx, Failure) else int(rx) * PCIE_KB,
                    graphics_activity_ratio=percent_ratio(values, GRAPHICS),
                    tensor_activity_ratio=percent_ratio(values, TENSOR),
                    dram_activity_ratio=percent_ratio(values, DRAM),
                    **dcgm,
                )
            )
            if not in_mig:
                continue
            in_mig_mode.add(gpu.uuid)
            mig = self._soft(read_mig(gpu.handle, gpu.uuid, self.sampler, self.placements))
            if not isinstance(mig, Failure):
                mig_devices += mig[0]
                mig_instances += mig[1]
        self.sampler.end_cycle()
        if self.placements is not None:
            self.placements.retain(in_mig_mode)
        self._nvlink = nvlink_totals  # only the GPUs read this cycle: a GPU gone is forgotten
        p2p = self._p2p(gpus) if self.p2p_status else None
        return NvmlExtras(tuple(per_gpu), tuple(mig_devices), tuple(mig_instances), p2p)

    def _p2p(self, gpus: Sequence[_Gpu]) -> P2PStatus | None:
        """The NVLink P2P status from each GPU to every other, or ``None`` at the first pair NVML cannot answer, as
        DCGM's dcgmGetNvLinkP2PStatus fails whole (DcgmCacheManager::CreateNvlinkP2PStatus)."""
        statuses: list[tuple[int, ...]] = []
        for gpu in gpus:
            row: list[int] = []
            for peer in gpus:
                if peer is gpu:
                    row.append(0)
                    continue
                status = self._soft(call("nvmlDeviceGetP2PStatus", gpu.handle, peer.handle, P2P_CAPS_INDEX_NVLINK))
                if isinstance(status, Failure):
                    log.debug("no NVLink P2P status", extra={"reason": return_name(status.code)})
                    return None
                row.append(int(status))
            statuses.append(tuple(row))
        return P2PStatus(tuple(gpu.uuid for gpu in gpus), tuple(statuses))

    def _dcgm_readings(self, gpu: _Gpu, totals: dict[tuple[str, int], tuple[int, int]]) -> dict[str, Any]:
        """The DCGM profile's own NVML readings as GpuExtras attributes: the PCIe replay counter, the NVLink
        bandwidth over all links in DCGM's MiB/s, the violation times and NVLink error counts, the fabric health
        (``None`` where NVML cannot say), each link's readings when asked; this reading's NVLink data totals are
        kept in ``totals`` for the next one."""
        replays = self._soft(call("nvmlDeviceGetPcieReplayCounter", gpu.handle))
        ids = [*NVLINK_DATA_KIB, *(field_id for _, field_id in DCGM_FIELD_VALUES)]
        entries = self._soft(call("nvmlDeviceGetFieldValues", gpu.handle, ids))
        readings: dict[str, Any] = dict.fromkeys(DCGM_FIELD_COUNTERS, None)
        readings["pcie_replay_count"] = None if isinstance(replays, Failure) else float(int(replays))
        readings["nvlink_mib_per_second"] = readings["nvlink_bytes_per_second"] = None
        readings["nvlink_links"] = self._nvlink_links(gpu, totals) if self.nvlink_links else ()
        mask, summary, failure = fabric_health(gpu.handle)
        self._soft(failure)
        readings["fabric_health_mask"], readings["fabric_health_summary"] = mask, summary
        if isinstance(entries, Failure):
            return readings
        counts = [field_value(entry) for entry in entries]
        for (name, _), count in zip(DCGM_FIELD_VALUES, counts[len(NVLINK_DATA_KIB) :], strict=True):
            readings[name] = None if isinstance(count, Failure) else float(count)
        total = self._nvlink_total(gpu, ALL_LINKS, counts[: len(NVLINK_DATA_KIB)], entries, totals)
        if total is not None:
            previous, kib, stamp = total
            readings["nvlink_mib_per_second"] = nvlink_bandwidth(previous, kib, stamp)
            readings["nvlink_bytes_per_second"] = nvlink_throughput_bytes(previous, kib, stamp)
        return readings

    def _nvlink_links(self, gpu: _Gpu, totals: dict[tuple[str, int], tuple[int, int]]) -> tuple[NvLinkReading, ...]:
        """Each link the GPU has (nvmlDeviceGetNvLinkState answers for it): its error counters and, from one field
        values call for every link, its bandwidth as DCGM computes the all-links one. A link NVML does not know has
        no reading, so its fields have no series, as DCGM leaves them blank."""
        links = [
            link
            for link in range(NVLINK_MAX_LINKS)
            if not isinstance(self._soft(call("nvmlDeviceGetNvLinkState", gpu.handle, link)), Failure)
        ]
        if not links:
            return ()
        ids = [(field_id, link) for link in links for field_id in (NVLINK_DATA_TX, NVLINK_DATA_RX)]
        entries = self._soft(call("nvmlDeviceGetFieldValues", gpu.handle, ids))
        found: list[NvLinkReading] = []
        for position, link in enumerate(links):
            errors: dict[str, float | None] = {}
            for name, counter in NVLINK_ERROR_COUNTERS:
                count = self._soft(call("nvmlDeviceGetNvLinkErrorCounter", gpu.handle, link, counter))
                errors[name] = None if isinstance(count, Failure) else float(int(count))
            bandwidth = None
            if not isinstance(entries, Failure):
                pair = entries[2 * position : 2 * position + 2]
                total = self._nvlink_total(gpu, link, [field_value(entry) for entry in pair], pair, totals)
                bandwidth = None if total is None else nvlink_bandwidth(*total)
            found.append(NvLinkReading(link, bandwidth, **errors))
        return tuple(found)

    def _nvlink_total(
        self,
        gpu: _Gpu,
        scope: int,
        counts: Sequence[Any],
        entries: Sequence[Any],
        totals: dict[tuple[str, int], tuple[int, int]],
    ) -> tuple[tuple[int, int] | None, int, int] | None:
        """The previous reading, this one's data total (KiB, TX and RX summed) and its time (µs) of one link scope,
        kept in ``totals`` for the next collection; ``None`` where NVML answered an error for either counter."""
        kib = [int(count) for count in counts if not isinstance(count, Failure)]
        if len(kib) != len(counts):
            return None
        stamp = max(int(entry.timestamp) for entry in entries[: len(counts)]) or int(time.time() * MICROSECONDS)
        totals[(gpu.uuid, scope)] = (sum(kib), stamp)
        return self._nvlink.get((gpu.uuid, scope)), sum(kib), stamp


def _percents(samples: dict[int, Any] | None, pid: int) -> tuple[float | None, ...]:
    """A process's SM, memory, encoder and decoder percentages: its sample's, 0 without one, none where the GPU
    cannot sample processes."""
    if samples is None:
        return (None, None, None, None)
    sample = samples.get(pid)
    if sample is None:
        return (0.0, 0.0, 0.0, 0.0)
    return tuple(float(value) for value in (sample.smUtil, sample.memUtil, sample.encUtil, sample.decUtil))


def _instance_id(value: Any) -> str:
    """A process's GPU/compute instance id label: empty when it does not run on a MIG device."""
    number = int(value)
    return "" if number == NO_INSTANCE else str(number)


# -- startup ------------------------------------------------------------------------------------------------


def open_backend(
    request: FieldRequest,
    *,
    compute_apps: bool = False,
    process_usage: bool = False,
    pcie_throughput: bool = False,
    watch_xids: bool = True,
    gpm_clock: Callable[[], float] = time.monotonic,
    gpm_whole_gpus: bool = False,
    dcgm_readings: bool = False,
    p2p_status: bool = False,
    mig_placements: bool = False,
    nvlink_links: bool = False,
) -> NvmlBackend:
    """Check the bindings, init NVML, check the exports the exporter cannot do without, resolve fields, start
    the XID watcher."""
    problem = bindings_problem()
    if problem is not None:
        raise BackendSetupError(problem)
    session = NvmlSession()
    failure = session.init()
    if failure is not None:
        raise BackendSetupError(f"failed to initialize NVML: {return_name(failure.code)}")
    try:
        if not exports("nvmlDeviceGetUUID"):
            raise BackendSetupError("the NVML library does not export nvmlDeviceGetUUID")
        driver = read_string("nvmlSystemGetDriverVersion", 80)
        fields = resolve_fields(request, driver if isinstance(driver, str) else "")
    except (BackendSetupError, FieldResolutionError) as error:
        with session.lock.writing():
            session.teardown()
        raise BackendSetupError(str(error)) from error
    watcher = XidWatcher(session) if watch_xids else None
    backend = NvmlBackend(
        session,
        fields,
        compute_apps=compute_apps,
        process_usage=process_usage,
        pcie_throughput=pcie_throughput,
        watcher=watcher,
        gpm_clock=gpm_clock,
        gpm_whole_gpus=gpm_whole_gpus,
        dcgm_readings=dcgm_readings,
        p2p_status=p2p_status,
        mig_placements=mig_placements,
        nvlink_links=nvlink_links,
    )
    if watcher is not None:
        watcher.start()
    log.info(
        "NVML initialized",
        extra={"driver_version": driver if isinstance(driver, str) else "", "fields": len(fields)},
    )
    return backend
