"""The recent collections the live view draws its sparklines from: a fixed-size ring buffer per exporter.

The collector appends every successful collection; nobody else writes. Appending is all the collector pays
(no parsing, no rendering): the entry holds the collection's time, the GPUs' uuids (the previous entry's tuple
when they are the same) and the cell texts the view plots, picked by column positions computed once per field
list and joined into one text. A tuple per GPU and a string per cell held about 460 bytes a point, 3.5 MiB at 64
GPUs, most of the growth of steady-state RSS after startup (issue 35); the joined text holds 50-80. The texts
become numbers only when someone asks (:meth:`History.series`), so the buffer costs nothing when no one looks.

The bound: :data:`POINTS_PER_GPU` collections, so at most that many points per GPU and series, whatever
the interval; a full buffer drops its oldest entry (docs/view.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.model.snapshot import QueryField, Readings, column_of
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, transform_generic

POINTS_PER_GPU = 120

# The plotted series, each read from the first of its query fields the backend returns (newer names first).
SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilization_percent", ("utilization.gpu",)),
    ("memory_used_mib", ("memory.used",)),
    ("temperature_celsius", ("temperature.gpu",)),
    ("power_draw_watts", ("power.draw", "power.draw.instant", "power.draw.average")),
    ("clocks_sm_mhz", ("clocks.current.sm", "clocks.sm")),
)
SERIES_NAMES: tuple[str, ...] = tuple(name for name, _ in SERIES)


def first_column(fields: Sequence[QueryField], candidates: Sequence[str]) -> int | None:
    """The column of the first candidate field that was queried, or ``None``."""
    for qfield in candidates:
        position = column_of(fields, qfield)
        if position is not None:
            return position
    return None


# Between the joined cell texts; a collection with a cell that holds it keeps its cells as a tuple instead.
SEPARATOR = "\x1f"


@dataclass(frozen=True, slots=True)
class _Entry:
    finished_at: float
    uuids: tuple[str, ...]
    cells: str | tuple[str, ...]  # one cell per GPU and SERIES, GPU by GPU ("" when not queried), joined


def _number(text: str) -> float | None:
    if text.strip().lower() in ABSENT_TOKENS:
        return None
    return transform_generic(text, 1.0)


class History:
    """The last :data:`POINTS_PER_GPU` successful collections' plotted cells."""

    def __init__(self, points: int = POINTS_PER_GPU) -> None:
        if points < 1:
            raise ValueError(f"a history needs at least one point, not {points}")
        self.points = points
        self._entries: deque[_Entry] = deque(maxlen=points)
        self._fields: tuple[QueryField, ...] | None = None
        self._columns: tuple[int | None, ...] = ()

    def __len__(self) -> int:
        return len(self._entries)

    def _columns_for(self, fields: tuple[QueryField, ...]) -> tuple[int | None, ...]:
        if fields is not self._fields:  # the field list is resolved once at startup: this runs once
            uuid = column_of(fields, "uuid")
            self._columns = (uuid, *(first_column(fields, candidates) for _, candidates in SERIES))
            self._fields = fields
        return self._columns

    def append(self, fields: tuple[QueryField, ...], readings: Readings, finished_at: float) -> None:
        """Keep this collection's plotted cells (references to its texts); the oldest entry goes when full."""
        columns = self._columns_for(fields)
        if columns[0] is None:  # without uuids no point can be told apart from another GPU's
            return
        rows = readings.gpus.rows
        uuids = tuple(row[columns[0]] if columns[0] < len(row) else "" for row in rows)
        if self._entries and self._entries[-1].uuids == uuids:
            uuids = self._entries[-1].uuids
        cells = [
            row[column] if column is not None and column < len(row) else "" for row in rows for column in columns[1:]
        ]
        joined = SEPARATOR.join(cells)
        kept = joined if joined.count(SEPARATOR) == len(cells) - 1 else tuple(cells)
        self._entries.append(_Entry(finished_at, uuids, kept))

    def series(self) -> dict[str, dict[str, list[float | None]]]:
        """Per GPU uuid, its points oldest first: ``t`` (Unix time) and one list per series (``None``: no value)."""
        found: dict[str, dict[str, list[float | None]]] = {}
        width = len(SERIES_NAMES)
        for entry in self._entries:
            cells = entry.cells.split(SEPARATOR) if isinstance(entry.cells, str) else entry.cells
            for index, uuid in enumerate(entry.uuids):
                points = found.get(uuid)
                if points is None:
                    points = found[uuid] = {"t": [], **{name: [] for name in SERIES_NAMES}}
                points["t"].append(entry.finished_at)
                for name, text in zip(SERIES_NAMES, cells[index * width : (index + 1) * width], strict=True):
                    points[name].append(_number(text))
        return found
