"""Parsers for what nvidia-smi prints: GPU CSV, per-process CSV, ``--help-query-gpu``, ``--version``.

The CSV "parser" is deliberately naive and strict, like the Go exporter's: every comma splits, and a row
with the wrong number of cells fails the whole collection rather than shifting values into the wrong
fields. Per-process rows are parsed outside-in because process names may contain commas.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from nvidia_gpu_exporter._go.strconv import UINT64_MAX
from nvidia_gpu_exporter._go.text import GO_SPACE, collapse_go_space, go_lower, go_quote, go_trim_space
from nvidia_gpu_exporter.model.snapshot import ProcessRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.values import PROCESS_ABSENT_TOKENS

log = logging.getLogger(__name__)

COMPUTE_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")
COMPUTE_APPS_ARGS = ("--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS), "--format=csv")

_HELP_FIELD = re.compile(r'\n[\t\n\f\r ]*\n^"([^"]+)"', re.MULTILINE)
_VERSION_VALUE = re.compile(r"[0-9]+\.[0-9]+")


EXCERPT_CHARACTERS = 300


def excerpt(text: str, limit: int = EXCERPT_CHARACTERS) -> str:
    """``text`` for one log line: whitespace collapsed, at most ``limit`` characters, and its size when cut.

    Cut first, then collapse: splitting a whole 4 MB answer to collapse it would cost several copies of it.
    """
    window = limit * 4
    head = " ".join(text[:window].split())
    if len(head) <= limit and len(text) <= window:
        return head
    size = len(text) if text.isascii() else len(text.encode("utf-8", errors="surrogateescape"))
    return f"{head[:limit]}\u2026 ({size} bytes)"


class CsvShapeError(ValueError):
    """The CSV does not have the queried shape; the collection fails with exit code -1."""


@dataclass(frozen=True, slots=True)
class GpuCsv:
    """A parsed ``--query-gpu`` answer: trimmed header cells and rows of trimmed cells."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _cells(line: str) -> tuple[str, ...]:
    return tuple([cell.strip(GO_SPACE) for cell in line.split(",")])


def parse_gpu_csv(stdout: str, field_count: int) -> GpuCsv:
    """Parse ``--query-gpu=... --format=csv`` output for ``field_count`` queried fields."""
    lines = go_trim_space(stdout).split("\n")
    header = _cells(lines[0])
    if len(header) != field_count:
        raise CsvShapeError(f"field count mismatch: query fields: {field_count}, returned fields: {len(header)}")
    rows: list[tuple[str, ...]] = []
    for number, line in enumerate(lines[1:], start=1):
        cells = _cells(line)
        if len(cells) != field_count:
            raise CsvShapeError(
                f"row {number}: has {len(cells)} columns, want {field_count}: {go_quote(excerpt(go_trim_space(line)))}"
            )
        rows.append(cells)
    return GpuCsv(header, tuple(rows))


def _parse_uint64(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) <= UINT64_MAX


def parse_compute_apps(stdout: str) -> tuple[ProcessRow, ...]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv`` output.

    Raises :class:`CsvShapeError` when the header is not four cells; skips (and logs) bad rows.
    """
    text = go_trim_space(stdout)
    if not text:
        return ()
    lines = text.split("\n")
    if len(lines[0].split(",")) != len(COMPUTE_APPS_FIELDS):
        raise CsvShapeError(f"unexpected compute apps header: {excerpt(lines[0])!r}")
    rows: list[ProcessRow] = []
    for line in lines[1:]:
        if not go_trim_space(line):
            continue
        pieces = line.split(",")
        if len(pieces) < len(COMPUTE_APPS_FIELDS):
            log.warning("skipping compute app row: too few columns", extra={"row": excerpt(line)})
            continue
        uuid = go_trim_space(pieces[0])
        pid = go_trim_space(pieces[1])
        memory = go_trim_space(pieces[-1])
        name = go_trim_space(",".join(pieces[2:-1]))
        if not _parse_uint64(pid):
            if pid.lower() not in PROCESS_ABSENT_TOKENS:
                log.warning("skipping compute app row: pid is not an integer", extra={"row": excerpt(line)})
            continue
        if not normalize_uuid(uuid):
            log.warning("skipping compute app row: empty gpu uuid", extra={"row": excerpt(line)})
            continue
        rows.append(ProcessRow(gpu_uuid=uuid, pid=pid, process_name=name, used_memory=memory))
    return tuple(rows)


def parse_help_query_gpu(stdout: str) -> list[str]:
    """Field names from ``--help-query-gpu``: the first quoted name of a line that follows a blank line."""
    return [name for name in _HELP_FIELD.findall(stdout) if "," not in name and "\r" not in name and "\n" not in name]


def parse_cuda_version(stdout: str) -> str:
    """The CUDA version from ``--version``: the first ``CUDA UMD version``, else the last ``CUDA Version``; ""
    if neither has one."""
    fallback = ""
    for line in stdout.split("\n"):
        key, separator, value = line.partition(":")
        if not separator:
            continue
        value = go_trim_space(value)
        if not _VERSION_VALUE.fullmatch(value):
            continue
        key = go_lower(go_trim_space(collapse_go_space(key)))
        if key == "cuda umd version":
            return value
        if key == "cuda version":
            fallback = value  # the last one counts, as in the Go exporter
    return fallback
