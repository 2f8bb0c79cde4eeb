"""When to collect: per scrape with single-flight sharing, or on a background timer; and the health counters.

Synchronous mode (interval 0): a scrape joins the collection in flight or starts one, so N concurrent
scrapes cost one nvidia-smi run. The run belongs to no single scrape: it is cancelled (its child killed)
only when every waiting scrape has given up, and it is bounded by ``--collect.timeout`` on its own. A run
cancelled before the backend answered has no outcome and is counted nowhere: the health counters move only
with collections that ran to a success or a failure.

Background mode: one collection per interval, never two at once; scrapes read the latest snapshot.

A failed collection publishes no readings at all: stale GPU values are never served.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter.backends import Backend, CollectionError
from nvidia_gpu_exporter.history import History
from nvidia_gpu_exporter.model.gpuseconds import GpuSecondsLedger
from nvidia_gpu_exporter.model.jobs import ProcessJob
from nvidia_gpu_exporter.model.judge import Judgement, VerdictMemory, judge
from nvidia_gpu_exporter.model.podusage import PodEnergyLedger, pod_shares
from nvidia_gpu_exporter.model.processusage import DEFAULT_MAX_PROCESSES, cap_usage
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    PodAllocation,
    PodUsage,
    ProcessUsage,
    Readings,
    Snapshot,
    column_of,
)
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.model.values import transform_generic
from nvidia_gpu_exporter.support.asynctimeout import within_timeout

if TYPE_CHECKING:
    from nvidia_gpu_exporter.health.source import KernelXidSource
    from nvidia_gpu_exporter.kubernetes.attribution import Attributor
    from nvidia_gpu_exporter.kubernetes.podmetadata import PodMetadata
    from nvidia_gpu_exporter.model.kubernetes import KubernetesAttribution, PodDirectory, PodResourcesReading
    from nvidia_gpu_exporter.model.pcibus import PciInventory, PciSource

log = logging.getLogger(__name__)

# Said once, at the first failure --shutdown-on-error does not stop for (Go's rule, docs/compatibility.md).
SHUTDOWN_ON_ERROR_DOES_NOT_APPLY = (
    "--shutdown-on-error: this failure is not fatal, the exporter keeps running; only nvidia-smi exiting with a "
    "non-zero status (nvml: a lifecycle error) stops it, as in the Go exporter, not a command that cannot start, "
    "a timeout or output that cannot be read"
)


def _holders(kubernetes: KubernetesAttribution, readings: Readings) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(GPU uuid, GPU instance id or "" for the whole GPU) -> (namespace, pod, container) of the one container
    the kubelet says holds it: a whole GPU (or each replica of it), or every held MIG device of a GPU instance."""
    holders = {
        (uuid, ""): (namespace, pod, container)
        for uuid, (container, namespace, pod) in kubernetes.sole_holders().items()
    }
    devices = kubernetes.pod_holders()
    per_instance: dict[tuple[str, str], set[tuple[str, str, str] | None]] = {}
    for device in readings.extras.mig_devices if readings.extras is not None else ():
        uuid = normalize_uuid(device.gpu_uuid)
        holder = devices.get((uuid, normalize_mig_uuid(device.mig_uuid)))
        per_instance.setdefault((uuid, str(device.gpu_instance_id)), set()).add(holder)
    for key, found in per_instance.items():
        held = [holder for holder in found if holder is not None]
        if len(held) == 1:
            pod, namespace, container = held[0]
            holders[key] = (namespace, pod, container)
    return holders


@dataclass(slots=True)
class _Flight:
    """A synchronous collection and the number of scrapes still waiting for it."""

    task: asyncio.Task[Snapshot]
    waiters: int = 0
    abandoned: bool = False  # every waiter gave up; the task is being cancelled

    @property
    def joinable(self) -> bool:
        return not self.abandoned and not self.task.done()


