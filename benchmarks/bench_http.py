"""Cached-scrape HTTP throughput and latency (wrk), and memory after 20k scrapes, of the real exporter.

The exporter runs as a child process in cached mode (``--collect.interval``), so every scrape is served
from the rendered snapshot. Its data: the shared H200 capture through the fake nvidia-smi when
``../shared/conformance`` is present, else the demo backend. Needs ``wrk`` (Debian: ``apt-get install
wrk``) for the throughput table; the memory figures need only Python.

    python benchmarks/bench_http.py [--duration 10] [--scrapes 20000]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import CONFORMANCE, Exporter, fake_smi_command, start_exporter

H200 = CONFORMANCE / "captures" / "linux-x86_64__nvidia-h200__590.48.01.txt"


def exporter_args() -> tuple[list[str], str]:
    common = ["--collect.interval=30s", "--collect.compute-apps", "--web.max-requests=0"]
    if H200.is_file():
        command = fake_smi_command(H200, "--state", "load")
        return [*common, "--nvidia-smi-command", command], "exec + fake nvidia-smi, shared H200 capture (load)"
    return [*common, "--collect.backend=demo"], "demo backend (2 GPUs)"


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wrk(url: str, connections: int, duration: int) -> tuple[float, str, str]:
    out = subprocess.run(
        ["wrk", "-t", str(min(connections, 2)), "-c", str(connections), "-d", f"{duration}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    distribution = out.split("Latency Distribution", 1)[1]
    p50 = re.search(r"50%\s+(\S+)", distribution).group(1)  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+(\S+)", distribution).group(1)  # type: ignore[union-attr]
    if re.search(r"Non-2xx or 3xx responses", out):
        raise RuntimeError(f"wrk saw errors:\n{out}")
    return rate, p50, p99


def scrape_many(exporter: Exporter, count: int) -> float:
    host, port = exporter.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    started = time.perf_counter()
    size = 0
    for _ in range(count):
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        size = len(response.read())
        assert response.status == 200
    connection.close()
    assert size > 0
    return time.perf_counter() - started


def wait_for_data(exporter: Exporter) -> int:
    for _ in range(200):
        body = exporter.scrape()
        if "nvidia_smi_gpu_info{" in body:
            return len(body)
        time.sleep(0.05)
    raise RuntimeError("no GPU data after 10 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20_000)
    args = parser.parse_args()
    argv, source = exporter_args()
    exporter = start_exporter(argv)
    try:
        size = wait_for_data(exporter)
        pid = exporter.process.pid
        print(f"source: {source}; body {size} bytes; python {platform.python_version()}; {os.cpu_count()} CPUs")
        scrape_many(exporter, 500)
        rest, fds_rest = status_kib(pid, "VmRSS"), open_fds(pid)
        elapsed = scrape_many(exporter, args.scrapes)
        after, fds_after = status_kib(pid, "VmRSS"), open_fds(pid)
        print(
            f"{args.scrapes} sequential keep-alive scrapes in {elapsed:.1f} s: RSS {rest / 1024:.1f} -> "
            f"{after / 1024:.1f} MiB (growth {(after - rest) / 1024:+.2f} MiB), open fds {fds_rest} -> {fds_after}"
        )
        if not shutil.which("wrk"):
            print("wrk not found: skipping the throughput table")
            return
        print("| clients | req/s | p50 | p99 |")
        print("|---:|---:|---:|---:|")
        for connections in (1, 8, 50):
            rate, p50, p99 = wrk(exporter.url + "/metrics", connections, args.duration)
            print(f"| {connections} | {rate:,.0f} | {p50} | {p99} |")
        print(f"RSS after the wrk runs: {status_kib(pid, 'VmRSS') / 1024:.1f} MiB")
    finally:
        exporter.stop()


if __name__ == "__main__":
    main()
