"""The HTTP surface: metrics, health, readiness, the landing page and (opt-in) profiling.

The metrics route renders each published snapshot once and serves the cached bytes (plain or gzip) to
every scraper of it; only the small self-metric families are rendered per request. Excess concurrent
scrapes are refused at once with 503 instead of queueing behind a slow nvidia-smi.
"""

from __future__ import annotations

import asyncio
import html
import logging
import math
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from . import __version__
from .collector import Collector
from .exposition.metrics import Exposition
from .exposition.payload import Block, assemble, assemble_gzip, make_block
from .exposition.selfmetrics import HandlerStats, SelfMetrics, build_info_values
from .exposition.text import CONTENT_TYPE, DuplicateSeriesError
from .snapshot import Snapshot, XidRecord
from .websecurity import Security
from .webtimeouts import DeadlineSockSite

log = logging.getLogger(__name__)

TEXT_PLAIN = "text/plain; charset=utf-8"
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
MAX_SCRAPE_TIMEOUT_SECONDS = 86400.0
HEALTH_PATH = "/-/healthy"
READY_PATH = "/-/ready"
PPROF_PREFIX = "/debug/pprof"
SHUTDOWN_GRACE_SECONDS = 5.0
WRITE_MARGIN_SECONDS = 0.5  # kept free under --web.write-timeout to render and send the answer


@dataclass(frozen=True, slots=True)
class WebSettings:
    """The HTTP part of the configuration."""

    listen_addresses: tuple[str, ...] = (":9835",)
    network: str = "tcp"
    telemetry_path: str = "/metrics"
    max_requests: int = 40
    timeout_offset_seconds: float = 0.5
    idle_timeout_seconds: float = 60.0
    header_timeout_seconds: float = 10.0  # request headers must arrive within this (0 = no bound)
    write_timeout_seconds: float = 15.0  # a response must be produced and read within this (0 = no bound)
    enable_pprof: bool = False
    landing_description: str = "Prometheus exporter for Nvidia GPUs, using nvidia-smi."


_GO_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_GO_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")


def parse_go_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)``'s accepted syntax (no ``_`` separators, ASCII digits only)."""
    if _GO_DECIMAL_FLOAT.fullmatch(text):
        return float(text)
    if _GO_HEX_FLOAT.fullmatch(text):
        return float.fromhex(text)
    lowered = text.lower()
    if lowered in ("nan", "+nan", "-nan"):
        return math.nan
    unsigned = lowered.lstrip("+-")
    if unsigned in ("inf", "infinity"):
        return -math.inf if lowered.startswith("-") else math.inf
    return None


def scrape_budget(header_value: str | None, offset_seconds: float) -> float | None:
    """Seconds a synchronous scrape may wait, from Prometheus' scrape-timeout header; ``None`` = no bound.

    A missing, unparsable, non-positive, NaN or absurd (> 1 day) header is ignored, as is a budget that
    the offset would make non-positive: a bad header never makes a scrape stricter than no header.
    """
    if header_value is None:
        return None
    value = parse_go_float(header_value.strip())
    if value is None:
        return None
    if math.isnan(value) or value <= 0 or value > MAX_SCRAPE_TIMEOUT_SECONDS:
        return None
    budget = value - offset_seconds
    return budget if budget > 0 else None


def accepts_gzip(header_value: str | None) -> bool:
    """True when ``Accept-Encoding`` lists gzip with a non-zero quality."""
    if not header_value:
        return False
    for part in header_value.split(","):
        token, _, params = part.partition(";")
        if token.strip().lower() not in ("gzip", "*"):
            continue
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 0.0
        if quality > 0:
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Rendered:
    """A snapshot's ``nvidia_smi_*`` block, or the error that makes the whole scrape fail."""

    key: tuple[int, bool, tuple[XidRecord, ...]]
    block: Block | None
    error: str | None


class MetricsEndpoint:
    """The metrics route: concurrency limit, scrape budget, render cache, gzip."""

    def __init__(
        self,
        collector: Collector,
        exposition: Exposition,
        settings: WebSettings,
        stats: HandlerStats | None = None,
    ) -> None:
        self.collector = collector
        self.exposition = exposition
        self.settings = settings
        self.stats = stats or HandlerStats()
        self._self_metrics = SelfMetrics(build_info_values())
        self._rendered: _Rendered | None = None

    def _cap_by_write_timeout(self, budget: float | None) -> float | None:
        """Answer (with health series) before the write timeout would cut the connection."""
        write_timeout = self.settings.write_timeout_seconds
        if write_timeout <= 0:
            return budget
        cap = max(write_timeout - min(WRITE_MARGIN_SECONDS, write_timeout / 2), 0.0)
        return cap if budget is None else min(budget, cap)

    def _render(self, snapshot: Snapshot) -> _Rendered:
        key = (snapshot.sequence, snapshot.attempt is not None, snapshot.xids)
        cached = self._rendered
        if cached is not None and cached.key == key:
            return cached
        try:
            text = self.exposition.render(snapshot)
        except DuplicateSeriesError as error:
            rendered = _Rendered(key, None, str(error))
        else:
            rendered = _Rendered(key, make_block(text.encode("utf-8")), None)
        self._rendered = rendered
        return rendered

    async def handle(self, request: web.Request) -> web.StreamResponse:
        limit = self.settings.max_requests
        if limit > 0 and self.stats.in_flight >= limit:
            log.warning("refused a scrape: concurrent request limit reached", extra={"limit": limit})
            self.stats.count(503)
            return web.Response(
                status=503,
                text=f"limit of {limit} concurrent requests reached, try again later\n",
                content_type="text/plain",
                charset="utf-8",
            )
        self.stats.in_flight += 1
        try:
            budget = scrape_budget(request.headers.get(SCRAPE_TIMEOUT_HEADER), self.settings.timeout_offset_seconds)
            snapshot = await self.collector.scrape(self._cap_by_write_timeout(budget))
            rendered = self._render(snapshot)
            if rendered.block is None:
                self.stats.errors["gathering"] += 1
                self.stats.count(500)
                return web.Response(
                    status=500,
                    text=f"An error has occurred while serving metrics:\n\n{rendered.error}",
                    content_type="text/plain",
                    charset="utf-8",
                )
            before = self._self_metrics.before_nvidia_smi().encode("utf-8")
            after = self._self_metrics.after_nvidia_smi(self.stats).encode("utf-8")
            if accepts_gzip(request.headers.get("Accept-Encoding")):
                body = assemble_gzip(before, rendered.block, after)
                headers = {"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"}
            else:
                body = assemble(before, rendered.block, after)
                headers = {"Content-Type": CONTENT_TYPE}
            self.stats.count(200)
            return web.Response(body=body, headers=headers)
        finally:
            self.stats.in_flight -= 1


