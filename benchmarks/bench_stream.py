"""Streaming exec (``--collect.stream-interval``) against per-scrape exec: the exporter's own CPU per collection
and the p50 scrape latency at 1, 8 and 64 GPUs (docs/collection-modes.md).

Each row starts the real exporter (``python -m nvidia_gpu_exporter`` on 127.0.0.1, port 0) on the project's fake
nvidia-smi (``tests/fixtures/captures/fixture-windows-1gpu.txt`` replicated with ``--gpus N``, ``--fluctuate``),
a collection per scrape (no ``--collect.interval``), and scrapes ``/metrics`` sequentially on one keep-alive
connection, one scrape every ``--pace`` seconds, for ``--scrapes`` scrapes after a warm-up. Streaming runs with
``--collect.stream-interval`` equal to the pace, so each scrape finds one new table, and the CPU it spends
reading tables between scrapes is in its figure. CPU is the exporter's own ``utime + stime`` from
``/proc/<pid>/stat`` (clock ticks of 10 ms; the fake nvidia-smi's CPU is its own and not counted); latency is
the client's wall time per scrape.

    python benchmarks/bench_stream.py [--scrapes 100] [--pace 0.2] [--gpus 1,8,64]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "captures" / "fixture-windows-1gpu.txt"
LISTENING = re.compile(r'msg="Listening on" address=(\S+)')
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def fake_smi(gpus: int) -> str:
    return f"{sys.executable} -m nvidia_gpu_exporter.fakesmi --capture {CAPTURE} --gpus {gpus} --fluctuate"


class Exporter:
    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nvidia_gpu_exporter", "--web.listen-address=127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        found = threading.Event()
        self.address = ""

        def pump() -> None:
            assert self.process.stderr is not None
            for raw in self.process.stderr:
                match = LISTENING.search(raw.decode("utf-8", "replace"))
                if match and not self.address:
                    self.address = match.group(1)
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        found.wait(60)
        if not self.address:
            self.stop()
            raise RuntimeError("the exporter did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def measure(args: list[str], scrapes: int, pace: float) -> tuple[float, float, int]:
    """(exporter CPU ms per collection, p50 scrape ms, failed scrapes) over ``scrapes`` paced scrapes."""
    exporter = Exporter(args)
    try:
        host, port = exporter.address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=30)

        def scrape() -> tuple[float, bool]:
            started = time.perf_counter()
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read()
            elapsed = time.perf_counter() - started
            ok = response.status == 200 and b"nvidia_smi_last_collect_success 1" in body
            return elapsed, ok

        for _ in range(10):  # warm-up: the stream's first table, imports, caches
            scrape()
            time.sleep(pace)
        pid = exporter.process.pid
        before = cpu_seconds(pid)
        latencies, failed = [], 0
        next_at = time.monotonic()
        for _ in range(scrapes):
            next_at += pace
            elapsed, ok = scrape()
            latencies.append(elapsed)
            failed += not ok
            time.sleep(max(0.0, next_at - time.monotonic()))
        cpu = cpu_seconds(pid) - before
        return cpu / scrapes * 1000, statistics.median(latencies) * 1000, failed
    finally:
        exporter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--pace", type=float, default=0.2, help="seconds between scrapes (and the stream interval)")
    parser.add_argument("--gpus", default="1,8,64")
    options = parser.parse_args()
    interval_ms = round(options.pace * 1000)
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f}; {options.scrapes} scrapes every {interval_ms} ms per row\n"
    )
    print("| GPUs | mode | CPU per collection | p50 scrape | failed scrapes |")
    print("|---:|---|---:|---:|---:|")
    for gpus in (int(count) for count in options.gpus.split(",")):
        command = ["--nvidia-smi-command", fake_smi(gpus)]
        for mode, extra in (
            ("per-scrape exec", []),
            ("streaming exec", [f"--collect.stream-interval={interval_ms}ms"]),
        ):
            cpu, p50, failed = measure([*command, *extra], options.scrapes, options.pace)
            print(f"| {gpus} | {mode} | {cpu:.2f} ms | {p50:.2f} ms | {failed} |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
