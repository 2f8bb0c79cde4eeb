"""Fleet mode's targets (``--fleet.targets-file``): what ``GET /probe?target=<name>`` (web/probe.py) asks for.

Each target named in the targets file gets the local exporter's own parts: a
:class:`~nvidia_gpu_exporter.collector.Collector` (single-flight, bounded by the target's ``timeout``) over a
:class:`~nvidia_gpu_exporter.backends.fleet.backend.TargetBackend`, and an
:class:`~nvidia_gpu_exporter.exposition.metrics.Exposition` for its fields. So the ``nvidia_smi_*`` block a probe
serves is the one a local exporter on that host serves for the same nvidia-smi answers, byte for byte. All targets
share one :class:`~nvidia_gpu_exporter.backends.fleet.ssh.SshPool` (one connection per host, the global limit).

Only a configured name is ever looked up, so no request chooses an address. The file is re-read on SIGHUP
(app.py) and when its mtime, size or inode change (checked at most once a second, when a probe looks a target
up); a file that fails to parse is logged and the previous targets stay. A reload keeps an unchanged target's
collector (its counters, fields and connection) and closes what it dropped (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

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
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.model.snapshot import QueryField, StatusFamily

log = logging.getLogger(__name__)

RELOAD_CHECK_SECONDS = 1.0


def _fallback_fields() -> tuple[QueryField, ...]:
    """What a local exporter renders before its fields are known: the built-in list."""
    mapped = builtin_mapping(list(BUILTIN_FIELDS))
    assert mapped is not None
    return tuple(mapped)


@dataclass(eq=False)
class ProbedTarget:
    """A target's collector and the exposition of its current fields."""

    target: Target
    backend: TargetBackend
    collector: Collector
    exposition: Exposition | None = None

    def exposition_now(self) -> Exposition:
        """Built again only when discovery changed the fields (a driver change), so a probe renders with no rebuild."""
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
        process_usage_limit: int | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_concurrent: int = DEFAULT_GLOBAL_CONCURRENCY,
    ) -> None:
        self.path = path
        self.compute_apps = compute_apps
        # --collect.process-usage-max-processes when --collect.process-usage is on (None: off), as the local collector
        self.process_usage_limit = process_usage_limit
        self.max_output_bytes = max_output_bytes
        self.pool = SshPool(max_concurrent)
        self._probed: dict[str, ProbedTarget] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._stamp = file_stamp(path)
        self._checked_at = time.monotonic()
        self.reloads = 0
        # The file as read at startup (read here when not given); a bad one raises TargetsError.
        self._apply(targets if targets is not None else load_targets(path))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._probed)

    def lookup(self, name: str) -> ProbedTarget | None:
        """The target a probe names, the file reloaded first if it changed; None when it is not a configured name."""
        self.reload_if_changed()
        return self._probed.get(name)

    def _apply(self, targets: Targets) -> None:
        old = self._probed
        self._probed = {}
        for name, target in targets.by_name.items():
            kept = old.get(name)
            if kept is not None and kept.target == target:
                self._probed[name] = kept  # unchanged: keep its counters, fields and connection
                continue
            backend = TargetBackend(
                SshRunner(self.pool, target, self.max_output_bytes),
                compute_apps=self.compute_apps,
                process_usage=self.process_usage_limit is not None,
            )
            collector = Collector(
                backend,
                timeout_seconds=target.settings.timeout_seconds,
                process_usage_limit=self.process_usage_limit,
            )
            self._probed[name] = ProbedTarget(target, backend, collector)
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
        """At shutdown: wait for what reloads are closing, then close every collector and connection."""
        if self._closing:
            await asyncio.wait(set(self._closing))
        for probed in self._probed.values():
            await probed.collector.aclose()
        await self.pool.aclose()
