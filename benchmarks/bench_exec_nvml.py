"""CPU per collection and resident set of the exec backend under the DCGM profile, plain and with the NVML reads
beside nvidia-smi (``backends/nvml/supplement.py``), at 8 and 64 GPUs, in one run (BENCHMARKS.md).

Each variant and GPU count runs in a child process of its own, so neither's memory or loaded libraries count
against the other. nvidia-smi is answered in memory from a one-GPU capture replicated to N GPUs, each distinct
invocation's text computed once (the fake's engine, no process spawned: the spawn is nvidia-smi's cost, the same
in both variants, and not the exporter's CPU); the exporter parses that text every collection as it parses a real
one. The NVML reads go to the fake libnvidia-ml (``tests/fakenvml/fake_nvml.c``, H200s, given the capture's uuids
so the DCGM profile joins them), which does no work: a real driver adds its own latency per call, spent waiting
in the NVML thread, not on the CPU. One collection is ``collect()`` plus rendering the DCGM profile; CPU is the
process's user and system time (every thread, the NVML one included), median and p95 over ``--iterations`` after
``--warmup``; RSS is VmRSS at the end and the peak (ru_maxrss).

    python benchmarks/bench_exec_nvml.py [--gpus 8,64] [--iterations 100] [--warmup 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvidia_gpu_exporter.backends import Backend
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.capture.engine import Scenario, answer
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.model.snapshot import Attempt, Snapshot, column_of
from nvml_fake import compile_fake_nvml, nvml_env

# The H200 capture of the shared reference data where there is one (as bench_pipeline.py), else the repository's
# one-GPU fixture; the fake replicates it to N GPUs.
SHARED_H200 = (
    Path(__file__).resolve().parents[2] / "shared/conformance/captures/linux-x86_64__nvidia-h200__590.48.01.txt"
)
CAPTURE = (
    SHARED_H200
    if SHARED_H200.is_file()
    else Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "captures" / "fixture-windows-1gpu.txt"
)
VARIANTS = ("exec", "exec+nvml")


class MemorySmi:
    """An SmiRunner answering from the capture replicated to ``gpus`` GPUs, each distinct invocation once."""

    def __init__(self, gpus: int) -> None:
        self.scenario = Scenario(load_capture(CAPTURE), gpus=gpus)
        self.replies: dict[tuple[str, ...], RunResult] = {}

    @property
    def description(self) -> str:
        return "in-memory nvidia-smi"

    async def run(self, args: Sequence[str]) -> RunResult:
        key = tuple(args)
        if key not in self.replies:
            reply = answer(self.scenario, args)
            self.replies[key] = RunResult(reply.stdout, reply.stderr, reply.exit_code)
        return self.replies[key]


def vm_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def child(variant: str, gpus: int, iterations: int, warmup: int, control: Path) -> dict[str, object]:
    smi = await SmiBackend.start(MemorySmi(gpus), FieldRequest(), timeout_seconds=60.0, compute_apps=False)
    backend: Backend = smi
    nvml = variant == "exec+nvml"
    if nvml:
        from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, open_supplement

        column = column_of(smi.fields, "uuid")
        assert column is not None
        uuids = [row[column] for row in (await smi.collect()).gpus.rows]
        control.write_text("".join(f"set {index} uuid {uuid}\n" for index, uuid in enumerate(uuids)))
        backend = NvmlSupplemented(smi, await asyncio.to_thread(open_supplement))
    exposition = DcgmExposition(backend.fields, "bench-host", energy=nvml, gpm=nvml, extras=nvml)
    cpu: list[float] = []
    series = 0
    for index in range(warmup + iterations):
        started = time.process_time()
        readings = await backend.collect()
        text = exposition.render(Snapshot(Attempt(readings, 0, 0.1, time.time()), 0, time.time()))
        spent = time.process_time() - started
        if index >= warmup:
            cpu.append(spent)
            series = sum(1 for line in text.splitlines() if not line.startswith("#"))
    await backend.aclose()
    cpu.sort()
    return {
        "variant": variant,
        "gpus": gpus,
        "cpu_median_ms": statistics.median(cpu) * 1000,
        "cpu_p95_ms": cpu[int(len(cpu) * 0.95) - 1] * 1000,
        "series": series,
        "rss_mib": vm_rss_kib() / 1024,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--gpus", default="8,64", help="GPU counts, comma-separated")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "GPUS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        control = Path(os.environ.get("FAKE_NVML_CONTROL", os.devnull))
        result = asyncio.run(child(args.child[0], int(args.child[1]), args.iterations, args.warmup, control))
        print(json.dumps(result))
        return
    counts = [int(count) for count in args.gpus.split(",")]
    print(f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, {CAPTURE.name}")
    print("| GPUs | backend | DCGM series | CPU per collection, median | p95 | RSS | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as temporary:
        library = compile_fake_nvml(Path(temporary), "MAX_TOP=256", "MAX_DEVICES=512")
        for gpus in counts:
            for variant in VARIANTS:
                control = Path(temporary) / f"control-{gpus}-{variant}"
                control.write_text("")
                env = {**os.environ, **nvml_env(library, gpus), "FAKE_NVML_CONTROL": str(control)}
                command = [sys.executable, __file__, "--child", variant, str(gpus)]
                command += ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
                output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
                row = json.loads(output.strip().splitlines()[-1])
                print(
                    f"| {gpus} | {variant} | {row['series']} | {row['cpu_median_ms']:.2f} ms | "
                    f"{row['cpu_p95_ms']:.2f} ms | {row['rss_mib']:.1f} MiB | {row['peak_rss_mib']:.1f} MiB |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
