"""Issue 27: dcgm-exporter's ``dra_mig_profile`` and ``dra_mig_device_uuid`` labels of a ResourceClaim on a MIG
device, found from the DRA driver's device name and NVML's GPU instance placements (docs/dcgm.md, "DRA claims")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from k8s_fakes import GPU1
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor
from nvidia_gpu_exporter.model.kubernetes import DraClaim, KubernetesAttribution, PodDevice
from nvidia_gpu_exporter.model.snapshot import GpuTable, MigDevice, NvmlExtras, Readings
from nvml_fixtures import InProcessFake
from test_k8s_dra import DRIVER, FIELDS, G1, ROWS, Source, claim, make_proc
from test_unit_dcgm_dra import MIG_UUID, attribution, dra, temperatures
from test_unit_dcgm_mig_pods import GI2, GI9

MIG_A = "MIG-5f2b7c1d-0a3e-5b8f-9c2d-1e4f6a7b8c90"
MIG_B = "MIG-6a3c8d2e-1b4f-5c9a-8d3e-2f5a7b8c9d01"
DEVICES = (
    MigDevice(GPU1, MIG_A, 2, 0, "3g.71gb", placement=(2, 0, 4)),
    MigDevice(GPU1, MIG_B, 9, 0, "1g.18gb", placement=(9, 4, 1)),
)


def readings_with(devices: tuple[MigDevice, ...]) -> Readings:
    return Readings(GpuTable(ROWS), None, "12.4", NvmlExtras(mig_devices=devices))


def attribute(devices: tuple[PodDevice, ...], proc: Path, readings: Readings) -> KubernetesAttribution:
    settings = AttributionSettings(
        pod_resources=True, socket="/fake.sock", cache_seconds=0.0, resource_patterns=("nvidia.com/gpu",),
        proc_root=str(proc), dra_claims=True,
    )  # fmt: skip
    attributor = Attributor(settings, FIELDS, source=Source(devices))

    async def both() -> KubernetesAttribution:
        return await attributor.attribute(await attributor.fetch(), readings)

    return asyncio.run(both())


def test_a_mig_claim_names_the_gpu_instance_at_its_placement(tmp_path: Path) -> None:
    """gpu-<parent minor>-mig-<GI profile id>-<placement start>-<size>: the DRA driver's canonical MIG name."""
    devices = (claim("infer", "gpu-0-mig-9-4-1"), claim("train", "gpu-0-mig-2-0-4"))
    result = attribute(devices, make_proc(tmp_path), readings_with(DEVICES))
    assert result.claims == (
        DraClaim(G1, "ml", "infer", "main", "ml", "infer-gpu", DRIVER, "node-1", "gpu-0-mig-9-4-1", "1g.18gb", MIG_B),
        DraClaim(G1, "ml", "train", "main", "ml", "train-gpu", DRIVER, "node-1", "gpu-0-mig-2-0-4", "3g.71gb", MIG_A),
    )


def test_a_mig_claim_without_a_gpu_instance_there_has_no_mig_labels(tmp_path: Path) -> None:
    """No GPU instance at that placement, or NVML could not say where they are (it needs privileges)."""
    unplaced = tuple(MigDevice(d.gpu_uuid, d.mig_uuid, d.gpu_instance_id, 0, d.profile) for d in DEVICES)
    for number, devices in enumerate((DEVICES, unplaced)):
        proc = make_proc(tmp_path / str(number))
        result = attribute((claim("infer", "gpu-0-mig-9-0-1"),), proc, readings_with(devices))
        assert result.claims is not None
        assert [(found.uuid, found.mig_profile, found.mig_uuid) for found in result.claims] == [(G1, "", "")]


def test_the_mig_labels_follow_the_claims_other_dra_labels() -> None:
    """As dcgm-exporter's kubernetes.go sets them on every series of the parent GPU the claim is keyed by."""
    device = "gpu-0-mig-9-0-1"
    found = DraClaim(MIG_UUID, "ml", "infer", "main", "ml", "gpu-claim", DRIVER, "node-1", device, "1g.10gb", MIG_A)
    labels = (
        f'pod="infer",namespace="ml",container="main",{dra(device=device)},'
        f'dra_mig_profile="1g.10gb",dra_mig_device_uuid="{MIG_A}"'
    )
    assert temperatures(attribution(found))[:2] == [
        f"DCGM_FI_DEV_GPU_TEMP{{{GI2},{labels}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{GI9},{labels}}} 36",
    ]


def mig_devices_read(fake_nvml: InProcessFake, *commands: str) -> tuple[MigDevice, ...]:
    """One collection of the nvml backend over the fake's MIG GPU (and ``commands`` to it)."""
    fake_nvml.command("reset mig", *commands)
    backend = open_backend(FieldRequest(), watch_xids=False)
    try:
        readings = backend.collect_blocking()
    finally:
        backend.session.close(5)
    assert readings.extras is not None
    return readings.extras.mig_devices


def test_the_nvml_backend_reads_each_gpu_instances_placement(fake_nvml: InProcessFake) -> None:
    """nvmlDeviceGetGpuInstanceById then nvmlGpuInstanceGetInfo: the profile id and placement of each instance."""
    assert [(device.gpu_instance_id, device.placement) for device in mig_devices_read(fake_nvml)] == [
        (2, (2, 0, 4)),
        (2, (2, 0, 4)),
        (7, (0, 6, 1)),
    ]


def test_without_nvmls_placement_a_mig_device_has_none(fake_nvml: InProcessFake) -> None:
    devices = mig_devices_read(fake_nvml, "rc nvmlDeviceGetGpuInstanceById 4")  # NO_PERMISSION: unprivileged
    assert {device.placement for device in devices} == {None}
    assert len(devices) == 3
