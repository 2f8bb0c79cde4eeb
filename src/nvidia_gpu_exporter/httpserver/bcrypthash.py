"""What a well-formed bcrypt hash looks like: read by the web config's check of ``basic_auth_users`` at startup
and by :mod:`.auth` at each login, apart from ``auth``'s asyncio so that reading the config imports none
(``preflight``: ``ssl`` is kept out before asyncio loads; issue 16)."""

from __future__ import annotations

import re

# $2a$/$2b$/$2y$, a cost from 04 to 31, then 22 characters of salt and 31 of digest in bcrypt's base64 alphabet.
_HASH_SHAPE = re.compile(rb"\$2[aby]\$(?:0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def well_formed(hashed: bytes) -> bool:
    return _HASH_SHAPE.fullmatch(hashed) is not None
