"""``GET /probe?target=<name>``: one fleet target's exposition, the Prometheus multi-target pattern (docs/fleet.md).

Each target named in ``--fleet.targets-file`` gets the local exporter's own parts: a
:class:`~nvidia_gpu_exporter.collector.Collector` (single-flight, bounded by the target's ``timeout``) over a
:class:`~nvidia_gpu_exporter.backends.fleet.backend.TargetBackend`, and an
:class:`~nvidia_gpu_exporter.exposition.metrics.Exposition` for its fields. So the ``nvidia_smi_*`` block is the
one a local exporter on that host serves for the same nvidia-smi answers, byte for byte; the probe's own
``probe_success`` and ``probe_duration_seconds`` follow it.

A ``target`` that is not a configured name is refused (400) before anything is resolved or connected: no
request ever chooses an address. The file is re-read on SIGHUP and when its mtime, size or inode change
(checked at most once a second, on a probe); a file that fails to parse is logged and the previous
targets stay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends.exec.defaults import DEFAULT_MAX_OUTPUT_BYTES
from nvidia_gpu_exporter.backends.fields import BUILTIN_FIELDS, builtin_mapping
from nvidia_gpu_exporter.backends.fleet.backend import TargetBackend
from nvidia_gpu_exporter.backends.fleet.defaults import DEFAULT_GLOBAL_CONCURRENCY
from nvidia_gpu_exporter.backends.fleet.ssh import SshPool, SshRunner
from nvidia_gpu_exporter.backends.fleet.targets import (
    Target,
    Targets,
    TargetsError,
    file_stamp,
    load_targets,
)
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.exposition.families import PROBE_DURATION, PROBE_SUCCESS
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.openmetrics import OPENMETRICS_EOF, to_openmetrics
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError, render_family
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.httpserver.responses import plain_text
from nvidia_gpu_exporter.model.snapshot import QueryField, StatusFamily
from nvidia_gpu_exporter.web.metrics import SCRAPE_TIMEOUT_HEADER, scrape_budget
from nvidia_gpu_exporter.web.negotiation import negotiate
from nvidia_gpu_exporter.web.settings import WebSettings

log = logging.getLogger(__name__)

RELOAD_CHECK_SECONDS = 1.0
MAX_QUOTED_TARGET = 64  # an unknown name is quoted at most this long in the answer and the log
MODULE_PARAMETER = "module"
# Refused rather than ignored, so that a scrape job written for the blackbox or SNMP exporter (params: module) fails
# visibly: every setting a module would pick (command, fields, timeout, shell) is per target in the targets file.
NO_MODULES = (
    "/probe has no modules: drop the module parameter; a target's settings (command, fields, timeout) are in "
    "--fleet.targets-file\n"
)


def _fallback_fields() -> tuple[QueryField, ...]:
    """What a local exporter renders before its fields are known: the built-in list."""
    mapped = builtin_mapping(list(BUILTIN_FIELDS))
    assert mapped is not None
    return tuple(mapped)


@dataclass(eq=False)
class _Probed:
    """A target's collector and the exposition of its current fields."""

    target: Target
    backend: TargetBackend
    collector: Collector
    exposition: Exposition | None = None

    def exposition_now(self) -> Exposition:
        fields = self.backend.fields or _fallback_fields()
        if self.exposition is None or self.exposition.fields != fields:
            self.exposition = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE)
        return self.exposition


class Fleet:
    """The configured targets, their collectors and the shared SSH pool; reloaded from the targets file."""

    def __init__(
        self,
        path: str,
        targets: Targets | None = None,
        *,
        compute_apps: bool = False,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_concurrent: int = DEFAULT_GLOBAL_CONCURRENCY,
    ) -> None:
        self.path = path
        self.compute_apps = compute_apps
        self.max_output_bytes = max_output_bytes
        self.pool = SshPool(max_concurrent)
        self._probed: dict[str, _Probed] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._stamp = file_stamp(path)
        self._checked_at = time.monotonic()
        self.reloads = 0
        # The file as read at startup (read here when not given); a bad one raises TargetsError.
        self._apply(targets if targets is not None else load_targets(path))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._probed)

    def probed(self, name: str) -> _Probed | None:
        return self._probed.get(name)

    def _apply(self, targets: Targets) -> None:
        old = self._probed
        self._probed = {}
        for name, target in targets.by_name.items():
            kept = old.get(name)
            if kept is not None and kept.target == target:
                self._probed[name] = kept  # unchanged: keep its counters, fields and connection
                continue
            backend = TargetBackend(SshRunner(self.pool, target, self.max_output_bytes), compute_apps=self.compute_apps)
            collector = Collector(backend, timeout_seconds=target.settings.timeout_seconds)
            self._probed[name] = _Probed(target, backend, collector)
        for name, dropped in old.items():
            if self._probed.get(name) is not dropped:
                self._background(dropped.collector.aclose())
        if old:
            self._background(self.pool.retain([probed.target for probed in self._probed.values()]))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Closing what a reload dropped, without holding the reload (or SIGHUP's handler) for it."""
        task = asyncio.ensure_future(work)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def reload(self) -> bool:
        """Re-read the file now; on an error log it and keep the previous targets. True when applied."""
        self._stamp = file_stamp(self.path)
        try:
            targets = load_targets(self.path)
        except TargetsError as error:
            log.error("fleet: targets file reload failed, keeping the previous targets", extra={"err": str(error)})
            return False
        self._apply(targets)
        self.reloads += 1
        log.info("fleet: targets file reloaded", extra={"file": self.path, "targets": len(self._probed)})
        return True

    def reload_if_changed(self) -> None:
        """At most once a second: reload when the file's mtime, size or inode changed."""
        now = time.monotonic()
        if now - self._checked_at < RELOAD_CHECK_SECONDS:
            return
        self._checked_at = now
        if file_stamp(self.path) != self._stamp:
            self.reload()

    async def aclose(self) -> None:
        if self._closing:
            await asyncio.wait(set(self._closing))
        for probed in self._probed.values():
            await probed.collector.aclose()
        await self.pool.aclose()


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
        self.fleet.reload_if_changed()
        probed = self.fleet.probed(names[0])
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
        negotiated = negotiate(request.headers.get("Accept"))
        if negotiated.openmetrics:
            body = to_openmetrics(body) + OPENMETRICS_EOF
        return Response(body=body, headers={"Content-Type": negotiated.content_type})
