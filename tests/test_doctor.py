"""`nvidia_gpu_exporter doctor` on fake nodes (--root), the fake nvidia-smi, a fake kubelet and a fake
Kubernetes API on loopback: each check's PASS/WARN/FAIL, the remedies, --json, and the exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from conftest import StartExporter
from harness import MIG_FIXTURE, REPO, exporter_argv, fake_smi_command
from k8s_fakes import (
    CONTAINERD_NVIDIA,
    CONTAINERD_PLAIN,
    GPU0,
    GPU1,
    MIG1,
    FakeApiServer,
    FakeKubelet,
    make_node,
    node_object,
    pod_object,
    require_grpc,
    short_socket_dir,
)
from nvidia_gpu_exporter import doctor
from nvidia_gpu_exporter.doctor.cluster import ClusterOptions, cluster_checks
from nvidia_gpu_exporter.doctor.node import (
    GpuProbe,
    NodeOptions,
    _dcgm_gpus,
    check_devices,
    check_kernel_log,
    check_pci,
    check_runtime,
    probe_gpus,
)
from nvidia_gpu_exporter.doctor.report import CheckResult, Status
from sysfs_fakes import FakeFunction, gpu, make_sysfs, nvswitch, other

ALL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "kmsg")  # kmsg: an empty log
NODE = "gpu-node-1"
TOKEN = "doctor-token"
UNREACHABLE = "http://127.0.0.1:9/metrics"  # the discard port: nothing listens there
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
CRIO_DROPIN = '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n'
CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
# The MIG fixture's two GPUs, as sysfs names their PCI functions.
FIXTURE_BUS = ("0000:07:00.0", "0000:0f:00.0")
FIXTURE_BUS_IDS = ["00000000:07:00.0", "00000000:0F:00.0"]


def with_sysfs(root: Path, functions: Sequence[FakeFunction] | None = None) -> Path:
    """The fake node with a sysfs PCI tree (by default: the fixture's GPUs, bound to nvidia)."""
    make_sysfs(root / "sys", [gpu(address) for address in FIXTURE_BUS] if functions is None else functions)
    return root


def run_doctor(
    capsys: pytest.CaptureFixture[str], *args: str, environ: Mapping[str, str] | None = None
) -> tuple[int, dict[str, CheckResult], str]:
    """Run the doctor in-process with --json; returns (exit code, results by id, stdout)."""
    code = doctor.main(["--json", *args], dict(environ or {}))
    out = capsys.readouterr().out
    document = json.loads(out)
    results = {
        check["id"]: CheckResult(check["id"], check["title"], Status(check["status"]), check["detail"], check["remedy"])
        for check in document["checks"]
    }
    assert document["exit_code"] == code
    return code, results, out


def statuses(results: Mapping[str, CheckResult]) -> dict[str, str]:
    return {key: result.status.value for key, result in results.items()}


def smi_args(*fake: str) -> tuple[str, str]:
    return ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, *fake))


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(TOKEN).start()
    yield server
    server.stop()


