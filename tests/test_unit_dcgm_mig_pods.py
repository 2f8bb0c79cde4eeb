"""The DCGM profile on MIG GPUs (GPU_I_PROFILE, GPU_I_ID) and with pod labels (docs/dcgm.md)."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.model.kubernetes import GpuPod, KubernetesAttribution, PodResourcesReading
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    Readings,
    Snapshot,
    XidRecord,
)
from test_unit_dcgm import samples
from unit_helpers import gpu_row, query_fields

PINNED = Generation.V4_8  # these tests read generation 4.8's names and units; the default is the newest
MIB = 1_048_576
MIG_GPU = "GPU-11111111-0000-4000-8000-000000000001"
WHOLE_GPU = "GPU-22222222-0000-4000-8000-000000000002"
FIELDS = query_fields(
    [
        ("temperature.gpu", "temperature.gpu"),
        ("memory.free", "memory.free [MiB]"),
        ("utilization.gpu", "utilization.gpu [%]"),
        ("driver_version", "driver_version"),
    ]
)


def h200(uuid: str, index: str, temperature: str, free: str, utilization: str) -> tuple[str, ...]:
    bus_id = f"00000000:8{3 + int(index)}:00.0"
    cells = {"temperature_gpu": temperature, "memory_free": free, "utilization_gpu": utilization}
    return gpu_row(
        FIELDS, uuid=uuid, index=index, name="NVIDIA H200", pci_bus_id=bus_id, driver_version="590.48.01", **cells
    )


ROWS = (h200(MIG_GPU, "0", "36", "126199 MiB", "[N/A]"), h200(WHOLE_GPU, "1", "30", "143000 MiB", "7 %"))
EXTRAS = NvmlExtras(
    mig_devices=(
        MigDevice(MIG_GPU, "MIG-aaaaaaaa-0000-4000-8000-000000000009", 9, 0, "1g.18gb"),
        MigDevice(MIG_GPU, "MIG-aaaaaaaa-0000-4000-8000-000000000020", 2, 0, "1c.3g.71gb"),
        MigDevice(MIG_GPU, "MIG-aaaaaaaa-0000-4000-8000-000000000021", 2, 1, "2c.3g.71gb"),
    ),
    mig_instances=(
        MigInstanceReading(MIG_GPU, 9, memory_free_bytes=16375 * MIB),
        MigInstanceReading(MIG_GPU, 2, memory_free_bytes=71402 * MIB),
    ),
)
BASE0 = f'gpu="0",UUID="{MIG_GPU}",pci_bus_id="00000000:83:00.0",device="nvidia0",modelName="NVIDIA H200"'
BASE1 = f'gpu="1",UUID="{WHOLE_GPU}",pci_bus_id="00000000:84:00.0",device="nvidia1",modelName="NVIDIA H200"'
TAIL = 'hostname="node-1",DCGM_FI_DRIVER_VERSION="590.48.01"'
GI2 = f'{BASE0},GPU_I_PROFILE="3g.71gb",GPU_I_ID="2",{TAIL}'
GI9 = f'{BASE0},GPU_I_PROFILE="1g.18gb",GPU_I_ID="9",{TAIL}'
WHOLE = f"{BASE1},{TAIL}"


def snapshot(
    extras: NvmlExtras | None = EXTRAS,
    kubernetes: KubernetesAttribution | None = None,
    xids: tuple[XidRecord, ...] = (),
) -> Snapshot:
    readings = Readings(GpuTable(ROWS), None, "13.1", extras)
    return Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0, xids=xids, kubernetes=kubernetes)


def render(snap: Snapshot, *, pod_labels: bool = False) -> list[str]:
    """The samples; XIDs are read only where the snapshot has some, so the others carry no "No Error" series."""
    return samples(
        DcgmExposition(FIELDS, "node-1", pod_labels=pod_labels, xids=bool(snap.xids), generation=PINNED).render(snap)
    )


def test_a_mig_gpu_is_served_per_gpu_instance_with_dcgm_exporters_labels() -> None:
    assert render(snapshot()) == [
        f"DCGM_FI_DEV_GPU_TEMP{{{GI2}}} 36",  # a device field: the parent's value on every GPU instance
        f"DCGM_FI_DEV_GPU_TEMP{{{GI9}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{WHOLE}}} 30",
        f"DCGM_FI_DEV_GPU_UTIL{{{WHOLE}}} 7",  # not on MIG, as DCGM
        f"DCGM_FI_DEV_FB_FREE{{{GI2}}} 71402",  # the GPU instance's own framebuffer, in MiB
        f"DCGM_FI_DEV_FB_FREE{{{GI9}}} 16375",
        f"DCGM_FI_DEV_FB_FREE{{{WHOLE}}} 143000",
    ]


def test_without_mig_inventory_a_mig_gpu_is_the_whole_gpu() -> None:
    """The exec backend knows no GPU instances: the parent's series, without MIG labels."""
    lines = render(snapshot(extras=None))
    assert f"DCGM_FI_DEV_FB_FREE{{{BASE0},{TAIL}}} 126199" in lines
    assert not [line for line in lines if "GPU_I_ID" in line]


def test_an_xid_is_the_parents_on_every_gpu_instance() -> None:
    lines = render(snapshot(xids=(XidRecord(MIG_GPU, 48, 1, 5.0),)))
    xid = [line for line in lines if line.startswith("DCGM_FI_DEV_XID_ERRORS")]
    assert xid == [
        f'DCGM_FI_DEV_XID_ERRORS{{{GI2},err_code="48",err_msg="Double Bit ECC Error"}} 48',
        f'DCGM_FI_DEV_XID_ERRORS{{{GI9},err_code="48",err_msg="Double Bit ECC Error"}} 48',
        f'DCGM_FI_DEV_XID_ERRORS{{{WHOLE},err_code="0",err_msg="No Error"}} 0',
    ]


