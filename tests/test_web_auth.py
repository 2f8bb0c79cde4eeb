"""Basic auth against bcrypt hashes, and bcrypt's 72-byte rule answered the same on every bcrypt version.

bcrypt reads at most 72 bytes of a password. exporter-toolkit's Go bcrypt compares only those (a longer
password whose first 72 bytes match is accepted); bcrypt 4.x does the same while 5.x raises. These tests
run in the main suite (bcrypt 5.x) and again on 4.x in CI (.ci/steps/70-dependency-ranges.sh).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from async_helpers import WAIT_SECONDS, bounded, run
from nvidia_gpu_exporter.httpserver.auth import BCRYPT_MAX_PASSWORD_BYTES, BasicAuthenticator
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.security import Security
from nvidia_gpu_exporter.httpserver.server import bind_socket
from nvidia_gpu_exporter.web.server import WebServer
from nvidia_gpu_exporter.web.settings import WebSettings

PASSPHRASE_72 = "correct horse battery staple, then seventy-two bytes of it exactly: ok!!"  # 72 ASCII bytes
SHORT = "hunter2"
# "é" is two bytes in UTF-8: here it straddles byte 72, so the first 72 bytes end inside a character.
STRADDLING = "x" * 71 + "é and more"


def hash_of(password: bytes) -> str:
    """A cost-4 hash as a truncating tool (htpasswd, Go before 2023, bcrypt 4.x) writes it for ``password``."""
    return bcrypt.hashpw(password[:BCRYPT_MAX_PASSWORD_BYTES], bcrypt.gensalt(4)).decode("ascii")


def test_the_passphrase_is_exactly_72_bytes() -> None:
    assert len(PASSPHRASE_72.encode("utf-8")) == BCRYPT_MAX_PASSWORD_BYTES == 72


@pytest.mark.parametrize(
    ("stored", "user", "password", "accepted"),
    [
        pytest.param(PASSPHRASE_72, "alice", PASSPHRASE_72, True, id="exactly-72-bytes-is-checked-whole"),
        pytest.param(
            PASSPHRASE_72, "alice", PASSPHRASE_72 + " and a tail", True, id="over-72-bytes-only-the-first-72-count"
        ),
        pytest.param(
            PASSPHRASE_72 + " stored tail", "alice", PASSPHRASE_72 + " other tail", True, id="tails-past-72-never-count"
        ),
        pytest.param(
            PASSPHRASE_72, "alice", "X" + PASSPHRASE_72[1:] + " tail", False, id="over-72-bytes-wrong-within-72-refused"
        ),
        pytest.param(PASSPHRASE_72, "alice", PASSPHRASE_72[:71], False, id="71-of-the-72-bytes-refused"),
        pytest.param(STRADDLING, "alice", STRADDLING, True, id="cut-inside-a-utf8-character-like-go"),
        pytest.param(SHORT, "alice", SHORT, True, id="short-password-accepted"),
        pytest.param(SHORT, "alice", SHORT + "!", False, id="short-password-must-match-whole"),
        pytest.param(PASSPHRASE_72, "mallory", PASSPHRASE_72 + " and a tail", False, id="unknown-user-refused"),
    ],
)
def test_bcrypt_72_byte_rule(stored: str, user: str, password: str, accepted: bool) -> None:
    authenticator = BasicAuthenticator({"alice": hash_of(stored.encode("utf-8"))})
    assert run(lambda: authenticator.verify(user, password)) is accepted


WELL_FORMED = hash_of(SHORT.encode("utf-8"))


@pytest.mark.parametrize(
    "hashed",
    [
        pytest.param("$2b$04$not-a-real-hash", id="salt-too-short-which-bcrypt-4.0-panics-on"),
        pytest.param("$2b$99$" + WELL_FORMED[7:], id="cost-out-of-range"),
        pytest.param(WELL_FORMED[:-1], id="one-character-short"),
        pytest.param(WELL_FORMED + "x", id="one-character-long"),
        pytest.param(WELL_FORMED[:-1] + "!", id="outside-bcrypts-base64"),
    ],
)
@pytest.mark.parametrize("password", [SHORT, PASSPHRASE_72 + " and a tail"], ids=["short", "over-72-bytes"])
def test_a_malformed_hash_refuses_every_password_and_is_warned_about(
    hashed: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="nvidia_gpu_exporter.httpserver.auth"):
        authenticator = BasicAuthenticator({"alice": hashed})
    assert [record.getMessage() for record in caplog.records] == [
        "basic_auth_users: not a well-formed bcrypt hash, so this user can never log in"
    ]
    assert caplog.records[0].__dict__["user"] == "alice"
    assert run(lambda: authenticator.verify("alice", password)) is False


# -- through the server ---------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def protected(tmp_path: Path) -> AsyncIterator[str]:
    """The real WebServer behind a web config file with one user whose password is :data:`PASSPHRASE_72`."""
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  alice: {hash_of(PASSPHRASE_72.encode('utf-8'))}\n")
    security = Security.from_file(str(config))

    async def hello(_: Request) -> Response:
        return Response(text="hello\n")

    app = App()
    app.add_get("/", hello)
    security.install(app)
    settings = WebSettings("/metrics", 0, 0.5, 60.0, 5.0, 0.0, False)
    server = WebServer(app, settings, security)
    await server.start([bind_socket("127.0.0.1:0")])
    try:
        yield f"http://{server.addresses[0]}/"
    finally:
        await bounded(server.stop())


async def status_for(url: str, password: str) -> tuple[int, str]:
    token = base64.b64encode(f"alice:{password}".encode()).decode("ascii")
    timeout = aiohttp.ClientTimeout(total=WAIT_SECONDS)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers={"Authorization": f"Basic {token}"}) as response,
    ):
        return response.status, response.headers.get("WWW-Authenticate", "")


def test_a_password_over_72_bytes_gets_go_exporters_answer_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async def main() -> list[tuple[int, str]]:
        async with protected(tmp_path) as url:
            return [
                await bounded(status_for(url, "X" + PASSPHRASE_72[1:] + " and a tail")),
                await bounded(status_for(url, PASSPHRASE_72 + " and a tail")),
                await bounded(status_for(url, "x" * 4000)),
                await bounded(status_for(url, PASSPHRASE_72)),
            ]

    assert asyncio.run(main()) == [(401, "Basic"), (200, ""), (401, "Basic"), (200, "")]
