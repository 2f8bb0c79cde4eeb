"""The HTTP surface of the real exporter process: routes, health, content negotiation, the concurrency limit,
the scrape-timeout header and single-flight collection, all over loopback HTTP.

Slow collections come from ``tests/fixtures/scripts/fake-smi-wrapper.sh``, which delays (or replaces) only the
collection runs once the test asks for it, so the exporter's startup runs stay fast.
"""

from __future__ import annotations

import gzip
import http.client
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric

import protobuf_reader
from conftest import StartExporter
from exposition_reader import comparable, parse, parse_openmetrics, parsed_names, sample_value, samples
from harness import FIXTURE_CAPTURES, Exporter, Response, Wrapper, fake_smi_command, process_gone, start_exporter
from nvidia_gpu_exporter.exposition.families import WALL_CLOCK_FAMILIES
from nvidia_gpu_exporter.exposition.protobuf import varint
from polling import wait_until
from test_unit_protobuf import golden_protobuf

MIG_FIXTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
WINDOWS_FIXTURE = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
HEALTHY_BODY = "Nvidia GPU Exporter is Healthy.\n"
READY_BODY = "Nvidia GPU Exporter is Ready.\n"
NOT_FOUND_BODY = "404 page not found\n"
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="the wrapper script needs /bin/sh")


# -- helpers ----------------------------------------------------------------------------------------------


def request(handle: Exporter, method: str, path: str, headers: dict[str, str] | None = None) -> Response:
    """Any method, raw bytes back (no decompression)."""
    host, port = handle.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        reply = connection.getresponse()
        return Response(reply.status, dict(reply.getheaders()), reply.read())
    finally:
        connection.close()


def header(response: Response, name: str) -> str | None:
    for key, value in response.headers.items():
        if key.lower() == name.lower():
            return value
    return None


@pytest.fixture(scope="module")
def served() -> Iterator[Exporter]:
    """One exporter on the two-GPU fixture, shared by the read-only routing checks."""
    handle = start_exporter(["--nvidia-smi-command", fake_smi_command(MIG_FIXTURE)])
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def served_openmetrics() -> Iterator[Exporter]:
    """The same with ``--web.enable-openmetrics``."""
    handle = start_exporter(["--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), "--web.enable-openmetrics"])
    yield handle
    handle.stop()


# -- routes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        pytest.param("GET", "/-/healthy", 200, HEALTHY_BODY, id="healthy"),
        pytest.param("GET", "/-/ready", 200, READY_BODY, id="ready"),
        pytest.param("HEAD", "/-/healthy", 200, "", id="head-healthy"),
        pytest.param("HEAD", "/-/ready", 200, "", id="head-ready"),
        pytest.param("HEAD", "/", 200, "", id="head-landing"),
        pytest.param("HEAD", "/metrics", 200, "", id="head-metrics"),
        pytest.param("GET", "/nope", 404, NOT_FOUND_BODY, id="unknown-path-404"),
        pytest.param("GET", "/metrics/", 404, NOT_FOUND_BODY, id="trailing-slash-is-another-path"),
        pytest.param("GET", "/-/healthy/extra", 404, NOT_FOUND_BODY, id="below-health-404"),
        pytest.param("GET", "/debug/pprof/", 404, NOT_FOUND_BODY, id="pprof-404-when-disabled"),
        pytest.param("GET", "/debug/pprof/cmdline", 404, NOT_FOUND_BODY, id="pprof-cmdline-404-when-disabled"),
        pytest.param("POST", "/metrics", 405, None, id="post-metrics-405"),
        pytest.param("POST", "/-/healthy", 405, None, id="post-healthy-405"),
        pytest.param("DELETE", "/", 405, None, id="delete-landing-405"),
    ],
)
def test_route(served: Exporter, method: str, path: str, status: int, body: str | None) -> None:
    response = request(served, method, path)
    assert response.status == status
    if body is not None:
        assert response.text == body


@pytest.mark.parametrize("path", ["/-/healthy", "/-/ready"])
def test_health_routes_are_plain_text(served: Exporter, path: str) -> None:
    assert header(request(served, "GET", path), "Content-Type") == TEXT_CONTENT_TYPE


def test_landing_page_names_the_exporter_and_links_the_metrics(served: Exporter) -> None:
    response = request(served, "GET", "/")
    assert response.status == 200
    assert header(response, "Content-Type") == "text/html; charset=UTF-8"  # exporter-toolkit's landing page
    assert "Nvidia GPU Exporter" in response.text
    assert 'href="/metrics"' in response.text
    assert "/debug/pprof" not in response.text


