"""Per-process → Slurm job: the job in a process's cgroup path (Slurm's cgroup v1 and v2 layouts) and in its
environ, which source wins, and the bounds on what they may put in a label."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.exposition.jobs import job_families
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.kubernetes import slurm
from nvidia_gpu_exporter.model.jobs import MAX_LABEL_CHARACTERS, ProcessJob, SlurmJob

V1 = "12:devices:/slurm/uid_1000/job_4242/step_0/task_0\n11:memory:/slurm/uid_1000/job_4242/step_0/task_0\n"
V2 = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (V1, SlurmJob("4242", step="0", uid="1000")),
        (V2, SlurmJob("4242", step="0")),
        ("0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n", SlurmJob("7", step="batch")),
        ("0::/system.slice/slurmstepd.scope/job_7/step_extern/user/task_special\n", SlurmJob("7", step="extern")),
        ("4:cpuset:/slurm_node17/uid_0/job_99/step_interactive/task_0\n", SlurmJob("99", step="interactive", uid="0")),
        ("0::/slurm/uid_1000/job_5\n", SlurmJob("5", uid="1000")),  # the job's own cgroup, no step yet
        ("0::/../../slurmstepd.scope/job_8/step_1/user/task_0\n", SlurmJob("8", step="1")),  # a cgroup namespace
    ],
    ids=["v1", "v2", "v2-batch", "v2-extern", "v1-multiple-slurmd", "v1-job-level", "v2-cgroup-namespace"],
)
def test_slurm_cgroup_layouts_name_the_job(text: str, expected: SlurmJob) -> None:
    assert slurm.parse_cgroup_file(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/system.slice/slurmd.service\n",  # slurmd itself runs no job
        "0::/system.slice/slurmstepd.scope/system\n",  # the stepd's own processes
        "0::/kubepods/besteffort/pod0a0a0a0a-0000-4000-8000-00000000000a/" + "f" * 64 + "\n",
        "0::/batch/job_1/step_0\n",  # job_ outside a Slurm hierarchy is somebody else's naming
        "0::/slurm/uid_1000/job_12ab/step_0\n",  # not a job id
        "garbage\n",
        "",
    ],
    ids=["session", "slurmd", "stepd-system", "pod", "not-slurm", "bad-id", "garbage", "empty"],
)
def test_paths_outside_slurm_jobs_name_none(text: str) -> None:
    assert slurm.parse_cgroup_file(text) is None


def _environ(**variables: str) -> bytes:
    return b"".join(f"{name}={value}".encode() + b"\0" for name, value in {"PATH": "/bin", **variables}.items())


def _proc(root: Path, pid: str, cgroup: str | None, environ: bytes | None) -> Path:
    proc = root / "proc"
    (proc / pid).mkdir(parents=True, exist_ok=True)
    if cgroup is not None:
        (proc / pid / "cgroup").write_text(cgroup, encoding="utf-8")
    if environ is not None:
        (proc / pid / "environ").write_bytes(environ)
    return proc


ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice", "SLURM_JOB_NAME": "train", "SLURM_JOB_UID": "1000"}


@pytest.mark.parametrize(
    ("cgroup", "environ", "expected"),
    [
        # Both agree: the cgroup's ids, the environ's names.
        (V2, ENV, SlurmJob("4242", step="0", uid="1000", user="alice", job_name="train")),
        (V1, ENV, SlurmJob("4242", step="0", uid="1000", user="alice", job_name="train")),
        # They disagree (a process that set SLURM_JOB_ID itself): the cgroup wins and the environ says nothing.
        (V2, {**ENV, "SLURM_JOB_ID": "1"}, SlurmJob("4242", step="0")),
        # No environ readable (another user's process, without root): the cgroup alone.
        (V1, None, SlurmJob("4242", step="0", uid="1000")),
        # No Slurm cgroup (proctrack/linuxproc, no cgroup plugin): the environ alone.
        ("0::/user.slice\n", ENV, SlurmJob("4242", uid="1000", user="alice", job_name="train")),
        (None, {**ENV, "SLURM_STEP_ID": "3"}, SlurmJob("4242", step="3", uid="1000", user="alice", job_name="train")),
        # An environ whose job id is not one names no job.
        ("0::/user.slice\n", {**ENV, "SLURM_JOB_ID": "abc"}, None),
        ("0::/user.slice\n", {"HOME": "/root"}, None),
        (None, None, None),
    ],
    ids=["v2-agree", "v1-agree", "disagree", "no-environ", "environ-only", "no-cgroup", "bad-env-id", "no-job", "gone"],
)
def test_which_source_wins(
    tmp_path: Path, cgroup: str | None, environ: dict[str, str] | None, expected: SlurmJob | None
) -> None:
    proc = _proc(tmp_path, "77", cgroup, None if environ is None else _environ(**environ))
    assert slurm.lookup_job(proc, "77") == expected


@pytest.mark.parametrize(
    ("variable", "value", "field", "served"),
    [
        ("SLURM_JOB_NAME", "n" * 1000, "job_name", "n" * MAX_LABEL_CHARACTERS),
        ("SLURM_JOB_USER", "u" * 1000, "user", "u" * MAX_LABEL_CHARACTERS),
        ("SLURM_JOB_NAME", "bad\udcffbytes", "job_name", "bad\ufffdbytes"),
    ],
    ids=["long-name", "long-user", "not-utf8"],
)
def test_label_values_are_bounded(tmp_path: Path, variable: str, value: str, field: str, served: str) -> None:
    raw = value.encode("utf-8", "surrogateescape")
    environ = _environ(**{**ENV, variable: "X"}).replace(b"=X\0", b"=" + raw + b"\0")
    proc = _proc(tmp_path, "77", V2, environ)
    job = slurm.lookup_job(proc, "77")
    assert job is not None
    assert getattr(job, field) == served


def test_a_huge_environ_is_read_only_up_to_the_bound(tmp_path: Path) -> None:
    """A process can make its environ as large as ARG_MAX allows; the variables past the bound are not read."""
    environ = b"PAD=" + b"x" * (slurm.MAX_ENVIRON_BYTES + 10) + b"\0" + _environ(**ENV)
    proc = _proc(tmp_path, "77", V2, environ)
    assert slurm.lookup_job(proc, "77") == SlurmJob("4242", step="0")


@pytest.mark.parametrize("pid", ["", "abc", "../1", "-1"])
def test_a_pid_that_is_not_a_number_reads_nothing(tmp_path: Path, pid: str) -> None:
    proc = _proc(tmp_path, "77", V2, _environ(**ENV))
    assert slurm.lookup_job(proc, pid) is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"slurm_jobs": True}, "--slurm.jobs requires --collect.compute-apps or --collect.process-usage"),
        ({"slurm_jobs": True, "compute_apps": True, "kubernetes_proc_root": ""}, "--kubernetes.proc-root must not be"),
    ],
    ids=["no-processes", "empty-proc-root"],
)
def test_flag_combinations_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(dataclasses.replace(Config(), **changes))  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["--collect.compute-apps", "--collect.process-usage"])
def test_either_process_source_is_enough(flag: str) -> None:
    config = parse_args(["--slurm.jobs", flag]).config
    validate(config)
    assert config.slurm_jobs


def test_the_families_name_each_process_job_and_each_gpus_jobs_once() -> None:
    alice, bob = SlurmJob("1", "0", "1000", "alice", "train"), SlurmJob("2", "batch", "1001", "bob", "eval")
    jobs = (
        ProcessJob("a", "10", alice),
        ProcessJob("a", "11", alice),  # a second rank of the same job on the same GPU
        ProcessJob("a", "12", bob),
        ProcessJob("b", "13", alice),
        ProcessJob("gone", "14", bob),  # a GPU the collection did not serve
    )
    processes, gpus = job_families(jobs, {"a", "b"})
    assert sorted(values[:3] for values, _ in processes.samples) == [
        ("a", "10", "1"), ("a", "11", "1"), ("a", "12", "2"), ("b", "13", "1"),
    ]  # fmt: skip
    assert sorted(values for values, _ in gpus.samples) == [
        ("a", "1", "1000", "alice", "train"), ("a", "2", "1001", "bob", "eval"), ("b", "1", "1000", "alice", "train"),
    ]  # fmt: skip
