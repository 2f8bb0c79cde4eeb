"""Parse + transform + render cost per collection, for an H200-class table replicated to 1, 8 and 64 GPUs.

The table comes from the shared H200 capture when ``../shared/conformance`` is beside the checkout (the
real 240-field layout), else from the demo fleet (100 fields). Each iteration parses a *different*
``nvidia-smi`` output (the fake's ``--fluctuate`` moves power, temperature, clocks, utilization and
memory, as between real scrapes; ``--variants`` distinct outputs, by default one per iteration so moving
readings seldom repeat, as on a real GPU) through one long-lived ``Exposition``, i.e. the exporter's steady
state, for each ``--metrics.profile`` (``nvidia_smi``, ``dcgm``, ``both``). ``--rss`` also starts the real
exporter once per profile on the same data and reports its resident memory after 200 scrapes.

``--cell-cache`` measures what the exposition's per-field cell cache buys (issue 35): per field kind (the
readings the fake moves, and every other field), the distinct texts seen and the CPU of computing a cell's
sample against looking it up; then the render's CPU per collection (thread CPU time, so other processes on
the machine do not count) with the cache as shipped, with every text cached (no bound), with none, and with
``--baseline``'s ``exposition/metrics.py`` (another checkout's ``src/``), each collection rendered by each in turn.

``--steady-rss N`` measures instead the real exporter's RSS over N collections, one per scrape, on a fake
whose readings move (``moving_smi``: the fake's ``--fluctuate`` answers computed beforehand, a new one per
run, replayed by ``sh``), at each ``--gpus`` count, then with the demo backend; beside it ``--baseline``'s
``src/`` (run through ``PYTHONPATH``) and the Go exporter (``--go-binary``), each on the same fake.

    python benchmarks/bench_pipeline.py [--iterations 300] [--variants N] [--rss] [--cell-cache] [--gpus 1,8,64]
    python benchmarks/bench_pipeline.py --steady-rss 1300 [--baseline SRC] [--go-binary PATH]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import logging
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_footprint import Client, Exporter, first_scrape, rss_mib, start
from nvidia_gpu_exporter.backends.demo.model import DemoFleet
from nvidia_gpu_exporter.backends.demo.responders import fleet_capture
from nvidia_gpu_exporter.backends.exec.output import parse_gpu_csv
from nvidia_gpu_exporter.capture.engine import DEFAULT_STATE, FLUCTUATE_FIELDS, Scenario, answer
from nvidia_gpu_exporter.capture.format import GPU_CSV_LABEL_PREFIX, Capture, load_capture
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.metrics import CELL_CACHE_LIMIT, Exposition
from nvidia_gpu_exporter.exposition.text import format_value
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
)
from nvidia_gpu_exporter.model.values import transform_value

SHARED_H200 = (
    Path(__file__).resolve().parents[2] / "shared/conformance/captures/linux-x86_64__nvidia-h200__590.48.01.txt"
)
PROFILES = ("nvidia_smi", "dcgm", "both")


def source_capture() -> tuple[Capture, str, str]:
    if SHARED_H200.is_file():
        return load_capture(SHARED_H200), "load", "shared H200 capture (590.48.01, load)"
    return fleet_capture(DemoFleet(1, seed=1)), "demo", "demo fleet (no ../shared)"


def outputs_for(capture: Capture, state: str, gpus: int, variants: int) -> tuple[list[str], list[QueryField]]:
    """``variants`` distinct CSV outputs of the full recorded field list for ``gpus`` replicated GPUs."""
    section = capture.find(state, GPU_CSV_LABEL_PREFIX)
    assert section is not None
    command = section.command.split("--query-gpu=", 1)[1].split(" ", 1)[0]
    fields = command.split(",")
    args = ["--query-gpu=" + ",".join(fields), "--format=csv"]
    outputs = []
    for seed in range(variants):
        reply = answer(Scenario(capture, state=state, seed=seed, gpus=gpus, fluctuate=True), args)
        assert reply.exit_code == 0, reply
        outputs.append(reply.stdout)
    header = parse_gpu_csv(outputs[0], len(fields)).header
    return outputs, [QueryField(q, r) for q, r in zip(fields, header, strict=True)]


def measure(outputs: list[str], fields: list[QueryField], iterations: int, profile: str) -> tuple[float, float, int]:
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


def cell_cache_study(outputs: list[str], fields: list[QueryField], gpus: int, baseline: str | None) -> None:
    """What the cell cache buys at this GPU count: per field kind, then per collection and policy."""
    tables = [parse_gpu_csv(stdout, len(fields)).rows for stdout in outputs]
    plan = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).field_metrics
    for kind, metrics in (
        ("moving (the fake's --fluctuate)", [metric for metric in plan if metric.qfield in FLUCTUATE_FIELDS]),
        ("every other field", [metric for metric in plan if metric.qfield not in FLUCTUATE_FIELDS]),
    ):
        cells = [(metric, row[metric.column]) for rows in tables for row in rows for metric in metrics]
        distinct = sorted(len({row[metric.column] for rows in tables for row in rows}) for metric in metrics)
        started = time.thread_time()
        for metric, raw in cells:
            value = transform_value(raw, metric.kind, metric.multiplier, metric.qfield)
            _ = "" if value is None else format_value(value)
        compute = (time.thread_time() - started) / max(len(cells), 1)
        lookup_table = {raw: "" for _, raw in cells}
        started = time.thread_time()
        for _, raw in cells:
            lookup_table.get(raw)
        lookup = (time.thread_time() - started) / max(len(cells), 1)
        print(
            f"| {gpus} | {kind} | {len(metrics)} | {distinct[-1] if distinct else 0:,} | "
            f"{sum(distinct):,} | {compute * 1e6:.2f} µs | {lookup * 1e6:.3f} µs | "
            f"{len(metrics) * gpus * (compute - lookup) * 1000:.3f} ms |"
        )
    policies = {"as shipped": CELL_CACHE_LIMIT, "every text (no bound)": sys.maxsize, "none": 0}
    expositions = {name: Exposition(fields, StatusFamily.COMMAND_EXIT_CODE) for name in policies}
    for name, limit in policies.items():
        expositions[name].cell_cache_limit = limit
    expositions["every text (no bound)"].cell_cache_min_hits = 0.0
    if baseline is not None:  # that checkout's exposition/metrics.py, on this checkout's other modules
        spec = importlib.util.spec_from_file_location(
            "baseline_metrics", Path(baseline) / "nvidia_gpu_exporter" / "exposition" / "metrics.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        expositions["baseline"] = module.Exposition(fields, StatusFamily.COMMAND_EXIT_CODE)
    timings: dict[str, list[float]] = {name: [] for name in expositions}
    names = list(expositions)
    for iteration, rows in enumerate(tables):  # interleaved, so the machine's noise falls on every policy
        snapshot = Snapshot(Attempt(Readings(GpuTable(rows), None, "13.1"), 0, 0.1, 1.0), 0, 1.0, iteration + 1)
        turn = iteration % len(names)
        for name in names[turn:] + names[:turn]:  # rotated: the first to look a cell up pays its hashing
            started = time.thread_time()
            expositions[name].render(snapshot)
            timings[name].append(time.thread_time() - started)
    for name, exposition in expositions.items():
        steady = timings[name][len(timings[name]) // 5 :]  # the first fifth fills the caches
        print(
            f"| {gpus} | {name} | {statistics.mean(steady) * 1000:.3f} ms | "
            f"{statistics.median(steady) * 1000:.3f} ms | {sum(len(cache) for cache in exposition._formatted):,} |"
        )


# -- steady-state RSS with moving values (issue 35) ---------------------------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "captures" / "fixture-windows-1gpu.txt"


def capture_file() -> tuple[Path, str]:
    """The capture a fake nvidia-smi replays here: the shared H200 (``load``) when present, else the fixture."""
    return (SHARED_H200, "load") if SHARED_H200.is_file() else (FIXTURE, DEFAULT_STATE)


def moving_smi(directory: Path, gpus: int, variants: int, launch: Callable[[list[str]], Exporter]) -> str:
    """An ``--nvidia-smi-command`` that answers as the fake with ``--fluctuate`` does, from ``variants``
    answers computed beforehand and served in turn by ``sh``: a scrape then costs a shell and a ``cat``,
    not a Python start, so a long run measures the exporter rather than the fake.

    The exporter's command lines are learnt first: ``launch`` starts it on a recording wrapper around the
    real fake for one scrape."""
    path, state = capture_file()
    directory.mkdir(parents=True, exist_ok=True)
    calls = directory / "calls"
    recorder = directory / "record.sh"
    fake = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(path), "--state", state]
    recorder.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {shlex.quote(str(calls))}\n'
        f'exec {shlex.join(fake)} --gpus {gpus} --fluctuate "$@"\n'
    )
    exporter = launch(["--nvidia-smi-command", f"sh {recorder}"])
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        connection.close()
    finally:
        exporter.stop()
    capture = load_capture(path)
    branches = []
    for number, line in enumerate(dict.fromkeys(calls.read_text().splitlines())):
        args = line.split(" ") if line else []
        count = variants if any(arg.startswith("--query-gpu=") for arg in args) else 1
        for seed in range(count):
            reply = answer(Scenario(capture, state=state, seed=seed, gpus=gpus, fluctuate=True), args)
            (directory / f"{number}.{seed}.out").write_text(reply.stdout)
        counter = directory / f"{number}.n"
        counter.write_text("0\n")
        branches.append(
            f"{shlex.quote(line)}) n=$(cat {counter}); echo $((n + 1)) > {counter}; "
            f"f={directory}/{number}.$((n % {count})).out; code={reply.exit_code};;"
        )
    replay = directory / "replay.sh"
    replay.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        + "\n".join(branches)
        + '\n*) echo "replay: no answer recorded for: $*" >&2; exit 2;;\nesac\ncat "$f"\nexit $code\n'
    )
    return f"sh {replay}"


def go_launcher(
    binary: str, extra: Sequence[str] = (), client: Client | None = None
) -> Callable[[list[str]], Exporter]:
    """Starts the Go nvidia_gpu_exporter on a free loopback port (it logs the address it was given, not the
    port it got), its stderr kept as the Python exporter's is."""

    def launch(args: list[str]) -> Exporter:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        started = time.monotonic()
        process = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}", *extra, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        lines: list[str] = []

        def pump() -> None:
            assert process.stderr is not None
            for raw in process.stderr:
                lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()
        while time.monotonic() < started + 60 and process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                time.sleep(0.05)
        return Exporter(process, started, time.monotonic(), f"127.0.0.1:{port}", client or Client(), lines)

    return launch


