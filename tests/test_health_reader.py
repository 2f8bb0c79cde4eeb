"""The kernel-log reader against real files and FIFOs: replay, follow, overwrite, bounds (docs/health.md)."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvidia_gpu_exporter.health.kernellog import LogLine
from nvidia_gpu_exporter.health.reader import MAX_LINE_BYTES, KernelLogReader, open_problem
from nvidia_gpu_exporter.model.snapshot import KernelLogState
from polling import wait_until

Follow = Callable[..., KernelLogReader]
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, GPU has fallen off the bus."


class Lines:
    """What the reader handed over, from its thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[LogLine, bool]] = []

    def __call__(self, line: LogLine, live: bool) -> None:
        with self.lock:
            self.seen.append((line, live))

    def messages(self) -> list[str]:
        with self.lock:
            return [line.message for line, _ in self.seen]

    def live(self) -> list[bool]:
        with self.lock:
            return [live for _, live in self.seen]


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture
def follow(lines: Lines) -> Iterator[Follow]:
    started: list[KernelLogReader] = []

    def start(path: Path, reopen_seconds: float = 30.0) -> KernelLogReader:
        reader = KernelLogReader(str(path), lines, file_poll_seconds=0.02, reopen_seconds=reopen_seconds)
        reader.start(reader.open_now())
        started.append(reader)
        return reader

    yield start
    for reader in started:
        reader.stop()


def _kmsg(sequence: int, message: str) -> str:
    return f"6,{sequence},{sequence * 1000},-;{message}\n"


