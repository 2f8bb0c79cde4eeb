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
import re
import socket
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from nvidia_gpu_exporter.httpserver.connections import LISTEN_BACKLOG, Connections
from nvidia_gpu_exporter.httpserver.protocol import closing_answer
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

log = logging.getLogger(__name__)

HEADER_END = b"\r\n\r\n"  # the common end of a request head
# Every end of a request head that h11, the parser of record, takes: a blank line after a line, each line break
# CRLF or a bare LF (RFC 9112 2.2). Counting CRLF CRLF alone, a head ending otherwise never ended here: the header
# deadline ran on through its answer (a slow one was cut).
HEAD_END = re.compile(rb"\n\r?\n")
TAIL_BYTES = 2  # what a read keeps of its end, for a head end split across reads (at most 3 bytes long)
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
    """The HTTP protocol a :class:`DeadlineProtocol` wraps (httpserver/protocol.py's): asyncio's protocol methods,
    whether it owes the client a response, and whether one is being made or written now."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def answering(self) -> bool: ...
    def responding(self) -> bool: ...


ProtocolFactory = Callable[[Callable[[int], None]], HttpConnection]


class DeadlineProtocol(asyncio.Protocol):
    """Forwards everything to the HTTP protocol while enforcing the bounds of the module docstring.

    ``inner`` makes the HTTP protocol, given the callback it calls with each response's status once the response
    is all in the transport (:meth:`response_finished`). One timer per connection at most, and none while it is
    idle.
    """

    def __init__(
        self,
        inner: ProtocolFactory,
        loop: asyncio.AbstractEventLoop,
        header_timeout: float,
        write_timeout: float,
        connections: Connections | None = None,
    ) -> None:
        self.inner = inner(self.response_finished)
        self.loop = loop
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        self.connections = connections
        self.stats = connections.stats if connections is not None else ConnectionStats()
        self.transport: asyncio.Transport | None = None
        self._fd = -1
        self._served = False  # the HTTP protocol saw connection_made
        self._refusing = False  # answered by this class; waiting for the request before closing
        self._half_closed = False  # refused, and the request is in: what comes now is dropped until the close
        self._tail = b""
        self._header_started: float | None = None  # an incomplete request header began at this time
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
        """Since when nothing is due on this connection as far as the process knows, for the cap; None while busy
        (the HTTP protocol's word, or bytes in the process's buffer). No syscall: the cap ranks every open
        connection with it, and asks the kernel (:meth:`unsent_in_kernel`) only about those about to leave."""
        transport = self.transport
        if (
            self._refusing
            or self.inner.answering()
            or (transport is not None and transport.get_write_buffer_size() > 0)
        ):
            return None
        return self._idle_since

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
        log.debug("closing an idle connection to make room for a new one")
        if self.transport is not None:
            self.transport.close()

    def response_finished(self, status: int) -> None:
        """The HTTP protocol wrote a whole response into the transport: what is left unsent is watched from now."""
        self._last_status = status
        self._idle_since = self.loop.time()
        if self._header_started is not None:  # a head begun behind this response: its clock starts now, as Go's
            self._header_started = self._idle_since
            self._arm()
        if self.unsent_bytes() > 0:
            self._watch_write()

    # -- deadlines --------------------------------------------------------------------------------------

    def _watch_write(self) -> None:
        if self.write_timeout > 0 and self._write_progress is None:
            self._write_progress = self.loop.time()
            self._unsent = self.unsent_bytes()
            self._arm()

    def _next_deadline(self) -> float | None:
        deadlines = []
        if self._header_started is not None and self.header_timeout > 0:
            deadline = self._header_started + self.header_timeout
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
        if (
            self._header_started is not None
            and 0 < self.header_timeout <= now - self._header_started
            and not self.inner.responding()  # the response before the head is the write timeout's to bound
        ):
            log.debug("closing a connection: request headers not received in time")
            self.stats.closed["header_timeout"] += 1
            transport.abort()
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
        self._header_started = None
        self._write_progress = None
        transport.write(answer)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(REFUSAL_LINGER_SECONDS, transport.abort)

    def _refused_data(self, data: bytes) -> None:
        """Discard what a refused client sends; once its request headers are in, half-close (over TLS: close).

        Half-closed, what the client still sends is read and dropped until it closes too (:meth:`eof_received`)
        or the linger ends: closed at once with more of its bytes unread, the connection was reset, and the reset
        destroyed the answer before a client that read a little later had it."""
        transport = self.transport
        if transport is None or self._half_closed:
            return
        stream = self._tail + data
        if HEAD_END.search(stream) is None:
            self._tail = stream[-TAIL_BYTES:]
        elif transport.can_write_eof():
            transport.write_eof()
            self._half_closed = True
        else:
            transport.close()

    # -- protocol ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        now = self.loop.time()
        self._idle_since = now
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        if self.connections is not None and not self.connections.admit(self):
            self._refuse(TOO_MANY_CONNECTIONS)
            return
        self._header_started = now  # the first request's headers are awaited from now
        self._arm()
        self._served = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            self._refused_data(data)
            return
        if not data:
            return
        now = self.loop.time()
        self._idle_since = now
        if not self._tail and len(data) > 4 and data.endswith(HEADER_END) and data[-5] != 0x0A:
            # The common read: it ends with a request head (no LF before its CRLF CRLF, so HEAD_END's leftmost
            # scan below would end there too). What that scan works out for it: no header pending, nothing kept.
            self._header_started = None
            self._arm()
            self.inner.data_received(data)
            return
        stream = self._tail + data
        pieces = HEAD_END.split(stream)  # the heads' ends found as h11 finds them: leftmost, one after another
        if len(pieces) > 1:
            rest = pieces[-1]
            self._header_started = now if rest else None
            self._tail = rest[-TAIL_BYTES:]
        else:
            if self._header_started is None:
                self._header_started = now
            self._tail = stream[-TAIL_BYTES:]
        self._arm()
        self.inner.data_received(data)

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
        if self._served:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._watch_write()
        if self._served:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._write_progress is not None:
            self._write_progress = self.loop.time()
        if self._served:
            self.inner.resume_writing()


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""


async def serve_with_deadlines(
    factory: ProtocolFactory,
    sock: socket.socket,
    *,
    header_timeout: float,
    write_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    connections: Connections | None = None,
) -> asyncio.Server:
    """Serve ``sock`` with ``factory``'s protocols (protocol.py's), each wrapped in :class:`DeadlineProtocol`.

    With TLS the handshake is bounded like the request headers (asyncio's default would be 60 s); TLS
    listeners come from :mod:`~nvidia_gpu_exporter.httpserver.tlsbuffer`, the one module that reaches into asyncio.
    ``connections`` is shared by every listener, so the cap holds for the process.
    """
    loop = asyncio.get_running_loop()

    def deadline_factory() -> asyncio.Protocol:
        return DeadlineProtocol(factory, loop, header_timeout, write_timeout, connections)

    if ssl_context is None:
        return await loop.create_server(deadline_factory, sock=sock, backlog=LISTEN_BACKLOG)
    from nvidia_gpu_exporter.httpserver.tlsbuffer import create_tls_server  # noqa: PLC0415 - only with TLS (issue 16)

    return await create_tls_server(
        deadline_factory,
        sock,
        ssl_context,
        handshake_timeout=header_timeout if header_timeout > 0 else None,
        backlog=LISTEN_BACKLOG,
    )
