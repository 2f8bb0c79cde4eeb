"""The DCGM profile on shared GPUs (docs/dcgm.md, "Per-pod shares"): a time-sliced or MPS GPU's utilization,
power, memory and energy series are split per pod by each pod's own share, the rest stays on the series without
pod labels, and the per-GPU fields stay per GPU; a GPU instance of a MIG GPU is split by its pods' memory."""

from __future__ import annotations

import re

import pytest

from harness import REPO
from nvidia_gpu_exporter.exposition.dcgm import SPLIT_BY_MEMORY, SPLIT_BY_SHARE, DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.model.kubernetes import GpuPod, KubernetesAttribution, PodResourcesReading
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuExtras,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    PodShare,
    PodUsage,
    Readings,
    Snapshot,
)
from test_unit_dcgm import samples
from unit_helpers import gpu_row, query_fields

PINNED = Generation.V4_8  # these tests read generation 4.8's names and units; the default is the newest
MIB = 1_048_576
SHARED = "GPU-33333333-0000-4000-8000-000000000003"
MIG = "GPU-44444444-0000-4000-8000-000000000004"
SHARED_UUID = SHARED.removeprefix("GPU-").lower()
MIG_UUID = MIG.removeprefix("GPU-").lower()
FIELDS = query_fields(
    [
        ("temperature.gpu", "temperature.gpu"),
        ("power.draw", "power.draw [W]"),
        ("utilization.gpu", "utilization.gpu [%]"),
        ("memory.used", "memory.used [MiB]"),
    ]
)
ROWS = (
    gpu_row(
        FIELDS, uuid=SHARED, index="0", name="NVIDIA H200", pci_bus_id="00000000:83:00.0",
        temperature_gpu="40", power_draw="400.00 W", utilization_gpu="80 %", memory_used="10000 MiB",
    ),
    gpu_row(
        FIELDS, uuid=MIG, index="1", name="NVIDIA H200", pci_bus_id="00000000:84:00.0",
        temperature_gpu="35", power_draw="200.00 W", utilization_gpu="[N/A]", memory_used="9000 MiB",
    ),
)  # fmt: skip
EXTRAS = NvmlExtras(
    gpus=(GpuExtras(SHARED, energy_joules=1000.0), GpuExtras(MIG, energy_joules=500.0)),
    mig_devices=(
        MigDevice(MIG, "MIG-aaaaaaaa-0000-4000-8000-000000000001", 1, 0, "3g.71gb"),
        MigDevice(MIG, "MIG-aaaaaaaa-0000-4000-8000-000000000002", 2, 0, "3g.71gb"),
    ),
    mig_instances=(
        MigInstanceReading(MIG, 1, memory_used_bytes=4000 * MIB, graphics_activity_ratio=0.5),
        MigInstanceReading(MIG, 2, memory_used_bytes=5000 * MIB, graphics_activity_ratio=0.2),
    ),
)
POD_A, POD_B, POD_C = "0a0a0a0a-0000-4000-8000-00000000000a", "0b0b0b0b-0000-4000-8000-00000000000b", "0c0c"
POD_M1, POD_M2 = "0d0d0d0d-0000-4000-8000-00000000000d", "0e0e0e0e-0000-4000-8000-00000000000e"
PODS = PodUsage(
    (
        # Three pods time-sliced on SHARED (a host process holds the last 10 %), two pods on MIG's instances.
        PodShare(SHARED_UUID, POD_A, used_memory_bytes=5000 * MIB, share=0.5, energy_joules=50.0),
        PodShare(SHARED_UUID, POD_B, used_memory_bytes=3000 * MIB, share=0.25, energy_joules=25.0),
        PodShare(SHARED_UUID, POD_C, used_memory_bytes=1000 * MIB, share=0.15, energy_joules=15.0),
        PodShare(MIG_UUID, POD_M1, "1", used_memory_bytes=3000 * MIB, share=3 / 9),
        PodShare(MIG_UUID, POD_M2, "2", used_memory_bytes=5000 * MIB, share=5 / 9),
    ),
    ((SHARED_UUID, 10.0), (MIG_UUID, 0.0)),
)


def snapshot(pods: PodUsage | None = PODS, kubernetes: KubernetesAttribution | None = None) -> Snapshot:
    readings = Readings(GpuTable(ROWS), None, "13.1", EXTRAS)
    return Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0, kubernetes=kubernetes, pod_usage=pods)


def values(snap: Snapshot, family: str, *, pod_labels: bool = False) -> dict[tuple[str, str, str], float]:
    """(uuid, GPU_I_ID, pod_uid) -> value of one family's series."""
    found: dict[tuple[str, str, str], float] = {}
    text = DcgmExposition(FIELDS, None, pod_labels=pod_labels, gpm=True, xids=False, generation=PINNED).render(snap)
    for line in samples(text):
        name, _, rest = line.partition("{")
        if name != family:
            continue
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(pair.split("=", 1) for pair in labels_text.split(","))
        key = tuple(labels.get(label, '""').strip('"') for label in ("UUID", "GPU_I_ID", "pod_uid"))
        found[key] = float(value)  # type: ignore[index]
    return found


