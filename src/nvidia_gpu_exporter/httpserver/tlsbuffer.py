"""TLS listeners reading into one shared 4 KiB buffer, no TLS state before the client's first record is whole, and
handshakes that count under the connection cap: the one module that touches ``asyncio.sslproto``.

asyncio's TLS protocol (Python >= 3.11) allocates and zero-fills a 256 KiB receive buffer for every connection,
which the allocator keeps after it closes: 50 TLS scrapers cost about 12 MiB of RSS for it. A client only ever
sends a scrape request (a few hundred bytes; a longer record simply arrives in more than one read), and
responses do not go through this buffer, so 4 KiB is plenty. Each read is copied at once into OpenSSL's incoming
BIO, so every connection reads into one buffer (:data:`_READS`) and holds none of its own (a stalled handshake or
an idle keep-alive scraper held 4 KiB). asyncio has no public way to choose the buffer: :class:`CompactTLSProtocol`
subclasses the private ``SSLProtocol``, overrides its ``max_size`` and replaces the buffer its constructor made.
That is done only on the CPython versions it was verified on (:data:`VERIFIED_PYTHONS`) and only while the class
still has the shape relied on (:func:`sslproto_mismatches`); anywhere else TLS is served by the public
``loop.create_server(ssl=...)`` with asyncio's own buffer, which costs memory, never correctness.

OpenSSL's state for a connection costs about 45 KiB once its handshake has begun, none of it sized by anything
Python's ``ssl`` can set: the handshake message buffer (16 KiB, allocated as 21 KiB), the ``SSL`` object (7.6 KiB)
and the two 4 KiB buffers of the handshake's write BIO, made by the first ``do_handshake``, plus the session and the
cipher and digest contexts (BENCHMARKS.md, "Memory per stalled TLS connection"); Go's server holds about as much
per stalled handshake. So a connection starts under :class:`FirstRecord`, which holds what the client sends as plain
bytes until its first TLS record is whole (the five-byte record header says how long, at most
:data:`MAX_RECORD_BYTES`), and only then makes the TLS protocol and hands it the bytes: a silent connection, or one
that sent part of a ClientHello, holds a socket and a few small objects. Anything that cannot become a whole
handshake record (another record type, a longer record) goes to OpenSSL at once, which refuses it with its alert.

:class:`FirstRecord` tells the connection's deadline protocol (:class:`TlsHooks`) when the TCP connection is
accepted, before its handshake, and :class:`CompactTLSProtocol` when it closes: a connection stalled in its
handshake holds an fd and memory, so it counts under ``--web.max-connections`` and can be evicted like one stalled
in its request head; the handshake's deadline runs from the accept. And as Go's server does, a client that speaks
plain HTTP to the TLS port (its first five bytes one of Go's HTTP prefixes) is answered :data:`PLAIN_HTTP_ANSWER` in
plain text and closed, instead of a bare close; and a failed handshake's alert (no common version, a missing client
certificate) is sent before the close, as Go sends it. On the public path none of this holds: its handshakes are
outside the cap, and plain HTTP and a failed handshake get a bare close.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import functools
import inspect
import logging
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

log = logging.getLogger(__name__)

# A scrape request's records in one read; a longer record (a ClientHello with large key shares) arrives in a few.
# asyncio's own is 256 KiB; 16 KiB (one maximal record) held 12 KiB more per stalled handshake.
TLS_RECEIVE_BUFFER_BYTES = 4 * 1024
# The first and last CPython minor versions whose asyncio.sslproto was checked against what this module uses.
VERIFIED_PYTHONS = ((3, 11), (3, 13))
# The SSLProtocol constructor parameters passed below, by name.
SSLPROTOCOL_PARAMETERS = ("loop", "app_protocol", "sslcontext", "waiter", "server_side", "ssl_handshake_timeout")
# Go's net/http answer to a TLS record header that reads as HTTP, and the five-byte prefixes it takes for HTTP.
PLAIN_HTTP_ANSWER = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
HTTP_PREFIXES = frozenset((b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"))
RECORD_HEADER_BYTES = 5
HANDSHAKE_RECORD = 22  # a TLS record's first byte (its content type) when it carries a ClientHello
# The longest plaintext record TLS allows (RFC 8446, 5.1: 2^14 bytes and its header): a first record held as plain
# bytes is never longer; one that says it is goes to OpenSSL at once, to be refused with its alert.
MAX_RECORD_BYTES = RECORD_HEADER_BYTES + 2**14
DEFAULT_HANDSHAKE_TIMEOUT_SECONDS = 60.0  # asyncio's, when the header timeout is off


@runtime_checkable
class TlsHooks(Protocol):
    """What a TLS connection's plaintext protocol (timeouts.py's ``DeadlineProtocol``) is told of the TCP connection
    under it."""

    def handshake_started(self, transport: asyncio.Transport) -> bool:
        """Accepted: count it; False when it must be dropped (every connection busy)."""

    def handshake_ended(self) -> None:
        """The TCP connection closed, whether or not the handshake succeeded."""


def sslproto_mismatches() -> list[str]:
    """How this interpreter's ``asyncio.sslproto.SSLProtocol`` differs from what the compact protocol relies on."""
    protocol = getattr(asyncio.sslproto, "SSLProtocol", None)
    if not isinstance(protocol, type):
        return ["asyncio.sslproto.SSLProtocol is gone"]
    mismatches = []
    if not issubclass(protocol, asyncio.BufferedProtocol):
        mismatches.append("SSLProtocol is not a BufferedProtocol (it reads into no buffer of its own)")
    if not isinstance(getattr(protocol, "max_size", None), int):
        mismatches.append("SSLProtocol.max_size (the receive buffer's size) is not an int class attribute")
    for method in ("_on_handshake_complete", "_process_outgoing"):  # a failed handshake's alert is written by them
        if not callable(getattr(protocol, method, None)):
            mismatches.append(f"SSLProtocol.{method} is gone")
    parameters = inspect.signature(protocol).parameters
    missing = [name for name in SSLPROTOCOL_PARAMETERS if name not in parameters]
    if missing:
        mismatches.append(f"SSLProtocol() takes no {', '.join(missing)}")
    return mismatches


