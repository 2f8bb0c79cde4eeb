"""The metrics route: concurrency limit, scrape budget, render cache, content negotiation, gzip.

It renders each published snapshot once and serves the cached bytes to every scraper of it; only the small
self-metric families are rendered per request. A snapshot's body is compressed on the first scrape that asks
for gzip, once, and reused by the later ones (docs/architecture.md, "Gzip on demand"). Excess concurrent scrapes
are refused at once with 503 instead of queueing behind a slow nvidia-smi.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from nvidia_gpu_exporter._go.strconv import parse_float
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.exposition.health import collection_text
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.openmetrics import OPENMETRICS_EOF, to_openmetrics
from nvidia_gpu_exporter.exposition.protobuf import to_protobuf
from nvidia_gpu_exporter.exposition.selfmetrics import HandlerStats, SelfMetrics, build_info_values
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError, encode, signed_zeros
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.httpserver.responses import go_error
from nvidia_gpu_exporter.model.snapshot import Snapshot
from nvidia_gpu_exporter.support import buildinfo
from nvidia_gpu_exporter.web.negotiation import negotiate
from nvidia_gpu_exporter.web.payload import DeflatedBlock, PartDeflater, deflate_block
from nvidia_gpu_exporter.web.settings import WebSettings

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
MAX_SCRAPE_TIMEOUT_SECONDS = 86400.0
WRITE_MARGIN_SECONDS = 0.5  # kept free under --web.write-timeout to render and send the answer
# A real node's snapshot has a few GPUs and at most some hundreds of processes. One with more rows (output
# up to --collect.max-output-bytes can hold thousands) is rendered and compressed in a thread, so that the
# event loop, and /-/healthy with it, keeps answering meanwhile.
OFF_LOOP_RENDER_ROWS = 256


def scrape_budget(header_value: str | None, offset_seconds: float) -> float | None:
    """Seconds a synchronous scrape may wait, from Prometheus' scrape-timeout header; ``None`` = no bound.

    A missing, unparsable, non-positive, NaN or absurd (> 1 day) header is ignored, as is a budget that
    the offset would make non-positive: a bad header never makes a scrape stricter than no header.
    """
    if header_value is None:
        return None
    value = parse_float(header_value.strip())
    if value is None:
        return None
    if math.isnan(value) or value <= 0 or value > MAX_SCRAPE_TIMEOUT_SECONDS:
        return None
    budget = value - offset_seconds
    return budget if budget > 0 else None


def snapshot_rows(snapshot: Snapshot) -> int:
    """The GPU and process rows a snapshot holds: what its rendering costs grows with."""
    readings = snapshot.attempt.readings if snapshot.attempt is not None else None
    if readings is None:
        return 0
    processes = len(readings.processes.rows) if readings.processes is not None else 0
    return len(readings.gpus.rows) + processes


def accepts_gzip(header_value: str | None) -> bool:
    """True when ``Accept-Encoding`` lists ``gzip``, in that case, with a non-zero quality: what the Go client's
    negotiation accepts (not ``GZIP``, not ``*``)."""
    if not header_value:
        return False
    for part in header_value.split(","):
        token, _, params = part.partition(";")
        if token.strip() != "gzip":
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


class _Body:
    """One format's rendering of a snapshot's ``nvidia_smi_*`` families, and its gzip form once a scrape asked for
    gzip: made by the first such scrape (in a thread when the snapshot is large, shared by the scrapes that ask
    meanwhile), reused by the rest."""

    __slots__ = ("_deflating", "deflated", "off_loop", "text")

    def __init__(self, text: bytes, *, off_loop: bool) -> None:
        self.text = text
        self.off_loop = off_loop
        self.deflated: DeflatedBlock | None = None
        self._deflating: asyncio.Future[DeflatedBlock] | None = None

    async def gzip(self) -> DeflatedBlock:
        if self.deflated is not None:
            return self.deflated
        if not self.off_loop:
            self.deflated = deflate_block(self.text)
            return self.deflated
        deflating = self._deflating
        if deflating is None:
            deflating = asyncio.ensure_future(asyncio.to_thread(deflate_block, self.text))
            self._deflating = deflating
        try:
            deflated = await asyncio.shield(deflating)  # a scrape that gives up leaves it to the others
        except Exception:
            if self._deflating is deflating:
                self._deflating = None  # the next scrape tries again
            raise
        self.deflated = deflated
        self._deflating = None
        return deflated


@dataclass(slots=True)
class _Rendered:
    """A snapshot's ``nvidia_smi_*`` body (and its OpenMetrics and protobuf forms, each made on the first scrape that
    asks for it), or the error that makes the whole scrape fail."""

    key: tuple[object, ...]
    body: _Body | None
    error: str | None
    openmetrics: _Body | None = None
    protobuf: _Body | None = None
    protobuf_making: asyncio.Future[bytes] | None = None  # a large snapshot's, in a thread

    def openmetrics_of(self, body: _Body) -> _Body:
        if self.openmetrics is None:
            self.openmetrics = _Body(to_openmetrics(body.text), off_loop=body.off_loop)
        return self.openmetrics

    async def protobuf_of(self, render: Callable[[], bytes], *, off_loop: bool) -> _Body:
        """The protobuf form, made by ``render``: a large snapshot's in one thread run, so that the event loop keeps
        answering, shared by the scrapes that ask meanwhile."""
        if self.protobuf is not None:
            return self.protobuf
        if not off_loop:
            self.protobuf = _Body(render(), off_loop=False)
            return self.protobuf
        making = self.protobuf_making
        if making is None:
            making = asyncio.ensure_future(asyncio.to_thread(render))
            self.protobuf_making = making
        try:
            encoded = await asyncio.shield(making)  # a scrape that gives up leaves it to the others
        except Exception:
            if self.protobuf_making is making:
                self.protobuf_making = None  # the next scrape tries again
            raise
        if self.protobuf is None:
            self.protobuf = _Body(encoded, off_loop=True)
        self.protobuf_making = None
        return self.protobuf


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
        self._self_metrics = SelfMetrics(build_info_values(buildinfo.installed()))
        self._rendered: _Rendered | None = None
        self._rendering: tuple[tuple[object, ...], asyncio.Future[_Rendered]] | None = None  # a large one, in a thread
        self._parts: PartDeflater | None = None  # the self-metrics' deflate stream, from the first gzip scrape

    def answer_within(self, budget: float | None) -> float | None:
        """Answer (with health series) before the write timeout would cut the connection."""
        write_timeout = self.settings.write_timeout_seconds
        if write_timeout <= 0:
            return budget
        cap = max(write_timeout - min(WRITE_MARGIN_SECONDS, write_timeout / 2), 0.0)
        return cap if budget is None else min(budget, cap)

    async def _render(self, snapshot: Snapshot) -> _Rendered:
        """The snapshot's body, rendered once: on the loop when small, in one shared thread run when large."""
        key = (
            snapshot.sequence,
            snapshot.attempt is not None,
            snapshot.xids,
            snapshot.xid_occurrences,
            snapshot.gpus_fallen_off,
            snapshot.sxids,
            snapshot.kernel_log,
            snapshot.stuck_children,
        )
        cached = self._rendered
        if cached is not None and cached.key == key:
            return cached
        if snapshot_rows(snapshot) <= OFF_LOOP_RENDER_ROWS:
            rendered = self._render_now(key, snapshot, off_loop=False)
        else:
            pending = self._rendering
            if pending is None or pending[0] != key:  # concurrent scrapes share one render
                pending = (
                    key,
                    asyncio.ensure_future(asyncio.to_thread(self._render_now, key, snapshot, off_loop=True)),
                )
                self._rendering = pending
            try:
                rendered = await asyncio.shield(pending[1])
            finally:
                if self._rendering is pending and pending[1].done():
                    self._rendering = None
        self._rendered = rendered
        return rendered

    def _protobuf_now(self, snapshot: Snapshot) -> bytes:
        """The snapshot's body as protobuf: rendered again with negative zeros signed (the text writes them as 0,
        Go's protobuf keeps their sign), then rewritten. Its text render has succeeded, so this one does too."""
        with signed_zeros():
            text = collection_text(snapshot) + self.exposition.render(snapshot)
        return to_protobuf(encode(text))

    def _render_now(self, key: tuple[object, ...], snapshot: Snapshot, *, off_loop: bool) -> _Rendered:
        try:  # the collection's health first: served whatever the profile (docs/metrics.md)
            text = collection_text(snapshot) + self.exposition.render(snapshot)
        except DuplicateSeriesError as error:
            return _Rendered(key, None, str(error))
        return _Rendered(key, _Body(encode(text), off_loop=off_loop), None)

    async def handle(self, request: Request) -> Response:
        limit = self.settings.max_requests
        if limit > 0 and self.stats.in_flight >= limit:
            log.warning("refused a scrape: concurrent request limit reached", extra={"limit": limit})
            self.stats.count(503)
            return go_error(f"limit of {limit} concurrent requests reached, try again later", 503)
        self.stats.in_flight += 1
        try:
            budget = scrape_budget(request.headers.get(SCRAPE_TIMEOUT_HEADER), self.settings.timeout_offset_seconds)
            snapshot = await self.collector.scrape(self.answer_within(budget))
            rendered = await self._render(snapshot)
            if rendered.body is None:
                self.stats.errors["gathering"] += 1
                self.stats.count(500)
                return go_error(f"An error has occurred while serving metrics:\n\n{rendered.error}", 500)
            negotiated = negotiate(
                request.headers.get("Accept"), openmetrics=self.settings.openmetrics, protobuf=self.settings.protobuf
            )
            body = rendered.body
            if negotiated.openmetrics:
                body = rendered.openmetrics_of(body)
            elif negotiated.protobuf:
                body = await rendered.protobuf_of(
                    functools.partial(self._protobuf_now, snapshot), off_loop=body.off_loop
                )
            deflated = await body.gzip() if accepts_gzip(request.headers.get("Accept-Encoding")) else None
            # the exporter's own nvidia_gpu_exporter_* families (connections, web-config reloads) are always
            # served; process_* and promhttp_* are what dcgm-exporter's --enable-exporter-metrics governs
            before = self._self_metrics.before_nvidia_smi(self.stats).encode("utf-8")
            slow, requests = b"", b""
            if self.settings.exporter_metrics:
                after = self._self_metrics.after_nvidia_smi_parts(self.stats)
                slow, requests = (part.encode("utf-8") for part in after)
            if negotiated.openmetrics:
                before, slow = to_openmetrics(before), to_openmetrics(slow)
                requests = to_openmetrics(requests) + OPENMETRICS_EOF
            elif negotiated.protobuf:
                before, slow, requests = to_protobuf(before), to_protobuf(slow), to_protobuf(requests)
            headers = {"Content-Type": negotiated.content_type}
            parts: tuple[bytes, ...]
            if deflated is None:
                parts = (before, body.text, slow, requests)
            else:
                if self._parts is None:
                    self._parts = PartDeflater()
                form = "openmetrics" if negotiated.openmetrics else "protobuf" if negotiated.protobuf else "text"
                parts = self._parts.gzip_parts(
                    [(f"{form} before", before)], deflated, [(f"{form} after", slow), (f"{form} requests", requests)]
                )
                headers["Content-Encoding"] = "gzip"
            self.stats.count(200)
            return Response(body=parts, headers=headers)
        finally:
            self.stats.in_flight -= 1
