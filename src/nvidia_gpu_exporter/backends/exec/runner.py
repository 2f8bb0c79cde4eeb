"""Running ``nvidia-smi`` (or a wrapper such as ``ssh host nvidia-smi``) as a child process.

Each run gets its own process group (session on POSIX), so that when a collection is cancelled or times
out the whole group is killed: a wrapper script's children die with it instead of lingering as orphans.
The Go exporter only signals the direct child; we do better. Callers bound a run by cancelling it
(``within_timeout``); cancellation kills the group, then waits at most two seconds for the pipes, even when
it arrives while the child is still being started.

A child stuck in the kernel (a wedged driver) outlives even SIGKILL. One that has not exited two seconds
after it is *stuck*: until it exits, runs start nothing and fail at once, so a wedged node holds one stuck
child per concurrent run at most, not one more per scrape. asyncio's child watcher tells when it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nvidia_gpu_exporter.model.snapshot import StuckChildren

log = logging.getLogger(__name__)

PIPE_DRAIN_SECONDS = 2.0
DRAIN_CHUNK_BYTES = 65536
NO_EXIT_STATUS = -1  # could not start, killed by a signal, or never ran


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one nvidia-smi invocation produced.

    ``exit_code`` is the child's exit status, or -1 when it could not start or was killed by a signal.
    ``exited_with_error`` is true only for a real process exit with a non-zero status, the one case
    ``--shutdown-on-error`` treats as fatal.
    """

    stdout: str
    stderr: str
    exit_code: int
    start_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.start_error is None

    @property
    def exited_with_error(self) -> bool:
        return self.start_error is None and self.exit_code > 0

    def describe_failure(self) -> str:
        """A one-line reason for logs and error chains."""
        if self.start_error is not None:
            return self.start_error
        message = " ".join(self.stderr.split())[:300] or " ".join(self.stdout.split())[:300]
        reason = f"exit status {self.exit_code}" if self.exit_code >= 0 else "killed by a signal"
        return f"{reason}: {message}" if message else reason


class SmiRunner(Protocol):
    """Answers nvidia-smi invocations: a real child process, or an in-process simulation."""

    @property
    def description(self) -> str: ...

    async def run(self, args: Sequence[str]) -> RunResult: ...


class UnrunnableCommand:
    """A command line that cannot be split: every run fails at once with exit code -1 and the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    @property
    def description(self) -> str:
        return self.reason

    async def run(self, args: Sequence[str]) -> RunResult:
        return RunResult("", "", NO_EXIT_STATUS, start_error=self.reason)


def _decode(data: bytes) -> str:
    # surrogateescape keeps invalid bytes visible to the exposition, which drops such labels.
    return data.decode("utf-8", errors="surrogateescape")


async def spawn_child(argv: Sequence[str]) -> asyncio.subprocess.Process:
    """Start the child in a process group of its own, pipes for stdout and stderr, no stdin."""
    pipe, devnull = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
    if sys.platform == "win32":
        return await asyncio.create_subprocess_exec(
            *argv, stdin=devnull, stdout=pipe, stderr=pipe, creationflags=subprocess.CREATE_NEW_PROCESS_GROUP
        )
    return await asyncio.create_subprocess_exec(*argv, stdin=devnull, stdout=pipe, stderr=pipe, start_new_session=True)


def kill_process_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the child's whole process group (POSIX) or the child itself (Windows)."""
    if sys.platform != "win32":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError):
        process.kill()


Spawn = Callable[[Sequence[str]], Awaitable[asyncio.subprocess.Process]]
Kill = Callable[[asyncio.subprocess.Process], None]


