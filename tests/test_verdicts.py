"""The verdict per GPU (docs/health.md, "Verdicts"): every reason of the table fires on its input, holds for its
time after the evidence last moved, then expires; the table in the docs is the code's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from nvidia_gpu_exporter.backends.demo.extras import REASON_SCENARIOS
from nvidia_gpu_exporter.exposition.text import render_family
from nvidia_gpu_exporter.exposition.verdicts import verdict_families
from nvidia_gpu_exporter.model import judge as judge_module
from nvidia_gpu_exporter.model.judge import Judgement, VerdictMemory, judge
from nvidia_gpu_exporter.model.pcibus import PciFunction, PciInventory, PciKind
from nvidia_gpu_exporter.model.snapshot import (
    FallenGpu,
    GpuTable,
    QueryField,
    Readings,
    Snapshot,
    StuckChildren,
    XidRecord,
)
from nvidia_gpu_exporter.model.verdicts import REASONS, GpuVerdict, Reason, State, Subsystem, SubsystemVerdict, Xids
from unit_helpers import gpu_row, query_fields, success_snapshot

REPO = Path(__file__).resolve().parents[1]
T0 = 1_800_000_000.0
UUID = "GPU-2f8e4c1a-5b6d-7e8f-9a0b-1c2d3e4f5a6b"
PCI = "00000000:3B:00.0"

HEALTHY = {
    "uuid": UUID,
    "pci.bus_id": PCI,
    "ecc.errors.uncorrected.volatile.total": "0",
    "ecc.errors.uncorrected.aggregate.total": "0",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "retired_pages.pending": "No",
    "pcie.link.width.current": "16",
    "pcie.link.width.max": "16",
    "clocks_event_reasons.hw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.sw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.hw_power_brake_slowdown": "Not Active",
    "clocks_event_reasons.sw_power_cap": "Not Active",
    "temperature.gpu.tlimit": "30",
    "fabric.state": "Completed",
    "fabric.status": "Success",
    "gpu_recovery_action": "None",
}
FIELDS: list[QueryField] = query_fields((name, name) for name in HEALTHY if name not in ("uuid", "pci.bus_id"))


def snapshot(
    *,
    cells: dict[str, str] | None = None,
    xids: tuple[XidRecord, ...] = (),
    fallen: tuple[FallenGpu, ...] = (),
    pci: PciInventory | None = None,
    stuck: int = 0,
    read: bool = True,
) -> Snapshot:
    """A collection of the one GPU (or a failed one, ``read=False``) with these inputs."""
    row = gpu_row(FIELDS, **{name.replace(".", "_"): text for name, text in {**HEALTHY, **(cells or {})}.items()})
    base = success_snapshot([row])
    if not read:
        base = replace(base, attempt=None)
    return replace(base, xids=xids, gpus_fallen_off=fallen, pci=pci, stuck_children=StuckChildren(stuck, stuck))


@dataclass(frozen=True)
class Fault:
    """A reason's input: the faulty snapshot at a time, and the words its evidence must hold."""

    make: Callable[[float], Snapshot]
    evidence: str


def _xid(code: int) -> Fault:
    return Fault(lambda at: snapshot(xids=(XidRecord(UUID, code, 2, at),)), f"XID {code} x2")


def _cell(field: str, text: str) -> Fault:
    return Fault(lambda _: snapshot(cells={field: text}), f"{field} = {text}")


LOST_PCI = PciInventory((PciFunction(PCI, PciKind.GPU, "0x2335", "nvidia"),))

