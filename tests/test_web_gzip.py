"""Gzip on demand (docs/architecture.md, "Gzip on demand"): a collection's body is compressed only when a scrape
asks for gzip, once however many scrapes ask (concurrent first ones included), and a gzip answer is one gzip
member that decompresses to exactly the plain answer. The metrics route is driven in process (``handle()``), so the
self-metrics move only when the test moves them."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import threading
import zlib
from collections.abc import AsyncIterator

import pytest

from async_helpers import bounded, run
from exposition_reader import nvidia_smi_part
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.exposition import selfmetrics
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.httpserver.http import Headers, Request, Response
from nvidia_gpu_exporter.web import metrics
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from polling import eventually
from spies import DeflateSpy, spy_deflate
from test_web_app import FIELDS, READINGS

BODY = b"nvidia_smi_temperature_gpu"  # in the collection's body (any format), never in the self-metrics
OPENMETRICS = "application/openmetrics-text;version=1.0.0"
PROTOBUF = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
FORMATS = [
    pytest.param(None, id="text"),
    pytest.param(OPENMETRICS, id="openmetrics"),
    pytest.param(PROTOBUF, id="protobuf"),
]
# The route's two ways to compress a body: on the event loop, or (a snapshot of many rows) in a worker thread.
WHERE = [pytest.param(metrics.OFF_LOOP_RENDER_ROWS, id="on-the-loop"), pytest.param(0, id="in-a-thread")]


@contextlib.asynccontextmanager
async def endpoint_of(backend: FakeBackend, *, interval_seconds: float = 0.0) -> AsyncIterator[MetricsEndpoint]:
    """The metrics route in front of a collector of ``backend``; in background mode, once it has collected."""
    collector = Collector(backend, timeout_seconds=None, interval_seconds=interval_seconds)
    settings = web_settings(Config(max_requests=0, enable_openmetrics=True))  # both formats
    endpoint = MetricsEndpoint(collector, Exposition(backend.fields, backend.status_family), settings)
    collector.start()
    try:
        if interval_seconds:
            await eventually(lambda: collector.collections == 1, "the first background collection")
        yield endpoint
    finally:
        await collector.aclose()


async def scrape(endpoint: MetricsEndpoint, encoding: str, accept: str | None = None) -> Response:
    headers = [("accept-encoding", encoding), *([("accept", accept)] if accept else [])]
    response = await bounded(endpoint.handle(Request("GET", "/metrics", Headers(headers))))
    assert response.status == 200, response.text
    assert response.headers.get("Content-Encoding") == ("gzip" if encoding == "gzip" else None)
    return response


def one_member(body: bytes) -> bytes:
    """The data of ``body``, which must be exactly one gzip member: clients that read only the first member of a
    multi-member stream (zlib's own decompress, curl) must see it all."""
    reader = zlib.decompressobj(wbits=31)
    data = reader.decompress(body)
    assert reader.eof, "the gzip member does not end"
    assert reader.unused_data == b"", "more follows the first gzip member"
    assert gzip.decompress(body) == data
    return data


@pytest.mark.parametrize("rows", WHERE)
def test_gzip_off_deflates_nothing(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Plain scrapes, each of a new collection, in either format: not one deflate stream is made."""
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", rows)
    spy = spy_deflate(monkeypatch)

    async def main() -> None:
        backend = FakeBackend(fields=FIELDS, readings=READINGS)
        async with endpoint_of(backend) as endpoint:
            for accept in (None, OPENMETRICS, None):
                assert BODY in (await scrape(endpoint, "identity", accept)).joined()
        assert backend.calls == 3

    run(main)
    assert (spy.streams, spy.fed) == (0, [])


@pytest.mark.parametrize("rows", WHERE)
def test_gzip_scrapes_of_one_collection_compress_its_body_once(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """The first gzip scrape compresses the body; the next ones of the same collection make no deflate stream at
    all (the body's gzip is reused, the self-metrics go through the one stream the route keeps)."""
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", rows)
    spy = spy_deflate(monkeypatch)

    async def main() -> tuple[int, int]:
        async with endpoint_of(FakeBackend(fields=FIELDS, readings=READINGS), interval_seconds=3600) as endpoint:
            assert (spy.streams, spy.fed) == (0, []), "compressed before any scrape asked for gzip"
            first = one_member((await scrape(endpoint, "gzip")).joined())
            after_first = spy.streams
            second = one_member((await scrape(endpoint, "gzip")).joined())
            third = one_member((await scrape(endpoint, "gzip")).joined())
        assert BODY in first
        assert nvidia_smi_part(first.decode()) == nvidia_smi_part(second.decode()) == nvidia_smi_part(third.decode())
        return after_first, spy.streams

    after_first, after_third = run(main)
    assert spy.fed_with(BODY) == 1
    assert after_third == after_first, "a later gzip scrape of the same collection made a deflate stream"


def test_each_new_collection_is_compressed_once_on_its_first_gzip_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = spy_deflate(monkeypatch)

    async def main() -> None:
        backend = FakeBackend(fields=FIELDS, readings=READINGS)
        async with endpoint_of(backend) as endpoint:  # a collection per scrape
            for _ in range(3):
                one_member((await scrape(endpoint, "gzip")).joined())
        assert backend.calls == 3

    run(main)
    assert spy.fed_with(BODY) == 3


def test_concurrent_first_gzip_scrapes_compress_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scrapes that ask for gzip while the body's compression is under way in a thread wait for that one."""
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", 0)
    gate = threading.Event()
    spy = spy_deflate(monkeypatch, gate)
    scrapes = 5

    async def main() -> list[bytes]:
        async with endpoint_of(FakeBackend(fields=FIELDS, readings=READINGS), interval_seconds=3600) as endpoint:
            answers = [asyncio.ensure_future(scrape(endpoint, "gzip")) for _ in range(scrapes)]
            try:
                await eventually(lambda: endpoint.stats.in_flight == scrapes, "every scrape waiting for the gzip")
                await asyncio.sleep(0.05)  # time for a scrape that would compress on its own to start doing so
            finally:
                gate.set()
            return [one_member(response.joined()) for response in await bounded(asyncio.gather(*answers))]

    bodies = run(main)
    assert spy.fed_with(BODY) == 1
    assert len({nvidia_smi_part(body.decode()) for body in bodies}) == 1
    assert BODY in bodies[0]


def _frozen_process_values(monkeypatch: pytest.MonkeyPatch, values: dict[str, float]) -> None:
    monkeypatch.setattr(selfmetrics, "process_values", lambda: values)


@pytest.mark.parametrize("accept", FORMATS)
def test_a_gzip_answer_is_the_plain_answer_byte_for_byte(monkeypatch: pytest.MonkeyPatch, accept: str | None) -> None:
    """Scrape by scrape, with the self-metrics moving between them (a part unchanged, a part changed, the request
    counters every time): each gzip answer decompresses to exactly the plain answer given
    with the same counters."""
    _frozen_process_values(monkeypatch, {"process_open_fds": 7.0})

    async def main() -> None:
        async with endpoint_of(FakeBackend(fields=FIELDS, readings=READINGS), interval_seconds=3600) as endpoint:
            for round_ in range(5):
                if round_ == 2:
                    endpoint.stats.connections.open += 1
                if round_ == 3:
                    _frozen_process_values(monkeypatch, {"process_open_fds": 8.0})
                if round_ == 4:
                    endpoint.stats.errors["gathering"] += 1
                counted = dict(endpoint.stats.requests)
                zipped = one_member((await scrape(endpoint, "gzip", accept)).joined())
                endpoint.stats.requests = counted  # the plain scrape sees the counters the gzip one saw
                plain = (await scrape(endpoint, "identity", accept)).joined()
                assert zipped == plain, f"round {round_}"
                assert BODY in plain
                if accept == OPENMETRICS:
                    assert plain.endswith(b"# EOF\n")

    run(main)


def test_gzip_stays_a_copy_of_plain_when_the_self_metrics_change_every_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many gzip scrapes through the route's one stream, text, OpenMetrics and protobuf in turn: each answer is one
    gzip member, and its data is the plain answer's with the same counters."""
    spy: DeflateSpy = spy_deflate(monkeypatch)
    _frozen_process_values(monkeypatch, {"process_open_fds": 7.0})

    async def main() -> None:
        async with endpoint_of(FakeBackend(fields=FIELDS, readings=READINGS), interval_seconds=3600) as endpoint:
            for round_ in range(20):
                accept = (None, OPENMETRICS, PROTOBUF, None)[round_ % 4]
                endpoint.stats.connections.closed["evicted"] += round_ % 2
                counted = dict(endpoint.stats.requests)
                zipped = one_member((await scrape(endpoint, "gzip", accept)).joined())
                endpoint.stats.requests = counted
                assert zipped == (await scrape(endpoint, "identity", accept)).joined(), f"round {round_}"

    run(main)
    assert spy.fed_with(BODY) == 3  # the text, OpenMetrics and protobuf bodies, each once