class SubprocessRunner:
    """Runs ``base_argv + args`` with no stdin, capturing stdout and stderr separately.

    ``spawn`` and ``kill`` are the two system calls a test may observe or hold back (a SIGKILL the kernel
    has not acted on yet); ``reap_seconds`` bounds each wait for a killed child, and a child still there
    after it is stuck.
    """

    def __init__(
        self,
        base_argv: Sequence[str],
        *,
        spawn: Spawn = spawn_child,
        kill: Kill = kill_process_group,
        reap_seconds: float = PIPE_DRAIN_SECONDS,
    ) -> None:
        self.base_argv = tuple(base_argv)
        self._spawn = spawn
        self._kill = kill
        self._reap_seconds = reap_seconds
        # Keyed by the process, not its pid: a reaped child's pid may be reused while its pipes are still open.
        self._stuck: dict[asyncio.subprocess.Process, float] = {}  # -> loop time of its SIGKILL
        self._stuck_total = 0
        self._exits: dict[asyncio.subprocess.Process, asyncio.Future[None]] = {}  # a killed child's, until it comes

    @property
    def description(self) -> str:
        return " ".join(self.base_argv)

    def stuck_children(self) -> StuckChildren:
        return StuckChildren(len(self._stuck), self._stuck_total)

    async def run(self, args: Sequence[str]) -> RunResult:
        if self._stuck:
            return RunResult("", "", NO_EXIT_STATUS, start_error=self._refusal())
        argv = [*self.base_argv, *args]
        # The spawn is never cancelled half-way: asyncio would then kill only the direct child and wait
        # for pipes that a grandchild (ssh's, a wrapper script's) holds open, for as long as it lives.
        spawning = asyncio.ensure_future(self._spawn(argv))
        try:
            process = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            await self._abandon_spawn(spawning)
            raise
        except (OSError, ValueError) as error:
            return RunResult("", "", NO_EXIT_STATUS, start_error=f"failed to start {argv[0]!r}: {error}")
        try:
            stdout, stderr = await process.communicate()
        except asyncio.CancelledError:
            await self._kill_and_reap(process)
            raise
        code = process.returncode if process.returncode is not None else NO_EXIT_STATUS
        return RunResult(_decode(stdout), _decode(stderr), code if code >= 0 else NO_EXIT_STATUS)

    async def _abandon_spawn(self, spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
        """The run was cancelled while its child was starting: kill the group once it exists, reap it (bounded)."""
        spawning.add_done_callback(self._kill_when_spawned)  # also covers a spawn that outlasts the wait below
        await asyncio.wait({spawning}, timeout=self._reap_seconds)
        if spawning.done() and not spawning.cancelled() and spawning.exception() is None:
            await self._reap(spawning.result())

    def _kill_when_spawned(self, spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
        """Kill the group of a child whose run was cancelled; asyncio's child watcher reaps it."""
        if not spawning.cancelled() and spawning.exception() is None:
            self._kill_and_watch(spawning.result())

    async def _kill_and_reap(self, process: asyncio.subprocess.Process) -> None:
        """Kill the group, then wait a bounded time for the child to be reaped and its pipes to close."""
        self._kill_and_watch(process)
        await self._reap(process)

    def _kill_and_watch(self, process: asyncio.subprocess.Process) -> None:
        """Kill the group and watch for the child's exit: one that has not come within the bound is stuck.

        A timer, not polling: it is due when the bounded reap gives up, so it runs before the cancelled run
        resumes, and the next run already sees the child stuck.
        """
        self._kill(process)
        loop = asyncio.get_running_loop()
        exited = asyncio.ensure_future(_exit_of(process))
        check = loop.call_later(self._reap_seconds, self._mark_stuck, process, loop.time())
        self._exits[process] = exited
        exited.add_done_callback(functools.partial(self._exited, process, check))

    def _mark_stuck(self, process: asyncio.subprocess.Process, killed_at: float) -> None:
        """Not reaped yet: SIGKILL has not ended it. (Reaped, with a pipe held by an escaped grandchild, is not.)"""
        if process.returncode is not None or process in self._stuck:
            return
        self._stuck[process] = killed_at
        self._stuck_total += 1
        log.warning(
            "nvidia-smi has not exited after SIGKILL: it is stuck in the kernel, the driver may be wedged; "
            "no new nvidia-smi runs until it exits",
            extra={"pid": process.pid, "waited_seconds": self._reap_seconds},
        )

    def _exited(
        self, process: asyncio.subprocess.Process, check: asyncio.TimerHandle, exited: asyncio.Future[None]
    ) -> None:
        check.cancel()
        del self._exits[process]
        if exited.cancelled():  # the loop is closing: the child has not exited, and nothing will see it now
            return
        killed_at = self._stuck.pop(process, None)
        if killed_at is not None:
            stuck_for = asyncio.get_running_loop().time() - killed_at
            log.warning(
                "recovered: the stuck nvidia-smi has exited, runs start again",
                extra={"pid": process.pid, "stuck_seconds": round(stuck_for, 1)},
            )

    def _refusal(self) -> str:
        """Why a run starts nothing: the longest-stuck child, and for how long."""
        process, killed_at = min(self._stuck.items(), key=lambda item: item[1])
        stuck_for = asyncio.get_running_loop().time() - killed_at
        return (
            f"not starting nvidia-smi: an earlier run (pid {process.pid}) is still stuck in the kernel "
            f"{stuck_for:.0f}s after SIGKILL; the driver may be wedged"
        )

    async def _reap(self, process: asyncio.subprocess.Process) -> None:
        """Wait at most ``reap_seconds`` for a killed child to be reaped and its pipes to close.

        The pipes close when the last of the group dies, a moment after the child itself: read to their end,
        so the transport is finished before a caller closes the loop (else it closes them too late, from
        its finalizer, on a closed loop).
        """
        deadline = asyncio.get_running_loop().time() + self._reap_seconds
        exited = self._exits.get(process)
        if exited is not None:  # else it has already exited
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({exited}, timeout=self._reap_seconds)
        if process.returncode is None:
            return  # stuck: its pipes stay open as long as it does
        draining = asyncio.ensure_future(_drain(process))
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({draining}, timeout=remaining)
        if not draining.done():
            draining.cancel()  # an escaped grandchild holds a pipe: give up on it, bounded


async def _drain(process: asyncio.subprocess.Process) -> None:
    """Read a killed child's pipes to their end, a chunk at a time, dropping what is left in them."""
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                while await stream.read(DRAIN_CHUNK_BYTES):
                    pass


async def _exit_of(process: asyncio.subprocess.Process) -> None:
    """The child has exited and its pipes are closed."""
    with contextlib.suppress(Exception):
        await process.wait()
