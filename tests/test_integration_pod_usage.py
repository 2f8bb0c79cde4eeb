"""Per-pod shares against the real server: exec with the fake nvidia-smi's pmon and a fake /proc whose cgroups put
the processes in pods; three pods time-sliced on one GPU (one of them with two processes, beside a host process)
and two MPS clients beside their server on another; and the demo, whose energy counters the pods' split."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import parse_openmetrics, sample_value, series
from harness import Exporter, fake_smi_command
from k8s_fakes import HOST_SERVICE, make_proc
from nvidia_gpu_exporter.app import build_attributor, build_backend
from nvidia_gpu_exporter.capture.format import FENCE
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_SOCKET
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS

GPU0 = "GPU-11111111-2222-4333-8444-555555555555"
GPU1 = "GPU-66666666-7777-4888-9999-000000000000"
UUID0 = GPU0.removeprefix("GPU-").lower()
UUID1 = GPU1.removeprefix("GPU-").lower()
MIB = 1_048_576.0
POWER = {GPU0: 400.0, GPU1: 300.0}
SHARE = "nvidia_smi_pod_gpu_share_ratio"
SM = "nvidia_smi_pod_sm_utilization_ratio"

# (gpu, pid, pod uid or "" for a host process, SM %, MiB)
PROCESSES = (
    (GPU0, 1001, "0a0a0a0a-0000-4000-8000-00000000000a", 30, 1000),
    (GPU0, 1002, "0b0b0b0b-0000-4000-8000-00000000000b", 20, 500),
    (GPU0, 1003, "0c0c0c0c-0000-4000-8000-00000000000c", 10, 250),
    (GPU0, 1004, "0c0c0c0c-0000-4000-8000-00000000000c", 5, 250),
    (GPU0, 1900, "", 15, 100),  # a Slurm job's process (SLURM below), in no pod
    (GPU1, 2001, "1a1a1a1a-0000-4000-8000-00000000001a", 60, 2000),
    (GPU1, 2002, "1b1b1b1b-0000-4000-8000-00000000001b", 20, 1000),
    (GPU1, 2900, "", 0, 30),  # nvidia-cuda-mps-server, here a host process
)
CID = "f" * 64
# pid -> (cgroup, environ): a cgroup v2 job step whose environ agrees, a cgroup v1 one without a readable environ
SLURM = {
    1900: (
        "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
        b"SLURM_JOB_ID=4242\0SLURM_JOB_USER=alice\0SLURM_JOB_NAME=train\0SLURM_JOB_UID=1000\0",
    ),
    2900: ("4:devices:/slurm/uid_1001/job_77/step_batch/task_0\n", None),
}
MEMORY = {1001: 1000, 1002: 500, 1003: 500, 2001: 2000, 2002: 1000}  # pod c's two processes summed under 1003


def _block(label: str, command: str, body: str) -> str:
    return f"{FENCE}\n# load :: {label}\n# $ {command}\n{FENCE}\n{body.rstrip(chr(10))}\n\n"


def write_capture(path: Path, processes: tuple[tuple[str, int, str, int, int], ...]) -> Path:
    """Two GPUs with their power draw, the compute apps and a pmon answer with the processes' SM and memory."""
    fields = [*IDENTITY_FIELDS, "power.draw"]
    header = ", ".join([*IDENTITY_FIELDS, "power.draw [W]"])
    rows = []
    for index, uuid in enumerate((GPU0, GPU1)):
        identity = {"uuid": uuid, "name": "NVIDIA H200", "index": str(index), "pci.bus_id": f"00000000:0{index}:00.0"}
        rows.append(", ".join([*(identity.get(name, "[N/A]") for name in IDENTITY_FIELDS), f"{POWER[uuid]:.2f} W"]))
    apps = "\n".join(f"{gpu}, {pid}, job{pid}, {mib} MiB" for gpu, pid, _, _, mib in processes)
    pmon = [
        "# gpu         pid   type     sm    mem    enc    dec     fb    command ",
        "# Idx           #    C/G      %      %      %      %     MB    name ",
        *(
            f"{(GPU0, GPU1).index(gpu):5} {pid:10} {'C':>5} {sm:6} {'0':>6} {'-':>6} {'-':>6} {mib:6}    job{pid}"
            for gpu, pid, _, sm, mib in processes
        ),
    ]
    text = _block(
        "query-gpu (csv, test)", f"nvidia-smi --query-gpu={','.join(fields)} --format=csv", "\n".join([header, *rows])
    )
    text += _block(
        "query-compute-apps (per-process)",
        "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv",
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n" + apps,
    )
    text += _block("pmon (recorded)", "nvidia-smi pmon -c 1 -s um", "\n".join(pmon) + "\n")
    path.write_text(text, encoding="utf-8")
    return path


