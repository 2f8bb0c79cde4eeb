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

What C libraries free (OpenSSL's per-connection state, about 40 KiB for each TLS handshake) goes back to glibc's
heap, which keeps it: after a flood of stalled TLS handshakes RSS stayed 20-30 MiB above rest for ever, and during
one the freed handshakes piled up to 20 MiB over what the live ones held. So the same timer, looking every
:data:`TRIM_CHECK_SECONDS`, trims the heap (``malloc_trim``, glibc only) once connections have churned: after
:data:`TRIM_AFTER_CLOSED` closed connections, and once more when a burst of them has ended (``closed`` counts them;
the HTTP server's). A trim walks every arena of the heap (1-8 ms, longer under a flood), so it runs in the default
executor's thread, which the exporter's rendering already uses, beside the loop that answers scrapes.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Callable

INTERVAL_SECONDS = 2.0
TRIM_CHECK_SECONDS = 0.5  # how often the trim policy looks at the closed connections
TRIM_AFTER_CLOSED = 64  # connections closed since the last trim that make the next check trim during a flood
TRIM_AFTER_BURST = 16  # closed since the last trim, and none since the previous check: the burst is over, trim


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows). ctypes is loaded at the
    first trim, not by every start."""
    import ctypes  # noqa: PLC0415
    import ctypes.util  # noqa: PLC0415

    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system; False where that cannot be done."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class TrimPolicy:
    """When to trim the heap, from a running count of closed connections (see the module docstring)."""

    def __init__(self, closed: Callable[[], int]) -> None:
        self.closed = closed
        self._at_trim = closed()
        self._at_tick = self._at_trim

    def due(self) -> bool:
        """Called once per tick: whether to trim now (and, if so, the counts restart from here)."""
        now = self.closed()
        since_trim, since_tick = now - self._at_trim, now - self._at_tick
        self._at_tick = now
        if since_trim >= TRIM_AFTER_CLOSED or (since_trim >= TRIM_AFTER_BURST and since_tick == 0):
            self._at_trim = now
            return True
        return False


def settle_startup() -> None:
    """Collect what startup left, then freeze the survivors (once, when the exporter is up)."""
    gc.collect()
    gc.freeze()


async def collect_periodically(
    interval_seconds: float = INTERVAL_SECONDS, closed_connections: Callable[[], int] | None = None
) -> None:
    """A full collection every ``interval_seconds``, until cancelled; the heap trimmed when ``closed_connections``
    (a running count) says connections have churned."""
    policy = TrimPolicy(closed_connections) if closed_connections is not None else None
    tick = min(interval_seconds, TRIM_CHECK_SECONDS) if policy is not None else interval_seconds
    loop = asyncio.get_running_loop()
    next_collection = loop.time() + interval_seconds
    while True:
        await asyncio.sleep(tick)
        if loop.time() >= next_collection:
            gc.collect()
            next_collection += interval_seconds
        if policy is not None and policy.due():
            await asyncio.to_thread(trim_heap)  # the default executor's thread: its arena exists already
