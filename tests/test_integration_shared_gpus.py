"""Issue 29's "Done when", against the real server on the nvml backend with a fake NVML: three pods time-sliced on
one GPU (beside a Slurm job's process), two MPS clients on another and two MIG instances on a third. Per-pod
shares sum to each GPU's, per-pod energy increments (with the unattributed rest) sum to the GPU's increment, the
DCGM profile's per-pod parts sum to the GPU's values, Slurm labels come from the cgroup and environ, and an ended
pod's series are gone at the next collection. One exporter for the whole story (CI's time is tight); the DRA
claims' labels against the real server are in test_k8s_dra.py (they need the kubelet's gRPC extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import series
from k8s_fakes import HOST_SERVICE, make_proc
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvml_fixtures import ControlFile, FakeNvmlLibrary

MIB = 1_048_576
CID = "f" * 64
ENERGY_MJ = 5_000_000  # every GPU's counter at the start; each step adds STEP_MJ[gpu]
STEP_MJ = (90_000, 60_000, 30_000)
# (gpu index, pid, pod uid or "" for the host's, SM %, MiB, MIG GPU instance or None, MPS client)
PROCESSES = (
    (0, 1001, "0a0a0a0a-0000-4000-8000-00000000000a", 30, 1000, None, False),
    (0, 1002, "0b0b0b0b-0000-4000-8000-00000000000b", 20, 500, None, False),
    (0, 1003, "0c0c0c0c-0000-4000-8000-00000000000c", 10, 250, None, False),
    (0, 1900, "", 20, 100, None, False),  # a Slurm job's process, in no pod
    (1, 2001, "1a1a1a1a-0000-4000-8000-00000000001a", 60, 2000, None, True),
    (1, 2002, "1b1b1b1b-0000-4000-8000-00000000001b", 20, 1000, None, True),
    (1, 2900, "", 0, 30, None, False),  # nvidia-cuda-mps-server, a host process
    (2, 3001, "2a2a2a2a-0000-4000-8000-00000000002a", 0, 4096, 1, False),
    (2, 3002, "2b2b2b2b-0000-4000-8000-00000000002b", 0, 2048, 2, False),
)
SLURM_CGROUP = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"
SLURM_ENVIRON = b"SLURM_JOB_ID=4242\0SLURM_JOB_USER=alice\0SLURM_JOB_NAME=train\0"


def _commands(processes: tuple[tuple[int, int, str, int, int, int | None, bool], ...], step: int) -> list[str]:
    commands = ["noprocs *", "nosamples *", "migclear 2", "set 2 mig_cur 1"]
    commands += [f"set {gpu} energy_mj {ENERGY_MJ + step * STEP_MJ[gpu]}" for gpu in range(3)]
    commands += [f"mig 2 {gi} 0 3g.71gb {71 * 1024 * MIB} {8192 * MIB}" for gi in (1, 2)]
    for gpu, pid, _, sm, mib, instance, mps in processes:
        if mps:
            commands.append(f"mpsproc {gpu} {pid} {mib * MIB}")
        else:
            commands.append(f"proc {gpu} {pid} {mib * MIB}" + (f" {instance} 0" if instance is not None else ""))
        if instance is None:
            commands.append(f"psample {gpu} {pid} {1000 + step} {sm} 0 0 0")
    return commands


def _per_gpu(text: str, family: str, key: str = "pod_uid") -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for sample in series(text, family):
        uuid = normalize_uuid(sample.labels.get("uuid") or sample.labels["UUID"])
        found.setdefault(uuid, {})[sample.labels.get(key, "")] = sample.value
    return found


def test_shared_gpus_end_to_end(exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, tmp_path: Path) -> None:
    control = ControlFile(tmp_path / "control")
    control.send(*_commands(PROCESSES, 0))
    cgroups = {str(pid): f"0::/kubepods/besteffort/pod{uid}/{CID}\n" for _, pid, uid, *_ in PROCESSES if uid}
    proc = make_proc(tmp_path, {**cgroups, "1900": SLURM_CGROUP, "2900": HOST_SERVICE})
    (proc / "1900" / "environ").write_bytes(SLURM_ENVIRON)
    handle = exporter(
        "--collect.backend=nvml",
        "--metrics.profile=both",
        "--dcgm.compatibility=4.8",  # the DCGM names below are 4.8's
        "--collect.compute-apps",
        "--collect.compute-apps-mig",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
        "--slurm.jobs",
        env=fake_nvml_library.env("h200", control=control.path, gpus=3),
    )
    first = handle.scrape()
    uuids = {int(s.labels["index"]): s.labels["uuid"] for s in series(first, "nvidia_smi_gpu_info")}
    gpu_energy = _per_gpu(first, "nvidia_smi_energy_joules_total", "")
    control.send(*_commands(PROCESSES, 1))
    text = handle.scrape()

    # Per-pod shares: each GPU's pods and host processes add up to 1; a MIG GPU is shared by memory.
    shares = _per_gpu(text, "nvidia_smi_pod_gpu_share_ratio")
    for gpu, uuid in uuids.items():
        on_gpu = [p for p in PROCESSES if p[0] == gpu]
        weight = {p[2]: float(p[3]) for p in on_gpu}
        if not sum(weight.values()):  # no process has SM utilization (MIG): their memory
            weight = {p[2]: float(p[4]) for p in on_gpu}
        total = sum(weight.values())
        assert shares[uuid] == pytest.approx({uid: part / total for uid, part in weight.items() if uid}), gpu
    instances = {
        s.labels["pod_uid"]: s.labels["gpu_instance_id"] for s in series(text, "nvidia_smi_pod_used_memory_bytes")
    }
    assert (instances[PROCESSES[7][2]], instances[PROCESSES[8][2]]) == ("1", "2")

    # Energy: the pods' increments and the unattributed rest add up to each GPU's increment.
    pods_energy = _per_gpu(text, "nvidia_smi_pod_energy_joules_total")
    unattributed = _per_gpu(text, "nvidia_smi_unattributed_energy_joules_total", "")
    now = _per_gpu(text, "nvidia_smi_energy_joules_total", "")
    for gpu, uuid in uuids.items():
        increment = now[uuid][""] - gpu_energy[uuid][""]
        assert increment == pytest.approx(STEP_MJ[gpu] / 1000)
        assert sum(pods_energy[uuid].values()) + unattributed[uuid][""] == pytest.approx(increment)

    # The DCGM profile: the per-pod parts of power and of the energy counter add up to the GPU's.
    power = _per_gpu(text, "DCGM_FI_DEV_POWER_USAGE")
    gpu_power = _per_gpu(text, "nvidia_smi_power_draw_watts", "")
    for gpu in (0, 1):
        uuid = uuids[gpu]
        assert {uid for uid in power[uuid] if uid} == {p[2] for p in PROCESSES if p[0] == gpu and p[2]}
        assert sum(power[uuid].values()) == pytest.approx(gpu_power[uuid][""], rel=1e-3)
    dcgm_energy = [
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") and f'uuid="gpu-{uuids[0]}"' in line.lower()
    ]
    assert len(dcgm_energy) == 4  # the three pods' counters and the GPU's rest
    assert sum(dcgm_energy) == pytest.approx(ENERGY_MJ + STEP_MJ[0])

    # Slurm: the job's process and its GPU.
    jobs = {s.labels["pid"]: s.labels for s in series(text, "nvidia_smi_process_slurm_job_info")}
    assert {pid: (labels["job_id"], labels["user"], labels["uuid"]) for pid, labels in jobs.items()} == {
        "1900": ("4242", "alice", uuids[0])
    }

    # An ended pod's series are gone at the next collection, on every family.
    ended = PROCESSES[2][2]
    control.send(*_commands(tuple(p for p in PROCESSES if p[2] != ended), 2))
    assert ended not in handle.scrape()
