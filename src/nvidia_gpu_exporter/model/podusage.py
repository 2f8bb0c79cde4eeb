"""Per-pod shares of shared GPUs (time-sliced replicas, MPS clients), and the per-pod energy ledger.

A pod's share of a GPU is its processes' part of the GPU's summed per-process SM utilization; on a GPU where
that sum is 0 (idle, or MIG, where drivers report no per-process utilization) it is their part of the summed
per-process used memory; with neither, nobody's. Host processes (no pod) keep their part unattributed, and so
do the pods past the per-GPU cap. A pod is named by the API server's pod list where it is read, else by the
kubelet where one container holds the GPU and only its pod runs there. docs/metrics.md ("Per-pod shares") states
these rules; this module holds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from nvidia_gpu_exporter.model.snapshot import PodShare, PodUsage, ProcessUsage, ProcessUsageRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid


def _add(total: float | None, value: float | None) -> float | None:
    if value is None:
        return total
    return value if total is None else total + value


class _Sums:
    """One pod's processes on one GPU (instance) so far, and their summed SM % and used memory."""

    __slots__ = ("memory", "processes", "sm")

    def __init__(self, sm: float | None, memory: float | None) -> None:
        self.processes = 1
        self.sm = sm
        self.memory = memory

    def add(self, row: ProcessUsageRow) -> None:
        self.processes += 1
        self.sm = _add(self.sm, row.sm_percent)
        self.memory = _add(self.memory, row.used_memory_bytes)


def _rank(item: tuple[tuple[str, str], _Sums]) -> tuple[float, float, str, str]:
    """Busiest first: SM, then used memory, then pod uid and GPU instance for a stable order."""
    (instance, pod_uid), so_far = item
    return (-(so_far.sm or 0.0), -(so_far.memory or 0.0), pod_uid, instance)


def _gpu_shares(
    uuid: str,
    rows: Sequence[ProcessUsageRow],
    pod_of: Mapping[str, str],
    holders: Mapping[tuple[str, str], tuple[str, str, str]],
    power: float | None,
    *,
    limit: int,
    instances: Mapping[tuple[str, str], str],
    names: Mapping[str, tuple[str, str]],
    containers: Mapping[str, str],
) -> list[PodShare]:
    sm_sum = sum(row.sm_percent or 0.0 for row in rows)
    memory_sum = sum(row.used_memory_bytes or 0.0 for row in rows)
    # Summed in row order per (GPU instance, pod uid); one PodShare per pod kept is built from the sums (a frozen
    # dataclass replaced per row cost more than the rest of the step).
    sums: dict[tuple[str, str], _Sums] = {}
    container_names: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        pod_uid = pod_of.get(row.pid, "")
        if not pod_uid:
            continue
        key = (instances.get((uuid, row.pid), ""), pod_uid)
        container_names.setdefault(key, set()).add(containers.get(row.pid, ""))
        so_far = sums.get(key)
        if so_far is None:
            sums[key] = _Sums(row.sm_percent, row.used_memory_bytes)
        else:
            so_far.add(row)
    running: dict[str, set[str]] = {}  # GPU instance ("" for the whole GPU) -> the pods running there
    for instance, pod_uid in sums:
        running.setdefault(instance, set()).add(pod_uid)
    kept: list[PodShare] = []
    for (instance, pod_uid), so_far in sorted(sums.items(), key=_rank)[:limit]:
        if sm_sum > 0:
            share = (so_far.sm or 0.0) / sm_sum
        elif memory_sum > 0:
            share = (so_far.memory or 0.0) / memory_sum
        else:
            share = 0.0
        holder = holders.get((uuid, instance))
        alone = holder is not None and len(running[instance]) == 1
        namespace, pod, container = holder if holder is not None and alone else ("", "", "")
        named = names.get(pod_uid)
        if named is not None:  # the API server's names of this very pod beat the kubelet's holder
            (namespace, pod), ran_in = named, container_names[(instance, pod_uid)]
            container = next(iter(ran_in)) if len(ran_in) == 1 else ""
        kept.append(
            PodShare(
                uuid,
                pod_uid,
                instance,
                namespace,
                pod,
                container,
                processes=so_far.processes,
                sm_percent=so_far.sm,
                used_memory_bytes=so_far.memory,
                share=share,
                power_watts=None if power is None else power * share,
            )
        )
    return kept


