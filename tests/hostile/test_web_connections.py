"""Issue 13, finding 3: one client exhausted the file descriptors. 1,100 keep-alive connections made legitimate
scrapes time out, and asyncio wrote a traceback for every failed ``accept()``. Now ``--web.max-connections``
caps the open connections below the open-file limit: at the cap the idlest connection makes room, or the new
one is answered 503 when all are busy; and an accept error is one rate-limited log line."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import (
    ask,
    connect_many,
    connection_flood,
    content_length,
    exporter_child,
    open_client,
    read_head,
    read_response,
    send_request,
    serving,
    web_settings,
)
from nvidia_gpu_exporter.httpserver import timeouts
from nvidia_gpu_exporter.httpserver.connections import EVICTION_BATCH, FD_RESERVE
from nvidia_gpu_exporter.web.server import WebServer
from polling import eventually, wait_until
from spies import record_calls
from test_web_listeners import Gate, closed_by_server, gated_app, tls_contexts  # noqa: F401 - a fixture, by name

LIMIT = 3


@pytest.mark.parametrize(
    "trailing",
    [
        pytest.param(b"", id="a-lone-request"),
        # bytes the server never reads: closed with them unread, the connection was reset, and the reset destroyed
        # the 503 in the client's kernel before a client reading a little later read it
        pytest.param(b"x" * (512 * 1024), id="more-bytes-behind-it-read-late"),
    ],
)
def test_at_the_cap_with_every_connection_busy_a_new_one_gets_503_and_is_closed(trailing: bytes) -> None:
    async def main() -> None:
        gate = Gate()
        async with serving(gated_app(gate), web_settings(max_connections=LIMIT)) as server:
            busy = [await open_client(server) for _ in range(LIMIT)]
            for _, writer in busy:
                await ask(writer, "/slow")
            await eventually(
                lambda: server.open.requests == LIMIT,
                "every busy connection's request to be in",
            )
            reader, writer = await open_client(server)
            writer.write(b"GET /fast HTTP/1.1\r\nHost: exporter\r\n\r\n" + trailing)  # one write: one read
            if trailing:
                await asyncio.sleep(0.2)  # the server refuses and closes meanwhile
            try:
                refused = await bounded(reader.read())
            except ConnectionResetError:
                refused = b"reset"
            assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
            assert b"\r\nConnection: close\r\n" in refused
            assert server.connections.stats.closed["refused"] == 1
            gate.release.set()
            for busy_reader, busy_writer in busy:
                assert (await read_head(busy_reader)).startswith(b"HTTP/1.1 200 OK")
                busy_writer.close()
            writer.close()

    run(main)


HEAD_START = b"GET /fast HTTP/1.1\r\nHost: exporter\r\n"  # a request line and a header, then nothing
HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a ClientHello's first headers, of 517 bytes


def sent_before_accept(server: WebServer, first: bytes) -> socket.socket:
    """A client connected and ``first`` sent before the server's event loop can accept it (the caller runs on that
    loop and does not yield meanwhile): its bytes wait in the kernel when the server looks at them."""
    host, port = server.addresses[0].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(first)
    sock.setblocking(False)
    return sock


def still_open(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True  # nothing from the server: neither an answer nor a close
    except OSError:
        return False


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
def test_at_the_cap_a_newcomer_that_sent_only_part_of_a_request_is_closed_and_nobody_leaves_for_it(
    tls: bool,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    """Issue 26: under a flood of stalled connections reconnecting over the cap, each newcomer evicted an equal (one
    just opened) and cost a transport, a protocol and a parser first, so a health probe waited behind the flood's
    queue of reconnections. Closed at its accept instead, it costs an accept and a close (httpserver/listener.py)."""
    first = HELLO_START if tls else HEAD_START

    async def main() -> None:
        async with serving(
            gated_app(Gate()), web_settings(max_connections=LIMIT), tls=tls_contexts[0] if tls else None
        ) as server:
            held = [sent_before_accept(server, first) for _ in range(LIMIT)]
            await eventually(lambda: len(server.connections) == LIMIT, "the cap to be reached")
            newcomer = sent_before_accept(server, first)
            reader, writer = await bounded(asyncio.open_connection(sock=newcomer))
            assert await closed_by_server(reader)
            assert server.connections.stats.closed["evicted"] == 1
            assert [still_open(sock) for sock in held] == [True] * LIMIT
            writer.close()
            for sock in held:
                sock.close()

    run(main)


def test_at_the_cap_a_newcomer_whose_whole_request_is_in_makes_the_oldest_stalled_one_leave() -> None:
    async def main() -> None:
        async with serving(gated_app(Gate()), web_settings(max_connections=LIMIT)) as server:
            held = [sent_before_accept(server, HEAD_START) for _ in range(LIMIT)]
            await eventually(lambda: len(server.connections) == LIMIT, "the cap to be reached")
            newcomer = sent_before_accept(server, HEAD_START + b"\r\n")
            reader, writer = await bounded(asyncio.open_connection(sock=newcomer))
            assert (await read_head(reader)).startswith(b"HTTP/1.1 200 OK")
            assert [still_open(sock) for sock in held] == [False] + [True] * (LIMIT - 1)
            writer.close()
            for sock in held:
                sock.close()

    run(main)


def test_at_the_cap_the_idlest_keep_alive_connection_makes_room() -> None:
    async def main() -> None:
        async with serving(gated_app(Gate()), web_settings(max_connections=LIMIT)) as server:
            idle = []
            for _ in range(LIMIT):
                reader, writer = await open_client(server)
                await ask(writer, "/fast")
                await read_head(reader)
                await bounded(reader.readexactly(len(b"fast\n")))
                idle.append((reader, writer))
            reader, writer = await open_client(server)
            await ask(writer, "/fast")
            assert (await read_head(reader)).startswith(b"HTTP/1.1 200 OK")
            assert await closed_by_server(idle[0][0])  # the first one, idle the longest, left
            assert server.connections.stats.closed["evicted"] == 1
            assert len(server.connections) == LIMIT
            for _, other in [*idle, (reader, writer)]:
                other.close()

    run(main)


async def answered(server: WebServer, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A keep-alive connection that asked ``path`` and read the whole answer: idle from now."""
    reader, writer = await open_client(server)
    await ask(writer, path)
    head = await read_head(reader)
    await bounded(reader.readexactly(content_length(head)))
    return reader, writer


