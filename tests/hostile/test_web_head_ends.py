"""Request heads that end as h11 (the parser of record) allows, not only in CRLF CRLF: a bare LF, or a mix
(RFC 9112 2.2 lets a recipient take LF for CRLF, and h11 does). The connection bounds (httpserver/timeouts.py) must see
those heads end where h11 does, or the header deadline keeps running through its answer. (The HTTP-version check is
h11's own since it moved into the HTTP protocol: the request after such a head is still checked.)"""

from __future__ import annotations

import asyncio

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import open_client, serving, web_settings
from nvidia_gpu_exporter.httpserver.http import App, Request, Response

_ENDINGS = [
    pytest.param(b"\r\n", b"\r\n", id="crlf"),
    pytest.param(b"\n", b"\n", id="bare-lf"),
    pytest.param(b"\r\n", b"\n", id="crlf-lines-lf-blank-line"),
    pytest.param(b"\n", b"\r\n", id="lf-lines-crlf-blank-line"),
]


def _head(version: bytes, eol: bytes, blank: bytes, *, close: bool = False) -> bytes:
    connection = b"Connection: close" + eol if close else b""  # answered or not, the connection then ends
    return b"GET / " + version + eol + b"Host: x" + eol + connection + blank


def _hello_app(delays: dict[str, float] | None = None) -> App:
    """``GET /`` (and each path of ``delays``) answering ``hello``, after the path's delay in seconds."""
    waits = delays or {}

    async def hello(request: Request) -> Response:
        await asyncio.sleep(waits.get(request.path, 0.0))
        return Response(text="hello\n")

    app = App()
    for path in {"/", *waits}:
        app.add_get(path, hello)
    return app


async def _answer(data: bytes, *, header_timeout: float = 10.0, delay: float = 0.0) -> bytes:
    app = _hello_app({"/": delay})
    async with serving(app, web_settings(header_timeout_seconds=header_timeout)) as server:
        reader, writer = await open_client(server)
        writer.write(data)
        await bounded(writer.drain())
        try:
            answer = await bounded(reader.read(-1))
        except ConnectionError:
            answer = b"reset"
        writer.close()
    return answer


@pytest.mark.parametrize(("eol", "blank"), _ENDINGS)
def test_a_request_naming_http_2_pipelined_after_a_head_is_answered_505_in_its_turn(eol: bytes, blank: bytes) -> None:
    data = _head(b"HTTP/1.1", eol, blank) + _head(b"HTTP/2.0", eol, blank, close=True)
    answer = run(lambda: _answer(data))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
    assert answer.count(b" 200 OK\r\n") == 1, answer
    assert answer.endswith(b"\r\n\r\nunsupported protocol version"), answer


@pytest.mark.parametrize(("eol", "blank"), _ENDINGS)
def test_the_header_deadline_stops_when_the_head_ends(eol: bytes, blank: bytes) -> None:
    # the answer takes longer than the header timeout: a deadline still running would cut it
    data = _head(b"HTTP/1.1", eol, blank, close=True)
    answer = run(lambda: _answer(data, header_timeout=0.2, delay=0.5))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"hello\n")


@pytest.mark.parametrize(
    "partial",
    [
        pytest.param(b"GET / HT", id="a-request-line-begun"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n", id="a-head-without-its-blank-line"),
    ],
)
def test_a_head_begun_behind_a_slow_answer_waits_for_that_answer_before_its_deadline_runs(partial: bytes) -> None:
    # Go reads the next request, and starts its ReadHeaderTimeout, once the response before it is written: a
    # client that pipelines the start of its next request gets the slow answer whole, then is cut for the rest
    data = _head(b"HTTP/1.1", b"\r\n", b"\r\n") + partial
    answer = run(lambda: _answer(data, header_timeout=0.2, delay=0.5))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"hello\n")


