"""Issue 13, finding 13: the signals an operator (or a confused supervisor) sends do not kill the exporter.

SIGHUP re-reads the web config at once; SIGUSR1 and SIGUSR2 are logged and ignored; SIGQUIT writes every
thread's stack to the log and the exporter keeps serving. SIGTERM still stops it, and kills the
``nvidia-smi`` in flight together with a descendant that escaped into a session of its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import StartExporter
from harness import Exporter, exporter_argv
from hostile_smi import HostileSmi, kill_all, processes_with
from polling import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def still_serving(handle: Exporter) -> None:
    assert handle.process.poll() is None, handle.log[-2000:]
    assert handle.get("/-/healthy").status == 200


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: signal.Signals(s).name)
def test_sigusr_is_logged_and_ignored(exporter: StartExporter, tmp_path: Path, signum: int) -> None:
    handle = exporter(*HostileSmi.create(tmp_path / "smi").args())
    handle.process.send_signal(signum)
    (line,) = handle.logged(f"received {signal.Signals(signum).name}")
    assert "ignored" in line
    still_serving(handle)


def test_sigquit_logs_every_thread_stack_and_keeps_serving(exporter: StartExporter, tmp_path: Path) -> None:
    handle = exporter(*HostileSmi.create(tmp_path / "smi").args())
    handle.process.send_signal(signal.SIGQUIT)
    handle.logged("received SIGQUIT")
    # one line per thread, each read when the pump gets to it: the main thread's may come after another's
    stacks = [line for line in handle.logged("thread_name=MainThread") if "thread stack" in line]
    assert any("app.py" in line for line in stacks), stacks
    still_serving(handle)


def test_sighup_without_a_web_config_has_nothing_to_reload(exporter: StartExporter, tmp_path: Path) -> None:
    handle = exporter(*HostileSmi.create(tmp_path / "smi").args())
    handle.process.send_signal(signal.SIGHUP)
    handle.logged("nothing to reload")
    still_serving(handle)


def test_sighup_reloads_the_web_config_at_once(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", encoding="utf-8")
    handle = exporter(*HostileSmi.create(tmp_path / "smi").args(f"--web.config.file={config}"))
    assert handle.get("/-/healthy").headers.get("X-Frame-Options") == "deny"
    config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n", encoding="utf-8")
    handle.process.send_signal(signal.SIGHUP)
    handle.logged("web config reloaded")
    lines = handle.stderr_lines
    received = next(index for index, line in enumerate(lines) if "received SIGHUP" in line)
    reloaded = next(index for index, line in enumerate(lines) if "web config reloaded" in line)
    assert received < reloaded  # the signal did it, not the periodic check
    assert handle.get("/-/healthy").headers.get("X-Frame-Options") == "sameorigin"
    still_serving(handle)


@pytest.fixture
def marker() -> Iterator[str]:
    name = f"in-flight-{uuid.uuid4().hex}"
    yield name
    kill_all(name)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: signal.Signals(s).name)
def test_stopping_kills_the_nvidia_smi_in_flight_and_its_escaped_descendant(
    exporter: StartExporter, tmp_path: Path, marker: str, signum: int
) -> None:
    smi = HostileSmi.create(tmp_path / "smi")
    handle = exporter(*smi.args("--collect.timeout=60s"))
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)' {marker}"
    smi.mode(f"setsid {sleeper} & exec {sleeper}")  # the child, and a grandchild in its own session
    scraper = threading.Thread(target=lambda: handle.get(timeout=60), daemon=True)
    scraper.start()
    wait_until(lambda: len(processes_with(marker)), "the child and its grandchild to start", until=lambda n: n >= 2)
    assert handle.stop(signum) == 0
    wait_until(lambda: processes_with(marker), "both to be killed", until=lambda pids: pids == [])
    scraper.join(30)


def test_stopping_during_startup_kills_its_nvidia_smi_run(tmp_path: Path, marker: str) -> None:
    smi = HostileSmi.create(tmp_path / "smi")
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)' {marker}"
    smi.mode(f"setsid {sleeper} & exec {sleeper}")  # startup's field-mapping query hangs
    process = subprocess.Popen(
        exporter_argv(*smi.args("--collect.timeout=60s")), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: len(processes_with(marker)), "startup's query to hang", until=lambda n: n >= 2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wait_until(lambda: processes_with(marker), "both to be killed", until=lambda pids: pids == [])
