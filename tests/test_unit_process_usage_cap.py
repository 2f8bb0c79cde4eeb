"""The per-GPU cap on per-process usage series: the busiest processes keep their own series, the rest are summed."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.model.processusage import MAX_NAME_CHARACTERS, cap_usage
from nvidia_gpu_exporter.model.snapshot import ProcessUsage, ProcessUsageOverflow, ProcessUsageRow

GPU_A = "GPU-AAAAAAAA-0000-0000-0000-000000000000"
GPU_B = "GPU-BBBBBBBB-0000-0000-0000-000000000000"


def _row(pid: int, sm: float | None, memory: float | None = None, gpu: str = GPU_A) -> ProcessUsageRow:
    return ProcessUsageRow(gpu, str(pid), f"p{pid}", sm, 1.0, None, None, memory)


@pytest.mark.parametrize(
    ("limit", "kept", "overflow"),
    [
        (5, ["1", "2", "3"], ()),
        (3, ["1", "2", "3"], ()),
        (2, ["2", "3"], (ProcessUsageOverflow("aaaaaaaa-0000-0000-0000-000000000000", 1, 10.0, 1.0, None, None, 5.0),)),
        (0, [], (ProcessUsageOverflow("aaaaaaaa-0000-0000-0000-000000000000", 3, 130.0, 3.0, None, None, 305.0),)),
    ],
)
def test_the_busiest_processes_keep_their_series_and_the_rest_are_summed(
    limit: int, kept: list[str], overflow: tuple[ProcessUsageOverflow, ...]
) -> None:
    usage = ProcessUsage(True, (_row(1, 10.0, 5.0), _row(2, 80.0, 100.0), _row(3, 40.0, 200.0)))
    capped, overflowed = cap_usage(usage, limit)
    assert sorted(row.pid for row in capped.rows) == kept
    assert capped.overflow == overflow
    assert overflowed == sum(item.processes for item in overflow)


def test_the_cap_is_per_gpu() -> None:
    usage = ProcessUsage(True, (_row(1, 1.0), _row(2, 2.0), _row(3, 3.0, gpu=GPU_B), _row(4, 4.0, gpu=GPU_B)))
    capped, overflowed = cap_usage(usage, 1)
    assert sorted(row.pid for row in capped.rows) == ["2", "4"]
    assert overflowed == 2
    assert [item.gpu_uuid[:8] for item in capped.overflow] == ["aaaaaaaa", "bbbbbbbb"]


def test_ties_and_missing_values_rank_by_memory_then_pid() -> None:
    usage = ProcessUsage(True, (_row(9, None, 1.0), _row(8, None, 1.0), _row(7, None, 2.0), _row(6, 0.0)))
    capped, _ = cap_usage(usage, 2)
    assert [row.pid for row in capped.rows] == ["7", "8"]


def test_a_process_listed_twice_on_one_gpu_is_one_row_with_the_sums() -> None:
    usage = ProcessUsage(True, (_row(5, 10.0, 100.0), _row(5, 20.0, None)))
    capped, overflowed = cap_usage(usage, 4)
    assert capped.rows == (ProcessUsageRow(GPU_A, "5", "p5", 30.0, 2.0, None, None, 100.0),)
    assert overflowed == 0


def test_an_overflow_sum_is_absent_when_no_summed_process_had_the_value() -> None:
    usage = ProcessUsage(True, (_row(1, 50.0), _row(2, None)))
    capped, _ = cap_usage(usage, 1)
    assert capped.overflow[0].sm_percent is None
    assert capped.overflow[0].used_memory_bytes is None


def test_long_process_names_are_cut() -> None:
    usage = ProcessUsage(True, (ProcessUsageRow(GPU_A, "1", "x" * 5000, 1.0),))
    capped, _ = cap_usage(usage, 4)
    assert len(capped.rows[0].process_name) == MAX_NAME_CHARACTERS


def test_a_failed_reading_passes_through() -> None:
    assert cap_usage(ProcessUsage(False), 4) == (ProcessUsage(False), 0)
