"""The per-GPU cap on per-process usage rows, so that a GPU running many processes adds a bounded number of series.

A GPU's busiest processes (by SM utilization, then memory, then pid) keep their own rows; the rest are summed into
one :class:`~.snapshot.ProcessUsageOverflow` per GPU, and the caller counts how many went there. A process listed
twice on one GPU (on two MIG instances, or by a confused source) becomes one row with the sums, so no two rows can
make one series twice. Names are cut to :data:`MAX_NAME_CHARACTERS`, so no label value grows without bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from nvidia_gpu_exporter.model.snapshot import ProcessUsage, ProcessUsageOverflow, ProcessUsageRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid

DEFAULT_MAX_PROCESSES = 16  # --collect.process-usage-max-processes
MAX_NAME_CHARACTERS = 128  # nvidia-smi pmon cuts names to 15; NVML gives paths of up to 1024 bytes
_VALUES = ("sm_percent", "memory_percent", "encoder_percent", "decoder_percent", "used_memory_bytes")


def _sum(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _merged(rows: list[ProcessUsageRow]) -> ProcessUsageRow:
    first = rows[0]
    name = first.process_name[:MAX_NAME_CHARACTERS]
    if len(rows) == 1:
        return first if name == first.process_name else replace(first, process_name=name)
    sums = {value: _sum(getattr(row, value) for row in rows) for value in _VALUES}
    return ProcessUsageRow(first.gpu_uuid, first.pid, name, **sums)


def _rank(row: ProcessUsageRow) -> tuple[float, float, int]:
    pid = int(row.pid) if row.pid.isdigit() else 0
    return (-(row.sm_percent or 0.0), -(row.used_memory_bytes or 0.0), pid)


def cap_usage(usage: ProcessUsage, limit: int) -> tuple[ProcessUsage, int]:
    """``usage`` with at most ``limit`` rows per GPU and the rest summed per GPU; and how many were summed."""
    if not usage.succeeded:
        return usage, 0
    per_gpu: dict[str, dict[str, list[ProcessUsageRow]]] = {}
    for row in usage.rows:
        per_gpu.setdefault(normalize_uuid(row.gpu_uuid), {}).setdefault(row.pid, []).append(row)
    kept: list[ProcessUsageRow] = []
    overflow: list[ProcessUsageOverflow] = []
    for uuid in sorted(per_gpu):
        rows = sorted((_merged(listed) for listed in per_gpu[uuid].values()), key=_rank)
        kept += rows[:limit]
        rest = rows[limit:]
        if rest:
            sums = {value: _sum(getattr(row, value) for row in rest) for value in _VALUES}
            overflow.append(ProcessUsageOverflow(uuid, len(rest), **sums))
    return ProcessUsage(True, tuple(kept), tuple(overflow)), sum(item.processes for item in overflow)