def _start(exporter: StartExporter, tmp_path: Path, *extra: str) -> tuple[Exporter, Path]:
    cgroups = {
        str(pid): f"0::/kubepods/besteffort/pod{uid}/{CID}\n" if uid else SLURM.get(pid, (HOST_SERVICE, None))[0]
        for _, pid, uid, _, _ in PROCESSES
    }
    proc = make_proc(tmp_path, cgroups)
    for pid, (_, environ) in SLURM.items():
        if environ is not None:
            (proc / str(pid) / "environ").write_bytes(environ)
    capture = write_capture(tmp_path / "c.txt", PROCESSES)
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture, "--state", "load"),
        "--query-field-names=power.draw",
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
        "--slurm.jobs",
        *extra,
    )
    return handle, capture


def _per_pod(text: str, family: str, uuid: str) -> dict[str, float]:
    return {sample.labels["pod_uid"]: sample.value for sample in series(text, family) if sample.labels["uuid"] == uuid}


@pytest.mark.parametrize(
    ("uuid", "pods", "pod_sm"),
    [
        (UUID0, {1001: 30, 1002: 20, 1003: 15}, 65),  # pod c runs 1003 and 1004
        (UUID1, {2001: 60, 2002: 20}, 80),
    ],
)
def test_pods_sharing_a_gpu_get_their_own_share(
    exporter: StartExporter, tmp_path: Path, uuid: str, pods: dict[int, int], pod_sm: int
) -> None:
    handle, _ = _start(exporter, tmp_path)
    text = handle.scrape()
    uid_of = {pid: uid for _, pid, uid, _, _ in PROCESSES}
    process_sm = sum(sm for gpu, _, _, sm, _ in PROCESSES if gpu.removeprefix("GPU-").lower() == uuid)
    shares = _per_pod(text, SHARE, uuid)
    assert shares == pytest.approx({uid_of[pid]: sm / process_sm for pid, sm in pods.items()})
    assert sum(_per_pod(text, SM, uuid).values()) == pytest.approx(pod_sm / 100)
    watts = _per_pod(text, "nvidia_smi_pod_power_draw_watts", uuid)
    gpu_watts = POWER[GPU0 if uuid == UUID0 else GPU1]
    assert sum(watts.values()) == pytest.approx(gpu_watts * pod_sm / process_sm)  # the host's part is no pod's
    memory = _per_pod(text, "nvidia_smi_pod_used_memory_bytes", uuid)
    assert memory == {uid_of[pid]: mib * MIB for pid, mib in MEMORY.items() if uid_of[pid] in shares}


def test_an_ended_pods_series_are_gone_at_the_next_collection(exporter: StartExporter, tmp_path: Path) -> None:
    handle, capture = _start(exporter, tmp_path)
    ended = "0c0c0c0c-0000-4000-8000-00000000000c"
    assert ended in _per_pod(handle.scrape(), SHARE, UUID0)
    write_capture(capture, tuple(process for process in PROCESSES if process[2] != ended))
    text = handle.scrape()
    assert ended not in text
    assert sum(_per_pod(text, SHARE, UUID0).values()) == pytest.approx(50 / 65)


def test_slurm_jobs_label_their_processes_and_gpus(exporter: StartExporter, tmp_path: Path) -> None:
    handle, _ = _start(exporter, tmp_path)
    text = handle.scrape()
    processes = {sample.labels["pid"]: sample.labels for sample in series(text, "nvidia_smi_process_slurm_job_info")}
    assert {pid: (labels["uuid"], labels["job_id"], labels["step"]) for pid, labels in processes.items()} == {
        "1900": (UUID0, "4242", "0"),
        "2900": (UUID1, "77", "batch"),
    }
    assert (processes["1900"]["user"], processes["1900"]["job_name"], processes["1900"]["uid"]) == (
        "alice",
        "train",
        "1000",
    )
    assert (processes["2900"]["user"], processes["2900"]["uid"]) == ("", "1001")  # v1's uid; no environ
    gpus = {(s.labels["uuid"], s.labels["job_id"]) for s in series(text, "nvidia_smi_gpu_slurm_job_info")}
    assert gpus == {(UUID0, "4242"), (UUID1, "77")}
    usage = {s.labels["pid"] for s in series(text, "nvidia_smi_process_used_memory_bytes")}
    assert set(processes) <= usage  # each joins a per-process usage series on (uuid, pid)


