"""What gzip costs the metrics route (issue 31): CPU per collection with gzip off and on, per cached scrape plain
and gzip, at 1 and 64 GPUs of the shared H200 capture (the fixture's 1-GPU capture without ``../shared``).

In-process: the real ``Exposition``, ``Collector`` and ``MetricsEndpoint``, driven through ``handle()`` (no HTTP, so
only what the route itself spends is counted), CPU read as ``time.process_time()`` around each request (every
thread, so a body compressed in a thread is counted too). A collection is a synchronous scrape (a new snapshot,
rendered and, when asked, compressed); a cached scrape is one more scrape of a background snapshot. Each figure
is the median of ``--iterations`` requests; the pre-parsed nvidia-smi outputs vary between collections as the
fake's ``--fluctuate`` moves them.

``--exporter`` measures the whole exporter too (``python -m nvidia_gpu_exporter`` with the fake nvidia-smi on the
same capture, sequential scrapes on one keep-alive connection, with and without ``Accept-Encoding: gzip``): its own
``utime + stime`` (clock ticks) per scrape over ``--collections`` scrapes that each collect, and over ``--cached``
scrapes of one background collection.

    python benchmarks/bench_gzip.py [--iterations 400] [--exporter | --exporter-only] [--collections 200]
                                     [--cached 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.client
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_pipeline import SHARED_H200, outputs_for, source_capture
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.backends.exec.output import parse_gpu_csv
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.httpserver.http import Headers, Request
from nvidia_gpu_exporter.model.snapshot import (
    GpuTable,
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint

GPU_COUNTS = (1, 64)
FALLBACK_CAPTURE = "tests/fixtures/captures/fixture-windows-1gpu.txt"
PLAIN = Request("GET", "/metrics", Headers([("accept-encoding", "identity")]))
GZIP = Request("GET", "/metrics", Headers([("accept-encoding", "gzip")]))


class ReplayBackend:
    """A backend answering each collection with the next of some pre-parsed nvidia-smi outputs."""

    def __init__(self, fields: Sequence[QueryField], readings: Sequence[Readings]) -> None:
        self._fields = tuple(fields)
        self._readings = list(readings)
        self.calls = 0

    @property
    def status_family(self) -> StatusFamily:
        return StatusFamily.COMMAND_EXIT_CODE

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._fields

    async def collect(self) -> Readings:
        readings = self._readings[self.calls % len(self._readings)]
        self.calls += 1
        return readings

    def xid_records(self) -> tuple[XidRecord, ...]:
        return ()

    def stuck_children(self) -> StuckChildren | None:
        return None

    def supplement_failures(self) -> SupplementFailures | None:
        return None

    async def aclose(self) -> None:
        return None


REPLAYED_COLLECTIONS = 20  # distinct outputs the replayed backend cycles through (bench_pipeline's old default)


def replay(gpus: int) -> ReplayBackend:
    capture, state, _ = source_capture()
    outputs, fields = outputs_for(capture, state, gpus, REPLAYED_COLLECTIONS)
    readings = [Readings(GpuTable(parse_gpu_csv(stdout, len(fields)).rows), None, "13.1") for stdout in outputs]
    return ReplayBackend(fields, readings)


async def cpu_per_request(endpoint: MetricsEndpoint, request: Request, iterations: int) -> tuple[float, int]:
    """(median CPU milliseconds of one ``handle(request)``, the body's bytes)."""
    timings = []
    size = 0
    for _ in range(iterations):
        started = time.process_time()
        response = await endpoint.handle(request)
        timings.append(time.process_time() - started)
        assert response.status == 200, response.status
        size = sum(len(part) for part in response.body)
    return statistics.median(timings) * 1000, size


async def in_process(gpus: int, iterations: int) -> dict[str, tuple[float, int]]:
    backend = replay(gpus)
    settings = web_settings(Config(max_requests=0))
    figures: dict[str, tuple[float, int]] = {}
    for name, request in (("collection, gzip off", PLAIN), ("collection, gzip on", GZIP)):
        collector = Collector(backend, timeout_seconds=None)  # a collection per scrape
        endpoint = MetricsEndpoint(collector, Exposition(backend.fields, backend.status_family), settings)
        await cpu_per_request(endpoint, request, 20)  # warm-up: the exposition's memoized cells
        figures[name] = await cpu_per_request(endpoint, request, iterations)
    collector = Collector(backend, timeout_seconds=None, interval_seconds=3600)
    endpoint = MetricsEndpoint(collector, Exposition(backend.fields, backend.status_family), settings)
    collector.start()
    try:
        while collector.collections == 0:
            await asyncio.sleep(0.01)
        for name, request in (("cached scrape, plain", PLAIN), ("cached scrape, gzip", GZIP)):
            await cpu_per_request(endpoint, request, 20)
            figures[name] = await cpu_per_request(endpoint, request, iterations)
    finally:
        await collector.aclose()
    return figures


def exporter_cpu(gpus: int, scrapes: int, cached: bool) -> dict[str, float]:
    """The real exporter's own CPU milliseconds per scrape, plain and gzip: each scrape a collection, or (``cached``)
    every scrape of one background collection; the quieter of two rounds of each."""
    from bench_footprint import cpu_seconds, first_scrape, start
    from harness import fake_smi_command

    if SHARED_H200.is_file():
        command = fake_smi_command(SHARED_H200, "--state", "load", "--gpus", str(gpus))
    else:
        command = fake_smi_command(Path(__file__).resolve().parents[1] / FALLBACK_CAPTURE, "--gpus", str(gpus))
    mode = ["--collect.interval=1h", "--web.max-requests=0"] if cached else []
    exporter = start(["--nvidia-smi-command", command, *mode])
    figures: dict[str, float] = {}
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        for encoding in ("identity", "gzip", "identity", "gzip"):
            before = cpu_seconds(exporter.process.pid)
            for _ in range(scrapes):
                connection.request("GET", "/metrics", headers={"Accept-Encoding": encoding})
                response = connection.getresponse()
                body = response.read()
                assert response.status == 200, response.status
                if encoding == "gzip":
                    assert response.getheader("Content-Encoding") == "gzip"
                    gzip.decompress(body)
            spent = (cpu_seconds(exporter.process.pid) - before) / scrapes * 1000
            figures[encoding] = min(figures.get(encoding, spent), spent)
    except http.client.HTTPException as error:
        sys.exit(f"scrape failed: {error}")
    finally:
        exporter.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--exporter", action="store_true", help="also measure the whole exporter")
    parser.add_argument("--exporter-only", action="store_true", help="measure only the whole exporter")
    parser.add_argument("--collections", type=int, default=200, help="collections per encoding with --exporter")
    parser.add_argument("--cached", type=int, default=2000, help="cached scrapes per encoding with --exporter")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    print(f"source: {source_capture()[2]}")
    if not args.exporter_only:
        print("\n| GPUs | what | CPU (median) | body bytes |")
        print("|---:|---|---:|---:|")
        for gpus in GPU_COUNTS:
            for name, (milliseconds, size) in asyncio.run(in_process(gpus, args.iterations)).items():
                print(f"| {gpus} | {name} | {milliseconds:.3f} ms | {size:,} |")
    if args.exporter or args.exporter_only:
        print("\n| GPUs | exporter CPU | plain | gzip | gzip / plain |")
        print("|---:|---|---:|---:|---:|")
        for gpus in GPU_COUNTS:
            for what, count, cached in (
                ("per collection", args.collections, False),
                ("per cached scrape", args.cached, True),
            ):
                figures = exporter_cpu(gpus, count, cached)
                plain, zipped = figures["identity"], figures["gzip"]
                print(f"| {gpus} | {what} | {plain:.3f} ms | {zipped:.3f} ms | {zipped / plain:.2f} |")


if __name__ == "__main__":
    main()