def pod(uuid: str, name: str, mig_uuid: str = "", container: str = "main") -> GpuPod:
    return GpuPod(uuid, mig_uuid, "ml", name, container, "nvidia.com/gpu", "id")


def attribution(*pods: GpuPod) -> KubernetesAttribution:
    return KubernetesAttribution(PodResourcesReading(ok=True), gpu_pods=pods)


PARENT = "11111111-0000-4000-8000-000000000001"  # normalized, as attribution writes them
WHOLE_ID = "22222222-0000-4000-8000-000000000002"


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        (  # a whole GPU held by one container; a GPU instance held by one container
            (pod(WHOLE_ID, "trainer"), pod(PARENT, "infer", "aaaaaaaa-0000-4000-8000-000000000009")),
            {
                "GI2": "",
                "GI9": ',pod="infer",namespace="ml",container="main"',
                "WHOLE": ',pod="trainer",namespace="ml",container="main"',
            },
        ),
        (  # a GPU instance whose two compute instances two pods hold, and a time-sliced GPU: no pick is right
            (
                pod(PARENT, "a", "aaaaaaaa-0000-4000-8000-000000000020"),
                pod(PARENT, "b", "aaaaaaaa-0000-4000-8000-000000000021"),
                pod(WHOLE_ID, "a"),
                pod(WHOLE_ID, "b"),
            ),
            {"GI2": "", "GI9": "", "WHOLE": ""},
        ),
        (  # both compute instances of one GPU instance in one container
            (
                pod(PARENT, "a", "aaaaaaaa-0000-4000-8000-000000000020"),
                pod(PARENT, "a", "aaaaaaaa-0000-4000-8000-000000000021"),
            ),
            {"GI2": ',pod="a",namespace="ml",container="main"', "GI9": "", "WHOLE": ""},
        ),
    ],
    ids=["held", "shared", "one-container-two-slices"],
)
def test_pod_labels_follow_the_driver_version_label(pods: tuple[GpuPod, ...], expected: dict[str, str]) -> None:
    lines = render(snapshot(kubernetes=attribution(*pods)), pod_labels=True)
    temperatures = [line for line in lines if line.startswith("DCGM_FI_DEV_GPU_TEMP")]
    assert temperatures == [
        f"DCGM_FI_DEV_GPU_TEMP{{{GI2}{expected['GI2']}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{GI9}{expected['GI9']}}} 36",
        f"DCGM_FI_DEV_GPU_TEMP{{{WHOLE}{expected['WHOLE']}}} 30",
    ]


def test_pod_labels_come_before_the_xid_labels_and_only_when_asked_for() -> None:
    snap = snapshot(kubernetes=attribution(pod(WHOLE_ID, "trainer")), xids=(XidRecord(WHOLE_GPU, 13, 1, 1.0),))
    xid = [line for line in render(snap, pod_labels=True) if line.startswith("DCGM_FI_DEV_XID_ERRORS")]
    assert xid[-1] == (
        f'DCGM_FI_DEV_XID_ERRORS{{{WHOLE},pod="trainer",namespace="ml",container="main",err_code="13",'
        'err_msg="Graphics Engine Exception"} 13'
    )
    assert not [line for line in render(snap) if "pod=" in line]


def test_a_gpu_instance_without_its_own_reading_has_no_framebuffer_series() -> None:
    """Never the parent's framebuffer on a GPU instance: that would count the GPU's memory once per instance."""
    extras = NvmlExtras(mig_devices=EXTRAS.mig_devices, mig_instances=EXTRAS.mig_instances[1:])
    free = [line for line in render(snapshot(extras=extras)) if line.startswith("DCGM_FI_DEV_FB_FREE")]
    assert free == [f"DCGM_FI_DEV_FB_FREE{{{GI2}}} 71402", f"DCGM_FI_DEV_FB_FREE{{{WHOLE}}} 143000"]


def test_a_gpu_instances_framebuffer_is_in_whole_mib_as_dcgms() -> None:
    """NVML gives bytes; DCGM serves the instance's framebuffer in whole MiB, never a fraction of one."""
    extras = NvmlExtras(
        mig_devices=EXTRAS.mig_devices,
        mig_instances=(
            MigInstanceReading(MIG_GPU, 9, memory_free_bytes=16375 * MIB + 524288),
            MigInstanceReading(MIG_GPU, 2, memory_free_bytes=71402 * MIB + 1),
        ),
    )
    free = [line for line in render(snapshot(extras=extras)) if line.startswith("DCGM_FI_DEV_FB_FREE")]
    assert free[:2] == [f"DCGM_FI_DEV_FB_FREE{{{GI2}}} 71402", f"DCGM_FI_DEV_FB_FREE{{{GI9}}} 16375"]


def test_the_old_namespace_spells_the_uuid_and_pod_labels_as_dcgm_exporter_1x() -> None:
    """dcgm-exporter's -o (internal/pkg/collector/gpu_collector.go, transformation/kubernetes.go): ``uuid``, and
    ``pod_name``, ``pod_namespace``, ``container_name``; every other label, and the names, as without it."""
    exposition = DcgmExposition(FIELDS, "node-1", pod_labels=True, xids=False, old_namespace=True, generation=PINNED)
    lines = samples(exposition.render(snapshot(kubernetes=attribution(pod(WHOLE_ID, "trainer")))))
    whole = WHOLE.replace('UUID="', 'uuid="')
    assert f'DCGM_FI_DEV_GPU_TEMP{{{whole},pod_name="trainer",pod_namespace="ml",container_name="main"}} 30' in lines
    assert not [line for line in lines if "UUID=" in line]
