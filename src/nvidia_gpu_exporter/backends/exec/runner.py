"""Running ``nvidia-smi`` (or a wrapper such as ``ssh host nvidia-smi``) as a child process.

Each run gets its own process group (session on POSIX), so that when a collection is cancelled or times
out the whole group is killed: a wrapper script's children die with it instead of lingering as orphans.
The Go exporter only signals the direct child; we do better. Callers bound a run by cancelling it
(``within_timeout``); cancellation kills the group, then waits at most two seconds for the child, even when
it arrives while the child is still being started.

One run's resources are bounded whatever the child does (docs/architecture.md, "A collection's budget"):

- Output is taken as it arrives, never read whole: stdout up to ``max_output_bytes``
  (``--collect.max-output-bytes``), stderr counted against the same cap but only its first
  :data:`STDERR_KEPT_BYTES` kept. A stream past the cap fails the run at once, the child's group killed
  and the output dropped, so what is decoded, parsed and logged is never larger than the cap.
- The output is complete when the direct child has exited: its pipes get :data:`EXIT_GRACE_SECONDS` more
  to reach their end, after which a grandchild still holding them is killed and the pipes are closed.
  Our ends of the pipes are closed when a run ends, however it ends, so no fd outlives its run.
- A descendant that left the child's process group (``setsid``, a daemonizing wrapper) is still found: every
  child gets a run token in its environment (:data:`RUN_TOKEN_VARIABLE`), which descendants inherit, and
  when a run is killed or its pipes are held past the grace every process carrying the token is killed
  (found through ``/proc/<pid>/environ``; Linux, same user). One that clears its environment escapes this.

A child stuck in the kernel (a wedged driver) outlives even SIGKILL. One that has not exited two seconds
after it is *stuck*: until it exits, runs start nothing and fail at once, so a wedged node holds one stuck
child per concurrent run at most, not one more per scrape. asyncio's child watcher tells when it exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nvidia_gpu_exporter.backends.exec.defaults import DEFAULT_MAX_OUTPUT_BYTES
from nvidia_gpu_exporter.backends.exec.output import excerpt
from nvidia_gpu_exporter.model.snapshot import StuckChildren
from nvidia_gpu_exporter.support.asynctimeout import within_timeout

log = logging.getLogger(__name__)

PIPE_DRAIN_SECONDS = 2.0
NO_EXIT_STATUS = -1  # could not start, killed by a signal, or never ran
STDERR_KEPT_BYTES = 4096  # stderr is only ever quoted in one log line
EXIT_GRACE_SECONDS = 0.5  # after the child exits, for its pipes to reach their end
RUN_TOKEN_VARIABLE = "NVIDIA_GPU_EXPORTER_RUN"
STDOUT, STDERR = 1, 2
_STREAM_NAMES = {STDOUT: "stdout", STDERR: "stderr"}
_runs = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one nvidia-smi invocation produced.

    ``exit_code`` is the child's exit status, or -1 when it could not start or was killed by a signal.
    ``start_error`` is set when there is no usable answer at all: it could not start, was refused, or was
    killed for printing more than the cap. ``exited_with_error`` is true only for a real process exit with a
    non-zero status, the one case ``--shutdown-on-error`` treats as fatal.
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
        """A one-line reason for logs and error chains, quoting at most a short excerpt of the output."""
        if self.start_error is not None:
            return self.start_error
        message = excerpt(self.stderr) or excerpt(self.stdout)
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


def _decode(data: bytes | bytearray) -> str:
    # surrogateescape keeps invalid bytes visible to the exposition, which drops such labels.
    return data.decode("utf-8", errors="surrogateescape")


class ChildOutput(asyncio.SubprocessProtocol):
    """A child's output as it arrives: stdout up to the cap, the head of stderr, and the three events a run
    waits for (the child's exit, the end of both pipes, a stream past the cap)."""

    def __init__(self, max_output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.max_output_bytes = max_output_bytes
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.sizes = {STDOUT: 0, STDERR: 0}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()  # both pipes closed
        self.overflowed: asyncio.Future[int] = loop.create_future()  # the stream past the cap
        self._open = {STDOUT, STDERR}
        self.transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self.overflowed.done():
            return
        size = self.sizes[fd] = self.sizes[fd] + len(data)
        if size > self.max_output_bytes:
            self.overflowed.set_result(fd)  # the run kills the child and drops everything
            self.close_pipes()
        elif fd == STDOUT:
            self.stdout += data
        elif len(self.stderr) < STDERR_KEPT_BYTES:
            self.stderr += data[: STDERR_KEPT_BYTES - len(self.stderr)]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.ended.done():
            self.ended.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def close_pipes(self) -> None:
        """Stop reading and close our ends of the pipes (a writer left then gets EPIPE)."""
        if self.transport is None:
            return
        for fd in (STDOUT, STDERR):
            pipe = self.transport.get_pipe_transport(fd)
            if pipe is not None:
                pipe.close()

    def overflow_error(self) -> str:
        stream = _STREAM_NAMES[self.overflowed.result()]
        return (
            f"nvidia-smi printed more than {self.max_output_bytes} bytes on {stream}, the limit of "
            f"--collect.max-output-bytes: killed it and dropped its output"
        )


@dataclass(eq=False)
class Child:
    """One started run: the child's transport, its output, and the token its descendants inherit."""

    transport: asyncio.SubprocessTransport
    output: ChildOutput
    token: str

    @property
    def pid(self) -> int:
        return self.transport.get_pid()

    @property
    def returncode(self) -> int | None:
        return self.transport.get_returncode()

    async def wait(self) -> None:
        """Until the direct child has exited (its pipes may still be open)."""
        await asyncio.shield(self.output.exited)

    def close(self) -> None:
        """Close the pipes now, and the transport once the child has exited (closing it earlier would reap it)."""
        self.output.close_pipes()
        if self.returncode is not None:
            self.transport.close()


def new_run_token() -> str:
    return f"{os.getpid()}.{next(_runs)}.{os.urandom(4).hex()}"


async def spawn_child(
    argv: Sequence[str], max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, output: ChildOutput | None = None
) -> Child:
    """Start the child in a process group of its own, pipes for stdout and stderr, no stdin, a run token.

    ``output`` is the protocol that takes its output (a stream's reads tables as they come); by default a run's.
    """
    loop = asyncio.get_running_loop()
    token = new_run_token()
    protocol = output if output is not None else ChildOutput(max_output_bytes)
    pipe, devnull = subprocess.PIPE, subprocess.DEVNULL
    env = {**os.environ, RUN_TOKEN_VARIABLE: token}
    if sys.platform == "win32":
        transport, _ = await loop.subprocess_exec(
            lambda: protocol, *argv, stdin=devnull, stdout=pipe, stderr=pipe, env=env,
            creationflags=subprocess.CREATE_NEW_PROCESS_GROUP,
        )  # fmt: skip
    else:
        transport, _ = await loop.subprocess_exec(
            lambda: protocol, *argv, stdin=devnull, stdout=pipe, stderr=pipe, env=env, start_new_session=True
        )
    return Child(transport, protocol, token)


def kill_process_group(child: Child) -> None:
    """SIGKILL the child's whole process group (POSIX) or the child itself (Windows)."""
    if sys.platform != "win32":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
            return
    with contextlib.suppress(ProcessLookupError):
        child.transport.kill()


def carriers_of(token: str, proc: str = "/proc") -> list[int]:
    """The processes whose environment holds this run's token: the child and every descendant, whatever
    session or process group they moved to (none where there is no /proc)."""
    needle = f"{RUN_TOKEN_VARIABLE}={token}".encode()
    found = []
    with contextlib.suppress(OSError), os.scandir(proc) as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(os.path.join(entry.path, "environ"), "rb") as file:
                    environ = file.read()
            except OSError:  # gone, or another user's
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_escaped(child: Child) -> int:
    """SIGKILL the child's descendants, found by the token they carry; how many were signalled.

    The child itself is left to ``kill`` (its group's SIGKILL), the one signal a test may hold back.
    """
    killed = 0
    for pid in carriers_of(child.token):
        if pid not in (child.pid, os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


Spawn = Callable[[Sequence[str], int], Awaitable[Child]]
Kill = Callable[[Child], None]


class SubprocessRunner:
    """Runs ``base_argv + args`` with no stdin, capturing stdout and stderr separately, within the output cap.

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
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        exit_grace_seconds: float = EXIT_GRACE_SECONDS,
    ) -> None:
        self.base_argv = tuple(base_argv)
        self._spawn = spawn
        self._kill = kill
        self._reap_seconds = reap_seconds
        self.max_output_bytes = max_output_bytes
        self._exit_grace = exit_grace_seconds
        # Keyed by the child, not its pid: a reaped child's pid may be reused while its pipes are still open.
        self._stuck: dict[Child, float] = {}  # -> loop time of its SIGKILL
        self._stuck_total = 0
        self._exits: dict[Child, asyncio.Future[None]] = {}  # a killed child's, until it comes

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
        spawning = asyncio.ensure_future(self._spawn(argv, self.max_output_bytes))
        try:
            child = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            await self._abandon_spawn(spawning)
            raise
        except (OSError, ValueError) as error:  # strerror alone: OSError's text repeats the path
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            return RunResult("", "", NO_EXIT_STATUS, start_error=f"failed to start {argv[0]!r}: {reason}")
        try:
            return await self._outcome(child)
        except asyncio.CancelledError:
            await self._kill_and_reap(child)
            raise

    async def _outcome(self, child: Child) -> RunResult:
        """Wait for the child's exit (or a stream past the cap), then at most the grace for its pipes."""
        output = child.output
        first: set[asyncio.Future[Any]] = {output.exited, output.overflowed}
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if not output.overflowed.done():
            rest: set[asyncio.Future[Any]] = {output.ended, output.overflowed}
            await asyncio.wait(rest, timeout=self._exit_grace, return_when=asyncio.FIRST_COMPLETED)
        if output.overflowed.done():
            await self._kill_and_reap(child)
            log.debug("nvidia-smi output over the cap", extra={"pid": child.pid, "sizes": output.sizes})
            return RunResult("", "", NO_EXIT_STATUS, start_error=output.overflow_error())
        if not output.ended.done():  # a descendant holds the pipes: what the child wrote is in, let go
            killed = kill_escaped(child)
            log.debug("nvidia-smi's pipes held open after it exited", extra={"pid": child.pid, "killed": killed})
        child.close()
        await asyncio.sleep(0)  # let the pipes' closing callbacks run
        code = child.returncode if child.returncode is not None else NO_EXIT_STATUS
        return RunResult(_decode(output.stdout), _decode(output.stderr), code if code >= 0 else NO_EXIT_STATUS)

    async def _abandon_spawn(self, spawning: asyncio.Future[Child]) -> None:
        """The run was cancelled while its child was starting: kill the group once it exists, reap it (bounded)."""
        spawning.add_done_callback(self._kill_when_spawned)  # also covers a spawn that outlasts the wait below
        await asyncio.wait({spawning}, timeout=self._reap_seconds)
        if spawning.done() and not spawning.cancelled() and spawning.exception() is None:
            await self._reap(spawning.result())

    def _kill_when_spawned(self, spawning: asyncio.Future[Child]) -> None:
        """Kill the group of a child whose run was cancelled; asyncio's child watcher reaps it."""
        if not spawning.cancelled() and spawning.exception() is None:
            self._kill_and_watch(spawning.result())

    async def _kill_and_reap(self, child: Child) -> None:
        """Kill the group, then wait a bounded time for the child to be reaped; its pipes are closed either way."""
        self._kill_and_watch(child)
        await self._reap(child)

    def _kill_and_watch(self, child: Child) -> None:
        """Kill the group and whatever carries the run's token, and watch for the child's exit: one that has
        not come within the bound is stuck.

        A timer, not polling: it is due when the bounded reap gives up, so it runs before the cancelled run
        resumes, and the next run already sees the child stuck.
        """
        if child in self._exits:  # already killed and watched
            return
        self._kill(child)
        kill_escaped(child)
        loop = asyncio.get_running_loop()
        exited = asyncio.ensure_future(child.wait())
        check = loop.call_later(self._reap_seconds, self._mark_stuck, child, loop.time())
        self._exits[child] = exited
        exited.add_done_callback(functools.partial(self._exited, child, check))

    def _mark_stuck(self, child: Child, killed_at: float) -> None:
        """Not reaped yet: SIGKILL has not ended it. (Reaped, with a pipe held by an escaped grandchild, is not.)"""
        if child.returncode is not None or child in self._stuck:
            return
        self._stuck[child] = killed_at
        self._stuck_total += 1
        log.warning(
            "nvidia-smi has not exited after SIGKILL: it is stuck in the kernel, the driver may be wedged; "
            "no new nvidia-smi runs until it exits",
            extra={"pid": child.pid, "waited_seconds": self._reap_seconds},
        )

    def _exited(self, child: Child, check: asyncio.TimerHandle, exited: asyncio.Future[None]) -> None:
        check.cancel()
        del self._exits[child]
        if exited.cancelled():  # the loop is closing: the child has not exited, and nothing will see it now
            return
        child.close()
        killed_at = self._stuck.pop(child, None)
        if killed_at is not None:
            stuck_for = asyncio.get_running_loop().time() - killed_at
            log.warning(
                "recovered: the stuck nvidia-smi has exited, runs start again",
                extra={"pid": child.pid, "stuck_seconds": round(stuck_for, 1)},
            )

    def _refusal(self) -> str:
        """Why a run starts nothing: the longest-stuck child, and for how long."""
        child, killed_at = min(self._stuck.items(), key=lambda item: item[1])
        stuck_for = asyncio.get_running_loop().time() - killed_at
        return (
            f"not starting nvidia-smi: an earlier run (pid {child.pid}) is still stuck in the kernel "
            f"{stuck_for:.0f}s after SIGKILL; the driver may be wedged"
        )

    async def _reap(self, child: Child) -> None:
        """Wait at most ``reap_seconds`` for a killed child to be reaped, then close our ends of its pipes.

        Closed, not drained: a stuck child or an escaped grandchild may hold the other ends for ever, and
        nothing it still writes is wanted.
        """
        exited = self._exits.get(child)
        if exited is not None:  # else it has already exited
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({exited}, timeout=self._reap_seconds)
        child.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)  # let the pipes' closing callbacks run before a caller closes the loop


def run_once(argv: Sequence[str], args: Sequence[str], timeout: float) -> RunResult:
    """One run outside any event loop (the doctor, the capture recorder), bounded as the exporter's are: at the
    timeout the child's whole process group is killed and the run fails with ``start_error`` saying so."""

    async def bounded() -> RunResult:
        try:
            return await within_timeout(SubprocessRunner(argv).run(args), timeout)
        except asyncio.TimeoutError:
            return RunResult("", "", NO_EXIT_STATUS, start_error=f"no answer within {timeout:g}s (killed)")

    return asyncio.run(bounded())
