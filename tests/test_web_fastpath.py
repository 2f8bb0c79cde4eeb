"""httpserver/fastpath.py against h11, the parser of record: a request head the fast path accepts is one h11 parses to
the same method, target, version, headers and keep-alive decision (a property test over valid and near-valid
heads); the response head it writes is the one h11's ``send`` writes; and on a connection, a fast-path request
keeps the protocol's order and h11's handling of what follows it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import h11
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from async_helpers import bounded, run
from hostile.web_hostile import open_client, serving, web_settings
from nvidia_gpu_exporter.httpserver.body import CHUNK_BYTES, ONE_WRITE_BYTES
from nvidia_gpu_exporter.httpserver.fastpath import MAX_HEAD_BYTES, MAX_HEADERS, parse_head, response_head
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.protocol import (
    VERSION_NOT_SUPPORTED,
    HttpProtocol,
    OpenConnections,
    http_date,
    reason,
)
from nvidia_gpu_exporter.httpserver.timeouts import DeadlineProtocol

PROMETHEUS = (
    b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9835\r\nUser-Agent: Prometheus/2.53.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.2,*/*;q=0.1\r\n"
    b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
)


def h11_request(data: bytes) -> tuple[h11.Request, bool]:
    """What h11 parses from ``data`` (all of it one request without a body) and whether it keeps the connection
    alive after answering it."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(data)
    request = connection.next_event()
    assert isinstance(request, h11.Request)
    assert isinstance(connection.next_event(), h11.EndOfMessage)
    assert connection.next_event() is h11.NEED_DATA  # nothing after the head
    connection.send(h11.Response(status_code=200, headers=[(b"Content-Length", b"0")]))
    connection.send(h11.EndOfMessage())
    return request, connection.our_state is not h11.MUST_CLOSE


# -- request heads ------------------------------------------------------------------------------------------

_NAMES = st.sampled_from(
    [
        b"Host",
        b"host",
        b"HOST",
        b"Connection",
        b"connection",
        b"Accept",
        b"User-Agent",
        b"X-A",
        b"Content-Length",
        b"Transfer-Encoding",
        b"Expect",
        b"Upgrade",
        b"Bad Name",
        b"",
        b"X\x00",
        b"X\x7f",
        b"\xe9",
        b" Host",
    ]
)
_SEPARATORS = st.sampled_from([b":", b": ", b":\t", b" :", b":  ", b"\t:", b": \t "])
_VALUES = st.one_of(
    st.sampled_from(
        [
            b"x",
            b"close",
            b"Close",
            b"keep-alive, close",
            b"keep-alive,CLOSE ",
            b"closed",
            b"upgrade",
            b"0",
            b"a\tb",
            b"a  b",
            b"\x80\xff",
            b"",
            b"a\x01b",
            b"a\x7fb",
            b"a\x00b",
            b"a\rb",
            b"a\nb",
            b"a\x0bb",
            b"100-continue",
            b"x" * (MAX_HEAD_BYTES - 10),
        ]
    ),
    st.binary(max_size=12),
)
_ENDINGS = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r", b"\r\n ", b"\r\n\t"])
_HEADER_LINE = st.tuples(_NAMES, _SEPARATORS, _VALUES, _ENDINGS).map(b"".join)
_REQUEST_LINE = st.tuples(
    st.sampled_from([b"GET", b"HEAD", b"get", b"POST", b"OPTIONS", b"G\x00T", b""]),
    st.sampled_from([b" ", b" ", b"  ", b"\t"]),
    st.one_of(
        st.sampled_from([b"/", b"/metrics", b"/a?b=c&d", b"*", b"http://x/y", b"/\x7f", b"/a b", b"/\xc3\xa9", b"//"]),
        st.binary(max_size=8).map(lambda tail: b"/" + tail),
    ),
    st.sampled_from([b" ", b" ", b"  "]),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"http/1.1", b"HTTP/2.0", b"HTTP/1.1 ", b"HTTP/11"]),
    _ENDINGS,
).map(b"".join)
_CHAOTIC = st.tuples(
    st.sampled_from([b"", b"", b"", b"\r\n", b"\n"]),  # blank lines before the request line
    _REQUEST_LINE,
    st.lists(_HEADER_LINE, max_size=6),
    st.sampled_from([b"\r\n", b"\r\n", b"\n", b"", b"\r\n\r\n", b"\r\nGET / HTTP/1.1\r\n"]),  # the end, and after it
).map(lambda parts: parts[0] + parts[1] + b"".join(parts[2]) + parts[3])
_VALID_LINE = st.tuples(
    st.sampled_from([b"Accept", b"User-Agent", b"Connection", b"connection", b"X-A", b"x-b", b"HOST"]),
    st.sampled_from([b":", b": ", b":\t", b":  "]),
    st.sampled_from([b"x", b"close", b"Close, keep-alive", b"keep-alive", b"a b", b"\x80", b"", b"*/*;q=0.1"]),
    st.sampled_from([b"", b" ", b"\t"]),
).map(lambda parts: b"".join(parts) + b"\r\n")
_VALID = st.tuples(
    st.sampled_from([b"GET", b"HEAD"]),
    st.sampled_from([b"/", b"/metrics", b"/a?b=c&d=%20", b"/-/healthy", b"//x"]),
    st.lists(_VALID_LINE, min_size=1, max_size=6),
).map(lambda parts: parts[0] + b" " + parts[1] + b" HTTP/1.1\r\n" + b"".join(parts[2]) + b"\r\n")


