"""A wrong-password flood against the real exporter's basic auth, and what Prometheus sees meanwhile.

Shared by the slow hostile test (tests/hostile/test_auth_flood_exporter.py) and the benchmark
(benchmarks/bench_auth_flood.py): the flood runs in a process of its own from 127.0.0.2, the measuring
client from 127.0.0.1 (both loopback), so neither's event loop slows the other's.
"""

from __future__ import annotations

import asyncio
import base64
import multiprocessing
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import bcrypt

PROMETHEUS, OTHER = ("prometheus", "prometheus-password"), ("grafana-agent", "agent-password")


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def web_config(directory: Path) -> Path:
    """Two users with cost-10 hashes (Prometheus' and another)."""
    lines = ["basic_auth_users:"]
    for user, password in (PROMETHEUS, OTHER):
        lines.append(f"  {user}: {bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()}")
    path = directory / "web.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def timed_get(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    async with session.get(url, headers=headers) as response:
        await response.read()
        return response.status, (time.perf_counter() - started) * 1000


def attack(base: str, clients: int, seconds: float, answers: dict[int, int]) -> None:
    """The flood, in a process of its own so its event loop does not slow the measuring client's; it comes from
    127.0.0.2, another client address than Prometheus' 127.0.0.1 (both loopback)."""

    async def run() -> None:
        deadline = time.monotonic() + seconds
        counted: Counter[int] = Counter()

        async def attacker(number: int) -> None:
            connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
                attempt = 0
                while time.monotonic() < deadline:
                    attempt += 1
                    try:
                        status, _ = await timed_get(
                            session, base + "/metrics", basic("prometheus", f"g{number}-{attempt}")
                        )
                    except (aiohttp.ClientError, asyncio.TimeoutError):
                        status = 0
                    counted[status] += 1

        await asyncio.gather(*(attacker(number) for number in range(clients)))
        answers.update(counted)

    asyncio.run(run())


@dataclass
class FloodResult:
    """What the measuring client saw while the flood ran, and how the flood was answered."""

    scrape_ms: list[float] = field(default_factory=list)  # Prometheus' scrapes, with its cached credential
    healthy_ms: list[float] = field(default_factory=list)
    first_login: list[tuple[int, float]] = field(default_factory=list)  # another user's first, uncached login
    statuses: Counter[int] = field(default_factory=Counter)  # of the scrapes and /-/healthy
    flood_answers: dict[int, int] = field(default_factory=dict)  # status -> count; 0 = no answer in 30 s


async def measure(base: str, seconds: float) -> FloodResult:
    """Once a second while the flood runs: Prometheus' scrape, /-/healthy, and one first login."""
    deadline = time.monotonic() + seconds
    result = FloodResult()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        await asyncio.sleep(1.0)
        while time.monotonic() < deadline - 1:
            status, elapsed = await timed_get(session, base + "/metrics", basic(*PROMETHEUS))
            result.statuses[status] += 1
            result.scrape_ms.append(elapsed)
            status, elapsed = await timed_get(session, base + "/-/healthy", basic(*PROMETHEUS))
            result.statuses[status] += 1
            result.healthy_ms.append(elapsed)
            if not result.first_login:
                result.first_login.append(await timed_get(session, base + "/-/healthy", basic(*OTHER)))
            await asyncio.sleep(1.0)
    return result


def flood(base: str, clients: int, seconds: float) -> FloodResult:
    async def prime() -> int:
        async with aiohttp.ClientSession() as session:
            return (await timed_get(session, base + "/metrics", basic(*PROMETHEUS)))[0]

    assert asyncio.run(prime()) == 200  # Prometheus' credential is cached from now on
    with multiprocessing.Manager() as manager:
        answers = manager.dict()
        attackers = multiprocessing.Process(target=attack, args=(base, clients, seconds, answers))
        attackers.start()
        try:
            result = asyncio.run(measure(base, seconds))
        finally:
            attackers.join(seconds + 60)
            if attackers.is_alive():
                attackers.kill()
        result.flood_answers = dict(answers)
    return result
