"""Per-process usage from ``nvidia-smi pmon -c 1 -s um`` (docs/metrics.md, "Per-process usage").

pmon prints ``#`` header lines, then one row per (GPU, process), or one all-``-`` row for a GPU without one. Its
columns moved between driver generations (``jpg ofa`` and ``ccpm`` came around 535, with new spacing; ``-s``
letter order decides the group order; ``-o DT`` glues ``#`` to ``Date``), so rows are read by the names of the
last column header, never by position, and the name is the rest of the row. ``-`` is "no value": no sample for
the process in the cycle, an idle engine, or a metric the GPU cannot report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from nvidia_gpu_exporter.backends.exec.output import excerpt
from nvidia_gpu_exporter.model.snapshot import ProcessUsageRow

log = logging.getLogger(__name__)

PMON_ARGS = ("pmon", "-c", "1", "-s", "um")
MIB = 1_048_576.0
NO_VALUE = "-"
# pmon column -> the row's field, for percentages (0-100) and framebuffer memory (MB, which pmon means as MiB)
_PERCENT_COLUMNS = {"sm": "sm_percent", "mem": "memory_percent", "enc": "encoder_percent", "dec": "decoder_percent"}
_MEMORY_COLUMN = "fb"


class PmonShapeError(ValueError):
    """The output has rows but no column header: not pmon's table (an error message, an unknown layout)."""


def _header(line: str) -> list[str] | None:
    """A column header's names (``gpu``, ``pid``, ...), or ``None`` for any other ``#`` line (the units)."""
    names = line.lstrip("#").split()
    return names if "gpu" in names and "pid" in names else None


def _percent(cell: str) -> float | None:
    try:
        value = float(cell) if cell.replace(".", "", 1).isdigit() else None
    except ValueError:
        return None
    return value if value is not None and value <= 100.0 else None


def _mebibytes(cell: str) -> float | None:
    return float(cell) * MIB if cell.isascii() and cell.isdigit() else None


def _row(cells: list[str], columns: list[str], uuid_by_index: Mapping[str, str]) -> ProcessUsageRow | None:
    values = dict(zip(columns, cells, strict=True))
    pid = values.get("pid", NO_VALUE)
    if pid == NO_VALUE:
        return None  # a GPU without processes
    uuid = uuid_by_index.get(values.get("gpu", ""))
    if uuid is None or not (pid.isascii() and pid.isdigit()):
        log.warning("skipping a pmon row: unknown gpu index or pid", extra={"row": excerpt(" ".join(cells))})
        return None
    percents = {field: _percent(values.get(column, NO_VALUE)) for column, field in _PERCENT_COLUMNS.items()}
    memory = _mebibytes(values.get(_MEMORY_COLUMN, NO_VALUE))
    return ProcessUsageRow(uuid, pid, values.get("command", ""), used_memory_bytes=memory, **percents)


def parse_pmon(stdout: str, uuid_by_index: Mapping[str, str]) -> tuple[ProcessUsageRow, ...]:
    """The process rows of a pmon answer, each on the GPU whose ``index`` the row names (``uuid_by_index``).

    Raises :class:`PmonShapeError` for a row before any column header; skips (and logs) rows it cannot use.
    """
    columns: list[str] | None = None
    rows: list[ProcessUsageRow] = []
    for line in stdout.splitlines():
        if line.startswith("#"):
            columns = _header(line) or columns
            continue
        if not line.strip():
            continue
        if columns is None:
            raise PmonShapeError(f"no pmon column header before {excerpt(line)!r}")
        cells = line.split(None, len(columns) - 1)
        if len(cells) == len(columns) - 1:
            cells.append("")  # an empty name
        if len(cells) != len(columns):
            log.warning("skipping a pmon row: too few columns", extra={"row": excerpt(line)})
            continue
        cells[-1] = cells[-1].strip()
        row = _row(cells, columns, uuid_by_index)
        if row is not None:
            rows.append(row)
    return tuple(rows)
