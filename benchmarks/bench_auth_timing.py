"""A correct login's cost with a much slower hash in the same users file (docs/security.md, "Basic auth").

exporter-toolkit's users file has a cost-18 hash next to cost-10 ones; when every uncached check was padded
to the slowest hash, the first login of a cost-10 user took as long as a cost-18 check (60 s, against Go's
0.13 s). Now a known user costs its own hash only, and an unknown user the fixed cost-10 fake hash.

The users file (parsed as ``--web.config.file`` is) has a cost-10 user, a cost-12 user and a ``--slow-cost``
user, whose hash is made once at the start (cost 18 takes tens of seconds). Each ``--rounds`` round makes a
new authenticator (a fresh start: nothing cached) and times the first, uncached login of each user and of
an unknown user, next to ``bcrypt.checkpw`` on the same hash alone.

    python benchmarks/bench_auth_timing.py [--slow-cost 18] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import bcrypt

from nvidia_gpu_exporter.httpserver.auth import FAKE_HASH, BasicAuthenticator
from nvidia_gpu_exporter.httpserver.config import parse_web_config


def milliseconds(seconds: list[float]) -> str:
    return f"median {statistics.median(seconds) * 1000:.1f} ms, max {max(seconds) * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow-cost", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    started = time.perf_counter()
    slow = bcrypt.hashpw(b"slow-password", bcrypt.gensalt(options.slow_cost)).decode()
    made = time.perf_counter() - started
    users = {
        "cost10": ("password-10", bcrypt.hashpw(b"password-10", bcrypt.gensalt(10)).decode()),
        "cost12": ("password-12", bcrypt.hashpw(b"password-12", bcrypt.gensalt(12)).decode()),
    }
    text = "basic_auth_users:\n" + "".join(f"  {user}: {hashed}\n" for user, (_, hashed) in users.items())
    config = parse_web_config(text + f"  slow: {slow}\n", "web.yml")
    logins = {user: password for user, (password, _) in users.items()} | {"unknown": "password-10"}
    login_seconds: dict[str, list[float]] = {user: [] for user in logins}
    alone_seconds: dict[str, list[float]] = {user: [] for user in logins}
    hashes = {user: hashed.encode() for user, (_, hashed) in users.items()} | {"unknown": FAKE_HASH}

    async def round_() -> None:
        authenticator = BasicAuthenticator(config.basic_auth_users)
        for user, password in logins.items():
            before = time.perf_counter()
            allowed = await authenticator.verify(user, password)
            login_seconds[user].append(time.perf_counter() - before)
            assert allowed is (user != "unknown")
            before = time.perf_counter()
            bcrypt.checkpw(password.encode(), hashes[user])
            alone_seconds[user].append(time.perf_counter() - before)

    for _ in range(options.rounds):
        asyncio.run(round_())
    print(f"users file: cost 10, cost 12 and cost {options.slow_cost} (made in {made:.1f} s); {options.rounds} rounds")
    for user in logins:
        print(
            f"{user}: first login {milliseconds(login_seconds[user])}; "
            f"bcrypt.checkpw alone {milliseconds(alone_seconds[user])}"
        )


if __name__ == "__main__":
    main()
