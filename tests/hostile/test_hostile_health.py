"""Issue 13, finding 14: clients cannot move the health metrics.

Anyone who can reach the port could give up on a collection on purpose: a tiny
``X-Prometheus-Scrape-Timeout-Seconds``, or a request followed by a half-close (aiohttp then cancels the
handler). A collection abandoned that way has no outcome: it is killed and counted nowhere, so
``nvidia_smi_failed_scrapes_total`` and the error log move only with collections that really failed.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import Exporter
from hostile_smi import HostileSmi

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the hostile nvidia-smi is a shell script")

ABANDONS = 10
TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


@pytest.fixture
def slow_smi(tmp_path: Path) -> HostileSmi:
    return HostileSmi.create(tmp_path / "smi")


def failed_collections(handle: Exporter) -> float | None:
    return sample_value(handle.scrape(), "nvidia_smi_failed_scrapes_total")


def half_closed_request(handle: Exporter) -> bytes:
    """A whole request, then the client's write side shut: what it reads back until the server closes."""
    host, port = handle.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        received = b""
        for _ in range(100):  # bounded: the server answers or closes
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += chunk
        return received


def test_scrapes_with_a_tiny_timeout_header_leave_the_failure_count_alone(
    exporter: StartExporter, slow_smi: HostileSmi
) -> None:
    handle = exporter(*slow_smi.args("--web.timeout-offset=500ms"))
    slow_smi.mode("sleep 0.3")
    for _ in range(ABANDONS):
        response = handle.get("/metrics", {TIMEOUT_HEADER: "0.501"})  # 1 ms to wait
        assert response.status == 200
        assert sample_value(response.text, "nvidia_smi_last_collect_success") == 0
    slow_smi.mode(":")
    assert failed_collections(handle) == 0
    assert not [line for line in handle.stderr_lines if "failed to collect metrics" in line]


def test_half_closed_clients_leave_the_failure_count_alone(exporter: StartExporter, slow_smi: HostileSmi) -> None:
    handle = exporter(*slow_smi.args())
    slow_smi.mode("sleep 1")
    for _ in range(3):
        half_closed_request(handle)
    slow_smi.mode(":")
    assert failed_collections(handle) == 0
    assert not [line for line in handle.stderr_lines if "failed to collect metrics" in line]


def test_a_collection_that_really_fails_still_counts(exporter: StartExporter, slow_smi: HostileSmi) -> None:
    handle = exporter(*slow_smi.args("--collect.timeout=1s"))
    slow_smi.mode("exit 7")
    assert failed_collections(handle) == 1
    slow_smi.mode("sleep 30")  # the collection's own timeout is an outcome: a failure
    assert failed_collections(handle) == 2
