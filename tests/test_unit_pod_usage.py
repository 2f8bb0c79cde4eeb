"""Per-pod shares of shared GPUs (time-sliced replicas, MPS clients) and the per-pod energy ledger."""

from __future__ import annotations

import math

import pytest

from nvidia_gpu_exporter.model.podusage import PodEnergyLedger, pod_shares
from nvidia_gpu_exporter.model.snapshot import PodShare, ProcessUsage, ProcessUsageRow

SLICED = "GPU-AAAAAAAA-0000-0000-0000-000000000000"
MPS = "GPU-BBBBBBBB-0000-0000-0000-000000000000"
SLICED_UUID = "aaaaaaaa-0000-0000-0000-000000000000"
MPS_UUID = "bbbbbbbb-0000-0000-0000-000000000000"
MIB = 1_048_576.0

# pid -> pod uid, as --kubernetes.process-pods reads it from each process's cgroup
PODS = {"101": "pod-a", "102": "pod-b", "103": "pod-c", "104": "pod-c", "201": "mps-a", "202": "mps-b"}


def _row(gpu: str, pid: str, sm: float | None, mib: float | None) -> ProcessUsageRow:
    return ProcessUsageRow(gpu, pid, f"p{pid}", sm, 1.0, None, None, None if mib is None else mib * MIB)


# Three pods time-sliced on one GPU (pod-c runs two processes), a host process beside them; two MPS clients
# and the MPS server (a host process here) on another.
SHARED = ProcessUsage(
    True,
    (
        _row(SLICED, "101", 30.0, 1000),
        _row(SLICED, "102", 20.0, 500),
        _row(SLICED, "103", 10.0, 250),
        _row(SLICED, "104", 5.0, 250),
        _row(SLICED, "900", 15.0, 100),
        _row(MPS, "201", 60.0, 2000),
        _row(MPS, "202", 20.0, 1000),
        _row(MPS, "300", 0.0, 30),
    ),
)
POWER = {SLICED_UUID: 400.0, MPS_UUID: 300.0}


def _by_pod(shares: tuple[PodShare, ...]) -> dict[tuple[str, str], PodShare]:
    return {(share.uuid, share.pod_uid): share for share in shares}


def test_a_pod_sums_its_processes_on_each_gpu() -> None:
    shares = _by_pod(pod_shares(SHARED, PODS, {}, POWER, 16))
    assert set(shares) == {
        (SLICED_UUID, "pod-a"),
        (SLICED_UUID, "pod-b"),
        (SLICED_UUID, "pod-c"),
        (MPS_UUID, "mps-a"),
        (MPS_UUID, "mps-b"),
    }
    pod_c = shares[(SLICED_UUID, "pod-c")]
    assert (pod_c.processes, pod_c.sm_percent, pod_c.used_memory_bytes) == (2, 15.0, 500 * MIB)


@pytest.mark.parametrize(
    ("uuid", "expected"),
    [
        (SLICED_UUID, {"pod-a": 30 / 80, "pod-b": 20 / 80, "pod-c": 15 / 80}),
        (MPS_UUID, {"mps-a": 60 / 80, "mps-b": 20 / 80}),
    ],
)
def test_a_pods_share_is_its_part_of_the_gpus_summed_process_sm(uuid: str, expected: dict[str, float]) -> None:
    shares = [share for share in pod_shares(SHARED, PODS, {}, POWER, 16) if share.uuid == uuid]
    assert {share.pod_uid: share.share for share in shares} == pytest.approx(expected)
    assert {share.pod_uid: share.power_watts for share in shares} == pytest.approx(
        {pod: POWER[uuid] * fraction for pod, fraction in expected.items()}
    )


def test_pod_sm_sums_to_the_gpus_process_sm_less_the_host_processes() -> None:
    shares = pod_shares(SHARED, PODS, {}, POWER, 16)
    by_gpu: dict[str, float] = {}
    for share in shares:
        by_gpu[share.uuid] = by_gpu.get(share.uuid, 0.0) + (share.sm_percent or 0.0)
    assert by_gpu == {SLICED_UUID: 65.0, MPS_UUID: 80.0}  # the host's 15 % and the MPS server's 0 % are no pod's


