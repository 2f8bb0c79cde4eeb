"""Attribution end to end: the real exporter (exec backend on the fixture capture) with a fake kubelet on a
unix socket and a fake /proc, scraped over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import StartExporter
from exposition_reader import comparable, label_values, samples
from harness import MIG_FIXTURE, fake_smi_command
from k8s_fakes import (
    CGROUP_LAYOUTS,
    CID,
    GPU0,
    GPU1,
    LOAD_PIDS,
    MIG1,
    UID,
    FakeKubelet,
    make_proc,
    require_grpc,
    silent_socket,
)
from polling import wait_until

require_grpc()

G0, G1 = GPU0.removeprefix("GPU-"), GPU1.removeprefix("GPU-")
M1 = MIG1.removeprefix("MIG-")
KUBERNETES_FAMILIES = (
    "nvidia_smi_gpu_pod_info",
    "nvidia_smi_kubernetes_attribution_up",
    "nvidia_smi_compute_app_pod_info",
    "nvidia_smi_pod_gpu_allocated_seconds_total",  # the GPU-seconds each pod the kubelet lists holds
)


def smi(state: str = "load") -> tuple[str, str]:
    return ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, "--state", state))


def attribution_args(socket: Path, *extra: str) -> list[str]:
    return [
        *smi(),
        "--kubernetes.pod-resources",
        f"--kubernetes.pod-resources-socket={socket}",
        "--kubernetes.pod-resources-cache=0s",
        *extra,
    ]


def without_kubernetes(scrape: str) -> str:
    return "\n".join(
        line for line in comparable(scrape).split("\n") if not any(name in line for name in KUBERNETES_FAMILIES)
    )


def test_pods_of_whole_gpus_mig_devices_and_replicas(exporter: StartExporter, kubelet: FakeKubelet) -> None:
    kubelet.set(
        [
            ("ml", "train", "trainer", "nvidia.com/gpu", [GPU1 + "::0", GPU1 + "::1"]),
            ("ml", "notebook", "jupyter", "nvidia.com/gpu", [GPU1 + "::2"]),
            ("serve", "infer", "srv", "nvidia.com/mig-1g.10gb", [MIG1]),
        ]
    )
    handle = exporter(*attribution_args(kubelet.path))
    text = handle.scrape()
    assert samples(text, "nvidia_smi_gpu_pod_info") == [
        f'nvidia_smi_gpu_pod_info{{container="jupyter",mig_uuid="",namespace="ml",pod="notebook",uuid="{G1}"}} 1',
        f'nvidia_smi_gpu_pod_info{{container="srv",mig_uuid="{M1}",namespace="serve",pod="infer",uuid="{G0}"}} 1',
        f'nvidia_smi_gpu_pod_info{{container="trainer",mig_uuid="",namespace="ml",pod="train",uuid="{G1}"}} 1',
    ]
    assert samples(text, "nvidia_smi_kubernetes_attribution_up") == [
        'nvidia_smi_kubernetes_attribution_up{reason=""} 1'
    ]
    report = json.loads(handle.get("/-/attribution").text)
    gpus = {gpu["uuid"]: gpu for gpu in report["gpus"]}
    assert [pod["pod"] for pod in gpus[G0]["pods"]] == ["infer"]  # the MIG uuid was placed via nvidia-smi -L
    assert [pod["replica"] for pod in gpus[G1]["pods"]] == ["0", "1", "2"]
    assert report["pod_resources"]["up"] is True


def test_everything_else_is_unchanged_and_a_gone_pod_disappears(exporter: StartExporter, kubelet: FakeKubelet) -> None:
    kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU1]), ("ml", "b", "c", "nvidia.com/mig-3g", [MIG1])])
    plain = exporter(*smi(), "--collect.compute-apps").scrape()
    handle = exporter(*attribution_args(kubelet.path), "--collect.compute-apps")
    first = handle.scrape()
    assert without_kubernetes(first) == without_kubernetes(plain)
    assert len(samples(first, "nvidia_smi_gpu_pod_info")) == 2
    kubelet.set([("ml", "b", "c", "nvidia.com/mig-3g", [MIG1])])  # pod a is deleted
    assert label_values(handle.scrape(), "nvidia_smi_gpu_pod_info", "pod") == ["b"]


def test_pod_labels_on_the_gpu_one_container_holds(exporter: StartExporter, kubelet: FakeKubelet) -> None:
    kubelet.set([("ml", "train", "trainer", "nvidia.com/gpu", [GPU1]), ("ml", "i", "s", "nvidia.com/mig-1g", [MIG1])])
    text = exporter(*attribution_args(kubelet.path), "--kubernetes.pod-labels").scrape()
    assert samples(text, "nvidia_smi_temperature_gpu") == [
        f'nvidia_smi_temperature_gpu{{uuid="{G0}"}} 47',
        f'nvidia_smi_temperature_gpu{{container="trainer",namespace="ml",pod="train",uuid="{G1}"}} 30',
    ]


def test_processes_carry_their_pod_with_host_pids(
    exporter: StartExporter, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    proc = make_proc(tmp_path, {LOAD_PIDS[0]: CGROUP_LAYOUTS[1][1]})
    args = attribution_args(kubelet.path, "--collect.compute-apps", "--kubernetes.process-pods")
    handle = exporter(*args, f"--kubernetes.proc-root={proc}")
    text = handle.scrape()
    assert samples(text, "nvidia_smi_compute_app_pod_info") == [
        f'nvidia_smi_compute_app_pod_info{{container_id="{CID}",pid="{LOAD_PIDS[0]}",pod_uid="{UID}",uuid="{G0}"}} 1'
    ]
    report = json.loads(handle.get("/-/attribution").text)
    processes = {p["pid"]: p for gpu in report["gpus"] for p in gpu.get("processes", [])}
    assert processes[LOAD_PIDS[0]]["runtime"] == "containerd"
    assert processes[LOAD_PIDS[1]]["reason"] == "process_not_visible"


def test_a_missing_socket_is_reported_once_and_the_exporter_works(exporter: StartExporter, sockets: Path) -> None:
    handle = exporter(*attribution_args(sockets / "absent.sock"))
    for _ in range(3):
        text = handle.scrape()
    assert samples(text, "nvidia_smi_kubernetes_attribution_up") == [
        'nvidia_smi_kubernetes_attribution_up{reason="socket_missing"} 0'
    ]
    assert samples(text, "nvidia_smi_last_collect_success") == ["nvidia_smi_last_collect_success 1"]
    wait_until(lambda: "attribution is unavailable" in handle.log, "the reason in the log")
    assert handle.log.count("attribution is unavailable") == 1
    assert "reason=socket_missing" in handle.log
    report = json.loads(handle.get("/-/attribution").text)
    assert {gpu["reason"] for gpu in report["gpus"]} == {"socket_missing"}


def test_a_silent_kubelet_does_not_hold_the_scrape(exporter: StartExporter, sockets: Path) -> None:
    path = sockets / "silent.sock"
    with silent_socket(path):
        handle = exporter(*attribution_args(path, "--kubernetes.pod-resources-timeout=200ms"))
        text = handle.scrape()
    assert samples(text, "nvidia_smi_kubernetes_attribution_up") == [
        'nvidia_smi_kubernetes_attribution_up{reason="timeout"} 0'
    ]
    assert samples(text, "nvidia_smi_last_collect_success") == ["nvidia_smi_last_collect_success 1"]


def test_no_attribution_route_without_the_flags(exporter: StartExporter) -> None:
    handle = exporter(*smi())
    assert handle.get("/-/attribution").status == 404
    assert "nvidia_smi_kubernetes_attribution_up" not in handle.scrape()


def test_dcgm_profile_pod_labels_follow_the_driver_version(exporter: StartExporter, kubelet: FakeKubelet) -> None:
    kubelet.set([("ml", "train", "trainer", "nvidia.com/gpu", [GPU1])])
    text = exporter(*attribution_args(kubelet.path), "--kubernetes.pod-labels", "--metrics.profile=dcgm").scrape()
    held = [line for line in samples(text, "DCGM_FI_DEV_GPU_TEMP_CELSIUS") if 'gpu="1"' in line]  # the newest's
    assert len(held) == 1
    labels = ',DCGM_FI_SYSTEM_DRIVER_VERSION="550.54.15",pod="train",namespace="ml",container="trainer"} 30'
    assert held[0].endswith(labels)
