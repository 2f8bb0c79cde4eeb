#!/usr/bin/env python3
"""Test a built exporter before anything is published: its ``--version``, a run on a port of its own that serves
GPU metrics, and (``--service``, Windows, elevated) the Windows service it installs.

    python packaging/windows/smoke_test.py --expect-version V [--service] -- EXECUTABLE [ARGUMENT...]

The release workflow's Windows jobs run it on ``nvidia_gpu_exporter.exe`` unpacked from the zip that
packaging/windows/build.py wrote (the file to be published, not PyInstaller's folder); tests/test_windows_build.py
runs the console part here on ``python -m nvidia_gpu_exporter``. Every wait is bounded; it prints what it
checked and exits 1 at the first failure.

"Our own process" is checked, never assumed: the console run listens on port 0, so the port scraped is the one its
log says it bound, and on Windows ``netstat -ano`` must name its process id as the listener; the service listens
on a port that was free a moment before, and netstat must name the service's process id (``sc queryex``).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

SERVICE = "nvidia_gpu_exporter"
START_SECONDS = 60.0
POLL_SECONDS = 0.25
COMMAND_SECONDS = 120
LISTENING = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+) ')
METRIC = re.compile(r"^nvidia_smi_[a-z_]+(\{|\s)", re.MULTILINE)
ERROR_SERVICE_DOES_NOT_EXIST = 1060

T = TypeVar("T")


class SmokeError(Exception):
    """A check failed; the message says which and what was seen."""


def step(message: str) -> None:
    print(f"smoke: {message}", flush=True)


def wait_for(what: str, probe: Callable[[], T | None], seconds: float = START_SECONDS) -> T:
    """Poll ``probe`` until it returns something, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise SmokeError(f"timed out after {seconds:g}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def run(command: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(command), capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False)
    if check and result.returncode != 0:
        raise SmokeError(f"{' '.join(command)} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body: bytes = response.read()
    except OSError:
        return None
    return body.decode("utf-8", "replace")


def check_metrics(text: str, who: str) -> None:
    if METRIC.search(text) is None:
        raise SmokeError(f"{who} served no nvidia_smi_ metric: {text[:500]!r}")


def listening_pids(port: int) -> set[int]:
    """The process ids ``netstat -ano`` shows listening on 127.0.0.1:port (Windows)."""
    output = run(["netstat", "-ano", "-p", "TCP"]).stdout
    pids = set()
    for line in output.splitlines():
        words = line.split()
        if len(words) == 5 and words[1] == f"127.0.0.1:{port}" and words[3] == "LISTENING":
            pids.add(int(words[4]))
    return pids


def check_listener(port: int, pid: int, who: str, *, platform: str = sys.platform) -> None:
    if platform != "win32":
        return  # no netstat -ano here: the port is the one the child's own log names
    pids = listening_pids(port)
    if pids != {pid}:
        raise SmokeError(f"127.0.0.1:{port} is held by process(es) {sorted(pids)}, not {who} (process {pid})")


def check_version(command: Sequence[str], version: str) -> None:
    result = run([*command, "--version"])
    text = result.stdout + result.stderr
    if f"version {version} " not in text:
        raise SmokeError(f"--version does not say version {version}: {text!r}")
    step(f"--version: {text.splitlines()[0]}")


def check_console(command: Sequence[str]) -> None:
    """Run it in the foreground on port 0 with the demo backend, scrape it, stop it."""
    with tempfile.TemporaryDirectory() as temporary:
        log_path = Path(temporary) / "exporter.log"
        with log_path.open("w", encoding="utf-8") as log:
            child = subprocess.Popen(
                [*command, "--collect.backend=demo", "--web.listen-address=127.0.0.1:0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:

            def alive() -> None:
                if child.poll() is not None:
                    log_text = log_path.read_text("utf-8", "replace")
                    raise SmokeError(f"the exporter exited {child.returncode}: {log_text}")

            def bound_port() -> int | None:
                alive()
                match = LISTENING.search(log_path.read_text("utf-8", "replace"))
                return int(match[1]) if match else None

            def scraped(port: int) -> str | None:
                alive()
                return scrape(port)

            port = wait_for("the exporter's 'Listening on' line", bound_port)
            text = wait_for(f"a scrape of 127.0.0.1:{port}", lambda: scraped(port))
            alive()  # still the one that answered, not a process that took the port after it exited
            check_listener(port, child.pid, "the exporter")
            check_metrics(text, "the exporter")
            step(f"console run: process {child.pid} on 127.0.0.1:{port} served nvidia_smi_ metrics")
        finally:
            child.kill()
            child.wait(timeout=COMMAND_SECONDS)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def service_state(name: str) -> tuple[str, int] | None:
    """``(STATE, PID)`` from ``sc queryex``; None when the service does not exist."""
    result = run(["sc.exe", "queryex", name], check=False)
    if result.returncode == ERROR_SERVICE_DOES_NOT_EXIST:
        return None
    state = re.search(r"STATE\s+:\s+\d+\s+(\w+)", result.stdout)
    pid = re.search(r"PID\s+:\s+(\d+)", result.stdout)
    if result.returncode != 0 or state is None or pid is None:
        raise SmokeError(f"sc queryex {name} exited {result.returncode}: {result.stdout}{result.stderr}")
    return state[1], int(pid[1])


def state_is(wanted: str) -> Callable[[], int | None]:
    def probe() -> int | None:
        current = service_state(SERVICE)
        if current is None:
            raise SmokeError(f"service {SERVICE} vanished")
        return current[1] if current[0] == wanted else None

    return probe


def check_service(command: Sequence[str], *, platform: str = sys.platform) -> None:
    """``install`` with flags, start it, scrape the service's own port, stop it, ``uninstall``."""
    if platform != "win32":
        raise SmokeError("--service needs Windows (and an elevated prompt)")
    if service_state(SERVICE) is not None:
        raise SmokeError(f"service {SERVICE} exists before the test: not ours to test or remove")
    port = free_port()
    run([*command, "install", "--collect.backend=demo", f"--web.listen-address=127.0.0.1:{port}"])
    try:
        image_path = run(["sc.exe", "qc", SERVICE]).stdout
        if command[0].lower() not in image_path.lower():  # scm.launcher: the frozen executable itself
            raise SmokeError(f"the service does not run {command[0]}: {image_path}")
        run(["sc.exe", "start", SERVICE])
        pid = wait_for("the service to run", state_is("RUNNING"))
        text = wait_for(f"a scrape of the service on 127.0.0.1:{port}", lambda: scrape(port))
        check_listener(port, pid, "the service", platform=platform)
        check_metrics(text, "the service")
        step(f"service: process {pid} on 127.0.0.1:{port} served nvidia_smi_ metrics")
        run(["sc.exe", "stop", SERVICE])
        wait_for("the service to stop", state_is("STOPPED"))
        step("service: stopped")
    except (SmokeError, OSError, subprocess.SubprocessError):
        run([*command, "uninstall"], check=False)  # leave no service behind; the first failure is the one to tell
        raise
    run([*command, "uninstall"])
    if service_state(SERVICE) is not None:
        raise SmokeError(f"service {SERVICE} is still registered after uninstall")
    step("service: uninstalled")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Test a built exporter (packaging/windows/smoke_test.py).")
    parser.add_argument("--expect-version", required=True)
    parser.add_argument("--service", action="store_true", help="also install, run and remove the Windows service")
    parser.add_argument("command", nargs="+", help="the executable (after --), with any leading arguments")
    arguments = parser.parse_args(argv)
    if Path(arguments.command[0]).is_file():  # absolute, as the service's command line will name it
        arguments.command[0] = os.path.abspath(arguments.command[0])
    try:
        check_version(arguments.command, arguments.expect_version)
        check_console(arguments.command)
        if arguments.service:
            check_service(arguments.command)
    except (SmokeError, OSError, subprocess.SubprocessError) as error:
        print(f"smoke: FAILED: {error}", file=sys.stderr)
        return 1
    step("passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