def healthy_cluster(api: FakeApiServer) -> None:
    api.routes[f"/api/v1/nodes/{NODE}"] = (
        200,
        node_object(
            NODE,
            {"cpu": "64", "nvidia.com/gpu": "2"},
            [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
    )
    api.routes["/api/v1/pods"] = (
        200,
        {
            "items": [
                pod_object(
                    "kube-system", "nvidia-device-plugin-daemonset-x7k2p", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
                )
            ]
        },
    )


# -- the whole checklist ----------------------------------------------------------------------------------


def test_a_healthy_node_passes_everything(
    capsys: pytest.CaptureFixture[str], exporter: StartExporter, api: FakeApiServer, tmp_path: Path
) -> None:
    require_grpc()
    with short_socket_dir() as root:
        with_sysfs(make_node(root, devices=ALL_DEVICES, containerd=CONTAINERD_NVIDIA))
        socket = root / "var/lib/kubelet/pod-resources/kubelet.sock"
        socket.parent.mkdir(parents=True)
        kubelet = FakeKubelet(socket).start()
        try:
            kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU1]), ("ml", "b", "c", "nvidia.com/mig-1g", [MIG1])])
            handle = exporter(*smi_args())
            healthy_cluster(api)
            code, results, _ = run_doctor(
                capsys,
                f"--root={root}",
                *smi_args(),
                f"--exporter-url={handle.url}/metrics",
                f"--kubeconfig={api.kubeconfig(tmp_path / 'kubeconfig')}",
                f"--node-name={NODE}",
            )
        finally:
            kubelet.stop()
    assert statuses(results) == dict.fromkeys(
        ["driver", "nvidia-smi", "gpus", "pci", "cuda", "devices", "kernel-log", "runtime", "pod-resources",
         "exporter", "kubernetes-access", "node-allocatable", "gpu-taints", "device-plugin"], "PASS",
    )  # fmt: skip
    assert code == 0
    assert results["driver"].detail == "kernel module 550.54.15 loaded"
    assert GPU0 in results["gpus"].detail
    assert "12.4" in results["cuda"].detail
    assert results["pod-resources"].detail == "List answers: 2 NVIDIA device(s) allocated to 2 container(s)"
    assert results["node-allocatable"].detail == f"node {NODE} allocatable: nvidia.com/gpu=2"
    assert ("/api/v1/pods", {"fieldSelector": [f"spec.nodeName={NODE}"]}) in api.requests


def test_a_node_without_a_driver_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = with_sysfs(
        make_node(tmp_path / "node", driver=False), [gpu(address, driver=None) for address in FIXTURE_BUS]
    )
    code, results, _ = run_doctor(
        capsys, f"--root={root}", "--nvidia-smi-command=/bin/false", f"--exporter-url={UNREACHABLE}", "--no-kubernetes"
    )
    assert code == 2
    assert statuses(results) == {
        "driver": "FAIL", "nvidia-smi": "FAIL", "gpus": "SKIP", "pci": "FAIL", "cuda": "SKIP", "devices": "FAIL",
        "kernel-log": "WARN", "runtime": "WARN", "pod-resources": "WARN", "exporter": "WARN",
    }  # fmt: skip
    assert "00000000:07:00.0 (no driver)" in results["pci"].detail
    assert "exit status 1" in results["nvidia-smi"].detail
    assert "NVML" in results["nvidia-smi"].detail  # it tried NVML as well
    assert results["driver"].remedy.startswith("install the NVIDIA driver")


def test_warnings_only_exit_1_and_the_text_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = with_sysfs(make_node(tmp_path / "node", devices=ALL_DEVICES, containerd=CONTAINERD_NVIDIA))
    args = [f"--root={root}", *smi_args(), f"--exporter-url={UNREACHABLE}", "--no-kubernetes", "--image-cuda=12.6"]
    code, results, _ = run_doctor(capsys, *args)
    assert code == 1
    assert {key for key, result in results.items() if result.status is Status.WARN} == {
        "cuda", "pod-resources", "exporter",
    }  # fmt: skip
    assert "newer than the driver supports (12.4)" in results["cuda"].detail
    assert doctor.main(args, {}) == 1
    text = capsys.readouterr().out
    assert "WARN  cuda " in text
    assert "remedy: upgrade the driver" in text
    assert text.rstrip().endswith("7 passed, 3 warnings, 0 failures, 0 skipped")


def test_the_image_cuda_default_comes_from_the_environment(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = make_node(tmp_path / "node")
    base = [f"--root={root}", *smi_args(), f"--exporter-url={UNREACHABLE}", "--no-kubernetes"]
    _, results, _ = run_doctor(capsys, *base, environ={"CUDA_VERSION": "12.2.2"})
    assert results["cuda"].status is Status.PASS
    assert results["cuda"].detail == "the driver supports CUDA 12.4; the image needs 12.2.2"
    _, results, _ = run_doctor(capsys, *base, "--image-cuda=twelve")
    assert results["cuda"].status is Status.WARN


def test_bad_arguments_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["--no-such-flag"], {}) == 3
    assert "unrecognized arguments" in capsys.readouterr().err
    assert doctor.main(["--timeout=0"], {}) == 3


