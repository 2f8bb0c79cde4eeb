"""One fleet target as a :class:`~nvidia_gpu_exporter.backends.Backend`: the exec pipeline over SSH, with its
field discovery cached and redone when the target's driver changes.

Discovery (``--help-query-gpu``, the mapping query, ``--version``) runs at the target's first collection, in
that collection's time budget, exactly as a local exporter runs it at startup. It is redone at the next
collection when the driver version a successful collection reports differs from the one discovery saw (a
driver upgrade changes the fields nvidia-smi knows), and after a failed collection (a changed driver often
refuses the old field list; a host that was down at discovery got only the built-in fallback). A timed-out
or abandoned collection keeps the fields, unless it cut discovery itself short.
"""

from __future__ import annotations

import logging

from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.fleet.ssh import SshRunner
from nvidia_gpu_exporter.model.snapshot import (
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)

log = logging.getLogger(__name__)

DRIVER_VERSION_FIELD = "driver_version"


class TargetBackend:
    """The readings of one target; ``fields`` change only when discovery is redone (``discoveries`` counts it)."""

    def __init__(self, runner: SshRunner, *, compute_apps: bool, process_usage: bool = False) -> None:
        self.runner = runner
        self.compute_apps = compute_apps
        self.process_usage = process_usage  # --collect.process-usage: pmon over SSH, as a local exporter runs it
        self._inner: SmiBackend | None = None
        self._stale = True
        self._driver = ""  # the driver version discovery saw ("" = unknown)
        self.discoveries = 0

    @property
    def status_family(self) -> StatusFamily:
        return StatusFamily.COMMAND_EXIT_CODE

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._inner.fields if self._inner is not None else ()

    async def _discover(self) -> SmiBackend:
        settings = self.runner.target.settings
        inner = await SmiBackend.start(
            self.runner,
            FieldRequest(settings.fields, ""),
            timeout_seconds=None,  # bounded by the collection's timeout, which this runs within
            compute_apps=self.compute_apps,
            process_usage=self.process_usage,
        )
        self.discoveries += 1
        self._inner, self._stale, self._driver = inner, False, ""
        log.info(
            "fleet: fields discovered",
            extra={"target": self.runner.target.name, "fields": len(inner.fields), "discoveries": self.discoveries},
        )
        return inner

    def _driver_version(self, readings: Readings) -> str:
        names = [field.qfield for field in self.fields]
        if DRIVER_VERSION_FIELD not in names or not readings.gpus.rows:
            return ""
        return readings.gpus.rows[0][names.index(DRIVER_VERSION_FIELD)]

    async def collect(self) -> Readings:
        inner = self._inner if self._inner is not None and not self._stale else await self._discover()
        try:
            readings = await inner.collect()
        except CollectionError:  # not a timeout or a scrape that gave up: a slow host keeps its fields
            self._stale = True
            raise
        driver = self._driver_version(readings)
        if not self._driver:
            self._driver = driver
        elif driver != self._driver:
            log.info(
                "fleet: driver version changed, fields are discovered again at the next collection",
                extra={"target": self.runner.target.name, "was": self._driver, "now": driver},
            )
            self._stale = True
        return readings

    def xid_records(self) -> tuple[XidRecord, ...]:
        return ()

    def stuck_children(self) -> StuckChildren:
        """As a local exec exporter with no stuck child: a remote run is ended by its channel, never stuck here."""
        return StuckChildren()

    def supplement_failures(self) -> SupplementFailures | None:
        """No NVML supplement: ``None``."""
        return None

    async def aclose(self) -> None:
        """The connection belongs to the pool, which closes it."""
