"""SHA-256 from the interpreter's own implementation, not OpenSSL's: importing ``hashlib`` loads ``_hashlib``,
which maps libcrypto (3.4 MiB of resident memory) into a process that may have no other use for it, such as the
demo backend deriving its stable ids (issue 35). The digests are the same; where the interpreter was built
without its own hashes, ``hashlib``'s serves.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Protocol, cast


class Digest(Protocol):
    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def _constructor() -> Callable[[bytes], Digest]:
    try:  # _sha2 from 3.12 on, _sha256 before
        found = importlib.import_module("_sha2" if sys.version_info >= (3, 12) else "_sha256").sha256
    except (ImportError, AttributeError):
        import hashlib  # noqa: PLC0415 - only where the interpreter has no SHA-256 of its own

        found = hashlib.sha256
    return cast("Callable[[bytes], Digest]", found)


sha256 = _constructor()
