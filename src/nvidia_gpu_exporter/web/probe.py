"""``GET /probe?target=<name>``: one fleet target's exposition, the Prometheus multi-target pattern (docs/fleet.md).

The route only: it parses the request (one ``target``, no ``module``, the scrape timeout header), asks the
:class:`~nvidia_gpu_exporter.fleet.Fleet` for the named target's collector and exposition, and renders them with
the probe's own ``probe_success`` and ``probe_duration_seconds`` after the ``nvidia_smi_*`` block. The targets
file, the SSH pool and the per-target collectors are ``nvidia_gpu_exporter.fleet``'s.

A ``target`` that is not a configured name is refused (400) before anything is resolved or connected: no
request ever chooses an address.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.exposition.families import PROBE_DURATION, PROBE_SUCCESS
from nvidia_gpu_exporter.exposition.openmetrics import OPENMETRICS_EOF, to_openmetrics
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError, render_family
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.httpserver.responses import plain_text
from nvidia_gpu_exporter.web.metrics import SCRAPE_TIMEOUT_HEADER, scrape_budget
from nvidia_gpu_exporter.web.negotiation import negotiate
from nvidia_gpu_exporter.web.settings import WebSettings

if TYPE_CHECKING:
    from nvidia_gpu_exporter.fleet import Fleet

MAX_QUOTED_TARGET = 64  # an unknown name is quoted at most this long in the answer and the log
MODULE_PARAMETER = "module"
# Refused rather than ignored, so that a scrape job written for the blackbox or SNMP exporter (params: module) fails
# visibly: every setting a module would pick (command, fields, timeout, shell) is per target in the targets file.
NO_MODULES = (
    "/probe has no modules: drop the module parameter; a target's settings (command, fields, timeout) are in "
    "--fleet.targets-file\n"
)


class ProbeEndpoint:
    """The ``/probe`` route: refuse unknown targets, collect within the scrape budget, render."""

    def __init__(self, fleet: Fleet, settings: WebSettings) -> None:
        self.fleet = fleet
        self.settings = settings
        self.in_flight = 0

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        if MODULE_PARAMETER in request.query:
            return plain_text(NO_MODULES, 400)
        names = request.query.getall("target")
        if len(names) != 1 or not names[0]:
            return plain_text("exactly one target parameter is required: /probe?target=<name>\n", 400)
        probed = self.fleet.lookup(names[0])
        if probed is None:
            quoted = go_quote(names[0][:MAX_QUOTED_TARGET])
            return plain_text(f"unknown target {quoted}: a target is a name in --fleet.targets-file\n", 400)
        limit = self.settings.max_requests
        if limit > 0 and self.in_flight >= limit:
            return plain_text(f"limit of {limit} concurrent probes reached, try again later\n", 503)
        self.in_flight += 1
        try:
            budget = scrape_budget(request.headers.get(SCRAPE_TIMEOUT_HEADER), self.settings.timeout_offset_seconds)
            snapshot = await probed.collector.scrape(budget)
        finally:
            self.in_flight -= 1
        try:
            text = probed.exposition_now().render(snapshot)
        except DuplicateSeriesError as error:
            return plain_text(f"An error has occurred while serving metrics:\n\n{error}", 500)
        attempt = snapshot.attempt
        success = PROBE_SUCCESS.family()
        success.add((), 1.0 if attempt is not None and attempt.succeeded else 0.0)
        duration = PROBE_DURATION.family()
        duration.add((), time.perf_counter() - started)
        body = (text + render_family(success) + render_family(duration)).encode("utf-8")
        negotiated = negotiate(request.headers.get("Accept"), openmetrics=self.settings.openmetrics)
        if negotiated.openmetrics:
            body = to_openmetrics(body) + OPENMETRICS_EOF
        return Response(body=body, headers={"Content-Type": negotiated.content_type})
