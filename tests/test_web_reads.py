"""The HTTP protocol as a client's bytes reach it: h11 is the one reader of the request bytes, so what a connection
answers, and what its deadlines and the connection cap see, never depend on where the reads split the stream.

As h11's own fuzz harness does, each stream is fed to the real protocols (httpserver/timeouts.py's
``DeadlineProtocol`` around protocol.py's ``HttpProtocol``) whole and split at every boundary (and, by hypothesis, at
random ones), and the bytes written back must be the same each time; the deadline state read from h11 is checked
after each read."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from async_helpers import bounded, run
from hostile.web_hostile import open_client, serving, web_settings
from nvidia_gpu_exporter.httpserver import protocol as protocol_module
from nvidia_gpu_exporter.httpserver.body import CHUNK_BYTES, ONE_WRITE_BYTES
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.protocol import (
    MAX_HEADER_BYTES,
    MAX_LINE_BYTES,
    VERSION_NOT_SUPPORTED,
    HttpProtocol,
    OpenConnections,
)
from nvidia_gpu_exporter.httpserver.server import go_style_errors
from nvidia_gpu_exporter.httpserver.timeouts import DeadlineProtocol

FIXED_DATE = b"Thu, 01 Jan 2026 00:00:00 GMT"


class RecordingTransport(asyncio.Transport):
    """A transport that takes every write at once and records each one, and whether the server ended its side."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.eof, "a write after the server ended its side"
        assert not self.closed, "a write after the server closed"
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(bytes(data) for data in list_of_data))

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _app() -> App:
    async def hello(_: Request) -> Response:
        return Response(text="hello\n")

    async def big(_: Request) -> Response:
        return Response(body=(b"x" * (ONE_WRITE_BYTES + 10),), content_type="text/plain")

    app = App(middlewares=[go_style_errors])
    app.add_get("/", hello)
    app.add_get("/big", big)
    return app


async def _settle(inner: HttpProtocol) -> None:
    for _ in range(50):
        if inner.handler is not None:
            await bounded(asyncio.shield(inner.handler))
        await asyncio.sleep(0)
        if inner.handler is None:
            return


def _connection(transport: RecordingTransport) -> tuple[DeadlineProtocol, HttpProtocol]:
    """The server's two protocols for one connection on ``transport``, as its listener makes them, on :func:`_app`
    (the HTTP protocol is made once the connection is made)."""
    app = _app()
    inners: list[HttpProtocol] = []

    def make(finished: Callable[[int], None]) -> HttpProtocol:
        inners.append(HttpProtocol(app, idle_timeout=0, connections=OpenConnections(), finished=finished))
        return inners[0]

    protocol = DeadlineProtocol(make, asyncio.get_running_loop(), header_timeout=10, write_timeout=10)
    protocol.connection_made(transport)
    return protocol, inners[0]


async def _transcript(reads: list[bytes], *, interleaved: bool) -> tuple[bytes, bool]:
    """What the server writes for ``reads`` and whether it ended its side of the connection. The reads come one after
    another, or with ``interleaved`` each handler is let finish before the next read (a slow client's reads)."""
    transport = RecordingTransport()
    protocol, inner = _connection(transport)
    for data in reads:
        if transport.closed:
            break
        protocol.data_received(data)
        if interleaved:
            await _settle(inner)
    await _settle(inner)
    protocol.connection_lost(None)
    return b"".join(transport.writes), transport.closed or transport.eof


def transcript(reads: list[bytes], monkeypatch: pytest.MonkeyPatch, *, interleaved: bool = False) -> tuple[bytes, bool]:
    monkeypatch.setattr(protocol_module, "http_date", lambda now=None: FIXED_DATE)
    return run(lambda: _transcript(reads, interleaved=interleaved))


def statuses(written: bytes) -> list[bytes]:
    """The status codes of the answers in ``written``, in order."""
    return re.findall(rb"HTTP/1\.[01] (\d{3}) ", written)


_GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
STREAMS = {
    "one-get": _GET,
    "pipelined-gets": _GET * 3,
    "bare-lf-head": b"GET / HTTP/1.1\nHost: x\n\n" + _GET,
    "head-with-a-body": b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n12345" + _GET,
    "chunked-body": b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + _GET,
    # the body is malformed (a chunk size that is no number): the request's own answer (405: POST), then the close
    "malformed-chunk": b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
    "http-1.0": b"GET / HTTP/1.0\r\n\r\n" + _GET,
    "connection-close-then-more": b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + _GET,
    "http-2-pipelined": _GET + b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
    "bad-header-behind-a-good-request": _GET + b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n",
    "expect-100-continue": b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab" + _GET,
    "a-large-response-then-a-small-one": b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" + _GET,
    "blank-lines-only": b"\r\n\r\n" * 8,
    "request-line-over-the-line-limit": b"GET /" + b"a" * MAX_LINE_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "head-over-the-head-limit": b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * (MAX_HEADER_BYTES // 8) + b"\r\n",
    "request-line-of-70000-bytes": b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
}


def _every_split(stream: bytes) -> Iterable[list[bytes]]:
    step = 1 if len(stream) <= 200 else len(stream) // 40  # the short streams at every boundary, the long at 40
    for index in range(1, len(stream), step):
        yield [stream[:index], stream[index:]]


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_answer_to_a_stream_does_not_depend_on_where_its_reads_split(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol_module, "http_date", lambda now=None: FIXED_DATE)
    stream = STREAMS[name]

    async def main() -> None:
        whole = await _transcript([stream], interleaved=False)
        assert whole[0].startswith(b"HTTP/1."), (name, whole)  # every stream gets an answer, never a silent close
        bytewise = [stream[i : i + 1] for i in range(len(stream))] if len(stream) < 2000 else [stream]
        assert await _transcript(bytewise, interleaved=False) == whole, name
        for reads in _every_split(stream):
            assert await _transcript(reads, interleaved=False) == whole, (name, len(reads[0]))
            # each handler done before the next read: the same answers (only a Connection: close may differ, said
            # when the server knew it would close before it answered), and the same end
            slow, ended = await _transcript(reads, interleaved=True)
            assert (statuses(slow), ended) == (statuses(whole[0]), whole[1]), (name, len(reads[0]))

    run(main)


@pytest.mark.parametrize(
    ("name", "expected", "ended"),
    [
        pytest.param("pipelined-gets", [b"200", b"200", b"200"], False, id="pipelined-answered-in-order"),
        pytest.param("malformed-chunk", [b"405"], True, id="a-malformed-body-gets-its-requests-answer-then-a-close"),
        pytest.param("http-1.0", [b"200"], True, id="http-1.0-answered-then-closed"),
        pytest.param("connection-close-then-more", [b"200"], True, id="bytes-after-close-dropped"),
        pytest.param("http-2-pipelined", [b"200", b"505"], True, id="http-2-answered-in-its-turn"),
        pytest.param("expect-100-continue", [b"100", b"405", b"200"], False, id="100-continue"),
        pytest.param("blank-lines-only", [b"400"], True, id="blank-lines-are-a-bad-request"),
        pytest.param("request-line-over-the-line-limit", [b"400"], True, id="a-long-request-line-is-400"),
        pytest.param("head-over-the-head-limit", [b"431"], True, id="a-head-over-64-kib-is-431"),
        # over both limits: 431 whether it came in one read or in many (it was 400 whole and 431 in pieces)
        pytest.param("request-line-of-70000-bytes", [b"431"], True, id="a-70000-byte-request-line-is-431"),
    ],
)
def test_each_request_gets_its_answer(
    name: str, expected: list[bytes], ended: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    written, closed = transcript([STREAMS[name]], monkeypatch)
    assert (statuses(written), closed) == (expected, ended), written[:300]


_PIECES = st.sampled_from(list(STREAMS.values())[:13])  # the short ones, combined


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_PIECES, min_size=1, max_size=4), cuts=st.lists(st.integers(min_value=1), max_size=12))
def test_random_reads_of_random_streams_get_the_answer_of_the_whole(
    pieces: list[bytes], cuts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = b"".join(pieces)
    points = sorted({cut % len(stream) for cut in cuts} - {0})
    reads = [stream[start:end] for start, end in zip([0, *points], [*points, len(stream)], strict=True)]
    assert transcript(reads, monkeypatch) == transcript([stream], monkeypatch)


@pytest.mark.parametrize(
    ("header_line", "status"),
    [
        # the limit holds for the name, colon and value: optional whitespace after the colon is not counted, so the
        # same header is taken or refused the same way with or without it (it was off by one without the space)
        pytest.param(b"X-A:" + b"v" * (MAX_LINE_BYTES - 4), b"200", id="at-the-limit-without-a-space"),
        pytest.param(b"X-A: " + b"v" * (MAX_LINE_BYTES - 4), b"200", id="at-the-limit-with-a-space"),
        pytest.param(b"X-A:" + b"v" * (MAX_LINE_BYTES - 3), b"400", id="past-the-limit-without-a-space"),
        pytest.param(b"X-A: " + b"v" * (MAX_LINE_BYTES - 3), b"400", id="past-the-limit-with-a-space"),
    ],
)
def test_the_header_line_limit_does_not_depend_on_optional_whitespace(
    header_line: bytes, status: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    written, _ = transcript([b"GET / HTTP/1.1\r\nHost: x\r\n" + header_line + b"\r\n\r\n"], monkeypatch)
    assert written.split(b" ")[1] == status


# -- what the deadlines read of h11's state ------------------------------------------------------------------


async def _awaiting_after(reads: list[bytes]) -> tuple[int, bool]:
    """What the connection waits for after ``reads`` (protocol.py's constants), and whether its request deadline
    runs."""
    protocol, inner = _connection(RecordingTransport())
    for data in reads:
        protocol.data_received(data)
        await _settle(inner)
    result = inner.awaiting(), protocol._request_started is not None
    protocol.connection_lost(None)
    return result


@pytest.mark.parametrize(
    ("reads", "awaiting", "deadline"),
    [
        pytest.param([], protocol_module.FIRST_HEAD, True, id="new-connection-first-head-awaited"),
        pytest.param([_GET], protocol_module.NOTHING, False, id="one-head-answered"),
        pytest.param([b"GET"], protocol_module.HEAD, True, id="three-bytes-of-a-head"),
        pytest.param([_GET[:-1], b"\n"], protocol_module.NOTHING, False, id="header-end-split-across-reads"),
        pytest.param([_GET + b"GET /"], protocol_module.HEAD, True, id="the-next-head-begun"),
        pytest.param([b"GET / HTTP/1.1\nHost: x\n\n"], protocol_module.NOTHING, False, id="bare-lf-head"),
        pytest.param([b"GET / HTTP/1.1\nHost: x\n\r\n\r\n"], protocol_module.NOTHING, False, id="blank-line-behind"),
        pytest.param(
            [b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab"], protocol_module.BODY, True, id="a-body-owed"
        ),
        pytest.param(
            [b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\n\n"],
            protocol_module.BODY,
            True,
            id="a-chunk-size-line-then-lf-lf-is-body",
        ),
    ],
)
def test_what_a_connection_awaits_is_read_from_h11(reads: list[bytes], awaiting: int, deadline: bool) -> None:
    assert run(lambda: _awaiting_after(reads)) == (awaiting, deadline)


# -- writes per response ------------------------------------------------------------------------------------


async def _writes(size: int) -> list[bytes]:
    body = (b"a" * 5, b"b" * (size - 10), b"c" * 5)  # shared parts, as a cached scrape's

    async def handler(_: Request) -> Response:
        return Response(body=body, content_type="text/plain")

    app = App()
    app.add_get("/", handler)
    protocol = HttpProtocol(app, idle_timeout=0, connections=OpenConnections())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(_GET)
    assert protocol.handler is not None
    await bounded(protocol.handler)
    assert b"".join(transport.writes).endswith(b"\r\n\r\n" + b"".join(body))
    return transport.writes


@pytest.mark.parametrize(
    ("size", "writes"),
    [
        pytest.param(43_000, 1, id="a-scrape-of-a-few-gpus-in-one-write"),
        pytest.param(ONE_WRITE_BYTES, 1, id="one-write-up-to-its-bound"),
        pytest.param(ONE_WRITE_BYTES + 1, ONE_WRITE_BYTES // CHUNK_BYTES + 1, id="chunked-past-it"),
    ],
)
def test_a_small_body_goes_out_with_its_head_in_one_write(size: int, writes: int) -> None:
    assert len(run(lambda: _writes(size))) == writes


def test_a_head_naming_http_2_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert transcript([b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"], monkeypatch) == (VERSION_NOT_SUPPORTED, True)


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


def test_a_read_of_64_ki_blank_lines_is_one_bad_request() -> None:
    """A head's end over and over (the read that once cost a second reader's request-line check 4.5 s of event
    loop): h11 wants a request line where the first blank line is, so the connection gets one 400 and closes."""

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
