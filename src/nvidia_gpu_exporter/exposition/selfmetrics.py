"""The exporter's own families outside ``nvidia_smi_*``: build info, process resources, HTTP handler counters, the
web config's reload state.

These change on every request (the handler counters do by definition), so they are rendered per scrape
and spliced around the cached ``nvidia_smi_*`` block; their headers are rendered once, and each group of
lines is kept until one of its values changes (the ``process_*`` ones are read at most once a second, the
connection counters rarely move), so a scrape of a busy exporter renders only the request counters. Process
figures come from ``/proc/self`` on Linux and are simply absent elsewhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.exposition.families import (
    BUILD_INFO,
    HANDLER_ERRORS,
    HANDLER_IN_FLIGHT,
    HANDLER_REQUESTS,
    HTTP_CONNECTIONS,
    HTTP_CONNECTIONS_CLOSED,
    HTTP_RESPONSES_INCOMPLETE,
    PROCESS,
    PROCESS_CPU,
    PROCESS_MAX_FDS,
    PROCESS_OPEN_FDS,
    PROCESS_RESIDENT_MEMORY,
    PROCESS_START_TIME,
    PROCESS_VIRTUAL_MEMORY,
    WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP,
    WEB_CONFIG_RELOAD_SUCCESSFUL,
)
from nvidia_gpu_exporter.exposition.text import format_value, render_family
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats, ReloadStats
from nvidia_gpu_exporter.support import buildinfo
from nvidia_gpu_exporter.support.buildinfo import BuildInfo

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(slots=True)
class HandlerStats:
    """Counters of the metrics route, named like Go's promhttp ones so existing queries keep working."""

    requests: dict[str, int] = field(default_factory=lambda: {"200": 0, "500": 0, "503": 0})
    in_flight: int = 0
    errors: dict[str, int] = field(default_factory=lambda: {"encoding": 0, "gathering": 0})
    connections: ConnectionStats = field(default_factory=ConnectionStats)
    web_config: ReloadStats | None = None  # with --web.config.file only

    def count(self, status: int) -> None:
        key = str(status)
        self.requests[key] = self.requests.get(key, 0) + 1


def build_info_values(build: BuildInfo) -> tuple[str, ...]:
    """The labels of ``nvidia_gpu_exporter_build_info`` (BUILD_INFO's order): the branch and revision ``--version``
    prints (``unknown`` where the build recorded none, as the Go exporter's revision reads then)."""
    return (
        build.branch,
        buildinfo.machine(),
        buildinfo.operating_system(),
        buildinfo.python_version(),
        build.revision,
        "",
        __version__,
    )


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


_BOOT_TIME = _boot_time()


def _max_fds() -> float | None:
    try:
        import resource  # noqa: PLC0415 - POSIX only

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None
    return float(soft)


_HEADERS = {spec.name: spec.header() for spec in PROCESS}
_MAX_FDS = _max_fds()


PROCESS_REFRESH_SECONDS = 1.0
_process_cache: tuple[float, dict[str, float]] | None = None


def format_count(count: int) -> str:
    """A counter's value as Go writes ``float64(count)``: the integer itself below 1e6 (Go's ``%g`` switches to an
    exponent at 1e6), :func:`format_value` from there."""
    return str(count) if 0 <= count < 1_000_000 else format_value(float(count))


def process_values() -> dict[str, float]:
    """``process_*`` values, read from ``/proc`` at most once a second (a scrape storm reads them once)."""
    global _process_cache  # noqa: PLW0603 - a one-slot cache of a process-wide reading
    now = time.monotonic()
    if _process_cache is None or now - _process_cache[0] >= PROCESS_REFRESH_SECONDS:
        _process_cache = (now, read_process_values())
    return _process_cache[1]