FAULTS: dict[str, Fault] = {
    "uncorrectable_ecc_volatile": _cell("ecc.errors.uncorrected.volatile.total", "2"),
    "uncorrectable_ecc_aggregate_rose": Fault(
        lambda _: snapshot(cells={"ecc.errors.uncorrected.aggregate.total": "3"}),
        "ecc.errors.uncorrected.aggregate.total rose from 0 to 3",
    ),
    "remapped_rows_pending": _cell("remapped_rows.pending", "Yes"),
    "remapped_rows_failure": _cell("remapped_rows.failure", "Yes"),
    "retired_pages_pending": _cell("retired_pages.pending", "Yes"),
    "xid_uncorrectable_memory": _xid(48),
    "xid_memory_repair_failed": _xid(64),
    "xid_memory_repair_pending": _xid(63),
    "xid_contained_memory": _xid(94),
    "link_width_below_max": Fault(
        lambda _: snapshot(cells={"pcie.link.width.current": "8"}), "pcie.link.width.current = 8 (max 16)"
    ),
    "fallen_off_bus": Fault(lambda _: snapshot(fallen=(FallenGpu(UUID, PCI),)), "fell off the bus"),
    "hw_thermal_slowdown": _cell("clocks_event_reasons.hw_thermal_slowdown", "Active"),
    "sw_thermal_slowdown": _cell("clocks_event_reasons.sw_thermal_slowdown", "Active"),
    "near_slowdown_temperature": _cell("temperature.gpu.tlimit", "3"),
    "hw_power_brake": _cell("clocks_event_reasons.hw_power_brake_slowdown", "Active"),
    "sustained_power_cap": _cell("clocks_event_reasons.sw_power_cap", "Active"),
    "xid_nvlink": _xid(74),
    "xid_c2c_link": _xid(121),
    "fabric_not_ready": _cell("fabric.state", "In Progress"),
    "fabric_failed": Fault(
        lambda _: snapshot(cells={"fabric.status": "Timeout"}), "fabric.state = Completed, fabric.status = Timeout"
    ),
    "recovery_action_reset": _cell("gpu_recovery_action", "GPU Reset"),
    "recovery_action_reboot": _cell("gpu_recovery_action", "Node Reboot"),
    "recovery_action_drain_p2p": _cell("gpu_recovery_action", "Drain P2P"),
    "xid_gpu_halted": _xid(119),
    "xid_init_failure": _xid(143),
    "xid_driver_warning": _xid(61),
    "missing_from_driver": Fault(
        lambda _: lost_snapshot(),
        f"the PCI bus lists {PCI}, the driver does not",
    ),
    "stuck_nvidia_smi": Fault(lambda _: snapshot(stuck=1), "1 nvidia-smi children SIGKILL did not end"),
}


def lost_snapshot() -> Snapshot:
    """The PCI bus lists the GPU; the successful collection has no GPU at all."""
    base = snapshot(pci=LOST_PCI)
    assert base.attempt is not None
    return replace(base, attempt=replace(base.attempt, readings=Readings(GpuTable(()), None)))


class Clock:
    """Verdicts in sequence, each at its own time, the memory carried from one to the next."""

    def __init__(self) -> None:
        self.memory = VerdictMemory()

    def at(self, now: float, snap: Snapshot) -> Judgement:
        judgement = judge(snap, FIELDS, self.memory, now)
        self.memory = judgement.memory
        return judgement


def verdict_of(judgement: Judgement) -> GpuVerdict:
    (verdict,) = [gpu for gpu in judgement.verdicts if gpu.pci_bus_id == PCI or gpu.uuid == UUID]
    return verdict


def fire(clock: Clock, reason: Reason, start: float = T0) -> float:
    """Drive the reason's fault until it fires; the time it fired."""
    fault = FAULTS[reason.name]
    clock.at(start - 20, snapshot())
    clock.at(start - 10, snapshot())  # unchanged inputs: the verdict is reused, not judged again
    clock.at(start, fault.make(start))
    fired = start + reason.sustain_seconds
    if reason.sustain_seconds:
        clock.at(fired, fault.make(fired))
    return fired


@pytest.mark.parametrize("reason", REASONS, ids=[reason.name for reason in REASONS])
def test_each_reason_gives_its_state_evidence_and_action(reason: Reason) -> None:
    clock = Clock()
    fired = fire(clock, reason)
    verdict = verdict_of(clock.at(fired, FAULTS[reason.name].make(fired)))
    (finding,) = verdict.findings
    subsystem = next(part for part in verdict.subsystems if part.subsystem is reason.subsystem)
    assert (finding.reason, subsystem.state, verdict.state) == (reason, reason.state, reason.state)
    assert FAULTS[reason.name].evidence in finding.evidence
    assert verdict.action is reason.action


