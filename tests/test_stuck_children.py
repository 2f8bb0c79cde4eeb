"""Stuck nvidia-smi children (a wedged driver) from the runner to the scrape: backend -> snapshot -> exposition.

The two families are the exec backend's alone, outside ``nvidia_smi_*`` (whose bytes stay the Go exporter's),
and are served whatever the collection's outcome: while a child is stuck every collection fails. The last
test runs real children behind the real web server and shows the exporter serving throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from async_helpers import WAIT_SECONDS, run
from exposition_reader import nvidia_smi_part, parse, sample_value
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.backends import Backend, CollectionError
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.runner import SubprocessRunner, UnrunnableCommand
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.exposition.families import STUCK_CHILDREN, STUCK_CHILDREN_TOTAL
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.httpserver.server import bind_socket
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
    StuckChildren,
)
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from nvidia_gpu_exporter.web.server import WebServer, build_app
from nvml_fixtures import InProcessFake
from polling import eventually
from wedged import WedgedDriver

GAUGE, TOTAL = STUCK_CHILDREN.name, STUCK_CHILDREN_TOTAL.name
FIELDS = (*(QueryField(name, name) for name in IDENTITY_FIELDS), QueryField("temperature.gpu", "temperature.gpu"))
CELLS = {
    "uuid": "GPU-aaaaaaaa-0000-4000-8000-000000000001",
    "name": "NVIDIA Test GPU",
    "driver_model.current": "[N/A]",
    "driver_model.pending": "[N/A]",
    "vbios_version": "96.00.00.00.01",
    "driver_version": "550.54.15",
    "pci.bus_id": "00000000:01:00.0",
    "serial": "1320000000000",
    "compute_cap": "9.0",
    "pci.sub_device_id": "0x17F010DE",
    "index": "0",
    "temperature.gpu": "41",
}
ROW = tuple(CELLS[field.qfield] for field in FIELDS)
CSV = ", ".join(field.rfield for field in FIELDS) + "\n" + ", ".join(ROW) + "\n"
READINGS = Readings(GpuTable((ROW,)), None, "12.4")
T0 = 1_700_000_000.0


def stuck_values(text: str) -> tuple[float | None, float | None]:
    return sample_value(text, GAUGE), sample_value(text, TOTAL)


# -- exposition: rendered whatever the outcome, never touching nvidia_smi_* ---------------------------------

OUTCOMES = {
    "no-collection-yet": None,
    "a-failed-collection": Attempt(None, -1, 0.5, T0, error="nvidia-smi failed: not starting nvidia-smi"),
    "a-successful-collection": Attempt(READINGS, 0, 0.5, T0),
}
STUCK_READINGS = {
    "no-reading-no-series (nvml, demo)": (None, (None, None)),
    "nothing-stuck-is-zero": (StuckChildren(), (0.0, 0.0)),
    "one-stuck-of-three-ever": (StuckChildren(1, 3), (1.0, 3.0)),
}


@pytest.mark.parametrize(("reading", "expected"), STUCK_READINGS.values(), ids=STUCK_READINGS.keys())
@pytest.mark.parametrize("attempt", OUTCOMES.values(), ids=OUTCOMES.keys())
def test_the_families_follow_the_reading_whatever_the_collection_outcome(
    attempt: Attempt | None, reading: StuckChildren | None, expected: tuple[float | None, float | None]
) -> None:
    exposition = Exposition(FIELDS, StatusFamily.COMMAND_EXIT_CODE)
    text = exposition.render(Snapshot(attempt, 1, T0, 1, stuck_children=reading))
    without = exposition.render(Snapshot(attempt, 1, T0, 1))
    names = [family.name for family in parse(text)]
    assert len(names) == len(set(names)), names  # a counter's family is named without _total
    assert stuck_values(text) == expected
    assert nvidia_smi_part(text) == nvidia_smi_part(without)
    if reading is not None:
        assert STUCK_CHILDREN.header() in text
        assert STUCK_CHILDREN_TOTAL.header() in text


def test_the_families_are_declared_outside_nvidia_smi_as_a_gauge_and_a_counter() -> None:
    assert (STUCK_CHILDREN.name, STUCK_CHILDREN.type, STUCK_CHILDREN.labels) == (
        "nvidia_gpu_exporter_stuck_children",
        "gauge",
        (),
    )
    assert (STUCK_CHILDREN_TOTAL.name, STUCK_CHILDREN_TOTAL.type, STUCK_CHILDREN_TOTAL.labels) == (
        "nvidia_gpu_exporter_children_stuck_total",
        "counter",
        (),
    )


# -- backends: the exec backend reports its runner's children, the others have none -------------------------


def _exec_backend(runner: SubprocessRunner | UnrunnableCommand) -> SmiBackend:
    return SmiBackend(runner, FIELDS, cuda_version="12.4", compute_apps=False)


def _demo_backend() -> Backend:
    from nvidia_gpu_exporter.backends.demo.backend import DemoBackend

    return run(lambda: DemoBackend.start(FieldRequest(), config_path="", compute_apps=False))


BACKENDS: dict[str, tuple[Callable[[], Backend], StuckChildren | None]] = {
    "exec-reports-its-runner's-children": (lambda: _exec_backend(SubprocessRunner(["nvidia-smi"])), StuckChildren()),
    "exec-with-an-unsplittable-command-reports-none-stuck": (
        lambda: _exec_backend(UnrunnableCommand("invalid --nvidia-smi-command")),
        StuckChildren(),
    ),
    "demo-runs-no-children": (_demo_backend, None),
    "the-tests'-fake-backend-runs-no-children": (FakeBackend, None),
}


@pytest.mark.parametrize(("make", "expected"), BACKENDS.values(), ids=BACKENDS.keys())
def test_each_backend_says_whether_it_has_stuck_children(
    make: Callable[[], Backend], expected: StuckChildren | None
) -> None:
    assert make().stuck_children() == expected


def test_the_nvml_backend_runs_no_children(fake_nvml: InProcessFake) -> None:
    from nvidia_gpu_exporter.backends.nvml import open_backend

    backend = open_backend(FieldRequest(), watch_xids=False)
    try:
        assert backend.stuck_children() is None
    finally:
        backend.session.close(5)


# -- collector: every snapshot carries the backend's reading ------------------------------------------------


def _scrape_after_success() -> Snapshot:
    async def main() -> Snapshot:
        backend = FakeBackend()
        backend.stuck = StuckChildren(1, 2)
        return await Collector(backend, timeout_seconds=None).scrape()

    return run(main)


def _scrape_after_failure() -> Snapshot:
    async def main() -> Snapshot:
        backend = FakeBackend([CollectionError("nvidia-smi failed")])
        backend.stuck = StuckChildren(1, 2)
        return await Collector(backend, timeout_seconds=None).scrape()

    return run(main)


def _scrape_that_gave_up() -> Snapshot:
    async def main() -> Snapshot:
        backend = FakeBackend(gated=True)
        backend.stuck = StuckChildren(1, 2)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=60.0)
        collector.start()
        try:
            return await collector.scrape()  # background mode, before the first collection: no result
        finally:
            await collector.aclose()

    return run(main)


SNAPSHOTS: dict[str, Callable[[], Snapshot]] = {
    "a-successful-collection-carries-it": _scrape_after_success,
    "a-failed-collection-carries-it": _scrape_after_failure,
    "a-snapshot-without-a-result-carries-it": _scrape_that_gave_up,
}


@pytest.mark.parametrize("scrape", SNAPSHOTS.values(), ids=SNAPSHOTS.keys())
def test_every_snapshot_carries_the_backend_reading(scrape: Callable[[], Snapshot]) -> None:
    assert scrape().stuck_children == StuckChildren(1, 2)


# -- HTTP -----------------------------------------------------------------------------------------------------


@dataclass
class Served:
    url: str
    collector: Collector


@contextlib.asynccontextmanager
async def serving(backend: Backend, *, interval_seconds: float, timeout_seconds: float | None) -> AsyncIterator[Served]:
    """The real web server on 127.0.0.1:0 in front of a collector of ``backend``."""
    settings = web_settings(Config())
    collector = Collector(backend, timeout_seconds=timeout_seconds, interval_seconds=interval_seconds)
    endpoint = MetricsEndpoint(collector, Exposition(backend.fields, backend.status_family), settings)
    server = WebServer(build_app(endpoint, settings), settings)
    await server.start([bind_socket("127.0.0.1:0")])
    collector.start()
    try:
        yield Served(f"http://{server.addresses[0]}/metrics", collector)
    finally:
        await collector.aclose()
        await server.stop()


async def scrape(url: str) -> str:
    timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.text()


def test_a_changed_reading_is_served_even_when_no_collection_has_finished() -> None:
    """The render cache keys on the reading too: without a new snapshot sequence, a recovery still shows."""

    async def main() -> tuple[str, str]:
        backend = FakeBackend(gated=True, fields=FIELDS)
        backend.stuck = StuckChildren(1, 1)
        async with serving(backend, interval_seconds=60.0, timeout_seconds=None) as served:
            before = await scrape(served.url)
            backend.stuck = StuckChildren(0, 1)
            return before, await scrape(served.url)

    before, after = run(main)
    assert stuck_values(before) == (1.0, 1.0)
    assert stuck_values(after) == (0.0, 1.0)


async def _until(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    """Await ``probe()`` until it is true, bounded in time (each call is one scrape)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 6 * WAIT_SECONDS
    while not await probe():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


