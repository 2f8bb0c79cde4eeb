"""within_timeout: a timeout that keeps every cancellation, unlike ``asyncio.wait_for`` on 3.10/3.11."""

from __future__ import annotations

import asyncio

import pytest

from async_helpers import run
from nvidia_gpu_exporter.support.asynctimeout import within_timeout


async def _value_after(seconds: float, value: str = "done") -> str:
    await asyncio.sleep(seconds)
    return value


@pytest.mark.parametrize("seconds", [1.0, None], ids=["within-the-limit", "no-limit"])
def test_returns_the_result(seconds: float | None) -> None:
    assert run(lambda: within_timeout(_value_after(0), seconds)) == "done"


def test_an_inner_error_reaches_the_caller() -> None:
    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run(lambda: within_timeout(fail(), 1.0))


def test_past_the_limit_the_inner_work_is_cancelled_and_its_cleanup_awaited() -> None:
    cleaned_up: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # cleanup that itself awaits, as killing a child does
            cleaned_up.append(True)
            raise

    with pytest.raises(asyncio.TimeoutError):
        run(lambda: within_timeout(slow(), 0.01))
    assert cleaned_up == [True]


def test_a_cancel_arriving_as_the_inner_work_finishes_is_not_lost() -> None:
    """The 3.10/3.11 ``wait_for`` race: the inner task is done, the caller is cancelled before resuming."""

    async def main() -> bool:
        gate = asyncio.Event()

        async def inner() -> str:
            await gate.wait()
            return "done"

        outer = asyncio.ensure_future(within_timeout(inner(), 5.0))
        await asyncio.sleep(0)  # outer is now waiting on inner
        gate.set()
        await asyncio.sleep(0)  # inner completes; outer has not resumed yet
        outer.cancel()
        await asyncio.wait({outer}, timeout=5)
        return outer.cancelled()

    assert run(main) is True


def test_cancelling_the_caller_cancels_the_inner_work() -> None:
    async def main() -> bool:
        started = asyncio.Event()
        inner_cancelled = asyncio.Event()

        async def inner() -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                inner_cancelled.set()
                raise

        outer = asyncio.ensure_future(within_timeout(inner(), None))
        await asyncio.wait_for(started.wait(), 5)
        outer.cancel()
        await asyncio.wait({outer}, timeout=5)
        return outer.cancelled() and inner_cancelled.is_set()

    assert run(main) is True
