"""Issue 13, finding 16: a ``--demo-config`` that is not a regular file cannot block the exporter's threads.

The demo re-reads its config every collection, in asyncio's default executor (which bcrypt shares). A FIFO
in its place used to block one executor thread per collection for ever, until credentials could no longer
be checked. Now the file is opened without blocking and refused unless it is a regular file of a bounded size.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import MIG_FIXTURE, run_exporter_to_exit
from hostile_smi import status_kib
from nvidia_gpu_exporter.backends.demo.backend import MAX_CONFIG_BYTES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs, and the exporter's figures from /proc")

DEMO = "--collect.backend=demo"
CONFIG = "gpus: 2\n"
COLLECTIONS = 6


def test_a_config_replaced_by_a_fifo_fails_each_collection_and_blocks_no_thread(
    exporter: StartExporter, tmp_path: Path
) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    handle = exporter(DEMO, f"--demo-config={config}", "--collect.timeout=2s")
    assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 1
    config.unlink()
    os.mkfifo(config)
    threads = []
    for _ in range(COLLECTIONS):
        assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 0
        threads.append(status_kib(handle.process.pid, "Threads"))  # a count, not KiB: the same "Name: N" form
    print(f"threads after each collection: {threads}")
    assert threads[-1] == threads[0]  # a blocked read would hold one more thread per collection
    failures = handle.logged("failed to collect metrics")
    assert failures  # each collection failed (the scrapes say so); the log says why, rate limited
    assert all("not a regular file" in line for line in failures), failures[-1]


def test_a_config_over_the_size_bound_fails_the_collection(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    handle = exporter(DEMO, f"--demo-config={config}")
    config.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 0
    assert handle.logged(f"larger than {MAX_CONFIG_BYTES} bytes")


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null"])
def test_a_device_as_the_config_is_refused_at_startup(special: str) -> None:
    code, log = run_exporter_to_exit([DEMO, f"--demo-config={special}"])
    assert code == 1
    assert "not a regular file" in log


def test_a_capture_replaced_by_a_fifo_fails_the_collection_and_the_loop_keeps_answering(
    exporter: StartExporter, tmp_path: Path
) -> None:
    """The capture a config names is read on the event loop when the config changes: a FIFO blocked it all."""
    capture = tmp_path / "capture.txt"
    shutil.copyfile(MIG_FIXTURE, capture)
    config = tmp_path / "demo.yaml"
    config.write_text(f"capture: {capture}\n", encoding="utf-8")
    handle = exporter(DEMO, f"--demo-config={config}", "--collect.timeout=2s")
    assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 1
    capture.unlink()
    os.mkfifo(capture)
    config.write_text(f"capture: {capture}\nseed: 1\n", encoding="utf-8")  # changed: the scene is rebuilt
    assert sample_value(handle.scrape(), "nvidia_smi_last_collect_success") == 0
    assert handle.get("/-/healthy").status == 200
    assert handle.logged("not a regular file (a FIFO)")
