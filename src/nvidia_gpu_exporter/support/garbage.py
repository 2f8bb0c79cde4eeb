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

glibc also gives every thread that allocates its own arena (up to eight per core), each with its own free
space: the thread that imports the serving modules at startup, then the executor threads that compress bodies
or parse large answers, held 1.1-1.4 MiB over what one heap needs in steady state, at 1 to 64 GPUs, with no
CPU per collection saved (BENCHMARKS.md, "Steady state with moving values, side by side with the Go
exporter"). :func:`limit_arenas`, called before the first of those threads starts, keeps every thread on the
main heap; the exporter's threads seldom allocate at once, so they seldom wait on its lock.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
from collections.abc import Callable
from typing import Any

INTERVAL_SECONDS = 2.0
TRIM_CHECK_SECONDS = 0.5  # how often the trim policy looks at the closed connections
TRIM_AFTER_CLOSED = 64  # connections closed since the last trim that make the next check trim during a flood
TRIM_AFTER_BURST = 16  # closed since the last trim, and none since the previous check: the burst is over, trim
M_ARENA_MAX = -8  # mallopt's parameter number for the arena count (glibc's malloc.h)


@functools.cache
def _libc_function(name: str, argtypes: tuple[Any, ...]) -> Callable[..., int] | None:
    """A function of the C library this process runs on, found among the symbols already loaded (no search for
    the library's file, which runs ``ldconfig``), or None where it has none: ``malloc_trim`` and ``mallopt``'s
    arenas are glibc's. ctypes is loaded at the first call, not on Windows."""
    if sys.platform == "win32":
        return None
    import ctypes  # noqa: PLC0415

    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = [getattr(ctypes, kind) for kind in argtypes]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def _malloc_trim() -> Callable[[int], int] | None:
    return _libc_function("malloc_trim", ("c_size_t",))


def limit_arenas() -> bool:
    """One malloc arena for every thread (see the module docstring); False where that cannot be set (not glibc)."""
    if _libc_function("gnu_get_libc_version", ()) is None:  # musl has a mallopt that does nothing
        return False
    mallopt = _libc_function("mallopt", ("c_int", "c_int"))
    return mallopt is not None and mallopt(M_ARENA_MAX, 1) == 1


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
    """Collect what startup left, then freeze the survivors (once, when the exporter is up), and give back the
    heap pages startup's temporaries freed (about 0.3 MiB of steady-state RSS at 1 GPU; one trim, once)."""
    gc.collect()
    gc.freeze()
    trim_heap()


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