async def _after_bodies_that_look_like_head_ends(body: bytes) -> bytes:
    """At a cap of 2 connections, both held by clients whose request body (never finished) holds a head's end
    after their answer came; then a third client asks."""

    async with serving(_hello_app(), web_settings(max_connections=2)) as server:
        held = []
        for _ in range(2):
            reader, writer = await open_client(server)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            await bounded(reader.readuntil(b"hello\n"))
            writer.write(body)  # part of the body: no request, whatever it looks like
            await bounded(writer.drain())
            held.append(writer)
        await asyncio.sleep(0.05)  # the bodies are read
        reader, writer = await open_client(server)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = await bounded(reader.read(-1))
        for each in [*held, writer]:
            each.close()
    return answer


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"x", id="plain"),
        pytest.param(b"\r\n\r\n", id="crlf-crlf"),
        pytest.param(b"a\n\nb", id="lf-lf"),
    ],
)
def test_a_body_that_looks_like_a_head_end_leaves_its_connection_evictable(body: bytes) -> None:
    assert run(lambda: _after_bodies_that_look_like_head_ends(body)).startswith(b"HTTP/1.1 200 OK\r\n")


async def _after_a_body_that_never_comes(head: bytes) -> tuple[bytes, dict[str, int]]:
    """The answer to ``head`` and what follows it until the server closes (read timeout 0.2 s, idle timeout 60 s),
    and the connections the server closed by reason."""

    async with serving(_hello_app(), web_settings(header_timeout_seconds=0.2)) as server:
        reader, writer = await open_client(server)
        writer.write(head)
        await bounded(writer.drain())
        answer = await bounded(reader.read(-1))  # to the end: the server must close
        writer.close()
        return answer, dict(server.connections.stats.closed)


@pytest.mark.parametrize(
    ("head", "body_timeouts"),
    [
        # no body owed: the idle timeout's (60 s here) to close, so the connection is open at the end of the wait
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 0, id="no-body"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", 1, id="content-length-never-sent"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345", 1, id="half-the-body"),
        pytest.param(
            b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n", 1, id="a-chunk-never-sent"
        ),
        # the chunk-size line ends in a bare LF, then an empty line: h11 reads the second LF as chunk data and waits
        # for the rest (a second reader of the bytes once took it for a head's end, and the body escaped the deadline)
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\n\n", 1, id="chunk-size-lf-lf"),
    ],
)
def test_a_body_that_never_comes_is_closed_after_the_read_timeout_from_its_request(
    head: bytes, body_timeouts: int
) -> None:
    # Go's read timeout covers the whole request, its body included; the idle timeout (60 s here) is not waited for
    answer, closed = run(lambda: _after_a_body_that_never_comes(head))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert closed.get("body_timeout", 0) == body_timeouts


async def _bytes_trickled_before_the_close(head: bytes, limit: int) -> int:
    """After the answer to ``head``, one body byte every 0.1 s (read timeout 0.3 s): how many the client sent
    before the server closed, or ``limit`` if it never did."""

    async with serving(_hello_app(), web_settings(header_timeout_seconds=0.3)) as server:
        reader, writer = await open_client(server)
        writer.write(head)
        await bounded(reader.readuntil(b"hello\n"))
        sent = 0
        while sent < limit:
            try:
                closed = await asyncio.wait_for(reader.read(1), timeout=0.1)
            except asyncio.TimeoutError:
                closed = None
            if closed == b"":
                break
            writer.write(b"1")
            sent += 1
        writer.close()
    return sent


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", id="content-length"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n", id="one-chunk"),
    ],
)
def test_a_body_trickled_after_its_answer_does_not_move_the_read_deadline(head: bytes) -> None:
    # the read timeout counts from the request's start: a byte now and then of a body no route reads never extends it
    assert run(lambda: _bytes_trickled_before_the_close(head, limit=30)) < 10


async def _a_request_behind_the_rest_of_a_body() -> bytes:
    """A request whose body ends in the same read as the next request's head (answered within 0.1 s); then the
    connection sits idle for half the idle timeout after that answer, and asks again: by then a deadline kept
    from the first answer would have closed it."""

    async with serving(_hello_app({"/slow": 0.1}), web_settings(idle_timeout_seconds=0.8)) as server:
        reader, writer = await open_client(server)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
        await bounded(reader.readuntil(b"hello\n"))
        await asyncio.sleep(0.5)
        writer.write(b"12GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")  # the body's end, and a request behind it
        await bounded(reader.readuntil(b"hello\n"))
        await asyncio.sleep(0.4)  # idle since the second answer, half the idle timeout
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            answer = await bounded(reader.read(-1))
        except ConnectionError:
            answer = b"reset"
        writer.close()
    return answer


def test_the_idle_deadline_counts_from_the_last_answer_after_a_body_ends_beside_a_request() -> None:
    assert run(_a_request_behind_the_rest_of_a_body).startswith(b"HTTP/1.1 200 OK\r\n")
