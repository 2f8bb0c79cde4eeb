"""The plain, immutable readings a backend produces and the collector publishes.

Backends know nothing of Prometheus: a reading is the text nvidia-smi printed (or would print) for each
field of each GPU, plus the per-process rows. Turning that text into samples is the exposition's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class StatusFamily(Enum):
    """Which status family a backend reports; exactly one exists per process."""

    COMMAND_EXIT_CODE = "nvidia_smi_command_exit_code"
    NVML_RETURN_CODE = "nvidia_smi_nvml_return_code"


@dataclass(frozen=True, slots=True)
class QueryField:
    """A field as queried (``fan.speed``) and the header nvidia-smi returns for it (``fan.speed [%]``)."""

    qfield: str
    rfield: str


@dataclass(frozen=True, slots=True)
class GpuTable:
    """One row of trimmed cell texts per GPU, in the order of the resolved query fields."""

    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process with a compute context, as raw texts (the pid already checked to be an integer)."""

    gpu_uuid: str
    pid: str
    process_name: str
    used_memory: str
    gpu_instance_id: str = ""
    compute_instance_id: str = ""


@dataclass(frozen=True, slots=True)
class ProcessList:
    """The per-process query's outcome; a failed query has no rows and must not look like an idle GPU."""

    succeeded: bool
    rows: tuple[ProcessRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Readings:
    """Everything one successful collection read."""

    gpus: GpuTable
    processes: ProcessList | None  # None when per-process collection is off
    cuda_version: str = ""


@dataclass(frozen=True, slots=True)
class Attempt:
    """A completed collection attempt, successful (``readings`` set) or failed (``error`` set)."""

    readings: Readings | None
    status_code: int
    duration_seconds: float
    finished_at: float  # Unix time
    error: str | None = None
    fatal: bool = False  # --shutdown-on-error applies
    exit_code_for_shutdown: int = 1

    @property
    def succeeded(self) -> bool:
        return self.readings is not None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scrape renders: the attempt to serve (``None`` = no result) and the health counters."""

    attempt: Attempt | None
    failed_collections: int
    last_success_at: float | None
    sequence: int = field(default=0, compare=False)  # bumps with every published snapshot
