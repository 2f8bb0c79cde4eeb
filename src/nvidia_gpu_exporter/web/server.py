"""The HTTP server: routes (metrics, health, readiness, landing page, opt-in profiling and attribution),
Go-style error pages, listening sockets and the HTTP/1.1 connections (web/protocol.py) with their deadlines."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from nvidia_gpu_exporter.exposition.selfmetrics import ConnectionStats
from nvidia_gpu_exporter.web.connections import Connections, fit_to_fd_limit, open_file_limit
from nvidia_gpu_exporter.web.http import App, Handler, MethodNotAllowed, NotFound, Request, Response
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from nvidia_gpu_exporter.web.protocol import HttpProtocol, OpenConnections
from nvidia_gpu_exporter.web.responses import plain_text
from nvidia_gpu_exporter.web.routes import (
    ATTRIBUTION_PATH,
    DCGM_HEALTH_PATH,
    HEALTH_PATH,
    LANDING_PATH,
    PPROF_PREFIX,
    PROBE_PATH,
    READY_PATH,
    VIEW_JSON_PATH,
    XIDS_PATH,
)
from nvidia_gpu_exporter.web.security import Security
from nvidia_gpu_exporter.web.settings import WebSettings
from nvidia_gpu_exporter.web.timeouts import serve_with_deadlines
from nvidia_gpu_exporter.web.xids import xids_handler

if TYPE_CHECKING:
    from nvidia_gpu_exporter.web.view import LiveView

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 5.0


async def go_style_errors(request: Request, handler: Handler) -> Response:
    """Unknown paths and wrong methods answer like Go's ServeMux, in plain text."""
    try:
        return await handler(request)
    except NotFound:
        return plain_text("404 page not found\n", 404)
    except MethodNotAllowed as error:
        return plain_text("Method Not Allowed\n", 405, {"Allow": ", ".join(error.allowed)})


