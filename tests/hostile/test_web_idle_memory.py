"""Issue 13, finding 4: connections that never read pinned a whole response body each (200 such clients took
the RSS from 53 to 424 MB, and the write timeout did not release it). Now the body's parts are shared and
written in small chunks as the client reads, so such a client holds a few KiB; after the write timeout the
stalled responses are cut and counted."""

from __future__ import annotations

import re
import time

import pytest

from harness import fake_smi_command
from hostile.web_hostile import ONE_GPU, Child, exporter_child, non_reading_client
from polling import wait_until

MIB = 1024 * 1024
# 255 GPUs served under both profiles: a body of about 650 KB, as big as the fake nvidia-smi allows.
ARGS = (
    "--nvidia-smi-command",
    fake_smi_command(ONE_GPU, "--gpus", "255"),
    "--collect.interval=1h",
    "--metrics.profile=both",
    "--web.write-timeout=3s",
)


def sample(body: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", body, re.MULTILINE)
    assert match, series
    return float(match.group(1))


def scrape(child: Child) -> str:
    status, body = child.get()
    assert status == 200
    return body.decode("utf-8")


@pytest.mark.parametrize(
    ("clients", "max_growth_mib"), [(40, 10), pytest.param(200, 32, marks=pytest.mark.slow)], ids=["40", "200"]
)
def test_clients_that_never_read_pin_no_body(clients: int, max_growth_mib: int) -> None:
    with exporter_child(ARGS) as child:
        body = wait_until(
            lambda: scrape(child), "the first collection", until=lambda text: "nvidia_smi_gpu_info{" in text
        )
        size = len(body)
        baseline = child.rss_bytes()
        sockets = [non_reading_client(child.port) for _ in range(clients)]
        try:
            wait_until(
                lambda: sample(scrape(child), 'promhttp_metric_handler_requests_total{code="200"}'),
                "every non-reading client to be answered",
                until=lambda answered: answered >= clients + 2,
            )
            held = child.rss_bytes()
            growth = held - baseline
            started = time.monotonic()
            healthy, _ = child.get("/-/healthy")
            healthy_ms = (time.monotonic() - started) * 1000
            started = time.monotonic()
            scrape(child)
            scrape_ms = (time.monotonic() - started) * 1000
            assert healthy == 200
            print(f"while held: /-/healthy {healthy_ms:.0f} ms, a scrape {scrape_ms:.0f} ms")
            print(
                f"{clients} non-reading clients of a {size / MIB:.2f} MiB body: RSS {baseline / MIB:.1f} -> "
                f"{held / MIB:.1f} MiB"
            )
            assert growth < max_growth_mib * MIB, f"{growth / MIB:.1f} MiB more with {clients} idle readers"
            assert held < 128 * MIB
            cut = wait_until(
                lambda: sample(scrape(child), "nvidia_gpu_exporter_http_responses_incomplete_total"),
                "the stalled responses to be cut at the write timeout",
                until=lambda count: count >= clients,
            )
            assert cut == clients
        finally:
            for sock in sockets:
                sock.close()
    assert any("the client read nothing of the response" in line for line in child.lines)
