"""What --collect.process-usage costs: collection time, render time and series at 8 GPUs x 16 and x 64 processes,
on the exec backend (the fake nvidia-smi: a GPU query, plus a pmon run with the option), the demo backend (the same
pipeline answered in-process from a capture) and the nvml backend (the fake libnvidia-ml, compiled here), each with
and without the option, at the default cap (16 processes per GPU with series of their own).

The exec figures are dominated by starting the Python fake nvidia-smi, once per run; the nvml figures by the
bindings' ctypes calls into a fake that does no work (a real driver adds its own latency per call). Render time is
the cap plus the whole scrape's text for one collection.

    python benchmarks/bench_process_usage.py [--iterations 30] [--exec-iterations 8]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_fake import compile_fake_nvml, nvml_env

GPUS = 8
PROCESS_COUNTS = (16, 64)
FENCE = "#" * 80
USAGE_PREFIXES = ("nvidia_smi_process_", "nvidia_gpu_exporter_process_usage_")


def median_ms(timings: list[float]) -> float:
    return statistics.median(timings) * 1000


def uuid_of(gpu: int) -> str:
    return f"GPU-{gpu:08x}-0000-4000-8000-000000000000"


def write_capture(path: Path, processes: int) -> None:
    """8 GPUs at 80 % utilization, each running ``processes`` processes of different memory sizes."""
    from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS

    fields = (*IDENTITY_FIELDS, "utilization.gpu", "utilization.memory", "memory.used")
    header = ", ".join((*IDENTITY_FIELDS, "utilization.gpu [%]", "utilization.memory [%]", "memory.used [MiB]"))

    def row(gpu: int) -> str:
        identity = {
            "uuid": uuid_of(gpu),
            "name": "NVIDIA H200",
            "index": str(gpu),
            "pci.bus_id": f"00000000:{gpu + 1:02X}:00.0",
        }
        return ", ".join([*(identity.get(name, "[N/A]") for name in IDENTITY_FIELDS), "80 %", "40 %", "90000 MiB"])

    rows = [row(gpu) for gpu in range(GPUS)]
    apps = [
        f"{uuid_of(gpu)}, {10000 + gpu * 1000 + number}, python3 worker_{number}.py, {100 + number * 10} MiB"
        for gpu in range(GPUS)
        for number in range(processes)
    ]
    path.write_text(
        f"{FENCE}\n# capabilities :: version\n# $ nvidia-smi --version\n{FENCE}\nCUDA Version : 13.1\n\n"
        f"{FENCE}\n# load :: query-gpu (csv, bench)\n# $ nvidia-smi --query-gpu={','.join(fields)} --format=csv\n"
        f"{FENCE}\n" + "\n".join([header, *rows]) + "\n\n"
        f"{FENCE}\n# load :: query-compute-apps (per-process)\n"
        "# $ nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv\n"
        f"{FENCE}\ngpu_uuid, pid, process_name, used_gpu_memory [MiB]\n" + "\n".join(apps) + "\n",
        encoding="utf-8",
    )


def render_cost(backend: Any, readings: Any, iterations: int) -> tuple[float, int, int]:
    """Median ms of capping and rendering one collection, and the scrape's series: all, and per-process usage."""
    from nvidia_gpu_exporter.exposition.metrics import Exposition
    from nvidia_gpu_exporter.model.processusage import DEFAULT_MAX_PROCESSES, cap_usage
    from nvidia_gpu_exporter.model.snapshot import Attempt, Snapshot

    exposition = Exposition(backend.fields, backend.status_family)
    timings = []
    text = ""
    for _ in range(iterations):
        started = time.perf_counter()
        capped = readings
        overflowed = None
        if readings.process_usage is not None:
            usage, overflowed = cap_usage(readings.process_usage, DEFAULT_MAX_PROCESSES)
            capped = replace(readings, process_usage=usage)
        snapshot = Snapshot(Attempt(capped, 0, 0.1, 1.0), 0, 1.0, process_usage_overflowed=overflowed)
        text = exposition.render(snapshot)
        timings.append(time.perf_counter() - started)
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    usage_series = sum(1 for line in samples if line.startswith(USAGE_PREFIXES))
    return median_ms(timings), len(samples), usage_series


async def time_async(function: Callable[[], Awaitable[Any]], iterations: int) -> tuple[list[float], Any]:
    timings, result = [], None
    for _ in range(iterations):
        started = time.perf_counter()
        result = await function()
        timings.append(time.perf_counter() - started)
    return timings, result


