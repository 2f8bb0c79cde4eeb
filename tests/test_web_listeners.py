"""The listening servers of ``WebServer`` in-process: every socket served, a bounded TLS handshake, and a
graceful stop (in-flight requests finish within the grace period, idle keep-alive connections close, nothing
listens afterwards), over plain HTTP and TLS alike."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import trustme

from async_helpers import bounded, run
from nvidia_gpu_exporter.httpserver import server as server_module
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.server import bind_socket
from nvidia_gpu_exporter.web.server import WebServer
from nvidia_gpu_exporter.web.settings import WebSettings

HEADER_TIMEOUT_SECONDS = 0.3


def settings() -> WebSettings:
    return WebSettings(
        telemetry_path="/metrics",
        max_requests=0,
        timeout_offset_seconds=0.5,
        idle_timeout_seconds=60.0,  # far beyond every test: only the stop closes idle connections
        header_timeout_seconds=HEADER_TIMEOUT_SECONDS,
        write_timeout_seconds=0.0,
        enable_pprof=False,
    )


@dataclass
class Gate:
    """``/slow`` answers once ``release`` is set; ``entered`` and ``cancelled`` say what the handler saw."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


def gated_app(gate: Gate) -> App:
    async def slow(_: Request) -> Response:
        gate.entered.set()
        try:
            await gate.release.wait()
        except asyncio.CancelledError:
            gate.cancelled.set()
            raise
        return Response(text="finished\n")

    async def fast(_: Request) -> Response:
        return Response(text="fast\n")

    app = App()
    app.add_get("/slow", slow)
    app.add_get("/fast", fast)
    return app


@dataclass(frozen=True)
class Tls:
    server: ssl.SSLContext | None
    client: ssl.SSLContext | None


@pytest.fixture(scope="module")
def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts from a throwaway CA."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


@pytest.fixture(params=["http", "https"])
def transport(request: pytest.FixtureRequest, tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> Tls:
    return Tls(*tls_contexts) if request.param == "https" else Tls(None, None)


@dataclass
class Running:
    server: WebServer
    tls: Tls

    async def connect(self, index: int = 0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.server.addresses[index].rsplit(":", 1)
        return await asyncio.open_connection(host, int(port), ssl=self.tls.client)

    async def request(self, path: str, index: int = 0) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
        """One keep-alive GET; returns the whole response and the still open connection."""
        reader, writer = await self.connect(index)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: exporter\r\n\r\n".encode("ascii"))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        return head + await reader.readexactly(length), reader, writer

    async def until_refused(self) -> None:
        while not await self.refuses():
            await asyncio.sleep(0.01)

    async def refuses(self, index: int = 0) -> bool:
        try:
            _, writer = await self.connect(index)
        except OSError:
            return True
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return False


@contextlib.asynccontextmanager
async def listening(app: App, tls: Tls, sockets: int = 1) -> AsyncIterator[Running]:
    """The real ``WebServer`` (no web config file) on ``sockets`` loopback port-0 sockets."""
    server = WebServer(app, settings())
    server.security.ssl_context = tls.server
    await server.start([bind_socket("127.0.0.1:0") for _ in range(sockets)])
    try:
        yield Running(server, tls)
    finally:
        await bounded(server.stop())


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (EOF or a reset) instead of sending anything more."""
    try:
        return await bounded(reader.read(1)) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def test_every_socket_is_served_and_none_listens_after_the_stop(transport: Tls) -> None:
    async def main() -> None:
        async with listening(gated_app(Gate()), transport, sockets=2) as running:
            for index in (0, 1):
                answer, _, writer = await bounded(running.request("/fast", index))
                assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
                assert answer.endswith(b"fast\n")
                writer.close()
        assert await running.refuses(0)
        assert await running.refuses(1)

    run(main)


def test_an_in_flight_request_finishes_during_the_stop_while_new_connections_are_refused(transport: Tls) -> None:
    async def main() -> None:
        gate = Gate()
        async with listening(gated_app(gate), transport) as running:
            in_flight = asyncio.create_task(running.request("/slow"))
            await bounded(gate.entered.wait())
            stopping = asyncio.create_task(running.server.stop())
            await bounded(running.until_refused())
            assert not stopping.done()  # still waiting for the request in flight
            gate.release.set()
            answer, _, writer = await bounded(in_flight)
            await bounded(stopping)
            writer.close()
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        assert answer.endswith(b"finished\n")
        assert not gate.cancelled.is_set()

    run(main)


def test_an_idle_keep_alive_connection_is_closed_by_the_stop(transport: Tls) -> None:
    async def main() -> None:
        async with listening(gated_app(Gate()), transport) as running:
            answer, reader, writer = await bounded(running.request("/fast"))
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            await bounded(running.server.stop())
            assert await closed_by_server(reader)
            writer.close()

    run(main)


def test_a_request_outliving_the_grace_period_is_cancelled_and_the_stop_returns(
    transport: Tls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "SHUTDOWN_GRACE_SECONDS", 0.2)

    async def main() -> None:
        gate = Gate()
        async with listening(gated_app(gate), transport) as running:
            in_flight = asyncio.create_task(running.request("/slow"))
            await bounded(gate.entered.wait())
            await bounded(running.server.stop())
            await bounded(gate.cancelled.wait())
            with pytest.raises((asyncio.IncompleteReadError, ConnectionError, ssl.SSLError)):
                await bounded(in_flight)

    run(main)


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(transport: Tls) -> None:
    """Over TLS this bounds the handshake: a client that never sends its hello holds nothing for long."""

    async def main() -> None:
        async with listening(gated_app(Gate()), transport) as running:
            host, port = running.server.addresses[0].rsplit(":", 1)
            reader, writer = await bounded(asyncio.open_connection(host, int(port)))  # raw TCP, no hello
            assert await closed_by_server(reader)
            writer.close()

    run(main)


def test_a_failed_start_leaves_nothing_listening() -> None:
    async def main() -> None:
        good = bind_socket("127.0.0.1:0")
        broken = socket.socket()
        broken.close()
        server = WebServer(gated_app(Gate()), settings())
        try:
            with pytest.raises(OSError, match="Bad file descriptor"):
                await server.start([good, broken])
        finally:
            await bounded(server.stop())
        assert good.fileno() == -1  # the listening socket that did start was closed by the stop

    run(main)
