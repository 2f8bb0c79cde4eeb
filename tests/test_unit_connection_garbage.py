"""A closed connection is freed by reference counting when it closes, not left for the garbage collector.

Under a flood of connections evicted at the cap, every closed one that sat in a reference cycle waited for the next
full collection (every 2 s, support/garbage.py): about 600 connections' objects at a time, which grew CPython's
object arenas by megabytes that a few long-lived objects then kept after the flood (BENCHMARKS.md, "What stays after
a flood"). Two cycles did it: asyncio's TCP transport holds a bound method of itself on Python 3.11 (CPython's
gh-100348, fixed in 3.12), and a TLS connection whose handshake never finished held its HTTP protocol, which held a
bound method of the connection's deadline protocol. Each case here opens connections to a real listener on
127.0.0.1, lets the client close them, and counts the server's objects left with the collector switched off.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator

import pytest
import trustme

from async_helpers import run
from nvidia_gpu_exporter.httpserver.connections import Connections
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.protocol import HttpProtocol, OpenConnections
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats
from nvidia_gpu_exporter.httpserver.timeouts import DeadlineProtocol, serve_with_deadlines

CONNECTIONS = 20
REQUEST = b"GET / HTTP/1.1\r\nHost: exporter\r\nConnection: close\r\n\r\n"
SERVER_TYPES = (DeadlineProtocol, HttpProtocol, asyncio.Transport, asyncio.BaseProtocol, socket.socket)


def _app() -> App:
    async def hello(request: Request) -> Response:
        return Response(body=b"hello\n")

    app = App()
    app.add_get("/", hello)
    return app


@pytest.fixture(scope="module")
def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def _client_hello(client: ssl.SSLContext) -> bytes:
    tls = client.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def _send_and_close(port: int, data: bytes, *, read: bool = False) -> None:
    """A raw client (no asyncio transport of its own): sends ``data``, reads the answer to its end if ``read``."""
    loop = asyncio.get_running_loop()
    with socket.socket() as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, data)
        while read:
            read = bool(await asyncio.wait_for(loop.sock_recv(sock, 65536), 5))


def _tls_request(port: int, client: ssl.SSLContext) -> bytes:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    with client.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(REQUEST)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


Client = Callable[[int, ssl.SSLContext], Awaitable[object]]
CLIENTS: dict[str, tuple[bool, Client]] = {
    "plain-answered": (False, lambda port, _: _send_and_close(port, REQUEST, read=True)),
    "plain-stalled-head": (False, lambda port, _: _send_and_close(port, b"GET / HTTP/1.1\r\nHost: x\r\n")),
    "tls-answered": (True, lambda port, client: asyncio.to_thread(_tls_request, port, client)),
    "tls-whole-client-hello": (True, lambda port, client: _send_and_close(port, _client_hello(client))),
    "tls-part-of-a-client-hello": (True, lambda port, client: _send_and_close(port, _client_hello(client)[:11])),
}


def _server_objects() -> int:
    return sum(isinstance(thing, SERVER_TYPES) for thing in gc.get_objects())


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
@pytest.mark.parametrize("case", list(CLIENTS))
def test_a_closed_connection_leaves_nothing_for_the_garbage_collector(
    case: str, contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    tls, client = CLIENTS[case]
    server_context, client_context = contexts

    async def main() -> int:
        app = _app()
        connections = Connections(0, ConnectionStats())
        sock = socket.create_server(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = await serve_with_deadlines(
            lambda finished: HttpProtocol(app, idle_timeout=0, connections=OpenConnections(), finished=finished),
            sock,
            header_timeout=10,
            write_timeout=10,
            ssl_context=server_context if tls else None,
            connections=connections,
        )

        async def all_closed() -> None:
            for _ in range(500):  # each close reaches the protocols a loop iteration or two later
                if len(connections) == 0:
                    break
                await asyncio.sleep(0.01)
            for _ in range(5):
                await asyncio.sleep(0)
            assert len(connections) == 0

        await client(port, client_context)  # the first one builds what lives for the server's life (its caches)
        await all_closed()
        before = _server_objects()
        for _ in range(CONNECTIONS):
            await client(port, client_context)
        await all_closed()
        left = _server_objects() - before
        server.close()
        return left

    assert run(main) == 0
