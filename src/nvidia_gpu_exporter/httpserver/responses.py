"""Plain-text answers, the way Go's net/http writes them (``text/plain; charset=utf-8``)."""

from __future__ import annotations

from collections.abc import Mapping

from nvidia_gpu_exporter.httpserver.http import Response


def plain_text(text: str, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, text=text, content_type="text/plain", charset="utf-8", headers=headers)
