"""What --collect.process-usage costs: collection time, render time and series at 8 GPUs x 16 and x 64 processes,
on the exec backend (the fake nvidia-smi: a GPU query, plus a pmon run with the option), the demo backend (the same
pipeline answered in-process from a capture) and the nvml backend (the fake libnvidia-ml, compiled here), each with
and without the option, at the default cap (16 processes per GPU with series of their own); and with the option
and pods on (--kubernetes.process-pods with --kubernetes.pod-resources): every process in a pod of four processes
time-sliced on its GPU, each pod holding a replica, so each collection also looks up each process's pod (a fake
/proc: its start time, and its cgroup when the start time is new), computes the per-pod shares and their energy,
and the GPU-seconds allocated and used. ``--breakdown`` times those steps apart instead (demo backend, pods on).

The exec figures are dominated by starting the Python fake nvidia-smi, once per run; the nvml figures by the
bindings' ctypes calls into a fake that does no work (a real driver adds its own latency per call). Render time is
the cap plus the whole scrape's text for one collection.

    python benchmarks/bench_process_usage.py [--iterations 30] [--exec-iterations 8] [--breakdown]
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
USAGE_PREFIXES = ("nvidia_smi_process_", "nvidia_gpu_exporter_process_usage_", "nvidia_smi_pod_")
PROCESSES_PER_POD = 4
MODES = ("off", "on", "on + pods")


def pod_uid(pid: str) -> str:
    return f"{int(pid) // PROCESSES_PER_POD:08x}-0000-4000-8000-000000000000"


def write_proc(root: Path, pids: list[str]) -> Path:
    """A fake /proc: the node's init, and each process in its pod's cgroup (a containerd cgroup v2 layout), with
    its start time in its stat file (proc(5)'s field 22) as a real /proc has it."""
    proc = root / "proc"
    for pid, text in {
        "1": "0::/init.scope\n",
        **{p: f"0::/kubepods/besteffort/pod{pod_uid(p)}/{'c' * 64}\n" for p in pids},
    }.items():
        (proc / pid).mkdir(parents=True, exist_ok=True)
        (proc / pid / "cgroup").write_text(text, encoding="utf-8")
        fields = " ".join(["S", "1", pid, pid, "0", "-1", "4194560", *["0"] * 12, "12345", *["0"] * 30])
        (proc / pid / "stat").write_text(f"{pid} (python3) {fields}\n", encoding="utf-8")
    return proc


class Pods:
    """What the collector does per collection with pods on, timed by :func:`render_cost` with the rendering."""

    def __init__(self, proc: Path, readings: Any) -> None:
        from nvidia_gpu_exporter.kubernetes.cgroups import CgroupCache
        from nvidia_gpu_exporter.model.gpuseconds import GpuSecondsLedger
        from nvidia_gpu_exporter.model.kubernetes import GpuPod
        from nvidia_gpu_exporter.model.podusage import PodEnergyLedger
        from nvidia_gpu_exporter.model.uuids import normalize_uuid

        self.proc = proc
        self.cgroups = CgroupCache(proc)  # as the Attributor keeps it across collections
        self.energy = PodEnergyLedger()
        self.seconds = GpuSecondsLedger()
        rows = readings.process_usage.rows
        pods = sorted({(normalize_uuid(row.gpu_uuid), pod_uid(row.pid)) for row in rows})
        self.gpu_pods = tuple(
            GpuPod(uuid, "", "bench", f"pod-{uid[:8]}", "main", "nvidia.com/gpu", f"GPU-{uuid}::{n}", str(n))
            for n, (uuid, uid) in enumerate(pods)
        )
        self.joules = 0.0

    def lookups(self, readings: Any) -> dict[str, str]:
        """Each process's pod uid, as the Attributor looks them up in one collection."""
        from nvidia_gpu_exporter.kubernetes.cgroups import host_pid_problem

        self.cgroups.next_collection()
        host_pid_problem(self.proc)
        pod_of = {}
        for row in readings.process_usage.rows:
            found = self.cgroups.lookup(row.pid).pod
            if found is not None:
                pod_of[row.pid] = found.pod_uid
        return pod_of

    def collect(self, readings: Any, limit: int) -> tuple[Any, Any]:
        return self.account(readings, self.lookups(readings), limit)

    def account(self, readings: Any, pod_of: dict[str, str], limit: int) -> tuple[Any, Any]:
        """The shares, their energy and the GPU-seconds, from the processes' pods."""
        from nvidia_gpu_exporter.model.podusage import pod_shares
        from nvidia_gpu_exporter.model.uuids import normalize_uuid

        usage = readings.process_usage
        uuids = sorted({normalize_uuid(row.gpu_uuid) for row in usage.rows})
        self.joules += 100.0
        shares = pod_shares(usage, pod_of, {}, dict.fromkeys(uuids, 500.0), limit)
        accounted = self.energy.account(shares, dict.fromkeys(uuids, self.joules))
        now = time.time()
        return replace(accounted, pods=self.seconds.use(accounted.pods, now)), self.seconds.allocate(self.gpu_pods, now)


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


def render_cost(backend: Any, readings: Any, iterations: int, pods: Pods | None = None) -> tuple[float, int, int]:
    """Median ms of capping and rendering one collection (with ``pods``, its per-pod work too), and the scrape's
    series: all, and per-process usage (per-pod included)."""
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
        pod_usage, allocations = pods.collect(readings, DEFAULT_MAX_PROCESSES) if pods is not None else (None, None)
        snapshot = Snapshot(
            Attempt(capped, 0, 0.1, 1.0),
            0,
            1.0,
            process_usage_overflowed=overflowed,
            pod_usage=pod_usage,
            pod_allocations=allocations,
        )
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


def timed(function: Callable[[], Any], iterations: int) -> float:
    timings = []
    for _ in range(iterations):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return median_ms(timings)


def breakdown_row(directory: Path, processes: int, iterations: int) -> str:
    """One size's row of ``--breakdown``."""
    from nvidia_gpu_exporter.exposition.metrics import Exposition
    from nvidia_gpu_exporter.kubernetes.cgroups import CgroupCache
    from nvidia_gpu_exporter.model.processusage import DEFAULT_MAX_PROCESSES, cap_usage
    from nvidia_gpu_exporter.model.snapshot import Attempt, Snapshot

    capture = directory / f"bench-{processes}.txt"
    write_capture(capture, processes)
    pids = [str(10000 + gpu * 1000 + number) for gpu in range(GPUS) for number in range(processes)]
    proc = write_proc(directory / f"proc-{processes}", pids)
    _, backend, readings = asyncio.run(demo_case(capture, True, 2))
    pods = Pods(proc, readings)

    def first() -> None:
        pods.cgroups = CgroupCache(proc)
        pods.lookups(readings)

    first_ms = timed(first, iterations)
    pod_of = pods.lookups(readings)
    later_ms = timed(lambda: pods.lookups(readings), iterations)
    account_ms = timed(lambda: pods.account(readings, pod_of, DEFAULT_MAX_PROCESSES), iterations)
    pod_usage, allocations = pods.account(readings, pod_of, DEFAULT_MAX_PROCESSES)
    usage, overflowed = cap_usage(readings.process_usage, DEFAULT_MAX_PROCESSES)
    plain = Snapshot(
        Attempt(replace(readings, process_usage=usage), 0, 0.1, 1.0), 0, 1.0, process_usage_overflowed=overflowed
    )
    with_pods = replace(plain, pod_usage=pod_usage, pod_allocations=allocations)
    exposition = Exposition(backend.fields, backend.status_family)
    plain_ms = timed(lambda: exposition.render(plain), iterations)
    pods_ms = timed(lambda: exposition.render(with_pods), iterations)
    return (
        f"| {GPUS} x {processes} | {first_ms:.2f} ms | {later_ms:.2f} ms | {account_ms:.2f} ms | "
        f"{plain_ms:.2f} ms | {pods_ms:.2f} ms |"
    )


def breakdown(iterations: int) -> None:
    """The per-pod work of one collection step by step (demo backend, pods on): the pod lookups of a first
    collection (every cgroup read) and of a later one (each process known), the shares with their energy and
    GPU-seconds, and the scrape's text with and without the per-pod families."""
    print("| GPUs x processes | pod lookups, first collection | pod lookups, later | shares, energy, GPU-seconds | "
          "text without pods | text with pods |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as directory:
        for processes in PROCESS_COUNTS:
            print(breakdown_row(Path(directory), processes, iterations))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--exec-iterations", type=int, default=8)
    parser.add_argument("--breakdown", action="store_true", help="time the per-pod steps apart (demo backend)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.breakdown:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"python {platform.python_version()} on {platform.machine()}, load average {load:.1f} at the start")
        breakdown(args.iterations)
        return

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
            pids = [str(10000 + gpu * 1000 + number) for gpu in range(GPUS) for number in range(processes)]
            proc = write_proc(Path(directory) / f"proc-{processes}", pids)
            for mode in MODES:
                usage = mode != "off"
                cases = (
                    ("exec", asyncio.run(exec_case(capture, usage, args.exec_iterations)), args.exec_iterations),
                    ("demo", asyncio.run(demo_case(capture, usage, args.iterations)), args.iterations),
                    ("nvml", nvml_case(library, processes, usage, args.iterations), args.iterations),
                )
                for name, (collect_ms, backend, readings), iterations in cases:
                    pods = Pods(proc, readings) if mode == "on + pods" else None
                    render_ms, series, usage_series = render_cost(backend, readings, args.iterations, pods)
                    rows.append(
                        f"| {name} | {GPUS} x {processes} | {mode} | {iterations} | "
                        f"{collect_ms:.2f} ms | {render_ms:.2f} ms | {series} | {usage_series} |"
                    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {platform.python_version()} on {platform.machine()}, load average {load:.1f} at the end")
    print(
        "| backend | GPUs x processes | --collect.process-usage | iterations | median collection | "
        "median cap + pods + render | series in the scrape | of them per-process and per-pod usage |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
