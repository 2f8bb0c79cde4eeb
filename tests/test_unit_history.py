"""The live view's ring buffer (``history.py``): bounded per GPU, appended to without parsing, read lazily."""

from __future__ import annotations

import tracemalloc

import pytest

from nvidia_gpu_exporter.history import POINTS_PER_GPU, SERIES_NAMES, History, _number
from nvidia_gpu_exporter.model.snapshot import GpuTable, QueryField, Readings

FIELDS = tuple(
    QueryField(qfield, qfield)
    for qfield in ("uuid", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw", "clocks.sm")
)


def _readings(*rows: tuple[str, ...]) -> Readings:
    return Readings(GpuTable(tuple(rows)), None)


def _row(uuid: str, step: int) -> tuple[str, ...]:
    return (uuid, f"{step} %", f"{step * 10} MiB", str(40 + step), f"{step}.50 W", f"{1000 + step} MHz")


@pytest.mark.parametrize(
    ("points", "appended"),
    [
        pytest.param(3, 2, id="under-the-bound-keeps-all"),
        pytest.param(3, 3, id="at-the-bound-keeps-all"),
        pytest.param(3, 50, id="past-the-bound-keeps-the-last-points"),
        pytest.param(POINTS_PER_GPU, POINTS_PER_GPU * 3, id="default-bound"),
    ],
)
def test_points_per_gpu_never_pass_the_bound(points: int, appended: int) -> None:
    history = History(points)
    for step in range(appended):
        history.append(FIELDS, _readings(_row("GPU-a", step), _row("GPU-b", step)), float(step))
    series = history.series()
    kept = min(points, appended)
    for uuid in ("GPU-a", "GPU-b"):
        assert series[uuid]["t"] == [float(step) for step in range(appended - kept, appended)]
        assert all(len(series[uuid][name]) == kept for name in SERIES_NAMES)


def test_default_bound_is_the_documented_one() -> None:
    assert History().points == POINTS_PER_GPU == 120


def test_cells_become_numbers_when_read() -> None:
    history = History()
    history.append(FIELDS, _readings(_row("GPU-a", 7)), 1.0)
    assert history.series()["GPU-a"] == {
        "t": [1.0],
        "utilization_percent": [7.0],
        "memory_used_mib": [70.0],
        "temperature_celsius": [47.0],
        "power_draw_watts": [7.5],
        "clocks_sm_mhz": [1007.0],
    }


@pytest.mark.parametrize(
    "cell",
    [
        pytest.param("[N/A]", id="absent-token"),
        pytest.param("[Not Supported]", id="not-supported"),
        pytest.param("1 2", id="two-numbers"),
        pytest.param("", id="empty"),
    ],
)
def test_a_cell_without_one_number_is_a_gap(cell: str) -> None:
    history = History()
    history.append(FIELDS, _readings(("GPU-a", cell, "1 MiB", "1", "1 W", "1 MHz")), 1.0)
    assert history.series()["GPU-a"]["utilization_percent"] == [None]


def test_a_field_not_queried_is_a_gap() -> None:
    fields = (QueryField("uuid", "uuid"), QueryField("utilization.gpu", "utilization.gpu [%]"))
    history = History()
    history.append(fields, _readings(("GPU-a", "5 %")), 1.0)
    series = history.series()["GPU-a"]
    assert series["utilization_percent"] == [5.0]
    assert series["temperature_celsius"] == [None]


def test_without_uuids_nothing_is_kept() -> None:
    history = History()
    history.append((QueryField("utilization.gpu", "utilization.gpu [%]"),), _readings(("5 %",)), 1.0)
    assert len(history) == 0


def test_a_gpu_that_leaves_keeps_only_its_points() -> None:
    history = History(10)
    history.append(FIELDS, _readings(_row("GPU-a", 1), _row("GPU-b", 1)), 1.0)
    history.append(FIELDS, _readings(_row("GPU-a", 2)), 2.0)
    assert history.series()["GPU-b"]["t"] == [1.0]
    assert history.series()["GPU-a"]["t"] == [1.0, 2.0]


@pytest.mark.parametrize("points", [pytest.param(0, id="zero"), pytest.param(-1, id="negative")])
def test_a_history_without_points_is_refused(points: int) -> None:
    with pytest.raises(ValueError, match="at least one point"):
        History(points)


def _full_history_bytes(gpus: int) -> int:
    """Bytes a full default history holds, each collection's texts made fresh (as a parse makes them) and
    dropped by everything but the history."""
    tracemalloc.start()
    try:
        history = History()
        before = tracemalloc.get_traced_memory()[0]
        for step in range(POINTS_PER_GPU):
            rows = tuple(_row(f"GPU-{gpu:036d}", step * 7 + gpu) for gpu in range(gpus))
            history.append(FIELDS, _readings(*rows), float(step))
            del rows
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("gpus", [pytest.param(8, id="8-gpus"), pytest.param(64, id="64-gpus")])
def test_a_full_history_holds_a_few_bytes_per_point(gpus: int) -> None:
    # A point is five short numbers: a string per cell and a tuple per GPU held about 400 bytes per GPU and
    # collection (3.5 MiB at 64 GPUs, issue 35); one text per collection holds about 50-80 (its texts, 40).
    points = POINTS_PER_GPU * gpus
    assert _full_history_bytes(gpus) < 120 * points


@pytest.mark.parametrize(
    "cell",
    [
        pytest.param("5\x1f", id="unit-separator"),
        pytest.param("\x1e7 %", id="record-separator"),
        pytest.param("5\x1f6", id="separator-between-numbers"),
    ],
)
def test_a_cell_holding_a_separator_reads_as_its_own_text(cell: str) -> None:
    history = History()
    history.append(FIELDS, _readings(("GPU-a", cell, "1 MiB", "1", "1 W", "1 MHz"), _row("GPU-b", 3)), 1.0)
    series = history.series()
    assert series["GPU-a"]["utilization_percent"] == [_number(cell)]
    assert series["GPU-a"]["clocks_sm_mhz"] == [1.0]
    assert series["GPU-b"]["utilization_percent"] == [3.0]