def read_process_values() -> dict[str, float]:
    """``process_*`` values from ``/proc/self`` (Linux); empty where that is not available."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
        open_fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return {}
    fields = stat[stat.rindex(")") + 2 :].split()
    # Field numbers from proc(5), minus 3 for the pid, comm and state columns cut off above.
    utime, stime = int(fields[11]), int(fields[12])
    start_ticks, virtual, resident_pages = int(fields[19]), int(fields[20]), int(fields[21])
    values = {
        PROCESS_CPU.name: (utime + stime) / _CLOCK_TICKS,
        PROCESS_OPEN_FDS.name: float(open_fds),
        PROCESS_RESIDENT_MEMORY.name: float(resident_pages * _PAGE_SIZE),
        PROCESS_VIRTUAL_MEMORY.name: float(virtual),
    }
    if _MAX_FDS is not None:
        values[PROCESS_MAX_FDS.name] = _MAX_FDS
    if _BOOT_TIME is not None:
        values[PROCESS_START_TIME.name] = _BOOT_TIME + start_ticks / _CLOCK_TICKS
    return values


class SelfMetrics:
    """Renders the self families of one exporter; the static parts are rendered once, each group of value lines
    again only when one of its values changed."""

    def __init__(self, build_info: tuple[str, ...]) -> None:
        info = BUILD_INFO.family()
        info.add(build_info, 1.0)
        self.build_info_text = render_family(info)
        self._requests_header = HANDLER_REQUESTS.header()
        self._in_flight_header = HANDLER_IN_FLIGHT.header()
        self._errors_header = HANDLER_ERRORS.header()
        self._connections_header = HTTP_CONNECTIONS.header()
        self._closed_header = HTTP_CONNECTIONS_CLOSED.header()
        self._incomplete_header = HTTP_RESPONSES_INCOMPLETE.header()
        self._reload_successful_header = WEB_CONFIG_RELOAD_SUCCESSFUL.header()
        self._reload_timestamp_header = WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP.header()
        # (the values a group was rendered from, its text): compared by value, except the process readings,
        # which process_values() hands out as one dict per reading (held here, so its identity is never reused)
        self._before: tuple[tuple[object, ...], str] | None = None
        self._process: tuple[dict[str, float], str] | None = None
        self._handler: tuple[tuple[object, ...], str] | None = None

    def before_nvidia_smi(self, stats: HandlerStats) -> str:
        """Families sorting before ``nvidia_smi_``: build info, the HTTP server's connections, the web config's
        reload state."""
        connections = stats.connections
        reloads = stats.web_config
        reload_key = None if reloads is None else (reloads.last_successful, reloads.last_success_timestamp)
        key = (connections.open, tuple(connections.closed.items()), connections.responses_incomplete, reload_key)
        if self._before is not None and self._before[0] == key:
            return self._before[1]
        parts = [
            self.build_info_text,
            f"{self._connections_header}{HTTP_CONNECTIONS.name} {format_count(connections.open)}\n",
            self._closed_header,
        ]
        parts += [
            f'{HTTP_CONNECTIONS_CLOSED.name}{{reason="{reason}"}} {format_count(count)}\n'
            for reason, count in sorted(connections.closed.items())
        ]
        incomplete = format_count(connections.responses_incomplete)
        parts.append(f"{self._incomplete_header}{HTTP_RESPONSES_INCOMPLETE.name} {incomplete}\n")
        if reloads is not None:
            successful = format_count(int(reloads.last_successful))
            timestamp = format_value(reloads.last_success_timestamp)
            parts.append(f"{self._reload_successful_header}{WEB_CONFIG_RELOAD_SUCCESSFUL.name} {successful}\n")
            parts.append(f"{self._reload_timestamp_header}{WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP.name} {timestamp}\n")
        text = "".join(parts)
        self._before = (key, text)
        return text

    def after_nvidia_smi(self, stats: HandlerStats) -> str:
        """Families sorting after ``nvidia_smi_`` (``process_*``, ``promhttp_*``), in name order."""
        return "".join(self.after_nvidia_smi_parts(stats))

    def after_nvidia_smi_parts(self, stats: HandlerStats) -> tuple[str, str]:
        """:meth:`after_nvidia_smi` in two: what changes at most once a second (``process_*``, the handler's errors
        and requests in flight), then the request counters, which change with every scrape (a gzip answer
        compresses each part only when it changed)."""
        return self._process_lines() + self._handler_lines(stats), self._requests_lines(stats)

    def _process_lines(self) -> str:
        values = process_values()
        if self._process is not None and self._process[0] is values:
            return self._process[1]
        text = "".join(f"{_HEADERS[name]}{name} {format_value(value)}\n" for name, value in sorted(values.items()))
        self._process = (values, text)
        return text

    def _handler_lines(self, stats: HandlerStats) -> str:
        key = (tuple(stats.errors.items()), stats.in_flight)
        if self._handler is not None and self._handler[0] == key:
            return self._handler[1]
        parts = [self._errors_header]
        parts += [
            f'{HANDLER_ERRORS.name}{{cause="{cause}"}} {format_count(count)}\n'
            for cause, count in sorted(stats.errors.items())
        ]
        parts.append(f"{self._in_flight_header}{HANDLER_IN_FLIGHT.name} {format_count(stats.in_flight)}\n")
        text = "".join(parts)
        self._handler = (key, text)
        return text

    def _requests_lines(self, stats: HandlerStats) -> str:
        """The request counters: one of them moves with every scrape, so they are rendered each time."""
        lines = [
            f'{HANDLER_REQUESTS.name}{{code="{code}"}} {format_count(count)}\n'
            for code, count in sorted(stats.requests.items())
        ]
        return self._requests_header + "".join(lines)
