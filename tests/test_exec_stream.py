"""Streaming mode of the exec backend (docs/collection-modes.md): one long-lived ``nvidia-smi -lms`` whose tables
are read as they come; scrapes get the latest, and a child that dies, hangs, floods or changes its header is
restarted with back-off while collections fail with a clear reason instead of serving old readings."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from async_helpers import run
from exposition_reader import sample_value
from harness import process_gone, start_exporter
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.exec.command import split_command
from nvidia_gpu_exporter.backends.exec.runner import Child, SubprocessRunner
from nvidia_gpu_exporter.backends.exec.stream import (
    SmiStream,
    StreamError,
    StreamingSmiBackend,
    TableReader,
    start_streaming,
)
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.model.snapshot import StuckChildren
from polling import eventually, wait_until

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="needs /bin/sh and process groups")
T = TypeVar("T")

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "captures"
WINDOWS = FIXTURES / "fixture-windows-1gpu.txt"
HEADER = ("uuid", "temperature.gpu")
PATIENCE = 20.0


# ----------------------------------------------------------------------------------------------
# The table reader: where one table ends in a CSV that nvidia-smi prints with its header once


def reader(limit: int = 1 << 20) -> TableReader:
    return TableReader(HEADER, uuid_column=0, max_table_bytes=limit)


def feed_all(table_reader: TableReader, text: str) -> list[tuple[tuple[str, ...], ...]]:
    return list(table_reader.feed(text.encode()))


def test_the_first_table_ends_when_a_gpu_repeats_and_later_ones_at_its_size() -> None:
    tables = reader()
    out = feed_all(tables, "uuid, temperature.gpu\nA, 1\nB, 2\n")
    assert out == []  # two GPUs or more: not known until one repeats
    out = feed_all(tables, "A, 3\n")
    assert out == [(("A", "1"), ("B", "2"))]
    assert feed_all(tables, "B, 4\n") == [(("A", "3"), ("B", "4"))]  # the size is known now: no wait
    assert feed_all(tables, "A, 5\nB, 6\n") == [(("A", "5"), ("B", "6"))]


def test_bytes_split_anywhere_give_the_same_tables() -> None:
    text = "uuid, temperature.gpu\nA, 1\nB, 2\nA, 3\nB, 4\nA, 5\nB, 6\n"
    whole = feed_all(reader(), text)
    tables = reader()
    pieces = [table for char in text for table in feed_all(tables, char)]
    assert pieces == whole == [(("A", "1"), ("B", "2")), (("A", "3"), ("B", "4")), (("A", "5"), ("B", "6"))]


def test_a_repeated_header_also_ends_a_table() -> None:
    """Should a build print the header every iteration, each header closes the table before it."""
    tables = reader()
    assert feed_all(tables, "uuid, temperature.gpu\nA, 1\nB, 2\nuuid, temperature.gpu\n") == [(("A", "1"), ("B", "2"))]


def test_a_gpu_gone_gives_a_shorter_table() -> None:
    tables = reader()
    feed_all(tables, "uuid, temperature.gpu\nA, 1\nB, 2\nA, 3\nB, 4\n")
    # B is gone: A repeating ends a one-GPU table, and from then on each row is a table of that size
    assert feed_all(tables, "A, 5\nA, 6\n") == [(("A", "5"),), (("A", "6"),)]


def test_a_gpu_more_than_the_last_table_fails_the_stream() -> None:
    tables = reader()
    feed_all(tables, "uuid, temperature.gpu\nA, 1\nA, 2\n")
    with pytest.raises(StreamError, match="GPU set changed"):
        feed_all(tables, "B, 3\n")


def test_a_changed_header_fails_with_both_headers() -> None:
    with pytest.raises(StreamError, match=r"header changed.*temperature\.gpu.*temperature\.gpu\.tlimit"):
        feed_all(reader(), "uuid, temperature.gpu.tlimit\n")


def test_a_row_of_the_wrong_shape_fails_the_stream() -> None:
    with pytest.raises(StreamError, match="row has 3 columns, want 2"):
        feed_all(reader(), "uuid, temperature.gpu\nA, 1, 2\n")


def test_a_line_that_never_ends_fails_at_the_cap() -> None:
    tables = reader(limit=1000)
    feed_all(tables, "uuid, temperature.gpu\n")
    for _ in range(9):
        feed_all(tables, "x" * 100)  # 900 bytes of one line: under the cap
    with pytest.raises(StreamError, match=r"limit of --collect\.max-output-bytes"):
        feed_all(tables, "x" * 101)


def test_a_table_that_never_ends_fails_at_the_cap() -> None:
    tables = reader(limit=1000)
    with pytest.raises(StreamError, match="more than 1000 bytes"):
        feed_all(tables, "uuid, temperature.gpu\n" + "".join(f"G{n}, 1\n" for n in range(200)))


# ----------------------------------------------------------------------------------------------
# Against the fake nvidia-smi, a real long-lived child


def fake_command(*fake_args: str) -> list[str]:
    return [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", *fake_args]


async def started(
    argv: list[str],
    *,
    interval: float = 0.05,
    stale_after: float = 2.0,
    max_output_bytes: int = 1 << 20,
) -> StreamingSmiBackend:
    runner = SubprocessRunner(argv, max_output_bytes=max_output_bytes)
    return await start_streaming(
        runner,
        FieldRequest("uuid,temperature.gpu,utilization.gpu", ""),
        interval_seconds=interval,
        timeout_seconds=PATIENCE,
        compute_apps=False,
        stale_after_seconds=stale_after,
        backoff_seconds=(0.05, 0.2),
    )


async def collected(backend: StreamingSmiBackend) -> tuple[tuple[str, ...], ...]:
    return (await asyncio.wait_for(backend.collect(), PATIENCE)).gpus.rows


async def failure(backend: StreamingSmiBackend) -> CollectionError:
    """The next failed collection (polling: a collection may still succeed from the last table for a moment)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while loop.time() < deadline:
        try:
            await asyncio.wait_for(backend.collect(), PATIENCE)
        except CollectionError as error:
            return error
        await asyncio.sleep(0.01)
    raise AssertionError("no collection failed")


