"""Issue 13, finding 2: ``--web.write-timeout`` bounds a write that makes no progress, not the whole request.

Before, the timeout counted from the request's arrival: a large body read at a steady pace was cut once that
time had passed, and nothing said so above debug. Now a response is cut only when the client read none of it
for the write timeout, and that is logged at warn and counted.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web
from web_hostile import ask, content_length, open_client, read_head, serving, web_settings

from async_helpers import bounded, run
from polling import eventually

BODY_BYTES = 4 * 1024 * 1024
WRITE_TIMEOUT_SECONDS = 0.3
READ_BYTES = 256 * 1024  # per read of the slow client
READ_PAUSE_SECONDS = 0.05  # 16 reads, 0.8 s in all: well past the write timeout, never a pause as long


def big_app() -> web.Application:
    body = b"x" * BODY_BYTES

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/big", big)
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


def test_a_response_nobody_reads_is_cut_logged_at_warn_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        settings = web_settings(write_timeout_seconds=WRITE_TIMEOUT_SECONDS)
        async with serving(big_app(), settings) as server:
            _, writer = await open_client(server)
            await ask(writer, "/big")
            stats = server.connections.stats
            await eventually(lambda: stats.responses_incomplete == 1, "the stalled response to be cut")
            await eventually(lambda: stats.open == 0, "the connection to be closed")
            writer.close()

    with caplog.at_level(logging.WARNING):
        run(main)
    (record,) = [record for record in caplog.records if "write timeout" in record.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.unsent_bytes > 0  # type: ignore[attr-defined]  # a field of the structured line
