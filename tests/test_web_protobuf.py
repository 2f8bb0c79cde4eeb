"""The metrics route's protobuf answers (docs/compatibility.md, "Content negotiation"), driven in process: every
part of the answer (the self-metrics before and after the GPUs' families, and the GPUs' body, made on the event
loop or, for a large snapshot, in a thread) is the protobuf of the text answer; the DCGM profiles never answer it."""

from __future__ import annotations

import pytest

from async_helpers import bounded, run
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config, Profile
from nvidia_gpu_exporter.exposition import selfmetrics
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.protobuf import to_protobuf
from nvidia_gpu_exporter.httpserver.http import Headers, Request, Response
from nvidia_gpu_exporter.web import metrics
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from polling import eventually
from protobuf_reader import families
from test_web_app import FIELDS, READINGS

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


def _answers(profile: Profile) -> tuple[Response, Response]:
    """The text answer and then the protobuf-asking answer of one collection, under ``profile``."""

    async def main() -> tuple[Response, Response]:
        backend = FakeBackend(fields=FIELDS, readings=READINGS)
        collector = Collector(backend, timeout_seconds=None, interval_seconds=3600)
        endpoint = MetricsEndpoint(
            collector,
            Exposition(FIELDS, backend.status_family),
            web_settings(Config(max_requests=0, metrics_profile=profile)),
        )
        collector.start()
        try:
            await eventually(lambda: collector.collections == 1, "the first background collection")
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
