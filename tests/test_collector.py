"""The collector in-process: single-flight sharing, abandonment, timeouts, fatal errors and background mode.

Every test drives the shared ``FakeBackend`` whose ``collect()`` is steered by asyncio events, so the order of
events is decided by the test, not by wall-clock luck. Timeouts given to the collector are short (tens of
milliseconds); every wait of the test itself is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from async_helpers import bounded, run
from fakes import READINGS, FakeBackend
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.collector import SHUTDOWN_ON_ERROR_DOES_NOT_APPLY, Collector
from nvidia_gpu_exporter.model.snapshot import Snapshot
from polling import eventually

# -- synchronous mode: single flight ----------------------------------------------------------------------


def test_concurrent_scrapes_share_one_collection() -> None:
    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None)
        scrapes = [asyncio.create_task(collector.scrape()) for _ in range(5)]
        await bounded(backend.started.wait())
        await asyncio.sleep(0.01)  # let every scrape join before the run ends
        backend.gate.set()
        snapshots = await bounded(asyncio.gather(*scrapes))
        assert backend.calls == 1
        assert collector.collections == 1
        assert all(snapshot is snapshots[0] for snapshot in snapshots)
        first = snapshots[0]
        assert first.attempt is not None
        assert first.attempt.succeeded
        assert first.attempt.readings == READINGS

    run(main)


def test_sequential_scrapes_each_start_a_new_collection() -> None:
    async def main() -> None:
        backend = FakeBackend()
        collector = Collector(backend, timeout_seconds=None)
        first = await bounded(collector.scrape())
        second = await bounded(collector.scrape())
        assert backend.calls == 2
        assert second.sequence > first.sequence
        assert second.failed_collections == 0

    run(main)


def test_scrape_whose_budget_expires_gets_the_no_result_snapshot_while_the_run_continues() -> None:
    async def main() -> None:
        backend = FakeBackend([READINGS, READINGS], gated=False)
        collector = Collector(backend, timeout_seconds=None)
        earlier = await bounded(collector.scrape())  # one success, so the no-result snapshot has a timestamp
        assert earlier.attempt is not None
        backend.gate.clear()
        backend.started.clear()

        patient = asyncio.create_task(collector.scrape())
        await bounded(backend.started.wait())
        impatient = await bounded(collector.scrape(0.05))

        assert impatient.attempt is None
        assert impatient.failed_collections == 0
        assert impatient.last_success_at == earlier.attempt.finished_at
        assert not backend.cancelled.is_set()  # the patient scrape still waits for the run
        backend.gate.set()
        result = await bounded(patient)
        assert result.attempt is not None
        assert result.attempt.succeeded
        assert backend.calls == 2

    run(main)


def test_run_is_cancelled_and_counted_nowhere_when_every_waiter_gives_up() -> None:
    """Any client can give up on purpose (issue 13): an abandoned run has no outcome to count or publish."""

    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None)
        snapshots = await bounded(asyncio.gather(collector.scrape(0.05), collector.scrape(0.08)))

        assert [snapshot.attempt for snapshot in snapshots] == [None, None]
        await bounded(backend.cancelled.wait())
        await bounded(collector.aclose())
        latest = collector.latest
        assert (collector.collections, latest.failed_collections, latest.attempt) == (0, 0, None)
        assert backend.calls == 1

    run(main)


def test_scrape_after_abandonment_starts_a_new_run() -> None:
    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None)
        gave_up = await bounded(collector.scrape(0.05))
        assert gave_up.attempt is None

        backend.gate.set()
        fresh = await bounded(collector.scrape())
        assert backend.calls == 2
        assert fresh.attempt is not None
        assert fresh.attempt.succeeded
        assert fresh.failed_collections == 0

    run(main)


def test_no_result_snapshot_carries_the_failure_count_so_far() -> None:
    async def main() -> None:
        backend = FakeBackend([CollectionError("boom", 3)])
        collector = Collector(backend, timeout_seconds=None)
        failed = await bounded(collector.scrape())
        assert failed.failed_collections == 1
        backend.gate.clear()
        gave_up = await bounded(collector.scrape(0.05))
        assert gave_up.attempt is None
        assert gave_up.failed_collections == 1
        assert gave_up.last_success_at is None

    run(main)


# -- failures ---------------------------------------------------------------------------------------------


def test_collection_timeout_is_a_failed_attempt_with_status_minus_one_and_not_fatal() -> None:
    async def main() -> None:
        fatal_codes: list[int] = []
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=0.05, shutdown_on_error=True, on_fatal=fatal_codes.append)
        snapshot = await bounded(collector.scrape())

        assert backend.cancelled.is_set()  # the backend's run was cancelled by the timeout
        attempt = snapshot.attempt
        assert attempt is not None
        assert not attempt.succeeded
        assert attempt.status_code == -1
        assert not attempt.fatal
        assert attempt.error is not None
        assert "timed out" in attempt.error
        assert snapshot.failed_collections == 1
        assert fatal_codes == []

    run(main)


@pytest.mark.parametrize(
    ("fatal", "shutdown_on_error", "expected_calls"),
    [
        pytest.param(True, True, [7], id="fatal-error-with-shutdown-on-error-calls-on-fatal"),
        pytest.param(True, False, [], id="fatal-error-without-shutdown-on-error-keeps-running"),
        pytest.param(False, True, [], id="non-fatal-error-never-shuts-down"),
    ],
)
def test_fatal_collection_error_and_shutdown_on_error(
    fatal: bool, shutdown_on_error: bool, expected_calls: list[int]
) -> None:
    async def main() -> None:
        fatal_codes: list[int] = []
        backend = FakeBackend([CollectionError("nvidia-smi failed", 7, fatal=fatal, exit_code=7)])
        collector = Collector(
            backend,
            timeout_seconds=None,
            shutdown_on_error=shutdown_on_error,
            on_fatal=fatal_codes.append,
        )
        snapshot = await bounded(collector.scrape())
        assert fatal_codes == expected_calls
        assert snapshot.attempt is not None
        assert snapshot.attempt.status_code == 7
        assert snapshot.attempt.readings is None
        assert snapshot.failed_collections == 1

    run(main)


@pytest.mark.parametrize(
    ("fatal", "shutdown_on_error", "warnings"),
    [
        pytest.param(False, True, 1, id="a-failure-it-does-not-stop-for-is-said-once"),
        pytest.param(False, False, 0, id="nothing-said-without-the-flag"),
        pytest.param(True, True, 0, id="a-fatal-failure-stops-it-instead"),
    ],
)
def test_shutdown_on_error_says_once_that_a_failure_does_not_stop_the_exporter(
    caplog: pytest.LogCaptureFixture, fatal: bool, shutdown_on_error: bool, warnings: int
) -> None:
    """Go's rule (a command that cannot even start is not fatal) kept, but not silently: an operator who asked
    to stop on errors learns why the exporter keeps serving."""
    failure = CollectionError("nvidia-smi failed: failed to start '/opt/nvidia-smi': No such file or directory")
    failure.fatal = fatal

    async def main() -> None:
        backend = FakeBackend([failure, failure])
        collector = Collector(backend, timeout_seconds=None, shutdown_on_error=shutdown_on_error, on_fatal=print)
        await bounded(collector.scrape())
        await bounded(collector.scrape())

    with caplog.at_level(logging.WARNING):
        run(main)
    said = [record for record in caplog.records if record.getMessage() == SHUTDOWN_ON_ERROR_DOES_NOT_APPLY]
    assert len(said) == warnings
    assert all(record.__dict__["err"] == str(failure) for record in said)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(RuntimeError("backend bug"), id="runtime-error"),
        pytest.param(KeyError("missing"), id="key-error"),
        pytest.param(ValueError("bad value"), id="value-error"),
    ],
)
def test_unexpected_backend_exception_becomes_a_failed_attempt(error: Exception) -> None:
    async def main() -> None:
        backend = FakeBackend([error])
        collector = Collector(backend, timeout_seconds=None)
        snapshot = await bounded(collector.scrape())
        assert snapshot.attempt is not None
        assert not snapshot.attempt.succeeded
        assert snapshot.attempt.status_code == -1
        assert snapshot.failed_collections == 1
        recovered = await bounded(collector.scrape())  # the collector keeps working afterwards
        assert recovered.attempt is not None
        assert recovered.attempt.succeeded
        assert recovered.failed_collections == 1

    run(main)


def test_success_records_whole_attempt_details() -> None:
    async def main() -> None:
        backend = FakeBackend(delays=[0.02])
        collector = Collector(backend, timeout_seconds=None)
        snapshot = await bounded(collector.scrape())
        attempt = snapshot.attempt
        assert attempt is not None
        assert attempt.status_code == 0
        assert attempt.duration_seconds >= 0.015
        assert snapshot.last_success_at == attempt.finished_at
        assert snapshot.failed_collections == 0

    run(main)


def test_aclose_cancels_the_collection_in_flight() -> None:
    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None)
        scrape = asyncio.create_task(collector.scrape())
        await bounded(backend.started.wait())
        await bounded(collector.aclose())
        assert backend.cancelled.is_set()
        snapshot = await bounded(scrape)
        assert snapshot.attempt is None  # a cancelled run gives its waiting scrape no attempt to serve

    run(main)


# -- background mode --------------------------------------------------------------------------------------


def test_background_mode_serves_an_empty_snapshot_until_the_first_run_completes() -> None:
    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=3600)
        collector.start()
        try:
            await bounded(backend.started.wait())
            before = await bounded(collector.scrape())  # never waits for the run in flight
            assert before.attempt is None
            assert before.failed_collections == 0
            assert before.last_success_at is None

            backend.gate.set()
            await eventually(lambda: collector.collections == 1, "the first background run")
            after = await bounded(collector.scrape(0.001))  # the budget has no effect in this mode
            assert after.attempt is not None
            assert after.attempt.succeeded
            assert backend.calls == 1
        finally:
            await bounded(collector.aclose())

    run(main)


def test_background_mode_never_runs_two_collections_at_once_and_coalesces_missed_ticks() -> None:
    async def main() -> None:
        interval = 0.1
        backend = FakeBackend(delays=[0.35])  # the first run overruns three ticks
        collector = Collector(backend, timeout_seconds=None, interval_seconds=interval)
        collector.start()
        try:
            await eventually(lambda: backend.calls >= 5, "five background runs")
        finally:
            await bounded(collector.aclose())
        assert backend.max_active == 1
        starts = backend.start_times
        assert starts[1] - starts[0] >= 0.3  # the second run waited for the overrunning first one
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts[1:])]
        # Missed ticks coalesce: after the overrun the runs keep the interval instead of bursting.
        assert min(gaps) >= interval * 0.5, gaps

    run(main)


def test_background_failed_tick_publishes_no_readings_but_keeps_the_last_success_time() -> None:
    async def main() -> None:
        backend = FakeBackend([READINGS, CollectionError("exit status 3", 3)], delays=[0, 0, 60])
        collector = Collector(backend, timeout_seconds=None, interval_seconds=0.2)
        collector.start()
        try:
            await eventually(lambda: collector.collections == 1, "the first background run")
            first = collector.latest
            await eventually(lambda: collector.collections == 2, "the failing background run")
            failed = await bounded(collector.scrape())
        finally:
            await bounded(collector.aclose())
        assert first.attempt is not None
        assert first.attempt.succeeded
        assert failed.attempt is not None
        assert failed.attempt.readings is None
        assert failed.attempt.status_code == 3
        assert failed.failed_collections == 1
        assert failed.last_success_at == first.attempt.finished_at

    run(main)


def test_background_timeout_counts_as_a_failed_tick() -> None:
    async def main() -> None:
        backend = FakeBackend(delays=[60])
        collector = Collector(backend, timeout_seconds=0.05, interval_seconds=3600)
        collector.start()
        try:
            await eventually(lambda: collector.collections == 1, "the timed-out background run")
        finally:
            await bounded(collector.aclose())
        latest: Snapshot = collector.latest
        assert backend.cancelled.is_set()
        assert latest.attempt is not None
        assert latest.attempt.status_code == -1
        assert latest.failed_collections == 1

    run(main)


def test_aclose_stops_the_background_loop() -> None:
    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=0.01)
        collector.start()
        await bounded(backend.started.wait())
        await bounded(collector.aclose())
        assert backend.cancelled.is_set()
        calls = backend.calls
        await asyncio.sleep(0.1)
        assert backend.calls == calls

    run(main)


@pytest.mark.parametrize("timeout_seconds", [5.0, None], ids=["with-collect-timeout", "without-collect-timeout"])
def test_aclose_stops_the_background_loop_even_when_the_run_finishes_as_it_is_cancelled(
    timeout_seconds: float | None,
) -> None:
    """The race that hung shutdown: the run completes in the same loop turn as the cancel arrives.

    On Python 3.10/3.11 ``asyncio.wait_for`` then returns the result and drops the cancellation, so a
    loop stopped by one ``cancel()`` alone would go on collecting for ever.
    """

    async def main() -> None:
        backend = FakeBackend(gated=True)
        collector = Collector(backend, timeout_seconds=timeout_seconds, interval_seconds=3600)
        collector.start()
        await bounded(backend.started.wait())
        backend.gate.set()
        await asyncio.sleep(0)  # the run completes; whoever awaits it has not resumed yet
        assert backend.active == 0
        await bounded(collector.aclose())
        assert backend.calls == 1

    run(main)


# -- the live view's history --------------------------------------------------------------------------------


def test_each_success_is_appended_to_the_history_and_a_failure_is_not() -> None:
    async def main() -> None:
        backend = FakeBackend([READINGS, CollectionError("boom"), READINGS])
        collector = Collector(backend, timeout_seconds=None)
        snapshots = [await bounded(collector.scrape()) for _ in range(3)]
        times = [
            snapshot.attempt.finished_at for snapshot in snapshots if snapshot.attempt and snapshot.attempt.succeeded
        ]
        assert len(times) == 2
        assert collector.history.series()["GPU-0000"]["t"] == times

    run(main)