@st.composite
def _near_valid(draw: st.DrawFn) -> bytes:
    """A valid head (its Host line first, or none, or another one among the rest), maybe with one byte changed or
    inserted."""
    head = draw(_VALID)
    if draw(st.integers(0, 9)):
        head = head.replace(b"\r\n", b"\r\nHost: h\r\n", 1)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(head)))
        byte = draw(st.sampled_from([b" ", b"\t", b"\r", b"\n", b"\x00", b"\x01", b"\x7f", b"\xff", b":", b"A", b"a"]))
        head = head[:at] + byte + head[at + draw(st.integers(0, 1)) :]
    return head


_HEADS = st.one_of(_near_valid(), _CHAOTIC)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_HEADS)
@example(PROMETHEUS)
@example(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n")
@example(b"HEAD / HTTP/1.1\r\nHost:\r\n\r\n")
@example(b"GET / HTTP/1.1\r\nHost: x\r\nX-A:" + b" \t" * 8 + b"a \t  b" + b"\t " * 8 + b"\r\n\r\n")
@example(b"GET / HTTP/1.1\r\nHost: x\r\nX-A:" + b" \t" * 4000 + b"x\r\n\r")
def test_a_head_the_fast_path_accepts_is_parsed_by_h11_to_the_same_request(data: bytes) -> None:
    fast = parse_head(data)
    if fast is None:
        return  # h11's: the protocol hands it over whole
    request, keep_alive = h11_request(data)
    assert (fast.method, fast.target) == (request.method.decode(), request.target.decode())
    assert request.http_version == b"1.1"
    assert fast.headers == [
        (name.decode("ascii"), value.decode("utf-8", "surrogateescape")) for name, value in request.headers
    ]
    assert fast.keep_alive is keep_alive


@pytest.mark.parametrize(
    ("data", "keep_alive"),
    [
        pytest.param(PROMETHEUS, True, id="a-prometheus-scrape"),
        pytest.param(b"HEAD /-/healthy HTTP/1.1\r\nhost: x\r\n\r\n", True, id="head-lower-case-host"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False, id="connection-close"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nX-A:\t a \t\r\n\r\n", True, id="ows-around-a-value"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: \x80\xff\r\n\r\n", True, id="obs-text-value"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nX-A:  a \t b\t\t\r\n\r\n", True, id="runs-of-blanks-in-a-value"),
    ],
)
def test_the_common_request_takes_the_fast_path(data: bytes, keep_alive: bool) -> None:
    fast = parse_head(data)
    assert fast is not None
    assert fast.keep_alive is keep_alive


def _head(headers: bytes, line: bytes = b"GET / HTTP/1.1") -> bytes:
    return line + b"\r\n" + headers + b"\r\n"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_head(b"X-A: x\r\n"), id="no-host"),
        pytest.param(_head(b"Host: x\r\nHost: y\r\n"), id="two-hosts"),
        pytest.param(_head(b"Host: x\r\nContent-Length: 0\r\n"), id="content-length"),
        pytest.param(_head(b"Host: x\r\nTransfer-Encoding: chunked\r\n"), id="transfer-encoding"),
        pytest.param(_head(b"Host: x\r\nExpect: 100-continue\r\n"), id="expect"),
        pytest.param(_head(b"Host: x\r\nUpgrade: h2c\r\n"), id="upgrade"),
        pytest.param(_head(b"Host: x\r\n", b"GET / HTTP/1.0"), id="http-1.0"),
        pytest.param(_head(b"Host: x\r\n", b"POST / HTTP/1.1"), id="post"),
        pytest.param(_head(b"Host: x\r\n", b"GET http://x/ HTTP/1.1"), id="absolute-form"),
        pytest.param(_head(b"Host: x\r\nX-A: a\r\n b\r\n"), id="obs-fold"),
        pytest.param(_head(b"Host : x\r\n"), id="space-before-colon"),
        pytest.param(b"GET / HTTP/1.1\nHost: x\n\n", id="bare-lf"),
        pytest.param(_head(b"Host: x\r\nX-A: a\x01b\r\n"), id="control-byte"),
        pytest.param(b"\r\n" + _head(b"Host: x\r\n"), id="blank-line-first"),
        pytest.param(_head(b"Host: x\r\n") + _head(b"Host: x\r\n"), id="two-requests"),
        pytest.param(_head(b"Host: x\r\n")[:-2], id="incomplete"),
        pytest.param(_head(b"Host: x\r\nX-A: " + b"a" * MAX_HEAD_BYTES + b"\r\n"), id="over-the-line-limit"),
        pytest.param(_head(b"Host: x\r\n" + b"X: a\r\n" * MAX_HEADERS), id="over-the-header-count"),
    ],
)
def test_anything_else_is_left_to_h11(data: bytes) -> None:
    assert parse_head(data) is None


