"""MIG devices, their GPU instances' memory, and GPM activity over the window between two collections.

GPM metrics are differences between two samples, so each GPU instance, and each whole GPU not in MIG mode,
keeps the sample of the previous collection. The first collection that sees one only seeds it (no activity
series), as does one after a very long gap or after the instance was re-created with different devices; a
collection less than a second after the last one repeats the last values rather than divide by a tiny window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

from nvidia_gpu_exporter.backends.nvml.api import FUNCTION_NOT_FOUND, Failure, call, read_string
from nvidia_gpu_exporter.model.snapshot import MigDevice, MigInstanceReading

MIN_WINDOW_SECONDS = 1.0
MAX_WINDOW_SECONDS = 600.0
GRAPHICS, SM, OCCUPANCY, TENSOR, DRAM, PCIE_TX, PCIE_RX = 1, 2, 3, 5, 10, 20, 21
GPM_METRIC_IDS = (GRAPHICS, SM, OCCUPANCY, TENSOR, DRAM, PCIE_TX, PCIE_RX)
WHOLE_GPU = -1  # the GpmSampler key's GPU instance for a device-level sample (nvmlGpmSampleGet)
MIB = 1_048_576.0
MAX_MIG_SLOTS = 64  # real GPUs have at most 7 or 8; a garbage count must not spin the cycle

Fingerprint = tuple[tuple[int, str, str], ...]  # (compute instance id, profile, MIG uuid) per MIG device
Placement = tuple[int, int, int]  # a GPU instance's (profile id, placement start, placement size)
Layout = tuple[tuple[int, int, str, str], ...]  # (GPU instance id, compute instance id, profile, MIG uuid) per device


def profile_of(name: str) -> str:
    """The profile in a MIG device's name: ``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``1g.10gb``."""
    _, separator, profile = name.partition(" MIG ")
    return profile if separator else name


@dataclass(slots=True)
class _Baseline:
    sample: Any
    taken_at: float
    fingerprint: Fingerprint
    values: dict[int, float] | None = None


@dataclass(slots=True)
class GpmSampler:
    """Keeps one GPM sample per (parent GPU uuid, GPU instance or WHOLE_GPU) between collections."""

    clock: Callable[[], float] = time.monotonic
    _baselines: dict[tuple[str, int], _Baseline] = field(default_factory=dict)
    _seen: set[tuple[str, int]] = field(default_factory=set)

    def release_all(self) -> None:
        """Free every retained sample (before an NVML shutdown; they would dangle after it)."""
        for baseline in self._baselines.values():
            call("nvmlGpmSampleFree", baseline.sample)
        self._baselines.clear()

    def begin_cycle(self) -> None:
        self._seen = set()

    def end_cycle(self) -> None:
        """Forget the GPU instances this cycle did not see."""
        for key in [key for key in self._baselines if key not in self._seen]:
            call("nvmlGpmSampleFree", self._baselines.pop(key).sample)

    def activity(
        self, parent: Any, parent_uuid: str, gpu_instance: int, fingerprint: Fingerprint
    ) -> dict[int, float] | None:
        """GPM metric values over the window since the last sample, or ``None`` when there is no window."""
        key = (parent_uuid, gpu_instance)
        self._seen.add(key)
        now = self.clock()
        previous = self._baselines.get(key)
        if previous is not None and previous.fingerprint != fingerprint:
            call("nvmlGpmSampleFree", self._baselines.pop(key).sample)
            previous = None
        if previous is not None and now - previous.taken_at < MIN_WINDOW_SECONDS:
            return previous.values
        sample = call("nvmlGpmSampleAlloc")
        if isinstance(sample, Failure):
            return None
        taken = (
            call("nvmlGpmSampleGet", parent, sample)
            if gpu_instance == WHOLE_GPU
            else call("nvmlGpmMigSampleGet", parent, gpu_instance, sample)
        )
        if isinstance(taken, Failure):
            call("nvmlGpmSampleFree", sample)
            return None
        if previous is None or now - previous.taken_at > MAX_WINDOW_SECONDS:
            if previous is not None:
                call("nvmlGpmSampleFree", previous.sample)
            self._baselines[key] = _Baseline(sample, now, fingerprint)
            return None
        values = metrics_between(previous.sample, sample)
        call("nvmlGpmSampleFree", previous.sample)
        self._baselines[key] = _Baseline(sample, now, fingerprint, values)
        return values


