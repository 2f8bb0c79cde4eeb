"""dcgm-exporter's counters file (``-f`` / ``--dcgm.collectors``, docs/dcgm.md): which DCGM fields to serve.

The grammar is dcgm-exporter's: one CSV record per line, ``DCGM field, Prometheus type, help``, each cell trimmed,
``#`` comment lines and blank lines skipped, so an operator's existing file (or ConfigMap) works unchanged. Every
error names ``file:line``; the file is bounded in bytes and lines, so a wrong path cannot hold or bloat startup.
Whether a well-formed field can be served is the renderer's question (:mod:`.dcgm`), not the grammar's.
"""

from __future__ import annotations

import csv
import os
import re
import stat
from dataclasses import dataclass, field

MAX_BYTES = 256 * 1024  # dcgm-exporter's own files are a few KiB
MAX_LINES = 4096
PROMETHEUS_TYPES = ("gauge", "counter", "histogram", "summary", "label")  # what dcgm-exporter accepts
# DCGM's names, and the lower-case ``dcgm_*`` ones of dcgm-exporter 1.x that its 1.x-compatibility file still uses
# (go-dcgm's legacy field names).
_FIELD_NAME = re.compile(r"DCGM_(?:FI|EXP)_[A-Z0-9_]+|dcgm_[a-z0-9_]+")


class CountersError(ValueError):
    """The counters file cannot be read or parsed; the message names the file and, where there is one, the line."""


@dataclass(frozen=True, slots=True)
class Counter:
    """One record of the counters file."""

    name: str
    metric_type: str
    help: str
    line: int
    source: str = field(default="", compare=False)  # the file, for what is said about the record later


def _record(text: str, where: str) -> list[str]:
    try:
        cells = next(csv.reader([text], skipinitialspace=True, strict=True))
    except csv.Error as error:
        raise CountersError(f"{where}: not a CSV record ({error})") from error
    return [cell.strip() for cell in cells]


def counter_of(name: str, metric_type: str, help_text: str, source: str, line: int) -> Counter:
    """One record, checked as dcgm-exporter checks it: a CSV line, or a YAML config file's inline field."""
    where = f"{source}:{line}"
    if not _FIELD_NAME.fullmatch(name):
        raise CountersError(f"{where}: {name!r} is not a DCGM field name (DCGM_FI_*, DCGM_EXP_* or 1.x's dcgm_*)")
    if metric_type not in PROMETHEUS_TYPES:
        allowed = ", ".join(PROMETHEUS_TYPES[:-1]) + f" or {PROMETHEUS_TYPES[-1]}"
        raise CountersError(f"{where}: unknown Prometheus type {metric_type!r} ({allowed})")
    return Counter(name, metric_type, help_text, line, source)


def parse_counters(text: str, source: str) -> tuple[Counter, ...]:
    """The records of a counters file's text, in order (a field listed again too: dcgm-exporter's own 1.x file
    does, and it serves the first; the renderer says so); a :class:`CountersError` at the first bad line."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise CountersError(f"{source}: more than {MAX_LINES} lines: not a counters file")
    counters: list[Counter] = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{source}:{number}"
        cells = _record(stripped, where)
        if len(cells) != 3:
            raise CountersError(f"{where}: expected 3 fields (DCGM field, Prometheus type, help), got {len(cells)}")
        name, metric_type, help_text = cells
        counters.append(counter_of(name, metric_type, help_text, source, number))
    if not counters:
        raise CountersError(f"{source}: lists no DCGM field")
    return tuple(counters)


def read_counters_file(path: str) -> tuple[Counter, ...]:
    """The records of the counters file at ``path`` (a ConfigMap's symlinked file too), read once at startup."""
    return parse_counters(read_startup_text(path, MAX_BYTES, "counters file", CountersError), path)


def read_startup_text(
    path: str, max_bytes: int, kind: str, error_type: type[ValueError], *, too_large: str = ""
) -> str:
    """The UTF-8 text of one of dcgm-exporter's files read at startup (``kind``: "counters file", ...), at most
    ``max_bytes`` (past it, "not a ``too_large``", by default ``kind``); an ``error_type`` names the path, and the
    line of a byte that is not UTF-8."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise error_type(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise error_type(f"cannot read the {kind} {path}: {error.strerror or error}") from error
    if len(data) > max_bytes:
        raise error_type(f"{path}: larger than {max_bytes} bytes: not a {too_large or kind}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise error_type(f"{path}:{line}: not UTF-8 text") from error
