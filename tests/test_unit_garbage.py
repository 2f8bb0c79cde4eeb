"""The garbage collector's policy (support/garbage.py): startup's objects frozen, and a full collection on a timer,
so reference cycles are freed within seconds instead of whenever CPython's thresholds allow (BENCHMARKS.md,
"A timed soak")."""

from __future__ import annotations

import asyncio
import gc
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
