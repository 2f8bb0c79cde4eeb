"""The per-process usage families (docs/metrics.md, "Per-process usage"): one series per process and GPU, plus one
``pid="other"`` series per GPU for the processes past the cap, and the counts that say how many went there.

Pure functions of the (already capped) :class:`~..snapshot.ProcessUsage`; ``uuid`` is normalized like every
other family's, so the series join ``nvidia_smi_gpu_info`` and ``nvidia_smi_compute_app_*`` on ``uuid`` and ``pid``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nvidia_gpu_exporter.exposition.families import (
    OVERFLOW_PID,
    PROCESS_DECODER_UTILIZATION,
    PROCESS_ENCODER_UTILIZATION,
    PROCESS_MEMORY_UTILIZATION,
    PROCESS_SM_UTILIZATION,
    PROCESS_USAGE_OVERFLOW,
    PROCESS_USAGE_OVERFLOWED,
    PROCESS_USAGE_SUCCESS,
    PROCESS_USED_MEMORY,
)
from nvidia_gpu_exporter.exposition.text import Family, has_surrogates
from nvidia_gpu_exporter.model.snapshot import ProcessUsage, ProcessUsageOverflow, ProcessUsageRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid

PERCENT = 0.01


def _add(families: Sequence[Family], labels: tuple[str, ...], usage: ProcessUsageRow | ProcessUsageOverflow) -> None:
    sm, memory, encoder, decoder, used = families
    for family, percent in (
        (sm, usage.sm_percent),
        (memory, usage.memory_percent),
        (encoder, usage.encoder_percent),
        (decoder, usage.decoder_percent),
    ):
        if percent is not None:
            family.add(labels, percent * PERCENT)
    if usage.used_memory_bytes is not None:
        used.add(labels, usage.used_memory_bytes)


def usage_families(usage: ProcessUsage, gpu_uuids: Iterable[str]) -> list[Family]:
    """The success gauge; on success the per-process series, the overflow sums and a per-GPU overflow count
    (``0`` for every GPU of the collection whose processes all have series of their own)."""
    success = PROCESS_USAGE_SUCCESS.family()
    success.add((), 1.0 if usage.succeeded else 0.0)
    if not usage.succeeded:
        return [success]
    families = [
        spec.family()
        for spec in (
            PROCESS_SM_UTILIZATION,
            PROCESS_MEMORY_UTILIZATION,
            PROCESS_ENCODER_UTILIZATION,
            PROCESS_DECODER_UTILIZATION,
            PROCESS_USED_MEMORY,
        )
    ]
    for row in usage.rows:
        labels = (normalize_uuid(row.gpu_uuid), row.pid, row.process_name)
        if not any(has_surrogates(value) for value in labels):
            _add(families, labels, row)
    counts = dict.fromkeys(gpu_uuids, 0)
    for overflow in usage.overflow:
        _add(families, (overflow.gpu_uuid, OVERFLOW_PID, ""), overflow)
        counts[overflow.gpu_uuid] = overflow.processes
    overflowing = PROCESS_USAGE_OVERFLOW.family()
    for uuid, count in counts.items():
        overflowing.add((uuid,), float(count))
    return [*families, overflowing, success]


def overflowed_family(total: int) -> Family:
    """The counter of processes summed since the start (served whatever the collection's outcome)."""
    family = PROCESS_USAGE_OVERFLOWED.family()
    family.add((), float(total))
    return family