class Collector:
    """Owns the backend's schedule and the published snapshot."""

    def __init__(
        self,
        backend: Backend,
        *,
        timeout_seconds: float | None,
        interval_seconds: float = 0.0,
        shutdown_on_error: bool = False,
        on_fatal: Callable[[int], None] | None = None,
        attributor: Attributor | None = None,
        kernel_log: KernelXidSource | None = None,
        backend_xids: bool = True,
        xid_source: str = "",
        pci: PciSource | None = None,
        process_usage_limit: int | None = None,
        slurm_proc_root: str | None = None,
        pod_metadata: PodMetadata | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.clock = clock  # the verdict's time (tests step it; collections time themselves)
        self._judgement = Judgement((), VerdictMemory())
        self.kernel_log = kernel_log  # when set, the XIDs come from the kernel log
        self.backend_xids = backend_xids  # otherwise from the backend's NVML events (or the demo), unless off
        self.xid_source = xid_source
        self.attributor = attributor  # Kubernetes attribution, consulted once per collection (opt-in)
        self._kubernetes: KubernetesAttribution | None = None
        self.pci = pci  # what sysfs lists (lost GPUs), read alongside each collection
        self._pci: PciInventory | None = None
        # --collect.process-usage-max-processes (None: per-process usage is off), and the processes summed so far
        self.process_usage_limit = process_usage_limit
        self._usage_overflowed = 0
        # Per-pod shares (process usage with --kubernetes.process-pods), and their energy since each pod appeared
        self._pod_ledger = PodEnergyLedger()
        self._pod_usage: PodUsage | None = None
        # GPU-seconds allocated (--kubernetes.pod-resources) and used (the shares) per pod since each appeared
        self._gpu_seconds = GpuSecondsLedger()
        self._pod_allocations: tuple[PodAllocation, ...] | None = None
        self.pod_metadata = pod_metadata  # --kubernetes.pod-metadata: the API server's names of the shares' pods
        self.slurm_proc_root = slurm_proc_root  # --slurm.jobs: where the host's /proc is (None: off)
        self._slurm_jobs: tuple[ProcessJob, ...] | None = None
        self.timeout_seconds = timeout_seconds or None
        self.interval_seconds = interval_seconds
        self.shutdown_on_error = shutdown_on_error
        self.on_fatal = on_fatal
        self._said_not_fatal = False  # SHUTDOWN_ON_ERROR_DOES_NOT_APPLY said: once is enough
        self._failed = 0
        self._last_success_at: float | None = None
        self._last_success_gpus = 0  # GPUs the last successful collection saw (--web.ready.min-gpus)
        self._sequence = 0
        self._latest = Snapshot(None, 0, None, 0)
        self._flight: _Flight | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False  # set by aclose(): the background loop ends even if a run outlived its cancel
        self.collections = 0  # completed attempts, for tests and benchmarks
        self.history = History()  # the live view's sparklines: appended to, never read, here

    @property
    def background(self) -> bool:
        return self.interval_seconds > 0

    @property
    def latest(self) -> Snapshot:
        return self._latest

    @property
    def last_success_gpus(self) -> int:
        """How many GPUs the last successful collection reported (0 before the first): what readiness counts."""
        return self._last_success_gpus

    def start(self) -> None:
        """In background mode, start collecting now (concurrently with the server coming up)."""
        if self.background and self._loop_task is None:
            self._loop_task = asyncio.create_task(self._background_loop(), name="background-collection")

    async def aclose(self) -> None:
        """Stop the loop and cancel any collection in flight (its child is killed)."""
        self._closing = True
        tasks = {task for task in (self._loop_task, self._flight.task if self._flight else None) if task}
        for task in tasks:
            task.cancel()
        if tasks:  # waits without swallowing a cancellation of aclose() itself
            await asyncio.wait(tasks)
        self._loop_task = None
        self._flight = None

    # -- one attempt ------------------------------------------------------------------------------------

    def _publish(self, attempt: Attempt | None) -> Snapshot:
        self._sequence += 1
        if attempt is not None:
            self.collections += 1
            if attempt.readings is not None:
                self._last_success_at = attempt.finished_at
                self._last_success_gpus = len(attempt.readings.gpus.rows)
                self.history.append(self.backend.fields, attempt.readings, attempt.finished_at)
            else:
                self._failed += 1
            if attempt.readings is not None and self.kernel_log is not None:
                holders = self._kubernetes.sole_holders() if self._kubernetes is not None else None
                self.kernel_log.learn(self.backend.fields, attempt.readings.gpus, holders)
        snapshot = self._snapshot(attempt)
        self._judgement = judge(snapshot, self.backend.fields, self._judgement.memory, self.clock())
        self._latest = replace(snapshot, verdicts=self._judgement.verdicts)
        return self._latest

    def no_result(self) -> Snapshot:
        """What a scrape that gave up waiting serves: health counters only, no status or duration."""
        return self._snapshot(None)

    def _snapshot(self, attempt: Attempt | None) -> Snapshot:
        """The attempt with the counters and what the node-health sources know now."""
        kernel = self.kernel_log
        if kernel is not None:
            xids = kernel.records()
        elif self.backend_xids:
            xids = self.backend.xid_records()
        else:
            xids = ()
        return Snapshot(
            attempt,
            self._failed,
            self._last_success_at,
            self._sequence,
            xids,
            kubernetes=self._kubernetes,
            xid_occurrences=kernel.occurrences() if kernel is not None else (),
            gpus_fallen_off=kernel.fallen_off() if kernel is not None else (),
            sxids=kernel.sxids() if kernel is not None else (),
            xid_source=self.xid_source,
            kernel_log=kernel.status() if kernel is not None else None,
            stuck_children=self.backend.stuck_children(),
            supplement_failures=self.backend.supplement_failures(),
            pci=self._pci,
            process_usage_overflowed=self._usage_overflowed if self.process_usage_limit is not None else None,
            verdicts=self._judgement.verdicts,
            pod_usage=self._pod_usage if attempt is not None and attempt.readings is not None else None,
            pod_allocations=self._pod_allocations if attempt is not None and attempt.readings is not None else None,
            slurm_jobs=self._slurm_jobs if attempt is not None and attempt.readings is not None else None,
            pod_metadata_failures=(
                tuple(self.pod_metadata.failures.items()) if self.pod_metadata is not None else None
            ),
        )

    def _capped(self, readings: Readings) -> Readings:
        """The readings with at most the cap's processes per GPU in the usage rows, the rest summed and counted."""
        if readings.process_usage is None:
            return readings
        limit = DEFAULT_MAX_PROCESSES if self.process_usage_limit is None else self.process_usage_limit
        usage, overflowed = cap_usage(readings.process_usage, limit)
        self._usage_overflowed += overflowed
        return replace(readings, process_usage=usage)

    def _pods(
        self, usage: ProcessUsage | None, readings: Readings | None, now: float, directory: PodDirectory | None = None
    ) -> PodUsage | None:
        """Each GPU's pods from the uncapped usage rows, the pids' pods (named by ``directory`` where it has them),
        the GPUs' power and energy.

        A failed usage reading serves no pods and leaves the ledger as it was: the energy since its last reading
        goes to the next reading's shares, and no pod's counter restarts for a reading that failed.
        """
        kubernetes = self._kubernetes
        if self.process_usage_limit is None or usage is None or not usage.succeeded or readings is None:
            return None
        if kubernetes is None or kubernetes.processes is None:
            return None
        pod_of = {process.pid: process.pod_uid for process in kubernetes.processes if process.pod_uid}
        container_of = {process.pid: process.container_id for process in kubernetes.processes if process.pod_uid}
        if self.attributor is not None and not kubernetes.process_reason:
            # nvml lists MPS clients apart from the compute apps attribution reads: their pods come from here.
            looked_up = {process.pid for process in kubernetes.processes}
            for pid in {row.pid for row in usage.rows} - looked_up:
                found = self.attributor.cgroups.lookup(pid).pod
                if found is not None:
                    pod_of[pid] = found.pod_uid
                    container_of[pid] = found.container_id
        holders = _holders(kubernetes, readings)
        fields = self.backend.fields
        uuid_column, power_column = column_of(fields, "uuid"), column_of(fields, "power.draw")
        power: dict[str, float] = {}
        if uuid_column is not None and power_column is not None:
            for row in readings.gpus.rows:
                watts = transform_generic(row[power_column], 1.0)
                if watts is not None:
                    power[normalize_uuid(row[uuid_column])] = watts
        energy = {
            normalize_uuid(gpu.gpu_uuid): gpu.energy_joules
            for gpu in (readings.extras.gpus if readings.extras is not None else ())
            if gpu.energy_joules is not None
        }
        instances = {
            (normalize_uuid(row.gpu_uuid), row.pid): row.gpu_instance_id
            for row in (readings.processes.rows if readings.processes is not None else ())
            if row.gpu_instance_id
        }
        names: dict[str, tuple[str, str]] = {}
        containers: dict[str, str] = {}
        if directory is not None:
            names = {uid: directory.pods[uid] for uid in set(pod_of.values()) if uid in directory.pods}
            containers = {pid: directory.containers.get(cid, "") for pid, cid in container_of.items()}
        shares = pod_shares(
            usage,
            pod_of,
            holders,
            power,
            self.process_usage_limit,
            instances=instances,
            names=names,
            containers=containers,
        )
        accounted = self._pod_ledger.account(shares, energy)
        return replace(accounted, pods=self._gpu_seconds.use(accounted.pods, now))

    def _allocations(self, now: float) -> tuple[PodAllocation, ...] | None:
        """Each pod's GPU-seconds allocated, when the kubelet answered this collection's PodResources request.

        A collection without an answer serves none and leaves the ledger as it was: the next answer's pods that
        held their GPU before get the time in between, as the kubelet keeps allocations across its restarts.
        """
        kubernetes = self._kubernetes
        if kubernetes is None or kubernetes.pod_resources is None or not kubernetes.pod_resources.ok:
            return None
        return self._gpu_seconds.allocate(kubernetes.gpu_pods, now)

    def _jobs(self, readings: Readings | None) -> tuple[ProcessJob, ...] | None:
        """The Slurm job of every process the collection serves (compute apps, and the capped usage rows)."""
        if self.slurm_proc_root is None or readings is None:
            return None
        listed = [
            *((row.gpu_uuid, row.pid) for row in (readings.processes.rows if readings.processes is not None else ())),
            *((row.gpu_uuid, row.pid) for row in (readings.process_usage.rows if readings.process_usage else ())),
        ]
        from nvidia_gpu_exporter.kubernetes.slurm import process_jobs  # noqa: PLC0415 - --slurm.jobs only

        return process_jobs(self.slurm_proc_root, listed)

    async def _attribute(self, lookup: asyncio.Task[PodResourcesReading | None], readings: Readings | None) -> None:
        """Join the kubelet's answer (fetched alongside the collection, bounded by its own timeout) with it."""
        assert self.attributor is not None
        self._kubernetes = await self.attributor.attribute(await lookup, readings)

    async def _pod_directory(self, readings: Readings | None) -> PodDirectory | None:
        """The API server's names of this node's pods, when they are asked for and a collection has pods to name."""
        kubernetes = self._kubernetes
        if self.pod_metadata is None or readings is None or kubernetes is None or kubernetes.processes is None:
            return None
        uids = {process.pod_uid for process in kubernetes.processes if process.pod_uid}
        return await self.pod_metadata.directory(uids)

    async def _read_pci(self, scan: asyncio.Future[PciInventory | None] | None, cancelled: bool) -> bool:
        """Keep this collection's PCI reading (a cancelled collection drops its scan); True when cancelled."""
        if scan is None:
            return cancelled
        if cancelled:
            scan.cancel()
            return True
        try:
            self._pci = await scan
        except asyncio.CancelledError:
            scan.cancel()
            return True
        return False

    @staticmethod
    def _abandon(*pending: asyncio.Future[Any] | None) -> None:
        """A collection cancelled before the backend answered has no outcome: nothing is published or counted.

        Every waiting scrape gave up (any client can do that on purpose: a tiny scrape-timeout header, a
        half-closed connection) or the exporter is stopping; the scrapes that gave up were already answered
        without a result. Counting it would let any client move ``nvidia_smi_failed_scrapes_total``.
        """
        for task in pending:
            if task is not None:
                task.cancel()
        log.debug("collection abandoned before it had an outcome: not counted")

    async def _collect_once(self) -> Snapshot:
        started = time.perf_counter()
        lookup = asyncio.ensure_future(self.attributor.fetch()) if self.attributor is not None else None
        scan = asyncio.ensure_future(self.pci.pci_inventory()) if self.pci is not None else None
        readings: Readings | None = None
        error: CollectionError | None = None
        cancelled = False
        try:
            readings = await within_timeout(self.backend.collect(), self.timeout_seconds)
        except CollectionError as failure:
            error = failure
        except asyncio.TimeoutError:
            error = CollectionError(f"collection timed out after {self.timeout_seconds}s")
        except asyncio.CancelledError:
            self._abandon(lookup, scan)
            raise
        except Exception as failure:  # a backend bug must never take the exporter down
            log.exception("collection raised an unexpected error")
            error = CollectionError(f"unexpected error: {failure!r}")
        duration = time.perf_counter() - started
        finished = time.time()
        uncapped = readings.process_usage if readings is not None else None
        if error is None and readings is not None:
            readings = self._capped(readings)
            attempt = Attempt(readings, 0, duration, finished)
        else:
            assert error is not None
            log.error("failed to collect metrics", extra={"err": str(error), "status_code": error.status_code})
            attempt = Attempt(
                None,
                error.status_code,
                duration,
                finished,
                error=str(error),
                fatal=error.fatal,
                exit_code_for_shutdown=error.exit_code,
            )
        if lookup is not None:
            try:
                await self._attribute(lookup, readings)
            except asyncio.CancelledError:
                lookup.cancel()
                cancelled = True
        directory: PodDirectory | None = None
        if not cancelled:
            try:
                directory = await self._pod_directory(attempt.readings)
            except asyncio.CancelledError:
                cancelled = True
        self._pod_usage = self._pods(uncapped, attempt.readings, finished, directory)
        self._pod_allocations = self._allocations(finished) if attempt.readings is not None else None
        self._slurm_jobs = self._jobs(attempt.readings)
        cancelled = await self._read_pci(scan, cancelled)
        snapshot = self._publish(attempt)
        if attempt.fatal and self.shutdown_on_error and self.on_fatal is not None:
            log.error("shutting down on a fatal collection error", extra={"err": attempt.error})
            self.on_fatal(attempt.exit_code_for_shutdown)
        elif attempt.error is not None and self.shutdown_on_error and not self._said_not_fatal:
            self._said_not_fatal = True
            log.warning(SHUTDOWN_ON_ERROR_DOES_NOT_APPLY, extra={"err": attempt.error})
        if cancelled:
            raise asyncio.CancelledError
        return snapshot

    # -- synchronous mode -------------------------------------------------------------------------------

    async def scrape(self, budget_seconds: float | None = None) -> Snapshot:
        """The snapshot for one scrape. ``budget_seconds`` bounds the wait in synchronous mode only."""
        if self.background:
            # Before the first collection there is nothing cached, but XID counts are live.
            return self._latest if self._latest.attempt is not None else self.no_result()
        flight = self._flight
        if flight is None or not flight.joinable:
            flight = self._flight = _Flight(asyncio.create_task(self._collect_once(), name="collection"))
        flight.waiters += 1
        try:
            await asyncio.wait({flight.task}, timeout=budget_seconds)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                flight.abandoned = True
                flight.task.cancel()
        if flight.task.done() and not flight.task.cancelled():
            return flight.task.result()
        return self.no_result()

    # -- background mode --------------------------------------------------------------------------------

    async def _background_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_start = loop.time()
        while not self._closing:
            await self._collect_once()
            if self._closing:
                return
            next_start += self.interval_seconds
            now = loop.time()
            next_start = max(next_start, now)  # an overrun starts the next run at once: ticks coalesce
            await asyncio.sleep(next_start - now)