def build_app(
    endpoint: MetricsEndpoint,
    settings: WebSettings,
    security: Security | None = None,
    probe: Handler | None = None,
) -> App:
    """Every route; ``probe`` is fleet mode's ``/probe`` handler (web/probe.py, imported only in fleet mode)."""
    app = App(middlewares=[go_style_errors])
    if security is not None:
        security.install(app)
    views: list[LiveView] = []

    def live_view() -> LiveView:
        """The live view, built at its first request: web/view.py and web/landing.py are imported then, not by
        every start (issue 16: a Prometheus-only exporter never loads them)."""
        if not views:
            from nvidia_gpu_exporter.web.landing import landing_page  # noqa: PLC0415 - at the first page request
            from nvidia_gpu_exporter.web.view import LiveView  # noqa: PLC0415

            budget = endpoint.answer_within(None)
            views.append(LiveView(endpoint.collector, budget, lambda document: landing_page(settings, document)))
        return views[0]

    async def landing(request: Request) -> Response:
        """The live view, rendered from the latest collection (a HEAD collects and builds nothing)."""
        view = live_view()
        if request.method == "HEAD":
            from nvidia_gpu_exporter.web.landing import landing_page  # noqa: PLC0415 - loaded by live_view()

            text = view.cached_page() or landing_page(settings)
        else:
            text = await view.page()
        return Response(text=text, content_type="text/html", charset="utf-8")

    async def view_json(_: Request) -> Response:
        return Response(
            body=await live_view().json_bytes(),
            content_type="application/json",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    async def healthy(_: Request) -> Response:
        return plain_text("Nvidia GPU Exporter is Healthy.\n")

    async def ready(_: Request) -> Response:
        return plain_text("Nvidia GPU Exporter is Ready.\n")

    async def dcgm_health(_: Request) -> Response:
        """dcgm-exporter's answer: 200 ``OK`` while the process serves (it no longer answers 503 ``KO``)."""
        return plain_text("OK", headers={"X-Content-Type-Options": "nosniff"})

    app.add_get(LANDING_PATH, landing)
    app.add_get(settings.telemetry_path, endpoint.handle)
    app.add_get(HEALTH_PATH, healthy)
    app.add_get(READY_PATH, ready)
    app.add_get(XIDS_PATH, xids_handler(endpoint.collector))
    app.add_get(VIEW_JSON_PATH, view_json)
    if settings.dcgm_health:
        app.add_get(DCGM_HEALTH_PATH, dcgm_health)
    if probe is not None:
        app.add_get(PROBE_PATH, probe)
    if settings.enable_pprof:
        from nvidia_gpu_exporter.web.pprof import add_profiling_routes  # noqa: PLC0415 - only loaded when asked for

        add_profiling_routes(app, PPROF_PREFIX)
    attributor = endpoint.collector.attributor
    if attributor is not None:  # only with Kubernetes attribution on: GET /-/attribution explains it
        from nvidia_gpu_exporter.web.attribution import attribution_handler  # noqa: PLC0415 - opt-in feature

        budget = endpoint.answer_within(None)
        app.add_get(ATTRIBUTION_PATH, attribution_handler(endpoint.collector, attributor.settings, budget))
    return app


class ListenError(OSError):
    """A listen address cannot be parsed or bound."""


def _split_host_port(address: str) -> tuple[str, int]:
    host, separator, port_text = address.rpartition(":")
    if not separator:
        raise ListenError(f"listen tcp {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ListenError(f"listen tcp {address}: too many colons in address")
    try:
        port = int(port_text) if port_text.isdigit() else socket.getservbyname(port_text, "tcp")
    except OSError as error:
        raise ListenError(f"listen tcp {address}: unknown port {port_text!r}") from error
    if not 0 <= port <= 65535:
        raise ListenError(f"listen tcp {address}: invalid port {port}")
    return host, port


def bind_socket(address: str, network: str = "tcp") -> socket.socket:
    """A listening socket for a Go-style ``host:port`` address; an empty host means every interface."""
    if network not in ("tcp", "tcp4", "tcp6"):
        raise ListenError(f"listen {network} {address}: unknown network {network}")
    host, port = _split_host_port(address)
    families = {"tcp": socket.AF_UNSPEC, "tcp4": socket.AF_INET, "tcp6": socket.AF_INET6}
    if not host:
        if network == "tcp4" or (network == "tcp" and not socket.has_dualstack_ipv6()):
            return socket.create_server(("0.0.0.0", port), family=socket.AF_INET, reuse_port=False)  # noqa: S104
        return socket.create_server(
            ("::", port), family=socket.AF_INET6, dualstack_ipv6=network == "tcp", reuse_port=False
        )
    try:
        # An ASCII host goes as bytes: a str would be encoded with the idna codec, which loads unicodedata.
        name = host.encode("ascii") if host.isascii() else host
        infos = socket.getaddrinfo(name, port, families[network], socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except OSError as error:
        raise ListenError(f"listen {network} {address}: {error}") from error
    last_error: OSError | None = None
    for family, _, _, _, sockaddr in infos:
        try:
            return socket.create_server(sockaddr[:2], family=family)
        except OSError as error:
            last_error = error
    raise ListenError(f"listen {network} {address}: {last_error}")


def bound_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class WebServer:
    """The listening servers, their connections (web/protocol.py, each wrapped in web/timeouts.py's deadlines) and
    the web-config watcher. :meth:`stop` stops listening, closes idle keep-alive connections and lets requests in
    flight finish within :data:`SHUTDOWN_GRACE_SECONDS`.
    """

    def __init__(
        self,
        app: App,
        settings: WebSettings,
        security: Security | None = None,
        connection_stats: ConnectionStats | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.security = security or Security()
        self._watcher: asyncio.Task[None] | None = None
        limit = fit_to_fd_limit(settings.max_connections, open_file_limit())
        self.connections = Connections(limit, connection_stats or ConnectionStats())
        self.open = OpenConnections()
        self.addresses: list[str] = []
        self._listeners: list[asyncio.Server] = []

    def _protocol(self, finished: Callable[[int], None]) -> HttpProtocol:
        return HttpProtocol(
            self.app, idle_timeout=self.settings.idle_timeout_seconds, connections=self.open, finished=finished
        )

    async def start(self, sockets: Sequence[socket.socket]) -> None:
        for sock in sockets:
            listener = await serve_with_deadlines(
                self._protocol,
                sock,
                header_timeout=self.settings.header_timeout_seconds,
                write_timeout=self.settings.write_timeout_seconds,
                ssl_context=self.security.ssl_context,
                connections=self.connections,
            )
            self._listeners.append(listener)
            address = bound_address(sock)
            self.addresses.append(address)
            log.info("Listening on", extra={"address": address, "tls": self.security.tls_enabled})
        if self.security.path:
            self._watcher = asyncio.create_task(self.security.watch(), name="web-config-watcher")

    async def stop(self) -> None:
        """Stop listening at once, then shut down gracefully (in-flight requests get the grace period)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.wait({self._watcher})
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        await self.open.shutdown(SHUTDOWN_GRACE_SECONDS)
