"""The health verdict per GPU and subsystem (docs/health.md, "Verdicts"), as the exporter's own families: the state
of every subsystem of every GPU, and one info series per reason with its action and since when it holds."""

from __future__ import annotations

from collections.abc import Sequence

from nvidia_gpu_exporter.exposition.families import GPU_HEALTH_REASON, GPU_HEALTH_REASON_SINCE, GPU_HEALTH_STATE
from nvidia_gpu_exporter.exposition.text import Family, has_surrogates, render_family
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.verdicts import GpuVerdict


def verdict_families(verdicts: Sequence[GpuVerdict]) -> list[Family]:
    state, reasons, since = GPU_HEALTH_STATE.family(), GPU_HEALTH_REASON.family(), GPU_HEALTH_REASON_SINCE.family()
    for gpu in verdicts:
        uuid = normalize_uuid(gpu.uuid)
        if has_surrogates(gpu.uuid) or has_surrogates(gpu.pci_bus_id):
            continue  # its other series are dropped too: two such GPUs would render the same labels
        for part in gpu.subsystems:
            labels = (uuid, gpu.pci_bus_id, part.subsystem.value)
            state.add(labels, float(part.state))
            for finding in part.findings:
                reason = finding.reason
                reason_labels = (*labels, reason.name, reason.state.label, reason.action.value)
                reasons.add(reason_labels, 1.0)
                since.add(reason_labels, finding.since)
    return [state, reasons, since]


def _rendered(verdicts: Sequence[GpuVerdict]) -> tuple[object, ...]:
    """What the families show of the verdicts (not when each finding's evidence last moved)."""
    return tuple(
        (gpu.uuid, gpu.pci_bus_id, part.state, tuple((finding.reason, finding.since) for finding in part.findings))
        for gpu in verdicts
        for part in gpu.subsystems
    )


class VerdictBlocks:
    """The families' ``(name, text)`` blocks, rendered again only when what they show changed: the judge hands back
    the same tuple while nothing moved, and a finding whose evidence merely held again renders the same text, so
    most collections reuse it (benchmarks/bench_verdict.py)."""

    def __init__(self) -> None:
        self._verdicts: Sequence[GpuVerdict] | None = None
        self._shown: tuple[object, ...] = ()
        self._blocks: list[tuple[str, str]] = []

    def blocks(self, verdicts: Sequence[GpuVerdict]) -> list[tuple[str, str]]:
        if verdicts is not self._verdicts:
            shown = _rendered(verdicts)
            if shown != self._shown or not self._blocks:
                self._blocks = [(family.name, render_family(family)) for family in verdict_families(verdicts)]
                self._shown = shown
            self._verdicts = verdicts
        return self._blocks
