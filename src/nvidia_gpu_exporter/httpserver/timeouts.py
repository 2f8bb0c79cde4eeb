"""Connection bounds around the HTTP protocol: request-header and write timeouts, the connection cap.

Every connection's HTTP protocol (httpserver/protocol.py) is wrapped (:class:`DeadlineProtocol`):

- a request whose headers are not complete within the read (header) timeout, counted from its first byte
  or from the connection's start, closes the connection;
- a response that makes no progress for the write timeout (the client read none of it: not one byte left
  the process's buffer or the kernel's send queue) is cut, logged at warn and counted as incomplete. The
  clock runs only while something is waiting to be sent, so a slow collection or a large body read at any
  steady pace is never cut (Go's ``WriteTimeout`` instead ends the whole write a fixed time after the
  request arrived);
- each connection's send buffers are small (:data:`WRITE_BUFFER_HIGH_BYTES` in the process,
  :data:`SEND_BUFFER_BYTES` in the kernel), so a client that never reads holds little memory;
- at ``--web.max-connections`` a new connection makes the idlest one leave, or is answered 503
  (:mod:`.connections`).

Idle keep-alive connections are the HTTP protocol's own (``--web.idle-timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from nvidia_gpu_exporter.httpserver.connections import (
    STALLED_BODY,
    STALLED_HANDSHAKE,
    STALLED_HEAD,
    Connections,
)
from nvidia_gpu_exporter.httpserver.listener import Listening, listen
from nvidia_gpu_exporter.httpserver.protocol import (
    BODY,
    HEAD,
    NOTHING,
    RequestReader,
    closing_answer,
)
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH_BYTES = 16 * 1024  # the process's send buffer per connection, before the writer waits
SEND_BUFFER_BYTES = 256 * 1024  # SO_SNDBUF (Linux doubles it): what the kernel queues per connection
WRITE_POLL_MAX_SECONDS = 1.0  # how often a pending write is checked for progress, at most
REFUSAL_LINGER_SECONDS = 0.5  # a refused client gets this long to send its request before the close


TOO_MANY_CONNECTIONS = closing_answer(503, b"too many open connections, try again later\n")


if sys.platform == "linux":
    import fcntl
    import termios

    def kernel_unsent_bytes(fd: int) -> int:
        """Bytes the kernel still holds for the peer (not sent, or sent and not acknowledged)."""
        if fd < 0:
            return 0
        try:
            return int(struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0])
        except OSError:
            return 0

    def kernel_unread_bytes(fd: int) -> int:
        """Bytes the peer sent that the process has not read yet (a request on its way in)."""
        if fd < 0:
            return 0
        try:
            return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
        except OSError:
            return 0

else:

    def kernel_unsent_bytes(fd: int) -> int:
        """Unknown here: only the process's own buffer counts."""
        return 0

    def kernel_unread_bytes(fd: int) -> int:
        """Unknown here: a connection is idle until its data is read."""
        return 0


