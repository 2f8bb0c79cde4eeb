"""Issue 27: dcgm-exporter's ``dra_mig_profile`` and ``dra_mig_device_uuid`` labels of a ResourceClaim on a MIG
device, found from the DRA driver's device name and NVML's GPU instance placements (docs/dcgm.md, "DRA claims")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness import MIG_FIXTURE, fake_smi_command
from k8s_fakes import GPU1
from nvidia_gpu_exporter.app import build_backend
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.backend import NvmlBackend
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented
from nvidia_gpu_exporter.config import Backend as BackendName
from nvidia_gpu_exporter.config import Config, Profile
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


PLACEMENT_CALLS = ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo")
COLLECTIONS = 5


def mig_devices_read(
    fake_nvml: InProcessFake, *commands: str, placements: bool = True, between: tuple[str, ...] = ()
) -> list[tuple[MigDevice, ...]]:
    """The MIG devices of each of COLLECTIONS collections of one nvml backend over the fake's MIG GPU (after
    ``commands`` to it, and ``between`` after the first collection), reading placements when ``placements``."""
    fake_nvml.command("reset mig", *commands)
    backend = open_backend(FieldRequest(), watch_xids=False, mig_placements=placements)
    read: list[tuple[MigDevice, ...]] = []
    try:
        fake_nvml.reset_calls()
        for number in range(COLLECTIONS):
            extras = backend.collect_blocking().extras
            assert extras is not None
            read.append(extras.mig_devices)
            if number == 0:
                fake_nvml.command(*between)
    finally:
        backend.session.close(5)
    return read


def test_the_nvml_backend_reads_each_gpu_instances_placement(fake_nvml: InProcessFake) -> None:
    """nvmlDeviceGetGpuInstanceById then nvmlGpuInstanceGetInfo: the profile id and placement of each instance."""
    assert [(device.gpu_instance_id, device.placement) for device in mig_devices_read(fake_nvml)[-1]] == [
        (2, (2, 0, 4)),
        (2, (2, 0, 4)),
        (7, (0, 6, 1)),
    ]


@pytest.mark.parametrize(
    ("placements", "calls"),
    [
        (False, 0),  # nothing uses them: no DRA claim labels (--kubernetes.dra-claims off)
        (True, 2),  # each of the two GPU instances once, whatever the number of collections
    ],
)
def test_placements_are_read_only_when_used_and_once_per_mig_layout(
    fake_nvml: InProcessFake, placements: bool, calls: int
) -> None:
    mig_devices_read(fake_nvml, placements=placements)
    assert [fake_nvml.calls(function) for function in PLACEMENT_CALLS] == [calls, calls]


def test_without_the_dra_labels_a_mig_device_has_no_placement(fake_nvml: InProcessFake) -> None:
    assert {device.placement for device in mig_devices_read(fake_nvml, placements=False)[-1]} == {None}


def test_the_placements_follow_a_reconfigured_mig_layout(fake_nvml: InProcessFake) -> None:
    """An operator destroys the instances and creates one 2g.35gb at slices 2-3: read again once, then kept."""
    reconfigure = (
        "migclear 0",
        "mig 0 5 0 2g.35gb 37580963840 0",
        "setmig 0 0 gi_profile 5",
        "setmig 0 0 placement_start 2",
        "setmig 0 0 placement_size 2",
    )
    read = mig_devices_read(fake_nvml, between=reconfigure)
    assert [[(device.gpu_instance_id, device.placement) for device in devices] for devices in read] == [
        [(2, (2, 0, 4)), (2, (2, 0, 4)), (7, (0, 6, 1))],
        *[[(5, (5, 2, 2))]] * (COLLECTIONS - 1),
    ]
    assert [fake_nvml.calls(function) for function in PLACEMENT_CALLS] == [3, 3]  # 2 instances, then the new one


def test_without_nvmls_placement_a_mig_device_has_none(fake_nvml: InProcessFake) -> None:
    devices = mig_devices_read(fake_nvml, "rc nvmlDeviceGetGpuInstanceById 4")[-1]  # NO_PERMISSION: unprivileged
    assert {device.placement for device in devices} == {None}
    assert len(devices) == 3


@pytest.mark.parametrize("dra_claims", [False, True])
@pytest.mark.parametrize("backend", [BackendName.NVML, BackendName.EXEC])
def test_the_backends_read_placements_only_under_dra_claims(
    fake_nvml: InProcessFake, backend: BackendName, dra_claims: bool
) -> None:
    """The nvml backend, and the exec one's NVML supplement (DCGM profile), as app.py starts them."""
    fake_nvml.command("reset mig")
    config = Config(
        backend=backend,
        nvidia_smi_command=fake_smi_command(MIG_FIXTURE),
        metrics_profile=Profile.DCGM,
        kubernetes_pod_resources=dra_claims,
        kubernetes_dra_claims=dra_claims,
    )

    async def started() -> bool:
        built = await build_backend(config, watch_xids=False)
        try:
            nvml = built.nvml if isinstance(built, NvmlSupplemented) else built
            assert isinstance(nvml, NvmlBackend)
            return nvml.placements is not None
        finally:
            await built.aclose()

    assert asyncio.run(started()) is dra_claims
