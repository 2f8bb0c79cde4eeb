"""Slow and hostile clients, server timeouts, long runs: the exporter keeps serving and leaks nothing.

Every wait here is bounded; none of these tests asserts how fast something is, only that it happens
before a generous deadline (these machines are shared and noisy).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import FIXTURE_CAPTURES, Exporter, fake_smi_command, http_get

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"


def fake() -> str:
    return fake_smi_command(CAPTURE)


def connect(exporter: Exporter) -> socket.socket:
    host, port = exporter.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=15)


def closed_by_server(sock: socket.socket, deadline: float = 15.0) -> bool:
    """True when the server closes the connection (EOF or reset) before ``deadline`` seconds."""
    sock.settimeout(deadline)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connection_that_never_sends_headers_is_closed(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--web.read-header-timeout=1s")
    with connect(handle) as sock:
        assert closed_by_server(sock)


def test_byte_at_a_time_sender_is_cut_off_at_the_header_timeout(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--web.read-header-timeout=1s")
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    with connect(handle) as sock:
        closed = False
        for byte in request[:60]:  # at most 60 x 0.1 s: well past the 1 s timeout
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        assert closed or closed_by_server(sock, 5.0)


def test_idle_keep_alive_connection_is_closed_after_the_idle_timeout(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--web.idle-timeout=1s")
    with connect(handle) as sock:
        sock.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(15)
        reply = b""
        while b"Healthy" not in reply:
            chunk = sock.recv(4096)
            assert chunk
            reply += chunk
        assert closed_by_server(sock)


def test_keep_alive_connection_serves_many_requests(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--web.read-header-timeout=2s")
    with connect(handle) as sock:
        sock.settimeout(15)
        for _ in range(5):
            sock.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while b"Ready." not in reply:
                chunk = sock.recv(4096)
                assert chunk
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200")


def slow_after_startup(tmp_path: Path, delay_seconds: int) -> tuple[str, Path]:
    """A wrapper around the fake that sleeps before answering once the switch file exists."""
    switch = tmp_path / "slow"
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ -e "{switch}" ] && sleep {delay_seconds}\nexec {fake()} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), switch


def test_write_timeout_bounds_a_synchronous_scrape(exporter: StartExporter, tmp_path: Path) -> None:
    command, switch = slow_after_startup(tmp_path, 6)
    handle = exporter("--nvidia-smi-command", command, "--web.write-timeout=2s", "--collect.timeout=30s")
    switch.touch()
    body = handle.scrape()  # answered within the write timeout, with health series only
    assert sample_value(body, "nvidia_smi_last_collect_success") == 0
    assert "nvidia_smi_gpu_info{" not in body


def test_hundreds_of_idle_and_slow_connections_do_not_block_a_scrape(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--collect.interval=1s")
    sockets: list[socket.socket] = []
    try:
        for index in range(500):
            sock = connect(handle)
            if index % 2:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: ")  # a request that never finishes
            sockets.append(sock)
        for _ in range(3):
            response = http_get(handle.url + "/metrics", timeout=10)
            assert response.status == 200
    finally:
        for sock in sockets:
            sock.close()
    assert http_get(handle.url + "/-/healthy", timeout=10).status == 200


def test_json_logs_are_one_object_per_line(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(CAPTURE, "--exit", "3"), "--log.format=json")
    handle.scrape()
    handle.stop()
    records = [json.loads(line) for line in handle.stderr_lines if line.strip()]
    assert {"time", "level", "msg"} <= set(records[0])
    failures = [record for record in records if record["msg"] == "failed to collect metrics"]
    assert len(failures) == 1
    assert "exit status 3" in failures[0]["err"]


def test_cached_mode_logs_each_failed_collection_once_not_per_scrape(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(CAPTURE, "--exit", "3"), "--collect.interval=1s")
    scrapes = 0
    failed = 0.0
    for _ in range(200):  # at most ~10 s
        failed = sample_value(handle.scrape(), "nvidia_smi_failed_scrapes_total") or 0.0
        scrapes += 1
        if failed >= 2:
            break
        time.sleep(0.05)
    handle.stop()
    logged = sum("failed to collect metrics" in line for line in handle.stderr_lines)
    assert failed >= 2
    assert scrapes > failed * 3
    assert logged <= failed + 1  # one more may land between the last scrape and the stop


def _children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of the direct children of ``pid``, from /proc."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append((int(entry), fields[0]))
    return children


@pytest.fixture
def hanging_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    """A wrapper script that starts a long-sleeping grandchild, records both pids, and waits."""
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "hanging-nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--query-gpu=uuid,name,driver_model.current,driver_model.pending,vbios_version,'
        'driver_version,pci.bus_id,serial,compute_cap,pci.sub_device_id,index" ]; then :; fi\n'
        "sleep 300 &\n"
        f'echo "$$ $!" > "{pids}/$$"\n'
        "wait\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, pids


@pytest.mark.slow
def test_a_thousand_timed_out_collections_leave_no_zombie_and_no_orphan(
    exporter: StartExporter, hanging_wrapper: tuple[Path, Path]
) -> None:
    script, pids = hanging_wrapper
    handle = exporter(
        "--nvidia-smi-command",
        str(script),
        "--query-field-names=uuid",
        "--collect.timeout=30ms",
        "--collect.interval=1ms",
    )
    started = time.monotonic()
    deadline = started + 300  # about 35 s on a 2-vCPU machine, idle or loaded
    failed = 0.0
    while failed < 1000 and time.monotonic() < deadline:
        time.sleep(0.5)
        failed = sample_value(handle.scrape(), "nvidia_smi_failed_scrapes_total") or 0.0
    handle.stop()
    assert failed >= 1000, f"only {failed:.0f} timed-out collections in {time.monotonic() - started:.0f} s"
    recorded = [int(pid) for path in pids.iterdir() for pid in path.read_text().split()]
    assert len(recorded) >= 1000
    survivors = []
    for pid in recorded:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                survivors.append(pid)
    assert survivors == []


@pytest.mark.slow
def test_no_zombie_children_while_collections_time_out(
    exporter: StartExporter, hanging_wrapper: tuple[Path, Path]
) -> None:
    script, _ = hanging_wrapper
    handle = exporter(
        "--nvidia-smi-command",
        str(script),
        "--query-field-names=uuid",
        "--collect.timeout=50ms",
        "--collect.interval=20ms",
    )
    zombies_seen = 0
    for _ in range(20):
        time.sleep(0.25)
        zombies_seen = max(zombies_seen, sum(state == "Z" for _, state in _children_of(handle.process.pid)))
    assert zombies_seen <= 1  # a child between its death and its reaping, never an accumulation


@pytest.mark.slow
def test_soak_twenty_thousand_scrapes_leak_no_memory_or_descriptors(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--collect.interval=5s", "--collect.compute-apps")
    pid = handle.process.pid
    host, port = handle.address.rsplit(":", 1)

    def rss_kib() -> int:
        line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS"))
        return int(line.split()[1])

    def scrape_many(count: int) -> None:
        import http.client

        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        for _ in range(count):
            connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            response.read()
            assert response.status == 200
        connection.close()

    scrape_many(2000)  # warm-up: caches, allocator arenas
    rss_before, fds_before = rss_kib(), len(os.listdir(f"/proc/{pid}/fd"))
    scrape_many(20000)
    rss_after, fds_after = rss_kib(), len(os.listdir(f"/proc/{pid}/fd"))
    assert rss_after - rss_before < 2048, (rss_before, rss_after)
    assert fds_after <= fds_before + 1


@pytest.mark.slow
def test_fifty_concurrent_scrapers_for_twenty_seconds_see_only_200_or_503(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake(), "--collect.interval=1s", "--web.max-requests=40")
    statuses: dict[int, int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + 20

    def scraper() -> None:
        try:
            while time.monotonic() < stop_at:
                status = http_get(handle.url + "/metrics", timeout=30).status
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=scraper) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert set(statuses) <= {200, 503}
    assert statuses.get(200, 0) > 0
