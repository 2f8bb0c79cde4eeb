"""Listening sockets: a kernel queue as deep as Go's, accepted a few connections per event-loop turn, and a flood's
connection over the cap closed before anything is made for it.

asyncio's ``create_server(backlog=N)`` uses N twice: as the kernel's listen queue, and as how many connections one
turn of the event loop accepts. A queue of 128 is full while a flood reconnects as fast as the cap evicts, and the
kernel drops a SYN that finds it full: a new client (a health probe) waited 1 s for its retransmission. A queue of
4,096 ends that, but one turn then accepted hundreds of connections while a keep-alive scrape waited. So the queue is
:data:`LISTEN_BACKLOG` and a turn accepts :data:`ACCEPT_BATCH` (BENCHMARKS.md, "Stalled connections").

A new client waits for every connection ahead of it in the queue to be accepted, so what a flood's connection costs
is what a probe waits: accepted at the cap, a connection that has sent only part of a request (a request head
without its end, a TLS record shorter than its header says) makes nobody leave when everything open stands as high
as it (:meth:`~.connections.Connections.stalled_newcomer_leaves`): it is closed at once, before a transport,
protocol or parser is made for it. Its bytes are judged by what reads them later (``stalled``: h11 for HTTP,
the TLS first-record gate for TLS), peeked from the kernel and left there.

Where the event loop has no ``add_reader`` (Windows' proactor loop), asyncio's own server serves the socket, with
the same queue and batch.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from nvidia_gpu_exporter.httpserver.connections import ACCEPT_BATCH, Connections

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 4096  # the kernel's listen queue: Go's (somaxconn); the kernel lowers it to net.core.somaxconn
PEEK_BYTES = 4096  # what is looked at of a new connection's first bytes at the cap: a scrape request fits
ACCEPT_RETRY_SECONDS = 1.0  # out of descriptors: accepting resumes after this (asyncio's)
_OUT_OF_RESOURCES = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))

Stalled = Callable[[bytes], bool]  # whether a connection's first bytes are only the start of a request


class Listening(Protocol):
    """A socket being served: closing it stops accepting (open connections stay)."""

    def close(self) -> None: ...


class Listener:
    """Accepts connections on a listening ``sock`` and serves each with ``factory``'s protocol (``ssl``: asyncio's TLS
    over it), as the module docstring says."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        *,
        connections: Connections | None,
        stalled: Stalled,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.factory = factory
        self.connections = connections
        self.stalled = stalled
        self._ssl = _tls_options(ssl_context, handshake_timeout)
        self._starting: set[asyncio.Task[object]] = set()  # connections whose transport is being made
        self._retry: asyncio.TimerHandle | None = None
        self._serving = False

    def start(self) -> None:
        self.sock.setblocking(False)
        self.sock.listen(LISTEN_BACKLOG)
        self._resume()

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._serving:
            self.loop.remove_reader(self.sock.fileno())
            self._serving = False
        self.sock.close()

    def _resume(self) -> None:
        self._retry = None
        self._serving = True
        self.loop.add_reader(self.sock.fileno(), self.accept)

    def accept(self) -> None:
        """Accept up to :data:`ACCEPT_BATCH` connections; out of descriptors, stop for :data:`ACCEPT_RETRY_SECONDS`
        and say so once through the loop's exception handler, as asyncio's server does."""
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:
                if error.errno not in _OUT_OF_RESOURCES:
                    raise
                self.loop.call_exception_handler(
                    {"message": "socket.accept() out of system resource", "exception": error, "socket": self.sock}
                )
                self.loop.remove_reader(self.sock.fileno())
                self._serving = False
                self._retry = self.loop.call_later(ACCEPT_RETRY_SECONDS, self._resume)
                return
            conn.setblocking(False)
            if self._closed_at_once(conn):
                continue
            task: asyncio.Task[object] = self.loop.create_task(
                self.loop.connect_accepted_socket(self.factory, conn, **self._ssl)
            )
            self._starting.add(task)
            task.add_done_callback(self._started)

    def _started(self, task: asyncio.Task[object]) -> None:
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("a connection closed while it was set up", extra={"err": str(task.exception())})

    def _closed_at_once(self, conn: socket.socket) -> bool:
        """Close ``conn`` if it is a flood's: at the cap, only the start of a request, and nobody below it."""
        connections = self.connections
        if connections is None or not connections.full():
            return False
        try:
            first = conn.recv(PEEK_BYTES, socket.MSG_PEEK)
        except OSError:  # nothing yet (or reset already): served as any other
            return False
        if not first or not self.stalled(first) or not connections.stalled_newcomer_leaves():
            return False
        connections.stats.closed["evicted"] += 1
        conn.close()
        return True


def _tls_options(ssl_context: ssl.SSLContext | None, handshake_timeout: float | None) -> dict[str, Any]:
    """asyncio's TLS arguments: none without TLS (it refuses a handshake timeout alone)."""
    if ssl_context is None:
        return {}
    return {"ssl": ssl_context, "ssl_handshake_timeout": handshake_timeout}


async def listen(
    sock: socket.socket,
    factory: Callable[[], asyncio.BaseProtocol],
    *,
    connections: Connections | None,
    stalled: Stalled,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout: float | None = None,
) -> Listening:
    """Serve ``sock``: a :class:`Listener` where the loop can watch the socket, asyncio's server elsewhere."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, asyncio.SelectorEventLoop):
        listener = Listener(
            sock,
            factory,
            connections=connections,
            stalled=stalled,
            ssl_context=ssl_context,
            handshake_timeout=handshake_timeout,
        )
        listener.start()
        return listener
    tls = _tls_options(ssl_context, handshake_timeout)
    server = await loop.create_server(factory, sock=sock, backlog=ACCEPT_BATCH, **tls)
    sock.listen(LISTEN_BACKLOG)  # asyncio listened with its batch
    return server