def first_record_pending(received: bytes | bytearray) -> bool:
    """Whether a TLS client's first bytes are only the start of its first record: fewer than a record header, or a
    handshake record not whole yet (what :class:`FirstRecord` holds before OpenSSL is given anything)."""
    if len(received) < RECORD_HEADER_BYTES:
        return True
    header = bytes(received[:RECORD_HEADER_BYTES])
    if header in HTTP_PREFIXES:
        return False
    length = RECORD_HEADER_BYTES + int.from_bytes(header[3:5], "big")
    return header[0] == HANDSHAKE_RECORD and length <= MAX_RECORD_BYTES and len(received) < length


def python_verified(version: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)) -> bool:
    """Whether ``version`` is one of the CPython versions :data:`VERIFIED_PYTHONS` spans."""
    first, last = VERIFIED_PYTHONS
    return sys.implementation.name == "cpython" and first <= version <= last


@functools.cache
def compact_tls_available() -> bool:
    """Whether TLS connections get the small buffer here; when not, asyncio's public path serves them."""
    if sys.version_info < (3, 11):
        return False  # Python 3.10's TLS protocol has no per-connection receive buffer to shrink
    if not python_verified():
        log.debug("TLS: asyncio's own receive buffer (this Python's asyncio.sslproto is not verified)")
        return False
    mismatches = sslproto_mismatches()
    if mismatches:
        log.debug("TLS: asyncio's own receive buffer", extra={"reason": "; ".join(mismatches)})
        return False
    return True


