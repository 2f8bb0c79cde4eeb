"""Streaming mode (``--collect.stream-interval``): one long-lived ``nvidia-smi --query-gpu=... --format=csv -lms N``
whose tables are read as they arrive; a collection takes the latest complete table instead of spawning nvidia-smi.

nvidia-smi prints the CSV header once, at the top, then every GPU's row each interval with nothing between
iterations (docs/collection-modes.md, "How a table ends"). So a table ends when a GPU's uuid comes again (the
first table), or once it has as many rows as the table before it (every later one, at once); a header line
mid-stream also ends one, should a build repeat it.

The child is bounded as a per-scrape run is (docs/architecture.md, "A collection's budget"): its process group
and token carriers are killed when it is stopped; a table (or a line) past ``--collect.max-output-bytes``, a
row of the wrong shape, a changed header, or no complete table within the staleness bound ends it, and it is
started again after a back-off that doubles up to a ceiling and starts over once a child delivers a table.
A collection fails, with the dead child's exit status where it has one, while there is no table from a live
child, or when the latest table is older than the staleness bound: old readings are never served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nvidia_gpu_exporter._go.text import GO_SPACE
from nvidia_gpu_exporter.backends import BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend, gpu_query_args
from nvidia_gpu_exporter.backends.exec.output import excerpt
from nvidia_gpu_exporter.backends.exec.runner import (
    EXIT_GRACE_SECONDS,
    NO_EXIT_STATUS,
    PIPE_DRAIN_SECONDS,
    STDERR_KEPT_BYTES,
    STDOUT,
    Child,
    ChildOutput,
    Kill,
    SubprocessRunner,
    kill_escaped,
    kill_process_group,
    spawn_child,
)
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.model.snapshot import GpuTable, Readings, StuckChildren

log = logging.getLogger(__name__)

Rows = tuple[tuple[str, ...], ...]
BACKOFF_SECONDS = (0.5, 30.0)  # the first restart's delay, and the ceiling it doubles up to
STALE_INTERVALS = 3  # a table older than this many intervals (plus STALE_SLACK_SECONDS) is stale
STALE_SLACK_SECONDS = 2.0
SPAWN_WAIT_SECONDS = 5.0  # a stream stopped while its child starts waits this long for the start, to kill it


def stale_after(interval_seconds: float) -> float:
    """How old the latest table may be before collections fail and the child is taken for hung."""
    return STALE_INTERVALS * interval_seconds + STALE_SLACK_SECONDS


class StreamError(Exception):
    """What the child printed cannot be a table stream: it is stopped and started again."""


def _cells(line: str) -> tuple[str, ...]:
    return tuple([cell.strip(GO_SPACE) for cell in line.split(",")])


class TableReader:
    """Splits the bytes of one ``--query-gpu ... --format=csv -lms N`` child into complete tables.

    Bounded: the bytes since the current table began (a partial line included) may not pass
    ``max_table_bytes``, so neither a line without end nor a table without end grows without bound.
    """

    def __init__(self, header: Sequence[str], *, uuid_column: int, max_table_bytes: int) -> None:
        self.header = tuple(header)
        self.uuid_column = uuid_column
        self.max_table_bytes = max_table_bytes
        self._partial = bytearray()
        self._seen_header = False
        self._rows: list[tuple[str, ...]] = []
        self._uuids: set[str] = set()
        self._table_bytes = 0
        self._expected: int | None = None  # rows in the table before, once one GPU has repeated
        self._check_first: str | None = None  # a table ended at its size: the next row must start a new one

    def feed(self, data: bytes) -> Iterator[Rows]:
        """The tables ``data`` completes, in order; raises :class:`StreamError` when the stream is unusable."""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            self._partial += data[start:end]
            start = end + 1
            self._table_bytes += len(self._partial) + 1
            line = self._partial.decode("utf-8", errors="surrogateescape")
            self._partial.clear()
            self._check_size()
            yield from self._line(line)
        self._partial += data[start:]
        self._check_size()

    def _check_size(self) -> None:
        if self._table_bytes + len(self._partial) > self.max_table_bytes:
            raise StreamError(
                f"nvidia-smi printed more than {self.max_table_bytes} bytes without completing a table, the limit "
                "of --collect.max-output-bytes"
            )

    def _line(self, line: str) -> Iterator[Rows]:
        cells = _cells(line)
        if cells == ("",):
            return
        if not self._seen_header:
            if cells != self.header:
                raise StreamError(
                    f"nvidia-smi's header changed since startup: want {', '.join(self.header)!r}, "
                    f"got {excerpt(', '.join(cells))!r}; restart the exporter to map the fields again"
                )
            self._seen_header = True
            self._table_bytes = 0
            return
        if cells == self.header:  # a build that repeats the header: it ends the table before it
            if self._rows:
                yield self._end()
            return
        if len(cells) != len(self.header):
            raise StreamError(
                f"unexpected nvidia-smi output: row has {len(cells)} columns, want {len(self.header)}: "
                f"{excerpt(line)!r}"
            )
        uuid = cells[self.uuid_column]
        if self._check_first is not None:
            first, self._check_first = self._check_first, None
            if uuid != first:
                raise StreamError(
                    f"the GPU set changed: {uuid!r} follows a complete table of {self._expected} GPUs that began "
                    f"with {first!r}"
                )
        if uuid in self._uuids:  # a new iteration began before the table had the size of the one before
            table = self._end()
            self._expected = len(table)
            yield table
        self._add(uuid, cells)
        if self._expected is not None and len(self._rows) >= self._expected:
            self._check_first = self._rows[0][self.uuid_column]
            yield self._end()

    def _add(self, uuid: str, cells: tuple[str, ...]) -> None:
        self._rows.append(cells)
        self._uuids.add(uuid)

    def _end(self) -> Rows:
        table = tuple(self._rows)
        self._rows = []
        self._uuids = set()
        self._table_bytes = 0
        return table


class StreamOutput(ChildOutput):
    """A streaming child's output: stdout through the table reader, tables handed on as they complete; stderr's
    head kept, and stderr since the last table bounded by the same cap. ``failed`` holds why the stream is
    unusable."""

    def __init__(self, tables: TableReader, on_table: Callable[[Rows], None]) -> None:
        super().__init__(tables.max_table_bytes)
        self.tables = tables
        self.on_table = on_table
        self.failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.delivered = 0
        self._stderr_since_table = 0

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if self.failed.done():
            return
        if fd != STDOUT:
            self._stderr_since_table += len(data)
            if len(self.stderr) < STDERR_KEPT_BYTES:
                self.stderr += data[: STDERR_KEPT_BYTES - len(self.stderr)]
            if self._stderr_since_table > self.max_output_bytes:
                self._fail(
                    f"nvidia-smi printed more than {self.max_output_bytes} bytes on stderr between two tables, "
                    "the limit of --collect.max-output-bytes"
                )
            return
        try:
            for table in self.tables.feed(data):
                self.delivered += 1
                self._stderr_since_table = 0
                self.on_table(table)
        except StreamError as error:
            self._fail(str(error))

    def _fail(self, reason: str) -> None:
        self.failed.set_result(reason)
        self.close_pipes()


@dataclass(frozen=True, slots=True)
class Stamped:
    """A complete table and the loop time it completed at."""

    rows: Rows
    at: float


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """Why the stream has no table from a live child: the message, and the dead child's exit status (or -1)."""

    message: str
    exit_code: int = NO_EXIT_STATUS