@pytest.mark.parametrize(
    ("family", "gpu_value", "pods"),
    [
        ("DCGM_FI_DEV_GPU_UTIL", 80.0, {POD_A: 40.0, POD_B: 20.0, POD_C: 12.0}),
        ("DCGM_FI_DEV_POWER_USAGE", 400.0, {POD_A: 200.0, POD_B: 100.0, POD_C: 60.0}),
        ("DCGM_FI_DEV_FB_USED", 10000.0, {POD_A: 5000.0, POD_B: 3000.0, POD_C: 1000.0}),  # each pod's own memory
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1_000_000.0, {POD_A: 50_000.0, POD_B: 25_000.0, POD_C: 15_000.0}),
    ],
    ids=["utilization", "power", "memory", "energy"],
)
def test_a_shared_gpus_pods_get_their_own_part_and_the_rest_stays_unlabelled(
    family: str, gpu_value: float, pods: dict[str, float]
) -> None:
    served = values(snapshot(), family)
    on_gpu = {pod: value for (uuid, _, pod), value in served.items() if uuid == SHARED}
    assert {pod: value for pod, value in on_gpu.items() if pod} == pytest.approx(pods)
    assert sum(on_gpu.values()) == pytest.approx(gpu_value)  # the parts add up to the GPU's value
    assert on_gpu[""] == pytest.approx(gpu_value - sum(pods.values()))


def test_per_gpu_fields_stay_one_series_per_gpu() -> None:
    assert values(snapshot(), "DCGM_FI_DEV_GPU_TEMP") == {
        (SHARED, "", ""): 40.0,
        (MIG, "1", ""): 35.0,
        (MIG, "2", ""): 35.0,
    }


def test_a_mig_gpu_instances_pods_share_it_by_their_memory() -> None:
    activity = values(snapshot(), "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    mig = {key: value for key, value in activity.items() if key[0] == MIG}
    assert mig == pytest.approx(
        {
            (MIG, "1", POD_M1): 0.5 * 3000 / 4000, (MIG, "1", ""): 0.5 * 1000 / 4000,
            (MIG, "2", POD_M2): 0.2, (MIG, "2", ""): 0.0,
        }
    )  # fmt: skip
    memory = values(snapshot(), "DCGM_FI_DEV_FB_USED")
    assert {key: value for key, value in memory.items() if key[0] == MIG} == {
        (MIG, "1", POD_M1): 3000.0, (MIG, "1", ""): 1000.0, (MIG, "2", POD_M2): 5000.0, (MIG, "2", ""): 0.0,
    }  # fmt: skip


def test_without_pod_shares_nothing_is_split() -> None:
    assert set(values(snapshot(None), "DCGM_FI_DEV_GPU_UTIL")) == {(SHARED, "", "")}


def test_a_gpu_one_container_holds_keeps_its_pod_labels_unsplit() -> None:
    held = KubernetesAttribution(
        PodResourcesReading(True),
        gpu_pods=(GpuPod(SHARED_UUID, "", "ml", "trainer", "main", "nvidia.com/gpu", SHARED),),
    )
    only = PodUsage((PodShare(SHARED_UUID, POD_A, namespace="ml", pod="trainer", container="main", share=1.0),))
    text = DcgmExposition(FIELDS, None, pod_labels=True, xids=False, generation=PINNED).render(snapshot(only, held))
    utilization = [line for line in samples(text) if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert utilization == [
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-33333333-0000-4000-8000-000000000003",pci_bus_id="00000000:83:00.0",'
        'device="nvidia0",modelName="NVIDIA H200",pod="trainer",namespace="ml",container="main"} 80'
    ]


def test_pod_names_the_kubelet_gives_go_on_the_pods_series() -> None:
    named = PodUsage((PodShare(SHARED_UUID, POD_A, namespace="ml", pod="nb-1", container="lab", share=0.5),))
    text = DcgmExposition(FIELDS, None, xids=False, generation=PINNED).render(snapshot(named))
    assert (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-33333333-0000-4000-8000-000000000003",pci_bus_id="00000000:83:00.0",'
        f'device="nvidia0",modelName="NVIDIA H200",pod="nb-1",namespace="ml",container="lab",pod_uid="{POD_A}"}} 40'
    ) in samples(text)


def test_the_docs_list_the_fields_split_by_share_as_the_code_does() -> None:
    text = (REPO / "docs" / "dcgm.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "<!-- split-by-share -->" in line)
    assert set(re.findall(r"`(DCGM_FI_[A-Z0-9_]+)`", row)) == SPLIT_BY_SHARE
    assert f"| the pod's own memory | `{SPLIT_BY_MEMORY}` |" in text


def test_a_pod_on_two_instances_of_a_gpu_served_whole_is_one_part() -> None:
    """The exec backend serves a MIG GPU whole; a pod in two of its GPU instances is one series, with the sums."""
    twice = PodUsage(
        (
            PodShare(SHARED_UUID, POD_A, "1", used_memory_bytes=1000 * MIB, share=0.25, energy_joules=1.0),
            PodShare(SHARED_UUID, POD_A, "2", used_memory_bytes=2000 * MIB, share=0.5, energy_joules=2.0),
        )
    )
    assert values(snapshot(twice), "DCGM_FI_DEV_FB_USED") == {
        (SHARED, "", ""): 7000.0, (SHARED, "", POD_A): 3000.0, (MIG, "1", ""): 4000.0, (MIG, "2", ""): 5000.0,
    }  # fmt: skip
    assert values(snapshot(twice), "DCGM_FI_DEV_POWER_USAGE")[(SHARED, "", POD_A)] == pytest.approx(300.0)
