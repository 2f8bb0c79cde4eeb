"""Issue 26: ``--web.config.file`` read off the event loop and bounded; a reload watcher no error can stop
(docs/security.md, "The web config file").

A FIFO in the config file's place stopped every route (the loop blocked in ``open``), a symlink to /dev/zero grew
the process without bound, and any exception but an ``OSError`` ended the watcher task, so later edits (a user
revoked) never applied.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import bcrypt
import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import Exporter, run_exporter_to_exit
from hostile_smi import status_kib
from nvidia_gpu_exporter.httpserver.config import MAX_WEB_CONFIG_BYTES, WebConfigError, load_web_config
from nvidia_gpu_exporter.httpserver.security import Security
from polling import wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs, /dev/zero and the exporter's /proc figures")

HEADERS = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
SUCCESSFUL = "nvidia_gpu_exporter_web_config_last_reload_successful"
SUCCESS_TIMESTAMP = "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds"
FAILED = "web config reload failed, keeping the previous settings"
RSS_BOUND_KIB = 64 * 1024
LOADER = "nvidia_gpu_exporter.httpserver.security.load_web_config"  # what a check calls, replaced in process


def touch_later(path: Path) -> None:
    """Make a check see a change even within the file system's timestamp granularity."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))


def users(*names: str) -> str:
    return "basic_auth_users:\n" + "".join(f"  {name}: {HASH}\n" for name in names)


def make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def make_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def make_oversized(path: Path) -> None:
    path.write_bytes(b"#" * (MAX_WEB_CONFIG_BYTES + 1))
    touch_later(path)


HOSTILE = {
    "fifo": (make_fifo, "not a regular file (a FIFO)"),
    "dev-zero-symlink": (make_dev_zero, "not a regular file (a character device)"),
    "oversized": (make_oversized, f"larger than {MAX_WEB_CONFIG_BYTES} bytes"),
}


# -- at startup ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", HOSTILE, ids=HOSTILE)
def test_a_hostile_file_is_refused_by_the_loader_naming_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(HEADERS)
    make, reason = HOSTILE[kind]
    make(path)
    with pytest.raises(WebConfigError) as raised:
        load_web_config(str(path))
    assert str(path) in str(raised.value)
    assert reason in str(raised.value)


@pytest.mark.parametrize("kind", HOSTILE, ids=HOSTILE)
def test_startup_with_a_hostile_web_config_exits_with_an_error_naming_the_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(HEADERS)
    make, reason = HOSTILE[kind]
    make(path)
    code, log = run_exporter_to_exit(["--collect.backend=demo", f"--web.config.file={path}"], timeout=30)
    assert code == 1
    failure = [line for line in log.splitlines() if "failed to run" in line]
    assert failure, log
    assert str(path) in failure[0]
    assert reason in failure[0]


def test_a_fifo_as_the_certificate_is_refused_without_blocking(tmp_path: Path) -> None:
    import trustme

    leaf = trustme.CA().issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    os.mkfifo(tmp_path / "cert.pem")
    path = tmp_path / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n")
    with pytest.raises(WebConfigError, match=r"cert_file: .*cert\.pem.* not a regular file \(a FIFO\)"):
        load_web_config(str(path))


# -- while serving: the exporter as a child process, SIGHUP asking for a check at once ---------------------------


def served_reload_state(handle: Exporter) -> tuple[float | None, float | None]:
    text = handle.scrape()
    return sample_value(text, SUCCESSFUL), sample_value(text, SUCCESS_TIMESTAMP)