class SmiStream:
    """Keeps one ``nvidia-smi <args> -lms N`` running and its latest complete table at hand."""

    def __init__(
        self,
        argv: Sequence[str],
        make_reader: Callable[[], TableReader],
        *,
        interval_seconds: float,
        stale_after_seconds: float,
        startup_grace_seconds: float,
        backoff_seconds: tuple[float, float] = BACKOFF_SECONDS,
        reap_seconds: float = PIPE_DRAIN_SECONDS,
        kill: Kill = kill_process_group,
    ) -> None:
        self.argv = tuple(argv)
        self._kill = kill  # a test holds it back, as the kernel holds a SIGKILL to a child stuck in the driver
        self._make_reader = make_reader
        self.interval_seconds = interval_seconds
        self.stale_after_seconds = stale_after_seconds
        self._startup_grace = startup_grace_seconds
        self._backoff = backoff_seconds
        self._reap_seconds = reap_seconds
        self._latest: Stamped | None = None
        self._failure: StreamFailure | None = None
        self._changed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._child: Child | None = None
        self._stuck: Child | None = None
        self._stuck_total = 0
        self.spawns = 0
        self.tables_read = 0
        self.restarts = 0
        self.restart_delay = backoff_seconds[0]  # before the latest restart

    @property
    def child_pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name="nvidia-smi-stream")

    def latest_rows(self) -> Rows | None:
        return self._latest.rows if self._latest is not None else None

    def stuck_children(self) -> StuckChildren:
        return StuckChildren(1 if self._stuck is not None else 0, self._stuck_total)

    async def rows(self) -> Rows:
        """The latest complete table; :class:`CollectionError` when there is none from a live child, or it is stale.

        Before the first table (the exporter's start) it waits for one, at most the staleness bound and the
        startup grace (the collector's timeout bounds it too).
        """
        loop = asyncio.get_running_loop()
        waited_until = loop.time() + self.stale_after_seconds + self._startup_grace
        while True:
            if self._failure is not None:
                raise CollectionError(
                    f"nvidia-smi stream: {self._failure.message}",
                    self._failure.exit_code,
                    fatal=self._failure.exit_code > 0,
                    exit_code=self._failure.exit_code,
                )
            latest = self._latest
            if latest is not None:
                age = loop.time() - latest.at
                if age > self.stale_after_seconds:
                    raise CollectionError(
                        f"nvidia-smi stream: the latest table is stale ({age:.1f}s old, the bound is "
                        f"{self.stale_after_seconds:g}s for a {self.interval_seconds:g}s interval): nvidia-smi "
                        "is not printing"
                    )
                return latest.rows
            remaining = waited_until - loop.time()
            if remaining <= 0:
                raise CollectionError("nvidia-smi stream: no complete table yet")
            if self._changed is None or self._changed.done():
                self._changed = loop.create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._changed), remaining)

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    def _publish(self, rows: Rows) -> None:
        self._latest = Stamped(rows, asyncio.get_running_loop().time())
        self._failure = None
        self.tables_read += 1
        self._notify()

    def _fail(self, failure: StreamFailure) -> None:
        self._latest = None
        self._failure = failure
        self._notify()

    async def _supervise(self) -> None:
        while True:
            if self._stuck is not None:
                await self._stuck.wait()
                self._stuck.close()
                self._stuck = None
                log.warning("recovered: the stuck nvidia-smi stream child has exited, starting it again")
            failure, delivered = await self._run_child()
            self._fail(failure)
            if delivered:
                self.restart_delay = self._backoff[0]
            else:
                self.restart_delay = (
                    min(self.restart_delay * 2, self._backoff[1]) if self.restarts else self._backoff[0]
                )
            self.restarts += 1
            log.warning(
                "nvidia-smi stream ended, starting it again",
                extra={"reason": failure.message, "restart_in_seconds": self.restart_delay},
            )
            await asyncio.sleep(self.restart_delay)

    async def _run_child(self) -> tuple[StreamFailure, bool]:
        """Run one child until it exits, fails or hangs: why it ended, and whether it delivered a table."""
        loop = asyncio.get_running_loop()
        output = StreamOutput(self._make_reader(), self._publish)
        self.spawns += 1
        # Never cancelled half-way (as a run's spawn): a child that starts after we were stopped is killed.
        spawning = asyncio.ensure_future(spawn_child(self.argv, output.max_output_bytes, output))
        try:
            child = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # Let the spawn finish (bounded) rather than leave it to the loop's close, which would cancel it
            # half-way; the child is killed as soon as it exists.
            spawning.add_done_callback(_kill_when_spawned)
            await asyncio.wait({spawning}, timeout=SPAWN_WAIT_SECONDS)
            if spawning.done() and not spawning.cancelled() and spawning.exception() is None:
                await self._reaped(spawning.result())
            raise
        except (OSError, ValueError) as error:
            return StreamFailure(f"failed to start {self.argv[0]!r}: {error}"), False
        self._child = child
        started = loop.time()
        try:
            while True:
                last, deadline = self._deadline(output, started)
                waits: set[asyncio.Future[Any]] = {output.exited, output.failed}
                await asyncio.wait(
                    waits,
                    timeout=max(0.0, deadline - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if output.failed.done():
                    return StreamFailure(output.failed.result()), output.delivered > 0
                if output.exited.done():
                    return await self._exited(child, output), output.delivered > 0
                last, deadline = self._deadline(output, started)  # a table may have come meanwhile
                if loop.time() >= deadline:
                    waited = loop.time() - last
                    return (
                        StreamFailure(f"no complete table for {waited:.1f}s: nvidia-smi hangs; killed it"),
                        output.delivered > 0,
                    )
        finally:
            await self._stop(child)

    async def _reaped(self, child: Child) -> None:
        """Wait (bounded) for a killed child's exit to reach the loop: one that arrives after the loop is closed
        is logged by asyncio's child watcher as ``Loop ... that handles pid ... is closed``."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(child.wait(), self._reap_seconds)
        child.close()

    def _deadline(self, output: StreamOutput, started: float) -> tuple[float, float]:
        """(since when the child owes a table, until when): the staleness bound after its last table, and the
        startup grace more before its first (a cold nvidia-smi may take seconds to start)."""
        if output.delivered and self._latest is not None:
            return self._latest.at, self._latest.at + self.stale_after_seconds
        return started, started + self.stale_after_seconds + self._startup_grace

    async def _exited(self, child: Child, output: StreamOutput) -> StreamFailure:
        """The child exited by itself: its last output taken (bounded), then why, with its exit status."""
        rest: set[asyncio.Future[Any]] = {output.ended, output.failed}
        await asyncio.wait(rest, timeout=EXIT_GRACE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        code = child.returncode if child.returncode is not None else NO_EXIT_STATUS
        message = excerpt(output.stderr.decode("utf-8", errors="surrogateescape"))
        reason = f"exit status {code}" if code >= 0 else "killed by a signal"
        text = f"nvidia-smi exited ({reason})" + (f": {message}" if message else "")
        return StreamFailure(text, code if code > 0 else NO_EXIT_STATUS)

    async def _stop(self, child: Child) -> None:
        """Kill the child's group and its token carriers; wait a bounded time for it, else hold it as stuck."""
        self._child = None
        if child.returncode is None:
            self._kill(child)
        kill_escaped(child)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(child.wait(), self._reap_seconds)
        child.close()
        if child.returncode is None:
            self._stuck = child
            self._stuck_total += 1
            log.warning(
                "the nvidia-smi stream child has not exited after SIGKILL: it is stuck in the kernel, the driver "
                "may be wedged; no new child until it exits",
                extra={"pid": child.pid},
            )

    async def aclose(self) -> None:
        """Stop the supervisor; its child's process group is killed on the way out."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _kill_when_spawned(spawning: asyncio.Future[Child]) -> None:
    """The stream was stopped while its child was starting: kill the child's group once it exists."""
    if not spawning.cancelled() and spawning.exception() is None:
        child = spawning.result()
        kill_process_group(child)
        kill_escaped(child)
        child.close()


class StreamingSmiBackend(SmiBackend):
    """The exec backend with the GPU table read from a stream; fields, the CUDA version and (with
    ``--collect.compute-apps``) the process list come from one-shot runs, as per scrape."""

    def __init__(self, base: SmiBackend, stream: SmiStream) -> None:
        super().__init__(
            base.runner,
            base.fields,
            cuda_version=base.cuda_version,
            compute_apps=base.compute_apps,
            process_usage=base.process_usage,
            status_family=base.status_family,
            exit_errors_are_fatal=base.exit_errors_are_fatal,
        )
        self.stream = stream

    async def collect(self) -> Readings:
        try:
            rows = await self.stream.rows()
        except CollectionError as error:
            error.fatal = error.fatal and self.exit_errors_are_fatal
            raise
        return await self._with_processes(GpuTable(rows))

    def stuck_children(self) -> StuckChildren:
        """The one-shot runs' stuck children and the stream's, together."""
        runs = super().stuck_children()
        stream = self.stream.stuck_children()
        return StuckChildren(runs.current + stream.current, runs.total + stream.total)

    async def aclose(self) -> None:
        await self.stream.aclose()


def loop_args(interval_seconds: float) -> list[str]:
    """nvidia-smi's ``-lms`` for the interval, in whole milliseconds (at least one)."""
    return ["-lms", str(max(1, round(interval_seconds * 1000)))]


async def start_streaming(
    runner: SubprocessRunner,
    request: FieldRequest,
    *,
    interval_seconds: float,
    timeout_seconds: float | None,
    compute_apps: bool,
    process_usage: bool = False,
    stale_after_seconds: float | None = None,
    backoff_seconds: tuple[float, float] = BACKOFF_SECONDS,
) -> StreamingSmiBackend:
    """The exec backend's startup (fields, CUDA version) through ``runner``, then the stream started."""
    base = await SmiBackend.start(
        runner, request, timeout_seconds=timeout_seconds, compute_apps=compute_apps, process_usage=process_usage
    )
    fields = base.fields
    header = tuple(field.rfield for field in fields)
    uuid_column = next((index for index, field in enumerate(fields) if field.qfield == "uuid"), None)
    if uuid_column is None:  # identity fields are never excluded: only a broken field list gets here
        raise BackendSetupError("streaming needs the uuid field to tell one table from the next")
    max_bytes = runner.max_output_bytes
    argv = [*runner.base_argv, *gpu_query_args([field.qfield for field in fields]), *loop_args(interval_seconds)]
    stream = SmiStream(
        argv,
        lambda: TableReader(header, uuid_column=uuid_column, max_table_bytes=max_bytes),
        interval_seconds=interval_seconds,
        stale_after_seconds=stale_after_seconds if stale_after_seconds is not None else stale_after(interval_seconds),
        startup_grace_seconds=timeout_seconds or 10.0,
        backoff_seconds=backoff_seconds,
    )
    stream.start()
    return StreamingSmiBackend(base, stream)
