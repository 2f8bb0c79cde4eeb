"""``rate_limit`` per client and after authentication (docs/security.md, "Rate limit").

One global bucket checked before authentication let four unauthenticated clients make the authenticated
Prometheus get 429 on every scrape. Clients are told apart by address: the tests bind 127.0.0.1 and
127.0.0.2, both loopback.
"""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp
import bcrypt

from async_helpers import WAIT_SECONDS, run
from hostile.web_hostile import serving_hello
from nvidia_gpu_exporter.httpserver.security import Security

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
ONE_PER_HOUR = "rate_limit:\n  interval: 1h\n  burst: 1\n"


def security_of(tmp_path: Path, config: str) -> Security:
    path = tmp_path / "web.yml"
    path.write_text(config)
    return Security.from_file(str(path))


async def status(url: str, source: str, user: str = "", password: str = "") -> int:
    headers = {}
    if user:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS)) as session,
        session.get(url, headers=headers) as response,
    ):
        return response.status


def test_unauthenticated_clients_cannot_spend_an_authenticated_clients_tokens(tmp_path: Path) -> None:
    async def main() -> tuple[list[int], list[int]]:
        async with serving_hello(
            security_of(tmp_path, f"basic_auth_users:\n  prometheus: {HASH}\n" + ONE_PER_HOUR)
        ) as url:
            strangers = [await status(url, "127.0.0.2") for _ in range(4)]
            strangers.append(await status(url, "127.0.0.2", "prometheus", "guess"))
            scrapes = [await status(url, "127.0.0.1", "prometheus", "secret") for _ in range(2)]
            return strangers, scrapes

    strangers, scrapes = run(main)
    assert strangers == [401] * 5
    assert scrapes == [200, 429]  # its own bucket: one an hour, burst 1


def test_without_auth_each_client_address_has_its_own_bucket(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with serving_hello(security_of(tmp_path, ONE_PER_HOUR)) as url:
            return [
                await status(url, "127.0.0.2"),
                await status(url, "127.0.0.2"),
                await status(url, "127.0.0.1"),
            ]

    assert run(main) == [200, 429, 200]