def landing_page(settings: WebSettings) -> str:
    """The landing page, in the spirit of exporter-toolkit's."""
    links = [f'<li><a href="{html.escape(settings.telemetry_path)}">Metrics</a></li>']
    links.append(f'<li><a href="{HEALTH_PATH}">Health</a></li>')
    links.append(f'<li><a href="{READY_PATH}">Ready</a></li>')
    if settings.enable_pprof:
        links.append(f'<li><a href="{PPROF_PREFIX}/">Profiling</a></li>')
    profiling = "enabled" if settings.enable_pprof else "disabled"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="UTF-8">\n'
        "<title>Nvidia GPU Exporter</title>\n"
        "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto;padding:0 1em}"
        "header{border-bottom:1px solid #ccc}</style>\n</head>\n<body>\n"
        "<header><h1>Nvidia GPU Exporter</h1></header>\n<main>\n"
        f"<h2>{html.escape(settings.landing_description)}</h2>\n"
        f"<div>Version: {html.escape(__version__)}</div>\n"
        f"<div>Profiling: {profiling}</div>\n"
        f"<ul>\n{''.join(links)}\n</ul>\n</main>\n</body>\n</html>\n"
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def go_style_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and wrong methods answer like Go's ServeMux, in plain text."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.Response(status=404, text="404 page not found\n", content_type="text/plain", charset="utf-8")
    except web.HTTPMethodNotAllowed as error:
        return web.Response(
            status=405,
            text="Method Not Allowed\n",
            content_type="text/plain",
            charset="utf-8",
            headers={"Allow": ", ".join(sorted(error.allowed_methods))},
        )


def build_app(endpoint: MetricsEndpoint, settings: WebSettings, security: Security | None = None) -> web.Application:
    app = web.Application(middlewares=[go_style_errors])
    if security is not None:
        security.install(app)
    page = landing_page(settings)

    async def landing(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", charset="utf-8")

    async def healthy(_: web.Request) -> web.Response:
        return web.Response(text="Nvidia GPU Exporter is Healthy.\n", content_type="text/plain", charset="utf-8")

    async def ready(_: web.Request) -> web.Response:
        return web.Response(text="Nvidia GPU Exporter is Ready.\n", content_type="text/plain", charset="utf-8")

    app.router.add_get("/", landing)
    app.router.add_get(settings.telemetry_path, endpoint.handle)
    app.router.add_get(HEALTH_PATH, healthy)
    app.router.add_get(READY_PATH, ready)
    if settings.enable_pprof:
        from .profiling import add_profiling_routes  # noqa: PLC0415 - only loaded when asked for

        add_profiling_routes(app, PPROF_PREFIX)
    attributor = endpoint.collector.attributor
    if attributor is not None:  # only with Kubernetes attribution on: GET /-/attribution explains it
        from .kubernetes.diagnosis import PATH, attribution_handler  # noqa: PLC0415 - opt-in feature

        budget = endpoint._cap_by_write_timeout(None)
        app.router.add_get(PATH, attribution_handler(endpoint.collector, attributor.settings, budget))
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
        infos = socket.getaddrinfo(host, port, families[network], socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
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
    """The aiohttp runner, its listening sockets and the web-config watcher."""

    def __init__(self, app: web.Application, settings: WebSettings, security: Security | None = None) -> None:
        self.app = app
        self.settings = settings
        self.security = security or Security()
        self._watcher: asyncio.Task[None] | None = None
        self.runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=settings.idle_timeout_seconds,
            shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
            handler_cancellation=True,
        )
        self.addresses: list[str] = []

    async def start(self, sockets: Sequence[socket.socket]) -> None:
        await self.runner.setup()
        for sock in sockets:
            site = DeadlineSockSite(
                self.runner,
                sock,
                header_timeout=self.settings.header_timeout_seconds,
                write_timeout=self.settings.write_timeout_seconds,
                ssl_context=self.security.ssl_context,
            )
            await site.start()
            address = bound_address(sock)
            self.addresses.append(address)
            log.info("Listening on", extra={"address": address, "tls": self.security.tls_enabled})
        if self.security.path:
            self._watcher = asyncio.create_task(self.security.watch(), name="web-config-watcher")

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.wait({self._watcher})
        await self.runner.cleanup()