async def connection_of_kind(server: WebServer, kind: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``opened``: a connection that has sent nothing yet; else one that asked the path ``kind`` and read it."""
    return await open_client(server) if kind == "opened" else await answered(server, kind)


@pytest.mark.parametrize(
    ("spared_kind", "others_kind", "grace", "leave"),
    [
        pytest.param("/fast", "opened", 0.0, LIMIT - 1, id="opened-and-left-goes-before-one-just-answered"),
        pytest.param("/fast", "opened", 60.0, 1, id="just-opened-goes-before-one-just-answered"),
        pytest.param("/fast", "/no-such-path", 60.0, LIMIT - 1, id="answered-an-error-goes-before-answered-a-success"),
        pytest.param("opened", "/no-such-path", 60.0, LIMIT - 1, id="answered-an-error-goes-before-one-about-to-ask"),
        pytest.param("/no-such-path", "opened", 0.0, LIMIT - 1, id="opened-and-left-goes-before-answered-an-error"),
    ],
)
def test_at_the_cap_the_idlest_connection_is_spared_when_the_others_stand_lower(
    spared_kind: str, others_kind: str, grace: float, leave: int
) -> None:
    """The idlest connection (Prometheus between scrapes, or a client about to send its request) is spared when the
    others, idle for less time, stand lower (a flood): a new connection makes the idlest of those leave, and every
    one of them (up to a batch) when they are stale or answered an error."""

    async def main() -> None:
        async with serving(gated_app(Gate()), web_settings(max_connections=LIMIT)) as server:
            server.connections.grace = grace  # how long a connection that never asked counts as about to ask
            spared = await connection_of_kind(server, spared_kind)
            others = [await connection_of_kind(server, others_kind) for _ in range(LIMIT - 1)]
            await eventually(lambda: len(server.connections) == LIMIT, "every connection to be registered")
            reader, writer = await open_client(server)
            await ask(writer, "/fast")
            assert (await read_head(reader)).startswith(b"HTTP/1.1 200 OK")
            for left in others[:leave]:  # the idlest of the others first
                assert await closed_by_server(left[0])
            assert server.connections.stats.closed["evicted"] == leave
            await ask(spared[1], "/fast")  # the spared connection still serves
            assert (await read_head(spared[0])).startswith(b"HTTP/1.1 200 OK")
            for _, other in [spared, *others, (reader, writer)]:
                other.close()

    run(main)


def test_a_full_cap_asks_the_kernel_about_the_connections_that_leave_not_about_every_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A syscall per open connection per new one (is a response still in the kernel's send queue?) was most of the
    event loop's time in a wrong-password flood over the cap (BENCHMARKS.md): a batch of error-answered
    connections leaves, and the kernel is asked about those only."""
    asked = record_calls(monkeypatch, timeouts, "kernel_unsent_bytes")
    cap = 4 * EVICTION_BATCH

    async def main() -> None:
        async with serving(gated_app(Gate()), web_settings(max_connections=cap)) as server:
            flood = [await answered(server, "/no-such-path") for _ in range(cap)]
            asked.clear()
            reader, writer = await open_client(server)
            await ask(writer, "/fast")
            assert (await read_head(reader)).startswith(b"HTTP/1.1 200 OK")
            for left in flood[:EVICTION_BATCH]:  # the idlest first
                assert await closed_by_server(left[0])
            assert server.connections.stats.closed["evicted"] == EVICTION_BATCH
            assert len(asked) <= EVICTION_BATCH + 2  # and the new connection's own response: once or twice
            for _, other in [*flood, (reader, writer)]:
                other.close()

    run(main)


@pytest.mark.parametrize(
    "nofile",
    [
        pytest.param(FD_RESERVE + 192, id="cap_lowered_to_192_idle_connections_evict_each_other"),
        pytest.param(FD_RESERVE + 64, id="cap_lowered_to_64_more_connections_than_descriptors", marks=pytest.mark.slow),
    ],
)
def test_healthy_says_200_and_collections_succeed_with_more_connections_than_fit(nofile: int) -> None:
    """The default cap (256) is lowered, with a warning, to fit the open-file limit (room for 192, then for 64, beside
    the descriptors kept in reserve) and a client opens 600 connections, which evict each other. Issue 13, finding
    12's last part: at the second the client holds more connections than the process has descriptors. The cap keeps
    descriptors free, so ``/-/healthy`` is answered 200 (it says the process serves HTTP, docs/dcgm.md) and a
    scrape's collection still gets its nvidia-smi pipes: the collection succeeds, rather than health saying 200
    while collections fail."""
    with exporter_child([], nofile=nofile) as child:
        sockets = connect_many(child.port, 600)
        try:
            with child.connect() as sock:
                send_request(sock, "/-/healthy")
                assert read_response(sock, limit=12).startswith(b"HTTP/1.1 200")
            status, body = child.get(timeout=10)
            assert status == 200
            assert b"nvidia_smi_gpu_info{" in body
            assert b"\nnvidia_smi_last_collect_success 1\n" in body
        finally:
            for sock in sockets:
                sock.close()
    assert any("exceeds the open-file limit" in line for line in child.lines)
    assert not any("Too many open files" in line for line in child.lines)


def test_accept_errors_are_rate_limited_log_lines() -> None:
    """Without a cap (0) and with 64 descriptors, accept() fails: a few structured lines, never a traceback each."""
    with exporter_child(["--web.max-connections=0"], nofile=64) as child:
        sockets = connect_many(child.port, 300)
        try:
            wait_until(lambda: any("accept" in line for line in child.lines), "an accept() error", timeout=10)
        finally:
            for sock in sockets:
                sock.close()
        wait_until(
            lambda: child.get("/-/healthy", timeout=5)[0],
            "the exporter to answer again",
            until=lambda s: s == 200,
            ignoring=(OSError,),
        )
    accept_errors = [line for line in child.lines if "accept" in line]
    assert accept_errors, "no accept() error was logged: the limit was not reached"
    assert all(line.startswith("time=") for line in child.lines), child.lines
    assert len(child.lines) < 50, "\n".join(child.lines)


@pytest.mark.slow
def test_a_flood_of_1100_connections_under_the_default_limits_leaves_scrapes_working() -> None:
    """The issue's figure: 1,100 connections from one client against systemd's default 1,024 descriptors."""
    with exporter_child([], nofile=1024) as child, connection_flood(child.port, 1100) as opened:
        assert opened == 1100
        started = time.monotonic()
        status, body = child.get(timeout=10)
        scrape_seconds = time.monotonic() - started
        started = time.monotonic()
        healthy, _ = child.get("/-/healthy", timeout=10)
        healthy_seconds = time.monotonic() - started
        rss = child.rss_bytes()
        assert (status, healthy) == (200, 200)
        assert b"nvidia_smi_gpu_info{" in body
        assert rss < 128 * 1024 * 1024
        scrape_ms, healthy_ms = scrape_seconds * 1000, healthy_seconds * 1000
        print(f"1100 idle connections: scrape {scrape_ms:.0f} ms, /-/healthy {healthy_ms:.0f} ms, ", end="")
        print(f"RSS {rss / 2**20:.1f} MiB")
    assert not any("Too many open files" in line for line in child.lines)
