"""The soak's loads one at a time, faster than the soak runs them (issue 35): which, if any, makes a TLS + basic
auth exporter's RSS grow.

Each part starts its own exporter (``python -m nvidia_gpu_exporter`` on 127.0.0.1, port 0) with the soak's TLS
and basic-auth web config (``bench_footprint.tls_auth``: a trustme certificate, one cost-10 bcrypt user) and runs
one load ``--rounds`` times, reading RSS from ``/proc`` every ``--every`` rounds:

- ``reloads``: the web config rewritten (a second user added or removed) and SIGHUP, a scrape after each;
- ``bursts``: the soak's burst (50 wrong passwords, 10 clients that close mid-response) and three scrapes;
- ``idle``: the soak's 30 silent connections (half half-closed, half handshaken), held 1 s, and three scrapes;
- ``mixed``: the first three at once, as the soak mixes them: each round the web config rewritten with SIGHUP,
  then at once the burst, and the idle connections (held 0.2 s), with three scrapes, each a collection on
  the moving fake (so reloads land while handshakes, bcrypt checks and collections are under way);
- ``scrapes``: a collection per scrape on the moving fake (8 GPUs, ``bench_pipeline.moving_smi``), a new
  keep-alive connection every 100 scrapes, beside the same exporter over plain HTTP without auth, in turn.

The first three collect every hour (``--collect.interval=1h``, the fake's fixed capture), so only the load
moves. Parts run one after the other; ``--parts`` picks some.

    python benchmarks/bench_soak_parts.py [--parts reloads,bursts,idle,scrapes] [--rounds 80] [--every 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench_soak
from bench_footprint import Exporter, fake_smi, first_scrape, rss_mib, start, tls_auth
from bench_pipeline import moving_smi, python_launcher

PARTS = ("reloads", "bursts", "idle", "mixed", "scrapes")


def load_part(part: str, rounds: int, every: int, directory: Path, pool: ThreadPoolExecutor) -> list[str]:
    """One of the first three parts; the RSS curve (MiB), and what the clients saw."""
    args, client = tls_auth(directory)
    web_config = Path(args[0].split("=", 1)[1])
    if part == "mixed":
        smi = moving_smi(directory / "smi", 8, rounds * 3 + 50, python_launcher(args, client=client))
        exporter = start([*args, "--nvidia-smi-command", smi], client=client)
    else:
        exporter = start([*args, "--nvidia-smi-command", fake_smi(8), "--collect.interval=1h"], client=client)
    config = bench_soak.Config(part, lambda _: exporter, [], web_config, 1.0)
    config.exporter = exporter
    stop = threading.Event()
    curve = []
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        curve.append(rss_mib(exporter.process.pid))
        for number in range(1, rounds + 1):
            if part == "reloads":
                bench_soak.rewrite(config, number)
                time.sleep(0.5)  # the check runs on a thread; let it land before the next
            elif part == "bursts":
                bench_soak.burst(config, 50, pool)
            elif part == "mixed":
                bench_soak.rewrite(config, number)
                held = pool.submit(bench_soak.idle, config, 30, 0.2, stop)
                bench_soak.burst(config, 50, pool)
                held.result()
            else:
                bench_soak.idle(config, 30, 1.0, stop)
            for _ in range(1 if part == "reloads" else 3):
                status, _body = exporter.get(connection)
                config.bursts[f"scrape {status}"] += 1
            if number % every == 0:
                curve.append(rss_mib(exporter.process.pid))
        connection.close()
    finally:
        exporter.stop()
    return [f"{value:.2f}" for value in curve] + [_said(exporter, config.bursts)]


def scrapes_part(rounds: int, every: int, directory: Path) -> dict[str, list[str]]:
    args, client = tls_auth(directory)
    launches = {"TLS + auth": python_launcher(args, client=client), "plain": python_launcher()}
    smi = moving_smi(directory / "smi", 8, rounds + 50, launches["plain"])
    exporters: dict[str, Exporter] = {}
    curves: dict[str, list[str]] = {name: [] for name in launches}
    try:
        for name, launch in launches.items():
            exporters[name] = launch(["--nvidia-smi-command", smi])
        connections = {name: exporter.client.connect(exporter.address) for name, exporter in exporters.items()}
        for name, exporter in exporters.items():
            first_scrape(exporter, connections[name])
            curves[name].append(f"{rss_mib(exporter.process.pid):.2f}")
        for number in range(1, rounds + 1):
            for name, exporter in exporters.items():
                if number % 100 == 0:
                    connections[name].close()
                    connections[name] = exporter.client.connect(exporter.address)
                exporter.get(connections[name])
                if number % every == 0:
                    curves[name].append(f"{rss_mib(exporter.process.pid):.2f}")
        for connection in connections.values():
            connection.close()
    finally:
        for exporter in exporters.values():
            exporter.stop()
    return {name: [*curve, _said(exporters[name], Counter())] for name, curve in curves.items()}


def _said(exporter: Exporter, counts: Counter[str]) -> str:
    warnings = sum("level=warn" in line or "level=error" in line for line in exporter.log)
    reloads = sum("web config reloaded" in line for line in exporter.log)
    answers = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"({answers}; reloads logged: {reloads}; warn or error lines: {warnings})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--rounds", type=int, default=80, help="loads per part (scrapes: collections, x25)")
    parser.add_argument("--every", type=int, default=10, help="rounds between RSS samples (scrapes: x25)")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as temporary, ThreadPoolExecutor(16) as pool:
        for part in args.parts.split(","):
            if part not in PARTS:
                parser.error(f"--parts: {part!r} is not one of {', '.join(PARTS)}")
            directory = Path(temporary) / part
            directory.mkdir()
            if part == "scrapes":
                for name, curve in scrapes_part(args.rounds * 25, args.every * 25, directory).items():
                    print(f"scrapes, {name}: RSS (MiB) every {args.every * 25} collections: {' '.join(curve)}")
            else:
                curve = load_part(part, args.rounds, args.every, directory, pool)
                print(f"{part}: RSS (MiB) every {args.every} rounds: {' '.join(curve)}", flush=True)
    end = os.getloadavg()
    print(f"load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")


if __name__ == "__main__":
    main()