async def success(backend: StreamingSmiBackend) -> tuple[tuple[str, ...], ...]:
    """The next successful collection's rows (polling: the child may be between two lives)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PATIENCE
    while loop.time() < deadline:
        with contextlib.suppress(CollectionError):
            return await collected(backend)
        await asyncio.sleep(0.01)
    raise AssertionError("no collection succeeded")


def with_backend(argv: list[str], body: Callable[[StreamingSmiBackend], Awaitable[T]], **options: float) -> T:
    async def main() -> T:
        backend = await started(argv, **options)  # type: ignore[arg-type]
        try:
            return await body(backend)
        finally:
            await backend.aclose()

    return run(main)


@posix_only
def test_scrapes_get_the_latest_table() -> None:
    argv = fake_command("--capture", str(WINDOWS), "--gpus", "3", "--fluctuate", "--seed", "1")

    async def body(backend: StreamingSmiBackend) -> None:
        first = await collected(backend)
        assert len(first) == 3
        await eventually(lambda: backend.stream.tables_read >= 3, "three tables", timeout=PATIENCE)
        assert backend.stream.spawns == 1  # one child for every collection, none per scrape
        later = await collected(backend)
        assert later != first  # --fluctuate moved the values: the latest table, not the first

    with_backend(argv, body)


@posix_only
def test_a_dying_child_is_reported_with_its_exit_status_and_restarted() -> None:
    argv = fake_command("--capture", str(WINDOWS), "--die-after", "2", "--die-code", "7", "--stderr-msg", "NVML gone")

    async def body(backend: StreamingSmiBackend) -> None:
        error = await failure(backend)
        assert error.status_code == 7
        assert error.fatal  # --shutdown-on-error applies to a child that exits non-zero, as per scrape
        assert "exit status 7" in str(error)
        assert "NVML gone" in str(error)
        await eventually(lambda: backend.stream.spawns >= 3, "restarts", timeout=PATIENCE)
        assert len(await success(backend)) == 1  # a restarted child's table is served again

    with_backend(argv, body)


@posix_only
def test_a_hanging_child_goes_stale_fails_collections_and_is_restarted() -> None:
    argv = fake_command("--capture", str(WINDOWS), "--hang-after", "2")

    async def body(backend: StreamingSmiBackend) -> None:
        await collected(backend)
        first_pid = backend.stream.child_pid
        error = await failure(backend)
        assert "stale" in str(error) or "no complete table" in str(error)
        assert error.status_code == -1
        await eventually(lambda: backend.stream.spawns >= 2, "a restart", timeout=PATIENCE)
        assert first_pid is not None
        await eventually(lambda: process_gone(first_pid), "the hung child killed", timeout=PATIENCE)

    with_backend(argv, body, stale_after=0.5)


@posix_only
def test_a_flooding_child_is_bounded_and_restarted() -> None:
    argv = fake_command("--capture", str(WINDOWS), "--flood-after", "2")

    async def body(backend: StreamingSmiBackend) -> None:
        error = await failure(backend)
        assert "--collect.max-output-bytes" in str(error)
        await eventually(lambda: backend.stream.spawns >= 2, "a restart", timeout=PATIENCE)

    with_backend(argv, body, max_output_bytes=64 * 1024)


@posix_only
def test_a_driver_with_another_header_fails_clearly(tmp_path: Path) -> None:
    """After a restart the child prints another header (a driver update renamed a field): collections fail
    naming both headers, rather than serving values under the wrong names."""
    changed = tmp_path / "changed.txt"
    changed.write_text(
        WINDOWS.read_text(encoding="utf-8").replace("utilization.gpu [%],", "utilization.gpu.now [%],"),
        encoding="utf-8",
    )
    config = tmp_path / "fake.yaml"
    config.write_text(f"capture: {WINDOWS}\n", encoding="utf-8")
    argv = fake_command("--config", str(config), "--die-after", "3")

    async def body(backend: StreamingSmiBackend) -> None:
        await collected(backend)
        config.write_text(f"capture: {changed}\n", encoding="utf-8")
        error = await failure(backend)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PATIENCE
        while "header changed" not in str(error) and loop.time() < deadline:
            error = await failure(backend)
        assert "header changed" in str(error)
        assert "utilization.gpu.now [%]" in str(error)

    with_backend(argv, body)


@posix_only
def test_closing_kills_the_childs_process_group(tmp_path: Path) -> None:
    """Stopping the exporter (``aclose``) kills the whole group: a wrapper's grandchild dies with it."""
    pids = tmp_path / "pids"
    script = tmp_path / "wrapper.sh"
    fake = " ".join(fake_command("--capture", str(WINDOWS)))
    script.write_text(
        f'case " $* " in *" -lms "*) sleep 300 & echo $! >> {pids}; echo $$ >> {pids};; esac\nexec {fake} "$@"\n',
        encoding="utf-8",
    )

    async def main() -> None:
        backend = await started(split_command(f"/bin/sh {script}"))
        await collected(backend)
        recorded = [int(line) for line in pids.read_text(encoding="ascii").split()]
        assert recorded
        await backend.aclose()
        await eventually(lambda: all(process_gone(pid) for pid in recorded), "the group killed", timeout=PATIENCE)

    run(main)


