"""Follows the kernel log (``/dev/kmsg``, or a file or FIFO holding one) in a thread of its own.

``/dev/kmsg`` hands out one record per ``read()``, starting with the oldest record still in the ring buffer
(the replay since boot), then blocks for new ones. When the kernel overwrites records faster than we
read, ``read()`` fails once with ``EPIPE`` and continues with the oldest record left: we count the loss and
go on. A regular file or FIFO is read as a byte stream split into lines (a line may arrive in pieces).

Costs nothing while the log is quiet: the thread sleeps in ``poll()`` on the log and a wake-up pipe (a
regular file, which ``poll()`` cannot wait on, is looked at once per ``file_poll_seconds``). It never
touches the event loop; memory is bounded by :data:`MAX_LINE_BYTES` of pending text plus the ledger.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import stat
import threading
import time
from collections.abc import Callable

from nvidia_gpu_exporter.health.kernellog import LogLine, parse_line
from nvidia_gpu_exporter.model.snapshot import KernelLogState

log = logging.getLogger(__name__)

READ_BYTES = 65536  # more than /dev/kmsg's largest record (8 KiB): a short buffer would fail with EINVAL
MAX_LINE_BYTES = 16384  # a longer line is dropped, never buffered without bound
DMESG_RESTRICT = "/proc/sys/kernel/dmesg_restrict"

LineSink = Callable[[LogLine, bool], None]  # (line, live): live is False while replaying what was there


class ReplayGuard:
    """Tells the records an earlier pass over the log handed over already, so a reopen never counts them twice.

    Reopening ``/dev/kmsg`` replays the ring buffer from its oldest record, and a log rewritten whole
    (``dmesg > log``) or truncated starts over: every pass after the first skips what came before. A kmsg
    record is known by its sequence number; a ``dmesg`` line by its kernel time and, among lines of the same
    microsecond, its place. Lines without either (syslog) cannot be told apart and are all handed over.
    """

    def __init__(self) -> None:
        self._sequence = -1  # the highest read so far
        self._usec = -1  # the latest kernel time read so far, and how many lines carried it
        self._at_usec = 0
        self._replay_sequence = -1  # what the current pass skips: up to these, as of its start
        self._replay_usec = -1
        self._replay_at_usec = 0
        self._skipped_at_usec = 0

    def new_pass(self) -> None:
        """The log is read again from its start: skip what has been read."""
        self._replay_sequence = self._sequence
        self._replay_usec, self._replay_at_usec = self._usec, self._at_usec
        self._skipped_at_usec = 0

    def is_new(self, line: LogLine) -> bool:
        """Whether ``line`` was not read before; records it as read."""
        if line.sequence is not None:
            if line.sequence <= self._replay_sequence:
                return False
            self._sequence = max(self._sequence, line.sequence)
            return True
        usec = line.kernel_usec
        if usec is None:
            return True
        if usec < self._replay_usec:
            return False
        if usec == self._replay_usec and self._skipped_at_usec < self._replay_at_usec:
            self._skipped_at_usec += 1
            return False
        if usec > self._usec:
            self._usec, self._at_usec = usec, 1
        elif usec == self._usec:
            self._at_usec += 1
        return True


def open_problem(error: OSError, restrict_file: str | os.PathLike[str] = DMESG_RESTRICT) -> KernelLogState:
    """Why the log cannot be opened, in the terms an operator acts on."""
    if isinstance(error, FileNotFoundError):
        return KernelLogState.ABSENT
    if isinstance(error, PermissionError):
        try:
            with open(restrict_file, encoding="ascii") as file:
                restricted = file.read().strip() == "1"
        except OSError:
            restricted = False
        return KernelLogState.RESTRICTED if restricted else KernelLogState.PERMISSION_DENIED
    return KernelLogState.ERROR


class KernelLogReader:
    """Reads ``path`` from its start and follows it, handing each line to ``sink`` from the reader thread."""

    def __init__(
        self,
        path: str,
        sink: LineSink,
        *,
        file_poll_seconds: float = 1.0,
        reopen_seconds: float = 30.0,
        restrict_file: str | os.PathLike[str] = DMESG_RESTRICT,
    ) -> None:
        self.path = path
        self.sink = sink
        self.file_poll_seconds = file_poll_seconds
        self.reopen_seconds = reopen_seconds
        self.restrict_file = restrict_file
        self.state = KernelLogState.ERROR
        self._said: KernelLogState | None = None  # the open problem last logged: each is said once, the first too
        self.records = 0
        self.lost = 0
        self.replayed = threading.Event()  # set once the lines already there at start were read
        self._stop = threading.Event()
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="kernel-log-reader", daemon=True)
        self._pending = bytearray()
        self._skipping = False  # inside an over-long line, until its newline
        self._fd: int | None = None
        self._replays = ReplayGuard()

    def open_now(self) -> int | None:
        """Open the log (non-blocking); on failure record the reason and return ``None``."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
            if stat.S_ISDIR(os.fstat(fd).st_mode):  # it opens, then every read fails: refused here, said once
                os.close(fd)
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.path)
        except OSError as error:
            state = open_problem(error, self.restrict_file)
            if state != self._said:
                log.warning(
                    "cannot read the kernel log for XIDs",
                    extra={"path": self.path, "reason": state.value, "err": error.strerror or str(error)},
                )
            self.state = self._said = state
            return None
        if self.state != KernelLogState.UP:
            log.info("reading XIDs from the kernel log", extra={"path": self.path})
        self.state = KernelLogState.UP
        self._said = None
        return fd

    def start(self, fd: int | None) -> None:
        """Start following (``fd`` from :meth:`open_now`; ``None`` retries the open every ``reopen_seconds``)."""
        self._fd = fd
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():
            for fd in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(fd)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the thread ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        fd = self._fd
        while not self._stop.is_set():
            if fd is None:
                if self._stop.wait(self.reopen_seconds):
                    return
                fd = self.open_now()
                continue
            try:
                self._follow(fd)
            except Exception:  # the reader must outlive anything a log can throw at it
                log.exception("kernel log reader failed; reopening", extra={"path": self.path})
                self.state = KernelLogState.ERROR
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
            fd = None

    def _follow(self, fd: int) -> None:
        self._replays.new_pass()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        live = False
        while not self._stop.is_set():
            try:
                chunk = os.read(fd, READ_BYTES)
            except BlockingIOError:  # /dev/kmsg or a FIFO: everything there at start has been read
                live = True
                self.replayed.set()
                self._wait_readable(fd)
                continue
            except OSError as error:
                if error.errno == errno.EPIPE:  # the kernel overwrote records we had not read yet
                    self.lost += 1
                    continue
                if error.errno == errno.EINTR:
                    continue
                raise
            if not chunk:  # the end of a file, or a FIFO with no writer
                live = True
                self.replayed.set()
                if regular and self._replaced(fd):
                    return
                if self._stop.wait(self.file_poll_seconds):
                    return
                continue
            self._feed(chunk, live)

    def _replaced(self, fd: int) -> bool:
        """A rotated or truncated file: start over from the new one's beginning."""
        try:
            now, current = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        if (now.st_ino, now.st_dev) != (current.st_ino, current.st_dev):
            return True
        if current.st_size < os.lseek(fd, 0, os.SEEK_CUR):
            os.lseek(fd, 0, os.SEEK_SET)
            self._replays.new_pass()
        return False

    def _wait_readable(self, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        poller.register(self._wake_read, select.POLLIN)
        poller.poll()

    def _feed(self, chunk: bytes, live: bool) -> None:
        self._pending += chunk
        start = 0
        while (end := self._pending.find(b"\n", start)) >= 0:
            line = bytes(self._pending[start:end])
            start = end + 1
            if self._skipping:
                self._skipping = False
                continue
            self._line(line, live)
        del self._pending[:start]
        if len(self._pending) > MAX_LINE_BYTES:
            self._pending.clear()
            self._skipping = True

    def _line(self, raw: bytes, live: bool) -> None:
        if not raw or raw.startswith(b" ") or len(raw) > MAX_LINE_BYTES:  # kmsg's " KEY=value" continuation lines
            return
        line = parse_line(raw.decode("utf-8", errors="replace"))
        if self._replays.is_new(line):
            self.records += 1
            self.sink(line, live)


def kernel_clock() -> float:
    """Seconds on the clock the kernel stamps its log with: CLOCK_MONOTONIC (suspend excluded), where there is one."""
    if hasattr(time, "clock_gettime") and hasattr(time, "CLOCK_MONOTONIC"):
        return time.clock_gettime(time.CLOCK_MONOTONIC)
    return time.monotonic()  # no kernel log to match there (Windows): only the demo's simulated one


def boot_time(clock: Callable[[], float] = time.time) -> float:
    """Unix time of boot by the kernel log's clock."""
    return clock() - kernel_clock()
