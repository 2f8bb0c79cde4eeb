"""The soak (issues 16 and 35): exporters side by side under mixed load, with readings that move.

Each configuration is a real exporter on 127.0.0.1 (``python -m nvidia_gpu_exporter``, port 0), all run at once:

- ``exec, TLS + auth``: the exec backend on a fake nvidia-smi whose readings move (the fake's ``--fluctuate``
  answers, a new one per run, replayed by ``sh``: ``bench_pipeline.moving_smi``), ``--gpus`` GPUs, a
  collection per scrape, TLS and basic auth from a ``--web.config.file``;
- ``exec, cached``: the same with ``--collect.interval`` (``--interval``), so scrapes share collections;
- ``demo, auth``: the demo backend (its readings move; its XIDs are written to its kernel log and read back
  from it), basic auth over plain HTTP, ``--collect.interval``;
- ``Go exporter``: with ``--go-binary PATH``, the Go exporter on the same fake with the first configuration's
  web config. exporter-toolkit re-reads that file at every request, so it is rewritten like the others' but
  sent no SIGHUP (which would end a Go program that does not handle it).

Load on each, from this process: a scraper at ``--per-scrape-rate`` (the cached configuration:
``--cached-rate``) scrapes per second over keep-alive connections (a new one every ``--reconnect``
scrapes); every ``--burst-every`` s a burst of ``--burst`` connections sending a wrong password and a fifth
as many clients that close mid-response; every ``--idle-every`` s ``--idle`` connections that say nothing
for ``--idle-hold`` s, half of them half-closed (write side shut down at once); every ``--reload-every`` s
the web config rewritten (a second user added or removed) and SIGHUP sent.

Every ``--sample`` s each exporter's RSS, open fds, threads and child processes are read from ``/proc`` and
printed. At the end, per configuration: scrapes answered, the bursts' answers, RSS at the start, max and
end with its least-squares slope over the last ``--slope-minutes`` (KiB/min; the Theil-Sen slope beside it),
fds, threads and children (min-max), and its log lines by level. ``--plot FILE.svg`` draws RSS over time;
``--heap-probe DIR`` runs the Python exporters under ``heap_probe.py``. Every loop is bounded by the deadline;
the script ends by itself.

``--steady N`` measures instead steady-state RSS with moving values, without the mixed load: at each ``--gpus``
count (comma-separated), this checkout's exporter and the Go exporter (``--go-binary``; beside them
``--baseline SRC``'s ``src/`` and this checkout under ``--python-env`` variables, such as glibc's
``MALLOC_ARENA_MAX``) run at once, each on the moving fake, a collection per scrape, scraped in turn over
keep-alive connections (one scrape of each, then the next round) for N rounds, so the machine's load falls on
all alike. With ``--steady-demo``, the demo backend at the same GPU count (its ``gpus:`` in a
``--demo-config``), whose readings move by themselves, runs beside them, a collection per scrape too, and
``--baseline-demo SRC`` runs another checkout's demo beside it. Per
exporter: RSS at the first scrape, its plateau (the median of the samples over the last third of the rounds)
and max, the anonymous and file-backed parts of RSS at the end (``/proc/PID/status``: the heaps
against the mapped binary and libraries), CPU per collection (the exporter's own), and each plateau and max
as a ratio of the Go exporter's.

    python benchmarks/bench_soak.py --minutes 3                           # the variant for every change
    python benchmarks/bench_soak.py --minutes 30 --slope-minutes 20 --plot soak.svg [--go-binary PATH]
    python benchmarks/bench_soak.py --steady 1300 --gpus 1,8,64 [--go-binary PATH] [--steady-demo]
        [--baseline-demo SRC]
        [--python-env MALLOC_ARENA_MAX=2]
"""

from __future__ import annotations

import argparse
import base64
import html
import http.client
import math
import os
import re
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_footprint import Client, Exporter, cpu_seconds, first_scrape, rss_mib, tls_auth
from bench_pipeline import go_launcher, moving_smi, python_launcher

LEVEL = re.compile(r'level=(\w+)|"level":\s*"(\w+)"')
WRONG = "Basic " + base64.b64encode(b"bench:wrong").decode()