# ----------------------------------------------------------------------------------------------
# The exporter with --collect.stream-interval, end to end


@posix_only
def test_the_exporter_streams_and_its_stop_kills_the_childs_group(tmp_path: Path) -> None:
    """Scrapes are answered from one long-lived child (no nvidia-smi per scrape), and SIGTERM kills its group."""
    log = tmp_path / "invocations"
    pids = tmp_path / "pids"
    script = tmp_path / "wrapper.sh"
    fake = " ".join(fake_command("--capture", str(WINDOWS), "--gpus", "2"))
    script.write_text(
        f'echo "$*" >> {log}\n'
        f'case " $* " in *" -lms "*) sleep 300 & echo $! >> {pids}; echo $$ >> {pids};; esac\n'
        f'exec {fake} "$@"\n',
        encoding="utf-8",
    )
    exporter = start_exporter(["--nvidia-smi-command", f"/bin/sh {script}", "--collect.stream-interval=100ms"])
    try:
        for _ in range(3):
            text = exporter.scrape()
            assert text.count("nvidia_smi_gpu_info{") == 2
            assert sample_value(text, "nvidia_smi_command_exit_code") == 0
    finally:
        assert exporter.stop() == 0
    invocations = log.read_text(encoding="utf-8").splitlines()
    assert [line for line in invocations if "-lms 100" in line] == [invocations[-1]]  # one stream, started last
    assert sum("--query-gpu=" in line for line in invocations) == 2  # startup's field mapping, then the stream
    recorded = [int(line) for line in pids.read_text(encoding="ascii").split()]
    assert len(recorded) == 2
    wait_until(lambda: all(process_gone(pid) for pid in recorded), "the stream's group killed")


