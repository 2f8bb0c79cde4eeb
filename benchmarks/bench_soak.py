"""The soak of issue 16: RSS of the exporter scraped steadily for a long time, in both collection modes.

Two real exporters (``python -m nvidia_gpu_exporter`` on 127.0.0.1, port 0, exec backend on the fake
nvidia-smi replaying ``tests/fixtures/captures/fixture-windows-1gpu.txt`` as 8 GPUs) run side by side for
``--minutes``: one collecting per scrape (a fake nvidia-smi process per scrape), one serving a cache that
``--collect.interval`` refreshes. Each is scraped at a steady rate over one keep-alive connection (a new
connection every ``--reconnect`` scrapes, so connection setup and teardown are soaked too). VmRSS of both
is read from ``/proc/<pid>/status`` every ``--sample`` seconds and printed as it is read; at the end the
curve, and the growth: the mean of the first 10 minutes against the mean of the last 10.

Every loop is bounded by the deadline and by a scrape count; the script ends by itself.

    python benchmarks/bench_soak.py --minutes 55 [--per-scrape-rate 1] [--cached-rate 4] [--sample 30]
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_footprint import Exporter, cpu_seconds, fake_smi, first_scrape, rss_mib, start

WINDOW_SECONDS = 600.0  # "first 10 minutes" and "last 10 minutes"


@dataclass
class Mode:
    name: str
    args: list[str]
    rate: float
    exporter: Exporter | None = None
    scrapes: int = 0
    failures: int = 0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, RSS MiB)
    cpu_start: float = 0.0
    cpu_end: float = 0.0


def scrape_steadily(mode: Mode, deadline: float, reconnect: int, stop: threading.Event) -> None:
    """Scrape at `mode.rate` per second until `deadline` (at most rate x duration + 1 scrapes)."""
    assert mode.exporter is not None
    exporter = mode.exporter
    period = 1.0 / mode.rate
    limit = int((deadline - time.monotonic()) * mode.rate) + 1
    connection: http.client.HTTPConnection | None = None
    next_at = time.monotonic()
    for index in range(limit):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        if connection is None or index % reconnect == 0:
            if connection is not None:
                connection.close()
            connection = exporter.client.connect(exporter.address)
        try:
            status, _ = exporter.get(connection)
            if status != 200:
                mode.failures += 1
        except (OSError, http.client.HTTPException):
            mode.failures += 1
            connection.close()
            connection = None
        mode.scrapes += 1
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(min(delay, period))
        else:
            next_at = time.monotonic()  # fell behind (a loaded machine): do not burst to catch up
    if connection is not None:
        connection.close()


def window_mean(samples: list[tuple[float, float]], low: float, high: float) -> float:
    values = [rss for at, rss in samples if low <= at <= high]
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--per-scrape-rate", type=float, default=1.0, help="scrapes/s of the per-scrape exporter")
    parser.add_argument("--cached-rate", type=float, default=4.0, help="scrapes/s of the cached exporter")
    parser.add_argument("--interval", default="5s", help="--collect.interval of the cached exporter")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--reconnect", type=int, default=100, help="scrapes per keep-alive connection")
    args = parser.parse_args()

    smi = ["--nvidia-smi-command", fake_smi(args.gpus)]
    modes = [
        Mode("per-scrape", smi, args.per_scrape_rate),
        Mode(f"cached ({args.interval})", [*smi, f"--collect.interval={args.interval}"], args.cached_rate),
    ]
    load = os.getloadavg()
    print(
        f"soak: {args.minutes:g} min, exec on the fake nvidia-smi ({args.gpus} GPUs), RSS every {args.sample:g} s; "
        f"{os.cpu_count()} CPUs, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    stop = threading.Event()
    threads = []
    try:
        for mode in modes:
            mode.exporter = start(mode.args)
            connection = mode.exporter.client.connect(mode.exporter.address)
            first_scrape(mode.exporter, connection)
            connection.close()
            print(f"{mode.name}: pid {mode.exporter.process.pid}, {mode.rate:g} scrapes/s", flush=True)
        started = time.monotonic()
        deadline = started + args.minutes * 60
        for mode in modes:
            assert mode.exporter is not None
            mode.cpu_start = cpu_seconds(mode.exporter.process.pid)
            thread = threading.Thread(target=scrape_steadily, args=(mode, deadline, args.reconnect, stop), daemon=True)
            thread.start()
            threads.append(thread)
        loads: list[float] = []
        for _ in range(int(args.minutes * 60 / args.sample) + 1):
            at = time.monotonic() - started
            line = [f"{at / 60:6.1f} min"]
            for mode in modes:
                assert mode.exporter is not None
                if mode.exporter.process.poll() is not None:
                    sys.exit(f"{mode.name} exited: " + "\n".join(mode.exporter.log[-20:]))
                rss = rss_mib(mode.exporter.process.pid)
                mode.samples.append((at, rss))
                line.append(f"{mode.name} {rss:6.2f} MiB ({mode.scrapes} scrapes, {mode.failures} failed)")
            loads.append(os.getloadavg()[0])
            print("  ".join(line) + f"  load {loads[-1]:.2f}", flush=True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            stop.wait(min(args.sample, remaining))
        stop.set()
        for thread in threads:
            thread.join(30)
        for mode in modes:
            assert mode.exporter is not None
            mode.cpu_end = cpu_seconds(mode.exporter.process.pid)
    finally:
        stop.set()
        for mode in modes:
            if mode.exporter is not None:
                mode.exporter.stop()
    took = time.monotonic() - started
    print(f"\n### Soak: {took / 60:.1f} min, load average 1-min mean {sum(loads) / len(loads):.2f}\n")
    print(
        "| mode | scrapes | failed | exporter CPU | RSS start | min | max | end | first 10 min | last 10 min | growth |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        values = [rss for _, rss in mode.samples]
        first = window_mean(mode.samples, 0, WINDOW_SECONDS)
        last = window_mean(mode.samples, took - WINDOW_SECONDS, took)
        cpu = (mode.cpu_end - mode.cpu_start) / max(mode.scrapes, 1) * 1000
        print(
            f"| {mode.name} | {mode.scrapes:,} | {mode.failures} | {cpu:.2f} ms/scrape | {values[0]:.2f} | "
            f"{min(values):.2f} | {max(values):.2f} | {values[-1]:.2f} | {first:.2f} | {last:.2f} | "
            f"{last - first:+.2f} MiB |"
        )
    for mode in modes:
        print(f"\n{mode.name} curve (MiB, every {args.sample:g} s):")
        print(" ".join(f"{rss:.1f}" for _, rss in mode.samples))


if __name__ == "__main__":
    main()