@dataclass(slots=True)
class PlacementCache:
    """Each MIG GPU's GPU-instance placements (what only the DRA claim labels use), read once per MIG layout: they
    change only when an operator destroys and re-creates instances, which changes the layout (ids, profiles and the
    MIG uuids, new for every created device). An unprivileged caller's ``None`` is kept too, until the layout
    changes."""

    _known: dict[str, tuple[Layout, dict[int, Placement | None]]] = field(default_factory=dict)

    def placements(self, parent: Any, parent_uuid: str, layout: Layout) -> dict[int, Placement | None] | Failure:
        """Per GPU instance id, its placement; a Failure (not kept) only for lifecycle errors."""
        known = self._known.get(parent_uuid)
        if known is not None and known[0] == layout:
            return known[1]
        read: dict[int, Placement | None] = {}
        for gpu_instance in sorted({entry[0] for entry in layout}):
            placement = _placement(parent, gpu_instance)
            if isinstance(placement, Failure):
                return placement
            read[gpu_instance] = placement
        self._known[parent_uuid] = (layout, read)
        return read

    def retain(self, parent_uuids: set[str]) -> None:
        """Forget the GPUs not in MIG mode this collection (gone, or MIG disabled): at most one entry per GPU."""
        for uuid in [uuid for uuid in self._known if uuid not in parent_uuids]:
            del self._known[uuid]


def gpm_supported(device: Any) -> bool:
    """Whether NVML says the GPU has GPM (Hopper and newer); any failure counts as no."""
    support = call("nvmlGpmQueryDeviceSupport", device)
    return not isinstance(support, Failure) and bool(support.isSupportedDevice)


def percent_ratio(values: dict[int, float], metric: int) -> float | None:
    """A GPM percentage (0-100) as a ratio (0-1), as DCGM's profiling fields are; ``None`` when not read."""
    return values[metric] / 100.0 if metric in values else None


def metrics_between(first: Any, second: Any) -> dict[int, float]:
    """The GPM metrics between two samples; a metric that fails or is not finite is left out."""
    request_type = getattr(pynvml, "c_nvmlGpmMetricsGet_t", None)
    if request_type is None:
        return {}
    request = request_type()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRIC_IDS)
    request.sample1 = first
    request.sample2 = second
    for position, metric_id in enumerate(GPM_METRIC_IDS):
        request.metrics[position].metricId = metric_id
    if isinstance(call("nvmlGpmMetricsGet", request), Failure):
        return {}
    values: dict[int, float] = {}
    for position, metric_id in enumerate(GPM_METRIC_IDS):
        metric = request.metrics[position]
        value = float(metric.value)
        if int(metric.nvmlReturn) == 0 and math.isfinite(value):
            values[metric_id] = value
    return values


@dataclass(frozen=True, slots=True)
class _MigHandle:
    handle: Any
    device: MigDevice


