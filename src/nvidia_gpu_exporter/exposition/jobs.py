"""The Slurm job families (docs/metrics.md, "Slurm jobs"): each served GPU process's job, and each GPU's jobs."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nvidia_gpu_exporter.exposition.families import GPU_SLURM_JOB_INFO, PROCESS_SLURM_JOB_INFO
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.jobs import ProcessJob


def job_families(jobs: Sequence[ProcessJob], gpu_uuids: Collection[str]) -> list[Family]:
    """One info series per process with a job, one per (GPU, job) of the collection's GPUs (``gpu_uuids``)."""
    processes, gpus = PROCESS_SLURM_JOB_INFO.family(), GPU_SLURM_JOB_INFO.family()
    seen: set[tuple[str, ...]] = set()
    for process in jobs:
        if process.uuid not in gpu_uuids:
            continue
        job = process.job
        processes.add((process.uuid, process.pid, job.job_id, job.step, job.uid, job.user, job.job_name), 1.0)
        held = (process.uuid, job.job_id, job.uid, job.user, job.job_name)
        if held not in seen:
            seen.add(held)
            gpus.add(held, 1.0)
    return [processes, gpus]