# -- response heads -----------------------------------------------------------------------------------------


def h11_response_head(
    status: int, headers: list[tuple[str, str]], length: int, date: bytes, *, request_close: bool, server_close: bool
) -> bytes:
    """What httpserver/protocol.py has h11 write for this response (its header list) after a GET."""
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(_head(b"Host: x\r\n" + (b"Connection: close\r\n" if request_close else b"")))
    connection.next_event()
    encoded = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    encoded += [(b"Content-Length", str(length).encode()), (b"Date", date)]
    if server_close:
        encoded.append((b"Connection", b"close"))
    head = connection.send(h11.Response(status_code=status, headers=encoded, reason=reason(status)))
    assert head is not None
    return head


_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


@pytest.mark.parametrize(
    ("status", "headers", "length"),
    [
        pytest.param(200, [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], 43_000, id="metrics"),
        pytest.param(200, [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")], 9_000, id="gzip"),
        pytest.param(404, _TEXT, 19, id="not-found"),
        pytest.param(405, [*_TEXT, ("Allow", "GET, HEAD")], 19, id="method-not-allowed"),
        pytest.param(503, _TEXT, 40, id="unavailable"),
        pytest.param(599, [], 0, id="status-without-reason"),
        pytest.param(200, [("x-lower", "a\tb  c"), ("X-Obs", "caf\xe9")], 1, id="odd-but-valid-headers"),
        pytest.param(204, [], 0, id="no-content"),
    ],
)
@pytest.mark.parametrize(
    ("request_close", "server_close"),
    [
        pytest.param(False, False, id="keep-alive"),
        pytest.param(True, False, id="closed-by-the-request"),
        pytest.param(False, True, id="closed-by-the-server"),
        pytest.param(True, True, id="closed-by-both"),
    ],
)
def test_the_fast_response_head_is_h11s(
    status: int, headers: list[tuple[str, str]], length: int, request_close: bool, server_close: bool
) -> None:
    date = http_date(0)
    expected = h11_response_head(status, headers, length, date, request_close=request_close, server_close=server_close)
    assert response_head(status, reason(status), headers, length, date, close=request_close or server_close) == expected


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        pytest.param(199, [], id="status-under-200"),
        pytest.param(1000, [], id="status-over-999"),
        pytest.param(200, [("Connection", "close")], id="connection-rewritten-by-h11"),
        pytest.param(200, [("content-length", "5")], id="content-length-checked-by-h11"),
        pytest.param(200, [("Transfer-Encoding", "chunked")], id="transfer-encoding"),
        pytest.param(200, [("Host", "x")], id="host-written-first-by-h11"),
        pytest.param(200, [("X-A", " a")], id="leading-space-refused-by-h11"),
        pytest.param(200, [("X-A", "a\r\nX-B: b")], id="line-break-refused-by-h11"),
        pytest.param(200, [("X-A", "a\x00")], id="nul-refused-by-h11"),
        pytest.param(200, [("X A", "a")], id="bad-name-refused-by-h11"),
        pytest.param(200, [("X-A", "\u2603")], id="not-latin-1"),
    ],
)
def test_a_response_h11_treats_specially_is_left_to_h11(status: int, headers: list[tuple[str, str]]) -> None:
    assert response_head(status, reason(status), headers, 0, http_date(0), close=False) is None


