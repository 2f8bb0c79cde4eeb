"""A timeout for one awaitable that never drops a cancellation, on every supported Python.

``asyncio.wait_for`` on Python 3.10 and 3.11 returns the inner result when the inner task finishes in
the same loop turn as the caller is cancelled: the cancellation is lost, and a loop stopped by one
``cancel()`` runs on for ever (it hung the exporter's shutdown). ``asyncio.wait`` has no such race, so
this is built on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within_timeout(awaitable: Awaitable[T], seconds: float | None) -> T:
    """Await ``awaitable``; after ``seconds`` cancel it, wait for it to finish, and raise ``TimeoutError``.

    ``None`` means no limit. A cancellation of the caller cancels the inner task, waits for its cleanup
    (a killed child, say) and is always re-raised.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        await _cancel_and_wait(task)
        raise
    if not done:
        await _cancel_and_wait(task)
        raise asyncio.TimeoutError
    return task.result()


async def _cancel_and_wait(task: asyncio.Future[T]) -> None:
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: what it raised while being cancelled is not the caller's to see