def test_the_lines_already_in_the_log_are_replayed_then_new_ones_followed(
    tmp_path: Path, follow: Follow, lines: Lines
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(_kmsg(1, "boot") + _kmsg(2, XID))
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    with log.open("a") as handle:
        handle.write(_kmsg(3, "later"))
    wait_until(lines.messages, "the followed line", until=lambda seen: len(seen) == 3)
    assert lines.messages() == ["boot", XID, "later"]
    assert lines.live() == [False, False, True]
    assert reader.state == KernelLogState.UP


def test_kmsg_continuation_lines_are_not_records(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kmsg"
    log.write_text(_kmsg(1, XID) + " SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n" + _kmsg(2, "next"))
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    assert lines.messages() == [XID, "next"]
    assert reader.records == 2


def test_a_line_split_across_writes_to_a_fifo_arrives_whole(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # held open so the reader sees a live writer, not an end
    try:
        follow(fifo)
        record = _kmsg(1, XID).encode()
        os.write(writer, record[:20])
        os.write(writer, record[20:])
        wait_until(lines.messages, "the whole line", until=lambda seen: seen == [XID])
    finally:
        os.close(writer)


def test_an_over_long_line_is_dropped_and_the_next_one_read(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kmsg"
    log.write_text(_kmsg(1, "x" * (3 * MAX_LINE_BYTES)) + _kmsg(2, XID))
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    assert lines.messages() == [XID]


def test_garbage_and_invalid_utf8_never_stop_the_reader(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kmsg"
    log.write_bytes(b"\xff\xfe garbage\n\x00\x01\n;;;\n" + _kmsg(9, XID).encode())
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    assert lines.messages()[-1] == XID
    assert reader.records == 4


def test_a_ten_megabyte_log_is_replayed_whole(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kmsg"
    filler = "".join(_kmsg(n, f"usb 3-5: new high-speed USB device number {n}") for n in range(160_000))
    log.write_text(filler + _kmsg(160_000, XID))
    assert log.stat().st_size > 10_000_000
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end", timeout=120)
    assert reader.records == 160_001
    assert lines.messages()[-1] == XID


def test_records_the_kernel_overwrote_are_counted_and_reading_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    follow: Follow,
    lines: Lines,
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(_kmsg(1, "first") + _kmsg(5, XID))
    real_read = os.read
    calls = {"n": 0}

    def read(fd: int, size: int) -> bytes:
        calls["n"] += 1
        if calls["n"] == 1:  # what /dev/kmsg does once when records were overwritten before we read them
            raise OSError(errno.EPIPE, "Broken pipe")
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read)
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    assert reader.lost == 1
    assert lines.messages() == ["first", XID]


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    """copytruncate rotation: the file is seen shorter than what was already read."""
    log = tmp_path / "kern.log"
    log.write_text("".join(_kmsg(n, "an old line, and the old log is longer than the new one") for n in range(10)))
    reader = follow(log)
    wait_until(reader.replayed.is_set, "the replay to end")
    log.write_text(_kmsg(10, XID))
    wait_until(lines.messages, "the line after truncation", until=lambda seen: seen[-1:] == [XID])


def test_a_rotated_file_is_reopened(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kern.log"
    log.write_text(_kmsg(1, "before rotation"))
    reader = follow(log, reopen_seconds=0.02)
    wait_until(reader.replayed.is_set, "the replay to end")
    log.rename(tmp_path / "kern.log.1")
    log.write_text(_kmsg(2, XID))
    wait_until(lines.messages, "the line in the new file", until=lambda seen: seen[-1:] == [XID])


def _replace(log: Path, text: str) -> None:
    """Rewrite the log whole and atomically, as ``dmesg > new && mv new log`` does."""
    new = log.with_name(log.name + ".new")
    new.write_text(text)
    new.rename(log)


@pytest.mark.parametrize(
    ("before", "after", "new"),
    [
        pytest.param(
            _kmsg(1, "boot") + _kmsg(2, XID),
            _kmsg(1, "boot") + _kmsg(2, XID) + _kmsg(3, "later"),
            ["later"],
            id="kmsg-records-by-sequence-number",
        ),
        pytest.param(
            f"[    1.000000] boot\n[    2.000000] {XID}\n[    2.000000] same microsecond\n",
            f"[    1.000000] boot\n[    2.000000] {XID}\n[    2.000000] same microsecond\n"
            "[    2.000000] a third at that microsecond\n[    3.000000] later\n",
            ["a third at that microsecond", "later"],
            id="dmesg-lines-by-kernel-time-and-order",
        ),
    ],
)
def test_a_log_read_again_hands_over_only_the_records_not_read_before(  # noqa: PLR0917 - fixtures and a table
    tmp_path: Path, follow: Follow, lines: Lines, before: str, after: str, new: list[str]
) -> None:
    """A replaced or reopened log replays what was read already; counting it again would double every XID."""
    log = tmp_path / "kern.log"
    log.write_text(before)
    reader = follow(log, reopen_seconds=0.02)
    wait_until(reader.replayed.is_set, "the replay to end")
    first = lines.messages()
    _replace(log, after)
    wait_until(lines.messages, "the new records", until=lambda seen: seen[-1:] == new[-1:])
    assert lines.messages() == first + new
    assert reader.records == len(first) + len(new)


def test_kmsg_reopened_after_a_read_error_does_not_replay_what_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follow: Follow, lines: Lines
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(_kmsg(1, "boot") + _kmsg(2, XID))
    real_read = os.read
    failing = threading.Event()

    def read(fd: int, size: int) -> bytes:
        if failing.is_set():
            failing.clear()
            raise OSError(errno.EIO, "Input/output error")
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read)
    reader = follow(log, reopen_seconds=0.02)
    wait_until(reader.replayed.is_set, "the replay to end")
    failing.set()
    wait_until(lambda: not failing.is_set(), "the read error")
    with log.open("a") as handle:
        handle.write(_kmsg(3, "later"))
    wait_until(lines.messages, "the followed line", until=lambda seen: seen[-1:] == ["later"])
    assert lines.messages() == ["boot", XID, "later"]


def test_a_log_that_appears_later_is_opened_then(tmp_path: Path, follow: Follow, lines: Lines) -> None:
    log = tmp_path / "kmsg"
    reader = follow(log, reopen_seconds=0.02)
    states = [reader.state]
    log.write_text(_kmsg(1, XID))
    wait_until(lines.messages, "the line once the log exists", until=lambda seen: seen == [XID])
    states.append(reader.state)
    assert states == [KernelLogState.ABSENT, KernelLogState.UP]


def test_stop_ends_a_reader_waiting_on_a_quiet_fifo(tmp_path: Path, lines: Lines) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)
    try:
        reader = KernelLogReader(str(fifo), lines)
        reader.start(reader.open_now())
        wait_until(reader.replayed.is_set, "the reader to wait in poll()")
        reader.stop(timeout=10)
        assert not reader.alive
    finally:
        os.close(writer)


@pytest.mark.parametrize(
    ("error", "restricted", "state"),
    [
        pytest.param(FileNotFoundError(errno.ENOENT, "x"), "0", KernelLogState.ABSENT, id="no-dev-kmsg-in-container"),
        pytest.param(PermissionError(errno.EPERM, "x"), "1", KernelLogState.RESTRICTED, id="dmesg-restrict"),
        pytest.param(PermissionError(errno.EACCES, "x"), "0", KernelLogState.PERMISSION_DENIED, id="file-mode"),
        pytest.param(OSError(errno.EIO, "x"), "0", KernelLogState.ERROR, id="anything-else"),
    ],
)
def test_why_the_log_cannot_be_opened(tmp_path: Path, error: OSError, restricted: str, state: KernelLogState) -> None:
    restrict = tmp_path / "dmesg_restrict"
    restrict.write_text(restricted + "\n")
    assert open_problem(error, restrict) == state
