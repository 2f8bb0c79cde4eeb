"""GPU-seconds allocated and used per pod, so a GPU held but idle shows and a namespace's GPU-hours can be billed.

Allocated: at each collection every GPU's time since the collection before is split among the devices of it the
kubelet lists as held (the whole GPU, its time-sliced replicas, its MIG devices), and each pod gets its devices'
part. Used: the same time times the pod's SM utilization on the GPU (its processes' sum, at most 1). Both are
counters per pod that only live while the pod holds (or runs on) the GPU: a pod missing from a collection is
forgotten, so the state is bounded by what one collection lists. docs/metrics.md ("GPU-seconds") states the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from nvidia_gpu_exporter.model.snapshot import PodAllocation, PodShare

if TYPE_CHECKING:  # a default start loads no Kubernetes model (tests/test_footprint.py)
    from nvidia_gpu_exporter.model.kubernetes import GpuPod


def _elapsed(previous: float | None, now: float) -> float:
    """Seconds since the collection before; 0 for the first one and for a clock that went back."""
    return max(0.0, now - previous) if previous is not None else 0.0


class GpuSecondsLedger:
    """The allocated and used GPU-seconds of the pods of the latest collection."""

    def __init__(self) -> None:
        self._allocated: dict[tuple[str, str, str], float] = {}  # (GPU uuid, namespace, pod) -> seconds
        self._allocated_at: float | None = None
        self._used: dict[tuple[str, str, str], float] = {}  # (GPU uuid, GPU instance, pod uid) -> seconds
        self._used_at: float | None = None

    def allocate(self, gpu_pods: Sequence[GpuPod], now: float) -> tuple[PodAllocation, ...]:
        """Each pod's part of each GPU it holds (``gpu_pods``: the kubelet's answer placed on GPUs) at ``now``."""
        elapsed = _elapsed(self._allocated_at, now)
        self._allocated_at = now
        devices: dict[str, set[tuple[str, str, str]]] = {}  # GPU uuid -> its held devices (MIG uuid, replica, id)
        held: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
        for link in gpu_pods:
            device = (link.mig_uuid, link.replica, link.device_id)
            devices.setdefault(link.uuid, set()).add(device)
            held.setdefault((link.uuid, link.namespace, link.pod), set()).add(device)
        allocated: dict[tuple[str, str, str], float] = {}
        served: list[PodAllocation] = []
        for key in sorted(held):
            fraction = len(held[key]) / len(devices[key[0]])
            allocated[key] = self._allocated.get(key, 0.0) + elapsed * fraction
            served.append(PodAllocation(key[0], key[1], key[2], fraction, allocated[key]))
        self._allocated = allocated
        return tuple(served)

    def use(self, shares: Sequence[PodShare], now: float) -> tuple[PodShare, ...]:
        """``shares`` with their used GPU-seconds; a share without SM utilization (MIG) keeps ``None``."""
        elapsed = _elapsed(self._used_at, now)
        self._used_at = now
        used: dict[tuple[str, str, str], float] = {}
        served: list[PodShare] = []
        for share in shares:
            if share.sm_percent is None:
                served.append(share)
                continue
            key = (share.uuid, share.gpu_instance_id, share.pod_uid)
            used[key] = self._used.get(key, 0.0) + elapsed * min(1.0, share.sm_percent / 100.0)
            served.append(replace(share, used_seconds=used[key]))
        self._used = used
        return tuple(served)
