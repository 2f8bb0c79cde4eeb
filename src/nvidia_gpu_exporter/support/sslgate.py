"""Keeping ``ssl`` out of an exporter that serves no TLS (issue 16: memory at rest on every GPU node).

``import asyncio`` imports ``ssl`` (``base_events``, ``selector_events``, ``sslproto``: each ``try: import ssl
except ImportError``), which maps OpenSSL's libraries and builds its tables: about 4 MiB of resident memory that
an exporter serving plain HTTP never uses. asyncio works without it (it serves no TLS then), so the console
command (``cli.main``), once it knows the configuration needs no TLS (``preflight.needs_ssl``), calls
:func:`keep_ssl_out` before anything imports asyncio. Any later ``import ssl`` then fails with a message
that says why, instead of loading it: code that may need ``ssl`` on a path without TLS (a web config
reloaded with ``tls_server_config``) asks :func:`ssl_kept_out` first.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

KEPT_OUT = ("ssl", "_ssl")


class _KeepSslOut:
    """A meta path finder that refuses ``ssl`` and ``_ssl`` with a reason."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name in KEPT_OUT:
            raise ModuleNotFoundError(
                f"{name} is kept out of this exporter: its configuration serves no TLS (restart it to serve TLS)",
                name=name,
            )
        return None


_FINDER = _KeepSslOut()


def keep_ssl_out() -> bool:
    """Refuse every later import of ``ssl``; returns whether it is kept out (not when something loaded it already)."""
    if any(name in sys.modules for name in KEPT_OUT):
        return False
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return True


def ssl_kept_out() -> bool:
    """Whether :func:`keep_ssl_out` refuses ``ssl`` in this process."""
    return _FINDER in sys.meta_path
