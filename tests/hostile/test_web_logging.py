"""Issue 13, finding 6: aiohttp's and asyncio's errors bypassed the structured logger. 1,000 malformed requests
with ``--log.format=json --log.level=error`` wrote 11,000 raw traceback lines; now every line is one JSON
object, and each message is rate limited, so the count stays small whatever the client sends."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from hostile.web_hostile import exporter_child, read_response
from nvidia_gpu_exporter import logs

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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def limited_logger(clock: Clock) -> tuple[logging.Logger, io.StringIO, logs.RateLimitedHandler]:
    stream = io.StringIO()
    handler = logs.RateLimitedHandler(stream, lines=3, interval=60.0, clock=clock)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.Logger("hostile-test")  # not registered: nothing else sees it
    logger.addHandler(handler)
    return logger, stream, handler


def messages(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_one_message_template_is_written_a_few_times_per_interval_then_summed_up() -> None:
    clock = Clock()
    logger, stream, _ = limited_logger(clock)
    for index in range(10):
        logger.error("bad request from %s", f"10.0.0.{index}")
    logger.error("another message")
    assert [entry["msg"] for entry in messages(stream)] == [
        "bad request from 10.0.0.0",
        "bad request from 10.0.0.1",
        "bad request from 10.0.0.2",
        "another message",
    ]
    clock.now = 61.0
    logger.error("bad request from %s", "10.0.0.99")
    summary, latest = messages(stream)[4:]
    assert summary["msg"] == "suppressed similar log lines"
    assert summary["suppressed"] == 7
    assert summary["similar_to"] == "bad request from 10.0.0.9"
    assert latest["msg"] == "bad request from 10.0.0.99"


def test_what_is_suppressed_at_exit_is_still_summed_up() -> None:
    clock = Clock()
    logger, stream, handler = limited_logger(clock)
    for _ in range(5):
        logger.warning("stalled")
    handler.close()
    assert [entry["msg"] for entry in messages(stream)][-1] == "suppressed similar log lines"
    assert messages(stream)[-1]["suppressed"] == 2


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The process's logging as it was, after a test that configures it."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    package = logging.getLogger(logs.ROOT_LOGGER)
    saved_package = (list(package.handlers), package.level, package.propagate)
    loop_logger = logging.getLogger("asyncio")
    saved_filters = list(loop_logger.filters)
    chatty = {name: logging.getLogger(name).level for name in logs.CHATTY_LIBRARIES}
    yield None
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    package.handlers[:] = saved_package[0]
    package.setLevel(saved_package[1])
    package.propagate = saved_package[2]
    loop_logger.filters[:] = saved_filters
    for name, level in chatty.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(
    ("level", "logger", "record_level", "message", "written"),
    [
        # issue 35: a client that closes mid-response was 89 warnings in a 30-minute soak
        pytest.param(
            "info", "asyncio", logging.WARNING, "socket.send() raised exception.", None, id="client-gone-quiet"
        ),
        pytest.param(
            "debug", "asyncio", logging.WARNING, "socket.send() raised exception.", "debug", id="client-gone-at-debug"
        ),
        # and its TLS counterpart, for every write past the fifth to a TLS connection whose client went away
        pytest.param("info", "asyncio", logging.WARNING, "SSL connection is closed", None, id="tls-client-gone-quiet"),
        pytest.param(
            "debug", "asyncio", logging.WARNING, "SSL connection is closed", "debug", id="tls-client-gone-at-debug"
        ),
        pytest.param("info", "asyncio", logging.WARNING, "something else", "warn", id="other-asyncio-warnings-kept"),
        # issue 30: asyncssh's INFO lines, five per fleet probe
        pytest.param("info", "asyncssh", logging.INFO, "Opening SSH connection", None, id="ssh-info-quiet"),
        pytest.param("info", "asyncssh", logging.WARNING, "Host key mismatch", "warn", id="ssh-warnings-kept"),
        pytest.param("debug", "asyncssh", logging.INFO, "Opening SSH connection", "info", id="ssh-info-at-debug"),
    ],
)
def test_library_lines_an_operator_cannot_act_on_are_debug(
    level: str, logger: str, record_level: int, message: str, written: str | None
) -> None:
    stream = io.StringIO()
    logs.configure(level, "json", stream)
    logging.getLogger(logger).log(record_level, message)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [entry["level"] for entry in lines] == ([written] if written else [])
