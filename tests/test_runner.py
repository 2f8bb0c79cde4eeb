"""The process runner against real child processes: cancellation at any point kills the whole group, and a
child that SIGKILL does not end (a wedged driver) is counted and keeps further runs from piling up children."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from async_helpers import WAIT_SECONDS, bounded, run
from nvidia_gpu_exporter.backends.exec.runner import PIPE_DRAIN_SECONDS, RunResult, SubprocessRunner
from nvidia_gpu_exporter.model.snapshot import StuckChildren
from polling import eventually, wait_until
from wedged import WedgedDriver

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="needs /bin/sh and /proc")


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _wrapper_with_a_grandchild(directory: Path, marker: str) -> Path:
    """A wrapper (like ``ssh``) whose child inherits its stdout and outlives it unless the group is killed."""
    directory.mkdir()
    script = directory / "wrapper"
    script.write_text(f'#!/bin/sh\n"{sys.executable}" -c "import time; time.sleep(60)" {marker} &\nwait\n')
    script.chmod(0o755)
    return script


@posix_only
@pytest.mark.parametrize("yields_before_cancel", [1, 2, 3, 5, 20], ids=lambda n: f"cancel-after-{n}-loop-turns")
def test_a_run_cancelled_at_any_point_ends_promptly_and_kills_the_group(
    tmp_path: Path, yields_before_cancel: int
) -> None:
    """Cancelled while asyncio is still connecting the child's pipes, the run used to wait on the grandchild.

    asyncio then kills only the direct child and waits for the pipes to close, which the grandchild holds
    open: the run hung as long as the grandchild lived (a minute here).
    """
    marker = str(tmp_path / f"runner-{uuid.uuid4().hex}")  # in the wrapper's command line and its child's
    runner = SubprocessRunner([str(_wrapper_with_a_grandchild(Path(marker), marker))])

    async def main() -> None:
        task = asyncio.ensure_future(runner.run(["--query-gpu=uuid"]))
        for _ in range(yields_before_cancel):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=WAIT_SECONDS)
        assert done, "the cancelled run did not end"
        assert task.cancelled()

    try:
        run(main)
        # The direct child is reaped before the run returns; the grandchild is init's, and a SIGKILLed
        # process on a loaded machine takes a moment to exit. Unkilled, it would live out its minute.
        wait_until(lambda: _processes_with(marker), "the killed group to exit", until=lambda pids: pids == [])
    finally:
        for pid in _processes_with(marker):  # never leave the sleeper behind a failed test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@posix_only
def test_a_run_that_completes_reports_its_output_and_status(tmp_path: Path) -> None:
    script = tmp_path / "smi"
    script.write_text("#!/bin/sh\necho out; echo err >&2; exit 3\n")
    script.chmod(0o755)
    result = run(lambda: SubprocessRunner([str(script)]).run([]))
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)


# -- a wedged driver: a child SIGKILL does not end ------------------------------------------------------------

HELD_BOUND = 0.5  # a held kill never takes effect, so any bound is exceeded; short keeps the tests quick
STUCK_REFUSAL = re.compile(
    r"not starting nvidia-smi: an earlier run \(pid (\d+)\) is still stuck in the kernel \d+s after SIGKILL; "
    r"the driver may be wedged"
)
RUNNER_LOG = "nvidia_gpu_exporter.backends.exec.runner"


class _Records(logging.Handler):
    """The runner's log records, taken phase by phase."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        taken, self.records = self.records, []
        return taken


async def _cut_short(runner: SubprocessRunner, driver: WedgedDriver, *, while_starting: bool, runs: int = 1) -> None:
    """Start ``runs`` concurrent runs and cancel them, while their children start or once they run."""
    tasks = [asyncio.ensure_future(runner.run(["--query-gpu=uuid"])) for _ in range(runs)]
    if while_starting:
        await asyncio.sleep(0)
    else:
        await eventually(lambda: len(driver.spawned) == runs, "the children to start")
        await asyncio.sleep(0.05)  # into communicate()
    for task in tasks:
        task.cancel()
    await asyncio.wait_for(asyncio.wait(tasks), WAIT_SECONDS)


@dataclass(frozen=True)
class CutShort:
    kill_delivered: bool
    while_starting: bool
    runs: int
    reap_seconds: float
    stuck: StuckChildren


HELD, DELIVERED = False, True
STARTING, RUNNING = True, False
CUT_SHORT = {
    "a-held-kill-while-starting-leaves-the-child-stuck": CutShort(HELD, STARTING, 1, HELD_BOUND, StuckChildren(1, 1)),
    "a-held-kill-while-running-leaves-the-child-stuck": CutShort(HELD, RUNNING, 1, HELD_BOUND, StuckChildren(1, 1)),
    "two-concurrent-runs-cut-short-leave-two-stuck": CutShort(HELD, RUNNING, 2, HELD_BOUND, StuckChildren(2, 2)),
    # The production bound: a child that SIGKILL ends is reaped well within it, even on a loaded machine.
    "a-kill-that-takes-effect-leaves-none-stuck": CutShort(DELIVERED, RUNNING, 1, PIPE_DRAIN_SECONDS, StuckChildren()),
}


