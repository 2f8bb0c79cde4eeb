"""Issue 13, finding 17 (its HTTP part): a request line naming HTTP/2.0 over an HTTP/1 connection was answered
``HTTP/2.0 200``. As Go's server does, it is answered 505 with an HTTP/1.1 status line, and the connection
closes; HTTP/1.0 and HTTP/1.1 are served as before."""

from __future__ import annotations

import asyncio

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import ask, open_client, serving, web_settings
from nvidia_gpu_exporter.httpserver.http import App, Request, Response


def hello_app() -> App:
    async def hello(_: Request) -> Response:
        return Response(text="hello\n")

    app = App()
    app.add_get("/", hello)
    return app


async def answer(version: str) -> bytes:
    async with serving(hello_app(), web_settings()) as server:
        reader, writer = await open_client(server)
        await ask(writer, "/", version)
        writer.write_eof()
        data = await bounded(reader.read())
        writer.close()
        return data


@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/3.0", "HTTP/0.9"])
def test_a_request_line_that_is_not_http1_is_answered_505_over_http11(version: str) -> None:
    data = run(lambda: answer(version))
    assert data.startswith(b"HTTP/1.1 505 HTTP Version Not Supported\r\n"), data
    assert b"\r\nConnection: close\r\n" in data
    assert data.endswith(b"\r\n\r\nunsupported protocol version")


@pytest.mark.parametrize("version", ["HTTP/1.0", "HTTP/1.1"])
def test_http1_requests_are_served(version: str) -> None:
    data = run(lambda: answer(version))
    assert data.startswith(f"{version} 200 OK\r\n".encode("ascii")), data
    assert data.endswith(b"hello\n")


async def answers_to(*reads: bytes) -> bytes:
    """Everything the server sends on one connection given ``reads`` (each its own write), up to its close."""
    async with serving(hello_app(), web_settings()) as server:
        reader, writer = await open_client(server)
        for data in reads:
            writer.write(data)
            await bounded(writer.drain())
            await asyncio.sleep(0.05)  # each its own read on the server's side
        data = await bounded(reader.read())
        writer.close()
        return data


_VERSION_ANSWER = b"HTTP/1.1 505 HTTP Version Not Supported\r\n"


def test_an_http2_request_pipelined_behind_one_is_answered_505_after_its_response() -> None:
    data = run(lambda: answers_to(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/2.0\r\nHost: x\r\n\r\n"))
    assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
    assert data.index(_VERSION_ANSWER) > data.index(b"hello\n"), data
    assert data.endswith(b"unsupported protocol version")


def test_a_body_that_looks_like_a_request_head_does_not_cost_the_next_request_its_505() -> None:
    """The body is a body: the HTTP/2.0 request after it is the connection's second request, answered 505 (it was
    cut unanswered, taken for a third request behind one not yet answered)."""
    with_body = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n"
    data = run(lambda: answers_to(with_body, b"\r\n\r\n", b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"))
    assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
    assert _VERSION_ANSWER in data, data


def test_a_request_body_naming_http2_is_a_body() -> None:
    with_body = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n"
    data = run(
        lambda: answers_to(with_body, b"GET / HTTP/2.0\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    )
    assert _VERSION_ANSWER not in data, data
    assert data.count(b"HTTP/1.1 ") == 2, data
    assert data.endswith(b"hello\n"), data


def test_a_version_go_cannot_parse_is_a_bad_request() -> None:
    """Go's server reads ``HTTP/X.Y`` with one digit each (``HTTP/12.0`` is malformed, 400), as h11 does."""
    assert run(lambda: answer("HTTP/12.0")).startswith(b"HTTP/1.1 400 Bad Request\r\n")