@pytest.mark.parametrize(
    "reason", [r for r in REASONS if r.sustain_seconds], ids=[r.name for r in REASONS if r.sustain_seconds]
)
def test_a_sustained_reason_waits_for_its_time(reason: Reason) -> None:
    clock = Clock()
    clock.at(T0, snapshot())
    fault = FAULTS[reason.name]
    clock.at(T0 + 1, fault.make(T0 + 1))
    assert verdict_of(clock.at(T0 + reason.sustain_seconds, fault.make(T0))).state is State.OK


SUSTAINED = [r for r in REASONS if r.sustain_seconds]


def held_since(reason: Reason, since: float) -> Snapshot:
    """The reason's faulty cells, which the backend says have said so since ``since`` (the demo's scenarios)."""
    faulty = FAULTS[reason.name].make(since)
    assert faulty.attempt is not None
    assert faulty.attempt.readings is not None
    cells = {(UUID, name): since for name in HEALTHY}
    readings = replace(faulty.attempt.readings, held_since=cells)
    return replace(faulty, attempt=replace(faulty.attempt, readings=readings))


@pytest.mark.parametrize("reason", SUSTAINED, ids=[r.name for r in SUSTAINED])
def test_a_sustained_reason_fires_at_once_on_a_cell_held_long_enough_before(reason: Reason) -> None:
    verdict = verdict_of(Clock().at(T0, held_since(reason, T0 - reason.sustain_seconds)))
    assert [(finding.reason, finding.since) for finding in verdict.findings] == [(reason, T0)]


@pytest.mark.parametrize("reason", SUSTAINED, ids=[r.name for r in SUSTAINED])
def test_a_cell_held_not_long_enough_before_still_waits(reason: Reason) -> None:
    verdict = verdict_of(Clock().at(T0, held_since(reason, T0 - reason.sustain_seconds + 1)))
    assert verdict.state is State.OK


def test_a_healthy_gpu_is_ok_in_every_subsystem() -> None:
    verdict = verdict_of(Clock().at(T0, snapshot()))
    assert [(part.subsystem, part.state) for part in verdict.subsystems] == [(s, State.OK) for s in Subsystem]


HELD = [r for r in REASONS if r.hold_seconds and r.name in FAULTS]


@pytest.mark.parametrize("reason", HELD, ids=[r.name for r in HELD])
def test_a_reason_holds_for_its_time_after_the_evidence_then_expires(reason: Reason) -> None:
    clock = Clock()
    fired = fire(clock, reason)
    assert reason.hold_seconds is not None
    healthy_or_same = FAULTS[reason.name].make(fired) if isinstance(reason.check, Xids) else snapshot()
    held = verdict_of(clock.at(fired + reason.hold_seconds, healthy_or_same))
    assert [finding.reason for finding in held.findings] == [reason]
    assert held.findings[0].since == fired
    expired = verdict_of(clock.at(fired + reason.hold_seconds + 1, healthy_or_same))
    assert expired.state is State.OK


def test_a_blinking_throttle_is_one_finding_since_its_first_blink() -> None:
    clock, hot = Clock(), snapshot(cells={"clocks_event_reasons.hw_thermal_slowdown": "Active"})
    clock.at(T0, hot)
    for offset in (60.0, 180.0, 240.0):
        verdict = verdict_of(clock.at(T0 + offset, snapshot() if offset != 180.0 else hot))
        assert verdict.state is State.DEGRADED
        assert verdict.findings[0].since == T0


def test_a_failed_collection_keeps_the_cells_verdict() -> None:
    clock = Clock()
    clock.at(T0, snapshot(cells={"remapped_rows.failure": "Yes"}))
    verdict = verdict_of(clock.at(T0 + 3600, snapshot(read=False)))
    assert [finding.reason.name for finding in verdict.findings] == ["remapped_rows_failure"]


def test_fallen_off_the_bus_holds_until_the_node_reboots() -> None:
    clock = Clock()
    clock.at(T0, snapshot(fallen=(FallenGpu(UUID, PCI),)))
    verdict = verdict_of(clock.at(T0 + 30 * 86400, snapshot(fallen=(FallenGpu(UUID, PCI),))))
    assert (verdict.state, verdict.findings[0].since) == (State.FAILING, T0)


def test_an_old_xid_replayed_from_the_log_gives_no_finding() -> None:
    old = XidRecord(UUID, 48, 1, T0 - 86400)
    assert verdict_of(Clock().at(T0, snapshot(xids=(old,)))).state is State.OK


