"""HTTP basic auth against bcrypt hashes, cached so a scrape does not pay ~80 ms of bcrypt every time.

As in Prometheus' exporter-toolkit: results are cached by a digest of (user, hash, password), bcrypt runs
one check at a time off the event loop, and an unknown user is checked against a fixed dummy hash so the
response time does not reveal which users exist. Nothing secret is logged.

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
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping

import bcrypt

log = logging.getLogger(__name__)

CACHE_SIZE = 256
BCRYPT_MAX_PASSWORD_BYTES = 72  # all that bcrypt reads of a password
# $2a$/$2b$/$2y$, a cost from 04 to 31, then 22 characters of salt and 31 of digest in bcrypt's base64 alphabet.
_HASH_SHAPE = re.compile(rb"\$2[aby]\$(?:0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
# A real cost-10 bcrypt hash of a password nobody uses: an unknown user costs as much as a wrong password.
_DUMMY_HASH = b"$2b$10$kYZo6ouNp7/44r.knmFEZu3sM8P4glmlnR5vGILaGYtJMOAcmqb7C"


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


def well_formed(hashed: bytes) -> bool:
    return _HASH_SHAPE.fullmatch(hashed) is not None


def _checkpw(password: bytes, hashed: bytes) -> bool:
    """bcrypt's verdict on the password's first 72 bytes, as Go's bcrypt gives it, whatever bcrypt's version."""
    if not well_formed(hashed):
        bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], _DUMMY_HASH)  # as slow as a wrong password
        return False
    try:
        return bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed)
    except ValueError:  # anything else this bcrypt refuses in a hash
        return False


class BasicAuthenticator:
    """Verifies credentials against ``basic_auth_users``; safe to share between requests on one loop."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = {user: hashed.encode("utf-8") for user, hashed in users.items()}
        for user, hashed_bytes in self.users.items():
            if not well_formed(hashed_bytes):
                log.warning(
                    "basic_auth_users: not a well-formed bcrypt hash, so this user can never log in",
                    extra={"user": user},
                )
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._lock = asyncio.Lock()
        self.bcrypt_checks = 0  # how many times bcrypt really ran, for tests and benchmarks

    def _key(self, user: str, hashed: bytes, password: str) -> bytes:
        material = b"\x00".join((user.encode("utf-8"), hashed, password.encode("utf-8")))
        return hashlib.sha256(material).digest()

    async def verify(self, user: str, password: str) -> bool:
        known = user in self.users
        hashed = self.users.get(user, _DUMMY_HASH)
        key = self._key(user, hashed, password)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached and known
        async with self._lock:  # bcrypt is deliberately slow: one at a time, off the event loop
            cached = self._cache.get(key)
            if cached is None:
                self.bcrypt_checks += 1
                cached = await asyncio.get_running_loop().run_in_executor(
                    None, _checkpw, password.encode("utf-8"), hashed
                )
                self._cache[key] = cached
                if len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        return cached and known