def test_with_no_sm_on_the_gpu_the_shares_follow_used_memory() -> None:
    usage = ProcessUsage(True, (_row(SLICED, "101", None, 300), _row(SLICED, "102", 0.0, 100)))
    shares = _by_pod(pod_shares(usage, PODS, {}, POWER, 16))
    assert shares[(SLICED_UUID, "pod-a")].share == pytest.approx(0.75)
    assert shares[(SLICED_UUID, "pod-b")].share == pytest.approx(0.25)


def test_with_neither_sm_nor_memory_nothing_is_attributed() -> None:
    usage = ProcessUsage(True, (_row(SLICED, "101", 0.0, None),))
    (share,) = pod_shares(usage, PODS, {}, POWER, 16)
    assert (share.share, share.power_watts) == (0.0, 0.0)


def test_a_gpu_without_a_power_reading_gives_no_power_share() -> None:
    (share,) = pod_shares(ProcessUsage(True, (_row(SLICED, "101", 10.0, 1),)), PODS, {}, {}, 16)
    assert share.power_watts is None


@pytest.mark.parametrize(
    ("holders", "expected"),
    [
        ({(SLICED_UUID, ""): ("ml", "train-0", "trainer")}, ("ml", "train-0", "trainer")),
        ({(SLICED_UUID, "1"): ("ml", "train-0", "trainer")}, ("", "", "")),  # a GPU instance's holder
        ({}, ("", "", "")),
    ],
)
def test_names_come_from_the_one_container_the_kubelet_says_holds_the_gpu(
    holders: dict[tuple[str, str], tuple[str, str, str]], expected: tuple[str, str, str]
) -> None:
    (share,) = pod_shares(ProcessUsage(True, (_row(SLICED, "101", 10.0, 1),)), PODS, holders, {}, 16)
    assert (share.namespace, share.pod, share.container) == expected


def test_a_gpu_running_two_pods_names_neither_even_with_one_listed_holder() -> None:
    usage = ProcessUsage(True, (_row(SLICED, "101", 10.0, 1), _row(SLICED, "102", 10.0, 1)))
    shares = pod_shares(usage, PODS, {(SLICED_UUID, ""): ("ml", "train-0", "trainer")}, {}, 16)
    assert {(share.namespace, share.pod, share.container) for share in shares} == {("", "", "")}


def test_the_busiest_pods_up_to_the_cap_are_kept_per_gpu() -> None:
    shares = pod_shares(SHARED, PODS, {}, POWER, 1)
    assert {(share.uuid, share.pod_uid) for share in shares} == {(SLICED_UUID, "pod-a"), (MPS_UUID, "mps-a")}
    assert _by_pod(shares)[(SLICED_UUID, "pod-a")].share == pytest.approx(30 / 80)


def test_a_failed_usage_reading_has_no_pods() -> None:
    assert pod_shares(ProcessUsage(False), PODS, {}, POWER, 16) == ()


# -- energy ---------------------------------------------------------------------------------------------------


def _energy(ledger: PodEnergyLedger, usage: ProcessUsage, energy: dict[str, float]) -> dict[tuple[str, str], float]:
    accounted = ledger.account(pod_shares(usage, PODS, {}, POWER, 16), energy)
    pods = {(share.uuid, share.pod_uid): share.energy_joules or 0.0 for share in accounted.pods}
    pods.update({(uuid, ""): joules for uuid, joules in accounted.unattributed_energy})
    return pods


def test_the_first_collection_only_takes_the_gpus_energy_as_a_baseline() -> None:
    totals = _energy(PodEnergyLedger(), SHARED, {SLICED_UUID: 5000.0, MPS_UUID: 9000.0})
    assert set(totals.values()) == {0.0}


def test_each_increment_is_split_by_the_shares_and_the_rest_is_unattributed() -> None:
    ledger = PodEnergyLedger()
    _energy(ledger, SHARED, {SLICED_UUID: 5000.0, MPS_UUID: 9000.0})
    totals = _energy(ledger, SHARED, {SLICED_UUID: 5800.0, MPS_UUID: 9400.0})
    assert totals == pytest.approx(
        {
            (SLICED_UUID, "pod-a"): 800 * 30 / 80,
            (SLICED_UUID, "pod-b"): 800 * 20 / 80,
            (SLICED_UUID, "pod-c"): 800 * 15 / 80,
            (SLICED_UUID, ""): 800 * 15 / 80,  # the host process's part
            (MPS_UUID, "mps-a"): 400 * 60 / 80,
            (MPS_UUID, "mps-b"): 400 * 20 / 80,
            (MPS_UUID, ""): 0.0,
        }
    )
    for uuid, increment in ((SLICED_UUID, 800.0), (MPS_UUID, 400.0)):
        assert math.isclose(sum(joules for (gpu, _), joules in totals.items() if gpu == uuid), increment)


