"""The health verdict per GPU and subsystem (docs/health.md, "Verdicts"), as the exporter's own families: the state
of every subsystem of every GPU, and one info series per reason with its action. Pure functions of the snapshot."""

from __future__ import annotations

from nvidia_gpu_exporter.exposition.families import GPU_HEALTH_REASON, GPU_HEALTH_REASON_SINCE, GPU_HEALTH_STATE
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.snapshot import Snapshot
from nvidia_gpu_exporter.model.uuids import normalize_uuid


def verdict_families(snapshot: Snapshot) -> list[Family]:
    state, reasons, since = GPU_HEALTH_STATE.family(), GPU_HEALTH_REASON.family(), GPU_HEALTH_REASON_SINCE.family()
    for gpu in snapshot.verdicts:
        uuid = normalize_uuid(gpu.uuid)
        for part in gpu.subsystems:
            labels = (uuid, gpu.pci_bus_id, part.subsystem.value)
            state.add(labels, float(part.state))
            for finding in part.findings:
                reason = finding.reason
                reason_labels = (*labels, reason.name, reason.state.label, reason.action.value)
                reasons.add(reason_labels, 1.0)
                since.add(reason_labels, finding.since)
    return [state, reasons, since]
