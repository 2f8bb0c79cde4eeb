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
            if attempt % 20 == 0:  # unknown users cost the cost-10 fake hash: a few show they evict nothing either
                assert not await authenticator.verify(f"user-{attempt}", "guess")
        flooded = authenticator.bcrypt_checks
        assert await authenticator.verify("prometheus", "prometheus-password")
        return flooded - before, authenticator.bcrypt_checks - flooded

    flood_checks, after = run(main)
    assert flood_checks == 300 + 15  # wrong passwords are never cached, so they cannot push anything out
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


def spy_on_bcrypt(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The hashes bcrypt is run against, in order."""
    checked: list[bytes] = []
    real = auth._checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(auth, "_checkpw", spy)
    return checked


@pytest.mark.parametrize(
    ("password", "allowed"),
    [
        pytest.param("prometheus-password", True, id="a-correct-login"),
        pytest.param("wrong", False, id="a-wrong-password"),
    ],
)
def test_a_known_user_costs_its_own_hash_only(monkeypatch: pytest.MonkeyPatch, password: str, allowed: bool) -> None:
    """exporter-toolkit's timing: no padding to the costliest hash in the file (a cost-18 user there made
    every first login of a cost-10 user take 60 s), and no other hash checked or measured on the way."""
    checked = spy_on_bcrypt(monkeypatch)
    authenticator = BasicAuthenticator({"fast": FAST, "slower": SLOWER})
    assert run(lambda: authenticator.verify("fast", password)) is allowed
    assert checked == [FAST.encode()]


@pytest.mark.parametrize(
    "password",
    [
        pytest.param(auth.FAKE_PASSWORD, id="the-fake-hash-s-own-password"),
        pytest.param("other-password", id="another-user-s-password"),
    ],
)
def test_basic_auth_with_fakepassword(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    """handler_test.go's TestBasicAuthWithFakepassword: an unknown user is checked against one fixed fake
    hash, whatever the file lists, and refused even with the password that hash was made from; twice, so a
    cached verdict cannot let it in either."""
    checked = spy_on_bcrypt(monkeypatch)
    authenticator = BasicAuthenticator({"fast": FAST, "slower": SLOWER})
    assert [run(lambda: authenticator.verify("fakeuser", password)) for _ in range(2)] == [False, False]
    assert checked == [auth.FAKE_HASH] * 2


def test_a_reload_keeps_the_cached_credentials_of_unchanged_users() -> None:
    first = BasicAuthenticator({"prometheus": FAST, "other": SLOWER})
    assert run(lambda: first.verify("prometheus", "prometheus-password"))
    assert run(lambda: first.verify("other", "other-password"))
    changed = bcrypt.hashpw(b"new", bcrypt.gensalt(4)).decode()
    second = BasicAuthenticator({"prometheus": FAST, "other": changed}, previous=first)
    assert run(lambda: second.verify("prometheus", "prometheus-password"))
    assert not run(lambda: second.verify("other", "other-password"))  # a changed hash drops its cache
    assert second.bcrypt_checks == 1