@posix_only
@pytest.mark.parametrize("case", CUT_SHORT.values(), ids=CUT_SHORT.keys())
def test_a_killed_child_that_has_not_exited_within_the_bound_is_stuck(
    tmp_path: Path, case: CutShort, caplog: pytest.LogCaptureFixture
) -> None:
    driver = WedgedDriver.create(tmp_path / "smi")
    driver.hang()
    driver.delivering = case.kill_delivered
    runner = driver.runner(case.reap_seconds)

    async def main() -> tuple[StuckChildren, StuckChildren]:
        try:
            await _cut_short(runner, driver, while_starting=case.while_starting, runs=case.runs)
            stuck = runner.stuck_children()
            driver.release()
            await eventually(lambda: runner.stuck_children().current == 0, "the released children to be reaped")
            return stuck, runner.stuck_children()
        finally:
            await driver.let_go()

    try:
        with caplog.at_level(logging.WARNING, logger=RUNNER_LOG):
            stuck, released = run(main)
    finally:
        driver.kill_all()
    assert stuck == case.stuck
    assert released == StuckChildren(0, case.stuck.total)
    # Each stuck child is logged twice: when it becomes stuck, and when it recovers.
    logged = sorted((record.__dict__["pid"], "recovered" in record.getMessage()) for record in caplog.records)
    assert logged == sorted((pid, recovered) for pid in driver.held for recovered in (False, True))


@dataclass
class Episode:
    """What one runner did through a wedged-driver episode: a run cut short whose child outlives SIGKILL, three
    runs while it is stuck, the child's exit, and one run after it."""

    stuck_pid: int
    stuck_after_kill: StuckChildren
    refused: list[RunResult]
    spawns_while_stuck: int
    stuck_while_refusing: StuckChildren
    after_exit: StuckChildren
    run_after_exit: RunResult
    spawns_after_exit: int
    logs: dict[str, list[logging.LogRecord]]


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> Episode:
    driver = WedgedDriver.create(tmp_path_factory.mktemp("wedged") / "smi")
    driver.hang()
    runner = driver.runner(HELD_BOUND)
    records = _Records()
    logger = logging.getLogger(RUNNER_LOG)
    logs: dict[str, list[logging.LogRecord]] = {}

    async def main() -> Episode:
        try:
            return await episode_of(runner)
        finally:
            await driver.let_go()

    async def episode_of(runner: SubprocessRunner) -> Episode:
        await _cut_short(runner, driver, while_starting=False)
        logs["kill"] = records.take()
        stuck_after_kill = runner.stuck_children()
        spawned = len(driver.spawned)
        refused = [await bounded(runner.run(["--query-gpu=uuid"])) for _ in range(3)]
        spawns_while_stuck = len(driver.spawned) - spawned
        stuck_while_refusing = runner.stuck_children()
        logs["refused"] = records.take()
        driver.release()
        await eventually(lambda: runner.stuck_children().current == 0, "the released child to be reaped")
        logs["exit"] = records.take()
        after_exit = runner.stuck_children()
        spawned = len(driver.spawned)
        run_after_exit = await bounded(runner.run(["--query-gpu=uuid"]))
        return Episode(
            driver.held[0],
            stuck_after_kill,
            refused,
            spawns_while_stuck,
            stuck_while_refusing,
            after_exit,
            run_after_exit,
            len(driver.spawned) - spawned,
            logs,
        )

    logger.addHandler(records)
    previous_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        return run(main)
    finally:
        logger.removeHandler(records)
        logger.setLevel(previous_level)
        driver.kill_all()


def _refused_pids(episode: Episode) -> list[int | None]:
    pids = []
    for result in episode.refused:
        match = STUCK_REFUSAL.fullmatch(result.start_error or "")
        pids.append(int(match.group(1)) if match and not result.ok and result.exit_code == -1 else None)
    return pids


def _log_lines(records: list[logging.LogRecord]) -> list[tuple[str, int | None, bool]]:
    return [(record.levelname, record.__dict__.get("pid"), "recovered" in record.getMessage()) for record in records]


EPISODE: dict[str, tuple[Callable[[Episode], object], Callable[[Episode], object]]] = {
    "a-killed-child-that-has-not-exited-is-counted": (
        lambda e: e.stuck_after_kill,
        lambda e: StuckChildren(1, 1),
    ),
    "runs-while-it-is-stuck-fail-at-once-naming-its-pid": (_refused_pids, lambda e: [e.stuck_pid] * 3),
    "runs-while-it-is-stuck-spawn-nothing": (lambda e: e.spawns_while_stuck, lambda e: 0),
    "refused-runs-leave-the-count-alone": (lambda e: e.stuck_while_refusing, lambda e: StuckChildren(1, 1)),
    "its-exit-clears-the-gauge-and-keeps-the-total": (lambda e: e.after_exit, lambda e: StuckChildren(0, 1)),
    "runs-spawn-again-once-it-has-exited": (
        lambda e: (e.run_after_exit.ok, e.run_after_exit.stdout, e.spawns_after_exit),
        lambda e: (True, "ok\n", 1),
    ),
    "becoming-stuck-logs-one-warning-with-the-pid": (
        lambda e: _log_lines(e.logs["kill"]),
        lambda e: [("WARNING", e.stuck_pid, False)],
    ),
    "refused-runs-log-nothing": (lambda e: _log_lines(e.logs["refused"]), lambda e: []),
    "its-exit-logs-recovered-once": (
        lambda e: _log_lines(e.logs["exit"]),
        lambda e: [("WARNING", e.stuck_pid, True)],
    ),
}


@posix_only
@pytest.mark.parametrize(("observed", "expected"), EPISODE.values(), ids=EPISODE.keys())
def test_a_wedged_driver_episode(
    episode: Episode, observed: Callable[[Episode], object], expected: Callable[[Episode], object]
) -> None:
    assert observed(episode) == expected(episode)
