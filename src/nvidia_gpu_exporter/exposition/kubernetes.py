"""The Kubernetes attribution families, and the opt-in pod labels of the per-GPU series.

Rendered only when attribution is enabled (the snapshot then carries a
:class:`~..kubernetes.model.KubernetesAttribution`); with it off, nothing here runs and the output is the
Go exporter's byte for byte.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nvidia_gpu_exporter.exposition.families import (
    ATTRIBUTION_UP,
    COMPUTE_APP_POD_INFO,
    GPU_DRA_CLAIM_INFO,
    GPU_POD_INFO,
    POD_METADATA_FAILURES,
)
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
    if attribution.claims is not None:  # --kubernetes.dra-claims
        claims = GPU_DRA_CLAIM_INFO.family()
        for claim in attribution.claims:
            if claim.uuid in gpu_uuids or not claim.uuid:
                claims.add(
                    (
                        claim.uuid,
                        claim.namespace,
                        claim.pod,
                        claim.container,
                        claim.claim_namespace,
                        claim.claim_name,
                        claim.driver,
                        claim.pool,
                        claim.device,
                    ),
                    1.0,
                )
        families.append(claims)
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


def pod_metadata_family(failures: Sequence[tuple[str, int]]) -> Family:
    """The failed lists of the node's pods by reason, every reason from 0 (served whatever the collection's
    outcome)."""
    family = POD_METADATA_FAILURES.family()
    for reason, count in failures:
        family.add((reason,), float(count))
    return family


def labelled_gpu(uuid: str, holder: tuple[str, str, str] | None) -> str:
    """The label block of a per-GPU series: ``{uuid="..."}``, with the pod labels first when one holds it."""
    if holder is None:
        return '{uuid="' + escape_label_value(uuid) + '"}'
    pairs = [*zip(POD_LABELS, holder, strict=True), ("uuid", uuid)]
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs if value) + "}"
