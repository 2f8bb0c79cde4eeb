"""The Slurm job of a host process, from ``/proc/<pid>/cgroup`` and ``/proc/<pid>/environ`` (``--slurm.jobs``).

Slurm's cgroup plugins put every step's tasks in a cgroup under the job's, so the path names the job:

* cgroup/v1: ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`` in each controller's hierarchy
  (``/slurm_<nodename>/...`` where one host runs several slurmd);
* cgroup/v2: ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``
  (``<nodename>_slurmstepd.scope`` with several slurmd); the step is a number, ``batch``, ``extern`` or
  ``interactive``.

The environ adds what the path lacks (``SLURM_JOB_USER``, ``SLURM_JOB_NAME``) and names the job where no cgroup
plugin runs (proctrack/linuxproc). The cgroup wins: slurmstepd puts the process there and the process cannot
leave it, while any process can set ``SLURM_JOB_ID`` in its own environment. So the environ is read only for a
process whose cgroup names no job, or names the same job as its ``SLURM_JOB_ID``; a disagreeing environ adds
nothing. ``environ`` is readable only by the process's owner and root (ptrace rules), and is read up to
:data:`MAX_ENVIRON_BYTES`; a value is cut to :data:`~..model.jobs.MAX_LABEL_CHARACTERS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from nvidia_gpu_exporter.kubernetes.cgroups import best_of_cgroup_file
from nvidia_gpu_exporter.model.jobs import MAX_LABEL_CHARACTERS, ProcessJob, SlurmJob
from nvidia_gpu_exporter.model.uuids import normalize_uuid

MAX_ENVIRON_BYTES = 64 * 1024  # ARG_MAX allows megabytes; Slurm's variables come early, from slurmstepd
_ROOT = re.compile(r"^(?:slurm(?:_[^/]+)?|(?:[^/]+_)?slurmstepd\.scope)$")
_UID = re.compile(r"^uid_(?P<uid>[0-9]{1,10})$")
_JOB = re.compile(r"^job_(?P<id>[0-9]{1,20})$")
_STEP = re.compile(r"^step_(?P<step>[0-9]{1,10}|batch|extern|interactive)$")
_ID = re.compile(r"^[0-9]{1,20}$")
_ENVIRON_NAMES = (b"SLURM_JOB_ID", b"SLURM_JOB_UID", b"SLURM_JOB_USER", b"SLURM_JOB_NAME", b"SLURM_STEP_ID")


def parse_cgroup_path(path: str) -> SlurmJob | None:
    """The job in one cgroup path, or ``None`` when the path is not under a Slurm job."""
    segments = [segment for segment in path.split("/") if segment and segment != ".."]
    for position, segment in enumerate(segments):
        if not _ROOT.match(segment):
            continue
        rest = segments[position + 1 :]
        uid = ""
        if rest and (owner := _UID.match(rest[0])):
            uid, rest = owner["uid"], rest[1:]
        job = _JOB.match(rest[0]) if rest else None
        if job is None:
            continue
        step = _STEP.match(rest[1]) if len(rest) > 1 else None
        return SlurmJob(job["id"], step=step["step"] if step else "", uid=uid)
    return None


def parse_cgroup_file(text: str) -> SlurmJob | None:
    """The job named by a ``/proc/<pid>/cgroup`` file (v1 or v2); a line with a step beats one without."""
    return best_of_cgroup_file(text, parse_cgroup_path, lambda job: bool(job.step))


def _value(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")[:MAX_LABEL_CHARACTERS]


def parse_environ(data: bytes) -> dict[str, str]:
    """The Slurm job variables of an environ block (``NAME=value`` separated by NUL), each value bounded."""
    found: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals and name in _ENVIRON_NAMES:
            found.setdefault(name.decode("ascii"), _value(value))
    return found


def _read_environ(path: Path) -> dict[str, str]:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_ENVIRON_BYTES)
    except OSError:  # gone, or another user's process: the cgroup alone speaks
        return {}
    if len(data) == MAX_ENVIRON_BYTES:
        data = data[: data.rfind(b"\0") + 1]  # a variable cut at the bound is not read
    return parse_environ(data)


def _from_environ(variables: dict[str, str], cgroup: SlurmJob | None) -> SlurmJob | None:
    job_id = variables.get("SLURM_JOB_ID", "")
    if not _ID.match(job_id) or (cgroup is not None and cgroup.job_id != job_id):
        return cgroup
    uid = variables.get("SLURM_JOB_UID", "")
    step = variables.get("SLURM_STEP_ID", "")
    return SlurmJob(
        job_id,
        step=cgroup.step if cgroup is not None else (step if _ID.match(step) else ""),
        uid=(cgroup.uid if cgroup is not None and cgroup.uid else (uid if _ID.match(uid) else "")),
        user=variables.get("SLURM_JOB_USER", ""),
        job_name=variables.get("SLURM_JOB_NAME", ""),
    )


def lookup_job(proc_root: str | Path, pid: str) -> SlurmJob | None:
    """The job of one process under ``proc_root`` (``/proc``, or a fake tree in tests), or ``None``."""
    if not pid.isdigit():
        return None
    directory = Path(proc_root) / pid
    try:
        cgroup = parse_cgroup_file((directory / "cgroup").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        cgroup = None
    return _from_environ(_read_environ(directory / "environ"), cgroup)


def process_jobs(proc_root: str | Path, processes: Iterable[tuple[str, str]]) -> tuple[ProcessJob, ...]:
    """The job of each (GPU uuid, pid) in a job, once per GPU and pid; each pid's files are read once."""
    found: dict[str, SlurmJob | None] = {}
    jobs: dict[tuple[str, str], ProcessJob] = {}
    for gpu_uuid, pid in processes:
        key = (normalize_uuid(gpu_uuid), pid)
        if key in jobs:
            continue
        if pid not in found:
            found[pid] = lookup_job(proc_root, pid)
        job = found[pid]
        if job is not None:
            jobs[key] = ProcessJob(key[0], pid, job)
    return tuple(jobs.values())