def pod_shares(
    usage: ProcessUsage,
    pod_of: Mapping[str, str],
    holders: Mapping[tuple[str, str], tuple[str, str, str]],
    power: Mapping[str, float],
    limit: int,
    *,
    instances: Mapping[tuple[str, str], str] | None = None,
    names: Mapping[str, tuple[str, str]] | None = None,
    containers: Mapping[str, str] | None = None,
) -> tuple[PodShare, ...]:
    """Each GPU's pods (at most ``limit``, the busiest) from the uncapped usage rows.

    ``pod_of`` maps a pid to its pod uid (processes without one are the host's); ``holders`` maps (GPU uuid, GPU
    instance or "" for the whole GPU) to the (namespace, pod, container) the kubelet says holds it alone, which
    names its pod when just one runs there;
    ``power`` maps a GPU uuid to its power draw in watts; ``instances`` maps (GPU uuid, pid) to the MIG GPU
    instance the process runs in, so a pod on two instances of a GPU has a share for each. ``names`` maps a pod uid
    to its (namespace, pod) and ``containers`` a pid to its container's name, as the API server lists them
    (``--kubernetes.pod-metadata``): a pod named there is named whoever holds the GPU, with the container its
    processes on the GPU run in (none when they run in several).
    """
    if not usage.succeeded:
        return ()
    per_gpu: dict[str, list[ProcessUsageRow]] = {}
    normalized: dict[str, str] = {}  # a GPU's rows all spell its uuid the same way: normalize it once
    for row in usage.rows:
        uuid = normalized.get(row.gpu_uuid)
        if uuid is None:
            uuid = normalized[row.gpu_uuid] = normalize_uuid(row.gpu_uuid)
        per_gpu.setdefault(uuid, []).append(row)
    shares: list[PodShare] = []
    for uuid in sorted(per_gpu):
        shares += _gpu_shares(
            uuid,
            per_gpu[uuid],
            pod_of,
            holders,
            power.get(uuid),
            limit=limit,
            instances=instances or {},
            names=names or {},
            containers=containers or {},
        )
    return tuple(shares)


class PodEnergyLedger:
    """Splits each GPU's energy increments by the pods' shares, so a pod's counter says what its use cost.

    An increment is the GPU's energy counter now less at the collection before, split by this collection's
    shares; the part no pod's share covers (host processes, pods past the cap, a GPU nobody used) goes to the
    GPU's unattributed counter, so a GPU's pods and its unattributed part add up to its increments. The first
    reading of a GPU, and one lower than the one before (a driver reload), only become the new baseline. A pod
    keeps its total while it has a share in every collection; one missing from a collection is forgotten, so
    the state is bounded by the pods a collection serves.
    """

    def __init__(self) -> None:
        self._previous: dict[str, float] = {}  # GPU uuid -> its energy counter at the last collection
        self._pods: dict[tuple[str, str, str], float] = {}  # (GPU uuid, GPU instance, pod uid) -> joules
        self._unattributed: dict[str, float] = {}

    def account(self, shares: Sequence[PodShare], energy: Mapping[str, float]) -> PodUsage:
        """This collection's shares with their energy totals; ``energy`` maps a GPU uuid to its counter."""
        increments: dict[str, float] = {}
        for uuid, joules in energy.items():
            previous = self._previous.get(uuid)
            increments[uuid] = joules - previous if previous is not None and joules >= previous else 0.0
        self._previous = dict(energy)
        pods: dict[tuple[str, str, str], float] = {}
        attributed: dict[str, float] = {}
        served: list[PodShare] = []
        for share in shares:
            increment = increments.get(share.uuid)
            if increment is None:
                served.append(share)
                continue
            part = increment * share.share
            attributed[share.uuid] = attributed.get(share.uuid, 0.0) + part
            key = (share.uuid, share.gpu_instance_id, share.pod_uid)
            pods[key] = self._pods.get(key, 0.0) + part
            served.append(replace(share, energy_joules=pods[key]))
        self._pods = pods
        self._unattributed = {
            uuid: self._unattributed.get(uuid, 0.0) + max(0.0, increment - attributed.get(uuid, 0.0))
            for uuid, increment in increments.items()
        }
        return PodUsage(tuple(served), tuple(sorted(self._unattributed.items())))