@posix_only
def test_restarts_back_off_while_no_child_delivers_a_table() -> None:
    """A child that fails before its first table: each restart waits twice as long, up to the ceiling, and the
    failure carries its exit status."""
    argv = fake_command("--capture", str(WINDOWS), "--die-after", "0", "--die-code", "3")

    async def body(backend: StreamingSmiBackend) -> None:
        error = await failure(backend)
        assert error.status_code == 3
        delays: list[float] = []

        def at_ceiling() -> bool:
            delays.append(backend.stream.restart_delay)
            return backend.stream.restart_delay == 0.2

        await eventually(at_ceiling, "the back-off to reach its ceiling", timeout=PATIENCE)
        assert 0.1 in delays  # doubled on its way from 0.05

    with_backend(argv, body)  # --die-after applies to loop mode only: startup's one-shot runs answer


@posix_only
def test_a_child_sigkill_does_not_end_is_stuck_and_no_other_starts_until_it_exits() -> None:
    """A wedged driver: the hung child outlives SIGKILL (held back here); it is counted as stuck and no second
    child is started beside it; once it exits the stream starts again."""
    held: list[Child] = []
    header = ("uuid", "temperature.gpu")
    stream = SmiStream(
        ["/bin/sh", "-c", "echo 'uuid, temperature.gpu'; exec sleep 60"],  # a header, then no table: hung
        lambda: TableReader(header, uuid_column=0, max_table_bytes=1 << 20),
        interval_seconds=0.05,
        stale_after_seconds=1.0,
        startup_grace_seconds=1.0,
        backoff_seconds=(0.05, 0.05),
        reap_seconds=0.2,
        kill=held.append,
    )
    seen: list[StuckChildren] = []

    def restarted() -> bool:
        if stream.spawns < 2:
            return False
        seen.append(stream.stuck_children())
        return True

    async def main() -> None:
        stream.start()
        try:
            await eventually(lambda: stream.stuck_children().current == 1, "the child stuck", timeout=PATIENCE)
            await asyncio.sleep(0.5)
            assert stream.spawns == 1  # none beside the stuck one
            os.killpg(held[0].pid, signal.SIGKILL)  # the driver lets go
            await eventually(restarted, "a new child", timeout=PATIENCE, interval=0.001)
            assert seen[0] == StuckChildren(0, 1)
        finally:
            await stream.aclose()
            for child in held:  # killed here, and reaped before the loop closes (else asyncio's watcher logs it)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                await asyncio.wait_for(child.wait(), PATIENCE)
                child.close()

    run(main)


def _late_exits(records: list[logging.LogRecord]) -> list[str]:
    """asyncio's child watcher saying a child exited after the loop that started it was closed."""
    return [record.getMessage() for record in records if "that handles pid" in record.getMessage()]


@posix_only
@pytest.mark.parametrize("turns", [0, 1, 2])
def test_a_stream_stopped_while_its_child_starts_reaps_it_before_returning(
    turns: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The child that starts after the stop is killed, and its exit seen before ``aclose`` returns: left to the
    child watcher after the loop closed, it logged ``Loop ... that handles pid ... is closed`` (the CI log's one
    ``Logging error``, once pytest had closed the stream)."""
    stream = SmiStream(
        ["/bin/sh", "-c", "exec sleep 60"],
        lambda: TableReader(("uuid",), uuid_column=0, max_table_bytes=1 << 20),
        interval_seconds=0.05,
        stale_after_seconds=30.0,
        startup_grace_seconds=30.0,
    )

    async def main() -> None:
        stream.start()
        for _ in range(turns):
            await asyncio.sleep(0)
        await stream.aclose()

    caplog.set_level(logging.WARNING, logger="asyncio")
    run(main)
    give_up = time.monotonic() + 1.0  # a child left behind exits within this (SIGKILL), and the watcher says so
    while not _late_exits(caplog.records) and time.monotonic() < give_up:
        time.sleep(0.02)
    assert _late_exits(caplog.records) == []