def test_a_new_xid_of_an_expired_code_fires_again() -> None:
    clock = Clock()
    for now in (T0, T0 + 60):  # the second verdict reuses the first: nothing moved
        assert verdict_of(clock.at(now, snapshot(xids=(XidRecord(UUID, 48, 1, T0 - 86400),)))).state is State.OK
    fresh = verdict_of(clock.at(T0 + 120, snapshot(xids=(XidRecord(UUID, 48, 2, T0 + 100),))))
    assert (fresh.state, fresh.findings[0].since) == (State.FAILING, T0 + 100)


def test_a_verdict_with_nothing_moved_is_the_same_object() -> None:
    clock = Clock()
    first = clock.at(T0, snapshot()).verdicts
    assert clock.at(T0 + 60, snapshot()).verdicts is first


def test_an_untimed_xid_holds_from_when_its_count_moved() -> None:
    clock = Clock()
    clock.at(T0, snapshot(xids=(XidRecord(UUID, 74, 1, None),)))
    held = verdict_of(clock.at(T0 + 3600, snapshot(xids=(XidRecord(UUID, 74, 1, None),))))
    expired = verdict_of(clock.at(T0 + 3601, snapshot(xids=(XidRecord(UUID, 74, 1, None),))))
    moved = verdict_of(clock.at(T0 + 3602, snapshot(xids=(XidRecord(UUID, 74, 2, None),))))
    assert (held.state, expired.state, moved.state) == (State.FAILING, State.OK, State.FAILING)


def test_the_worst_finding_decides_the_gpus_state_and_action() -> None:
    cells = {"remapped_rows.pending": "Yes", "remapped_rows.failure": "Yes"}
    verdict = verdict_of(Clock().at(T0, snapshot(cells=cells)))
    assert (verdict.state, verdict.action and verdict.action.value) == (State.FAILING, "replace_gpu")


# -- the docs ------------------------------------------------------------------------------------------------


def verdict_table() -> str:
    """docs/health.md's table, as the code says."""
    lines = [
        "| Subsystem | Reason | Input | State | Holds after the evidence | Action | Demo scenario |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.subsystem.value} | `{r.name}` | {r.input} | `{r.state.label}` | {r.hold} | {r.action.text} "
        f"| `{REASON_SCENARIOS[r.name]}` |"
        for r in REASONS
    ]
    return "\n".join(lines) + "\n"


def test_the_docs_table_of_reasons_is_the_codes() -> None:
    docs = (REPO / "docs" / "health.md").read_text(encoding="utf-8")
    assert verdict_table() in docs


def test_what_is_kept_of_gpus_gone_for_good_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend naming a new GPU at every collection (a hostile nvidia-smi) cannot grow the memory without bound."""
    monkeypatch.setattr(judge_module, "MAX_KNOWN_GPUS", 8)
    clock = Clock()
    for step in range(20):
        cells = {"uuid": f"GPU-{step:08d}", "pci.bus_id": f"00000000:{step:02X}:00.0"}
        clock.at(T0 + step, snapshot(cells=cells, xids=(XidRecord(f"GPU-{step:08d}", 74, 1, None),)))
    memory = clock.memory
    assert len(memory.gpus) == 8
    assert {key for key, _ in memory.counters} <= set(memory.gpus)
    assert {key for key, _ in memory.untimed_xids} <= set(memory.gpus)


def test_a_gpu_whose_identity_is_not_utf8_gets_no_verdict_series() -> None:
    """As its other series are dropped (docs/metrics.md): two such GPUs would otherwise render the same labels."""
    parts = (SubsystemVerdict(Subsystem.DRIVER, State.OK),)
    verdicts = [
        GpuVerdict("\udc80", "00000000:01:00.0", parts),
        GpuVerdict("GPU-1", "\udc81", parts),
        GpuVerdict("GPU-2", "00000000:02:00.0", parts),
    ]
    rendered = "".join(render_family(family) for family in verdict_families(verdicts))
    assert 'uuid="2"' in rendered
    assert "\udc80" not in rendered
    assert "\udc81" not in rendered
    assert rendered.count("nvidia_gpu_exporter_gpu_health_state{") == 1
