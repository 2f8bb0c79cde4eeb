"""HTTP/1.1 connections on asyncio, parsed by h11 (public API only): one request at a time, in order.

For each connection (:class:`HttpProtocol`):

- h11 is the one reader of the request bytes: requests are parsed by h11 and answered one at a time, in order
  (pipelined requests wait in h11's buffer; past :data:`MAX_PIPELINED_BYTES` of them, reading pauses until the
  current one is answered), and what the connection waits for from its client (:meth:`HttpProtocol.awaiting`: a
  head, a body, nothing) is read from h11's state, for the deadlines and the connection cap;
- a malformed request is answered ``400`` (a head over :data:`MAX_HEADER_BYTES` ``431``, whether it came in one
  read or in many) and the connection closed; so is a request line over :data:`MAX_LINE_BYTES`, a header line whose
  name, colon and value (optional whitespace not counted) are over it, or more than :data:`MAX_HEADERS` headers
  (aiohttp's limits, which this server replaced); a request whose handler started before its malformed body was
  read gets its handler's answer, then the close;
- a request naming an HTTP version other than 1.x (``GET / HTTP/2.0``, ``HTTP/0.9``) is answered ``505`` with an
  HTTP/1.1 status line and the connection closed, as Go's server does; a pipelined one in its turn, after the
  responses before it (a version Go cannot parse, such as ``HTTP/12.0``, is malformed: ``400``, as in Go);
- a request body is read and discarded (no route takes one); one over :data:`MAX_DISCARDED_BODY_BYTES` is not
  read further and the connection closes after the answer (Go discards up to 256 KiB the same way).
  ``Expect: 100-continue`` is answered ``100 Continue`` at once;
- HTTP/1.0 (answered with an ``HTTP/1.0`` status line; h11 has no HTTP/1.0 keep-alive) and
  ``Connection: close`` close after the answer; keep-alive connections with no request close after the idle
  timeout (``--web.idle-timeout``; 0: never); a request (head and body) still incomplete is the deadline
  protocol's (:mod:`.timeouts`);
- a client that goes away (or half-closes) cancels its request's handler;
- a body of at most :data:`~.body.ONE_WRITE_BYTES` goes out with its head in one write; a larger one in
  :data:`~.body.CHUNK_BYTES` chunks straight from the response's shared parts, waiting for the transport to drain
  between them (:func:`~.body.chunks`), so no connection holds a copy of a large body.

Request-header and write deadlines and the connection cap are :class:`~.timeouts.DeadlineProtocol`'s, which
wraps this protocol. (:class:`OpenConnections` keeps every open connection for the graceful shutdown of
:class:`~.server.WebServer`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import cast

import h11

from nvidia_gpu_exporter.httpserver.body import ONE_WRITE_BYTES, chunks
from nvidia_gpu_exporter.httpserver.http import App, Headers, Request, Response

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together; h11 answers 431 past it
MAX_LINE_BYTES = 8190  # the request line, and each header line: aiohttp's limit, kept
MAX_HEADERS = 128  # aiohttp's limit, kept
MAX_DISCARDED_BODY_BYTES = 256 * 1024  # a request body read (and dropped) to keep the connection; Go's figure
MAX_PIPELINED_BYTES = 64 * 1024  # requests buffered behind the one being answered before reading pauses
RST_AVOIDANCE_SECONDS = 0.5  # after the last answer, how long what the client still sends is read and dropped (Go's)

# What a connection waits for from its client (HttpProtocol.awaiting), read from h11's state.
NOTHING = 0  # idle between requests, a response owed, or closing
FIRST_HEAD = 1  # a new connection: not a byte of its first request yet
HEAD = 2  # bytes of a request head, not complete
BODY = 3  # the rest of a request body

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_date_cache: tuple[int, bytes] = (-1, b"")  # no second yet: 0 is the epoch, a valid date


def http_date(now: float | None = None) -> bytes:
    """The ``Date`` header's value (RFC 9110 IMF-fixdate), computed once a second."""
    global _date_cache  # noqa: PLW0603 - a one-entry cache shared by every connection
    second = int(time.time() if now is None else now)
    if _date_cache[0] == second:
        return _date_cache[1]
    t = time.gmtime(second)
    value = (
        f"{_WEEKDAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    ).encode("ascii")
    _date_cache = (second, value)
    return value


# Go's http.StatusText for every status this server can answer; Python's HTTPStatus spells some differently
# (413 is "Content Too Large" from Python 3.13, 414 "Request-URI Too Long") and costs an enum of 60 members.
_REASONS: dict[int, bytes] = {
    100: b"Continue",
    200: b"OK",
    202: b"Accepted",
    204: b"No Content",
    301: b"Moved Permanently",
    302: b"Found",
    304: b"Not Modified",
    307: b"Temporary Redirect",
    308: b"Permanent Redirect",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    406: b"Not Acceptable",
    408: b"Request Timeout",
    409: b"Conflict",
    413: b"Request Entity Too Large",
    414: b"Request URI Too Long",
    415: b"Unsupported Media Type",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
    505: b"HTTP Version Not Supported",
}


def reason(status: int) -> bytes:
    """The status line's reason phrase (``Not Found``) as Go writes it; ``status code N`` where Go has none."""
    return _REASONS.get(status) or f"status code {status}".encode("ascii")


def closing_answer(status: int, body: bytes) -> bytes:
    """A whole plain-text answer after which the connection closes, written without h11 (a refusal, a bad
    request): its status line is HTTP/1.1's whatever the request said, as Go's server writes them."""
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
        % (status, reason(status), len(body))
    ) + body


