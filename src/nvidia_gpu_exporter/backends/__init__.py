"""Backends produce :class:`~nvidia_gpu_exporter.model.snapshot.Readings`; they know nothing of Prometheus."""

from __future__ import annotations

from typing import Protocol

from nvidia_gpu_exporter.model.snapshot import (
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)


class CollectionError(Exception):
    """A failed collection: the status code to report, and whether ``--shutdown-on-error`` applies."""

    def __init__(self, message: str, status_code: int = -1, *, fatal: bool = False, exit_code: int = 1) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.fatal = fatal
        self.exit_code = exit_code


class BackendSetupError(Exception):
    """The backend cannot start (the exporter exits with this message)."""


class Backend(Protocol):
    """One source of GPU readings. ``collect`` is cancelled by the collector on timeout."""

    @property
    def status_family(self) -> StatusFamily: ...

    @property
    def fields(self) -> tuple[QueryField, ...]: ...

    async def collect(self) -> Readings: ...

    def xid_records(self) -> tuple[XidRecord, ...]:
        """XID counts so far (nvml, demo); served even when collections fail. Empty for exec."""
        ...

    def stuck_children(self) -> StuckChildren | None:
        """nvidia-smi children SIGKILL has not ended (exec); served even when collections fail. None: no children."""
        ...

    def supplement_failures(self) -> SupplementFailures | None:
        """Failed NVML cycles beside nvidia-smi by reason (the exec backend's supplement); None: no supplement."""
        ...

    async def aclose(self) -> None: ...