@pytest.mark.parametrize("kind", HOSTILE, ids=HOSTILE)
def test_a_hostile_file_while_serving_blocks_no_route_and_says_why(
    exporter: StartExporter, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(HEADERS)
    handle = exporter("--collect.backend=demo", f"--web.config.file={path}")
    successful, started = served_reload_state(handle)
    assert successful == 1
    assert started is not None
    assert started > 0
    make, reason = HOSTILE[kind]
    make(path)
    handle.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # whatever the check is doing, every route answers within a second
        assert handle.get("/-/healthy", timeout=1).status == 200
        assert handle.get("/metrics", timeout=1).status == 200
    failure = handle.logged(FAILED)[-1]
    assert str(path) in failure
    assert reason in failure
    assert status_kib(handle.process.pid, "VmHWM") < RSS_BOUND_KIB  # /dev/zero was not read into memory
    assert wait_until(lambda: served_reload_state(handle), "the failure served", until=lambda s: s[0] == 0) == (
        0,
        started,
    )

    path.unlink()
    path.write_text(HEADERS.replace("deny", "sameorigin"))  # the next good edit applies
    handle.process.send_signal(signal.SIGHUP)
    wait_until(lambda: handle.get("/-/healthy").headers.get("X-Frame-Options"), "the edit", until="sameorigin".__eq__)
    successful, reloaded = served_reload_state(handle)
    assert successful == 1
    assert reloaded is not None
    assert reloaded > started


# -- the watcher in process: any exception, a hung check ---------------------------------------------------------


async def wait_for(condition: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    "injected",
    [MemoryError(), RuntimeError("a bug"), OSError(5, "Input/output error"), KeyError("x")],
    ids=lambda error: type(error).__name__,
)
def test_any_exception_in_a_check_keeps_the_watcher_and_the_previous_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, injected: BaseException
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(users("alice", "mallory"))
    security = Security.from_file(str(path))
    assert security.reloads is not None
    first_success = security.reloads.last_success_timestamp
    real_load = load_web_config
    failing = threading.Event()
    failing.set()

    def load(name: str) -> object:
        if failing.is_set():
            raise injected
        return real_load(name)

    monkeypatch.setattr(LOADER, load)

    async def main() -> None:
        watcher = asyncio.create_task(security.watch(interval=0.02))
        try:
            path.write_text(users("alice"))  # mallory revoked
            touch_later(path)
            await wait_for(lambda: security.reloads is not None and not security.reloads.last_successful, "a failure")
            await asyncio.sleep(0.1)  # a few more checks: the watcher lives on
            assert not watcher.done()
            assert security.authenticator is not None
            assert set(security.authenticator.users) == {"alice", "mallory"}  # the previous settings in force
            failing.clear()
            touch_later(path)  # the next edit applies
            await wait_for(lambda: security.reloads is not None and security.reloads.last_successful, "a success")
            assert set(security.authenticator.users) == {"alice"}
            assert not watcher.done()
        finally:
            watcher.cancel()
            await asyncio.wait({watcher})

    with caplog.at_level(logging.ERROR, logger="nvidia_gpu_exporter.httpserver.security"):
        asyncio.run(main())
    assert security.reloads.last_success_timestamp >= first_success
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert errors
    assert errors[0].getMessage() == FAILED
    assert getattr(errors[0], "file", None) == str(path)
    assert type(injected).__name__ in str(getattr(errors[0], "err", ""))


def test_a_hung_check_blocks_nothing_and_never_piles_up_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(users("alice", "mallory"))
    security = Security.from_file(str(path))
    assert security.reloads is not None
    real_load = load_web_config
    release = threading.Event()
    entered: list[str] = []

    def hanging_load(name: str) -> object:
        entered.append(name)
        release.wait(30)
        return real_load(name)

    monkeypatch.setattr(LOADER, hanging_load)
    path.write_text(users("alice"))
    touch_later(path)

    async def main() -> list[bool | None]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        counting = asyncio.create_task(ticker())
        answers = [await security.check(timeout=0.2)]
        counting.cancel()
        assert ticks > 1  # the loop ran while it waited (a blocking check leaves 0; a loaded machine, few)
        assert security.reloads is not None
        assert not security.reloads.last_successful  # a hung check is a failed one
        answers += [await security.check(timeout=0.2) for _ in range(5)]  # the first one still hangs
        assert len(entered) == 1  # at most one check in flight: no thread per attempt
        release.set()
        monkeypatch.setattr(LOADER, real_load)
        await wait_for(lambda: not security.checking, "the hung check to end")
        answers.append(await security.check(timeout=5))
        return answers

    with caplog.at_level(logging.ERROR, logger="nvidia_gpu_exporter.httpserver.security"):
        answers = asyncio.run(main())
    assert answers == [None] * 6 + [True]  # failed (timed out), then not started while it hangs, then applied
    assert security.reloads.last_successful
    assert security.authenticator is not None
    assert set(security.authenticator.users) == {"alice"}
    timeouts = [record for record in caplog.records if "0.2" in str(getattr(record, "err", ""))]
    assert timeouts, [record.__dict__ for record in caplog.records]
    assert getattr(timeouts[0], "file", None) == str(path)


def test_without_a_web_config_file_there_is_no_reload_state() -> None:
    assert Security().reloads is None
