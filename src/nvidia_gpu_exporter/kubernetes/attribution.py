"""The attributor: asks the kubelet (cached, time-bounded) and maps its answer onto one collection's GPUs.

The collector starts :meth:`Attributor.fetch` alongside the backend's collection, so a slow kubelet
costs at most ``--kubernetes.pod-resources-timeout`` and usually nothing; :meth:`Attributor.attribute`
then joins the kubelet's device ids with the GPUs (and processes) the collection read. Neither ever
raises: a kubelet problem becomes a reason in the data, logged once when it starts and once when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nvidia_gpu_exporter.kubernetes import cgroups
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_PROC_ROOT
from nvidia_gpu_exporter.kubernetes.devices import (
    DeviceRef,
    UnrecognisedDeviceId,
    looks_like_gpu,
    parse_device_id,
    parse_list_gpus,
    resource_matches,
)
from nvidia_gpu_exporter.kubernetes.podresources import PodResourcesError, PodResourcesSource
from nvidia_gpu_exporter.model.kubernetes import (
    DEVICE_ID_NOT_RECOGNISED,
    GPU_NOT_VISIBLE,
    HOSTPID_OFF,
    MIG_DEVICE_UNKNOWN,
    NOT_IN_A_POD,
    PROCESS_NOT_VISIBLE,
    PROCESS_QUERY_FAILED,
    RESOURCE_NOT_MATCHED,
    RPC_ERROR,
    TIMEOUT,
    DraClaim,
    GpuPod,
    KubernetesAttribution,
    PodDevice,
    PodResourcesReading,
    ProcessPod,
    UnmatchedDevice,
)
from nvidia_gpu_exporter.model.snapshot import MigDevice, QueryField, Readings, column_of
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.support.asynctimeout import within_timeout

log = logging.getLogger(__name__)

# NVIDIA's DRA driver names a GPU gpu-<minor> and a MIG device gpu-<parent minor>-mig-<profile>-<start>-<size>,
# the minor number of /dev/nvidia<minor>, which the driver lists per PCI address under /proc/driver/nvidia/gpus.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
_DRA_DEVICE = re.compile(
    r"^gpu-(?P<minor>[0-9]{1,4})(?:-mig-(?P<profile>[0-9]{1,4})-(?P<start>[0-9]{1,4})-(?P<size>[0-9]{1,4}))?$"
)
_MINOR = re.compile(r"^Device Minor:\s*(?P<minor>[0-9]+)\s*$", re.MULTILINE)
_COMPUTE_SLICE = re.compile(r"^[0-9]+c\.")  # ``1c.3g.71gb``: a compute instance of the ``3g.71gb`` GPU instance
MAX_CLAIM_LABEL_CHARACTERS = 253  # a Kubernetes object name's limit; the kubelet's answer is not trusted to keep it

MigLister = Callable[[], Awaitable[str]]
"""Returns ``nvidia-smi -L`` text: the exec backend's way to place MIG uuids on their parent GPUs."""
ProcessPods = Callable[[str], "tuple[str, str] | None"]
"""(pod uid, container id) of a pid, or None for a process in no pod: the demo's simulated cgroups."""


def _mig_device(readings: Readings | None, uuid: str, named: re.Match[str]) -> MigDevice | None:
    """The MIG device NVIDIA's DRA driver names ``gpu-<minor>-mig-<profile id>-<start>-<size>`` on the GPU ``uuid``:
    the one of the GPU instance with that profile id and placement (NVML's), where exactly one device is there."""
    if readings is None or readings.extras is None or not uuid:
        return None
    placement = (int(named["profile"]), int(named["start"]), int(named["size"]))
    found = [
        device
        for device in readings.extras.mig_devices
        if device.placement == placement and normalize_uuid(device.gpu_uuid) == uuid
    ]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class AttributionSettings:
    """The ``--kubernetes.*`` flags, in seconds."""

    pod_resources: bool = False
    socket: str = ""
    timeout_seconds: float = 2.0
    cache_seconds: float = 5.0
    resource_patterns: tuple[str, ...] = ()
    process_pods: bool = False
    proc_root: str = DEFAULT_PROC_ROOT
    dra_claims: bool = False


@dataclass(frozen=True, slots=True)
class _GpuIndex:
    """One collection's GPUs, keyed the ways device ids name them."""

    uuids: frozenset[str]
    by_index: dict[str, str]
    mig_parents: dict[str, str]
    legacy_mig: dict[tuple[str, int, int], str]


