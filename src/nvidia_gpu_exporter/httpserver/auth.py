"""HTTP basic auth against bcrypt hashes, cached so a scrape does not pay ~80 ms of bcrypt every time.

Built to hold under a flood of wrong passwords (docs/security.md, "Basic auth"):

- only successes are cached, a few per user, keyed by a digest of (user, hash, password): wrong passwords,
  however many, cannot evict a working credential, and the cache is bounded by the configured users;
- bcrypt runs one check at a time on a thread of its own (a blocked read elsewhere cannot starve it), with
  at most :data:`MAX_PENDING_PER_CLIENT` checks waiting per client and :data:`MAX_PENDING` in all; beyond
  them a request is answered "busy" at once instead of queueing behind the flood;
- an unknown user is checked against one fixed fake hash (cost 10), as exporter-toolkit does, so a name
  that does not exist costs what a cost-10 user's wrong password costs; a known user costs its own hash and
  nothing more, so a correct login is never made slower by another user's costlier hash.

Nothing secret is logged.

Passwords longer than 72 bytes: bcrypt only ever reads the first 72 bytes of a password, and exporter-toolkit's
Go bcrypt (``CompareHashAndPassword``) compares just those, so the Go exporter accepts a longer password whose
first 72 bytes match (hashes that tools such as ``htpasswd`` wrote for it hold only those bytes). Python's
bcrypt 4.x does the same, while 5.x raises instead. The password is cut to its first 72 bytes here, before
bcrypt sees it, so every bcrypt version answers as the Go exporter does: bytes past the 72nd never count.

A hash that is not a well-formed bcrypt hash matches no password (Go's bcrypt refuses it too); it is
checked here rather than by bcrypt, whose 4.0 releases panic on a short salt instead of raising.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from types import ModuleType

from nvidia_gpu_exporter.httpserver.bcrypthash import well_formed

log = logging.getLogger(__name__)

SUCCESSES_PER_USER = 4  # cached working passwords per user (a rotation may briefly have two in use)
MAX_PENDING_PER_CLIENT = 2  # uncached checks one client (remote address) may have waiting or running
MAX_PENDING = 64  # and all clients together
_BCRYPT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bcrypt")
BCRYPT_MAX_PASSWORD_BYTES = 72  # all that bcrypt reads of a password
# What an unknown user is checked against: a real cost-10 bcrypt hash, of FAKE_PASSWORD. Knowing that password
# gets no one in (an unknown user is refused whatever bcrypt says); it lets tests show exactly that.
FAKE_PASSWORD = "fake password: no user has it"
FAKE_HASH = b"$2b$10$ACL8ykhPg4FUD2hSdDugCeJo.iArpF.l96On3q0xPUg/wdrttV0xu"


def parse_basic_authorization(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` from an ``Authorization: Basic ...`` header, or ``None``."""
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except ValueError:  # binascii.Error, UnicodeDecodeError, and text outside ASCII that base64 refuses
        return None
    user, separator, password = decoded.partition(":")
    if not separator:
        return None
    return user, password


def _bcrypt() -> ModuleType:
    """The bcrypt bindings, loaded once a user is configured: an exporter without users never maps them."""
    import bcrypt  # noqa: PLC0415 - only basic_auth_users needs it (issue 16: memory per configuration)

    return bcrypt


def _checkpw(password: bytes, hashed: bytes) -> bool:
    """bcrypt's verdict on the password's first 72 bytes, as Go's bcrypt gives it, whatever bcrypt's version."""
    bcrypt = _bcrypt()
    if not well_formed(hashed):
        bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], FAKE_HASH)  # as slow as an unknown user
        return False
    try:
        return bool(bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed))
    except ValueError:  # anything else this bcrypt refuses in a hash
        return False


class Verdict(Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    BUSY = "busy"  # too many checks waiting: answered at once, without bcrypt (HTTP 429)


class BasicAuthenticator:
    """Verifies credentials against ``basic_auth_users``; safe to share between requests on one loop.

    ``previous`` (the authenticator a reload replaces) hands over the cached successes of users whose
    hash did not change.
    """

    def __init__(self, users: Mapping[str, str], *, previous: BasicAuthenticator | None = None) -> None:
        self.users = {user: hashed.encode("utf-8") for user, hashed in users.items()}
        if self.users:
            _bcrypt()  # at startup, not at the first login
        for user, hashed_bytes in self.users.items():
            if not well_formed(hashed_bytes):
                log.warning(
                    "basic_auth_users: not a well-formed bcrypt hash, so this user can never log in",
                    extra={"user": user},
                )
        self._successes: dict[str, OrderedDict[bytes, None]] = {}
        if previous is not None:
            for user, digests in previous._successes.items():
                if previous.users.get(user) == self.users.get(user):
                    self._successes[user] = OrderedDict(digests)
        self._pending: dict[str, int] = {}
        self._pending_total = 0
        self.bcrypt_checks = 0  # how many times bcrypt really ran, for tests and benchmarks

    def _key(self, user: str, hashed: bytes, password: str) -> bytes:
        import hashlib  # noqa: PLC0415 - with basic_auth_users only: it maps OpenSSL's libcrypto (issue 16)

        material = b"\x00".join((user.encode("utf-8"), hashed, password.encode("utf-8", "surrogateescape")))
        return hashlib.sha256(material).digest()

    async def verify(self, user: str, password: str, client: str = "") -> bool:
        return await self.check(user, password, client) is Verdict.ALLOWED

    async def check(self, user: str, password: str, client: str = "") -> Verdict:
        """The verdict on one request's credentials; ``client`` (its remote address) bounds its queue."""
        known = user in self.users
        hashed = self.users.get(user, FAKE_HASH)
        key = self._key(user, hashed, password)
        successes = self._successes.get(user)
        if known and successes is not None and key in successes:
            successes.move_to_end(key)
            return Verdict.ALLOWED
        if self._pending.get(client, 0) >= MAX_PENDING_PER_CLIENT or self._pending_total >= MAX_PENDING:
            return Verdict.BUSY
        self._pending[client] = self._pending.get(client, 0) + 1
        self._pending_total += 1
        try:
            matched = await self._bcrypt(password, hashed)
        finally:
            self._pending_total -= 1
            self._pending[client] -= 1
            if not self._pending[client]:
                del self._pending[client]
        if not (matched and known):
            return Verdict.DENIED
        cached = self._successes.setdefault(user, OrderedDict())
        cached[key] = None
        while len(cached) > SUCCESSES_PER_USER:
            cached.popitem(last=False)
        return Verdict.ALLOWED

    async def _bcrypt(self, password: str, hashed: bytes) -> bool:
        """bcrypt's verdict, on the bcrypt thread (one check at a time)."""
        self.bcrypt_checks += 1
        secret = password.encode("utf-8", "surrogateescape")
        return await asyncio.get_running_loop().run_in_executor(_BCRYPT_THREAD, _checkpw, secret, hashed)
