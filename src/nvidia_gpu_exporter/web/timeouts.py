"""Connection deadlines aiohttp does not have: request-header read and response write timeouts.

Every connection's protocol is wrapped: a request whose headers are not complete within the read
(header) timeout, counted from its first byte or from the connection's start, closes the connection;
so do responses still unread by the client a write timeout after their request arrived. Idle keep-alive
connections are aiohttp's own ``keepalive_timeout``. Together they bound what slow or hostile clients
(idle sockets, byte-at-a-time senders, readers that never read) can hold.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from nvidia_gpu_exporter.web.tlsbuffer import create_tls_server

log = logging.getLogger(__name__)

HEADER_END = b"\r\n\r\n"


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


LISTEN_BACKLOG = 128  # as aiohttp's sites ask for


async def serve_with_deadlines(
    factory: Callable[[], asyncio.Protocol],
    sock: socket.socket,
    *,
    header_timeout: float,
    write_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> asyncio.Server:
    """Serve ``sock`` with ``factory``'s protocols (aiohttp's ``Server``), each wrapped in :class:`DeadlineProtocol`.

    With TLS the handshake is bounded like the request headers (asyncio's default would be 60 s); TLS
    listeners come from :mod:`~nvidia_gpu_exporter.web.tlsbuffer`, the one module that reaches into asyncio.
    """
    loop = asyncio.get_running_loop()

    def deadline_factory() -> asyncio.Protocol:
        return DeadlineProtocol(factory(), loop, header_timeout, write_timeout)

    if ssl_context is None:
        return await loop.create_server(deadline_factory, sock=sock, backlog=LISTEN_BACKLOG)
    return await create_tls_server(
        deadline_factory,
        sock,
        ssl_context,
        handshake_timeout=header_timeout if header_timeout > 0 else None,
        backlog=LISTEN_BACKLOG,
    )