def test_metrics_route_serves_text_format_with_handler_counters(served: Exporter) -> None:
    response = request(served, "GET", "/metrics")
    assert response.status == 200
    assert header(response, "Content-Type") == METRICS_CONTENT_TYPE
    assert header(response, "Content-Encoding") is None
    assert "promhttp_metric_handler_errors_total" in response.text
    families = parsed_names(response.text)
    assert {"nvidia_smi_gpu_info", "nvidia_smi_last_collect_success", "promhttp_metric_handler_errors"} <= set(families)


def test_gzip_is_served_when_accepted(served: Exporter) -> None:
    plain = request(served, "GET", "/metrics")
    zipped = request(served, "GET", "/metrics", {"Accept-Encoding": "gzip"})
    assert zipped.status == 200
    assert header(zipped, "Content-Encoding") == "gzip"
    assert header(zipped, "Content-Type") == METRICS_CONTENT_TYPE
    unzipped = gzip.decompress(zipped.body).decode("utf-8")
    parse(unzipped)
    assert comparable(unzipped) == comparable(plain.text)
    assert "nvidia_smi_gpu_info{" in unzipped


# Prometheus' scrape Accept headers: 2.x (scrape_protocols default) and 3.x (which adds escaping and text 1.0.0).
PROMETHEUS_ACCEPT = {
    "prometheus 2": (
        "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
        "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    ),
    "prometheus 3": (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
        "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
        "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
    ),
}


def nvidia_smi_samples(families: list[Metric]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in families
        if family.name.startswith("nvidia_smi_") and family.name not in WALL_CLOCK_FAMILIES
        for sample in family.samples
    }


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
@pytest.mark.parametrize("scraper", list(PROMETHEUS_ACCEPT))
def test_prometheus_accept_header_gets_openmetrics_when_enabled(
    served_openmetrics: Exporter, served: Exporter, scraper: str, encoding: str
) -> None:
    accept, content_type = PROMETHEUS_ACCEPT[scraper]
    response = request(served_openmetrics, "GET", "/metrics", {"Accept": accept, "Accept-Encoding": encoding})
    assert response.status == 200
    assert header(response, "Content-Type") == content_type
    body = gzip.decompress(response.body) if encoding == "gzip" else response.body
    text = body.decode("utf-8")
    assert text.endswith("\n# EOF\n")
    openmetrics = parse_openmetrics(text)
    plain = parse(request(served, "GET", "/metrics").text)
    assert nvidia_smi_samples(openmetrics) == nvidia_smi_samples(plain)
    assert [family.name for family in openmetrics] == [family.name for family in plain]
    assert "# TYPE nvidia_smi_failed_scrapes counter\nnvidia_smi_failed_scrapes_total 0.0\n" in text


# What the Go exporter v1.14.0 answered to each scraper's header (its handler has OpenMetrics off): text 0.0.4,
# with Prometheus 3's escaping repeated (docs/compatibility.md, "Content negotiation").
PROMETHEUS_ACCEPT_BY_DEFAULT = {
    "prometheus 2": "text/plain; version=0.0.4; charset=utf-8",
    "prometheus 3": "text/plain; version=0.0.4; charset=utf-8; escaping=allow-utf-8",
}


@pytest.mark.parametrize("scraper", list(PROMETHEUS_ACCEPT))
def test_prometheus_accept_header_gets_text_by_default_as_from_the_go_exporter(served: Exporter, scraper: str) -> None:
    response = request(served, "GET", "/metrics", {"Accept": PROMETHEUS_ACCEPT[scraper][0]})
    assert response.status == 200
    assert header(response, "Content-Type") == PROMETHEUS_ACCEPT_BY_DEFAULT[scraper]
    assert "# EOF" not in response.text
    parse(response.text)


@pytest.mark.parametrize(
    "accept",
    [
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text",
        "application/json",
        "text/plain;version=0.0.4",
        "*/*",
    ],
)
def test_other_accept_headers_get_text(served: Exporter, accept: str) -> None:
    response = request(served, "GET", "/metrics", {"Accept": accept})
    assert response.status == 200
    assert header(response, "Content-Type") == METRICS_CONTENT_TYPE
    assert "# EOF" not in response.text
    parse(response.text)


# Prometheus' header with native histograms on (scrape_protocols: PrometheusProto first)
PROTOBUF_SCRAPE = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,"
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_protobuf_scrape_gets_the_go_exporters_bytes(served: Exporter, encoding: str) -> None:
    """The ``nvidia_smi_*`` families but the wall-clock ones, each message byte for byte as the Go binary served them
    on this fixture (tests/test_unit_protobuf.py says how they were captured)."""
    response = request(served, "GET", "/metrics", {"Accept": PROTOBUF_SCRAPE, "Accept-Encoding": encoding})
    assert response.status == 200
    assert header(response, "Content-Type") == (
        "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited; "
        "escaping=underscores"
    )
    body = gzip.decompress(response.body) if encoding == "gzip" else response.body
    assert header(response, "Content-Encoding") == ("gzip" if encoding == "gzip" else None)
    compared = b"".join(
        varint(len(message)) + message
        for message in protobuf_reader.delimited(body)
        if (name := protobuf_reader.family(message).name).startswith("nvidia_smi_") and name not in WALL_CLOCK_FAMILIES
    )
    assert compared == golden_protobuf()


def test_gzip_refused_with_zero_quality_serves_plain_text(served: Exporter) -> None:
    response = request(served, "GET", "/metrics", {"Accept-Encoding": "gzip;q=0"})
    assert header(response, "Content-Encoding") is None
    assert "nvidia_smi_gpu_info{" in response.text


def test_pprof_routes_are_served_when_enabled(exporter: StartExporter) -> None:
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(MIG_FIXTURE),
        "--web.enable-pprof",
        "--web.enable-pprof-unauthenticated",
    )
    index = request(handle, "GET", "/debug/pprof/")
    cmdline = request(handle, "GET", "/debug/pprof/cmdline")
    landing = request(handle, "GET", "/")
    assert index.status == 200
    assert cmdline.status == 200
    assert "--web.enable-pprof" in cmdline.text
    assert "/debug/pprof/" in landing.text
    assert request(handle, "POST", "/debug/pprof/").status == 405


