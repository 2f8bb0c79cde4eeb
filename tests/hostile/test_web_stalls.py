"""Issue 26: clients that stall where a second reader of the request bytes, or a cap that did not see them, let them
hold the server. Connections stalled in a request head, a request body or a TLS handshake are counted under
``--web.max-connections`` and leave before anything that was answered successfully (Prometheus' keep-alive
connection between two scrapes), so probes and scrapes keep being answered through the attack; plain HTTP sent to
the TLS port gets Go's answer; a client that leaves before or during its answer is no error or warning in the log."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import gc
import logging
import socket
import ssl
import struct
import time

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import open_client, read_head, serving, web_settings
from nvidia_gpu_exporter.httpserver import tlsbuffer
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.web.server import WebServer
from test_web_listeners import tls_contexts  # noqa: F401 - a fixture, used by name

CAP = 32
GRACE = 0.3  # the cap's grace for a head or handshake under way, lowered from 2 s to keep the test short
ATTACK_SECONDS = 2.5


def _app() -> App:
    async def hello(_: Request) -> Response:
        return Response(text="hello\n")

    async def slow(_: Request) -> Response:
        await asyncio.sleep(0.3)
        return Response(body=(b"x" * (1024 * 1024),), content_type="text/plain")

    app = App()
    app.add_get("/", hello)
    app.add_get("/slow", slow)
    return app


async def _probe(server: WebServer, tls: ssl.SSLContext | None = None) -> tuple[bytes, float]:
    """A request on a new connection: its status line, and how long the answer took."""
    started = time.monotonic()
    reader, writer = await open_client(server, tls)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head = await read_head(reader)
    writer.close()
    return head.split(b"\r\n", 1)[0], time.monotonic() - started


async def _attack(
    server: WebServer, stall: bytes, tls: ssl.SSLContext | None = None
) -> tuple[list[tuple[bytes, float]], list[bytes]]:
    """Keep the cap full of connections that send ``stall`` and nothing more (as fast as they are evicted, two
    over the cap at a time), for :data:`ATTACK_SECONDS`; meanwhile a keep-alive client scrapes every 0.2 s on one
    connection and a prober asks on new ones. Returns the probes' status lines and times, and the scrapes'."""
    host, port = server.addresses[0].rsplit(":", 1)
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    scraper_reader, scraper = await open_client(server, tls)

    async def scrape() -> bytes:
        scraper.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await read_head(scraper_reader)
        await bounded(scraper_reader.readexactly(6))
        return head.split(b"\r\n", 1)[0]

    scrapes = [await scrape()]
    probes = []
    deadline = time.monotonic() + ATTACK_SECONDS
    next_scrape = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        held = [(reader, writer) for reader, writer in held if not reader.at_eof()]
        while len(held) < CAP + 2:
            reader, writer = await bounded(asyncio.open_connection(host, int(port)))
            writer.write(stall)
            held.append((reader, writer))
        await asyncio.sleep(0.05)
        probes.append(await bounded(_probe(server, tls)))
        if time.monotonic() >= next_scrape:
            scrapes.append(await scrape())
            next_scrape += 0.2
    for _, writer in held:
        writer.close()
    scraper.close()
    return probes, scrapes


@pytest.mark.parametrize(
    "stall",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n", id="a-request-line-and-a-header-then-nothing"),
        pytest.param(b"G", id="one-byte-of-a-head"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", id="a-body-never-sent"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\n\n", id="chunk-lf-lf"),
    ],
)
def test_connections_stalled_in_a_request_leave_before_prometheus_and_probes_are_answered(stall: bytes) -> None:
    async def main() -> tuple[list[tuple[bytes, float]], list[bytes], int]:
        async with serving(_app(), web_settings(max_connections=CAP)) as server:
            server.connections.grace = GRACE
            probes, scrapes = await _attack(server, stall)
            return probes, scrapes, server.connections.stats.closed["evicted"]

    probes, scrapes, evicted = run(main)
    assert {status for status, _ in probes} == {b"HTTP/1.1 200 OK"}, probes
    assert max(seconds for _, seconds in probes) < 1.0, probes
    assert set(scrapes) == {b"HTTP/1.1 200 OK"}, scrapes  # on the one keep-alive connection: never evicted
    assert evicted > 0


needs_compact_tls = pytest.mark.skipif(
    not tlsbuffer.compact_tls_available(),
    reason="this Python serves TLS through asyncio's public path, whose handshakes are outside the cap",
)


@needs_compact_tls
@pytest.mark.parametrize(
    "stall",
    [
        pytest.param(b"", id="silent-after-connect"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", id="the-start-of-a-client-hello"),
    ],
)
def test_connections_stalled_in_the_tls_handshake_count_under_the_cap_and_leave_first(
    stall: bytes,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    server_tls, client_tls = tls_contexts

    async def main() -> tuple[list[tuple[bytes, float]], list[bytes], int, int]:
        async with serving(_app(), web_settings(max_connections=CAP), tls=server_tls) as server:
            server.connections.grace = GRACE
            probes, scrapes = await _attack(server, stall, client_tls)
            return probes, scrapes, server.connections.stats.closed["evicted"], len(server.connections)

    probes, scrapes, evicted, still_open = run(main)
    assert {status for status, _ in probes} == {b"HTTP/1.1 200 OK"}, probes
    assert max(seconds for _, seconds in probes) < 1.0, probes
    assert set(scrapes) == {b"HTTP/1.1 200 OK"}, scrapes
    assert evicted > 0  # handshakes under way were counted, and made room
    assert still_open <= CAP


@needs_compact_tls
@pytest.mark.parametrize(
    ("sent", "answer"),
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", tlsbuffer.PLAIN_HTTP_ANSWER, id="get"),
        pytest.param(b"HEAD / HTTP/1.1\r\n\r\n", tlsbuffer.PLAIN_HTTP_ANSWER, id="head"),
        pytest.param(b"POST /x HTTP/1.1\r\n\r\n", tlsbuffer.PLAIN_HTTP_ANSWER, id="post"),
        pytest.param(b"OPTIONS * HTTP/1.1\r\n\r\n", tlsbuffer.PLAIN_HTTP_ANSWER, id="options"),
        pytest.param(b"BREW / HTTP/1.1\r\n\r\n", b"", id="not-one-of-gos-prefixes-is-closed"),
    ],
)
def test_plain_http_to_the_tls_port_gets_gos_answer(
    sent: bytes,
    answer: bytes,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    async def main() -> bytes:
        async with serving(_app(), web_settings(), tls=tls_contexts[0]) as server:
            reader, writer = await open_client(server)
            for byte in sent[:4]:  # the first bytes one at a time: the prefix is judged whole, however it comes
                writer.write(bytes([byte]))
                await bounded(writer.drain())
                await asyncio.sleep(0.01)
            writer.write(sent[4:])  # the server answers, closes and reads no more
            try:
                data = await bounded(reader.read())
            except ConnectionResetError:
                data = b""
            writer.close()
            return data

    assert run(main) == answer


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", id="connection-close"),
        pytest.param(b"GET /slow HTTP/1.0\r\n\r\n", id="http-1.0"),
        pytest.param(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", id="keep-alive"),
    ],
)
@pytest.mark.parametrize("when", ["before-the-answer", "during-the-body"])
def test_a_client_that_resets_before_or_during_its_answer_is_no_error_in_the_log(
    request_bytes: bytes, when: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with serving(_app(), web_settings()) as server:
            for _ in range(3):
                reader, writer = await open_client(server)
                writer.write(request_bytes)
                await bounded(writer.drain())
                if when == "during-the-body":
                    await bounded(reader.readexactly(32 * 1024))
                _reset(writer)
            await asyncio.sleep(0.6)  # the handlers answer into the reset connections meanwhile

    with caplog.at_level(logging.DEBUG):
        run(main)
    loud = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert loud == [], [record.getMessage() for record in loud]


@needs_compact_tls
@pytest.mark.parametrize(
    ("server_minimum", "client_maximum", "alert"),
    [
        pytest.param(ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2, "PROTOCOL_VERSION", id="no-common-version"),
    ],
)
def test_a_failed_handshake_sends_its_alert_before_the_close(
    server_minimum: ssl.TLSVersion,
    client_maximum: ssl.TLSVersion,
    alert: str,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    """Go's clients read why (``protocol version not supported``); asyncio's own protocol closed without a word."""
    server_tls = tls_contexts[0]
    server_tls.minimum_version = server_minimum

    async def main() -> str:
        client = ssl.create_default_context()
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        client.maximum_version = client_maximum
        async with serving(_app(), web_settings(), tls=server_tls) as server:
            try:
                await open_client(server, client)
            except (ssl.SSLError, ConnectionError) as error:
                return str(error)
            return "handshake succeeded"

    try:
        assert alert in run(main)
    finally:
        server_tls.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED


# -- what a TLS connection holds before its first record is whole --------------------------------------------------

START_OF_A_CLIENT_HELLO = (
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a record header for 512 bytes, and 6 of them
)
HELD = 50


def _client_hello() -> bytes:
    """A whole ClientHello, as Python's client sends it first."""
    client = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        client.do_handshake()
    return outgoing.read()


