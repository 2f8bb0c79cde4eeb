"""Structured logs on stderr in the Prometheus style: logfmt (default) or JSON, one line per event.

Call sites pass key/value pairs through ``extra={...}``; every attribute that is not part of a plain
``LogRecord`` is written as a field, after ``time``, ``level``, ``source`` and ``msg``.

Every line of the process goes through here, not just the exporter's own: the HTTP layer's and asyncio's loggers,
the event loop's exception handler, warnings and uncaught exceptions (:func:`capture_process_output`). A
traceback becomes one ``err`` field, and each message (its template, whatever the arguments) is written at most
:data:`LINES_PER_INTERVAL` times per :data:`INTERVAL_SECONDS`, then summed up in one "suppressed" line, so a
client that makes the server fail a thousand times cannot write a thousand lines.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import asyncio  # the loop's type only: parsing flags and logging import no asyncio (preflight.py)

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}
_STANDARD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
ROOT_LOGGER = "nvidia_gpu_exporter"


def _level_name(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    return _LEVEL_NAMES.get(levelno, "debug" if levelno < logging.INFO else "warn")


def _timestamp(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def record_fields(record: logging.LogRecord) -> list[tuple[str, Any]]:
    """The ordered fields of one event: time, level, source, msg, then the caller's key/values."""
    fields: list[tuple[str, Any]] = [
        ("time", _timestamp(record.created)),
        ("level", _level_name(record.levelno)),
        ("source", f"{record.module}.py:{record.lineno}"),
        ("msg", record.getMessage()),
    ]
    fields += [(key, value) for key, value in vars(record).items() if key not in _STANDARD_ATTRIBUTES]
    if record.exc_info and record.exc_info[1] is not None:
        fields.append(("err", f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"))
    return fields


def logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and not any(char in text for char in ' ="\\') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


def go_default_logger_error(msg: str, err: str, stream: TextIO | None = None) -> None:
    """One error line in the form of Go's default logger (``2006/01/02 15:04:05 ERROR msg err=...``, local time),
    which the Go exporter writes a command-line error with, before ``--log.*`` have set its own logger up."""
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime())
    (stream or sys.stderr).write(f"{stamp} ERROR {msg} err={logfmt_value(err)}\n")


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={logfmt_value(value)}" for key, value in record_fields(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            key: value if isinstance(value, (int, float, bool)) else str(value) for key, value in record_fields(record)
        }
        return json.dumps(payload, ensure_ascii=False)


LINES_PER_INTERVAL = 5
INTERVAL_SECONDS = 60.0
MAX_TRACKED_MESSAGES = 1024  # beyond this many distinct messages in one interval, a logger's share one budget


@dataclass(slots=True)
class _Window:
    started: float
    written: int = 0
    suppressed: int = 0
    sample: logging.LogRecord | None = None


