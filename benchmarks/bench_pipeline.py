"""Parse + transform + render cost per collection, for an H200-class table replicated to 1, 8 and 64 GPUs.

The table comes from the shared H200 capture when ``../shared/conformance`` is beside the checkout (the
real 240-field layout), else from the demo fleet (100 fields). Each iteration parses a *different*
``nvidia-smi`` output (the fake's ``--fluctuate`` moves power, temperature, clocks, utilization and
memory, as between real scrapes) through one long-lived ``Exposition``, i.e. the exporter's steady state,
for each ``--metrics.profile`` (``nvidia_smi``, ``dcgm``, ``both``). ``--rss`` also starts the real exporter
once per profile on the same data and reports its resident memory after 200 scrapes.

    python benchmarks/bench_pipeline.py [--iterations 300] [--rss]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import time
from pathlib import Path

from nvidia_gpu_exporter.backends.demo.model import DemoFleet
from nvidia_gpu_exporter.backends.demo.responders import fleet_capture
from nvidia_gpu_exporter.backends.exec.output import parse_gpu_csv
from nvidia_gpu_exporter.capture.engine import Scenario, answer
from nvidia_gpu_exporter.capture.format import GPU_CSV_LABEL_PREFIX, Capture, load_capture
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
)

SHARED_H200 = (
    Path(__file__).resolve().parents[2] / "shared/conformance/captures/linux-x86_64__nvidia-h200__590.48.01.txt"
)
VARIANTS = 20
PROFILES = ("nvidia_smi", "dcgm", "both")


def source_capture() -> tuple[Capture, str, str]:
    if SHARED_H200.is_file():
        return load_capture(SHARED_H200), "load", "shared H200 capture (590.48.01, load)"
    return fleet_capture(DemoFleet(1, seed=1)), "demo", "demo fleet (no ../shared)"


def outputs_for(capture: Capture, state: str, gpus: int) -> tuple[list[str], list[QueryField]]:
    """``VARIANTS`` distinct CSV outputs of the full recorded field list for ``gpus`` replicated GPUs."""
    section = capture.find(state, GPU_CSV_LABEL_PREFIX)
    assert section is not None
    command = section.command.split("--query-gpu=", 1)[1].split(" ", 1)[0]
    fields = command.split(",")
    args = ["--query-gpu=" + ",".join(fields), "--format=csv"]
    outputs = []
    for seed in range(VARIANTS):
        reply = answer(Scenario(capture, state=state, seed=seed, gpus=gpus, fluctuate=True), args)
        assert reply.exit_code == 0, reply
        outputs.append(reply.stdout)
    header = parse_gpu_csv(outputs[0], len(fields)).header
    return outputs, [QueryField(q, r) for q, r in zip(fields, header, strict=True)]


def measure(gpus: int, capture: Capture, state: str, iterations: int, profile: str) -> tuple[float, float, int]:
    outputs, fields = outputs_for(capture, state, gpus)
    exposition = Exposition(
        fields,
        StatusFamily.COMMAND_EXIT_CODE,
        nvidia_smi=profile != "dcgm",
        dcgm=DcgmExposition(fields, "bench-host") if profile != "nvidia_smi" else None,
    )
    timings = []
    size = 0
    for iteration in range(iterations):
        stdout = outputs[iteration % len(outputs)]
        started = time.perf_counter()
        csv = parse_gpu_csv(stdout, len(fields))
        readings = Readings(GpuTable(csv.rows), None, "13.1")
        snapshot = Snapshot(Attempt(readings, 0, 0.1, time.time()), 0, time.time(), iteration + 1)
        text = exposition.render(snapshot)
        timings.append(time.perf_counter() - started)
        size = len(text)
    return statistics.median(timings), statistics.quantiles(timings, n=100)[98], size


def resident_mib(profile: str) -> float:
    """The real exporter's RSS after 200 scrapes of the shared H200 capture (or the demo) in this profile."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from harness import fake_smi_command, http_get, start_exporter

    data = ["--nvidia-smi-command", fake_smi_command(SHARED_H200, "--state", "load")] if SHARED_H200.is_file() else []
    handle = start_exporter(
        [*(data or ["--collect.backend=demo"]), "--collect.interval=30s", f"--metrics.profile={profile}"]
    )
    try:
        for _ in range(200):
            assert http_get(handle.url + "/metrics").status == 200
        for line in Path(f"/proc/{handle.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")
    finally:
        handle.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--rss", action="store_true", help="also measure the real exporter's RSS per profile")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    capture, state, source = source_capture()
    print(f"source: {source}; python {platform.python_version()} on {platform.machine()}")
    print("| profile | GPUs | median | p99 | exposition bytes |")
    print("|---|---:|---:|---:|---:|")
    for profile in PROFILES:
        for gpus in (1, 8, 64):
            median, p99, size = measure(gpus, capture, state, args.iterations, profile)
            print(f"| {profile} | {gpus} | {median * 1000:.3f} ms | {p99 * 1000:.3f} ms | {size} |")
    if args.rss:
        print("| profile | RSS after 200 scrapes |")
        print("|---|---:|")
        for profile in PROFILES:
            print(f"| {profile} | {resident_mib(profile):.1f} MiB |")


if __name__ == "__main__":
    main()
