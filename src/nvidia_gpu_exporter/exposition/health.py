"""The node-health families (docs/health.md): recent XIDs with their processes, GPUs fallen off the bus, and
the health of the kernel-log source itself; and the collection's own health under its profile-independent name
(docs/metrics.md, "Collection health"). Pure functions of the snapshot; absent pieces render nothing."""

from __future__ import annotations

from nvidia_gpu_exporter.exposition.families import (
    COLLECTION_DURATION,
    COLLECTION_EXIT_CODE,
    COLLECTION_FAILURES,
    COLLECTION_SUCCESS,
    COLLECTION_SUCCESS_TIMESTAMP,
    GPU_FALLEN_OFF_BUS,
    KERNEL_LOG_DROPPED,
    KERNEL_LOG_LOST,
    KERNEL_LOG_RECORDS,
    KERNEL_LOG_UP,
    SXID_ERRORS,
    SXID_LAST_TIMESTAMP,
    XID_OCCURRENCE,
    XID_SOURCE,
)
from nvidia_gpu_exporter.exposition.text import Family, render_family
from nvidia_gpu_exporter.model.snapshot import KernelLogState, Snapshot
from nvidia_gpu_exporter.model.uuids import normalize_uuid


def health_families(snapshot: Snapshot) -> list[Family]:
    occurrences = XID_OCCURRENCE.family()
    for row in snapshot.xid_occurrences:
        if row.seen_at is not None:
            labels = (
                normalize_uuid(row.gpu_uuid),
                row.pci_bus_id,
                str(row.xid),
                row.pid,
                row.process_name,
                row.pod.pod_uid,
                row.pod.container_id,
                row.pod.namespace,
                row.pod.pod,
                row.pod.container,
            )
            occurrences.add(labels, row.seen_at)
    fallen = GPU_FALLEN_OFF_BUS.family()
    for gpu in snapshot.gpus_fallen_off:
        fallen.add((normalize_uuid(gpu.gpu_uuid), gpu.pci_bus_id), 1.0)
    sxid_errors, sxid_last = SXID_ERRORS.family(), SXID_LAST_TIMESTAMP.family()
    for record in snapshot.sxids:
        switch = (record.pci_bus_id, str(record.sxid), record.severity)
        sxid_errors.add(switch, float(record.count))
        if record.last_seen is not None:
            sxid_last.add(switch, record.last_seen)
    families = [occurrences, fallen, sxid_errors, sxid_last]
    if snapshot.xid_source:
        source = XID_SOURCE.family()
        source.add((snapshot.xid_source,), 1.0)
        families.append(source)
    status = snapshot.kernel_log
    if status is not None:
        up = KERNEL_LOG_UP.family()
        working = status.state == KernelLogState.UP
        up.add(("" if working else status.state.value,), 1.0 if working else 0.0)
        families.append(up)
        for spec, value in (
            (KERNEL_LOG_RECORDS, status.records),
            (KERNEL_LOG_LOST, status.lost),
            (KERNEL_LOG_DROPPED, status.dropped),
        ):
            family = spec.family()
            family.add((), float(value))
            families.append(family)
    return families


def collection_text(snapshot: Snapshot) -> str:
    """``nvidia_gpu_exporter_collection_*``: what ``nvidia_smi_*``'s health families say, present under the same
    conditions (the status and duration once a collection ended, the timestamp once one succeeded), served
    whatever ``--metrics.profile``, in name order."""
    attempt = snapshot.attempt
    families: list[Family] = []
    if attempt is not None:
        exit_code, duration = COLLECTION_EXIT_CODE.family(), COLLECTION_DURATION.family()
        exit_code.add((), float(attempt.status_code))
        duration.add((), attempt.duration_seconds)
        families += [exit_code, duration]
    failures, success = COLLECTION_FAILURES.family(), COLLECTION_SUCCESS.family()
    failures.add((), float(snapshot.failed_collections))
    success.add((), 1.0 if attempt is not None and attempt.succeeded else 0.0)
    families += [failures, success]
    if snapshot.last_success_at is not None:
        timestamp = COLLECTION_SUCCESS_TIMESTAMP.family()
        timestamp.add((), float(int(snapshot.last_success_at)))
        families.append(timestamp)
    return "".join(render_family(family) for family in families)