async def _raw_connection(server: WebServer, sent: bytes) -> socket.socket:
    """A plain TCP connection to ``server`` that sent ``sent``: little memory on the client's side."""
    loop = asyncio.get_running_loop()
    host, port = server.addresses[0].rsplit(":", 1)
    sock = socket.socket()
    sock.setblocking(False)
    await bounded(loop.sock_connect(sock, (host, int(port))))
    if sent:
        await bounded(loop.sock_sendall(sock, sent))
    return sock


async def _accepted(server: WebServer, count: int) -> None:
    while len(server.connections) < count:
        await asyncio.sleep(0.01)


def _tls_protocols() -> int:
    gc.collect()
    return sum(isinstance(thing, asyncio.sslproto.SSLProtocol) for thing in gc.get_objects())


@needs_compact_tls
@pytest.mark.parametrize(
    "stall",
    [pytest.param(b"", id="silent-after-connect"), pytest.param(START_OF_A_CLIENT_HELLO, id="part-of-a-client-hello")],
)
def test_a_tls_connection_whose_first_record_is_not_whole_holds_no_tls_state(
    stall: bytes,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    """OpenSSL's state for a connection (its read and write buffers: about 40 KiB, Go's whole stalled handshake about
    17) is made with the TLS protocol, once the client's first record is all in, not at the accept: a flood of silent
    or half-sent handshakes holds a socket and a few small objects each (BENCHMARKS.md, "Memory per stalled TLS
    connection": 51-62 KiB each before, about 4 KiB after)."""

    async def main() -> int:
        async with serving(_app(), web_settings(max_connections=2 * HELD), tls=tls_contexts[0]) as server:
            before = _tls_protocols()
            held = [await _raw_connection(server, stall) for _ in range(HELD)]
            await bounded(_accepted(server, len(held)))
            await asyncio.sleep(0.1)  # each connection's stalled bytes read
            made = _tls_protocols() - before
            for sock in held:
                sock.close()
            return made

    assert run(main) == 0


async def _tls_answer_to_a_hello_in_pieces(server: WebServer, context: ssl.SSLContext, cuts: list[int]) -> bytes:
    """A TLS client whose ClientHello leaves in pieces, cut at ``cuts`` (a negative cut counts from its end), then
    asks ``GET /``: the answer's status line."""
    loop = asyncio.get_running_loop()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    points = [cut % len(hello) for cut in cuts]
    sock = await _raw_connection(server, b"")
    try:
        for start, end in zip([0, *points], [*points, len(hello)], strict=True):
            await bounded(loop.sock_sendall(sock, hello[start:end]))
            await asyncio.sleep(0.02)  # each piece its own read on the server's side

        async def exchange() -> None:
            await bounded(loop.sock_sendall(sock, outgoing.read()))
            received = await bounded(loop.sock_recv(sock, 65536))
            if not received:
                raise ConnectionResetError("the server closed")
            incoming.write(received)

        while True:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                await exchange()
        client.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while b"\r\n" not in answer:
            try:
                answer += client.read(65536)
            except ssl.SSLWantReadError:
                await exchange()
        return answer.split(b"\r\n", 1)[0]
    finally:
        sock.close()


@needs_compact_tls
@pytest.mark.parametrize(
    "cuts",
    [
        pytest.param([3], id="inside-the-record-header"),
        pytest.param([5], id="after-the-record-header"),
        pytest.param([40], id="inside-the-record"),
        pytest.param([-1], id="all-but-its-last-byte"),
        pytest.param([1, 2, 3, 4, 5, 6], id="a-byte-at-a-time-then-the-rest"),
    ],
)
def test_a_client_hello_in_pieces_is_served(
    cuts: list[int],
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    async def main() -> bytes:
        async with serving(_app(), web_settings(), tls=tls_contexts[0]) as server:
            return await _tls_answer_to_a_hello_in_pieces(server, tls_contexts[1], cuts)

    assert run(main) == b"HTTP/1.1 200 OK"


async def _until_closed(sock: socket.socket) -> bytes:
    """What the server sends before it closes ``sock``."""
    loop = asyncio.get_running_loop()
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while data := await bounded(loop.sock_recv(sock, 65536)):
            received += data
    sock.close()
    return received


@needs_compact_tls
@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(b"", id="silent"),
        pytest.param(START_OF_A_CLIENT_HELLO, id="part-of-a-client-hello"),
        pytest.param(_client_hello(), id="a-whole-client-hello-then-nothing"),
    ],
)
def test_a_tls_handshake_not_done_within_the_header_timeout_is_closed(
    sent: bytes,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    """The handshake's deadline runs from the accept, whether OpenSSL has seen the client's bytes yet or not."""

    async def main() -> int:
        async with serving(_app(), web_settings(header_timeout_seconds=0.3), tls=tls_contexts[0]) as server:
            await _until_closed(await _raw_connection(server, sent))  # bounded: far sooner than the default 10 s
            await asyncio.sleep(0.05)
            return len(server.connections)

    assert run(main) == 0


@needs_compact_tls
@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(b"\x16\x03\x01\xff\xff" + b"\x01" * 64, id="a-record-longer-than-tls-allows"),
        pytest.param(b"\x17\x03\x03\x00\x05hello", id="application-data-before-the-handshake"),
    ],
)
def test_a_first_record_tls_refuses_gets_its_alert_without_waiting_for_more(
    sent: bytes,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> None:
    """Held as plain bytes only while it can still become a whole handshake record: anything else is OpenSSL's to
    refuse, at once, with its alert (an alert record's first byte is 21)."""

    async def main() -> bytes:
        async with serving(_app(), web_settings(), tls=tls_contexts[0]) as server:
            return await _until_closed(await _raw_connection(server, sent))

    assert run(main)[:1] == b"\x15"
