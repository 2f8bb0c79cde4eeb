"""Plain-text answers, the way Go's net/http writes them (``text/plain; charset=utf-8``)."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web


def plain_text(text: str, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain", charset="utf-8", headers=headers)
