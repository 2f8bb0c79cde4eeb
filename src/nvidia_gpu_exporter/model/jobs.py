"""The Slurm job a GPU process runs in (``--slurm.jobs``): plain data the collector attaches to a snapshot."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LABEL_CHARACTERS = 128  # a job name or user name is cut here, so no label value grows without bound


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as its sources name it; a value no source gave is ``""``."""

    job_id: str  # decimal, as Slurm numbers jobs
    step: str = ""  # "0", "1", ..., "batch", "extern", "interactive"
    uid: str = ""  # the job owner's uid
    user: str = ""  # SLURM_JOB_USER
    job_name: str = ""  # SLURM_JOB_NAME


@dataclass(frozen=True, slots=True)
class ProcessJob:
    """A GPU process (normalized GPU uuid and pid, as in every ``uuid``/``pid`` label) and its job."""

    uuid: str
    pid: str
    job: SlurmJob
