"""Plain-text answers, errors and redirects, the way Go's net/http writes them (``text/plain; charset=utf-8``,
``http.Error``, ``http.Redirect``)."""

from __future__ import annotations

from collections.abc import Mapping

from nvidia_gpu_exporter.httpserver.http import Response


def plain_text(text: str, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, text=text, content_type="text/plain", charset="utf-8", headers=headers)


def go_error(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    """Go's ``http.Error``: the message and a newline, plain text, with ``X-Content-Type-Options: nosniff``."""
    return plain_text(message + "\n", status, {**(headers or {}), "X-Content-Type-Options": "nosniff"})


_HTML_ESCAPES = str.maketrans({"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;"})


def go_redirect(method: str, location: str, status: int = 307, reason: str = "Temporary Redirect") -> Response:
    """Go's ``http.Redirect``: a GET gets a short HTML body naming the target, a HEAD its type only, others
    neither."""
    headers = {"Location": location}
    if method not in ("GET", "HEAD"):
        return Response(status, headers=headers)
    body = f'<a href="{location.translate(_HTML_ESCAPES)}">{reason}</a>.\n\n' if method == "GET" else ""
    return Response(status, text=body, content_type="text/html", charset="utf-8", headers=headers)