@dataclass
class Config:
    name: str
    launch: Callable[[list[str]], Exporter]
    args: list[str]
    web_config: Path
    rate: float
    sighup: bool = True
    exporter: Exporter | None = None
    scrapes: int = 0
    failures: int = 0
    bursts: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[float, float, int, int, int]] = field(default_factory=list)  # at, RSS, fds, threads, kids
    cpu: float = 0.0


# -- what /proc says ----------------------------------------------------------------------------------------


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                count += 1
    return count


def slope_kib_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in KiB per minute."""
    if len(points) < 2:
        return float("nan")
    mean_t = sum(at for at, _ in points) / len(points)
    mean_v = sum(value for _, value in points) / len(points)
    spread = sum((at - mean_t) ** 2 for at, _ in points)
    if spread == 0:
        return float("nan")
    return sum((at - mean_t) * (value - mean_v) for at, value in points) / spread * 60 * 1024


def median_slope_kib_per_minute(points: list[tuple[float, float]]) -> float:
    """The Theil-Sen slope (the median of the slopes between every two points), in KiB per minute: a cross-check
    of the least-squares one that a few samples taken at a burst's peak cannot pull."""
    slopes = sorted(
        (later[1] - earlier[1]) / (later[0] - earlier[0])
        for index, earlier in enumerate(points)
        for later in points[index + 1 :]
        if later[0] != earlier[0]
    )
    if not slopes:
        return float("nan")
    middle = len(slopes) // 2
    median = slopes[middle] if len(slopes) % 2 else (slopes[middle - 1] + slopes[middle]) / 2
    return median * 60 * 1024


def rss_parts_mib(pid: int) -> tuple[float, float]:
    """The anonymous (heaps, stacks) and file-backed (the binary, shared libraries) parts of RSS, in MiB."""
    parts = dict.fromkeys(("RssAnon:", "RssFile:"), 0.0)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        words = line.split()
        if words and words[0] in parts:
            parts[words[0]] = int(words[1]) / 1024
    return parts["RssAnon:"], parts["RssFile:"]


# -- the plot -----------------------------------------------------------------------------------------------

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def svg_plot(configs: list[Config], took: float, slope_seconds: float, title: str) -> str:
    """RSS over time, a line per configuration, the slope window shaded and each least-squares fit drawn
    dashed over it: a self-contained SVG (no script, no font file, no dependency)."""
    width, height, left, right, top, bottom = 900, 420, 60, 20, 40, 95
    series = [[(at, rss) for at, rss, *_ in config.samples] for config in configs]
    values = [rss for points in series for _, rss in points] or [0.0]
    low, high = math.floor(min(values)) - 0.5, math.ceil(max(values)) + 0.5
    span = max(took, 1.0)

    def x(at: float) -> float:
        return left + (width - left - right) * at / span

    def y(mib: float) -> float:
        return top + (height - top - bottom) * (high - mib) / (high - low)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
        f'<rect x="{x(took - slope_seconds):.1f}" y="{top}" width="{x(took) - x(took - slope_seconds):.1f}" '
        f'height="{height - top - bottom}" fill="#f2f2f2"/>',
    ]
    step = 0.5 if high - low <= 6 else 1.0 if high - low <= 12 else 2.0
    tick = math.ceil(low / step) * step
    while tick <= high:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>'
        )
        tick += step
    minutes = span / 60
    every_minutes = next(m for m in (1, 2, 5, 10, 15, 30, 60, 1e9) if minutes / m <= 12)
    mark = 0.0
    while mark <= minutes + 1e-9:
        out.append(f'<text x="{x(mark * 60):.1f}" y="{height - bottom + 16}" text-anchor="middle">{mark:g}</text>')
        mark += every_minutes
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - bottom + 32}" text-anchor="middle">minutes '
        f"(shaded: the last {slope_seconds / 60:.3g}, the slope's window)</text>"
        f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2})">RSS (MiB)</text>'
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
        'fill="none" stroke="#444"/>'
    )
    for index, (config, points) in enumerate(zip(configs, series, strict=True)):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x(at):.1f},{y(rss):.1f}" for at, rss in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        tail = [(at, rss) for at, rss in points if at >= took - slope_seconds]
        slope = slope_kib_per_minute(tail)
        if len(tail) >= 2 and not math.isnan(slope):
            mean_t = sum(at for at, _ in tail) / len(tail)
            mean_v = sum(rss for _, rss in tail) / len(tail)
            ends = [(at, mean_v + (at - mean_t) * slope / 60 / 1024) for at in (tail[0][0], tail[-1][0])]
            out.append(
                f'<line x1="{x(ends[0][0]):.1f}" y1="{y(ends[0][1]):.1f}" x2="{x(ends[1][0]):.1f}" '
                f'y2="{y(ends[1][1]):.1f}" stroke="{colour}" stroke-width="2.5" stroke-dasharray="6 4" opacity="0.7"/>'
            )
        legend_y = height - bottom + 50 + 14 * (index // 2)
        legend_x = left + (width - left - right) / 2 * (index % 2)
        out.append(
            f'<line x1="{legend_x}" x2="{legend_x + 24}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{colour}" '
            f'stroke-width="2"/><text x="{legend_x + 30}" y="{legend_y}">{html.escape(config.name)}: '
            f"{points[-1][1] if points else float('nan'):.2f} MiB at the end, {slope:+.1f} KiB/min</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- the load -----------------------------------------------------------------------------------------------


def raw_connection(exporter: Exporter, handshake: bool = True) -> socket.socket:
    host, port = exporter.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), 10)
    if exporter.client.tls is not None and handshake:
        return exporter.client.tls.wrap_socket(sock, server_hostname=host)
    return sock


