"""The per-pod share families (docs/metrics.md, "Per-pod shares"): one series per pod and GPU it runs on, and
the energy no pod's share covers per GPU. Pure functions of the collector's :class:`~..snapshot.PodUsage`."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nvidia_gpu_exporter.exposition.families import (
    POD_ENERGY,
    POD_GPU_ALLOCATED_SECONDS,
    POD_GPU_SHARE,
    POD_GPU_USED_SECONDS,
    POD_POWER,
    POD_SM_UTILIZATION,
    POD_USED_MEMORY,
    UNATTRIBUTED_ENERGY,
)
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.snapshot import PodAllocation, PodUsage

PERCENT = 0.01


def pod_families(usage: PodUsage, gpu_uuids: Collection[str]) -> list[Family]:
    """The pods of the collection's GPUs (``gpu_uuids``); a value the pod has none of is absent, never 0."""
    sm, memory, share, power, energy, used = (
        spec.family()
        for spec in (
            POD_SM_UTILIZATION,
            POD_USED_MEMORY,
            POD_GPU_SHARE,
            POD_POWER,
            POD_ENERGY,
            POD_GPU_USED_SECONDS,
        )
    )
    for pod in usage.pods:
        if pod.uuid not in gpu_uuids:
            continue
        labels = (pod.uuid, pod.gpu_instance_id, pod.pod_uid, pod.namespace, pod.pod, pod.container)
        if pod.sm_percent is not None:
            sm.add(labels, pod.sm_percent * PERCENT)
        if pod.used_memory_bytes is not None:
            memory.add(labels, pod.used_memory_bytes)
        share.add(labels, pod.share)
        if pod.power_watts is not None:
            power.add(labels, pod.power_watts)
        if pod.energy_joules is not None:
            energy.add(labels, pod.energy_joules)
        if pod.used_seconds is not None:
            used.add(labels, pod.used_seconds)
    unattributed = UNATTRIBUTED_ENERGY.family()
    for uuid, joules in usage.unattributed_energy:
        if uuid in gpu_uuids:
            unattributed.add((uuid,), joules)
    return [sm, memory, share, power, energy, unattributed, used]


def allocation_families(allocations: Sequence[PodAllocation], gpu_uuids: Collection[str]) -> list[Family]:
    """The GPU-seconds allocated to each pod holding a GPU of the collection (``gpu_uuids``)."""
    allocated = POD_GPU_ALLOCATED_SECONDS.family()
    for item in allocations:
        if item.uuid in gpu_uuids:
            allocated.add((item.uuid, item.namespace, item.pod), item.seconds)
    return [allocated]
