"""ResourceClaim (Dynamic Resource Allocation) devices from PodResources (``--kubernetes.dra-claims``): NVIDIA's DRA
driver's devices placed on their GPUs by minor number, the others left out, and the labels against the real
server with a fake kubelet."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import series
from harness import MIG_FIXTURE, fake_smi_command
from k8s_fakes import GPU0, GPU1, FakeKubelet, require_grpc, response
from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor
from nvidia_gpu_exporter.kubernetes.podresources import flatten
from nvidia_gpu_exporter.model.kubernetes import DraClaim, KubernetesAttribution, PodDevice
from nvidia_gpu_exporter.model.snapshot import GpuTable, Readings
from unit_helpers import gpu_row, query_fields

FIELDS = query_fields([("pci.bus_id", "pci.bus_id")])
ROWS = (
    gpu_row(FIELDS, uuid=GPU0, index="0", pci_bus_id="00000000:07:00.0"),
    gpu_row(FIELDS, uuid=GPU1, index="1", pci_bus_id="00000000:0F:00.0"),
)
G0, G1 = GPU0.removeprefix("GPU-"), GPU1.removeprefix("GPU-")
DRIVER = "gpu.nvidia.com"
MINORS = {"0000:07:00.0": 3, "0000:0f:00.0": 0}  # minor numbers need not follow the index


def claim(pod: str, device: str, driver: str = DRIVER, name: str = "") -> PodDevice:
    return PodDevice("ml", pod, "main", "", device, "ml", name or f"{pod}-gpu", driver, "node-1")


def make_proc(root: Path) -> Path:
    """The driver's per-GPU information files, as /proc/driver/nvidia/gpus has them."""
    proc = root / "proc"
    for address, minor in MINORS.items():
        directory = proc / "driver" / "nvidia" / "gpus" / address
        directory.mkdir(parents=True)
        lines = [
            "Model: \t\t NVIDIA A100-SXM4-80GB",
            "IRQ:   \t\t 150",
            f"Device Minor: \t {minor}",
            f"Bus: \t {address}",
        ]
        (directory / "information").write_text("\n".join(lines) + "\n")
    return proc


class Source:
    socket = "/fake.sock"

    def __init__(self, devices: tuple[PodDevice, ...]) -> None:
        self.devices = devices

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]:
        return self.devices


def attribute(devices: tuple[PodDevice, ...], proc: Path, *, dra_claims: bool = True) -> KubernetesAttribution:
    settings = AttributionSettings(
        pod_resources=True, socket="/fake.sock", cache_seconds=0.0, resource_patterns=("nvidia.com/gpu",),
        proc_root=str(proc), dra_claims=dra_claims,
    )  # fmt: skip
    attributor = Attributor(settings, FIELDS, source=Source(devices))

    async def both() -> KubernetesAttribution:
        return await attributor.attribute(await attributor.fetch(), Readings(GpuTable(ROWS), None))

    return asyncio.run(both())


def test_nvidia_dra_devices_land_on_the_gpu_of_their_minor_number(tmp_path: Path) -> None:
    devices = (
        claim("train", "gpu-3"),
        claim("infer", "gpu-0-mig-19-0-1"),  # a MIG device: its parent GPU
        claim("other", "gpu-7"),  # no GPU read has minor 7
        claim("nic", "eth-0", driver="rdma.example.com"),  # another driver's device: not ours
    )
    result = attribute(devices, make_proc(tmp_path))
    assert result.claims == (
        DraClaim(G0, "ml", "train", "main", "ml", "train-gpu", DRIVER, "node-1", "gpu-3"),
        DraClaim(G1, "ml", "infer", "main", "ml", "infer-gpu", DRIVER, "node-1", "gpu-0-mig-19-0-1"),
        DraClaim("", "ml", "other", "main", "ml", "other-gpu", DRIVER, "node-1", "gpu-7"),
    )
    assert result.unmatched == ()  # claim devices are no device plugin's unmatched devices
    assert result.gpu_pods == ()


def test_without_the_drivers_files_no_device_is_placed(tmp_path: Path) -> None:
    result = attribute((claim("train", "gpu-3"),), tmp_path / "empty")
    assert result.claims is not None
    assert [found.uuid for found in result.claims] == [""]


def test_claims_are_off_unless_asked_for(tmp_path: Path) -> None:
    assert attribute((claim("train", "gpu-3"),), make_proc(tmp_path), dra_claims=False).claims is None


def test_label_values_are_bounded(tmp_path: Path) -> None:
    result = attribute((claim("train", "gpu-3", name="c" * 1000),), make_proc(tmp_path))
    assert result.claims is not None
    assert result.claims[0].claim_name == "c" * 253


def test_the_flag_needs_the_kubelet_source() -> None:
    with pytest.raises(ConfigError, match=r"--kubernetes\.dra-claims requires --kubernetes\.pod-resources"):
        validate(dataclasses.replace(Config(), kubernetes_dra_claims=True))


def test_flatten_reads_the_dynamic_resources_of_each_container() -> None:
    require_grpc()
    answer = response(
        [("ml", "train", "main", "nvidia.com/gpu", [GPU0])],
        [("ml", "train", "main", "ml", "train-gpu", DRIVER, "node-1", "gpu-3")],
    )
    assert flatten(answer) == (
        PodDevice("ml", "train", "main", "nvidia.com/gpu", GPU0),
        PodDevice("ml", "train", "main", "", "gpu-3", "ml", "train-gpu", DRIVER, "node-1"),
    )


def test_the_real_server_serves_the_claims_of_a_fake_kubelet(
    exporter: StartExporter, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    require_grpc()
    kubelet.claims = [
        ("ml", "train", "main", "ml", "train-gpu", DRIVER, "node-1", "gpu-3"),
        ("ml", "infer", "main", "ml", "infer-gpu", DRIVER, "node-1", "gpu-0-mig-19-0-1"),
    ]
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(MIG_FIXTURE, "--state", "load"),
        "--kubernetes.pod-resources",
        f"--kubernetes.pod-resources-socket={kubelet.path}",
        "--kubernetes.pod-resources-cache=0s",
        "--kubernetes.dra-claims",
        f"--kubernetes.proc-root={make_proc(tmp_path)}",
        "--metrics.profile=both",
        "--dcgm.compatibility=4.8",  # the DCGM names below are 4.8's
    )
    text = handle.scrape()
    served = {
        (s.labels["uuid"], s.labels["pod"], s.labels["claim_name"], s.labels["device"])
        for s in series(text, "nvidia_smi_gpu_dra_claim_info")
    }
    assert served == {(G0, "train", "train-gpu", "gpu-3"), (G1, "infer", "infer-gpu", "gpu-0-mig-19-0-1")}
    # dcgm-exporter's --kubernetes-enable-dra labels: each claimed GPU's series name the claim (docs/dcgm.md).
    dcgm = {
        (s.labels["UUID"], s.labels["pod"], s.labels["dra_claim_name"], s.labels["dra_device_name"])
        for s in series(text, "DCGM_FI_DEV_GPU_TEMP")
    }
    assert dcgm == {(GPU0, "train", "train-gpu", "gpu-3"), (GPU1, "infer", "infer-gpu", "gpu-0-mig-19-0-1")}
    kubelet.claims = kubelet.claims[:1]  # the inference pod's claim is released
    assert {s.labels["pod"] for s in series(handle.scrape(), "nvidia_smi_gpu_dra_claim_info")} == {"train"}