def wrong_password(exporter: Exporter) -> str:
    """One connection, one request with a wrong password: the status it got, or the error."""
    try:
        connection = exporter.client.connect(exporter.address)
        connection.timeout = 30
        connection.request("GET", "/metrics", headers={"Authorization": WRONG})
        response = connection.getresponse()
        response.read()
        connection.close()
        return str(response.status)
    except (OSError, http.client.HTTPException) as error:
        return type(error).__name__


def close_mid_response(exporter: Exporter) -> str:
    """A scrape (uncompressed, so the body is large) whose client reads its first bytes and goes away."""
    try:
        sock = raw_connection(exporter)
        headers = "".join(f"{name}: {value}\r\n" for name, value in exporter.client.headers.items())
        sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: soak\r\n{headers}\r\n".encode())
        sock.recv(512)
        sock.close()
        return "closed mid-response"
    except OSError as error:
        return type(error).__name__


def burst(config: Config, size: int, pool: ThreadPoolExecutor) -> None:
    assert config.exporter is not None
    exporter = config.exporter
    jobs = [pool.submit(wrong_password, exporter) for _ in range(size)]
    jobs += [pool.submit(close_mid_response, exporter) for _ in range(max(size // 5, 1))]
    for job in jobs:
        config.bursts[job.result()] += 1


def idle(config: Config, count: int, hold: float, stop: threading.Event) -> None:
    """``count`` silent connections for ``hold`` s: half half-closed at once, half open (TLS: handshaken)."""
    assert config.exporter is not None
    held: list[socket.socket] = []
    for index in range(count):
        try:
            if index % 2:
                sock = raw_connection(config.exporter, handshake=False)
                sock.shutdown(socket.SHUT_WR)
            else:
                sock = raw_connection(config.exporter)
            held.append(sock)
        except OSError:
            config.bursts["idle connection refused"] += 1
    stop.wait(hold)
    for sock in held:
        sock.close()


def rewrite(config: Config, generation: int) -> None:
    """The web config with a second user added (odd generations) or removed, then SIGHUP. The file is replaced
    whole (written beside it, then renamed), so neither the exporter nor the next rewrite reads half of it."""
    text = config.web_config.read_text()
    lines = [line for line in text.splitlines() if not line.startswith("  second:")]
    if generation % 2:
        digest = next(line for line in lines if line.startswith("  bench:")).split(":", 1)[1]
        lines.append(f"  second:{digest}")
    staged = config.web_config.with_suffix(".new")
    staged.write_text("\n".join(lines) + "\n")
    staged.replace(config.web_config)
    if config.sighup and config.exporter is not None:
        config.exporter.process.send_signal(signal.SIGHUP)


def scrape_steadily(config: Config, deadline: float, reconnect: int, stop: threading.Event) -> None:
    assert config.exporter is not None
    exporter = config.exporter
    period = 1.0 / config.rate
    connection: http.client.HTTPConnection | None = None
    next_at = time.monotonic()
    for index in range(int((deadline - time.monotonic()) * config.rate) + 1):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        if connection is None or index % reconnect == 0:
            if connection is not None:
                connection.close()
            connection = exporter.client.connect(exporter.address)
        try:
            status, body = exporter.get(connection)
            if status != 200 or b"nvidia_smi_" not in body:
                config.failures += 1
        except (OSError, http.client.HTTPException):
            config.failures += 1
            connection.close()
            connection = None
        config.scrapes += 1
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(min(delay, period))
        else:
            next_at = time.monotonic()  # fell behind (a loaded machine): do not burst to catch up
    if connection is not None:
        connection.close()


def every(seconds: float, deadline: float, stop: threading.Event, action: Callable[[int], None]) -> None:
    """``action(n)`` every ``seconds`` until the deadline, the first after one period."""
    for generation in range(1, int((deadline - time.monotonic()) / seconds) + 2):
        if stop.wait(seconds) or time.monotonic() >= deadline:
            return
        action(generation)


# -- the configurations -------------------------------------------------------------------------------------


def configurations(args: argparse.Namespace, directory: Path) -> list[Config]:
    tls_args, tls_client = tls_auth(directory)
    python_args: tuple[str, ...] = ("-m", "nvidia_gpu_exporter")
    probe_env: dict[str, str] | None = None
    if args.heap_probe:
        Path(args.heap_probe).mkdir(parents=True, exist_ok=True)
        python_args = (str(Path(__file__).resolve().parent / "heap_probe.py"),)
        probe_env = {"HEAP_PROBE_DIR": str(Path(args.heap_probe).resolve()), "HEAP_PROBE_SECONDS": f"{args.sample}"}
    tls_config = Path(tls_args[0].split("=", 1)[1])
    demo_config = directory / "web-demo.yml"
    demo_config.write_text(
        "basic_auth_users:\n" + next(line for line in tls_config.read_text().splitlines() if "bench:" in line) + "\n"
    )
    demo_client = Client(None, dict(tls_client.headers))
    collections = int(args.minutes * 60 * args.per_scrape_rate) + 600  # a new answer for every run
    configs: list[Config] = []
    launch = python_launcher(tls_args, client=tls_client)
    smi = moving_smi(directory / "exec", args.gpus, collections, launch)
    launch = python_launcher(tls_args, probe_env, tls_client, python_args)
    configs.append(Config("exec, TLS + auth", launch, ["--nvidia-smi-command", smi], tls_config, args.per_scrape_rate))
    cached_smi = moving_smi(directory / "cached", args.gpus, collections, launch)
    cached_config = directory / "web-cached.yml"  # its own file: each configuration's rewrites are its own
    cached_config.write_text(tls_config.read_text())
    cached_launch = python_launcher([f"--web.config.file={cached_config}"], probe_env, tls_client, python_args)
    cached_args = ["--nvidia-smi-command", cached_smi, f"--collect.interval={args.interval}"]
    configs.append(
        Config(f"exec, cached ({args.interval})", cached_launch, cached_args, cached_config, args.cached_rate)
    )
    demo = python_launcher([f"--web.config.file={demo_config}"], probe_env, demo_client, python_args)
    demo_args = ["--collect.backend=demo", f"--collect.interval={args.interval}"]
    configs.append(Config("demo, auth", demo, demo_args, demo_config, args.per_scrape_rate))
    if args.go_binary:
        go_config = directory / "web-go.yml"
        go_config.write_text(tls_config.read_text())
        go = go_launcher(args.go_binary, [f"--web.config.file={go_config}"], tls_client)
        go_smi = moving_smi(directory / "go", args.gpus, collections, go)
        go_args = ["--nvidia-smi-command", go_smi]
        configs.append(Config("Go exporter", go, go_args, go_config, args.per_scrape_rate, sighup=False))
    return configs


def report(configs: list[Config], took: float, slope_seconds: float) -> None:
    print(
        f"\n### Soak: {took / 60:.1f} min; RSS slope over the last {slope_seconds / 60:g} min (least squares; "
        "Theil-Sen in brackets)\n"
    )
    print(
        "| configuration | scrapes answered | exporter CPU | RSS start | max | end | slope | fds | threads "
        "| children | log lines by level |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for config in configs:
        rss = [sample[1] for sample in config.samples]
        tail = [(at, value) for at, value, *_ in config.samples if at >= took - slope_seconds]
        columns = [[sample[index] for sample in config.samples] for index in (2, 3, 4)]
        assert config.exporter is not None
        levels = Counter(
            (match.group(1) or match.group(2)).lower()
            for line in config.exporter.log
            if (match := LEVEL.search(line)) is not None
        )
        print(
            f"| {config.name} | {config.scrapes - config.failures:,} of {config.scrapes:,} | "
            f"{config.cpu / max(config.scrapes, 1) * 1000:.2f} ms/scrape | {rss[0]:.2f} | {max(rss):.2f} | "
            f"{rss[-1]:.2f} | {slope_kib_per_minute(tail):+.1f} ({median_slope_kib_per_minute(tail):+.1f}) KiB/min | "
            + " | ".join(f"{min(values)}-{max(values)}" for values in columns)
            + " | "
            + (", ".join(f"{level} {count}" for level, count in sorted(levels.items())) or "none")
            + " |"
        )
    for config in configs:
        print(
            f"\n{config.name}: bursts and idle connections: " + ", ".join(f"{k} {v}" for k, v in config.bursts.items())
        )
        print(f"{config.name}: RSS (MiB) " + " ".join(f"{sample[1]:.1f}" for sample in config.samples))
        assert config.exporter is not None
        for line in config.exporter.log:
            match = LEVEL.search(line)
            if match is not None and (match.group(1) or match.group(2)).lower() in {"warn", "warning", "error"}:
                print(f"  {line[:300]}")


# -- steady state, side by side -----------------------------------------------------------------------------


@dataclass
class Steady:
    """One exporter of the steady-state run, and what was read of it."""

    name: str
    launch: Callable[[list[str]], Exporter]
    go: bool = False
    demo: bool = False  # the demo backend: no fake, its own readings
    exporter: Exporter | None = None
    connection: http.client.HTTPConnection | None = None
    samples: list[float] = field(default_factory=list)
    failures: int = 0
    cpu: float = 0.0
    parts: tuple[float, float] = (0.0, 0.0)

    def plateau(self) -> float:
        """The median RSS over the last third of the rounds (the first sample is the first scrape's)."""
        return statistics.median(self.samples[1:][-max(len(self.samples) // 3, 1) :])


def steady_sides(args: argparse.Namespace) -> list[Steady]:
    sides = [Steady("this checkout", python_launcher())]
    for assignments in args.python_env:
        env = dict(assignment.split("=", 1) for assignment in assignments.split(","))
        sides.append(Steady(f"this checkout, {assignments}", python_launcher(env=env)))
    if args.baseline:
        sides.append(Steady(f"baseline {args.baseline}", python_launcher(env={"PYTHONPATH": args.baseline})))
    if args.steady_demo:
        sides.append(Steady("demo", python_launcher(), demo=True))
    if args.baseline_demo:
        sides.append(
            Steady(
                f"baseline demo {args.baseline_demo}",
                python_launcher(env={"PYTHONPATH": args.baseline_demo}),
                demo=True,
            )
        )
    if args.go_binary:
        sides.append(Steady("Go exporter", go_launcher(args.go_binary), go=True))
    return sides


def steady_round(sides: list[Steady], gpus: int, rounds: int, directory: Path) -> None:
    """All sides at once on the moving fake (the Python ones share its replay: they run the same commands, and
    are scraped one after the other), a scrape of each per round, RSS sampled 30 times over the rounds."""
    commands: dict[bool, str] = {}
    for side in sides:
        if side.go not in commands and not side.demo:
            commands[side.go] = moving_smi(directory / f"{gpus}-{side.go}", gpus, rounds + 50, side.launch)
    demo_config = directory / f"demo-{gpus}.yml"
    demo_config.write_text(f"gpus: {gpus}\n")
    every = max(rounds // 30, 1)
    try:
        for side in sides:
            side.exporter = side.launch(
                ["--collect.backend=demo", f"--demo-config={demo_config}"]
                if side.demo
                else ["--nvidia-smi-command", commands[side.go]]
            )
            side.connection = side.exporter.client.connect(side.exporter.address)
            first_scrape(side.exporter, side.connection)
            side.samples.append(rss_mib(side.exporter.process.pid))
            side.cpu = cpu_seconds(side.exporter.process.pid)
        for number in range(1, rounds + 1):
            for side in sides:
                assert side.exporter is not None
                assert side.connection is not None
                try:
                    status, body = side.exporter.get(side.connection)
                    side.failures += status != 200 or b"nvidia_smi_" not in body
                except (OSError, http.client.HTTPException):
                    side.failures += 1
                    side.connection.close()
                    side.connection = side.exporter.client.connect(side.exporter.address)
                if number % every == 0:
                    side.samples.append(rss_mib(side.exporter.process.pid))
        for side in sides:
            assert side.exporter is not None
            side.cpu = (cpu_seconds(side.exporter.process.pid) - side.cpu) / rounds
            side.parts = rss_parts_mib(side.exporter.process.pid)
    finally:
        for side in sides:
            if side.connection is not None:
                side.connection.close()
            if side.exporter is not None:
                side.exporter.stop()


def steady(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"steady state: {args.steady} rounds per GPU count, a collection per scrape, the exporters scraped in turn; "
        f"{os.cpu_count()} CPUs, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        flush=True,
    )
    print(
        "\n| GPUs | exporter | RSS at the first scrape | plateau (median, last third) | max | anon + file at the end "
        "| CPU per collection | plateau / Go | max / Go | failed |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    curves: list[str] = []
    with tempfile.TemporaryDirectory() as temporary:
        for gpus in (int(count) for count in args.gpus.split(",")):
            sides = steady_sides(args)
            steady_round(sides, gpus, args.steady, Path(temporary))
            go = next((side for side in sides if side.go), None)
            for side in sides:
                ratios = (
                    [f"{side.plateau() / go.plateau():.2f}x", f"{max(side.samples) / max(go.samples):.2f}x"]
                    if go is not None
                    else ["", ""]
                )
                print(
                    f"| {gpus} | {side.name} | {side.samples[0]:.1f} MiB | {side.plateau():.1f} MiB | "
                    f"{max(side.samples):.1f} MiB | {side.parts[0]:.1f} + {side.parts[1]:.1f} MiB | "
                    f"{side.cpu * 1000:.2f} ms | " + " | ".join(ratios) + f" | {side.failures} |",
                    flush=True,
                )
                curves.append(f"{gpus} GPUs, {side.name}: " + " ".join(f"{value:.1f}" for value in side.samples))
    end = os.getloadavg()
    print(f"\nload average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}; RSS (MiB) over the rounds:")
    for curve in curves:
        print(f"  {curve}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--slope-minutes", type=float, help="the slope's window (default: the last two thirds)")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between /proc samples")
    parser.add_argument("--per-scrape-rate", type=float, default=1.0, help="scrapes/s of the per-scrape exporters")
    parser.add_argument("--cached-rate", type=float, default=4.0, help="scrapes/s of the cached exporter")
    parser.add_argument("--interval", default="5s", help="--collect.interval of the cached and demo exporters")
    parser.add_argument("--gpus", default="8", help="GPUs of the fake (--steady: counts, comma-separated)")
    parser.add_argument("--reconnect", type=int, default=100, help="scrapes per keep-alive connection")
    parser.add_argument("--burst", type=int, default=50, help="wrong-password connections per burst")
    parser.add_argument("--burst-every", type=float, default=60.0)
    parser.add_argument("--idle", type=int, default=30, help="silent connections per round")
    parser.add_argument("--idle-every", type=float, default=90.0)
    parser.add_argument("--idle-hold", type=float, default=30.0)
    parser.add_argument("--reload-every", type=float, default=120.0)
    parser.add_argument("--go-binary", metavar="PATH", help="also the Go nvidia_gpu_exporter, side by side")
    parser.add_argument("--plot", metavar="FILE.svg", help="write RSS over time per configuration as an SVG file")
    parser.add_argument(
        "--heap-probe", metavar="DIR", help="run the Python exporters under heap_probe.py, its tables in DIR"
    )
    parser.add_argument("--steady", type=int, metavar="N", help="steady-state RSS over N rounds, side by side, instead")
    parser.add_argument("--baseline", metavar="SRC", help="--steady: also another checkout's src/")
    parser.add_argument("--baseline-demo", metavar="SRC", help="--steady: also another checkout's demo")
    parser.add_argument("--steady-demo", action="store_true", help="--steady: also the demo backend, as many GPUs")
    parser.add_argument(
        "--python-env",
        action="append",
        default=[],
        metavar="NAME=VALUE[,NAME=VALUE]",
        help="--steady: also this checkout with these environment variables (repeatable)",
    )
    args = parser.parse_args()
    if args.steady:
        steady(args)
        return
    args.gpus = int(args.gpus)
    slope_seconds = (args.slope_minutes or args.minutes * 2 / 3) * 60

    load = os.getloadavg()
    print(
        f"soak: {args.minutes:g} min, {args.gpus} GPUs, /proc every {args.sample:g} s; {os.cpu_count()} CPUs, "
        f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; Go exporter: "
        + (args.go_binary or "not run (no --go-binary)"),
        flush=True,
    )
    stop = threading.Event()
    threads_: list[threading.Thread] = []
    took = 0.0
    with tempfile.TemporaryDirectory() as temporary, ThreadPoolExecutor(16) as pool:
        configs = configurations(args, Path(temporary))
        try:
            for config in configs:
                config.exporter = config.launch(config.args)
                connection = config.exporter.client.connect(config.exporter.address)
                first_scrape(config.exporter, connection)
                connection.close()
                print(f"{config.name}: pid {config.exporter.process.pid}, {config.rate:g} scrapes/s", flush=True)
            started = time.monotonic()
            deadline = started + args.minutes * 60
            cpu_start = {config.name: cpu_seconds(config.exporter.process.pid) for config in configs if config.exporter}
            for config in configs:
                work: list[tuple[Callable[..., None], tuple[object, ...]]] = [
                    (scrape_steadily, (config, deadline, args.reconnect, stop)),
                    (every, (args.burst_every, deadline, stop, lambda _, c=config: burst(c, args.burst, pool))),
                    (
                        every,
                        (args.idle_every, deadline, stop, lambda _, c=config: idle(c, args.idle, args.idle_hold, stop)),
                    ),
                    (every, (args.reload_every, deadline, stop, lambda n, c=config: rewrite(c, n))),
                ]
                for target, target_args in work:
                    thread = threading.Thread(target=target, args=target_args, daemon=True)
                    thread.start()
                    threads_.append(thread)
            while True:
                at = time.monotonic() - started
                line = [f"{at / 60:5.1f} min"]
                for config in configs:
                    assert config.exporter is not None
                    pid = config.exporter.process.pid
                    if config.exporter.process.poll() is not None:
                        sys.exit(f"{config.name} exited: " + "\n".join(config.exporter.log[-20:]))
                    sample = (at, rss_mib(pid), fds(pid), threads(pid), children(pid))
                    config.samples.append(sample)
                    line.append(
                        f"{config.name}: {sample[1]:.2f} MiB {sample[2]} fds {sample[3]} thr {sample[4]} kids "
                        f"({config.scrapes - config.failures}/{config.scrapes})"
                    )
                print("  ".join(line) + f"  load {os.getloadavg()[0]:.2f}", flush=True)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                stop.wait(min(args.sample, remaining))
            took = time.monotonic() - started
            stop.set()
            for thread in threads_:
                thread.join(60)
            for config in configs:
                assert config.exporter is not None
                config.cpu = cpu_seconds(config.exporter.process.pid) - cpu_start[config.name]
        finally:
            stop.set()
            for config in configs:
                if config.exporter is not None:
                    config.exporter.stop()
    report(configs, took, slope_seconds)
    if args.plot:
        title = (
            f"bench_soak.py: {took / 60:.0f} min, {args.gpus} GPUs, {os.cpu_count()} CPUs, "
            f"load average {load[0]:.1f} at start, {os.getloadavg()[1]:.1f} at the end (5 min)"
        )
        Path(args.plot).write_text(svg_plot(configs, took, slope_seconds, title))
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
