"""The exporter's routes (metrics, health, readiness, landing page, XIDs, opt-in profiling, attribution and fleet
probes) on the GPU-agnostic server of :mod:`nvidia_gpu_exporter.httpserver`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvidia_gpu_exporter.httpserver.http import App, Handler, Request, Response
from nvidia_gpu_exporter.httpserver.responses import plain_text
from nvidia_gpu_exporter.httpserver.security import Security
from nvidia_gpu_exporter.httpserver.server import HttpServer, ServerLimits, go_style_errors
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats
from nvidia_gpu_exporter.web.health import health_handler
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from nvidia_gpu_exporter.web.readiness import Readiness, ready_handler
from nvidia_gpu_exporter.web.routes import (
    ATTRIBUTION_PATH,
    DCGM_HEALTH_PATH,
    HEALTH_PATH,
    LANDING_PATH,
    PPROF_PREFIX,
    PROBE_PATH,
    READY_PATH,
    VERDICTS_PATH,
    VIEW_JSON_PATH,
    XIDS_PATH,
)
from nvidia_gpu_exporter.web.settings import WebSettings
from nvidia_gpu_exporter.web.xids import xids_handler

if TYPE_CHECKING:
    from nvidia_gpu_exporter.web.view import LiveView


def build_app(
    endpoint: MetricsEndpoint,
    settings: WebSettings,
    security: Security | None = None,
    probe: Handler | None = None,
    readiness: Readiness | None = None,
) -> App:
    """Every route; ``probe`` is fleet mode's ``/probe`` handler (web/probe.py, imported only in fleet mode);
    ``readiness`` what ``/-/ready`` waits for (``--web.ready.*``; ``None``: always 200, as the Go exporter)."""
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
        # A byte that is not UTF-8 in a GPU's text shows as U+FFFD; charset spelled as exporter-toolkit's page has it.
        return Response(body=text.encode("utf-8", "replace"), content_type="text/html", charset="UTF-8")

    async def view_json(_: Request) -> Response:
        return Response(
            body=await live_view().json_bytes(),
            content_type="application/json",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    async def healthy(_: Request) -> Response:
        return plain_text("Nvidia GPU Exporter is Healthy.\n")

    async def dcgm_health(_: Request) -> Response:
        """dcgm-exporter's answer: 200 ``OK`` while the process serves (it no longer answers 503 ``KO``); with its
        --health-require-gpus, 503 once a successful collection saw no GPU, so a liveness probe restarts it."""
        headers = {"X-Content-Type-Options": "nosniff", "X-Registry-Available": "true"}
        collector = endpoint.collector
        seen_none = collector.latest.last_success_at is not None and collector.last_success_gpus == 0
        if settings.dcgm_health_require_gpus and seen_none:
            return plain_text("no GPU collector registered", 503, {**headers, "X-GPU-Collectors": "0"})
        return plain_text("OK", headers=headers)

    app.add_get(LANDING_PATH, landing)
    app.add_get(settings.telemetry_path, endpoint.handle)
    app.add_get(HEALTH_PATH, healthy)
    app.add_get(READY_PATH, ready_handler(endpoint.collector, readiness, endpoint.answer_within(None)))
    app.add_get(XIDS_PATH, xids_handler(endpoint.collector))
    app.add_get(VERDICTS_PATH, health_handler(endpoint.collector))
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


class WebServer(HttpServer):
    """The exporter's server: :class:`~nvidia_gpu_exporter.httpserver.server.HttpServer` with the bounds of the
    ``--web.*`` flags."""

    def __init__(
        self,
        app: App,
        settings: WebSettings,
        security: Security | None = None,
        connection_stats: ConnectionStats | None = None,
    ) -> None:
        limits = ServerLimits(
            idle_timeout_seconds=settings.idle_timeout_seconds,
            header_timeout_seconds=settings.header_timeout_seconds,
            write_timeout_seconds=settings.write_timeout_seconds,
            max_connections=settings.max_connections,
        )
        super().__init__(app, limits, security, connection_stats)
        self.settings = settings