VERSION_NOT_SUPPORTED = closing_answer(505, b"unsupported protocol version")


def _error_body(status: int) -> tuple[int, bytes]:
    return status, b"%d %s\n" % (status, reason(status))


class OpenConnections:
    """Every open connection of a server, for its graceful shutdown."""

    def __init__(self) -> None:
        self.open: set[HttpProtocol] = set()
        self.closing = False
        self.requests = 0  # requests whose handler started, over the server's life

    async def shutdown(self, grace: float) -> None:
        """Close idle connections now; let requests in flight finish within ``grace`` seconds, then cut them."""
        self.closing = True
        for connection in list(self.open):
            connection.close_when_idle()
        busy = [connection.handler for connection in self.open if connection.handler is not None]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        for connection in list(self.open):
            connection.stop()


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.x connection (see the module docstring). ``finished`` is told each response's status once it is
    all in the transport."""

    def __init__(
        self,
        app: App,
        *,
        idle_timeout: float,
        connections: OpenConnections,
        finished: Callable[[int], None] | None = None,
    ) -> None:
        self.app = app
        self.idle_timeout = idle_timeout
        self.connections = connections
        self.finished = finished
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.handler: asyncio.Task[None] | None = None
        self._body_bytes = 0
        self._discarding = False  # the body is over the bound: nothing more is read, the connection closes
        self._close_after = False  # close once the current response is out
        self._paused_reading = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None  # the last answer is out: the close after the client's bytes
        self._idle_deadline: float | None = None  # idle since a response: closes at this loop time
        self._requests = 0  # requests h11 has parsed on this connection

    # -- asyncio ------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # A response goes out in several writes (head, chunks): without TCP_NODELAY, Nagle's algorithm holds
            # the last one until the client's delayed ACK, 40 ms per scrape (aiohttp set it too).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections.open.add(self)
        if self.connections.closing:
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self._discarding or self.transport is None:
            return
        self._cancel_idle()
        self.h11.receive_data(data)
        self._process()  # behind a request being answered, h11 reads the rest of its body and pauses at the next

    def eof_received(self) -> bool | None:
        return None  # the transport closes: a request in flight is cancelled (connection_lost)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        # ``finished`` is a bound method of the DeadlineProtocol that holds this protocol: a reference cycle
        # through the h11 state, the transport and its socket. Broken here, a closed connection is freed at once;
        # left, each one waited for the next full garbage collection, and RSS crept between those by a few KiB
        # a second under steady reconnections (BENCHMARKS.md, "A timed soak").
        self.finished = None
        self.connections.open.discard(self)
        self._stop_idle()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self.handler is not None:
            self.handler.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("the client went away"))
            self._drained.exception()  # retrieved: nobody else may be waiting

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def responding(self) -> bool:
        """Whether this connection owes its client a response: a request's handler runs or its response is being
        written (a head begun behind it waits, and its header deadline with it)."""
        return self.handler is not None

    def awaiting(self) -> int:
        """What the connection waits for from its client, by h11's state: ``FIRST_HEAD``, ``HEAD``, ``BODY`` or
        ``NOTHING`` (the module's constants). A request h11 has not parsed yet is a head even when whole (it waits
        behind the one being answered); bytes behind a request that ends the connection are nothing (dropped)."""
        if self._discarding:
            return NOTHING
        connection = self.h11
        state = connection.their_state
        if state is h11.SEND_BODY:
            return BODY
        if state is h11.IDLE or state is h11.DONE:
            if connection.trailing_data[0]:
                return HEAD
            if state is h11.IDLE and self._requests == 0:
                return FIRST_HEAD
        return NOTHING

    # -- the shutdown's hooks -----------------------------------------------------------------------------

    def close_when_idle(self) -> None:
        """Stop after the request in flight (if any); close at once otherwise."""
        self._close_after = True
        if self.handler is None and self.transport is not None:
            self.transport.close()

    def stop(self) -> None:
        """The grace period is over: a request still in flight is cut; an answered one's last bytes still go out."""
        if self.transport is None:
            return
        if self.handler is not None:
            self.handler.cancel()
            self.transport.abort()
        else:
            self.transport.close()

    # -- requests -----------------------------------------------------------------------------------------

    def _process(self) -> None:
        """Take the events h11 has parsed: start a request's handler, read and drop its body."""
        connection = self.h11
        while self.transport is not None:
            state = connection.their_state
            buffered = len(connection.trailing_data[0])
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as error:
                # h11 raises it from inside its own ``except`` block, so its frame holds the error that holds the
                # traceback that holds that frame (and ours, and this protocol with its buffers): a cycle per bad
                # request, freed only by a full garbage collection. Dropping the traceback breaks it.
                error.__traceback__ = None
                if state is h11.MUST_CLOSE:
                    # Bytes behind the client's last request (``Connection: close``, HTTP/1.0): dropped, as Go drops
                    # them, and that request still answered (taken for a bad request, it was cut unanswered).
                    self._close_after = True
                    self._discarding = True
                    if self.handler is None:
                        self._close_after_answer()
                    return
                self._bad_request(error.error_status_hint, str(error))
                return
            if event is h11.NEED_DATA:
                if self.handler is None and connection.their_state is h11.IDLE and not connection.trailing_data[0]:
                    self._arm_idle()
                return
            if event is h11.PAUSED:
                self._pause_if_flooded()
                return
            if isinstance(event, h11.Request):
                self._requests += 1
                head_bytes = buffered - len(connection.trailing_data[0])  # the head as sent, whole
                if not self._start(event, head_bytes):
                    return
            elif isinstance(event, h11.Data):
                self._body_bytes += len(event.data)
                if self._body_bytes > MAX_DISCARDED_BODY_BYTES:
                    self._discarding = True
                    self._close_after = True
                    if self.handler is None:  # answered already: nothing more to wait for
                        self._close_after_answer()
                    return
            elif isinstance(event, h11.EndOfMessage):
                if self.handler is None:
                    self._next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                self.transport.close()
                return

    def _start(self, event: h11.Request, head_bytes: int) -> bool:
        """Check the request against the limits and start its handler; False when refused. ``head_bytes`` is the
        head's size as sent: h11 bounds an incomplete head only (431 past :data:`MAX_HEADER_BYTES`), and a whole one
        that came in one read is held to the same bound here, so the answer never depends on the read boundaries."""
        if not event.http_version.startswith(b"1."):  # h11 reads one digit each side of the dot, as Go does
            self._answer_and_close(505, VERSION_NOT_SUPPORTED)
            return False
        if head_bytes > MAX_HEADER_BYTES:
            self._bad_request(431, "request head too large")
            return False
        target = event.target
        if len(target) + len(event.method) + 10 > MAX_LINE_BYTES:  # h11 takes single spaces only: exact
            self._bad_request(400, "request line too long")
            return False
        if len(event.headers) > MAX_HEADERS:
            self._bad_request(400, "too many headers")
            return False
        items = []
        framing = 0
        for name, value in event.headers:
            if len(name) + len(value) + 1 > MAX_LINE_BYTES:  # name, colon, value: h11 drops the whitespace
                self._bad_request(400, "header line too long")
                return False
            if name in (b"content-length", b"transfer-encoding"):
                framing |= 1 if name == b"content-length" else 2
            items.append((name.decode("ascii", "surrogateescape"), value.decode("utf-8", "surrogateescape")))
        if framing == 3:  # RFC 9112 6.1: a smuggling pattern; refused, as aiohttp and Go do
            self._bad_request(400, "both Content-Length and Transfer-Encoding")
            return False
        request = Request(
            event.method.decode("ascii", "surrogateescape"),
            target.decode("utf-8", "surrogateescape"),
            Headers(items),
            version=event.http_version.decode("ascii"),
            transport=self.transport,
        )
        self._body_bytes = 0
        if self.h11.they_are_waiting_for_100_continue:
            continue_head = self.h11.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(continue_head or b"")
        self.connections.requests += 1
        self._cancel_idle()  # a request that came behind the rest of a body: the connection is busy again
        self.handler = self.loop.create_task(self._respond(request))
        return True

    async def _respond(self, request: Request) -> None:
        must_close = False
        try:
            try:
                response = await self.app.handle(request)
            except asyncio.CancelledError:
                raise
            except Exception:  # a handler's bug: the client gets a 500, the process a log line
                log.exception("error handling a request", extra={"path": request.path[:200]})
                status, body = _error_body(500)
                response = Response(status, body=body, content_type="text/plain", charset="utf-8")
            must_close = await self._send(request, response)
        except (asyncio.CancelledError, ConnectionError):
            return  # the client went away, or the server shuts down: nothing left to answer
        except Exception:  # a response h11 refuses (a header value with a line break): cut, never hang
            log.exception("error writing a response", extra={"path": request.path[:200]})
            if self.transport is not None:
                self.transport.abort()
            return
        finally:
            self.handler = None
        if self.transport is None:
            return
        if self._close_after or must_close:
            self._close_after_answer()
        elif self.h11.their_state is h11.DONE:
            self._next_cycle()
        else:  # answered before its body came: the rest of it is read (and dropped) under the request's deadline
            self._resume_reading()
            self._process()

    async def _send(self, request: Request, response: Response) -> bool:
        """Write ``response``; True when the connection must close after it."""
        length = response.content_length
        status = response.status
        connection = self.h11
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.headers.items()]
        headers.append((b"Content-Length", str(length).encode("ascii")))
        headers.append((b"Date", http_date()))
        if self._close_after:
            headers.append((b"Connection", b"close"))
        head = connection.send(h11.Response(status_code=status, headers=headers, reason=reason(status)))
        assert head is not None
        if request.version == "1.0":  # h11 always says HTTP/1.1; an HTTP/1.0 client gets its own, as from Go
            head = b"HTTP/1.0" + head[8:]
        if request.method == "HEAD" or length == 0:
            self._write(head + _end(connection))
        elif length <= ONE_WRITE_BYTES:  # one write with its head (the socket takes it at once)
            data = _data(connection, b"".join(response.body))
            self._write(b"".join((head, *data, _end(connection))))
        else:  # one chunk per write, waiting for the client between them (the head rides with the first)
            pending: list[bytes | memoryview] = [head]
            for chunk in chunks(response.body):
                pending += _data(connection, chunk)
                self._write_lines(pending)
                pending = []
                if self._write_paused:
                    await self._drain()
            self._write_lines([_end(connection)])
        if self._write_paused:  # the client is behind: its next (pipelined) response waits, as a next chunk would
            await self._drain()
        if self.finished is not None:
            self.finished(status)
        return connection.our_state is h11.MUST_CLOSE

    def _write_lines(self, pieces: list[bytes | memoryview]) -> None:
        """One write of ``pieces`` (one ``sendmsg`` on Python >= 3.12; joined, about a chunk, before)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client went away")
        pieces = [piece for piece in pieces if piece]
        if len(pieces) == 1:
            self.transport.write(pieces[0])
        elif pieces:
            self.transport.writelines(pieces)

    def _write(self, data: bytes | memoryview) -> None:
        # A transport whose send failed (the client reset) is closing until connection_lost, a loop turn later:
        # asyncio logs a warning for every write past the fifth made meanwhile, for a client that merely left.
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client went away")
        self.transport.write(data)

    async def _drain(self) -> None:
        if self.transport is None:
            raise ConnectionResetError("the client went away")
        self._drained = self.loop.create_future()
        try:
            await self._drained
        finally:
            self._drained = None

    def _next_cycle(self) -> None:
        """Both sides are done: take the next request (pipelined ones are already in h11's buffer)."""
        try:
            self.h11.start_next_cycle()
        except h11.LocalProtocolError:
            if self.transport is not None:
                self.transport.close()
            return
        self._resume_reading()
        self._process()

    def _resume_reading(self) -> None:
        if self._paused_reading and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()

    def _pause_if_flooded(self) -> None:
        """A client pipelining more than :data:`MAX_PIPELINED_BYTES` behind its request: stop reading for now."""
        if not self._paused_reading and len(self.h11.trailing_data[0]) > MAX_PIPELINED_BYTES and self.transport:
            self._paused_reading = True
            self.transport.pause_reading()

    def _bad_request(self, status: int, reason: str) -> None:
        """Answer a malformed request (when no response is under way) and close."""
        transport = self.transport
        assert transport is not None
        log.error("bad request from a client", extra={"remote": _peer(transport), "err": reason[:200]})
        status, body = _error_body(status if status in (400, 431) else 400)
        self._answer_and_close(status, closing_answer(status, body))

    def _answer_and_close(self, status: int, answer: bytes) -> None:
        """Write ``answer``, read nothing more, and close; a request whose handler already runs (its body was the
        malformed part) gets the handler's answer instead, then the close. A request cut mid-response gets none."""
        transport = self.transport
        assert transport is not None
        if self.handler is not None:
            self._close_after = True
            self._discarding = True
            return
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            transport.write(answer)
            if self.finished is not None:
                self.finished(status)
        self._close_after_answer()

    def _close_after_answer(self) -> None:
        """Close once the answer is out: FIN first, then what the client still sends (a pipelined request, the rest
        of a body) is read and dropped until it closes too, or for :data:`RST_AVOIDANCE_SECONDS`. Closed with its
        bytes unread, the connection was reset, and a reset can destroy the answer before the client reads it (a
        bad request's 400 was lost that way); Go's server waits the same way. Over TLS the close is at once (its
        transport cannot half-close), as before."""
        transport = self.transport
        self._discarding = True
        if transport is None or self._linger is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        try:
            transport.write_eof()  # after what is still buffered
        except OSError:  # the client reset first (shutdown() of a reset socket fails): nothing left to deliver
            transport.abort()
            return
        self._linger = self.loop.call_later(RST_AVOIDANCE_SECONDS, transport.close)

    # -- keep-alive ---------------------------------------------------------------------------------------

    # A keep-alive connection goes idle after every response: rather than a new timer each time (and a cancelled
    # one left in the loop's heap per request), one timer is kept and the deadline moved; when it fires before the
    # current deadline it re-arms for it, and when the connection is busy (no deadline) it retires.

    def _arm_idle(self) -> None:
        if self._close_after and self.transport is not None:
            self.transport.close()
            return
        if self.idle_timeout > 0 and self._idle_deadline is None:
            self._idle_deadline = self.loop.time() + self.idle_timeout
            if self._idle_timer is None:
                self._idle_timer = self.loop.call_at(self._idle_deadline, self._idle_expired)

    def _cancel_idle(self) -> None:
        self._idle_deadline = None  # the timer, if any, retires when it fires

    def _stop_idle(self) -> None:
        self._idle_deadline = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_expired(self) -> None:
        self._idle_timer = None
        deadline = self._idle_deadline
        if deadline is None:
            return
        if self.loop.time() < deadline:  # idle again since this timer was set: wait for the current deadline
            self._idle_timer = self.loop.call_at(deadline, self._idle_expired)
            return
        self._idle_deadline = None
        if self.handler is None and self.transport is not None:
            log.debug("closing an idle keep-alive connection")
            self.transport.close()


def _data(connection: h11.Connection, data: bytes | memoryview) -> Sequence[bytes | memoryview]:
    """A body piece as written: h11 passes a bytes-like object through untouched (a view stays a view, not a
    copy)."""
    return connection.send_with_data_passthrough(h11.Data(data=cast(bytes, data))) or []


def _end(connection: h11.Connection) -> bytes:
    """The end of a body: h11 checks that it wrote Content-Length bytes; nothing to write with that framing."""
    return connection.send(h11.EndOfMessage()) or b""


class RequestReader:
    """A request head read by h11 and nothing more: a refused client's, whose answer is out before its request."""

    def __init__(self) -> None:
        self._parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

    def head_in(self, data: bytes) -> bool:
        """Whether ``data`` completes a request head, or shows a malformed one: the request is in."""
        self._parser.receive_data(data)
        try:
            return self._parser.next_event() is not h11.NEED_DATA
        except h11.RemoteProtocolError as error:
            error.__traceback__ = None  # h11 raises it inside its own except block: a cycle otherwise
            return True


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else ""