def test_the_exporter_command_dispatches_doctor(tmp_path: Path) -> None:
    root = with_sysfs(make_node(tmp_path / "node", devices=ALL_DEVICES, containerd=CONTAINERD_NVIDIA))
    checks = [f"--root={root}", *smi_args(), f"--exporter-url={UNREACHABLE}", "--no-kubernetes", "--image-cuda="]
    argv = [*exporter_argv()[:3], "doctor", "--json", *checks]
    completed = subprocess.run(argv, capture_output=True, timeout=120, cwd=REPO, check=False)
    document = json.loads(completed.stdout)
    assert completed.returncode == document["exit_code"] == 1
    assert document["summary"] == {"pass": 8, "warn": 2, "fail": 0, "skip": 0}


# -- single checks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "status", "fragment"),
    [
        ({"etc/containerd/config.toml": CONTAINERD_NVIDIA}, Status.PASS, "containerd: nvidia runtime (default)"),
        ({"etc/containerd/config.toml": CONTAINERD_PLAIN}, Status.FAIL, "containerd: no nvidia runtime"),
        (
            {"var/lib/rancher/k3s/agent/etc/containerd/config.toml": CONTAINERD_NVIDIA},
            Status.PASS,
            "containerd: nvidia runtime",
        ),
        ({"etc/docker/daemon.json": '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'}, Status.PASS,
         "Docker: nvidia runtime in"),
        ({"etc/docker/daemon.json": '{"log-driver": "json-file"}'}, Status.FAIL, "Docker: no nvidia runtime"),
        ({"etc/docker/daemon.json": "{broken"}, Status.FAIL, "is not valid JSON"),
        ({"etc/crio/crio.conf.d/99-nvidia.conf": CRIO_DROPIN}, Status.PASS, "CRI-O: nvidia runtime"),
        ({"etc/containerd/config.toml": CONTAINERD_PLAIN, "var/run/cdi/nvidia.yaml": CDI_SPEC}, Status.PASS,
         "CDI: nvidia.com/gpu spec"),
        ({}, Status.WARN, "no containerd, CRI-O or Docker configuration"),
    ],
    ids=["containerd", "containerd-without", "k3s", "docker", "docker-without", "docker-broken", "crio", "cdi", "none"],
)  # fmt: skip
def test_container_runtime(tmp_path: Path, files: Mapping[str, str], status: Status, fragment: str) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    result = check_runtime(NodeOptions(root=tmp_path))
    assert result.status is status
    assert fragment in result.detail
    assert (result.remedy == "") == (status is Status.PASS)


@pytest.mark.parametrize(
    ("devices", "status", "fragment"),
    [
        (ALL_DEVICES, Status.PASS, "nvidia0, nvidia1 present"),
        (("nvidiactl", "nvidia0"), Status.WARN, "missing: nvidia-uvm"),
        (("nvidiactl", "nvidia-uvm"), Status.WARN, "missing: nvidia<N>"),
        ((), Status.FAIL, "no nvidia* device nodes"),
    ],
)
def test_device_nodes(tmp_path: Path, devices: Sequence[str], status: Status, fragment: str) -> None:
    make_node(tmp_path, driver=False, devices=devices)
    result = check_devices(NodeOptions(root=tmp_path))
    assert result.status is status
    assert fragment in result.detail