@pytest.mark.parametrize("path", ["/custom-metrics", "/debug/pprofile"])
def test_custom_telemetry_path_serves_metrics_and_frees_the_default(exporter: StartExporter, path: str) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), f"--web.telemetry-path={path}")
    body = handle.scrape(path)
    assert "nvidia_smi_gpu_info{" in body
    parse(body)
    default = request(handle, "GET", "/metrics")
    assert default.status == 404
    assert default.text == NOT_FOUND_BODY
    assert f'href="{path}"' in request(handle, "GET", "/").text


# -- concurrency limit ------------------------------------------------------------------------------------


@posix_only
def test_excess_concurrent_scrape_is_refused_at_once_with_503(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter("--nvidia-smi-command", wrapper.command(MIG_FIXTURE), "--web.max-requests=1")
    wrapper.set("delay", "3s")
    before = len(wrapper.gpu_queries())
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(handle.get, "/metrics")
        wait_until(lambda: len(wrapper.gpu_queries()) > before, "the first scrape's collection to start")
        started = time.monotonic()
        refused = handle.get("/metrics")
        refused_after = time.monotonic() - started
        healthy = handle.get("/-/healthy")
        answered = first.result(timeout=30)
    assert refused.status == 503
    assert refused.text == "limit of 1 concurrent requests reached, try again later\n"
    assert header(refused, "Content-Type") == TEXT_CONTENT_TYPE
    assert refused_after < 2.0  # refused at once, not queued behind the 3 s collection
    assert healthy.status == 200
    assert healthy.text == HEALTHY_BODY
    assert answered.status == 200
    assert sample_value(answered.text, "nvidia_smi_last_collect_success") == 1
    assert 'promhttp_metric_handler_requests_total{code="503"} 1\n' in answered.text
    wait_until(lambda: "refused a scrape: concurrent request limit reached" in handle.log, "the refusal's warning")


@posix_only
def test_zero_max_requests_means_unlimited(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter("--nvidia-smi-command", wrapper.command(MIG_FIXTURE), "--web.max-requests=0")
    wrapper.set("delay", "500ms")
    with ThreadPoolExecutor(3) as pool:
        responses = [future.result(timeout=30) for future in [pool.submit(handle.get) for _ in range(3)]]
    assert [response.status for response in responses] == [200, 200, 200]


# -- scrape-timeout header and single flight --------------------------------------------------------------


@posix_only
def test_scrape_timeout_header_bounds_a_synchronous_scrape(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(
        "--nvidia-smi-command",
        wrapper.command(MIG_FIXTURE),
        "--web.timeout-offset=100ms",
        "--collect.timeout=60s",
    )
    wrapper.set("delay", "30s")
    started = time.monotonic()
    response = handle.get("/metrics", {TIMEOUT_HEADER: "1"})
    elapsed = time.monotonic() - started

    assert response.status == 200
    assert elapsed < 15.0  # answered after the 1 s budget, long before the 30 s collection could finish
    body = response.text
    parse(body)
    assert sample_value(body, "nvidia_smi_last_collect_success") == 0
    assert sample_value(body, "nvidia_smi_failed_scrapes_total") == 0
    assert samples(body, "nvidia_smi_gpu_info") == []
    for family in (
        "nvidia_smi_command_exit_code",
        "nvidia_smi_last_collect_duration_seconds",
        "nvidia_smi_last_collect_success_timestamp_seconds",
    ):
        assert family not in body

    # The scrape was the only waiter: its collection is abandoned, the child killed, the run counted nowhere.
    abandoned_pid = wrapper.gpu_queries()[-1]
    wait_until(lambda: process_gone(abandoned_pid), "the abandoned nvidia-smi to be killed", timeout=10)
    (wrapper.control / "delay").unlink()
    after = handle.scrape()
    assert sample_value(after, "nvidia_smi_last_collect_success") == 1
    assert sample_value(after, "nvidia_smi_failed_scrapes_total") == 0


@posix_only
def test_scrape_timeout_header_not_above_the_offset_is_ignored(exporter: StartExporter, tmp_path: Path) -> None:
    # 0.05 s minus a 100 ms offset leaves no budget: the header is ignored rather than making the scrape
    # give up at once (the other ignored values are covered in-process by test_web_app).
    wrapper = Wrapper.create(tmp_path)
    handle = exporter("--nvidia-smi-command", wrapper.command(MIG_FIXTURE), "--web.timeout-offset=100ms")
    wrapper.set("delay", "500ms")
    body = handle.scrape(headers={TIMEOUT_HEADER: "0.05"})
    assert sample_value(body, "nvidia_smi_last_collect_success") == 1
    assert "nvidia_smi_gpu_info{" in body


@posix_only
def test_concurrent_scrapes_share_one_collection(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter("--nvidia-smi-command", wrapper.command(MIG_FIXTURE))
    wrapper.set("delay", "2s")
    before = len(wrapper.gpu_queries())
    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(handle.get) for _ in range(5)]
        responses = [future.result(timeout=60) for future in futures]

    assert [response.status for response in responses] == [200] * 5
    bodies = [response.text for response in responses]
    for body in bodies:
        parse(body)
        assert sample_value(body, "nvidia_smi_last_collect_success") == 1
    assert len(wrapper.gpu_queries()) - before == 1  # one nvidia-smi run served all five
    timestamps = {tuple(samples(body, "nvidia_smi_last_collect_success_timestamp_seconds")) for body in bodies}
    durations = {tuple(samples(body, "nvidia_smi_last_collect_duration_seconds")) for body in bodies}
    assert len(timestamps) == 1
    assert len(durations) == 1
    assert {comparable(body) for body in bodies} == {comparable(bodies[0])}


@posix_only
def test_scrape_after_a_finished_collection_runs_nvidia_smi_again(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter("--nvidia-smi-command", wrapper.command(MIG_FIXTURE))
    before = len(wrapper.gpu_queries())
    handle.scrape()
    handle.scrape()
    assert len(wrapper.gpu_queries()) - before == 2


# -- exposition validity ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "fake_args", "extra_flags"),
    [
        pytest.param(MIG_FIXTURE, ("--exit", "7"), (), id="failing-nvidia-smi"),
        pytest.param(
            WINDOWS_FIXTURE, ("--gpus", "3", "--fluctuate"), ("--collect.interval=100ms",), id="cached-replicated"
        ),
    ],
)
def test_every_scrape_parses_with_the_reference_parser(
    exporter: StartExporter, capture: Path, fake_args: tuple[str, ...], extra_flags: tuple[str, ...]
) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(capture, *fake_args), *extra_flags)
    for _ in range(2):
        body = handle.scrape()
        families = parsed_names(body)
        assert "nvidia_smi_last_collect_success" in families
        assert len(families) == len(set(families))