def read_mig(
    parent: Any, parent_uuid: str, sampler: GpmSampler, placements: PlacementCache | None = None
) -> tuple[list[MigDevice], list[MigInstanceReading]] | Failure:
    """The MIG devices of a MIG-enabled GPU and one reading per GPU instance; Failure only for lifecycle errors.
    The devices carry their GPU instance's placement only with ``placements`` (the DRA claim labels use them)."""
    slots = call("nvmlDeviceGetMaxMigDeviceCount", parent)
    if isinstance(slots, Failure):
        return slots if slots.lifecycle else ([], [])
    found: list[_MigHandle] = []
    for slot in range(min(int(slots), MAX_MIG_SLOTS)):
        handle = call("nvmlDeviceGetMigDeviceHandleByIndex", parent, slot)
        if isinstance(handle, Failure):
            if handle.lifecycle:
                return handle
            continue  # an empty slot answers NOT_FOUND
        gpu_instance = call("nvmlDeviceGetGpuInstanceId", handle)
        compute_instance = call("nvmlDeviceGetComputeInstanceId", handle)
        mig_uuid = read_string("nvmlDeviceGetUUID", 96, handle)
        name = read_string("nvmlDeviceGetName", 96, handle)
        readings = (gpu_instance, compute_instance, mig_uuid, name)
        lifecycle = next((r for r in readings if isinstance(r, Failure) and r.lifecycle), None)
        if lifecycle is not None:
            return lifecycle
        if any(isinstance(r, Failure) for r in readings):
            continue
        device = MigDevice(parent_uuid, mig_uuid, int(gpu_instance), int(compute_instance), profile_of(name))
        found.append(_MigHandle(handle, device))

    placed: dict[int, Placement | None] = {}
    if placements is not None:
        layout = tuple(
            sorted((d.gpu_instance_id, d.compute_instance_id, d.profile, d.mig_uuid) for d in (e.device for e in found))
        )
        known = placements.placements(parent, parent_uuid, layout)
        if isinstance(known, Failure):
            return known
        placed = known
    gpm = gpm_supported(parent)
    instances: list[MigInstanceReading] = []
    for gpu_instance in sorted({entry.device.gpu_instance_id for entry in found}):
        members = [entry for entry in found if entry.device.gpu_instance_id == gpu_instance]
        memory = _instance_memory(members[0].handle)  # the framebuffer belongs to the GPU instance
        if isinstance(memory, Failure) and memory.lifecycle:
            return memory
        fingerprint = tuple(
            sorted((entry.device.compute_instance_id, entry.device.profile, entry.device.mig_uuid) for entry in members)
        )
        values = sampler.activity(parent, parent_uuid, gpu_instance, fingerprint) if gpm else None
        instances.append(_instance_reading(parent_uuid, gpu_instance, memory, values or {}))
    devices = [replace(entry.device, placement=placed.get(entry.device.gpu_instance_id)) for entry in found]
    return devices, instances


def _placement(parent: Any, gpu_instance: int) -> Placement | Failure | None:
    """The GPU instance's (profile id, placement start, size), ``None`` where NVML will not say (an unprivileged
    caller gets NO_PERMISSION); a Failure only for lifecycle errors."""
    handle = call("nvmlDeviceGetGpuInstanceById", parent, gpu_instance)
    info = handle if isinstance(handle, Failure) else call("nvmlGpuInstanceGetInfo", handle)
    if isinstance(info, Failure):
        return info if info.lifecycle else None
    return int(info.profileId), int(info.placement.start), int(info.placement.size)


def _instance_memory(handle: Any) -> Any:
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is None:
        return Failure(FUNCTION_NOT_FOUND)
    return call("nvmlDeviceGetMemoryInfo", handle, version)


def _instance_reading(parent_uuid: str, gpu_instance: int, memory: Any, values: dict[int, float]) -> MigInstanceReading:
    def rate(metric: int) -> float | None:
        return values[metric] * MIB if metric in values else None

    has_memory = not isinstance(memory, Failure)
    return MigInstanceReading(
        gpu_uuid=parent_uuid,
        gpu_instance_id=gpu_instance,
        memory_total_bytes=float(memory.total) if has_memory else None,
        memory_used_bytes=float(memory.used) if has_memory else None,
        memory_free_bytes=float(memory.free) if has_memory else None,
        memory_reserved_bytes=float(memory.reserved) if has_memory else None,
        graphics_activity_ratio=percent_ratio(values, GRAPHICS),
        sm_activity_ratio=percent_ratio(values, SM),
        sm_occupancy_ratio=percent_ratio(values, OCCUPANCY),
        tensor_activity_ratio=percent_ratio(values, TENSOR),
        pcie_tx_bytes_per_second=rate(PCIE_TX),
        pcie_rx_bytes_per_second=rate(PCIE_RX),
    )
