"""GPU-seconds allocated (from the kubelet's PodResources) and used (from the measured shares) per pod: the ledger
that turns each collection's allocations and shares into counters (docs/metrics.md, "GPU-seconds")."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.exposition.podusage import allocation_families
from nvidia_gpu_exporter.model.gpuseconds import GpuSecondsLedger
from nvidia_gpu_exporter.model.kubernetes import GpuPod
from nvidia_gpu_exporter.model.snapshot import PodAllocation, PodShare


def _pod(uuid: str, pod: str, device: str, *, mig: str = "", replica: str = "", container: str = "c") -> GpuPod:
    return GpuPod(uuid, mig, "ml", pod, container, "nvidia.com/gpu", device, replica)


WHOLE = (_pod("aaaa", "train", "GPU-aaaa"),)
SLICED = (  # three replicas of one GPU: two held by pod a, one by pod b
    _pod("bbbb", "a", "GPU-bbbb::0", replica="0"),
    _pod("bbbb", "a", "GPU-bbbb::1", replica="1"),
    _pod("bbbb", "b", "GPU-bbbb::2", replica="2"),
)


def _allocated(allocations: tuple[PodAllocation, ...]) -> dict[tuple[str, str], float]:
    return {(item.uuid, item.pod): item.seconds for item in allocations}


def test_the_first_collection_is_a_baseline() -> None:
    ledger = GpuSecondsLedger()
    assert _allocated(ledger.allocate(WHOLE + SLICED, 100.0)) == {
        ("aaaa", "train"): 0.0,
        ("bbbb", "a"): 0.0,
        ("bbbb", "b"): 0.0,
    }


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        (WHOLE, {("aaaa", "train"): 10.0}),
        (SLICED, {("bbbb", "a"): 10.0 * 2 / 3, ("bbbb", "b"): 10.0 / 3}),  # the GPU's time split by devices held
        (  # two MIG devices of one GPU, each held by its own pod
            (_pod("cccc", "x", "MIG-1", mig="m1"), _pod("cccc", "y", "MIG-2", mig="m2")),
            {("cccc", "x"): 5.0, ("cccc", "y"): 5.0},
        ),
        (  # two containers of one pod holding one GPU each count once per device
            (_pod("dddd", "p", "GPU-dddd", container="one"), _pod("eeee", "p", "GPU-eeee", container="two")),
            {("dddd", "p"): 10.0, ("eeee", "p"): 10.0},
        ),
    ],
)
def test_allocated_seconds_split_each_gpus_time_among_the_devices_held(
    pods: tuple[GpuPod, ...], expected: dict[tuple[str, str], float]
) -> None:
    ledger = GpuSecondsLedger()
    ledger.allocate(pods, 100.0)
    assert _allocated(ledger.allocate(pods, 110.0)) == pytest.approx(expected)


def test_a_gpus_allocated_seconds_add_up_to_the_time_it_was_held() -> None:
    ledger = GpuSecondsLedger()
    ledger.allocate(SLICED, 0.0)
    ledger.allocate(SLICED, 7.0)
    assert sum(_allocated(ledger.allocate(SLICED, 19.0)).values()) == pytest.approx(19.0)


def test_a_pod_that_no_longer_holds_the_gpu_is_forgotten() -> None:
    ledger = GpuSecondsLedger()
    ledger.allocate(SLICED, 0.0)
    ledger.allocate(SLICED, 10.0)
    left = ledger.allocate(SLICED[:2], 20.0)
    assert _allocated(left) == pytest.approx({("bbbb", "a"): 10.0 * 2 / 3 + 10.0})  # pod a alone now
    again = ledger.allocate(SLICED, 30.0)
    assert _allocated(again)[("bbbb", "b")] == pytest.approx(10.0 / 3)  # b starts over


def test_a_clock_that_went_back_adds_nothing() -> None:
    ledger = GpuSecondsLedger()
    ledger.allocate(WHOLE, 100.0)
    ledger.allocate(WHOLE, 110.0)
    assert _allocated(ledger.allocate(WHOLE, 105.0)) == {("aaaa", "train"): 10.0}


def _share(pod_uid: str, sm: float | None, *, uuid: str = "bbbb") -> PodShare:
    return PodShare(uuid, pod_uid, sm_percent=sm, share=0.5)


def _used(shares: tuple[PodShare, ...]) -> dict[str, float | None]:
    return {share.pod_uid: share.used_seconds for share in shares}


@pytest.mark.parametrize(
    ("sm", "expected"),
    [
        (40.0, 4.0),  # 10 s at 40 % SM
        (0.0, 0.0),  # a pod whose processes idle uses nothing
        (130.0, 10.0),  # several processes' samples can sum past 100 %: a pod uses at most the whole GPU
    ],
)
def test_used_seconds_integrate_the_pods_sm_utilization(sm: float, expected: float) -> None:
    ledger = GpuSecondsLedger()
    assert _used(ledger.use((_share("u1", sm),), 100.0)) == {"u1": 0.0}
    assert _used(ledger.use((_share("u1", sm),), 110.0)) == {"u1": pytest.approx(expected)}


def test_a_pod_without_sm_utilization_has_no_used_seconds() -> None:
    """Under MIG drivers report no per-process utilization: no used counter rather than a false idle one."""
    ledger = GpuSecondsLedger()
    ledger.use((_share("u1", None),), 100.0)
    assert _used(ledger.use((_share("u1", None),), 110.0)) == {"u1": None}


def test_a_pod_gone_from_the_shares_starts_over() -> None:
    ledger = GpuSecondsLedger()
    ledger.use((_share("u1", 50.0), _share("u2", 50.0)), 0.0)
    ledger.use((_share("u1", 50.0), _share("u2", 50.0)), 10.0)
    ledger.use((_share("u1", 50.0),), 20.0)
    assert _used(ledger.use((_share("u1", 50.0), _share("u2", 50.0)), 30.0)) == {
        "u1": pytest.approx(15.0),
        "u2": pytest.approx(5.0),
    }


def test_allocations_are_served_for_the_collections_gpus_only() -> None:
    allocations = (PodAllocation("aaaa", "ml", "train", 1.0, 12.5), PodAllocation("gone", "ml", "old", 1.0, 3.0))
    (family,) = allocation_families(allocations, {"aaaa"})
    assert family.name == "nvidia_smi_pod_gpu_allocated_seconds_total"
    assert family.samples == [(("aaaa", "ml", "train"), 12.5)]
