"""Issue 13, finding 2: ``--web.write-timeout`` bounds a write that makes no progress, not the whole request.

Before, the timeout counted from the request's arrival: a large body read at a steady pace was cut once that
time had passed, and nothing said so above debug. Now a response is cut only when the client read none of it
for the write timeout, and that is logged at warn and counted.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

import pytest

from async_helpers import bounded, run
from hostile.web_hostile import ask, content_length, open_client, read_head, serving, web_settings
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from polling import eventually
from test_web_listeners import tls_contexts  # noqa: F401 - a fixture, used by name

BODY_BYTES = 4 * 1024 * 1024
WRITE_TIMEOUT_SECONDS = 0.3
READ_BYTES = 256 * 1024  # per read of the slow client
READ_PAUSE_SECONDS = 0.05  # 16 reads, 0.8 s in all: well past the write timeout, never a pause as long


def big_app() -> App:
    body = b"x" * BODY_BYTES

    async def big(_: Request) -> Response:
        return Response(body=body, content_type="text/plain")

    app = App()
    app.add_get("/big", big)
    return app


def test_a_large_body_read_at_a_steady_pace_is_delivered_whole() -> None:
    async def main() -> int:
        settings = web_settings(write_timeout_seconds=WRITE_TIMEOUT_SECONDS)
        async with serving(big_app(), settings) as server:
            reader, writer = await open_client(server)
            await ask(writer, "/big")
            head = await read_head(reader)
            received = 0
            for _ in range(BODY_BYTES // READ_BYTES * 4):  # bounded: far more reads than the body needs
                chunk = await bounded(reader.read(READ_BYTES))
                if not chunk:
                    break
                received += len(chunk)
                if received >= content_length(head):
                    break
                await asyncio.sleep(READ_PAUSE_SECONDS)
            writer.close()
            assert server.connections.stats.responses_incomplete == 0
            return received

    assert run(main) == BODY_BYTES


@pytest.fixture(params=["http", "https"])
def tls(
    request: pytest.FixtureRequest,
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],  # noqa: F811 - the listener tests' fixture, by name
) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(server, client) TLS contexts, or none for plain HTTP."""
    return tls_contexts if request.param == "https" else (None, None)


def non_reader(port: int, tls: ssl.SSLContext | None) -> socket.socket:
    """A blocking client (so nothing reads for it, as asyncio's TLS client would) that asks and never reads."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(5)
    raw.connect(("127.0.0.1", port))
    sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: exporter\r\n\r\n")
    return sock


def test_a_response_nobody_reads_is_cut_logged_at_warn_and_counted(
    caplog: pytest.LogCaptureFixture, tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None]
) -> None:
    async def main() -> None:
        settings = web_settings(write_timeout_seconds=WRITE_TIMEOUT_SECONDS)
        async with serving(big_app(), settings, tls[0]) as server:
            port = int(server.addresses[0].rsplit(":", 1)[1])
            sock = await bounded(asyncio.to_thread(non_reader, port, tls[1]))
            stats = server.connections.stats
            await eventually(lambda: stats.responses_incomplete == 1, "the stalled response to be cut")
            await eventually(lambda: stats.open == 0, "the connection to be closed")
            sock.close()

    with caplog.at_level(logging.WARNING):
        run(main)
    (record,) = [record for record in caplog.records if "write timeout" in record.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.unsent_bytes > 0  # type: ignore[attr-defined]  # a field of the structured line