SMI = GpuProbe(
    source="nvidia-smi", gpus=[("0", "GPU-a", "NVIDIA H200"), ("1", "GPU-b", "NVIDIA H200")], bus_ids=FIXTURE_BUS_IDS
)
SMI_FIRST_ONLY = GpuProbe(source="nvidia-smi", gpus=SMI.gpus[:1], bus_ids=FIXTURE_BUS_IDS[:1])
NVML_ONE = GpuProbe(source="NVML", gpus=SMI.gpus[:1])
NOTHING = GpuProbe(smi_error="nvidia-smi: exit status 9", nvml_error="NVML: Driver Not Loaded")
ON_THE_BUS = [gpu(address) for address in FIXTURE_BUS]
PCI_CASES: dict[str, tuple[list[FakeFunction] | None, GpuProbe, Status, list[str]]] = {
    "every GPU on the bus is visible": (
        [*ON_THE_BUS, nvswitch("0000:c4:00.0"), other("0000:00:01.0")],
        SMI,
        Status.PASS,
        ["2 NVIDIA GPU(s) on the PCI bus, all visible to nvidia-smi", "1 NVSwitch"],
    ),
    "a GPU bound to vfio-pci": (
        [gpu(FIXTURE_BUS[0]), gpu(FIXTURE_BUS[1], driver="vfio-pci")],
        SMI_FIRST_ONLY,
        Status.FAIL,
        ["sysfs lists 2 NVIDIA GPU(s), nvidia-smi sees 1", "00000000:0F:00.0 (driver vfio-pci)", "lspci -k"],
    ),
    "a GPU without a driver": (
        [gpu(FIXTURE_BUS[0]), gpu(FIXTURE_BUS[1], driver=None)],
        SMI_FIRST_ONLY,
        Status.FAIL,
        ["00000000:0F:00.0 (no driver)", "modprobe nvidia"],
    ),
    "a GPU fallen off the bus": (
        ON_THE_BUS,
        SMI_FIRST_ONLY,
        Status.FAIL,
        ["00000000:0F:00.0 (driver nvidia)", "fallen off the bus", "Xid 79", "reseat", "RMA"],
    ),
    "NVML answers without bus ids": (ON_THE_BUS, NVML_ONE, Status.FAIL, ["sysfs lists 2 NVIDIA GPU(s), NVML sees 1"]),
    "neither nvidia-smi nor NVML answers": (
        [gpu(address, driver="vfio-pci") for address in FIXTURE_BUS],
        NOTHING,
        Status.FAIL,
        ["neither nvidia-smi nor NVML answered", "00000000:07:00.0 (driver vfio-pci)", "vfio-pci"],
    ),
    "no GPU on the bus": ([other("0000:00:01.0")], NOTHING, Status.FAIL, ["no NVIDIA GPU", "lspci -nn -d 10de:"]),
    "no GPU on the bus but nvidia-smi lists some": ([], SMI, Status.WARN, ["lists no NVIDIA GPU", "--root"]),
    "more GPUs visible than on the bus": (ON_THE_BUS[:1], SMI, Status.WARN, ["sysfs lists 1", "nvidia-smi sees 2"]),
    "no sysfs under the root": (None, SMI, Status.SKIP, ["sys/bus/pci/devices"]),
}


@pytest.mark.parametrize(("functions", "probe", "status", "fragments"), PCI_CASES.values(), ids=PCI_CASES.keys())
def test_gpus_on_the_pci_bus_against_the_visible_ones(
    tmp_path: Path, functions: list[FakeFunction] | None, probe: GpuProbe, status: Status, fragments: list[str]
) -> None:
    if functions is not None:
        make_sysfs(tmp_path / "sys", functions)
    result = check_pci(NodeOptions(root=tmp_path), probe)
    assert result.status is status, result
    for fragment in fragments:
        assert fragment in result.detail + " " + result.remedy, (fragment, result)
    assert (result.remedy != "") is (status is not Status.PASS)


