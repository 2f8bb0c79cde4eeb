"""NVML collection cost per GPU (8 GPUs, the full 179-field catalog) against the fake libnvidia-ml, and the
exec backend reading the same 8 GPUs from the fake nvidia-smi.

The fake library (``tests/fakenvml/fake_nvml.c``) is compiled with the system C compiler and loaded by the
real nvidia-ml-py bindings, so the NVML figures are the exporter's own cost (bindings, ctypes, cell
rendering) plus a fake that does no work: a real driver adds its own latency per call. The exec figures
include spawning the fake nvidia-smi, a Python process, for every query, which is what dominates them.
Only collection is timed (no rendering: ``bench_pipeline.py`` covers that).

    python benchmarks/bench_nvml.py [--iterations 200] [--exec-iterations 20]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_fake import compile_fake_nvml, nvml_env

GPUS = 8
FENCE = "#" * 80


def stats(timings: list[float]) -> tuple[float, float]:
    p99 = statistics.quantiles(timings, n=100)[98] if len(timings) >= 2 else timings[0]
    return statistics.median(timings), p99


def time_sync(function: Callable[[], object], iterations: int) -> list[float]:
    timings = []
    for _ in range(iterations):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return timings


async def time_async(function: Callable[[], Awaitable[object]], iterations: int) -> list[float]:
    timings = []
    for _ in range(iterations):
        started = time.perf_counter()
        await function()
        timings.append(time.perf_counter() - started)
    return timings


def write_capture(path: Path, fields: list[tuple[str, str]], rows: tuple[tuple[str, ...], ...], cuda: str) -> None:
    """The nvml backend's cells for the 8 GPUs laid out as the capture the fake nvidia-smi replays."""
    header = ", ".join(rfield for _, rfield in fields)
    body = "\n".join([header, *(", ".join(row) for row in rows)])
    query = ",".join(qfield for qfield, _ in fields)
    path.write_text(
        f"{FENCE}\n# nvidia_gpu_exporter GPU capture\n# written by bench_nvml.py\n{FENCE}\nmasked: no\n\n"
        f"{FENCE}\n# capabilities :: version\n# $ nvidia-smi --version\n{FENCE}\nCUDA Version : {cuda}\n\n"
        f"{FENCE}\n# idle :: query-gpu (csv, what the exporter parses)\n"
        f"# $ nvidia-smi --query-gpu={query} --format=csv\n{FENCE}\n{body}\n",
        encoding="utf-8",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--exec-iterations", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    import pynvml

    from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
    from nvidia_gpu_exporter.backends.exec.command import quote_word
    from nvidia_gpu_exporter.backends.exec.runner import SubprocessRunner
    from nvidia_gpu_exporter.backends.fields import FieldRequest
    from nvidia_gpu_exporter.backends.nvml import open_backend

    with tempfile.TemporaryDirectory() as directory:
        library = compile_fake_nvml(Path(directory))
        os.environ.update(nvml_env(library, GPUS))  # read by the fake when it is loaded
        pynvml.nvmlLib = ctypes.CDLL(str(library))
        backend = open_backend(FieldRequest(), watch_xids=False)
        readings = backend.collect_blocking()
        assert len(readings.gpus.rows) == GPUS
        fields = [(field.qfield, field.rfield) for field in backend.fields]
        time_sync(backend.collect_blocking, 20)  # warm-up: bindings' symbol cache, allocator
        in_thread = time_sync(backend.collect_blocking, args.iterations)
        via_worker = asyncio.run(time_async(backend.collect, args.iterations))
        # --metrics.profile=dcgm or both: the same cycle plus a GPM sample of every whole GPU.
        with_gpm = open_backend(FieldRequest(), watch_xids=False, gpm_whole_gpus=True)
        time_sync(with_gpm.collect_blocking, 20)
        gpm_in_thread = time_sync(with_gpm.collect_blocking, args.iterations)
        with_gpm.session.close(5)

        capture = Path(directory) / "bench.txt"
        write_capture(capture, fields, readings.gpus.rows, readings.cuda_version)
        fake_smi = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(capture), "--state", "idle"]
        runner = SubprocessRunner(fake_smi)
        explicit = FieldRequest(",".join(qfield for qfield, _ in fields))

        async def exec_timings() -> list[float]:
            smi = await SmiBackend.start(runner, explicit, timeout_seconds=30, compute_apps=False)
            assert len((await smi.collect()).gpus.rows) == GPUS
            return await time_async(smi.collect, args.exec_iterations)

        executed = asyncio.run(exec_timings())
        backend.session.close(5)

    runtime = f"python {platform.python_version()} on {platform.machine()}"
    print(f"{GPUS} simulated H200 GPUs, {len(fields)} query fields; {runtime}")
    print(f"fake nvidia-smi command: {' '.join(quote_word(word) for word in fake_smi[:3])} ...")
    print("| backend | timed | iterations | median per collection | p99 | median per GPU |")
    print("|---|---|---:|---:|---:|---:|")
    for name, what, timings in (
        ("nvml (fake libnvidia-ml)", "cycle in the calling thread", in_thread),
        ("nvml (fake libnvidia-ml)", "collect(): worker thread + cycle", via_worker),
        ("nvml (fake libnvidia-ml), DCGM profile", "cycle + GPM sample per GPU, calling thread", gpm_in_thread),
        ("exec (fake nvidia-smi)", "collect(): spawn + parse", executed),
    ):
        median, p99 = stats(timings)
        print(
            f"| {name} | {what} | {len(timings)} | {median * 1000:.2f} ms | {p99 * 1000:.2f} ms | "
            f"{median / GPUS * 1000:.3f} ms |"
        )


if __name__ == "__main__":
    main()