HELD_BOUND = 0.5  # the runner's reap bound: a held kill never takes effect, so a short one keeps this quick
COLLECT_TIMEOUT = 0.3
MODES = {"synchronous-scrapes": 0.0, "background-collection": 0.1}


@pytest.mark.parametrize("interval", MODES.values(), ids=MODES.keys())
def test_a_wedged_driver_never_stops_the_exporter_serving(tmp_path: Path, interval: float) -> None:
    """Stuck: 1, collections fail at once and spawn nothing; the child exits: 0, collections succeed again."""
    driver = WedgedDriver.create(tmp_path / "smi", answer=CSV)
    driver.hang()
    backend = _exec_backend(driver.runner(HELD_BOUND))

    async def main() -> tuple[list[str], int, str]:
        try:
            async with serving(backend, interval_seconds=interval, timeout_seconds=COLLECT_TIMEOUT) as served:
                return await wedge_and_recover(served)
        finally:
            await driver.let_go()

    async def wedge_and_recover(served: Served) -> tuple[list[str], int, str]:
        texts: list[str] = []

        async def stuck_scrape() -> bool:
            texts.append(await scrape(served.url))
            return stuck_values(texts[-1]) == (1.0, 1.0)

        await _until(stuck_scrape, "a scrape showing the stuck child")
        spawned = len(driver.spawned)
        collections = served.collector.collections
        while_stuck = [await scrape(served.url) for _ in range(3)]
        await eventually(lambda: served.collector.collections > collections + 1, "collections while stuck")
        while_stuck.append(await scrape(served.url))
        spawns_while_stuck = len(driver.spawned) - spawned
        driver.release()

        async def recovered_scrape() -> bool:
            texts.append(await scrape(served.url))
            return sample_value(texts[-1], "nvidia_smi_last_collect_success") == 1.0

        await _until(recovered_scrape, "a successful collection after the child exited")
        return while_stuck, spawns_while_stuck, texts[-1]

    try:
        while_stuck, spawns_while_stuck, recovered = run(main)
    finally:
        driver.kill_all()
    assert spawns_while_stuck == 0
    for text in while_stuck:
        assert stuck_values(text) == (1.0, 1.0)
        assert sample_value(text, "nvidia_smi_last_collect_success") == 0.0
        assert sample_value(text, "nvidia_smi_command_exit_code") == -1.0
    assert stuck_values(recovered) == (0.0, 1.0)
    assert sample_value(recovered, "nvidia_smi_temperature_gpu", {"uuid": "aaaaaaaa-0000-4000-8000-000000000001"}) == 41
