"""The collector's per-pod shares: computed with process usage and process pods on, kept across a failed usage
reading (whose energy increment the next reading's shares split), and absent when either option is off."""

from __future__ import annotations

from pathlib import Path

import pytest

from async_helpers import bounded, run
from fakes import FIELDS, FakeBackend
from k8s_fakes import HOST_SERVICE, make_proc
from nvidia_gpu_exporter.collector import Collector, _holders
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS
from nvidia_gpu_exporter.kubernetes.podresources import PodResourcesError
from nvidia_gpu_exporter.model.kubernetes import UNAVAILABLE, GpuPod, KubernetesAttribution, PodDevice
from nvidia_gpu_exporter.model.snapshot import (
    GpuExtras,
    GpuTable,
    MigDevice,
    NvmlExtras,
    PodUsage,
    ProcessList,
    ProcessRow,
    ProcessUsage,
    ProcessUsageRow,
    Readings,
    Snapshot,
)

GPU = "GPU-0000"
POD = "0a0a0a0a-0000-4000-8000-00000000000a"


def _readings(joules: float, usage_ok: bool = True, gpu: str = GPU) -> Readings:
    rows = (ProcessUsageRow(gpu, "101", "train", 50.0, None, None, None, 1.0), ProcessUsageRow(gpu, "900", "x", 50.0))
    return Readings(
        GpuTable(((gpu, "40"),)),
        ProcessList(True, (ProcessRow(gpu, "101", "train", "1 MiB"), ProcessRow(gpu, "900", "x", "1 MiB"))),
        "12.4",
        extras=NvmlExtras((GpuExtras(gpu, energy_joules=joules),)),
        process_usage=ProcessUsage(True, rows) if usage_ok else ProcessUsage(False),
    )


def _collect(
    tmp_path: Path, outcomes: list[Readings], *, usage: bool = True, pods: bool = True
) -> list[PodUsage | None]:
    proc = make_proc(tmp_path, {"101": f"0::/kubepods/besteffort/pod{POD}/{'c' * 64}\n", "900": HOST_SERVICE})
    attributor = Attributor(AttributionSettings(process_pods=pods, proc_root=str(proc)), FIELDS, source=None)

    async def main() -> list[PodUsage | None]:
        collector = Collector(
            FakeBackend(outcomes),
            timeout_seconds=None,
            attributor=attributor,
            process_usage_limit=16 if usage else None,
        )
        return [(await bounded(collector.scrape())).pod_usage for _ in outcomes]

    return run(main)


def test_a_failed_usage_reading_serves_no_pods_and_leaves_its_increment_to_the_next_shares(tmp_path: Path) -> None:
    served = _collect(tmp_path, [_readings(1000.0), _readings(1100.0, usage_ok=False), _readings(1300.0)])
    assert served[1] is None
    last = served[2]
    assert last is not None
    assert {share.pod_uid: share.energy_joules for share in last.pods} == pytest.approx({POD: 150.0})
    assert dict(last.unattributed_energy) == pytest.approx({"0000": 150.0})


@pytest.mark.parametrize(("usage", "pods"), [(False, True), (True, False)])
def test_without_both_options_there_are_no_pod_shares(tmp_path: Path, usage: bool, pods: bool) -> None:
    assert _collect(tmp_path, [_readings(1000.0)], usage=usage, pods=pods) == [None]


def test_pods_are_named_by_the_one_container_holding_a_whole_gpu_or_a_gpu_instance() -> None:
    whole, split = "GPU-AAAA", "GPU-BBBB"
    mig = [MigDevice(split, f"MIG-{gi}{ci}", gi, ci, "1g.10gb") for gi, ci in ((1, 0), (2, 0), (2, 1), (3, 0))]
    held = [
        GpuPod("aaaa", "", "ml", "train", "trainer", "nvidia.com/gpu", whole),
        GpuPod("bbbb", "10", "ml", "infer", "server", "nvidia.com/mig-1g.10gb", "MIG-10"),
        GpuPod("bbbb", "20", "ml", "a", "c", "nvidia.com/mig-1g.10gb", "MIG-20"),
        GpuPod("bbbb", "21", "ml", "b", "c", "nvidia.com/mig-1g.10gb", "MIG-21"),
    ]
    readings = Readings(GpuTable(()), None, extras=NvmlExtras(mig_devices=tuple(mig)))
    assert _holders(KubernetesAttribution(None, gpu_pods=tuple(held)), readings) == {
        ("aaaa", ""): ("ml", "train", "trainer"),
        ("bbbb", "1"): ("ml", "infer", "server"),  # instance 2 is held by two containers, 3 by none
    }


HELD = "GPU-0a0a0a0a-0000-4000-8000-0000000000aa"


class _Kubelet:
    """A PodResources source listing one idle pod holding the GPU whole, or failing."""

    socket = "/fake/kubelet.sock"

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]:
        if not self.answers.pop(0):
            raise PodResourcesError(UNAVAILABLE, "the kubelet restarts")
        return (PodDevice("ml", "notebook", "lab", "nvidia.com/gpu", HELD),)


def _allocations(tmp_path: Path, answers: list[bool]) -> list[Snapshot]:
    proc = make_proc(tmp_path, {"101": f"0::/kubepods/besteffort/pod{POD}/{'c' * 64}\n", "900": HOST_SERVICE})
    settings = AttributionSettings(
        pod_resources=True,
        cache_seconds=0.0,
        resource_patterns=DEFAULT_RESOURCE_PATTERNS,
        process_pods=True,
        proc_root=str(proc),
    )
    attributor = Attributor(settings, FIELDS, source=_Kubelet(answers))

    async def main() -> list[Snapshot]:
        collector = Collector(
            FakeBackend([_readings(1000.0, gpu=HELD) for _ in answers]),
            timeout_seconds=None,
            attributor=attributor,
            process_usage_limit=16,
        )
        return [await bounded(collector.scrape()) for _ in range(len(answers))]

    return run(main)


def test_a_pod_holding_a_gpu_gets_allocated_seconds_whether_or_not_it_runs_a_process(tmp_path: Path) -> None:
    first, second = _allocations(tmp_path, [True, True])
    assert first.pod_allocations is not None
    assert second.pod_allocations is not None
    assert [(item.uuid, item.namespace, item.pod, item.fraction) for item in second.pod_allocations] == [
        (HELD.removeprefix("GPU-"), "ml", "notebook", 1.0)
    ]
    assert second.pod_allocations[0].seconds >= first.pod_allocations[0].seconds == 0.0
    assert second.pod_usage is not None
    assert [share.used_seconds is not None for share in second.pod_usage.pods] == [True]  # the process's pod


def test_a_collection_without_the_kubelets_answer_serves_no_allocations(tmp_path: Path) -> None:
    served = _allocations(tmp_path, [True, False, True])
    assert served[1].pod_allocations is None
    assert served[2].pod_allocations is not None
    assert [item.pod for item in served[2].pod_allocations] == ["notebook"]  # kept across the failed answer