def test_the_dcgm_profile_splits_a_shared_gpus_power_per_pod(exporter: StartExporter, tmp_path: Path) -> None:
    """dcgm-exporter's --kubernetes-virtual-gpus copies the GPU's value to every pod; here each pod has its part."""
    handle, _ = _start(exporter, tmp_path, "--metrics.profile=dcgm", "--dcgm.compatibility=4.8")
    power: dict[str, dict[str, float]] = {}
    for sample in series(handle.scrape(), "DCGM_FI_DEV_POWER_USAGE"):
        power.setdefault(sample.labels["UUID"], {})[sample.labels.get("pod_uid", "")] = sample.value
    uid_of = {pid: uid for _, pid, uid, _, _ in PROCESSES}
    for gpu, pods in ((GPU0, {1001: 30, 1002: 20, 1003: 15}), (GPU1, {2001: 60, 2002: 20})):
        process_sm = sum(sm for on, _, _, sm, _ in PROCESSES if on == gpu)
        expected = {uid_of[pid]: POWER[gpu] * sm / process_sm for pid, sm in pods.items()}
        assert {uid: watts for uid, watts in power[gpu].items() if uid} == pytest.approx(expected)
        assert sum(power[gpu].values()) == pytest.approx(POWER[gpu])  # the host processes' part stays unlabelled


def _by_gpu(text: str, family: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for sample in series(text, family):
        totals[sample.labels["uuid"]] = totals.get(sample.labels["uuid"], 0.0) + sample.value
    return totals


def test_demo_pod_energy_adds_up_to_each_gpus_energy_increment(exporter: StartExporter, tmp_path: Path) -> None:
    """The demo's GPU 0 trains (pid 4242) beside a profiler (4249): two pods; every other process is the host's."""
    pods = {"4242": "0d0d0d0d-0000-4000-8000-00000000000d", "4249": "0e0e0e0e-0000-4000-8000-00000000000e"}
    proc = make_proc(tmp_path, {pid: f"0::/kubepods/besteffort/pod{uid}/{CID}\n" for pid, uid in pods.items()})
    handle = exporter(
        "--collect.backend=demo",
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
    )
    first = handle.scrape()
    assert set(_by_gpu(first, "nvidia_smi_pod_energy_joules_total").values()) == {0.0}  # a baseline only
    baseline = _by_gpu(first, "nvidia_smi_energy_joules_total")
    for _ in range(2):
        text = handle.scrape()
        gpus = _by_gpu(text, "nvidia_smi_energy_joules_total")
        pods_energy = _by_gpu(text, "nvidia_smi_pod_energy_joules_total")
        unattributed = _by_gpu(text, "nvidia_smi_unattributed_energy_joules_total")
        assert set(unattributed) == set(gpus)
        for uuid, joules in gpus.items():
            increment = joules - baseline[uuid]
            assert pods_energy.get(uuid, 0.0) + unattributed[uuid] == pytest.approx(increment, rel=1e-9, abs=1e-6)
    energy = {sample.labels["pod_uid"]: sample.value for sample in series(text, "nvidia_smi_pod_energy_joules_total")}
    assert set(energy) == set(pods.values())
    assert min(energy.values()) > 0.0  # the demo's GPU 0 draws power, and both pods use it


def test_a_failed_usage_reading_serves_no_pod_series(exporter: StartExporter, tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {"1001": f"0::/kubepods/besteffort/pod{PROCESSES[0][2]}/{CID}\n"})
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(write_capture(tmp_path / "c.txt", PROCESSES), "--state", "load", "--fail-arg", "pmon"),
        "--query-field-names=power.draw",
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
    )
    text = handle.scrape()
    assert sample_value(text, "nvidia_smi_process_usage_last_collect_success") == 0.0
    assert [line for line in text.splitlines() if "_pod_" in line and "compute_app_pod_info" not in line] == []
    assert "nvidia_smi_unattributed_energy_joules_total" not in text


