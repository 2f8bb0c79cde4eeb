"""Go's ServeMux (1.22 and later) matches a request by the segments of its path as sent, each unescaped on its own:
an escaped slash (``%2F``) is part of a segment, never a separator, so ``/-%2Fhealthy`` is one segment and routes
nowhere, while ``/%6detrics`` is ``/metrics``. The rows are what the Go exporter v1.14.0 (Go 1.27) answered."""

from __future__ import annotations

import pytest

from async_helpers import run
from nvidia_gpu_exporter.httpserver.http import App, NotFound, Redirect, Request, Response, make_request
from nvidia_gpu_exporter.httpserver.protocol import reason

ROUTES = ("/metrics", "/-/healthy", "/-/ready", "/a/b/metrics")


def _app() -> App:
    app = App()
    for path in ROUTES:

        async def answer(request: Request, path: str = path) -> Response:
            return Response(text=path)

        app.add_get(path, answer)
    return app


# (target as sent, the route that answers it, or "404", or "307 <Location>")
ROUTING = [
    ("/metrics", "/metrics"),
    ("/%6detrics", "/metrics"),
    ("/-/healthy", "/-/healthy"),
    ("/-%2Fhealthy", "404"),
    ("/-%2fready", "404"),
    ("/-/%72eady", "/-/ready"),
    ("/a%2Fb/metrics", "404"),
    ("/a/b%2Fmetrics", "404"),
    ("/a/b/metrics", "/a/b/metrics"),
    ("/metrics%2F", "404"),
    ("/%2Fmetrics", "404"),
    ("/a%2F../metrics", "404"),
    ("/x/..%2Fmetrics", "404"),
    ("//a%2Fb", "307 /a%2Fb"),
    ("/a/./b%2Fc/", "307 /a/b%2Fc/"),
    ("/a%252Fb/metrics", "404"),
]


@pytest.mark.parametrize(("target", "expected"), ROUTING, ids=[target for target, _ in ROUTING])
def test_an_escaped_slash_is_part_of_a_segment_as_in_go_serve_mux(target: str, expected: str) -> None:
    async def main() -> str:
        try:
            return (await _app().handle(make_request("GET", target))).text
        except NotFound:
            return "404"
        except Redirect as redirect:
            return f"307 {redirect.location}"

    assert run(main) == expected


@pytest.mark.parametrize(
    ("status", "phrase"), [(307, b"Temporary Redirect"), (308, b"Permanent Redirect"), (301, b"Moved Permanently")]
)
def test_a_redirect_s_status_line_has_go_s_reason_phrase(status: int, phrase: bytes) -> None:
    """Seen from the Go binary: ``HTTP/1.1 307 Temporary Redirect``; here it once read ``307 status code 307``."""
    assert reason(status) == phrase
