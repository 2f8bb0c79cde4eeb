"""Issue 13, findings 1 and 12: what nvidia-smi prints, and what its children do, cannot exhaust the exporter.

Each test runs the real exporter as a child against a hostile nvidia-smi and reads the exporter's own
figures from /proc: its peak resident set (VmHWM), its open fds. The floods are streamed by ``head -c``;
nothing large is ever held by the test process (the exporter's log lines are short, or the test fails).
"""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import Exporter
from hostile_smi import FLOOD_TIMEOUT, MIB, HostileSmi, kill_all, open_fds, processes_with, status_kib
from nvidia_gpu_exporter.backends.exec.defaults import DEFAULT_MAX_OUTPUT_BYTES
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from polling import wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads the exporter's figures from /proc")

RSS_BUDGET_KIB = 128 * 1024
LOG_LINE_BUDGET = 2000  # characters: an error quoting output says its size instead of repeating it
HEALTH_PROBES = 400  # at most, each bounded by the HTTP client's timeout


@dataclass
class Flooded:
    """A scrape that met the flood, and the /-/healthy probes made while it was in flight."""

    body: str
    peak_kib: int
    health_statuses: list[int] = field(default_factory=list)
    health_seconds: list[float] = field(default_factory=list)


def scrape_while_probing_health(handle: Exporter) -> Flooded:
    """One scrape, and /-/healthy asked back to back until it is answered."""
    answer: list[str] = []
    scraper = threading.Thread(target=lambda: answer.append(handle.scrape()))
    scraper.start()
    statuses: list[int] = []
    seconds: list[float] = []
    for _ in range(HEALTH_PROBES):
        if not scraper.is_alive():
            break
        started = time.monotonic()
        try:
            statuses.append(handle.get("/-/healthy", timeout=10).status)
        except OSError as error:  # a timed-out probe: the loop was blocked
            statuses.append(-1)
            print(f"/-/healthy failed: {error!r}")
        seconds.append(time.monotonic() - started)
        time.sleep(0.01)
    scraper.join(60)
    assert answer, "the scrape did not come back"
    return Flooded(answer[0], status_kib(handle.process.pid, "VmHWM"), statuses, seconds)


def check_flood(handle: Exporter, flooded: Flooded, stream: str) -> None:
    """The collection failed naming the cap (not the timeout), the exporter stayed small, answered, logged short."""
    worst = max(flooded.health_seconds, default=0.0)
    print(f"peak RSS {flooded.peak_kib / 1024:.1f} MiB, /-/healthy worst {worst * 1000:.0f} ms")
    assert sample_value(flooded.body, "nvidia_smi_last_collect_success") == 0
    assert flooded.peak_kib < RSS_BUDGET_KIB
    assert all(status == 200 for status in flooded.health_statuses), flooded.health_statuses
    failures = handle.logged("failed to collect metrics")
    assert f"more than {DEFAULT_MAX_OUTPUT_BYTES} bytes on {stream}" in failures[-1]
    assert "--collect.max-output-bytes" in failures[-1]
    assert max(len(line) for line in handle.stderr_lines) < LOG_LINE_BUDGET


@pytest.fixture
def smi(tmp_path: Path) -> HostileSmi:
    return HostileSmi.create(tmp_path / "smi")


def test_a_20_mb_line_on_stdout_fails_the_collection_at_the_cap(exporter: StartExporter, smi: HostileSmi) -> None:
    handle = exporter(*smi.args(FLOOD_TIMEOUT))
    smi.flood_stdout(20 * MIB)
    check_flood(handle, scrape_while_probing_health(handle), "stdout")


def test_20_mb_of_stderr_fails_the_collection_at_the_cap(exporter: StartExporter, smi: HostileSmi) -> None:
    handle = exporter(*smi.args(FLOOD_TIMEOUT))
    smi.flood_stderr(20 * MIB)
    check_flood(handle, scrape_while_probing_health(handle), "stderr")


@pytest.mark.slow
def test_a_200_mb_line_on_stdout_fails_the_collection_at_the_cap(exporter: StartExporter, smi: HostileSmi) -> None:
    handle = exporter(*smi.args(FLOOD_TIMEOUT))
    smi.flood_stdout(200 * MIB)
    check_flood(handle, scrape_while_probing_health(handle), "stdout")


@pytest.mark.slow
def test_1_gb_of_stderr_fails_the_collection_at_the_cap(exporter: StartExporter, smi: HostileSmi) -> None:
    handle = exporter(*smi.args(FLOOD_TIMEOUT))
    smi.flood_stderr(1024 * MIB)
    check_flood(handle, scrape_while_probing_health(handle), "stderr")


def test_output_under_a_smaller_cap_still_succeeds(exporter: StartExporter, smi: HostileSmi) -> None:
    """The cap is a flag; the fixture's answer (a few KB) is well under even a 64 KiB one."""
    handle = exporter(*smi.args("--collect.max-output-bytes=65536"))
    assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 1


def test_describing_a_failure_cuts_the_output_before_collapsing_its_whitespace() -> None:
    """Collapsing all of stderr first cost a string per word: 16 MB of it peaked at 274 MB."""
    stderr = "a " * MIB  # 2 MiB of one-letter words
    tracemalloc.start()
    try:
        message = RunResult("", stderr, 1).describe_failure()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message.startswith("exit status 1: a a ")
    assert message.endswith(f"\u2026 ({2 * MIB} bytes)")
    assert len(message) < 400
    assert peak < 64 * 1024  # bytes: the excerpt's window, not a copy of the output


# -- finding 12: a grandchild that escapes with setsid -----------------------------------------------------------


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[str]:
    name = f"escaped-{uuid.uuid4().hex}"
    yield name
    kill_all(name)


ESCAPE_TIMEOUT = "--collect.timeout=3s"  # what a collection waiting on the grandchild's pipes would take


def test_a_child_that_answers_while_an_escaped_grandchild_holds_its_pipes_succeeds(
    exporter: StartExporter, smi: HostileSmi, marker: str
) -> None:
    handle = exporter(*smi.args(ESCAPE_TIMEOUT))
    smi.escape(marker)
    body = handle.scrape()
    assert sample_value(body, "nvidia_smi_last_collect_success") == 1, handle.log[-2000:]
    assert sample_value(body, "nvidia_smi_failed_scrapes_total") == 0
    # The escaped grandchild is killed: it came from our run, whichever session it made for itself.
    wait_until(lambda: processes_with(marker), "the escaped grandchild to be killed", until=lambda pids: pids == [])


def test_open_fds_stay_flat_over_collections_with_an_escaping_grandchild(
    exporter: StartExporter, smi: HostileSmi, marker: str
) -> None:
    handle = exporter(*smi.args(ESCAPE_TIMEOUT))
    pid = handle.process.pid
    smi.escape(marker)
    handle.scrape()
    baseline = wait_until(lambda: open_fds(pid), "the first run's fds to close", until=lambda n: n > 0)
    for _ in range(5):
        handle.scrape()
    counts = wait_until(lambda: open_fds(pid), "the fds to come back to the baseline", until=lambda n: n <= baseline)
    print(f"open fds: {baseline} after one collection, {counts} after six")