def test_the_exporter_check_reads_its_health(
    capsys: pytest.CaptureFixture[str], exporter: StartExporter, tmp_path: Path
) -> None:
    failing = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, "--fail-arg=--query-gpu"))
    root = make_node(tmp_path / "node")
    _, results, _ = run_doctor(
        capsys, f"--root={root}", *smi_args(), f"--exporter-url={failing.url}/metrics", "--no-kubernetes"
    )
    assert results["exporter"].status is Status.FAIL
    assert "most recent collection failed" in results["exporter"].detail
    _, results, _ = run_doctor(
        capsys, f"--root={root}", *smi_args(), f"--exporter-url={failing.url}/nope", "--no-kubernetes"
    )
    assert (results["exporter"].status, results["exporter"].detail) == (
        Status.FAIL,
        f"{failing.url}/nope answers HTTP 404",
    )


@pytest.mark.parametrize(
    ("fake_args", "expected"),
    [((), (Status.PASS, "2 GPU(s)")), (("--fail-arg=--query-gpu",), (Status.FAIL, "failed"))],
)
def test_the_exporter_check_reads_the_dcgm_profiles_health_too(
    capsys: pytest.CaptureFixture[str],
    exporter: StartExporter,
    tmp_path: Path,
    fake_args: tuple[str, ...],
    expected: tuple[Status, str],
) -> None:
    """No nvidia_smi_* family under --metrics.profile=dcgm: the collection's own families say it (docs/metrics.md)."""
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, *fake_args), "--metrics.profile=dcgm")
    root = make_node(tmp_path / "node")
    _, results, _ = run_doctor(
        capsys, f"--root={root}", *smi_args(), f"--exporter-url={handle.url}/metrics", "--no-kubernetes"
    )
    assert results["exporter"].status is expected[0], results["exporter"]
    assert expected[1] in results["exporter"].detail


@pytest.mark.parametrize(
    "text",
    [
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 31\nDCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b"} 30\n',
        'DCGM_FI_DEV_GPU_TEMP_CELSIUS{gpu="0",UUID="GPU-a"} 31\nDCGM_FI_DEV_FB_FREE_BYTES{gpu="1",UUID="GPU-b"} 1\n',
        'dcgm_gpu_temp{gpu="0",uuid="GPU-a"} 31\ndcgm_gpu_temp{gpu="1",uuid="GPU-b",pod_name="p"} 30\n',
    ],
    ids=["4.8-names", "4.10-names", "old-namespace"],
)
def test_the_dcgm_gpu_count_reads_every_generations_names_and_the_old_namespace(text: str) -> None:
    assert _dcgm_gpus(text + '# HELP x y\nnvidia_gpu_exporter_collection_success{uuid="z"} 1\n') == 2


def test_the_exporter_check_warns_when_attribution_is_down(
    capsys: pytest.CaptureFixture[str], exporter: StartExporter, tmp_path: Path
) -> None:
    require_grpc()
    root = make_node(tmp_path / "node")
    with short_socket_dir() as sockets:
        down = exporter(
            *smi_args(), "--kubernetes.pod-resources", f"--kubernetes.pod-resources-socket={sockets}/none.sock"
        )
        _, results, _ = run_doctor(
            capsys, f"--root={root}", *smi_args(), f"--exporter-url={down.url}/metrics", "--no-kubernetes"
        )
    assert results["exporter"].status is Status.WARN
    assert 'attribution is down {reason="socket_missing"}' in results["exporter"].detail


# -- the Kubernetes API checks ----------------------------------------------------------------------------