# -- on a connection ----------------------------------------------------------------------------------------


async def _fast_then_pipelined() -> tuple[bytes, list[str]]:
    """A fast-path request (alone in its read) whose handler waits; a second request arrives meanwhile."""
    started, release = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def slow(_: Request) -> Response:
        order.append("slow started")
        started.set()
        await release.wait()
        order.append("slow answered")
        return Response(text="slow\n")

    async def fast(_: Request) -> Response:
        order.append("next started")
        return Response(text="next\n", headers={"Connection": "close"})  # h11 writes this one, and closes

    app = App()
    app.add_get("/slow", slow)
    app.add_get("/next", fast)
    async with serving(app, web_settings()) as server:
        reader, writer = await open_client(server)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await bounded(started.wait())
        writer.write(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        await bounded(writer.drain())
        await asyncio.sleep(0.05)  # the second request is read (and must wait) before the first is answered
        release.set()
        data = await bounded(reader.read(-1))  # to the end: the server closes after /next
        writer.close()
    return data, order


def test_a_request_behind_a_fast_path_one_waits_for_its_answer_then_h11_serves_it() -> None:
    data, order = run(_fast_then_pipelined)
    assert order == ["slow started", "slow answered", "next started"]
    first, second = data.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert first.endswith(b"\r\n\r\nslow\n")
    assert b"Connection: close\r\n" in second
    assert second.endswith(b"\r\n\r\nnext\n")


async def _one(headers: dict[str, str]) -> tuple[bytes, bool]:
    async def handler(_: Request) -> Response:
        return Response(text="x\n", headers=headers)

    app = App()
    app.add_get("/", handler)
    async with serving(app, web_settings()) as server:
        reader, writer = await open_client(server)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await bounded(reader.readuntil(b"x\n"))
        try:
            closed = await asyncio.wait_for(reader.read(1), 0.3) == b""
        except asyncio.TimeoutError:
            closed = False
        writer.close()
    return data, closed


@pytest.mark.parametrize(
    ("headers", "in_head", "closes"),
    [
        pytest.param({}, b"Content-Length: 2\r\nDate: ", False, id="plain-kept-alive"),
        pytest.param({"Connection": "close"}, b"OK\r\nConnection: close\r\nContent-Type", True, id="h11-closes"),
    ],
)
def test_a_fast_path_request_gets_h11s_answer_and_connection_fate(
    headers: dict[str, str], in_head: bytes, closes: bool
) -> None:
    data, closed = run(lambda: _one(headers))
    assert in_head in data
    assert closed is closes


# -- writes per response ------------------------------------------------------------------------------------


class RecordingTransport(asyncio.Transport):
    """A transport that takes every write at once and records each one."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.writes.append(b"".join(bytes(data) for data in list_of_data))

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return False  # as TLS's: a close is at once


async def _writes(size: int, request: bytes) -> list[bytes]:
    body = (b"a" * 5, b"b" * (size - 10), b"c" * 5)  # shared parts, as a cached scrape's

    async def handler(_: Request) -> Response:
        return Response(body=body, content_type="text/plain")

    app = App()
    app.add_get("/", handler)
    protocol = HttpProtocol(app, idle_timeout=0, connections=OpenConnections())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    assert protocol.handler is not None
    await bounded(protocol.handler)
    assert b"".join(transport.writes).endswith(b"\r\n\r\n" + b"".join(body))
    return transport.writes


_FAST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
_BY_H11 = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize("request_bytes", [pytest.param(_FAST, id="fast-path"), pytest.param(_BY_H11, id="h11")])
@pytest.mark.parametrize(
    ("size", "writes"),
    [
        pytest.param(43_000, 1, id="a-scrape-of-a-few-gpus-in-one-write"),
        pytest.param(ONE_WRITE_BYTES, 1, id="one-write-up-to-its-bound"),
        pytest.param(ONE_WRITE_BYTES + 1, ONE_WRITE_BYTES // CHUNK_BYTES + 1, id="chunked-past-it"),
    ],
)
def test_a_small_body_goes_out_with_its_head_in_one_write(request_bytes: bytes, size: int, writes: int) -> None:
    assert len(run(lambda: _writes(size, request_bytes))) == writes


def test_the_header_cache_answers_like_a_first_check_when_full() -> None:
    date = http_date(0)
    for number in range(200):  # past the cache's bound: emptied and refilled on the way
        headers = [("X-N", str(number))] if number % 3 else [("X-N", f" {number}")]  # every third one h11's
        expected = (
            None
            if number % 3 == 0
            else h11_response_head(200, headers, 1, date, request_close=False, server_close=False)
        )
        assert response_head(200, b"OK", headers, 1, date, close=False) == expected


# -- the deadline protocol's reading of the common request ----------------------------------------------------


class _Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def answering(self) -> bool:
        return False

    def responding(self) -> bool:
        return False


class _DeadlineTransport(RecordingTransport):
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def abort(self) -> None:
        self.closed = True


async def _deadline_state(reads: list[bytes]) -> tuple[bool, list[bytes], bool]:
    inner = _Inner()
    protocol = DeadlineProtocol(lambda _: inner, asyncio.get_running_loop(), header_timeout=10, write_timeout=10)
    transport = _DeadlineTransport()
    protocol.connection_made(transport)
    for data in reads:
        protocol.data_received(data)
    pending = protocol._header_started is not None
    if protocol._timer is not None:
        protocol._timer.cancel()
    return pending, transport.writes, inner.received == reads


_GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(
    ("reads", "header_pending"),
    [
        pytest.param([_GET], False, id="one-head-alone"),
        pytest.param([b"GET"], True, id="three-bytes-of-a-head"),
        pytest.param([_GET[:-1], b"\n"], False, id="header-end-split-across-reads"),
        pytest.param([_GET[:-2], b"\r\n"], False, id="blank-line-in-its-own-read"),
        pytest.param([_GET + b"GET /"], True, id="the-next-head-begun"),
        pytest.param([_GET + _GET], False, id="two-heads-in-one-read"),
        pytest.param([b"\r\n" + _GET], False, id="blank-line-before-the-head"),
        pytest.param([_GET, _GET], False, id="two-reads-of-one-head-each"),
        pytest.param([b"GET / HTTP/1.0\r\n\r\n"], False, id="http-1.0"),
        # h11 also ends a head at a blank line after a bare LF (and at CRLF LF, LF CRLF)
        pytest.param([b"GET / HTTP/1.1\nHost: x\n\n"], False, id="bare-lf-head"),
        pytest.param([b"GET / HTTP/1.1\r\nHost: x\r\n\n"], False, id="crlf-lines-lf-blank-line"),
        pytest.param([b"GET / HTTP/1.1\nHost: x\n", b"\n"], False, id="bare-lf-end-split-across-reads"),
        pytest.param([b"GET / HTTP/1.1\nHost: x\n\n" + _GET], False, id="a-bare-lf-head-then-a-crlf-one"),
        # a read ending in CRLF CRLF whose head ended one line before: what follows is the next head's start
        pytest.param([b"GET / HTTP/1.1\nHost: x\n\r\n\r\n"], True, id="a-blank-line-behind-a-bare-lf-head"),
        pytest.param([b"GET / HTTP/1.1\nHost: x\n", b"\r\n\r\n"], True, id="the-same-split-across-reads"),
        pytest.param([b"\r\n\r\n"], False, id="two-blank-lines-alone"),
    ],
)
def test_a_request_head_ends_where_h11_ends_it_and_its_deadline_with_it(
    reads: list[bytes], header_pending: bool
) -> None:
    assert run(lambda: _deadline_state(reads)) == (header_pending, [], True)


def test_a_head_alone_in_its_read_naming_http_2_is_refused_not_taken_by_the_fast_path() -> None:
    assert run(lambda: _answer_to_reads([b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"])) == VERSION_NOT_SUPPORTED


class _FullTransport(RecordingTransport):
    """A transport whose client reads nothing: every write leaves it over its high-water mark."""

    protocol: asyncio.Protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        self.protocol.pause_writing()


async def _writes_behind_a_stalled_client(size: int) -> tuple[int, int]:
    async def handler(_: Request) -> Response:
        return Response(body=(b"x" * size,), content_type="text/plain")

    app = App()
    app.add_get("/", handler)
    protocol = HttpProtocol(app, idle_timeout=0, connections=OpenConnections())
    transport = _FullTransport()
    transport.protocol = protocol
    protocol.connection_made(transport)
    protocol.data_received(_GET * 3)  # pipelined
    for _ in range(20):  # the loop turns: only a drain lets the next response go
        await asyncio.sleep(0)
    stalled = len(transport.writes)
    protocol.resume_writing()
    for _ in range(20):
        await asyncio.sleep(0)
    return stalled, len(transport.writes)


@pytest.mark.parametrize("size", [pytest.param(40, id="small"), pytest.param(43_000, id="a-scrape")])
def test_a_client_that_reads_nothing_holds_one_response_in_the_process_not_each_pipelined_one(size: int) -> None:
    assert run(lambda: _writes_behind_a_stalled_client(size)) == (1, 2)


async def _answer_to_reads(reads: list[bytes]) -> bytes:
    async def handler(_: Request) -> Response:
        return Response(text="x\n")

    app = App()
    app.add_get("/", handler)
    protocol = HttpProtocol(app, idle_timeout=0, connections=OpenConnections())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for data in reads:
        protocol.data_received(data)
        if protocol.handler is not None:
            await bounded(protocol.handler)
    return b"".join(transport.writes)


@pytest.mark.parametrize(
    ("reads", "status"),
    [
        pytest.param([_GET[:10], _GET[10:]], b"HTTP/1.1 200 OK", id="a-head-in-two-reads"),
        # the second read alone would be a fast-path head, but h11 holds the start of a head it continues
        pytest.param([b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n", _GET], b"HTTP/1.1 400 Bad Request", id="continued"),
        pytest.param([_GET, b"GET / HTTP/1.1\r\nHost: x\r\n", b"X-A: a\r\n\r\n"], b"HTTP/1.1 200 OK", id="after-one"),
    ],
)
def test_a_read_that_continues_what_h11_holds_is_h11s(reads: list[bytes], status: bytes) -> None:
    answer = run(lambda: _answer_to_reads(reads))
    assert answer.startswith(status)
    assert answer.count(b"HTTP/1.1 ") == (1 if len(reads) < 3 else 2)


def test_a_read_of_64_ki_blank_lines_is_one_bad_request() -> None:
    """A head's end over and over (the read that once cost the request-line check 4.5 s of event loop): h11 wants a
    request line where the first blank line is, so the connection gets one 400 and closes."""

    async def main() -> bytes:
        async with serving(App(), web_settings()) as server:
            reader, writer = await open_client(server)
            writer.write(b"\r\n\r\n" * (64 * 1024))
            answer = await bounded(reader.read())
            writer.close()
            return answer

    answer = run(main)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert answer.count(b"HTTP/1.1 ") == 1
