"""Bounded asyncio helpers shared by the in-process collector and web tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
WAIT_SECONDS = 5.0  # every await in these tests is bounded by this


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(main())


async def bounded(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, WAIT_SECONDS)
