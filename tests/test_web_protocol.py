"""The HTTP/1.1 layer of httpserver/protocol.py and http.py, in process over loopback: what aiohttp did for the
exporter and this layer now does itself (routing with implied HEAD, Go-style errors, the request-size limits,
request bodies, 100-continue, HTTP/1.0 and ``Connection: close``, keep-alive and its idle timeout, pipelining,
the response headers), and the request/response API the handlers see."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import open_client, serving, web_settings
from nvidia_gpu_exporter.httpserver.body import CHUNK_BYTES, chunks
from nvidia_gpu_exporter.httpserver.http import App, Request, Response, make_request
from nvidia_gpu_exporter.httpserver.protocol import (
    MAX_DISCARDED_BODY_BYTES,
    MAX_HEADER_BYTES,
    HttpProtocol,
    http_date,
    reason,
)
from nvidia_gpu_exporter.httpserver.server import go_style_errors

PARTS = (b"head\n", b"x" * (2 * CHUNK_BYTES + 100), b"tail\n")  # a body of shared parts over two chunks
QUIET_SECONDS = 0.3  # no byte for this long after the answers: the server kept the connection open


def app() -> App:
    async def hello(request: Request) -> Response:
        return Response(text=f"hello {request.query.getall('a')}\n")

    async def parts(_: Request) -> Response:
        return Response(body=PARTS, content_type="text/plain")

    async def broken(_: Request) -> Response:
        raise RuntimeError("a handler's bug")

    application = App(middlewares=[go_style_errors])
    application.add_get("/", hello)
    application.add_get("/parts", parts)
    application.add_get("/broken", broken)
    return application


async def exchange(data: bytes, *, idle_timeout: float = 60.0) -> tuple[bytes, bool]:
    """Send ``data`` on one connection; what comes back, and whether the server closed the connection (else it
    stayed quiet for :data:`QUIET_SECONDS` after its last byte)."""
    async with serving(app(), web_settings(idle_timeout_seconds=idle_timeout)) as server:
        reader, writer = await open_client(server)
        writer.write(data)
        received = b""
        closed = False
        try:
            for _ in range(1000):  # bounded: every read returns data, or the end, or times out
                chunk = await asyncio.wait_for(reader.read(65536), QUIET_SECONDS)
                if not chunk:
                    closed = True
                    break
                received += chunk
        except (asyncio.TimeoutError, ConnectionError):
            closed = reader.at_eof()
        writer.close()
        return received, closed


def get(path: str = "/", headers: str = "", version: str = "HTTP/1.1") -> bytes:
    return f"GET {path} {version}\r\nHost: x\r\n{headers}\r\n".encode("latin-1")


def statuses(data: bytes) -> list[bytes]:
    """The status lines in ``data`` (a body here never holds one)."""
    return re.findall(rb"HTTP/1\.[01] \d{3}[^\r]*", data)


@pytest.mark.parametrize(
    ("request_bytes", "status", "closes"),
    [
        pytest.param(get(), b"HTTP/1.1 200 OK", False, id="get-keeps-the-connection"),
        pytest.param(get("/nope"), b"HTTP/1.1 404 Not Found", False, id="unknown-path-404"),
        pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 405", False, id="post-405"),
        pytest.param(get("/" + "a" * 8200), b"HTTP/1.1 400 Bad Request", True, id="request-line-over-8190-bytes"),
        pytest.param(get(headers=f"X-Long: {'a' * 8200}\r\n"), b"HTTP/1.1 400", True, id="header-line-over-8190"),
        pytest.param(
            get(headers="".join(f"X-{i}: a\r\n" for i in range(129))), b"HTTP/1.1 400", True, id="129-headers"
        ),
        pytest.param(
            get(headers="".join(f"X-{i}: {'a' * 1000}\r\n" for i in range(MAX_HEADER_BYTES // 1000 + 2))),
            b"HTTP/1.1 431 Request Header Fields Too Large",
            True,
            id="head-over-64-kib-431",
        ),
        pytest.param(b"FOO\r\n\r\n", b"HTTP/1.1 400 Bad Request", True, id="garbage-400"),
        pytest.param(b"GET / HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request", True, id="http11-without-host-400"),
        pytest.param(
            get(headers="Content-Length: 3\r\nTransfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request",
            True,
            id="content-length-and-chunked-smuggling-400",
        ),
        pytest.param(get(version="HTTP/1.0"), b"HTTP/1.0 200 OK", True, id="http10-answered-in-kind-and-closed"),
        pytest.param(get(headers="Connection: close\r\n"), b"HTTP/1.1 200 OK", True, id="connection-close-closes"),
        pytest.param(
            get(headers="Connection: close\r\n") + get(), b"HTTP/1.1 200 OK", True, id="pipelined-after-close-dropped"
        ),
        pytest.param(get(version="HTTP/1.0") + get(), b"HTTP/1.0 200 OK", True, id="pipelined-after-http10-dropped"),
        pytest.param(get("/broken"), b"HTTP/1.1 500 Internal Server Error", False, id="handler-bug-500"),
    ],
)
def test_each_request_gets_its_status_and_the_connection_its_fate(
    request_bytes: bytes, status: bytes, closes: bool
) -> None:
    data, closed = run(lambda: exchange(request_bytes))
    assert statuses(data)[:1] == [status] or data.startswith(status), data[:200]
    assert closed is closes


def test_a_405_lists_the_allowed_methods_and_a_404_is_gos_text() -> None:
    data, _ = run(lambda: exchange(b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" + get("/nope")))
    first, second = data.split(b"HTTP/1.1 404")
    assert b"\r\nAllow: GET, HEAD\r\n" in first
    assert second.endswith(b"\r\n\r\n404 page not found\n")


def test_head_answers_the_get_headers_without_a_body() -> None:
    data, _ = run(lambda: exchange(get("/parts") + b"HEAD /parts HTTP/1.1\r\nHost: x\r\n\r\n" + get()))
    length = sum(len(part) for part in PARTS)
    assert data.count(f"\r\nContent-Length: {length}\r\n".encode()) == 2
    get_answer, head_answer, hello = data.split(b"HTTP/1.1 200 OK")[1:]
    assert get_answer.endswith(b"".join(PARTS))
    assert head_answer.endswith(b"\r\n\r\n")  # nothing after the head, and the next answer follows at once
    assert hello.endswith(b"hello []\n")


def test_the_response_headers_are_gos_set_with_a_date_and_no_server() -> None:
    data, _ = run(lambda: exchange(get()))
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
    names = [line.split(b":", 1)[0] for line in head]
    assert names == [b"Content-Type", b"Content-Length", b"Date"]
    assert b"Content-Type: text/plain; charset=utf-8" in head


def test_pipelined_requests_are_answered_one_at_a_time_in_order() -> None:
    data, closed = run(lambda: exchange(get("/?a=1") + get("/nope") + get("/parts") + get("/?a=2")))
    assert [line.split(b" ", 2)[1] for line in statuses(data)] == [b"200", b"404", b"200", b"200"]
    assert data.index(b"hello ['1']") < data.index(b"404 page") < data.index(b"tail\n") < data.index(b"hello ['2']")
    assert not closed


@pytest.mark.parametrize(
    ("body", "closes"),
    [
        pytest.param(b"Content-Length: 1024\r\n\r\n" + b"b" * 1024, False, id="small-body-read-and-dropped"),
        pytest.param(b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", False, id="chunked-body-dropped"),
        pytest.param(
            f"Content-Length: {MAX_DISCARDED_BODY_BYTES + 1}\r\n\r\n".encode() + b"b" * (MAX_DISCARDED_BODY_BYTES + 1),
            True,
            id="body-over-256-kib-answered-then-closed",
        ),
    ],
)
def test_a_request_body_is_discarded_within_its_bound(body: bytes, closes: bool) -> None:
    request = b"GET /?a=body HTTP/1.1\r\nHost: x\r\n" + body + get("/?a=next")
    data, closed = run(lambda: exchange(request))
    assert data.startswith(b"HTTP/1.1 200 OK"), data[:200]
    assert (b"hello ['next']" in data) is not closes
    assert closed is closes


async def answer_read_late(data: bytes) -> bytes:
    """Send ``data`` at once, read only after the server has answered and closed: what reaches the client."""
    async with serving(app(), web_settings()) as server:
        reader, writer = await open_client(server)
        writer.write(data)
        await bounded(writer.drain())
        await asyncio.sleep(0.3)  # the server answers and closes meanwhile, with the rest of data unread
        try:
            return await bounded(reader.read())
        except ConnectionResetError:
            return b"reset"
        finally:
            writer.close()


_TRAILING = b"x" * 65536  # sent behind the request that ends the connection, never read by the server


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        pytest.param(get(headers="Connection: close\r\n") + _TRAILING, b"HTTP/1.1 200 OK", id="connection-close"),
        pytest.param(b"FOO\r\n\r\n" + _TRAILING, b"HTTP/1.1 400 Bad Request", id="bad-request"),
        pytest.param(get(version="HTTP/2.0") + _TRAILING, b"HTTP/1.1 505", id="unsupported-version"),
        pytest.param(
            get(headers=f"Content-Length: {2 * MAX_DISCARDED_BODY_BYTES}\r\n") + b"b" * (2 * MAX_DISCARDED_BODY_BYTES),
            b"HTTP/1.1 200 OK",
            id="body-over-its-bound",
        ),
    ],
)
def test_the_last_answer_is_not_lost_to_a_reset_by_what_the_client_sent_after_it(
    request_bytes: bytes, status: bytes
) -> None:
    """Closing with the client's bytes unread resets the connection, and the reset destroys the answer waiting in
    the client's kernel: the server half-closes first and drops what still comes, as Go's server does."""
    data = run(lambda: answer_read_late(request_bytes))
    assert data.startswith(status), data[:200]


def test_expect_100_continue_is_answered_before_the_request() -> None:
    data, _ = run(lambda: exchange(get(headers="Expect: 100-continue\r\nContent-Length: 5\r\n") + b"hello"))
    assert statuses(data) == [b"HTTP/1.1 100 Continue", b"HTTP/1.1 200 OK"]


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    data, closed = run(lambda: exchange(get(), idle_timeout=0.05))
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert closed


def test_the_idle_timeout_counts_from_the_last_response_not_the_first() -> None:
    """Requests at 0, 0.6 and 1.2 s with a 1 s idle timeout: the connection serves all three (the deadline set
    after the first response has moved), then closes once idle."""

    async def main() -> tuple[list[bytes], bytes]:
        async with serving(app(), web_settings(idle_timeout_seconds=1.0)) as server:
            reader, writer = await open_client(server)
            answers = []
            for pause in (0.0, 0.6, 0.6):
                await asyncio.sleep(pause)
                writer.write(get())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
                await asyncio.wait_for(reader.readexactly(length), 5)
                answers.append(head)
            rest = await asyncio.wait_for(reader.read(), 5)  # the end, once the idle timeout has passed
            writer.close()
            return [status for answer in answers for status in statuses(answer)], rest

    answered, rest = run(main)
    assert answered == [b"HTTP/1.1 200 OK"] * 3
    assert rest == b""


def test_a_client_that_leaves_cancels_its_handler() -> None:
    async def main() -> bool:
        entered, cancelled = asyncio.Event(), asyncio.Event()

        async def slow(_: Request) -> Response:
            entered.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return Response(text="late\n")

        application = App()
        application.add_get("/slow", slow)
        async with serving(application, web_settings()) as server:
            _, writer = await open_client(server)
            writer.write(get("/slow"))
            await bounded(entered.wait())
            writer.close()
            await bounded(cancelled.wait())
            return cancelled.is_set()

    assert run(main)


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(get(), id="client-closes-a-keep-alive-connection"),
        pytest.param(get(headers="Connection: close\r\n"), id="server-closes-after-connection-close"),
        pytest.param(b"FOO\r\n\r\n", id="server-closes-after-a-bad-request"),
    ],
)
def test_a_closed_connection_is_freed_without_waiting_for_the_garbage_collector(request_bytes: bytes) -> None:
    """A closed connection's protocols, h11 state and buffers are freed by reference counting when it closes: left
    in a reference cycle, they waited for a full garbage collection, and under steady reconnections RSS crept
    between those (BENCHMARKS.md, "A timed soak")."""

    async def main() -> weakref.ref[HttpProtocol]:
        async with serving(app(), web_settings()) as server:
            reader, writer = await open_client(server)
            for _ in range(200):  # bounded: the server makes the protocol within a few loop turns
                if server.open.open:
                    break
                await asyncio.sleep(0.01)
            (protocol,) = server.open.open
            freed = weakref.ref(protocol)
            del protocol
            writer.write(request_bytes)
            await bounded(reader.readuntil(b"\r\n\r\n"))
            writer.close()
            for _ in range(200):  # bounded: the server sees the close within a few loop turns
                if not server.open.open:
                    break
                await asyncio.sleep(0.01)
            assert not server.open.open
            await asyncio.sleep(0)
            return freed

    gc.disable()
    try:
        freed = run(main)
        assert freed() is None
    finally:
        gc.enable()


# -- the API the handlers see ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        pytest.param("/probe?target=a&target=b", "/probe", {"target": ["a", "b"]}, id="repeated-keys-in-order"),
        pytest.param("/%2D/healthy?x=%20y+z", "/-/healthy", {"x": [" y z"]}, id="percent-decoded-path-and-query"),
        pytest.param("/p?flag&e=", "/p", {"flag": [""], "e": [""]}, id="blank-values-kept"),
        pytest.param("http://host:9835/metrics?a=1", "/metrics", {"a": ["1"]}, id="absolute-form-target"),
        pytest.param("*", "*", {}, id="asterisk-form-matches-no-route"),
    ],
)
def test_a_request_target_is_split_into_path_and_query(target: str, path: str, query: dict[str, list[str]]) -> None:
    request = make_request("GET", target)
    assert request.path == path
    assert {key: request.query.getall(key) for key in query} == query
    assert request.query.get("missing") is None


def test_request_headers_are_found_whatever_their_case() -> None:
    request = make_request("GET", "/", {"Accept-Encoding": "gzip", "X-Twice": "1"})
    assert request.headers.get("accept-encoding") == "gzip"
    assert request.headers.get("ACCEPT-ENCODING") == "gzip"
    assert request.headers.get("Authorization") is None
    assert request.remote is None  # no connection behind an in-process request
    assert request.peercert is None


@pytest.mark.parametrize(
    ("response", "content_type", "body"),
    [
        pytest.param(Response(text="é"), "text/plain; charset=utf-8", "é".encode(), id="text-is-utf8-plain"),
        pytest.param(
            Response(text="<p>", content_type="text/html", charset="utf-8"),
            "text/html; charset=utf-8",
            b"<p>",
            id="text-with-its-type",
        ),
        pytest.param(
            Response(body=b"{}", content_type="application/json"), "application/json", b"{}", id="bytes-typed-as-given"
        ),
        pytest.param(
            Response(body=(b"a", b"b"), headers={"Content-Type": "x/y"}, content_type="ignored/z"),
            "x/y",
            b"ab",
            id="a-content-type-header-wins",
        ),
    ],
)
def test_a_response_types_and_holds_its_body(response: Response, content_type: str, body: bytes) -> None:
    assert response.headers["Content-Type"] == content_type
    assert response.joined() == body
    assert response.content_length == len(body)


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param((0,), id="empty"),
        pytest.param((10, 20, 30), id="small-parts-joined-in-one-piece"),
        pytest.param((CHUNK_BYTES,), id="exactly-one-chunk"),
        pytest.param((5, 3 * CHUNK_BYTES + 7, 9), id="a-large-part-between-small-ones"),
    ],
)
def test_chunks_cut_parts_into_full_chunks_and_views(sizes: tuple[int, ...]) -> None:
    parts = [bytes([index]) * size for index, size in enumerate(sizes)]
    pieces = list(chunks(parts))
    assert b"".join(bytes(piece) for piece in pieces) == b"".join(parts)
    assert all(len(piece) == CHUNK_BYTES for piece in pieces[:-1])
    assert all(0 < len(piece) <= CHUNK_BYTES for piece in pieces)


def test_a_chunk_inside_one_part_is_a_view_of_it_not_a_copy() -> None:
    part = b"z" * (2 * CHUNK_BYTES)
    pieces = list(chunks([part]))
    assert all(isinstance(piece, memoryview) and piece.obj is part for piece in pieces)


def test_the_date_header_is_an_imf_fixdate() -> None:
    assert http_date(0) == b"Thu, 01 Jan 1970 00:00:00 GMT"
    assert http_date(1_796_083_200) == b"Tue, 01 Dec 2026 00:00:00 GMT"


@pytest.mark.parametrize(
    ("status", "phrase"),
    [
        pytest.param(404, b"Not Found", id="404-not-found"),
        pytest.param(413, b"Request Entity Too Large", id="413-gos-text-not-python-3.13s-content-too-large"),
        pytest.param(414, b"Request URI Too Long", id="414-without-pythons-hyphen"),
        pytest.param(505, b"HTTP Version Not Supported", id="505"),
        pytest.param(599, b"status code 599", id="unknown-status-as-go-writes-it"),
    ],
)
def test_the_reason_phrase_is_gos_status_text(status: int, phrase: bytes) -> None:
    assert reason(status) == phrase
