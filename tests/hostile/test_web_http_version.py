"""Issue 13, finding 17 (its HTTP part): a request line naming HTTP/2.0 over an HTTP/1 connection was answered
``HTTP/2.0 200``. As Go's server does, it is answered 505 with an HTTP/1.1 status line, and the connection
closes; HTTP/1.0 and HTTP/1.1 are served as before."""

from __future__ import annotations

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import ask, open_client, serving, web_settings
from nvidia_gpu_exporter.web.http import App, Request, Response


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


def test_a_pipelined_http2_request_line_closes_the_connection() -> None:
    async def main() -> bytes:
        async with serving(hello_app(), web_settings()) as server:
            reader, writer = await open_client(server)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/2.0\r\nHost: x\r\n\r\n")
            data = await bounded(reader.read())
            writer.close()
            return data

    assert b"HTTP/2.0" not in run(main)
