"""The metrics route's protobuf answers (docs/compatibility.md, "Content negotiation"), driven in process: every
part of the answer (the self-metrics before and after the GPUs' families, and the GPUs' body, made on the event
loop or, for a large snapshot, in a thread) is the protobuf of the text answer; the DCGM profiles never answer it."""

from __future__ import annotations

import asyncio
import math

import pytest

from async_helpers import bounded, run
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config, Profile
from nvidia_gpu_exporter.exposition import selfmetrics
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.protobuf import to_protobuf
from nvidia_gpu_exporter.exposition.text import signed_zeros
from nvidia_gpu_exporter.httpserver.http import Headers, Request, Response
from nvidia_gpu_exporter.model.snapshot import GpuTable, Readings
from nvidia_gpu_exporter.web import metrics
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from polling import eventually
from protobuf_reader import families
from test_web_app import FIELDS, READINGS, UUID_A, UUID_B, gpu_row
from unit_helpers import exposition, success_snapshot
from unit_helpers import gpu_row as unit_gpu_row

PROTOBUF = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
PROTOBUF_ANSWER = (
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; escaping=underscores"
)
WHERE = [pytest.param(metrics.OFF_LOOP_RENDER_ROWS, id="on-the-loop"), pytest.param(0, id="in-a-thread")]


async def _scrape(endpoint: MetricsEndpoint, accept: str | None) -> Response:
    headers = Headers([("accept", accept)] if accept else [])
    response = await bounded(endpoint.handle(Request("GET", "/metrics", headers)))
    assert response.status == 200, response.text
    return response


def _answers(
    profile: Profile, readings: Readings = READINGS, *, protobuf_first: bool = False
) -> tuple[Response, Response]:
    """The text answer and the protobuf-asking answer of one collection (text first unless said), under ``profile``."""

    async def main() -> tuple[Response, Response]:
        backend = FakeBackend(fields=FIELDS, readings=readings)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=3600)
        endpoint = MetricsEndpoint(
            collector,
            Exposition(FIELDS, backend.status_family),
            web_settings(Config(max_requests=0, metrics_profile=profile)),
        )
        collector.start()
        try:
            await eventually(lambda: collector.collections == 1, "the first background collection")
            if protobuf_first:
                protobuf = await _scrape(endpoint, PROTOBUF)
                endpoint.stats.requests["200"] -= 1
                return await _scrape(endpoint, None), protobuf
            text = await _scrape(endpoint, None)
            endpoint.stats.requests["200"] -= 1  # the protobuf scrape sees the counters the text one saw
            return text, await _scrape(endpoint, PROTOBUF)
        finally:
            await collector.aclose()

    return run(main)


@pytest.mark.parametrize("rows", WHERE)
def test_a_protobuf_answer_is_the_text_answer_encoded(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", rows)
    monkeypatch.setattr(selfmetrics, "process_values", lambda: {"process_open_fds": 7.0})
    text, protobuf = _answers(Profile.NVIDIA_SMI)
    assert protobuf.headers["Content-Type"] == PROTOBUF_ANSWER
    assert protobuf.joined() == to_protobuf(text.joined())
    names = [family.name for family in families(protobuf.joined())]
    assert "nvidia_smi_temperature_gpu" in names
    assert "promhttp_metric_handler_requests_total" in names  # the last part, per request


@pytest.mark.parametrize("profile", [Profile.DCGM, Profile.BOTH])
def test_the_dcgm_profiles_answer_text_to_a_protobuf_scrape(profile: Profile) -> None:
    """As dcgm-exporter, whose /metrics handler writes its text whatever Accept says."""
    text, asked = _answers(profile)
    assert asked.headers["Content-Type"] == text.headers["Content-Type"]
    assert asked.headers["Content-Type"].startswith("text/plain; version=0.0.4")


@pytest.mark.parametrize("protobuf_first", [False, True], ids=["text-first", "protobuf-first"])
@pytest.mark.parametrize("rows", WHERE)
def test_a_negative_zero_keeps_its_sign_in_protobuf_only(
    monkeypatch: pytest.MonkeyPatch, rows: int, protobuf_first: bool
) -> None:
    """Go's protobuf keeps a reading's sign bit (a cell ``-0``), which its text drops (``0``, as ours), whichever
    format asked first (the exposition caches each cell's text)."""
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", rows)
    readings = Readings(GpuTable((gpu_row(UUID_A, "0", "-0"), gpu_row(UUID_B, "1", "0"))), None, "12.4")
    text, protobuf = _answers(Profile.NVIDIA_SMI, readings, protobuf_first=protobuf_first)
    assert [line.rpartition(" ")[2] for line in text.text.splitlines() if line.startswith("nvidia_smi_temp")] == [
        "0",
        "0",
    ]
    (family,) = (family for family in families(protobuf.joined()) if family.name == "nvidia_smi_temperature_gpu")
    assert [math.copysign(1.0, sample.value) for sample in family.samples] == [-1.0, 1.0]


@pytest.mark.parametrize("order", [("text", "signed", "text"), ("signed", "text", "signed")])
def test_a_signed_render_never_leaks_into_a_text_render(order: tuple[str, ...]) -> None:
    """The exposition caches each cell's text across renders: a negative zero is ``0`` in every text render and
    ``-0`` in every render for protobuf, in any order."""
    built, fields = exposition([("temperature.gpu", "temperature.gpu")])
    snapshot = success_snapshot([unit_gpu_row(fields, temperature_gpu="-0")])
    for kind in order:
        if kind == "signed":
            with signed_zeros():
                rendered = built.render(snapshot)
        else:
            rendered = built.render(snapshot)
        (line,) = (line for line in rendered.splitlines() if line.startswith("nvidia_smi_temperature_gpu{"))
        assert line.endswith(" -0" if kind == "signed" else " 0"), (kind, line)


def test_concurrent_first_protobuf_scrapes_of_a_large_snapshot_encode_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """As gzip: the scrapes that ask while a thread makes the protobuf body wait for that one, not a thread each."""
    monkeypatch.setattr(metrics, "OFF_LOOP_RENDER_ROWS", 0)
    encoded: list[bytes] = []

    def counting(text: bytes) -> bytes:
        if b"nvidia_smi_temperature_gpu" in text:
            encoded.append(text)
        return to_protobuf(text)

    monkeypatch.setattr(metrics, "to_protobuf", counting)

    async def main() -> list[Response]:
        backend = FakeBackend(fields=FIELDS, readings=READINGS)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=3600)
        endpoint = MetricsEndpoint(collector, Exposition(FIELDS, backend.status_family), web_settings(Config()))
        collector.start()
        try:
            await eventually(lambda: collector.collections == 1, "the first background collection")
            return list(await bounded(asyncio.gather(*(_scrape(endpoint, PROTOBUF) for _ in range(4)))))
        finally:
            await collector.aclose()

    answers = run(main)
    assert len(encoded) == 1
    for answer in answers:
        assert "nvidia_smi_temperature_gpu" in [family.name for family in families(answer.joined())]
