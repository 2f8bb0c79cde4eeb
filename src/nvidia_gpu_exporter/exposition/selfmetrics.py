"""The exporter's own families outside ``nvidia_smi_*``: build info, process resources, HTTP handler counters.

These change on every request (the handler counters do by definition), so they are rendered per scrape
and spliced around the cached ``nvidia_smi_*`` block. Process figures come from ``/proc/self`` on Linux
and are simply absent elsewhere.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import __version__
from .text import Family, render_family

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(slots=True)
class HandlerStats:
    """Counters of the metrics route, named like Go's promhttp ones so existing queries keep working."""

    requests: dict[str, int] = field(default_factory=lambda: {"200": 0, "500": 0, "503": 0})
    in_flight: int = 0
    errors: dict[str, int] = field(default_factory=lambda: {"encoding": 0, "gathering": 0})

    def count(self, status: int) -> None:
        key = str(status)
        self.requests[key] = self.requests.get(key, 0) + 1


def _machine() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


BUILD_INFO_LABELS = ("branch", "goarch", "goos", "pythonversion", "revision", "tags", "version")


def build_info_values(revision: str = "", branch: str = "") -> tuple[str, ...]:
    return (
        branch,
        _machine(),
        sys.platform.replace("win32", "windows"),
        platform.python_version(),
        revision,
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


def process_families() -> list[Family]:
    """``process_*`` families from ``/proc/self`` (Linux); empty where that is not available."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            stat = handle.read()
        open_fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return []
    fields = stat[stat.rindex(")") + 2 :].split()
    # Field numbers from proc(5), minus 3 for the pid, comm and state columns cut off above.
    utime, stime = int(fields[11]), int(fields[12])
    start_ticks, virtual, resident_pages = int(fields[19]), int(fields[20]), int(fields[21])
    values: list[tuple[str, str, str, float]] = [
        (
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            (utime + stime) / _CLOCK_TICKS,
        ),
        ("process_open_fds", "Number of open file descriptors.", "gauge", float(open_fds)),
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
            float(resident_pages * _PAGE_SIZE),
        ),
        ("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", float(virtual)),
    ]
    max_fds = _max_fds()
    if max_fds is not None:
        values.append(("process_max_fds", "Maximum number of open file descriptors.", "gauge", max_fds))
    if _BOOT_TIME is not None:
        values.append(
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                "gauge",
                _BOOT_TIME + start_ticks / _CLOCK_TICKS,
            )
        )
    families = []
    for name, help_text, metric_type, value in values:
        family = Family(name, help_text, metric_type)
        family.add((), value)
        families.append(family)
    return families


def self_metrics_blocks(stats: HandlerStats, build_info: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(name, text)`` blocks of every self family, ready to merge with the cached ``nvidia_smi_*`` block."""
    info = Family(
        "nvidia_gpu_exporter_build_info",
        "A metric with a constant '1' value labeled by version, revision, branch, pythonversion, "
        "goos, goarch and tags from which nvidia_gpu_exporter was built.",
        "gauge",
        BUILD_INFO_LABELS,
    )
    info.add(build_info, 1.0)
    families = [info, *process_families()]
    families += _handler_families(stats.requests, stats.in_flight, stats.errors)
    return [(family.name, render_family(family)) for family in families]


def _handler_families(requests: Mapping[str, int], in_flight: int, errors: Mapping[str, int]) -> list[Family]:
    total = Family(
        "promhttp_metric_handler_requests_total",
        "Total number of scrapes by HTTP status code.",
        "counter",
        ("code",),
    )
    for code, count in requests.items():
        total.add((code,), float(count))
    flight = Family(
        "promhttp_metric_handler_requests_in_flight", "Current number of scrapes being served.", "gauge"
    )
    flight.add((), float(in_flight))
    error_family = Family(
        "promhttp_metric_handler_errors_total",
        "Total number of internal errors encountered by the promhttp metric handler.",
        "counter",
        ("cause",),
    )
    for cause, count in errors.items():
        error_family.add((cause,), float(count))
    return [total, flight, error_family]