def python_launcher(
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    client: Client | None = None,
    python_args: Sequence[str] = ("-m", "nvidia_gpu_exporter"),
) -> Callable[[list[str]], Exporter]:
    """Starts this checkout's exporter (or, with ``PYTHONPATH`` in ``env``, another one's source; or, with
    ``python_args``, it under a wrapper such as ``heap_probe.py``)."""
    return lambda args: start([*extra, *args], env, client, python_args)


def steady_rss(
    name: str, launch: Callable[[list[str]], Exporter], args: list[str], collections: int, every: int
) -> list[float]:
    """RSS (MiB) every ``every`` scrapes over ``collections`` scrapes, each one collection (per-scrape mode)."""
    exporter = launch(args)
    samples: list[float] = []
    failures = 0
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        samples.append(rss_mib(exporter.process.pid))
        for scrape in range(1, collections + 1):
            try:
                status, _ = exporter.get(connection)
                failures += status != 200
            except (OSError, http.client.HTTPException):
                failures += 1
                connection.close()
                connection = exporter.client.connect(exporter.address)
            if scrape % every == 0:
                samples.append(rss_mib(exporter.process.pid))
        connection.close()
    finally:
        exporter.stop()
    print(
        f"| {name} | {samples[0]:.1f} | {max(samples):.1f} | {statistics.mean(samples[len(samples) // 2 :]):.1f} | "
        f"{samples[-1]:.1f} | {failures} | " + " ".join(f"{value:.1f}" for value in samples) + " |",
        flush=True,
    )
    return samples