class RateLimitedHandler(logging.StreamHandler):  # type: ignore[type-arg]  # generic only in typeshed
    """A stream handler writing each message (logger, level, template) at most ``lines`` times per ``interval``."""

    def __init__(
        self,
        stream: TextIO,
        lines: int = LINES_PER_INTERVAL,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(stream)
        self.lines = lines
        self.interval = interval
        self.clock = clock
        self._windows: dict[tuple[str, int, str], _Window] = {}
        self._swept = clock()

    def handle(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        with self._rate_lock:
            if now - self._swept >= self.interval:
                self._sweep(now)
            key = (record.name, record.levelno, str(record.msg))
            if key not in self._windows and len(self._windows) >= MAX_TRACKED_MESSAGES:
                key = (record.name, record.levelno, "")
            window = self._windows.get(key)
            if window is None or now - window.started >= self.interval:
                if window is not None:
                    self._summarize(window)
                window = self._windows[key] = _Window(now)
            if window.written >= self.lines:
                window.suppressed += 1
                window.sample = record
                return False
            window.written += 1
        return super().handle(record)

    def close(self) -> None:
        """At exit (``logging.shutdown``): what is still suppressed is summed up before the handler goes."""
        with self._rate_lock:
            self._sweep(float("inf"))
        super().close()

    @property
    def _rate_lock(self) -> threading.RLock:
        assert self.lock is not None  # created by Handler.__init__
        return self.lock

    def _sweep(self, now: float) -> None:
        self._swept = now
        for key, window in list(self._windows.items()):
            if now - window.started >= self.interval:
                self._summarize(window)
                del self._windows[key]

    def _summarize(self, window: _Window) -> None:
        sample = window.sample
        if not window.suppressed or sample is None:
            return
        summary = logging.makeLogRecord(
            {
                "name": sample.name,
                "levelno": sample.levelno,
                "levelname": sample.levelname,
                "module": sample.module,
                "lineno": sample.lineno,
                "msg": "suppressed similar log lines",
                "suppressed": window.suppressed,
                "similar_to": sample.getMessage(),
            }
        )
        super().handle(summary)


# Libraries whose INFO lines are per connection or per request (asyncssh: five for each fleet probe, 30 lines a second
# for 100 targets at 15 s): their warnings and errors are kept, their INFO and DEBUG shown only at --log.level=debug.
CHATTY_LIBRARIES = ("asyncssh",)
# asyncio's warning for every write past the fifth to a connection whose client went away mid-response (a scraper
# that timed out or was stopped), over plain TCP and over TLS: nothing an operator can act on, so a debug line.
CLIENT_GONE_MESSAGES = frozenset({"socket.send() raised exception.", "SSL connection is closed"})


class ClientGoneFilter(logging.Filter):
    """Demotes asyncio's :data:`CLIENT_GONE_MESSAGES` to debug: written only when ``debug`` says debug is on."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in CLIENT_GONE_MESSAGES and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.debug
        return True


def configure(level: str = "info", log_format: str = "logfmt", stream: TextIO | None = None) -> logging.Logger:
    """Install one rate-limited stderr handler for every logger of the process (idempotent: replaces an
    earlier one); ``level`` applies to all of them. Returns the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    package = logging.getLogger(ROOT_LOGGER)
    for handler in list(package.handlers):
        package.removeHandler(handler)
    package.setLevel(logging.NOTSET)
    package.propagate = True
    handler = RateLimitedHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else LogfmtFormatter())
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    debug = LEVELS[level] <= logging.DEBUG
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else logging.WARNING)
    loop_logger = logging.getLogger("asyncio")
    for old_filter in [f for f in loop_logger.filters if isinstance(f, ClientGoneFilter)]:
        loop_logger.removeFilter(old_filter)
    loop_logger.addFilter(ClientGoneFilter(debug))
    return root


def _exception_fields(error: BaseException | None) -> dict[str, str]:
    return {"err": f"{type(error).__name__}: {error}"} if error is not None else {}


def log_loop_exception(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler: one structured line keyed by asyncio's message (not the repr of
    the transport or socket asyncio's default handler appends, which differs every time)."""
    message = str(context.get("message") or "unhandled exception in the event loop")
    logging.getLogger("asyncio").error(message, extra=_exception_fields(context.get("exception")))


def _uncaught(_kind: type[BaseException], error: BaseException, _traceback: TracebackType | None) -> None:
    logging.getLogger(ROOT_LOGGER).error("uncaught exception", extra=_exception_fields(error))


def _uncaught_in_thread(arguments: threading.ExceptHookArgs) -> None:
    thread = arguments.thread.name if arguments.thread is not None else ""
    fields = _exception_fields(arguments.exc_value)
    logging.getLogger(ROOT_LOGGER).error("uncaught exception in a thread", extra={"thread": thread, **fields})


def _unraisable(arguments: Any) -> None:
    fields = _exception_fields(arguments.exc_value)
    logging.getLogger(ROOT_LOGGER).error("exception ignored", extra={"in": repr(arguments.object), **fields})


def capture_process_output() -> None:
    """Route what Python would print to stderr itself (warnings, uncaught and ignored exceptions) through the
    logging above. For the exporter's process only: a test process keeps its own hooks."""
    logging.captureWarnings(True)
    sys.excepthook = _uncaught
    threading.excepthook = _uncaught_in_thread
    sys.unraisablehook = _unraisable