def test_demo_mig_pods_carry_the_gpu_instance_their_processes_run_in(exporter: StartExporter, tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {})
    handle = exporter(
        "--collect.backend=demo",
        "--collect.compute-apps",
        "--collect.compute-apps-mig",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
    )
    apps = series(handle.scrape(), "nvidia_smi_compute_app_info")
    on_mig = {sample.labels["pid"]: sample.labels for sample in apps if sample.labels["gpu_instance_id"]}
    assert on_mig, "the default demo scenario has a MIG GPU with processes"
    uids = {pid: f"{int(pid):08x}-0000-4000-8000-000000000000" for pid in on_mig}
    make_proc(tmp_path, {pid: f"0::/kubepods/besteffort/pod{uid}/{CID}\n" for pid, uid in uids.items()})
    shares = series(handle.scrape(), SHARE)
    expected = {(on_mig[pid]["uuid"], on_mig[pid]["gpu_instance_id"], uid) for pid, uid in uids.items()}
    served = {(s.labels["uuid"], s.labels["gpu_instance_id"], s.labels["pod_uid"]) for s in shares}
    assert expected <= served


def test_an_openmetrics_scrape_parses_with_the_pod_families(exporter: StartExporter, tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {"4242": f"0::/kubepods/besteffort/pod{PROCESSES[0][2]}/{CID}\n"})
    handle = exporter(
        "--collect.backend=demo",
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
        "--web.enable-openmetrics",
    )
    handle.scrape()
    response = handle.get(headers={"Accept": "application/openmetrics-text;version=1.0.0"})
    families = {family.name: family for family in parse_openmetrics(response.text)}
    for counter in ("nvidia_smi_pod_energy_joules", "nvidia_smi_unattributed_energy_joules"):
        assert families[counter].type == "counter"
    assert {sample.labels["pod_uid"] for sample in families[SHARE].samples} == {PROCESSES[0][2]}


def test_the_demo_simulates_pods_sharing_its_gpus(exporter: StartExporter) -> None:
    """With the Kubernetes flags the demo is its own node: a training GPU time-sliced by three pods (one idle), an
    inference GPU shared by two (MPS), each pod's share from its processes and its GPU-seconds allocated."""
    handle = exporter(
        "--collect.backend=demo",
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.pod-resources",
        "--kubernetes.process-pods",
    )
    handle.scrape()
    text = handle.scrape()
    allocated = series(text, "nvidia_smi_pod_gpu_allocated_seconds_total")
    per_gpu: dict[str, set[str]] = {}
    for sample in allocated:
        per_gpu.setdefault(sample.labels["uuid"], set()).add(f"{sample.labels['namespace']}/{sample.labels['pod']}")
    assert sorted(per_gpu.values(), key=len) == [
        {"serving/triton", "serving/batch-infer"},
        {"ml-training/llm-finetune", "ml-training/profiler", "research/notebook-ada"},
    ]
    assert min(sample.value for sample in allocated) > 0.0  # the idle notebook's replica counts too
    shares = series(text, SHARE)
    training = next(uuid for uuid, pods in per_gpu.items() if len(pods) == 3)
    assert len({sample.labels["pod_uid"] for sample in shares if sample.labels["uuid"] == training}) == 2
    assert {sample.labels["namespace"] for sample in shares} == {""}  # shared GPUs: pods known by uid only
    assert [sample.value for sample in series(text, "nvidia_smi_kubernetes_attribution_up")] == [1.0]


@pytest.mark.parametrize(
    ("kubelet_there", "simulated"), [(False, True), (True, False)], ids=["no-kubelet", "a-kubelet"]
)
def test_the_demo_simulates_its_pods_only_where_no_kubelet_socket_is(
    monkeypatch: pytest.MonkeyPatch, kubelet_there: bool, simulated: bool
) -> None:
    """On a real node (the chart's demo backend) the kubelet's socket is at the default path: its pods are read."""
    config = parse_args(["--collect.backend=demo", "--collect.compute-apps", "--kubernetes.process-pods"]).config
    backend = asyncio.run(build_backend(config, watch_xids=False))
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda path: kubelet_there if path == DEFAULT_SOCKET else exists(path))
    attributor = build_attributor(config, backend)
    assert attributor is not None
    assert (attributor.process_pods is not None) is simulated
