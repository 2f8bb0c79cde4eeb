"""Issue 13, finding 6: aiohttp's and asyncio's errors bypassed the structured logger. 1,000 malformed requests
with ``--log.format=json --log.level=error`` wrote 11,000 raw traceback lines; now every line is one JSON
object, and each message is rate limited, so the count stays small whatever the client sends."""

from __future__ import annotations

import json

import pytest
from web_hostile import exporter_child, read_response

MALFORMED = (
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n",  # a TLS hello on plain HTTP
)
MAX_LINES = 50


@pytest.mark.parametrize("requests", [300, pytest.param(1000, marks=pytest.mark.slow)])
def test_malformed_requests_write_a_few_json_lines(requests: int) -> None:
    with exporter_child(["--log.format=json", "--log.level=error"]) as child:
        for index in range(requests):
            with child.connect() as sock:
                sock.sendall(MALFORMED[index % len(MALFORMED)])
                assert read_response(sock).startswith(b"HTTP/1."), index
        status, _ = child.get("/-/healthy")
        assert status == 200
    lines = [line for line in child.lines if line]
    assert lines, "the malformed requests were not logged at all"
    for line in lines:
        assert isinstance(json.loads(line), dict), line
    assert len(lines) < MAX_LINES, "\n".join(lines)
    print(f"{requests} malformed requests: {len(lines)} log lines")
    summaries = [json.loads(line) for line in lines if '"suppressed similar log lines"' in line]
    assert sum(int(entry["suppressed"]) for entry in summaries) > requests / 2  # said at exit, not dropped silently
