"""Structured logs on stderr in the Prometheus style: logfmt (default) or JSON, one line per event.

Call sites pass key/value pairs through ``extra={...}``; every attribute that is not part of a plain
``LogRecord`` is written as a field, after ``time``, ``level``, ``source`` and ``msg``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

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


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{key}={logfmt_value(value)}" for key, value in record_fields(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            key: value if isinstance(value, (int, float, bool)) else str(value) for key, value in record_fields(record)
        }
        return json.dumps(payload, ensure_ascii=False)


def configure(level: str = "info", log_format: str = "logfmt", stream: TextIO | None = None) -> logging.Logger:
    """Install one stderr handler on the package logger (idempotent: replaces an earlier one)."""
    logger = logging.getLogger(ROOT_LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else LogfmtFormatter())
    logger.addHandler(handler)
    logger.setLevel(LEVELS[level])
    logger.propagate = False
    return logger
