"""The garbage collector's policy (support/garbage.py): startup's objects frozen, and a full collection on a timer,
so reference cycles are freed within seconds instead of whenever CPython's thresholds allow (BENCHMARKS.md,
"A timed soak")."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from async_helpers import run
from nvidia_gpu_exporter.support import garbage


class Node:
    """One half of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture
def automatic_collection_off() -> Iterator[None]:
    """CPython's own collections off, as when its thresholds are not reached; everything unfrozen after."""
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.usefixtures("automatic_collection_off")
def test_the_timer_frees_a_reference_cycle_within_its_interval() -> None:
    async def main() -> bool:
        freed = cycle()
        timer = asyncio.create_task(garbage.collect_periodically(0.01))
        try:
            for _ in range(200):  # bounded: the first collection comes after 0.01 s
                if freed() is None:
                    return True
                await asyncio.sleep(0.01)
            return False
        finally:
            timer.cancel()

    assert run(main)


@pytest.mark.usefixtures("automatic_collection_off")
def test_settling_startup_frees_its_cycles_and_freezes_the_survivors() -> None:
    freed = cycle()
    kept = Node()
    garbage.settle_startup()
    assert freed() is None
    assert gc.get_freeze_count() > 0
    assert kept not in gc.get_objects()  # frozen: full collections no longer traverse it


@pytest.mark.usefixtures("automatic_collection_off")
def test_settling_startup_gives_back_the_heap_startup_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[str] = []

    def trim_heap() -> bool:
        trims.append("trim")
        return True

    monkeypatch.setattr(garbage, "trim_heap", trim_heap)
    garbage.settle_startup()
    assert trims == ["trim"]


@pytest.mark.parametrize(
    ("closed_per_tick", "trims"),
    [
        pytest.param([0, 0, 0], [False, False, False], id="no-churn-no-trim"),
        pytest.param([5, 5, 0], [False, False, False], id="a-few-closes-no-trim"),
        pytest.param([300], [True], id="a-flood-trims-at-once"),
        pytest.param([40, 40, 40, 0], [False, True, False, True], id="a-flood-trims-past-the-bound-then-at-its-end"),
        pytest.param([20, 0, 0], [False, True, False], id="the-end-of-a-burst-trims-once"),
        pytest.param([300, 20, 0], [True, False, True], id="a-flood-then-its-tail"),
    ],
)
def test_the_heap_is_trimmed_during_and_after_connection_churn(closed_per_tick: list[int], trims: list[bool]) -> None:
    closed = 0
    policy = garbage.TrimPolicy(lambda: closed)
    seen = []
    for count in closed_per_tick:
        closed += count
        seen.append(policy.due())
    assert seen == trims


def test_the_heap_is_trimmed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    trimmed_in: list[int] = []

    def trim() -> bool:
        trimmed_in.append(threading.get_ident())
        return True

    monkeypatch.setattr(garbage, "trim_heap", trim)
    closed = [0]

    async def main() -> int:
        timer = asyncio.create_task(garbage.collect_periodically(0.01, lambda: closed[0]))
        try:
            await asyncio.sleep(0)  # the timer reads the count it starts from
            closed[0] = garbage.TRIM_AFTER_CLOSED  # a flood's worth of closes: the next tick trims
            for _ in range(200):  # bounded: the next tick comes after 0.01 s
                if trimmed_in:
                    break
                await asyncio.sleep(0.01)
            return threading.get_ident()
        finally:
            timer.cancel()

    loop_thread = run(main)
    assert trimmed_in, "no trim"
    assert trimmed_in[0] != loop_thread  # a trim walks every arena (1-8 ms): not on the loop that answers scrapes


def test_trimming_the_heap_gives_back_what_a_c_library_freed() -> None:
    import ctypes
    import ctypes.util
    from pathlib import Path

    if not garbage.trim_heap():
        pytest.skip("no malloc_trim in this C library (glibc only)")
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def rss_kib() -> int:
        status = Path("/proc/self/status").read_text(encoding="ascii")
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])

    blocks = [libc.malloc(40 * 1024) for _ in range(2000)]  # 78 MiB in blocks below mmap's threshold: heap
    for block in blocks:
        ctypes.memset(block, 1, 40 * 1024)
    for block in blocks[:-1]:  # the last one pins the heap's top: free() alone cannot shrink it
        libc.free(block)
    before = rss_kib()
    assert garbage.trim_heap()
    after = rss_kib()
    libc.free(blocks[-1])
    assert before - after > 40 * 1024, (before, after)


# Threads that each hold C-heap memory at once, then glibc's malloc_stats(), which prints one "Arena N:" block
# per arena to stderr. Run in a fresh interpreter: an arena, once made, lasts as long as the process.
ARENA_PROBE = """
import ctypes, sys, threading
from nvidia_gpu_exporter.support import garbage
if sys.argv[1] == "limited":
    assert garbage.limit_arenas()
held = threading.Barrier(5)
def hold():
    blocks = [bytearray(2048) for _ in range(200)]  # above pymalloc's 512 bytes: glibc's malloc
    held.wait()
    held.wait()
threads = [threading.Thread(target=hold) for _ in range(4)]
for thread in threads:
    thread.start()
held.wait()
ctypes.CDLL(None).malloc_stats()
held.wait()
"""


@pytest.mark.parametrize(
    ("mode", "one_arena"),
    [pytest.param("limited", True, id="limited-one-arena"), pytest.param("default", False, id="default-several")],
)
def test_limiting_arenas_keeps_every_thread_on_one_heap(mode: str, one_arena: bool) -> None:
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("arenas and malloc_stats are glibc's")
    result = subprocess.run(
        [sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True, timeout=60, check=True
    )
    arenas = sum(1 for line in result.stderr.splitlines() if line.startswith("Arena "))
    assert (arenas == 1) is one_arena, result.stderr
