"""Fleet mode over a real sshd on loopback (docs/fleet.md): collections/s and exporter RSS for 1, 10 and 50
targets, and what a pooled connection saves against a new ``ssh`` per collection.

Every target is a name on one local sshd (tests/sshd_helpers.py) running the project's fake nvidia-smi with the
fixture capture, so the figures are the exporter's and the SSH transport's costs plus the fake's start-up,
not a real GPU's. Run as root with openssh-server installed:

    .venv/bin/python benchmarks/bench_fleet.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import FIXTURE_CAPTURES, Exporter, start_exporter
from nvidia_gpu_exporter.backends.exec.command import quote_word
from sshd_helpers import Sshd, running_sshd

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
SCRAPERS = 10


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) / 1024


def value(body: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    assert match is not None, body[:2000]
    return float(match.group(1))


def targets_file(sshd: Sshd, directory: Path, count: int) -> Path:
    document = {
        "defaults": {
            "user": sshd.user, "port": sshd.port, "identity_file": str(sshd.client_key),
            "known_hosts": str(sshd.known_hosts), "timeout": "60s", "max_concurrent": 8,
            "command": sshd.fake_smi("--capture", str(CAPTURE)),
        },
        "targets": {f"gpu-{index:02d}": {"host": "127.0.0.1"} for index in range(count)},
    }  # fmt: skip
    path = directory / f"targets-{count}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def probe_all(exporter: Exporter, names: list[str]) -> list[str]:
    with ThreadPoolExecutor(SCRAPERS) as pool:
        bodies = list(pool.map(lambda name: exporter.get(f"/probe?target={name}", timeout=300).text, names))
    failed = [name for name, body in zip(names, bodies, strict=True) if value(body, "probe_success") != 1]
    assert not failed, failed
    return bodies


def fleet_row(sshd: Sshd, directory: Path, count: int, rounds: int) -> tuple[int, float, float, float]:
    exporter = start_exporter(
        ["--fleet.targets-file", str(targets_file(sshd, directory, count)), "--collect.backend=demo"]
    )
    try:
        names = [f"gpu-{index:02d}" for index in range(count)]
        idle = rss_mib(exporter.process.pid)
        probe_all(exporter, names)  # the first probes: field discovery, the connection
        started = time.perf_counter()
        for _ in range(rounds):
            probe_all(exporter, names)
        elapsed = time.perf_counter() - started
        return count, count * rounds / elapsed, idle, rss_mib(exporter.process.pid)
    finally:
        exporter.stop()


def pooled_latency(sshd: Sshd, directory: Path, samples: int) -> float:
    """Median seconds of one steady-state collection over the pooled connection (probe_duration_seconds)."""
    exporter = start_exporter(["--fleet.targets-file", str(targets_file(sshd, directory, 1)), "--collect.backend=demo"])
    try:
        exporter.get("/probe?target=gpu-00", timeout=120)
        durations = [
            value(exporter.get("/probe?target=gpu-00", timeout=120).text, "nvidia_smi_last_collect_duration_seconds")
            for _ in range(samples)
        ]
        return statistics.median(durations)
    finally:
        exporter.stop()


def new_ssh_latency(sshd: Sshd, samples: int) -> float:
    """Median seconds of one collection by ``--nvidia-smi-command "ssh ... nvidia-smi"``: a new ssh each time."""
    ssh = [
        "ssh", "-F", "none", "-i", str(sshd.client_key), "-p", str(sshd.port),
        "-o", f"UserKnownHostsFile={sshd.known_hosts}", "-o", "BatchMode=yes", f"{sshd.user}@127.0.0.1",
    ]  # fmt: skip
    command = " ".join([*(quote_word(word) for word in ssh), quote_word(sshd.fake_smi("--capture", str(CAPTURE)))])
    exporter = start_exporter(["--nvidia-smi-command", command, "--collect.xid-source=off"])
    try:
        durations = [
            value(exporter.scrape("/metrics"), "nvidia_smi_last_collect_duration_seconds") for _ in range(samples)
        ]
        return statistics.median(durations)
    finally:
        exporter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of probing every target")
    parser.add_argument("--samples", type=int, default=20, help="collections per latency median")
    parser.add_argument("--targets", default="1,10,50")
    args = parser.parse_args()
    with running_sshd() as sshd, tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        print(f"{args.rounds} rounds, {SCRAPERS} scrapers")
        print("| targets | collections/s | RSS idle (MiB) | RSS after (MiB) |")
        print("|---:|---:|---:|---:|")
        for count in (int(text) for text in args.targets.split(",")):
            row = fleet_row(sshd, directory, count, args.rounds)
            print(f"| {row[0]} | {row[1]:.1f} | {row[2]:.1f} | {row[3]:.1f} |", flush=True)
        pooled = pooled_latency(sshd, directory, args.samples)
        fresh = new_ssh_latency(sshd, args.samples)
        print(
            f"\none collection, median of {args.samples}: pooled {pooled * 1000:.0f} ms, new ssh {fresh * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
