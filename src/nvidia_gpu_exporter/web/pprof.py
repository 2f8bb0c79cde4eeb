"""``--web.enable-pprof``: the Python counterparts of Go's ``/debug/pprof`` endpoints, as plain text.

``profile`` runs cProfile on the event-loop thread (where every request and collection is scheduled)
for ``?seconds=N`` (default 30, at most 300); ``threads`` dumps every thread's stack; ``tasks`` lists the
asyncio tasks; ``cmdline`` is the command line, NUL-separated as in Go.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import sys
import threading
import traceback

from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.responses import plain_text

MAX_PROFILE_SECONDS = 300.0
_profile_lock = asyncio.Lock()


def _text(body: str, status: int = 200) -> Response:
    return plain_text(body, status)


async def index(_: Request) -> Response:
    return _text(
        "Profiles:\n"
        "  cmdline  the command line of this process\n"
        "  profile  cProfile of the event loop thread for ?seconds=N (default 30)\n"
        "  threads  stack traces of every thread\n"
        "  tasks    the running asyncio tasks and where each is suspended\n"
    )


async def cmdline(_: Request) -> Response:
    return _text("\x00".join(sys.argv))


async def profile(request: Request) -> Response:
    try:
        seconds = float(request.query.get("seconds", "30"))
    except ValueError:
        return _text("seconds must be a number\n", status=400)
    if not 0 < seconds <= MAX_PROFILE_SECONDS:
        return _text(f"seconds must be in (0, {MAX_PROFILE_SECONDS:g}]\n", status=400)
    if _profile_lock.locked():
        return _text("a profile is already being taken\n", status=409)
    async with _profile_lock:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            await asyncio.sleep(seconds)
        finally:
            profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
    return _text(out.getvalue())


async def threads(_: Request) -> Response:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    out: list[str] = []
    for ident, frame in sys._current_frames().items():
        out.append(f"thread {names.get(ident, '?')} ({ident}):\n")
        out.extend(traceback.format_stack(frame))
        out.append("\n")
    return _text("".join(out))


async def tasks(_: Request) -> Response:
    out: list[str] = []
    for task in asyncio.all_tasks():
        out.append(f"{task.get_name()}: {task.get_coro()!r}\n")
        for frame in task.get_stack():
            out.append(f"    {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n")
    return _text("".join(out))


def add_profiling_routes(app: App, prefix: str) -> None:
    app.add_get(prefix + "/", index, allow_head=False)
    for name, handler in (("cmdline", cmdline), ("profile", profile), ("threads", threads), ("tasks", tasks)):
        app.add_get(f"{prefix}/{name}", handler, allow_head=False)