class Attributor:
    """Owns the kubelet cache and the state that is logged on change."""

    def __init__(
        self,
        settings: AttributionSettings,
        fields: Sequence[QueryField],
        *,
        source: PodResourcesSource | None,
        mig_lister: MigLister | None = None,
        process_pods: ProcessPods | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.source = source if settings.pod_resources else None
        self.mig_lister = mig_lister
        self.process_pods = process_pods  # set: processes' pods from it instead of the cgroups under proc_root
        self.cgroups = cgroups.CgroupCache(settings.proc_root)  # each running process's cgroup, read once
        self._clock = clock
        self._wall_clock = wall_clock
        self._uuid_column = column_of(fields, "uuid")
        self._index_column = column_of(fields, "index")
        self._bus_column = column_of(fields, "pci.bus_id")
        self._cached: PodResourcesReading | None = None
        self._cached_at = 0.0
        self._lock: asyncio.Lock | None = None
        self._logged_state: tuple[bool, str] | None = None
        self._listed_mig: dict[str, str] = {}
        self._listed_for: float | None = None  # fetched_at of the reading the last -L ran for
        self.fetches = 0  # kubelet calls made, for tests

    # -- the kubelet ------------------------------------------------------------------------------------

    async def fetch(self) -> PodResourcesReading | None:
        """The kubelet's allocations, at most ``cache_seconds`` old; ``None`` when the source is off."""
        if self.source is None:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            cached = self._cached
            if cached is not None and self._clock() - self._cached_at < self.settings.cache_seconds:
                return cached
            reading = await self._call(self.source)
            self._cached, self._cached_at = reading, self._clock()
            self._log_transition(reading)
            return reading

    async def _call(self, source: PodResourcesSource) -> PodResourcesReading:
        timeout = self.settings.timeout_seconds
        self.fetches += 1
        try:
            devices = await within_timeout(source.list_devices(timeout), timeout)
        except PodResourcesError as error:
            return PodResourcesReading(False, error.reason, error.detail, fetched_at=self._wall_clock())
        except asyncio.TimeoutError:
            detail = f"no answer from {source.socket} within {timeout:g}s"
            return PodResourcesReading(False, TIMEOUT, detail, fetched_at=self._wall_clock())
        except Exception as error:  # a client bug must not take collections down with it
            log.exception("kubelet PodResources call raised an unexpected error")
            return PodResourcesReading(False, RPC_ERROR, repr(error), fetched_at=self._wall_clock())
        return PodResourcesReading(True, devices=devices, fetched_at=self._wall_clock())

    def _log_transition(self, reading: PodResourcesReading) -> None:
        state = (reading.ok, reading.reason)
        if state == self._logged_state:
            return
        previous, self._logged_state = self._logged_state, state
        socket = self.source.socket if self.source is not None else ""
        if reading.ok:
            log.info("Kubernetes pod attribution is up", extra={"socket": socket, "devices": len(reading.devices)})
        elif previous is None or previous[0] or previous[1] != reading.reason:
            log.warning(
                "Kubernetes pod attribution is unavailable",
                extra={"socket": socket, "reason": reading.reason, "detail": reading.detail},
            )

    # -- mapping ----------------------------------------------------------------------------------------

    def _gpu_index(self, readings: Readings) -> _GpuIndex:
        uuids: set[str] = set()
        by_index: dict[str, str] = {}
        for row in readings.gpus.rows:
            if self._uuid_column is None:
                break
            uuid = normalize_uuid(row[self._uuid_column])
            uuids.add(uuid)
            if self._index_column is not None:
                by_index[row[self._index_column].strip()] = uuid
        mig_parents = dict(self._listed_mig)
        legacy: dict[tuple[str, int, int], str] = {}
        if readings.extras is not None:
            for device in readings.extras.mig_devices:
                parent, mig = normalize_uuid(device.gpu_uuid), normalize_mig_uuid(device.mig_uuid)
                mig_parents[mig] = parent
                legacy[(parent, device.gpu_instance_id, device.compute_instance_id)] = mig
        return _GpuIndex(frozenset(uuids), by_index, mig_parents, legacy)

    async def _refresh_mig_list(self, reading: PodResourcesReading) -> bool:
        """Run ``nvidia-smi -L`` once per kubelet answer that names an unknown MIG uuid."""
        if self.mig_lister is None or self._listed_for == reading.fetched_at:
            return False
        self._listed_for = reading.fetched_at
        try:
            text = await within_timeout(self.mig_lister(), self.settings.timeout_seconds)
        except Exception as error:  # best effort: the devices stay "unknown", with this in the debug log
            log.debug("nvidia-smi -L failed", extra={"err": repr(error)})
            return False
        self._listed_mig = parse_list_gpus(text)
        return True

    def _place(self, device: PodDevice, ref: DeviceRef, gpus: _GpuIndex) -> GpuPod | UnmatchedDevice:
        def pod(uuid: str, mig_uuid: str = "") -> GpuPod:
            return GpuPod(
                uuid, mig_uuid, device.namespace, device.pod, device.container, device.resource,
                device.device_id, ref.replica,
            )  # fmt: skip

        if ref.kind == "index":
            uuid = gpus.by_index.get(ref.index)
            if uuid is None:
                return UnmatchedDevice(device, GPU_NOT_VISIBLE, f"no GPU with index {ref.index} among those read")
            return pod(uuid)
        if ref.kind == "mig":
            parent = gpus.mig_parents.get(ref.mig_uuid)
            if parent is None:
                return UnmatchedDevice(
                    device,
                    MIG_DEVICE_UNKNOWN,
                    "no MIG inventory (NVML, or nvidia-smi -L) places this MIG device on a GPU",
                )
            if parent not in gpus.uuids:
                return UnmatchedDevice(device, GPU_NOT_VISIBLE, "its parent GPU is not among those read", parent)
            return pod(parent, ref.mig_uuid)
        if ref.gpu_uuid not in gpus.uuids:
            return UnmatchedDevice(device, GPU_NOT_VISIBLE, "this GPU is not among those read", ref.gpu_uuid)
        if ref.kind == "legacy_mig":
            mig = gpus.legacy_mig.get((ref.gpu_uuid, ref.gpu_instance or 0, ref.compute_instance or 0))
            return pod(ref.gpu_uuid, mig or normalize_mig_uuid(device.device_id.split("::", 1)[0]))
        return pod(ref.gpu_uuid)

    async def _map_devices(
        self, reading: PodResourcesReading, readings: Readings
    ) -> tuple[tuple[GpuPod, ...], tuple[UnmatchedDevice, ...]]:
        gpus = self._gpu_index(readings)
        patterns = self.settings.resource_patterns
        parsed: list[tuple[PodDevice, DeviceRef]] = []
        unmatched: list[UnmatchedDevice] = []
        for device in reading.devices:
            if device.claim_name:  # a ResourceClaim's device: _map_claims reads those
                continue
            matched = resource_matches(device.resource, patterns)
            if not matched and not looks_like_gpu(device.device_id):
                continue  # another vendor's device: none of our business
            try:
                ref = parse_device_id(device.device_id)
            except UnrecognisedDeviceId as error:
                if matched:
                    unmatched.append(UnmatchedDevice(device, DEVICE_ID_NOT_RECOGNISED, str(error)))
                continue
            if not matched:
                uuid = ref.gpu_uuid or gpus.mig_parents.get(ref.mig_uuid, "")
                unmatched.append(
                    UnmatchedDevice(
                        device,
                        RESOURCE_NOT_MATCHED,
                        f"resource {device.resource!r} is not in --kubernetes.resource-names "
                        f"({','.join(patterns)}): add it to attribute this device",
                        uuid,
                    )
                )
                continue
            parsed.append((device, ref))
        unknown_mig = any(ref.kind == "mig" and ref.mig_uuid not in gpus.mig_parents for _, ref in parsed)
        if unknown_mig and await self._refresh_mig_list(reading):
            gpus = self._gpu_index(readings)
        placed: list[GpuPod] = []
        for device, ref in parsed:
            result = self._place(device, ref, gpus)
            if isinstance(result, GpuPod):
                placed.append(result)
            else:
                unmatched.append(result)
        return tuple(placed), tuple(unmatched)

    def _minors(self, readings: Readings) -> dict[str, str]:
        """Device minor number -> GPU uuid, from the driver's ``information`` file of each GPU's PCI address."""
        if self._uuid_column is None or self._bus_column is None:
            return {}
        minors: dict[str, str] = {}
        for row in readings.gpus.rows:
            address = row[self._bus_column].strip().lower()[-12:]  # 00000000:83:00.0 -> 0000:83:00.0
            path = Path(self.settings.proc_root) / "driver" / "nvidia" / "gpus" / address / "information"
            try:
                found = _MINOR.search(path.read_text(encoding="utf-8", errors="replace")[:4096])
            except OSError:
                continue
            if found:
                minors[str(int(found["minor"]))] = normalize_uuid(row[self._uuid_column])
        return minors

    def _map_claims(self, reading: PodResourcesReading, readings: Readings | None) -> tuple[DraClaim, ...]:
        """Each ResourceClaim device of NVIDIA's DRA driver, on its GPU where the collection has it."""
        minors = self._minors(readings) if readings is not None else {}
        claims: dict[DraClaim, None] = {}
        for device in reading.devices:
            if not device.claim_name or device.driver != NVIDIA_DRA_DRIVER:
                continue
            named = _DRA_DEVICE.match(device.device_id)
            uuid = minors.get(str(int(named["minor"])), "") if named else ""
            mig = _mig_device(readings, uuid, named) if named and named["profile"] is not None else None
            values = (
                device.namespace, device.pod, device.container, device.claim_namespace, device.claim_name,
                device.driver, device.pool, device.device_id,
                *((_COMPUTE_SLICE.sub("", mig.profile), mig.mig_uuid) if mig is not None else ("", "")),
            )  # fmt: skip
            claims[DraClaim(uuid, *(value[:MAX_CLAIM_LABEL_CHARACTERS] for value in values))] = None
        return tuple(claims)

    def _map_processes(self, readings: Readings) -> tuple[tuple[ProcessPod, ...] | None, str, str]:
        processes = readings.processes
        if not self.settings.process_pods or processes is None:
            return None, "", ""
        if not processes.succeeded:
            return (), PROCESS_QUERY_FAILED, "the per-process query failed in this collection"
        if self.process_pods is not None:
            return self._simulated_processes(readings, self.process_pods), "", ""
        proc_root = self.settings.proc_root
        self.cgroups.next_collection()
        reason, detail = cgroups.host_pid_problem(proc_root)
        if reason:
            rows = tuple(ProcessPod(normalize_uuid(row.gpu_uuid), row.pid, reason=reason) for row in processes.rows)
            return rows, reason, detail
        found: list[ProcessPod] = []
        for row in processes.rows:
            lookup = self.cgroups.lookup(row.pid)
            uuid = normalize_uuid(row.gpu_uuid)
            if lookup.pod is None:
                found.append(ProcessPod(uuid, row.pid, reason=lookup.reason, detail=lookup.detail))
            else:
                pod = lookup.pod
                found.append(ProcessPod(uuid, row.pid, pod.pod_uid, pod.container_id, pod.runtime))
        if found and all(process.reason == PROCESS_NOT_VISIBLE for process in found):
            return (
                tuple(found),
                HOSTPID_OFF,
                f"none of the {len(found)} GPU processes exists under {proc_root}: set hostPID: true",
            )
        return tuple(found), "", ""

    @staticmethod
    def _simulated_processes(readings: Readings, process_pods: ProcessPods) -> tuple[ProcessPod, ...]:
        found: list[ProcessPod] = []
        for row in readings.processes.rows if readings.processes is not None else ():
            uuid = normalize_uuid(row.gpu_uuid)
            pod = process_pods(row.pid)
            if pod is None:
                found.append(ProcessPod(uuid, row.pid, reason=NOT_IN_A_POD, detail="a host process of the demo"))
            else:
                found.append(ProcessPod(uuid, row.pid, pod[0], pod[1], "containerd"))
        return tuple(found)

    async def attribute(self, reading: PodResourcesReading | None, readings: Readings | None) -> KubernetesAttribution:
        """Join the kubelet's answer (``None``: source off) with one collection (``None``: it failed)."""
        socket = self.source.socket if self.source is not None else ""
        gpu_pods: tuple[GpuPod, ...] = ()
        unmatched: tuple[UnmatchedDevice, ...] = ()
        if reading is not None and reading.ok and readings is not None:
            gpu_pods, unmatched = await self._map_devices(reading, readings)
        claims: tuple[DraClaim, ...] | None = None
        if self.settings.dra_claims and reading is not None and reading.ok and readings is not None:
            claims = self._map_claims(reading, readings)
        processes: tuple[ProcessPod, ...] | None = None
        process_reason = process_detail = ""
        if readings is not None:
            processes, process_reason, process_detail = self._map_processes(readings)
        return KubernetesAttribution(
            reading, socket, gpu_pods, unmatched, processes, process_reason, process_detail, claims=claims
        )