async def exec_case(capture: Path, usage: bool, iterations: int) -> tuple[float, Any, Any]:
    from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
    from nvidia_gpu_exporter.backends.exec.runner import SubprocessRunner
    from nvidia_gpu_exporter.backends.fields import FieldRequest

    fake_smi = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(capture), "--state", "load"]
    request = FieldRequest("utilization.gpu,utilization.memory,memory.used")
    backend = await SmiBackend.start(
        SubprocessRunner(fake_smi), request, timeout_seconds=60, compute_apps=False, process_usage=usage
    )
    timings, readings = await time_async(backend.collect, iterations)
    return median_ms(timings), backend, readings


async def demo_case(capture: Path, usage: bool, iterations: int) -> tuple[float, Any, Any]:
    from nvidia_gpu_exporter.backends.demo.backend import DemoBackend
    from nvidia_gpu_exporter.backends.fields import FieldRequest

    config = capture.with_suffix(".yaml")
    config.write_text(f"capture: {capture}\nstate: load\n", encoding="utf-8")
    request = FieldRequest("utilization.gpu,utilization.memory,memory.used")
    backend = await DemoBackend.start(request, config_path=str(config), process_usage=usage)
    await backend.collect()
    timings, readings = await time_async(backend.collect, iterations)
    return median_ms(timings), backend, readings


def nvml_case(library: ctypes.CDLL, processes: int, usage: bool, iterations: int) -> tuple[float, Any, Any]:
    """The fake's GPUs each with ``processes`` processes and a fresh utilization sample for each before every
    collection (outside the timing), so every collection reads new samples as on a busy node."""
    from nvidia_gpu_exporter.backends.fields import FieldRequest
    from nvidia_gpu_exporter.backends.nvml import open_backend

    library.fakeNvmlCommand.argtypes = [ctypes.c_char_p]
    library.fakeNvmlCommand(b"reset h200")
    library.fakeNvmlCommand(f"replicate {GPUS}".encode())
    for gpu in range(GPUS):
        library.fakeNvmlCommand(f"noprocs {gpu}".encode())
        for number in range(processes):
            library.fakeNvmlCommand(f"proc {gpu} {10000 + gpu * 1000 + number} {(100 + number) << 20}".encode())
    backend = open_backend(
        FieldRequest("utilization.gpu,utilization.memory,memory.used"), watch_xids=False, process_usage=usage
    )
    timings = []
    readings = None
    for step in range(iterations + 1):
        for gpu in range(GPUS):
            library.fakeNvmlCommand(f"nosamples {gpu}".encode())
            for number in range(processes):
                pid = 10000 + gpu * 1000 + number
                library.fakeNvmlCommand(f"psample {gpu} {pid} {(step + 1) * 1000} {number % 7} 1 0 0".encode())
        started = time.perf_counter()
        readings = backend.collect_blocking()
        if step:  # the first is a warm-up
            timings.append(time.perf_counter() - started)
    backend.session.close(5)
    return median_ms(timings), backend, readings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--exec-iterations", type=int, default=8)
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    import pynvml

    rows: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        library_path = compile_fake_nvml(Path(directory), "MAX_PROCS=64", "MAX_NAMES=1024")
        os.environ.update(nvml_env(library_path, GPUS))
        library = ctypes.CDLL(str(library_path))
        pynvml.nvmlLib = library
        for processes in PROCESS_COUNTS:
            capture = Path(directory) / f"bench-{processes}.txt"
            write_capture(capture, processes)
            for usage in (False, True):
                cases = (
                    ("exec", asyncio.run(exec_case(capture, usage, args.exec_iterations)), args.exec_iterations),
                    ("demo", asyncio.run(demo_case(capture, usage, args.iterations)), args.iterations),
                    ("nvml", nvml_case(library, processes, usage, args.iterations), args.iterations),
                )
                for name, (collect_ms, backend, readings), iterations in cases:
                    render_ms, series, usage_series = render_cost(backend, readings, args.iterations)
                    rows.append(
                        f"| {name} | {GPUS} x {processes} | {'on' if usage else 'off'} | {iterations} | "
                        f"{collect_ms:.2f} ms | {render_ms:.2f} ms | {series} | {usage_series} |"
                    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {platform.python_version()} on {platform.machine()}, load average {load:.1f} at the end")
    print(
        "| backend | GPUs x processes | --collect.process-usage | iterations | median collection | "
        "median cap + render | series in the scrape | of them per-process usage |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
