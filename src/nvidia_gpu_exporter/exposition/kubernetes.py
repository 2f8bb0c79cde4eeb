"""The Kubernetes attribution families, and the opt-in pod labels of the per-GPU series.

Rendered only when attribution is enabled (the snapshot then carries a
:class:`~..kubernetes.model.KubernetesAttribution`); with it off, nothing here runs and the output is the
Go exporter's byte for byte.
"""

from __future__ import annotations

from collections.abc import Collection

from nvidia_gpu_exporter.exposition.families import ATTRIBUTION_UP, COMPUTE_APP_POD_INFO, GPU_POD_INFO
from nvidia_gpu_exporter.exposition.text import Family, escape_label_value
from nvidia_gpu_exporter.model.kubernetes import KubernetesAttribution

POD_LABELS = ("container", "namespace", "pod")  # sorted by name, as label blocks are written


def attribution_families(attribution: KubernetesAttribution, gpu_uuids: Collection[str] | None) -> list[Family]:
    """``attribution_up`` (when the kubelet source is on) and, for a successful collection
    (``gpu_uuids`` set), the pod info of its GPUs and processes. Repeats collapse: a container holding
    two replicas of one GPU is one series."""
    families: list[Family] = []
    reading = attribution.pod_resources
    if reading is not None:
        up = ATTRIBUTION_UP.family()
        up.add((reading.reason,), 1.0 if reading.ok else 0.0)
        families.append(up)
    if gpu_uuids is None:
        return families
    info = GPU_POD_INFO.family()
    seen: set[tuple[str, ...]] = set()
    for link in attribution.gpu_pods:
        labels = (link.uuid, link.namespace, link.pod, link.container, link.mig_uuid)
        if link.uuid in gpu_uuids and labels not in seen:
            seen.add(labels)
            info.add(labels, 1.0)
    families.append(info)
    if attribution.processes is not None:
        apps = COMPUTE_APP_POD_INFO.family()
        seen_apps: set[tuple[str, ...]] = set()
        for process in attribution.processes:
            app = (process.uuid, process.pid, process.pod_uid, process.container_id)
            if process.pod_uid and app not in seen_apps:
                seen_apps.add(app)
                apps.add(app, 1.0)
        families.append(apps)
    return families


def pod_holders(attribution: KubernetesAttribution | None) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(GPU uuid, MIG uuid or "") -> (pod, namespace, container) of each device exactly one container holds (every
    time-sliced replica of it included); a device several containers share has no entry."""
    holders: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for link in attribution.gpu_pods if attribution is not None else ():
        holders.setdefault((link.uuid, link.mig_uuid), set()).add((link.pod, link.namespace, link.container))
    return {key: next(iter(found)) for key, found in holders.items() if len(found) == 1}


def sole_holders(attribution: KubernetesAttribution) -> dict[str, tuple[str, str, str]]:
    """GPU uuid → (container, namespace, pod) for GPUs held whole (or every replica) by exactly one container.

    A GPU shared by several containers (time-slicing) gets no pod labels on its per-GPU series: any one
    pick would be wrong, and one series per pod would multiply sums. Neither does a GPU split into MIG
    devices: its per-GPU series cover every slice, not the one a pod holds. ``nvidia_smi_gpu_pod_info``
    lists them all.
    """
    split = {link.uuid for link in attribution.gpu_pods if link.mig_uuid}
    return {
        uuid: (container, namespace, pod)
        for (uuid, mig_uuid), (pod, namespace, container) in pod_holders(attribution).items()
        if not mig_uuid and uuid not in split
    }


def labelled_gpu(uuid: str, holder: tuple[str, str, str] | None) -> str:
    """The label block of a per-GPU series: ``{uuid="..."}``, with the pod labels first when one holds it."""
    if holder is None:
        return '{uuid="' + escape_label_value(uuid) + '"}'
    pairs = [*zip(POD_LABELS, holder, strict=True), ("uuid", uuid)]
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs if value) + "}"