def cluster(api: FakeApiServer, tmp_path: Path, environ: Mapping[str, str] | None = None) -> dict[str, CheckResult]:
    options = ClusterOptions(node_name=NODE, kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")))
    return {result.id: result for result in cluster_checks(options, environ or {})}


def test_node_problems_each_have_a_remedy(api: FakeApiServer, tmp_path: Path) -> None:
    api.routes[f"/api/v1/nodes/{NODE}"] = (200, node_object(NODE, {"cpu": "8", "nvidia.com/gpu": "0"}))
    plugin = pod_object(
        "gpu-operator", "nvidia-device-plugin-daemonset-abcde", PLUGIN_IMAGE, ready=False, phase="Pending"
    )
    api.routes["/api/v1/pods"] = (200, {"items": [plugin]})
    results = cluster(api, tmp_path)
    assert statuses(results) == {
        "kubernetes-access": "PASS", "node-allocatable": "FAIL", "gpu-taints": "WARN", "device-plugin": "FAIL",
    }  # fmt: skip
    assert "offers no nvidia.com/* resources" in results["node-allocatable"].detail
    assert results["gpu-taints"].remedy.startswith(f"kubectl taint nodes {NODE} nvidia.com/gpu=present:NoSchedule")
    assert "is Pending, not ready" in results["device-plugin"].detail
    api.routes["/api/v1/pods"] = (200, {"items": [pod_object("default", "web", "nginx:1.27")]})
    assert "no NVIDIA device plugin pod" in cluster(api, tmp_path)["device-plugin"].detail


def test_rbac_and_missing_node_are_told_apart(api: FakeApiServer, tmp_path: Path) -> None:
    api.routes[f"/api/v1/nodes/{NODE}"] = (403, {"kind": "Status", "message": f'nodes "{NODE}" is forbidden'})
    api.routes["/api/v1/pods"] = (403, {"kind": "Status", "message": "pods is forbidden"})
    results = cluster(api, tmp_path)
    assert statuses(results) == {
        "kubernetes-access": "PASS", "node-allocatable": "FAIL", "gpu-taints": "SKIP", "device-plugin": "FAIL",
    }  # fmt: skip
    assert "forbidden" in results["node-allocatable"].detail
    assert "get on nodes" in results["device-plugin"].remedy
    del api.routes[f"/api/v1/nodes/{NODE}"]
    assert "pass --node-name" in cluster(api, tmp_path)["node-allocatable"].remedy


def test_in_cluster_service_account(api: FakeApiServer, tmp_path: Path) -> None:
    healthy_cluster(api)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (account / "ca.crt").write_bytes(api.ca_pem)
    port = api.url.rsplit(":", 1)[1]
    options = ClusterOptions(node_name=NODE, service_account_dir=str(account))
    results = {
        r.id: r
        for r in cluster_checks(options, {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port})
    }
    assert results["kubernetes-access"].detail.startswith("in-cluster service account")
    assert {r.status for r in results.values()} == {Status.PASS}


def test_credentials_problems(api: FakeApiServer, tmp_path: Path) -> None:
    healthy_cluster(api)
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE), {})}
    assert statuses(results) == {"kubernetes-access": "WARN"}  # no service account, no kubeconfig, no $HOME
    stale = api.kubeconfig(tmp_path / "stale")
    stale.write_text(stale.read_text(encoding="utf-8").replace(TOKEN, "revoked-token"), encoding="utf-8")
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE, kubeconfig=str(stale)), {})}
    assert "HTTP 401" in results["node-allocatable"].detail
    plugin = tmp_path / "exec-kubeconfig"
    plugin.write_text(
        "apiVersion: v1\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:1\n"
        "users:\n- name: u\n  user:\n    exec:\n      command: aws\ncontexts:\n- name: c\n  context:\n"
        "    cluster: k\n    user: u\n",
        encoding="utf-8",
    )
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE, kubeconfig=str(plugin)), {})}
    assert results["kubernetes-access"].status is Status.FAIL
    assert "credential plugin" in results["kubernetes-access"].detail
    untrusted = tmp_path / "untrusted"
    api.kubeconfig(untrusted)
    untrusted.write_text(untrusted.read_text(encoding="utf-8").replace("    certificate-authority: ca.crt\n", ""))
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE, kubeconfig=str(untrusted)), {})}
    assert "CERTIFICATE_VERIFY_FAILED" in results["node-allocatable"].detail