if sys.version_info >= (3, 11):
    # What every TLS connection reads into, copied out at once (one event loop, one read at a time): by FirstRecord
    # into its bytes so far, by SSLProtocol into OpenSSL's incoming BIO. No connection holds a buffer of its own, and
    # no read allocates one (asyncio's data_received path makes 256 KiB per read).
    _READS = memoryview(bytearray(TLS_RECEIVE_BUFFER_BYTES))

    class CompactTLSProtocol(asyncio.sslproto.SSLProtocol):
        """asyncio's TLS protocol reading into the shared 4 KiB buffer instead of 256 KiB of its own, its TCP
        connection's close reported to ``hooks``, and a failed handshake's alert sent."""

        max_size = TLS_RECEIVE_BUFFER_BYTES
        hooks: TlsHooks | None = None
        _tcp: asyncio.Transport | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # SSLProtocol's own buffer (made by its __init__, read into by get_buffer and buffer_updated) let go
            self._ssl_buffer = _READS.obj
            self._ssl_buffer_view = _READS

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self._tcp = transport
            super().connection_made(transport)

        def connection_lost(self, exc: BaseException | None) -> None:
            try:
                super().connection_lost(exc)
            finally:
                self._tcp = None
                if self.hooks is not None:
                    self.hooks.handshake_ended()

        def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
            # asyncio aborts a failed handshake's transport without writing the alert OpenSSL put in the outgoing
            # BIO: the client saw a reset or an end of file where Go's clients read "protocol version not
            # supported" or "certificate required". Written first, it goes out before the abort.
            if handshake_exc is not None and self._tcp is not None and not self._tcp.is_closing():
                with contextlib.suppress(Exception):
                    self._process_outgoing()  # type: ignore[attr-defined]  # not in typeshed: private
            super()._on_handshake_complete(handshake_exc)

        def feed(self, data: bytes | bytearray) -> None:
            """Give the protocol bytes read before it existed, as its transport would, in buffer-sized reads."""
            view = memoryview(data)
            while view and self._tcp is not None and not self._tcp.is_closing():
                buffer = self.get_buffer(len(view))
                size = min(len(buffer), len(view))
                buffer[:size] = view[:size]
                view = view[size:]
                self.buffer_updated(size)

    class FirstRecord(asyncio.BufferedProtocol):
        """A TLS connection until its client's first record is whole: the bytes held as they come, the handshake's
        deadline from the accept, plain HTTP answered as Go answers it; then the TLS protocol (``make_tls``, given the
        seconds left of the deadline) takes the connection and the bytes."""

        def __init__(
            self,
            make_tls: Callable[[float], CompactTLSProtocol],
            hooks: TlsHooks | None,
            handshake_timeout: float,
        ) -> None:
            self._make_tls = make_tls
            self._hooks = hooks
            self._timeout = handshake_timeout
            self._tcp: asyncio.Transport | None = None
            self._received = bytearray()
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self._tcp = transport
            if self._hooks is not None and not self._hooks.handshake_started(transport):
                transport.abort()
                return
            self._deadline = asyncio.get_running_loop().call_later(self._timeout, transport.abort)

        def get_buffer(self, sizehint: int) -> memoryview:
            return _READS

        def buffer_updated(self, nbytes: int) -> None:
            transport = self._tcp
            if transport is None or transport.is_closing():
                return
            self._received += _READS[:nbytes]
            if first_record_pending(self._received):
                return  # OpenSSL is not needed yet
            if bytes(self._received[:RECORD_HEADER_BYTES]) in HTTP_PREFIXES:
                transport.write(PLAIN_HTTP_ANSWER)
                transport.close()
                return
            self._hand_over(transport)

        def _hand_over(self, transport: asyncio.Transport) -> None:
            assert self._deadline is not None
            left = max(self._deadline.when() - asyncio.get_running_loop().time(), 0.001)
            self._deadline.cancel()
            self._deadline = None
            self._tcp = None
            received, self._received = self._received, bytearray()
            tls = self._make_tls(left)
            tls.hooks = self._hooks
            transport.set_protocol(tls)
            tls.connection_made(transport)
            tls.feed(received)

        def eof_received(self) -> bool | None:
            return False  # the client left before its first record was whole: close

        def connection_lost(self, exc: Exception | None) -> None:
            if self._tcp is None:
                return  # handed over: the TLS protocol reports the close
            self._tcp = None
            self._received = bytearray()
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            if self._hooks is not None:
                self._hooks.handshake_ended()


def _retrieve_outcome(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


def tls_serving(
    factory: Callable[[], asyncio.Protocol], context: ssl.SSLContext, *, handshake_timeout: float | None
) -> tuple[Callable[[], asyncio.BaseProtocol], ssl.SSLContext | None]:
    """What serves TLS on an accepted connection: a factory of protocols, and the context asyncio must wrap them in
    (None: the factory's protocols do TLS themselves, with the compact buffer). Each connection's handshake is bounded
    by ``handshake_timeout`` (None: asyncio's 60 s), then ``factory``'s protocol gets the plaintext."""
    if sys.version_info >= (3, 11) and compact_tls_available():
        loop = asyncio.get_running_loop()

        def tls_factory() -> asyncio.BaseProtocol:
            plaintext = factory()

            def make_tls(seconds_left: float) -> CompactTLSProtocol:
                handshake_done = loop.create_future()  # nobody awaits it: a failed handshake is only logged
                handshake_done.add_done_callback(_retrieve_outcome)
                return CompactTLSProtocol(
                    loop,
                    plaintext,
                    context,
                    handshake_done,
                    server_side=True,
                    ssl_handshake_timeout=seconds_left,  # type: ignore[arg-type, unused-ignore]  # typeshed: int only
                )

            hooks = plaintext if isinstance(plaintext, TlsHooks) else None
            return FirstRecord(make_tls, hooks, handshake_timeout or DEFAULT_HANDSHAKE_TIMEOUT_SECONDS)

        return tls_factory, None
    return factory, context


async def create_tls_server(
    factory: Callable[[], asyncio.Protocol],
    sock: socket.socket,
    context: ssl.SSLContext,
    *,
    handshake_timeout: float | None,
    backlog: int,
) -> asyncio.Server:
    """asyncio's server of :func:`tls_serving`'s protocols on ``sock``."""
    loop = asyncio.get_running_loop()
    tls_factory, wrap = tls_serving(factory, context, handshake_timeout=handshake_timeout)
    if wrap is None:
        return await loop.create_server(tls_factory, sock=sock, backlog=backlog)
    return await loop.create_server(
        factory, sock=sock, ssl=wrap, backlog=backlog, ssl_handshake_timeout=handshake_timeout
    )