def test_counters_only_grow_and_a_driver_reload_adds_nothing() -> None:
    ledger = PodEnergyLedger()
    seen = [_energy(ledger, SHARED, {SLICED_UUID: joules}) for joules in (1000.0, 1800.0, 50.0, 450.0)]
    pod_a = [totals[(SLICED_UUID, "pod-a")] for totals in seen]
    assert pod_a == pytest.approx([0.0, 300.0, 300.0, 450.0])


def test_an_ended_pods_series_is_gone_at_the_next_collection() -> None:
    ledger = PodEnergyLedger()
    _energy(ledger, SHARED, {SLICED_UUID: 1000.0})
    _energy(ledger, SHARED, {SLICED_UUID: 1800.0})
    without_a = ProcessUsage(True, tuple(row for row in SHARED.rows if row.pid != "101"))
    totals = _energy(ledger, without_a, {SLICED_UUID: 2600.0})
    assert (SLICED_UUID, "pod-a") not in totals
    back = _energy(ledger, SHARED, {SLICED_UUID: 3400.0})
    assert back[(SLICED_UUID, "pod-a")] == pytest.approx(300.0)  # a pod seen again starts over


def test_a_gpu_without_an_energy_reading_gives_its_pods_no_energy() -> None:
    accounted = PodEnergyLedger().account(pod_shares(SHARED, PODS, {}, POWER, 16), {SLICED_UUID: 10.0})
    assert {share.uuid for share in accounted.pods if share.energy_joules is None} == {MPS_UUID}
    assert dict(accounted.unattributed_energy) == {SLICED_UUID: 0.0}


def test_a_pod_on_two_gpu_instances_of_a_mig_gpu_gets_a_series_for_each() -> None:
    """MIG: no per-process SM, so the shares follow memory; the instance comes from the process list."""
    usage = ProcessUsage(
        True, (_row(SLICED, "101", None, 300), _row(SLICED, "102", None, 100), _row(SLICED, "103", None, 100))
    )
    instances = {(SLICED_UUID, "101"): "1", (SLICED_UUID, "102"): "2", (SLICED_UUID, "103"): "2"}
    pods = {"101": "pod-a", "102": "pod-a", "103": "pod-b"}
    shares = pod_shares(usage, pods, {}, POWER, 16, instances=instances)
    assert {(share.gpu_instance_id, share.pod_uid): share.share for share in shares} == pytest.approx(
        {("1", "pod-a"): 0.6, ("2", "pod-a"): 0.2, ("2", "pod-b"): 0.2}
    )
    ledger = PodEnergyLedger()
    ledger.account(shares, {SLICED_UUID: 0.0})
    accounted = ledger.account(shares, {SLICED_UUID: 100.0})
    assert {(share.gpu_instance_id, share.pod_uid): share.energy_joules for share in accounted.pods} == pytest.approx(
        {("1", "pod-a"): 60.0, ("2", "pod-a"): 20.0, ("2", "pod-b"): 20.0}
    )


def test_a_gpu_instance_one_container_holds_names_the_one_pod_running_there() -> None:
    usage = ProcessUsage(
        True, (_row(SLICED, "101", None, 300), _row(SLICED, "102", None, 100), _row(SLICED, "103", None, 100))
    )
    instances = {(SLICED_UUID, "101"): "1", (SLICED_UUID, "102"): "2", (SLICED_UUID, "103"): "2"}
    holders = {(SLICED_UUID, "1"): ("ml", "train-0", "trainer"), (SLICED_UUID, "2"): ("ml", "serve-0", "server")}
    shares = pod_shares(usage, PODS, holders, {}, 16, instances=instances)
    assert {(share.gpu_instance_id, share.pod_uid): share.pod for share in shares} == {
        ("1", "pod-a"): "train-0",
        ("2", "pod-b"): "",  # two pods run on instance 2: its one listed holder names neither
        ("2", "pod-c"): "",
    }
