"""Where an exporter's event loop spends its time: every callback timed by name (a task's by its coroutine), the
connection cap's ``admit`` and the garbage collector, written as JSON to ``$LOOPCLOCK_OUT.<pid>`` when the process
exits. Loaded by every Python started with this folder on ``PYTHONPATH`` and ``LOOPCLOCK_OUT`` set (the exporter a
benchmark starts, among them); the processes that ran no event loop write nothing.

    LOOPCLOCK_OUT=/tmp/loop PYTHONPATH=benchmarks/loopclock .venv/bin/python benchmarks/bench_stalls.py --attacks head
"""

from __future__ import annotations

import os

if os.environ.get("LOOPCLOCK_OUT"):
    import asyncio.events
    import atexit
    import gc
    import json
    import time
    from collections import defaultdict
    from typing import Any

    from nvidia_gpu_exporter.httpserver import connections

    _times: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])  # calls, total s, longest s
    _gc_started = [0.0]
    _run = asyncio.events.Handle._run
    _admit = connections.Connections.admit

    def _record(name: str, seconds: float) -> None:
        entry = _times[name]
        entry[0] += 1
        entry[1] += seconds
        entry[2] = max(entry[2], seconds)

    def _name(handle: asyncio.events.Handle) -> str:
        callback: Any = handle._callback  # type: ignore[attr-defined]  # private, as the whole of this file
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            return "task " + getattr(task.get_coro(), "__qualname__", "?")
        return str(getattr(getattr(callback, "__func__", callback), "__qualname__", type(callback).__name__))

    def _timed_run(self: asyncio.events.Handle) -> None:
        started = time.perf_counter()
        _run(self)
        _record(_name(self), time.perf_counter() - started)

    def _timed_admit(self: connections.Connections, connection: connections.Connection) -> bool:
        started = time.perf_counter()
        admitted = _admit(self, connection)
        _record("Connections.admit", time.perf_counter() - started)
        return admitted

    def _gc(phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            _gc_started[0] = time.perf_counter()
        else:
            _record("gc", time.perf_counter() - _gc_started[0])

    def _write() -> None:
        if set(_times) <= {"gc"}:
            return  # no event loop ran here
        rows = sorted(_times.items(), key=lambda item: -item[1][1])
        report = {
            name: {"calls": calls, "total_ms": total * 1e3, "longest_ms": longest * 1e3}
            for name, (calls, total, longest) in rows
        }
        with open(f"{os.environ['LOOPCLOCK_OUT']}.{os.getpid()}", "w", encoding="utf-8") as out:
            json.dump(report, out, indent=1)

    asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]
    connections.Connections.admit = _timed_admit  # type: ignore[method-assign]
    gc.callbacks.append(_gc)
    atexit.register(_write)
