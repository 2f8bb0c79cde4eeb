"""The garbage collector's policy for a long-running exporter: startup's objects frozen, a full collection on a
timer.

CPython runs a full collection only once the objects promoted since the last one exceed a quarter of all
long-lived objects. At startup that is ~20,000 objects (imports, config, the exposition's tables), so under a
steady load the exporter went a minute or more between full collections, and every reference cycle asyncio and
the libraries leave (each closed connection's transport, its socket and their bound methods, among others) waited
that long: RSS crept by 3-4 KiB a second in the timed soak and plateaued only when full collections came
(BENCHMARKS.md, "A timed soak"). :func:`settle_startup` moves startup's objects into the permanent generation
(``gc.freeze``: they live as long as the process anyway), so that full collections traverse only what was made
since, and :func:`collect_periodically` runs one every :data:`INTERVAL_SECONDS`: with startup frozen, it costs
microseconds, not the ~10 ms of a full pass over everything.
"""

from __future__ import annotations

import asyncio
import gc

INTERVAL_SECONDS = 2.0


def settle_startup() -> None:
    """Collect what startup left, then freeze the survivors (once, when the exporter is up)."""
    gc.collect()
    gc.freeze()


async def collect_periodically(interval_seconds: float = INTERVAL_SECONDS) -> None:
    """A full collection every ``interval_seconds``, until cancelled."""
    while True:
        await asyncio.sleep(interval_seconds)
        gc.collect()
