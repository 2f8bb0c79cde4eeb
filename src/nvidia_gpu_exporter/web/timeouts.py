"""Connection deadlines aiohttp does not have: request-header read and response write timeouts.

Every connection's protocol is wrapped: a request whose headers are not complete within the read
(header) timeout, counted from its first byte or from the connection's start, closes the connection;
so do responses still unread by the client a write timeout after their request arrived. Idle keep-alive
connections are aiohttp's own ``keepalive_timeout``. Together they bound what slow or hostile clients
(idle sockets, byte-at-a-time senders, readers that never read) can hold.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import socket
import ssl
import sys
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)

HEADER_END = b"\r\n\r\n"
TLS_RECEIVE_BUFFER_BYTES = 16 * 1024  # one maximal TLS record's plaintext; asyncio's own is 256 KiB


class DeadlineProtocol(asyncio.Protocol):
    """Forwards everything to aiohttp's protocol while enforcing the header and write deadlines.

    One timer per connection at most, re-armed lazily: a busy keep-alive connection costs no timer
    per request, and an idle one costs none at all.
    """

    def __init__(
        self, inner: asyncio.Protocol, loop: asyncio.AbstractEventLoop, header_timeout: float, write_timeout: float
    ) -> None:
        self.inner = inner
        self.loop = loop
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        self.transport: asyncio.Transport | None = None
        self._tail = b""
        self._header_started: float | None = None  # an incomplete request header began at this time
        self._last_request: float | None = None  # the latest complete request header arrived at this time
        self._timer: asyncio.TimerHandle | None = None

    # -- deadlines --------------------------------------------------------------------------------------

    def _next_deadline(self) -> float | None:
        deadlines = []
        if self._header_started is not None and self.header_timeout > 0:
            deadlines.append(self._header_started + self.header_timeout)
        if self._last_request is not None and self.write_timeout > 0:
            deadlines.append(self._last_request + self.write_timeout)
        return min(deadlines) if deadlines else None

    def _arm(self) -> None:
        if self._timer is None:
            deadline = self._next_deadline()
            if deadline is not None:
                self._timer = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        now = self.loop.time()
        if self._header_started is not None and 0 < self.header_timeout <= now - self._header_started:
            log.debug("closing a connection: request headers not received in time")
            transport.abort()
            return
        if self._last_request is not None and 0 < self.write_timeout <= now - self._last_request:
            if transport.get_write_buffer_size() > 0:
                log.debug("closing a connection: the response was not read in time")
                transport.abort()
                return
            self._last_request = None  # answered and read: nothing left to watch
        self._arm()

    # -- protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._header_started = self.loop.time()  # the first request's headers are awaited from now
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if data:
            now = self.loop.time()
            stream = self._tail + data
            end = stream.rfind(HEADER_END)
            if end >= 0:
                self._last_request = now
                rest = stream[end + len(HEADER_END) :]
                self._header_started = now if rest else None
                self._tail = rest[-(len(HEADER_END) - 1) :]
            else:
                if self._header_started is None:
                    self._header_started = now
                self._tail = stream[-(len(HEADER_END) - 1) :]
            self._arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


if sys.version_info >= (3, 11):

    class CompactTLSProtocol(asyncio.sslproto.SSLProtocol):
        """asyncio's TLS protocol with a 16 KiB receive buffer instead of 256 KiB per connection.

        The buffer is the chunk size for what a client sends (a scrape request: a few hundred bytes; a
        longer record simply arrives in more than one read), yet asyncio allocates and zero-fills 256 KiB
        for every connection, which the allocator keeps after it closes: 50 TLS scrapers cost about
        12 MiB of RSS for it. Responses do not go through this buffer.
        """

        max_size = TLS_RECEIVE_BUFFER_BYTES


def _retrieve_outcome(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


class DeadlineSockSite(web.SockSite):
    """A ``SockSite`` whose connections get :class:`DeadlineProtocol` and a bounded TLS handshake."""

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        header_timeout: float,
        write_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, sock, ssl_context=ssl_context)
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        inner_factory: Callable[[], asyncio.Protocol] = server

        def factory() -> asyncio.Protocol:
            return DeadlineProtocol(inner_factory(), loop, self.header_timeout, self.write_timeout)

        handshake_timeout = self.header_timeout if self.header_timeout > 0 else None
        if self._ssl_context is None:
            self._server = await loop.create_server(factory, sock=self._sock, backlog=self._backlog)
        elif sys.version_info >= (3, 11):
            context = self._ssl_context

            def tls_factory() -> asyncio.BaseProtocol:
                handshake_done = loop.create_future()  # nobody awaits it: a failed handshake is only logged
                handshake_done.add_done_callback(_retrieve_outcome)
                return CompactTLSProtocol(
                    loop,
                    factory(),
                    context,
                    handshake_done,
                    server_side=True,
                    # The handshake is bounded like the request headers (asyncio's default would be 60 s).
                    ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]  # typeshed: int only
                )

            self._server = await loop.create_server(tls_factory, sock=self._sock, backlog=self._backlog)
        else:
            # The handshake is bounded like the request headers (asyncio's default would be 60 s).
            self._server = await loop.create_server(
                factory,
                sock=self._sock,
                ssl=self._ssl_context,
                backlog=self._backlog,
                ssl_handshake_timeout=handshake_timeout,
            )
