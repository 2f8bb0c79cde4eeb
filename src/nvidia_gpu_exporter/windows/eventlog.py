"""Mirroring the exporter's log records into the Windows Application Event Log while it runs as a service."""

from __future__ import annotations

import logging
from types import ModuleType

from nvidia_gpu_exporter import logs


def event_text(record: logging.LogRecord) -> str:
    """The Event Log text of a record: the message followed by `` key=value`` pairs (logfmt quoting)."""
    fields = logs.record_fields(record)[4:]  # after time, level, source and msg
    return record.getMessage() + "".join(f" {key}={logs.logfmt_value(value)}" for key, value in fields)


class EventLogHandler(logging.Handler):
    """Mirror log records into the Application Event Log through pywin32's ``servicemanager``, best effort."""

    def __init__(self, servicemanager: ModuleType) -> None:
        super().__init__()
        self._servicemanager = servicemanager
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = event_text(record)
            if record.levelno >= logging.ERROR:
                self._servicemanager.LogErrorMsg(text)
            elif record.levelno >= logging.WARNING:
                self._servicemanager.LogWarningMsg(text)
            else:
                self._servicemanager.LogInfoMsg(text)
        except Exception:  # a full or unavailable Event Log must never stop the exporter
            self.failures += 1
