"""What a well-formed bcrypt hash looks like: read by the web config's check of ``basic_auth_users`` at startup
and by :mod:`.auth` at each login, apart from ``auth``'s asyncio so that reading the config imports none
(``preflight``: ``ssl`` is kept out before asyncio loads; issue 16)."""

from __future__ import annotations

import re

# $2a$/$2b$/$2y$, a cost from 04 to 31, then 22 characters of salt and 31 of digest in bcrypt's base64 alphabet.
_HASH_SHAPE = re.compile(rb"\$2[aby]\$(?:0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def well_formed(hashed: bytes) -> bool:
    return _HASH_SHAPE.fullmatch(hashed) is not None


def go_refusal(hashed: bytes) -> str:
    """What Go's ``bcrypt.Cost`` says of a hash exporter-toolkit refuses at start, in its words (users search for
    them), or ``""`` when Go reads it. Go checks only the length, the ``$2`` prefix and the cost."""
    if len(hashed) < 59:  # Go's minHashSize
        return "crypto/bcrypt: hashedSecret too short to be a bcrypted password"
    if hashed[0:1] != b"$":
        return f"crypto/bcrypt: bcrypt hashes must start with '$', but hashedSecret started with '{chr(hashed[0])}'"
    if hashed[1] > ord("2"):
        return f"crypto/bcrypt: bcrypt algorithm version '{chr(hashed[1])}' requested is newer than current version '2'"
    start = 3 if hashed[2:3] == b"$" else 4
    text = hashed[start : start + 2].decode("latin-1")
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return f'strconv.Atoi: parsing "{text}": invalid syntax'
    if not 4 <= int(text) <= 31:  # Go's MinCost and MaxCost
        return f"crypto/bcrypt: cost {int(text)} is outside allowed range (4,31)"
    return ""