def test_kubeconfig_found_through_the_environment(api: FakeApiServer, tmp_path: Path) -> None:
    healthy_cluster(api)
    path = api.kubeconfig(tmp_path / "from-env")
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE), {"KUBECONFIG": str(path)})}
    assert results["kubernetes-access"].detail.startswith(f"kubeconfig {path}")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    api.kubeconfig(home / ".kube" / "config")
    results = {r.id: r for r in cluster_checks(ClusterOptions(node_name=NODE), {"HOME": str(home)})}
    assert results["device-plugin"].status is Status.PASS


def _kmsg_line(sequence: int, message: str) -> str:
    return f"3,{sequence},{sequence * 1000},-;{message}\n"


KERNEL_LOG_CASES: dict[str, tuple[str | None, Status, list[str], str]] = {
    "no-dev-kmsg": (None, Status.WARN, ["cannot be read (absent)"], "mount the host's /dev/kmsg"),
    "empty-log": ("", Status.PASS, ["readable: 0 records, no XID"], ""),
    "application-xid-passes": (
        _kmsg_line(1, "NVRM: Xid (PCI:0000:3b:00): 13, pid=5, name=a, Graphics Exception"),
        Status.PASS,
        ["XID 13 x1", "Graphics engine exception, application"],
        "",
    ),
    "warning-xid-warns": (
        _kmsg_line(1, "NVRM: Xid (PCI:0000:3b:00): 94, pid=5, name=a, Contained ECC error"),
        Status.WARN,
        ["XID 94 x1", "Contained ECC error, warning"],
        "Restart the affected application",
    ),
    "unknown-code-warns": (_kmsg_line(1, "NVRM: Xid (PCI:0000:3b:00): 999, x"), Status.WARN, ["XID 999 x1"], "catalog"),
    "critical-xid-fails": (
        _kmsg_line(1, "NVRM: GPU at PCI:0000:3b:00: GPU-2f8e4c1a-5b6d-7e8f-9a0b-1c2d3e4f5a6b")
        + _kmsg_line(2, "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=b, GPU has fallen off the bus.")
        + _kmsg_line(3, "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=b, x"),
        Status.FAIL,
        ["XID 79 x1 on GPU GPU-2f8e4c1a", "fallen off the bus: 00000000:3B:00.0"],
        "Drain and reboot the node",
    ),
}


@pytest.mark.parametrize(
    ("log", "status", "fragments", "remedy"), KERNEL_LOG_CASES.values(), ids=KERNEL_LOG_CASES.keys()
)
def test_the_kernel_logs_xids_since_boot(
    tmp_path: Path, log: str | None, status: Status, fragments: list[str], remedy: str
) -> None:
    if log is not None:
        (tmp_path / "dev").mkdir()
        (tmp_path / "dev" / "kmsg").write_text(log, encoding="utf-8")
    result = check_kernel_log(NodeOptions(root=tmp_path))
    assert result.status is status
    for fragment in fragments:
        assert fragment in result.detail
    assert remedy in result.remedy
    assert (result.remedy == "") == (status is Status.PASS)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its reaper counts: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_the_nvidia_smi_timeout_kills_a_wrappers_children_too(tmp_path: Path) -> None:
    """As the exporter's runner does: the whole process group, not only the direct child."""
    pidfile = tmp_path / "grandchild.pid"
    wrapper = tmp_path / "nvidia-smi-wrapper"
    wrapper.write_text(f"#!/bin/sh\nsleep 60 </dev/null >/dev/null 2>&1 &\necho $! >{pidfile}\nwait\n")
    wrapper.chmod(0o755)
    probe = probe_gpus(NodeOptions(root=tmp_path, nvidia_smi_command=str(wrapper), timeout_seconds=1.0))
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # at most 5 s for the kernel to act on the SIGKILL
        if _gone(grandchild):
            break
        time.sleep(0.1)
    alive = not _gone(grandchild)
    if alive:
        os.kill(grandchild, signal.SIGKILL)
    assert not alive, "the wrapper's child outlived the doctor's nvidia-smi timeout"
    assert "no answer within 1s" in probe.smi_error
