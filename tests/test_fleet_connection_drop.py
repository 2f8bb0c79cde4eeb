"""A fleet connection that drops in the middle of a run (its sshd session killed) fails that run cleanly, with
the reason, and the next run opens a new connection (docs/fleet.md, "Transport"); through the exporter, the
probe caught by the drop answers probe_success 0 and a later probe succeeds. Against a real OpenSSH server
(tests/sshd_helpers.py); skips without sshd or asyncssh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness import FIXTURE_CAPTURES, start_exporter
from nvidia_gpu_exporter.backends.exec.runner import NO_EXIT_STATUS, RunResult
from polling import wait_until
from sshd_helpers import Sshd, running_sshd

if TYPE_CHECKING:
    from nvidia_gpu_exporter.backends.fleet.ssh import SshRunner

RUN_LIMIT_SECONDS = 30.0  # upper bound of every wait below; nothing sleeps a fixed time
POLL_SECONDS = 0.05


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    with running_sshd() as server:
        yield server


def accepted(sshd: Sshd) -> int:
    return sshd.log.read_text(errors="replace").count("Accepted publickey")


async def wait_for_file(path: Path) -> str:
    """The file's text once it holds a whole line."""
    while True:
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text(encoding="ascii")
            if text.endswith("\n"):
                return text
        await asyncio.sleep(POLL_SECONDS)


async def reconnected(runner: SshRunner) -> RunResult:
    """The next run, retried while the dead connection's backoff refuses it."""
    while True:
        again = await runner.run(["--version"])
        if again.start_error is None or "not retrying" not in again.start_error:
            return again
        await asyncio.sleep(POLL_SECONDS * 4)


def test_a_connection_dropped_mid_run_fails_that_run_and_the_next_run_reconnects(sshd: Sshd) -> None:
    from nvidia_gpu_exporter.backends.fleet.ssh import SshPool, SshRunner
    from nvidia_gpu_exporter.backends.fleet.targets import parse_targets

    hold = sshd.shared / "drop.hold"
    pids = sshd.shared / "drop.pids"
    # With the hold file the command reports its shell's pid and its sshd session's ($PPID), then waits.
    command = f"if [ -e {hold} ]; then echo $$ $PPID > {pids}; exec sleep 60; fi; echo answered"
    document = {
        "targets": {
            "dropped": {
                "host": "127.0.0.1", "user": sshd.user, "port": sshd.port, "identity_file": str(sshd.client_key),
                "known_hosts": str(sshd.known_hosts), "command": command, "timeout": "60s",
            }
        }
    }  # fmt: skip
    (target,) = parse_targets(json.dumps(document)).by_name.values()
    hold.write_text("", encoding="ascii")
    before = accepted(sshd)
    shell = 0

    async def scenario() -> tuple[RunResult, RunResult]:
        nonlocal shell
        pool = SshPool(max_concurrent=4)
        runner = SshRunner(pool, target)
        try:
            run = asyncio.ensure_future(runner.run(["--version"]))
            line = await asyncio.wait_for(wait_for_file(pids), RUN_LIMIT_SECONDS)
            shell_pid, session_pid = (int(word) for word in line.split())
            shell = shell_pid
            hold.unlink()
            os.kill(session_pid, signal.SIGKILL)  # the connection's sshd process: the TCP connection drops
            lost = await asyncio.wait_for(run, RUN_LIMIT_SECONDS)
            again = await asyncio.wait_for(reconnected(runner), RUN_LIMIT_SECONDS)
        finally:
            await pool.aclose()
        return lost, again

    try:
        lost, again = asyncio.run(scenario())
    finally:
        if shell:
            with contextlib.suppress(ProcessLookupError):
                os.kill(shell, signal.SIGKILL)  # the orphaned sleep, whatever the outcome
    assert lost.exit_code == NO_EXIT_STATUS
    assert "lost" in (lost.start_error or ""), lost
    assert (again.start_error, again.exit_code, again.stdout) == (None, 0, "answered --version\n")
    assert accepted(sshd) == before + 2, "the second run should have opened a new connection"


def probe_success(body: str) -> str:
    return next(line.split()[1] for line in body.splitlines() if line.startswith("probe_success "))


def test_a_probe_caught_by_a_dropped_connection_fails_and_a_later_probe_succeeds(sshd: Sshd, tmp_path: Path) -> None:
    hold = sshd.shared / "probe.hold"
    pids = sshd.shared / "probe.pids"
    fake = sshd.fake_smi("--capture", str(FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"))
    command = f"if [ -e {hold} ]; then echo $$ $PPID > {pids}; exec sleep 60; fi; {fake}"
    document = {
        "targets": {
            "dropped": {
                "host": "127.0.0.1", "user": sshd.user, "port": sshd.port, "identity_file": str(sshd.client_key),
                "known_hosts": str(sshd.known_hosts), "command": command, "timeout": "30s",
                "connect_timeout": "6s",  # a connection of its own
            }
        }
    }  # fmt: skip
    targets_file = tmp_path / "targets.yml"
    targets_file.write_text(json.dumps(document), encoding="utf-8")
    hold.write_text("", encoding="ascii")
    handle = start_exporter(["--fleet.targets-file", str(targets_file), "--collect.backend=demo"])
    shell = 0
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(handle.get, "/probe?target=dropped", None, RUN_LIMIT_SECONDS)
            line = wait_until(
                lambda: pids.read_text(encoding="ascii") if pids.exists() else "",
                "the held command's pids",
                until=lambda text: text.endswith("\n"),
                timeout=RUN_LIMIT_SECONDS,
                interval=POLL_SECONDS,
            )
            shell, session = (int(word) for word in line.split())
            hold.unlink()
            os.kill(session, signal.SIGKILL)
            caught = first.result(RUN_LIMIT_SECONDS)
        assert caught.status == 200
        assert probe_success(caught.body.decode()) == "0"

        def probe() -> str:
            return handle.get("/probe?target=dropped").body.decode()

        later = wait_until(
            probe,
            "a probe over a new connection",
            until=lambda body: probe_success(body) == "1",
            timeout=RUN_LIMIT_SECONDS,
            interval=POLL_SECONDS * 4,
        )
        assert "nvidia_smi_gpu_info{" in later
        assert handle.logged(" lost: ")  # the runner's clean failure, not an unexpected error
    finally:
        if shell:
            with contextlib.suppress(ProcessLookupError):
                os.kill(shell, signal.SIGKILL)
        handle.stop()
