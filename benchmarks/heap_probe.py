"""Runs the exporter with a probe that tells Python-heap growth from the allocators' (issue 35).

``bench_soak.py --heap-probe DIR`` starts its Python exporters as ``python benchmarks/heap_probe.py ARGS``
(instead of ``python -m nvidia_gpu_exporter ARGS``) with ``HEAP_PROBE_DIR=DIR``. Every ``HEAP_PROBE_SECONDS``
(default 60) a thread appends to ``DIR/PID.tsv``: the seconds since start, RSS and its anonymous part
(``/proc/self/smaps_rollup``), what tracemalloc traces, pymalloc's blocks in use (``sys.getallocatedblocks``),
glibc's heap in use and free inside it (``mallinfo2``: ``uordblks`` and ``fordblks``; its mmapped chunks,
``hblkhd``), the objects the collector tracks (startup's are frozen, so not counted), pymalloc's arenas and
the free space inside them, and, with ``HEAP_PROBE_TRIM=1``, RSS once ``malloc_trim(0)`` has run (an
intervention: what glibc holds that it could give back). pymalloc's figures need ``HEAP_PROBE_TRACEMALLOC=0``
(tracemalloc's hooks stand in front of pymalloc, which then reports nothing; they show as 0). With
``HEAP_PROBE_TYPES=1`` it also appends to ``DIR/PID.types`` at each sample from the third: every live
``SSLContext`` with the sessions in its cache, and the types whose tracked objects grew most since the second.

tracemalloc starts at the first sample, not at startup (tracing the imports slows the start past the
benchmark's patience and doubles RSS), so the traced bytes are what was allocated since and is still alive.
From the second sample on the probe also rewrites ``DIR/PID.top``: the 25 call stacks whose live allocations
grew most since the second sample, so a warm-up's one-off allocations are not counted as growth.

Reading it: RSS rising with the traced bytes is a Python object kept (a cache, a history, a list); RSS
rising while the traced bytes and ``uordblks`` stay flat is memory freed but not returned (fragmentation of
pymalloc's arenas or glibc's heap). tracemalloc costs memory and CPU of its own: compare slopes, not levels.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import runpy
import ssl
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

FRAMES = 6
COLUMNS = (
    "seconds",
    "rss_kib",
    "anonymous_kib",
    "traced_kib",
    "pymalloc_blocks",
    "glibc_in_use_kib",
    "glibc_free_kib",
    "glibc_mmapped_kib",
    "gc_objects",
    "pymalloc_arenas",
    "pymalloc_free_kib",
    "rss_after_trim_kib",
)
STAT = re.compile(
    r"^(# arenas allocated current|# bytes in available blocks|\d+ unused pools \* \d+ bytes)\s*=\s*([\d,]+)"
)


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def mallinfo() -> MallInfo2 | None:
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).mallinfo2 if name else None
    except (OSError, AttributeError):
        return None
    if function is None:
        return None
    function.restype = MallInfo2
    info: MallInfo2 = function()
    return info


def smaps() -> dict[str, int]:
    found: dict[str, int] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            found[key] = int(parts[0])
    return found


def pymalloc() -> tuple[int, int]:
    """pymalloc's arenas and the KiB free inside them (available blocks and unused pools), from
    ``sys._debugmallocstats``, which writes only to the C stderr: it is pointed at a file for the call (a log
    line written in that millisecond would land there)."""
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        found = {
            match.group(1): int(match.group(2).replace(",", ""))
            for line in out.read().decode().splitlines()
            if (match := STAT.match(line)) is not None
        }
    arenas = found.pop("# arenas allocated current", 0)
    return arenas, sum(found.values()) // 1024


def sample(started: float, trim: bool) -> list[int]:
    rollup = smaps()
    info = mallinfo()
    traced, _ = tracemalloc.get_traced_memory()
    arenas, pymalloc_free = pymalloc()
    after_trim = -1
    if trim:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
        after_trim = smaps().get("Rss", 0)
    return [
        round(time.monotonic() - started),
        rollup.get("Rss", 0),
        rollup.get("Anonymous", 0),
        traced // 1024,
        sys.getallocatedblocks(),
        info.uordblks // 1024 if info else -1,
        info.fordblks // 1024 if info else -1,
        info.hblkhd // 1024 if info else -1,
        len(gc.get_objects()),
        arenas,
        pymalloc_free,
        after_trim,
    ]


def type_counts() -> Counter[str]:
    """The objects the collector tracks, by type name: what a kept reference piles up shows here as a count."""
    return Counter(type(item).__qualname__ for item in gc.get_objects())


def tls_contexts() -> str:
    """Each live ``SSLContext`` and the sessions in its cache: a context a reload replaced but something still
    holds, or a session cache that fills, shows here (OpenSSL's memory, which tracemalloc does not see)."""
    found = [item for item in gc.get_objects() if isinstance(item, ssl.SSLContext)]
    return " ".join(f"{id(context):x}:{context.session_stats()['number']}" for context in found)


def write_types(directory: Path, started: float, reference: Counter[str]) -> None:
    grown = type_counts()
    grown.subtract(reference)
    lines = [f"after {round(time.monotonic() - started)} s, contexts (id:cached sessions): {tls_contexts()}"]
    lines.append("tracked objects by type, grown most since the second sample:")
    lines.extend(f"{count:+8d} {name}" for name, count in grown.most_common(25) if count)
    with (directory / f"{os.getpid()}.types").open("a") as out:
        out.write("\n".join(lines) + "\n\n")


def probe(directory: Path, every: float, started: float, trim: bool, trace: bool) -> None:
    table = directory / f"{os.getpid()}.tsv"
    table.write_text("\t".join(COLUMNS) + "\n")
    reference: tracemalloc.Snapshot | None = None
    types = os.environ.get("HEAP_PROBE_TYPES") == "1"
    counted: Counter[str] | None = None
    count = 0
    while True:
        time.sleep(every)
        count += 1
        if count == 1 and trace:
            tracemalloc.start(FRAMES)
        with table.open("a") as out:
            out.write("\t".join(str(value) for value in sample(started, trim)) + "\n")
        if types and count == 2:
            counted = type_counts()
        elif counted is not None:
            write_types(directory, started, counted)
        if not trace:
            continue
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        if reference is None:
            if count >= 2:
                reference = snapshot
            continue
        lines = [f"after {round(time.monotonic() - started)} s, growth since the second sample:"]
        for stat in snapshot.compare_to(reference, "traceback")[:25]:
            lines.append(f"{stat.size_diff / 1024:+10.1f} KiB {stat.count_diff:+7d} blocks")
            lines.extend(f"      {frame.filename}:{frame.lineno}" for frame in stat.traceback[-FRAMES:])
        (directory / f"{os.getpid()}.top").write_text("\n".join(lines) + "\n")
        del snapshot


def main() -> None:
    directory = Path(os.environ["HEAP_PROBE_DIR"])
    every = float(os.environ.get("HEAP_PROBE_SECONDS", "60"))
    trim = os.environ.get("HEAP_PROBE_TRIM") == "1"
    trace = os.environ.get("HEAP_PROBE_TRACEMALLOC", "1") == "1"
    thread = threading.Thread(target=probe, args=(directory, every, time.monotonic(), trim, trace), daemon=True)
    thread.start()
    sys.argv[0] = "nvidia_gpu_exporter"
    runpy.run_module("nvidia_gpu_exporter", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