class HttpConnection(Protocol):
    """The HTTP protocol a :class:`DeadlineProtocol` wraps (protocol.py's): asyncio's protocol methods, whether a
    response is being made or written, and what the connection waits for from its client (by h11's state)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def responding(self) -> bool: ...
    def awaiting(self) -> int: ...


ProtocolFactory = Callable[[Callable[[int], None]], HttpConnection]

_STALLED_IN = {HEAD: STALLED_HEAD, BODY: STALLED_BODY}


class DeadlineProtocol(asyncio.Protocol):
    """Forwards everything to the HTTP protocol while enforcing the bounds of the module docstring.

    ``inner`` makes the HTTP protocol, given the callback it calls with each response's status once the response
    is all in the transport (:meth:`response_finished`). What the client owes (a head, a body) is the HTTP
    protocol's word, read from h11 (:meth:`HttpConnection.awaiting`): nothing here reads the request bytes. One timer
    per connection at most, and none while it is idle. The HTTP protocol is made only once the connection is served:
    a TLS handshake under way, or a refused connection, holds none (nor the cycle through ``response_finished`` that
    a handshake never finished left for the garbage collector).
    """

    def __init__(
        self,
        inner: ProtocolFactory,
        loop: asyncio.AbstractEventLoop,
        header_timeout: float,
        write_timeout: float,
        connections: Connections | None = None,
    ) -> None:
        self._make_inner = inner
        self.inner: HttpConnection  # made when the connection is served (connection_made), not for a refused one
        self.loop = loop
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        self.connections = connections
        self.stats = connections.stats if connections is not None else ConnectionStats()
        self.transport: asyncio.Transport | None = None
        self._raw: asyncio.Transport | None = None  # the TCP transport, from its accept (under TLS's)
        self._fd = -1
        self._handshaking = False  # accepted under TLS, the handshake not done yet
        self._served = False  # the HTTP protocol saw connection_made
        self._refusing = False  # answered by this class; waiting for the request before closing
        self._refused_head: RequestReader | None = None  # reads a refused client's request head
        self._half_closed = False  # refused, and the request is in: what comes now is dropped until the close
        self._request_started: float | None = None  # a request (head, then body) the client owes began then
        self._idle_since: float | None = None
        self._last_status: int | None = None  # of the latest finished response: who leaves first at the cap
        self._write_progress: float | None = None  # while a write is watched: when it last made progress
        self._unsent = 0
        self._timer: asyncio.TimerHandle | None = None

    # -- state ------------------------------------------------------------------------------------------

    def unsent_bytes(self) -> int:
        """What the client has not received yet: the process's buffer plus the kernel's send queue."""
        transport = self.transport
        if transport is None:
            return 0
        return transport.get_write_buffer_size() + kernel_unsent_bytes(self._fd)

    def idle_since(self) -> float | None:
        """Since when this connection owes nothing and has shown nothing new, for the cap: its latest response, or
        the start of the handshake, head or body it is stalled in; None while busy (a response being made, bytes
        in the process's buffer). No syscall: the cap ranks every open connection with it, and asks the kernel
        (:meth:`unsent_in_kernel`) only about those about to leave."""
        if self._refusing:
            return None
        if self._handshaking:
            return self._idle_since
        transport = self.transport
        if not self._served or self.inner.responding() or (transport is not None and transport.get_write_buffer_size()):
            return None
        if self.inner.awaiting() in _STALLED_IN and self._request_started is not None:
            return self._request_started
        return self._idle_since

    def stalled(self) -> int | None:
        """What the client owes, for the cap: a TLS handshake, a request head or a request body (``connections``'
        standings), or None (nothing, or not a byte yet)."""
        if self._handshaking:
            return STALLED_HANDSHAKE
        if not self._served:
            return None
        return _STALLED_IN.get(self.inner.awaiting())

    def unsent_in_kernel(self) -> bool:
        """Whether the kernel's send queue still holds bytes for the client (a response it has not taken)."""
        return kernel_unsent_bytes(self._fd) > 0

    def request_waiting(self) -> bool:
        """Whether the kernel holds bytes from the client that the process has not read yet (a request on its way
        in, on a connection accepted in the same batch as a flood's)."""
        return kernel_unread_bytes(self._fd) > 0

    def last_status(self) -> int | None:
        return self._last_status

    def evict(self) -> None:
        log.debug("closing a connection to make room for a new one")
        if self.transport is not None:
            self.transport.close()
        elif self._raw is not None:  # a TLS handshake under way
            self._raw.abort()

    def response_finished(self, status: int) -> None:
        """The HTTP protocol wrote a whole response into the transport: what is left unsent is watched from now."""
        self._last_status = status
        self._idle_since = self.loop.time()
        self._refresh(self._idle_since)
        if self.inner.awaiting() == HEAD:  # a head begun behind this response: its clock starts now, as Go's
            self._request_started = self._idle_since
        self._arm()
        if self.unsent_bytes() > 0:
            self._watch_write()

    # -- deadlines --------------------------------------------------------------------------------------

    def _refresh(self, now: float) -> None:
        """Follow what the client owes: a request begins with the first byte of its head (or, for the first one,
        with the connection) and ends once its body is in; its deadline covers both, as Go's read timeout."""
        if self.inner.awaiting() == NOTHING:
            self._request_started = None
        elif self._request_started is None:
            self._request_started = now

    def _watch_write(self) -> None:
        if self.write_timeout > 0 and self._write_progress is None:
            self._write_progress = self.loop.time()
            self._unsent = self.unsent_bytes()
            self._arm()

    def _next_deadline(self) -> float | None:
        deadlines = []
        if self._request_started is not None and self.header_timeout > 0:
            deadline = self._request_started + self.header_timeout
            if self.inner.responding():  # looked at again later: the clock restarts when the response is out
                deadline = max(deadline, self.loop.time() + self.header_timeout)
            deadlines.append(deadline)
        if self._write_progress is not None:
            deadlines.append(self.loop.time() + min(self.write_timeout / 4, WRITE_POLL_MAX_SECONDS))
        return min(deadlines) if deadlines else None

    def _arm(self) -> None:
        deadline = self._next_deadline()
        if deadline is None:
            return
        if self._timer is not None:
            if self._timer.when() <= deadline:
                return
            self._timer.cancel()
        self._timer = self.loop.call_at(deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        now = self.loop.time()
        self._refresh(now)  # the HTTP protocol may have moved on (a pipelined request answered) since it was read
        if (
            self._request_started is not None
            and 0 < self.header_timeout <= now - self._request_started
            and not self.inner.responding()  # the response before the head is the write timeout's to bound
        ):
            if self.inner.awaiting() == BODY:
                log.debug("closing a connection: the request body was not received in time")
                self.stats.closed["body_timeout"] += 1
            else:
                log.debug("closing a connection: request headers not received in time")
                self.stats.closed["header_timeout"] += 1
            if transport.get_write_buffer_size():
                transport.abort()
            else:
                transport.close()
            return
        if self._write_progress is not None:
            unsent = self.unsent_bytes()
            if unsent == 0:
                self._write_progress = None
            elif unsent < self._unsent:
                self._write_progress = now
            elif now - self._write_progress >= self.write_timeout:
                self._cut(transport, unsent)
                return
            self._unsent = unsent
        self._arm()

    def _cut(self, transport: asyncio.Transport, unsent: int) -> None:
        self.stats.responses_incomplete += 1
        log.warning(
            "closing a connection: the client read nothing of the response for the write timeout",
            extra={
                "remote": _peer(transport),
                "unsent_bytes": unsent,
                "write_timeout": f"{self.write_timeout:g}s",
            },
        )
        transport.abort()

    # -- refusals ---------------------------------------------------------------------------------------

    def _refuse(self, answer: bytes) -> None:
        """Answer ``answer`` and half-close once the client's request is in (closing earlier would reset the
        connection and could lose the answer); closed after :data:`REFUSAL_LINGER_SECONDS` whatever comes."""
        transport = self.transport
        assert transport is not None
        self._refusing = True
        self._refused_head = RequestReader()
        self._request_started = None
        self._write_progress = None
        transport.write(answer)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(REFUSAL_LINGER_SECONDS, transport.abort)

    def _refused_data(self, data: bytes) -> None:
        """Discard what a refused client sends; once h11 has its request head, half-close (over TLS: close).

        Half-closed, what the client still sends is read and dropped until it closes too (:meth:`eof_received`)
        or the linger ends: closed at once with more of its bytes unread, the connection was reset, and the reset
        destroyed the answer before a client that read a little later had it."""
        transport = self.transport
        if transport is None or self._half_closed or self._refused_head is None:
            return
        if not self._refused_head.head_in(data):
            return
        self._refused_head = None  # the request is in: its reader's buffer is let go
        if transport.can_write_eof():
            transport.write_eof()
            self._half_closed = True
        else:
            transport.close()

    # -- protocol ---------------------------------------------------------------------------------------

    def accepted(self, transport: asyncio.Transport, *, handshake: bool = False) -> bool:
        """The TCP connection is accepted (for TLS, before its ``handshake``): small send buffers, and a place under
        the cap, evicting another if need be; False when every connection is busy."""
        self._raw = transport
        self._idle_since = self.loop.time()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        if self.connections is not None:
            admit = self.connections.admit_handshake if handshake else self.connections.admit
            if not admit(self):
                return False
        return True

    def handshake_started(self, transport: asyncio.Transport) -> bool:
        """A TLS connection is accepted: it counts under the cap from now, its handshake a stall until done;
        False when every connection is busy (the caller drops it: there is no plain-text 503 before TLS)."""
        if not self.accepted(transport, handshake=True):
            return False
        self._handshaking = True
        return True

    def handshake_ended(self) -> None:
        """The TLS connection closed (after its handshake or during it): its place under the cap is freed, even when
        a failed handshake never made the HTTP protocol's connection."""
        self._handshaking = False
        if self.connections is not None:
            self.connections.release(self)
        self._let_go()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        if self._handshaking:
            self._handshaking = False
            if self.connections is not None:
                self.connections.handshake_done(self)
        elif not self.accepted(transport):
            self._refuse(TOO_MANY_CONNECTIONS)
            return
        self._served = True
        self.inner = self._make_inner(self.response_finished)
        self.inner.connection_made(transport)
        self._refresh(self.loop.time())  # the first request's head is awaited from now
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            self._refused_data(data)
            return
        if not data:
            return
        now = self.loop.time()
        self._idle_since = now
        self.inner.data_received(data)
        self._refresh(now)
        self._arm()

    def eof_received(self) -> bool | None:
        if self._refusing:
            return False  # close
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.connections is not None:
            self.connections.release(self)
        self.transport = None
        self._let_go()
        self._refused_head = None
        if self._served:
            self.inner.connection_lost(exc)

    def _let_go(self) -> None:
        """The TCP connection closed: its transport is let go of, and freed now rather than at the next full garbage
        collection (:func:`release_read_callback`)."""
        if self._raw is not None:
            release_read_callback(self._raw)
            self._raw = None

    def pause_writing(self) -> None:
        self._watch_write()
        if self._served:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._write_progress is not None:
            self._write_progress = self.loop.time()
        if self._served:
            self.inner.resume_writing()


def release_read_callback(transport: asyncio.BaseTransport) -> None:
    """Drop a closed TCP transport's reference to itself: on Python 3.11 asyncio's socket transport keeps its read
    callback, a bound method of itself, after the close (CPython's gh-100348, fixed in 3.12 by clearing it in
    ``close()``, as done here), so every closed connection waited for a full garbage collection; under a flood of
    evictions about 600 of them at a time, which grew CPython's object arenas by megabytes that outlived the flood
    (BENCHMARKS.md, "What stays after a flood"). Only once the transport is closing: its reader is gone by then."""
    if sys.version_info < (3, 12) and transport.is_closing() and hasattr(transport, "_read_ready_cb"):
        transport._read_ready_cb = None  # asyncio's private attribute (3.11 and before)


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""


def head_pending(first: bytes) -> bool:
    """Whether a client's first bytes are only the start of a request head, by h11 (a whole head, or a malformed
    one, is a request in: answered, not stalled)."""
    return not RequestReader().head_in(first)


async def serve_with_deadlines(
    factory: ProtocolFactory,
    sock: socket.socket,
    *,
    header_timeout: float,
    write_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    connections: Connections | None = None,
) -> Listening:
    """Serve ``sock`` (listener.py) with ``factory``'s protocols (protocol.py's), each wrapped in
    :class:`DeadlineProtocol`.

    With TLS the handshake is bounded like the request headers (asyncio's default would be 60 s); TLS
    protocols come from :mod:`~nvidia_gpu_exporter.httpserver.tlsbuffer`, the one module that reaches into asyncio.
    ``connections`` is shared by every listener, so the cap holds for the process.
    """
    loop = asyncio.get_running_loop()

    def deadline_factory() -> asyncio.Protocol:
        return DeadlineProtocol(factory, loop, header_timeout, write_timeout, connections)

    if ssl_context is None:
        return await listen(sock, deadline_factory, connections=connections, stalled=head_pending)
    from nvidia_gpu_exporter.httpserver.tlsbuffer import (  # noqa: PLC0415 - only with TLS (issue 16)
        first_record_pending,
        tls_serving,
    )

    handshake_timeout = header_timeout if header_timeout > 0 else None
    tls_factory, wrap = tls_serving(deadline_factory, ssl_context, handshake_timeout=handshake_timeout)
    return await listen(
        sock,
        tls_factory,
        connections=connections,
        stalled=first_record_pending,
        ssl_context=wrap,
        handshake_timeout=handshake_timeout,
    )
