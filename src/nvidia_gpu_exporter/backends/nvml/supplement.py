"""The exec backend under the DCGM profile, with what nvidia-smi cannot print read through NVML beside it.

Wherever nvidia-smi runs, libnvidia-ml is there (nvidia-smi is built on it), yet ``--query-gpu`` has no energy
counter, PCIe replay counter, NVLink reading, violation time, GPM profiling metric or per-MIG-instance reading.
When the library loads, each collection runs nvidia-smi as before and, beside it, one NVML cycle that reads only
those (its query is the GPU's uuid); the NVML readings are keyed by GPU uuid, which both read from the same
driver, so the exposition joins them as it joins the nvml backend's. nvidia-smi stays the source of every other
value and of the collection's success: an NVML cycle that fails is counted and logged, and that collection is
served without the NVML-only fields, and ``nvidia_gpu_exporter_nvml_supplement_failures_total`` counts it by
reason (NVML's return code, or ``in_progress`` while a previous cycle is still in the driver).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from nvidia_gpu_exporter.backends import Backend, BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError
from nvidia_gpu_exporter.backends.nvml.api import return_name
from nvidia_gpu_exporter.backends.nvml.backend import STILL_IN_PROGRESS, NvmlBackend, open_backend
from nvidia_gpu_exporter.model.snapshot import (
    NvmlExtras,
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)

log = logging.getLogger(__name__)

# What the exec backend serves only with the supplement (docs/dcgm.md, "The exec backend and NVML").
NVML_ONLY = (
    "energy, PCIe replays, NVLink bandwidth and errors, violation times, GPM profiling ratios, "
    "per-MIG-instance readings, NVLink P2P status, fabric health"
)
SUPPLEMENT_QUERY = FieldRequest("uuid")  # the key; every reading it adds is an NvmlExtras one
IN_PROGRESS = "in_progress"
OTHER_ERROR = "error"


def failure_reason(error: CollectionError) -> str:
    """A failed cycle's ``reason`` label: NVML's return code in lower case without ``ERROR_`` (``gpu_is_lost``),
    ``in_progress`` while the previous cycle is still in the driver, ``error`` otherwise: a bounded set."""
    if str(error) == STILL_IN_PROGRESS:
        return IN_PROGRESS
    if error.status_code < 0:
        return OTHER_ERROR
    return return_name(error.status_code).removeprefix("ERROR_").lower()


class NvmlSupplemented:
    """A backend (the exec one) whose readings gain the NVML-only extras of an NVML cycle run beside it."""

    def __init__(self, inner: Backend, nvml: NvmlBackend) -> None:
        self.inner = inner
        self.nvml = nvml
        self.failures = 0  # NVML cycles that failed, since the start
        self._reasons: dict[str, int] = {}  # the same, by failure_reason
        self._failing = False

    @property
    def status_family(self) -> StatusFamily:
        return self.inner.status_family

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self.inner.fields

    async def collect(self) -> Readings:
        supplement = asyncio.ensure_future(self._extras())
        try:
            readings = await self.inner.collect()
        except BaseException:
            supplement.cancel()
            raise
        extras = await supplement
        return readings if extras is None else replace(readings, extras=extras)

    async def _extras(self) -> NvmlExtras | None:
        """This cycle's NVML-only readings, or ``None`` (counted, and logged when a run of failures starts)."""
        try:
            readings = await self.nvml.collect()
        except CollectionError as error:
            self.failures += 1
            reason = failure_reason(error)
            self._reasons[reason] = self._reasons.get(reason, 0) + 1
            if not self._failing:
                log.warning(
                    "could not read NVML beside nvidia-smi: serving nvidia-smi's readings without the NVML-only fields",
                    extra={"err": str(error), "failures": self.failures},
                )
            self._failing = True
            return None
        if self._failing:
            log.info("reading NVML beside nvidia-smi again", extra={"failures": self.failures})
        self._failing = False
        return readings.extras

    def xid_records(self) -> tuple[XidRecord, ...]:
        return self.inner.xid_records()

    def stuck_children(self) -> StuckChildren | None:
        return self.inner.stuck_children()

    def supplement_failures(self) -> SupplementFailures:
        return tuple(sorted(self._reasons.items()))

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            await self.nvml.aclose()


def open_supplement(
    *, pcie_throughput: bool = False, p2p_status: bool = False, mig_placements: bool = False, nvlink_links: bool = False
) -> NvmlBackend:
    """An NVML cycle reading only the DCGM profile's NVML-only fields; BackendSetupError when NVML cannot serve."""
    try:
        return open_backend(
            SUPPLEMENT_QUERY,
            pcie_throughput=pcie_throughput,
            watch_xids=False,  # XIDs stay the exec backend's source's (--collect.xid-source)
            gpm_whole_gpus=True,
            dcgm_readings=True,
            p2p_status=p2p_status,
            mig_placements=mig_placements,
            nvlink_links=nvlink_links,
        )
    except FieldResolutionError as error:
        raise BackendSetupError(str(error)) from error


async def supplement(
    inner: Backend,
    *,
    pcie_throughput: bool = False,
    p2p_status: bool = False,
    mig_placements: bool = False,
    nvlink_links: bool = False,
) -> Backend:
    """``inner`` with the NVML supplement when libnvidia-ml loads; else ``inner``, and one warning saying why."""
    try:
        nvml = await asyncio.to_thread(
            open_supplement,
            pcie_throughput=pcie_throughput,
            p2p_status=p2p_status,
            mig_placements=mig_placements,
            nvlink_links=nvlink_links,
        )
    except BackendSetupError as error:
        log.warning(
            "the exec backend reads no NVML-only DCGM fields",
            extra={"fields": NVML_ONLY, "reason": str(error)},
        )
        return inner
    log.info("reading NVML beside nvidia-smi", extra={"fields": NVML_ONLY})
    return NvmlSupplemented(inner, nvml)
