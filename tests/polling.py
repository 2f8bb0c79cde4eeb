"""The tests' two polling helpers, one blocking and one for asyncio, both bounded in attempts and in time.

Their timeouts bound a wait so a broken exporter fails the test instead of hanging it; they are generous
(these machines are shared and noisy) and never asserted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import TypeVar

from async_helpers import WAIT_SECONDS

T = TypeVar("T")
PATIENCE_SECONDS = 30.0
_SHOWN_CHARACTERS = 2000  # of the last value in a timeout message


def _attempts(timeout: float, interval: float) -> int:
    return max(1, math.ceil(timeout / interval)) + 1


def wait_until(
    probe: Callable[[], T],
    what: str,
    *,
    until: Callable[[T], object] = bool,
    timeout: float = PATIENCE_SECONDS,
    interval: float = 0.02,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``probe`` every ``interval`` seconds until ``until(result)`` holds, and return that result.

    Exceptions of the ``ignoring`` types count as "not yet". After ``timeout`` seconds an AssertionError
    names ``what`` and the last result (or error).
    """
    deadline = time.monotonic() + timeout
    last = "never probed"
    for _ in range(_attempts(timeout, interval)):
        try:
            result = probe()
        except ignoring as error:
            last = f"last error: {error!r}"
        else:
            if until(result):
                return result
            last = f"last value: {result!r}"[:_SHOWN_CHARACTERS]
        if time.monotonic() > deadline:
            break
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} ({last})")


async def eventually(
    predicate: Callable[[], bool], what: str, *, timeout: float = WAIT_SECONDS, interval: float = 0.005
) -> None:
    """Yield to the loop until ``predicate`` holds; an AssertionError naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in range(_attempts(timeout, interval)):
        if predicate():
            return
        if loop.time() > deadline:
            break
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