def steady_rss_table(counts: list[int], collections: int, baseline: str | None, go: str | None) -> None:
    """Per GPU count (exec on the moving fake) and for the demo: this checkout, a baseline, the Go exporter."""
    launchers: list[tuple[str, Callable[[list[str]], Exporter]]] = [("this checkout", python_launcher())]
    if baseline is not None:
        launchers.append((f"baseline {baseline}", python_launcher(env={"PYTHONPATH": baseline})))
    if go is not None:
        launchers.append(("Go exporter", go_launcher(go)))
    every = max(collections // 13, 1)
    print(f"\nRSS (MiB) over {collections} per-scrape collections, sampled every {every} scrapes")
    print("| exporter | start | max | mean, second half | end | failed | curve |")
    print("|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as temporary:
        for gpus in counts:
            for index, (label, launch) in enumerate(launchers):
                directory = Path(temporary) / f"{gpus}-{index}"  # no space: the command line is split on them
                command = moving_smi(directory, gpus, collections, launch)
                steady_rss(f"{label}, exec, {gpus} GPUs", launch, ["--nvidia-smi-command", command], collections, every)
                shutil.rmtree(directory)
        for label, launch in launchers:
            if label != "Go exporter":
                steady_rss(f"{label}, demo", launch, ["--collect.backend=demo"], collections, every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--variants", type=int, default=0, help="distinct outputs (default: one per iteration)")
    parser.add_argument("--rss", action="store_true", help="also measure the real exporter's RSS per profile")
    parser.add_argument("--cell-cache", action="store_true", help="what the per-field cell cache buys, instead")
    parser.add_argument("--gpus", default="1,8,64", help="GPU counts, comma-separated")
    parser.add_argument("--steady-rss", type=int, metavar="N", help="RSS over N per-scrape collections, instead")
    parser.add_argument("--baseline", metavar="SRC", help="also another checkout's src/ (--steady-rss, --cell-cache)")
    parser.add_argument("--go-binary", metavar="PATH", help="--steady-rss: also the Go exporter's binary")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    capture, state, source = source_capture()
    counts = [int(count) for count in args.gpus.split(",")]
    if args.steady_rss:
        print(f"source: {capture_file()[0].name}; python {platform.python_version()} on {platform.machine()}")
        steady_rss_table(counts, args.steady_rss, args.baseline, args.go_binary)
        return
    variants = args.variants or args.iterations
    print(f"source: {source}; {variants} distinct outputs; python {platform.python_version()} on {platform.machine()}")
    data = {gpus: outputs_for(capture, state, gpus, variants) for gpus in counts}
    if args.cell_cache:
        print(
            "| GPUs | fields | count | most distinct texts of one | distinct texts, all | compute a cell "
            "| look it up | caching saves per collection |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for gpus in counts:
            cell_cache_study(*data[gpus], gpus, args.baseline)
        return
    print("| profile | GPUs | median | p99 | exposition bytes |")
    print("|---|---:|---:|---:|---:|")
    for profile in PROFILES:
        for gpus in counts:
            median, p99, size = measure(*data[gpus], args.iterations, profile)
            print(f"| {profile} | {gpus} | {median * 1000:.3f} ms | {p99 * 1000:.3f} ms | {size} |")
    if args.rss:
        print("| profile | RSS after 200 scrapes |")
        print("|---|---:|")
        for profile in PROFILES:
            print(f"| {profile} | {resident_mib(profile):.1f} MiB |")


if __name__ == "__main__":
    main()
