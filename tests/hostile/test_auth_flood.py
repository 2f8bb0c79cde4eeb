"""Basic auth under a flood of wrong passwords (docs/security.md, "Basic auth"): it cannot be starved,
evicted or enumerated.

One global bcrypt lock and a 256-entry cache of every verdict let 300 wrong passwords evict Prometheus'
cached credential, then queue its uncached check behind the flood for 18 s; an unknown user answered in
60 ms where a cost-4 user answered in 2 ms.
"""

from __future__ import annotations

import asyncio

import bcrypt
import pytest

from async_helpers import run
from nvidia_gpu_exporter.httpserver import auth
from nvidia_gpu_exporter.httpserver.auth import MAX_PENDING_PER_CLIENT, BasicAuthenticator, Verdict

FAST = bcrypt.hashpw(b"prometheus-password", bcrypt.gensalt(4)).decode()
SLOWER = bcrypt.hashpw(b"other-password", bcrypt.gensalt(6)).decode()


def test_a_flood_of_wrong_passwords_cannot_evict_a_working_credential() -> None:
    authenticator = BasicAuthenticator({"prometheus": FAST})

    async def main() -> tuple[int, int]:
        assert await authenticator.verify("prometheus", "prometheus-password")
        before = authenticator.bcrypt_checks
        for attempt in range(300):
            assert not await authenticator.verify("prometheus", f"guess-{attempt}")
            assert not await authenticator.verify(f"user-{attempt}", "guess")
        flooded = authenticator.bcrypt_checks
        assert await authenticator.verify("prometheus", "prometheus-password")
        return flooded - before, authenticator.bcrypt_checks - flooded

    flood_checks, after = run(main)
    assert flood_checks == 600  # wrong passwords are never cached, so they cannot push anything out
    assert after == 0  # the working credential is still cached


def test_one_client_cannot_queue_more_than_a_few_checks_ahead_of_another() -> None:
    authenticator = BasicAuthenticator({"prometheus": FAST})

    async def main() -> tuple[list[Verdict], Verdict, int]:
        flood = [
            asyncio.ensure_future(authenticator.check("prometheus", f"guess-{n}", "10.0.0.66")) for n in range(300)
        ]
        legitimate = asyncio.ensure_future(authenticator.check("prometheus", "prometheus-password", "10.0.0.1"))
        verdict = await legitimate
        checks_until_then = authenticator.bcrypt_checks
        return list(await asyncio.gather(*flood)), verdict, checks_until_then

    flood, verdict, checks_until_then = run(main)
    assert verdict is Verdict.ALLOWED
    assert checks_until_then <= MAX_PENDING_PER_CLIENT + 1
    assert flood.count(Verdict.DENIED) == MAX_PENDING_PER_CLIENT
    assert flood.count(Verdict.BUSY) == 300 - MAX_PENDING_PER_CLIENT


@pytest.mark.parametrize(
    ("user", "password"),
    [
        pytest.param("fast", "prometheus-password", id="a-cost-4-user"),
        pytest.param("fast", "wrong", id="a-cost-4-user-wrong-password"),
        pytest.param("nobody", "anything", id="an-unknown-user"),
    ],
)
def test_every_uncached_check_takes_as_long_as_the_slowest_hash(
    monkeypatch: pytest.MonkeyPatch, user: str, password: str
) -> None:
    """Timing says nothing about which users exist or their hash cost: every check is padded to one floor."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(auth, "_sleep", sleep)
    authenticator = BasicAuthenticator({"fast": FAST, "slower": SLOWER}, floor_seconds=5.0)
    run(lambda: authenticator.verify(user, password))
    (padding,) = slept
    assert 4.5 < padding <= 5.0  # the check itself took well under half a second


def test_an_unknown_user_is_checked_against_the_slowest_configured_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[bytes] = []
    real = auth._checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(auth, "_checkpw", spy)
    authenticator = BasicAuthenticator({"fast": FAST, "slower": SLOWER}, floor_seconds=0.0)
    assert not run(lambda: authenticator.verify("nobody", "other-password"))  # slower's password, wrong user
    assert checked == [SLOWER.encode()]


def test_a_reload_keeps_the_cached_credentials_of_unchanged_users() -> None:
    first = BasicAuthenticator({"prometheus": FAST, "other": SLOWER})
    assert run(lambda: first.verify("prometheus", "prometheus-password"))
    assert run(lambda: first.verify("other", "other-password"))
    changed = bcrypt.hashpw(b"new", bcrypt.gensalt(4)).decode()
    second = BasicAuthenticator({"prometheus": FAST, "other": changed}, previous=first)
    assert run(lambda: second.verify("prometheus", "prometheus-password"))
    assert not run(lambda: second.verify("other", "other-password"))  # a changed hash drops its cache
    assert second.bcrypt_checks == 1
