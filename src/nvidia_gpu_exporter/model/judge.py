"""The verdict per GPU: :data:`.verdicts.REASONS` evaluated on a snapshot, the previous verdict's memory and the time.

A pure function: the collector calls :func:`judge` once per published snapshot and keeps the returned memory for
the next call. A reason fires when its input says so (a cell for ``sustain_seconds`` in a row) and holds for
``hold_seconds`` after its evidence last moved (an XID's time, the last collection whose cell said so), so a
throttle blinking on and off is one finding, not a flapping verdict. A cell a collection could not read (a failed
collection, a field not queried) changes nothing: the finding keeps its last state until a collection says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from nvidia_gpu_exporter.model.fields import value_kind
from nvidia_gpu_exporter.model.snapshot import QueryField, Snapshot, XidRecord
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, transform_value
from nvidia_gpu_exporter.model.verdicts import (
    REASONS,
    Cell,
    FallenOffBus,
    Finding,
    GpuVerdict,
    MissingFromDriver,
    Reason,
    State,
    StuckChildren,
    Subsystem,
    SubsystemVerdict,
    Test,
    Xids,
)

UNKNOWN_UUID = "unknown"  # the ledger's name for a GPU the log did not name yet: no verdict of its own
FALLEN_OFF_THE_BUS_XID = 79
MAX_KNOWN_GPUS = 1024  # GPUs remembered between verdicts (the kernel-log ledger keeps at most 256 addresses)


@dataclass(frozen=True, slots=True)
class _Track:
    """One reason on one GPU between collections."""

    run_since: float | None = None  # when its condition began to hold without a break (sustain)
    last_fired: float | None = None  # when its evidence last moved while sustained (the hold counts from here)
    since: float | None = None  # when the finding began (None: not holding)
    evidence: str = ""


@dataclass(frozen=True, slots=True)
class VerdictMemory:
    """What one verdict hands the next: the tracks, the last counter values, the GPUs known."""

    tracks: Mapping[tuple[str, str], _Track] = field(default_factory=dict)  # (gpu key, reason) -> track
    counters: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (gpu key, field) -> last value
    untimed_xids: Mapping[tuple[str, int], tuple[int, float]] = field(default_factory=dict)  # -> (count, moved at)
    gpus: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # gpu key -> (uuid, pci_bus_id)


@dataclass(frozen=True, slots=True)
class Judgement:
    verdicts: tuple[GpuVerdict, ...]
    memory: VerdictMemory


@dataclass(frozen=True, slots=True)
class _Observation:
    holds: bool | None  # None: cannot be told now (the previous state stands)
    at: float | None = None  # when the evidence last moved; None: now
    evidence: str = ""


def _key(uuid: str, pci: str) -> str:
    return pci.upper() if pci else uuid.lower()


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Inputs:
    """The snapshot's inputs, indexed by GPU once per verdict."""

    def __init__(self, snapshot: Snapshot, fields: Sequence[QueryField], memory: VerdictMemory, now: float) -> None:
        self.now = now
        self.columns = {query.qfield: position for position, query in enumerate(fields)}
        self.rows: dict[str, tuple[str, ...]] = {}
        self.gpus: dict[str, tuple[str, str]] = {}
        attempt = snapshot.attempt
        readings = attempt.readings if attempt is not None else None
        self.read = readings is not None
        uuid_column, pci_column = self.columns.get("uuid"), self.columns.get("pci.bus_id")
        if readings is not None and uuid_column is not None:
            for row in readings.gpus.rows:
                uuid = row[uuid_column].strip()
                pci = row[pci_column].strip().upper() if pci_column is not None else ""
                key = _key(uuid, pci)
                self.gpus[key] = (uuid, pci)
                self.rows[key] = row
        else:
            self.gpus.update(memory.gpus)
        by_uuid = {uuid.lower(): key for key, (uuid, _) in {**memory.gpus, **self.gpus}.items() if uuid}
        self.missing: set[str] = set()
        if snapshot.pci is not None and readings is not None:
            for function in snapshot.pci.gpus:
                pci = function.bus_id.upper()
                if pci not in self.gpus:
                    known = memory.gpus.get(pci)
                    self.gpus[pci] = (known[0] if known else "", pci)
                    self.missing.add(pci)
        self.fallen: set[str] = set()
        for gpu in snapshot.gpus_fallen_off:
            key = _key(gpu.gpu_uuid if gpu.gpu_uuid != UNKNOWN_UUID else "", gpu.pci_bus_id)
            self.gpus.setdefault(key, (gpu.gpu_uuid if gpu.gpu_uuid != UNKNOWN_UUID else "", gpu.pci_bus_id.upper()))
            self.fallen.add(key)
        self.xids: dict[str, list[XidRecord]] = {}
        for record in snapshot.xids:
            if record.gpu_uuid == UNKNOWN_UUID:
                continue
            key = by_uuid.get(record.gpu_uuid.lower()) or _key(record.gpu_uuid, "")
            self.gpus.setdefault(key, (record.gpu_uuid, ""))
            self.xids.setdefault(key, []).append(record)
        stuck = snapshot.stuck_children
        self.stuck = stuck.current if stuck is not None else None
        self.counters: dict[tuple[str, str], float] = dict(memory.counters)
        self.untimed: dict[tuple[str, int], tuple[int, float]] = {}
        self.previous = memory

    def cell(self, key: str, names: Sequence[str]) -> tuple[str, str, float] | None:
        """The first queried spelling's (field, text, value), or None when not read or not a number."""
        row = self.rows.get(key)
        if row is None:
            return None
        for name in names:
            column = self.columns.get(name)
            if column is None:
                continue
            text = row[column].strip()
            if text.lower() in ABSENT_TOKENS:
                return None
            value = transform_value(text, value_kind(name), 1.0, name)
            return None if value is None else (name, text, value)
        return None

    def observe(self, key: str, reason: Reason) -> _Observation:
        check = reason.check
        if isinstance(check, Cell):
            return self._cell(key, check)
        if isinstance(check, Xids):
            return self._xids(key, check.codes)
        if isinstance(check, FallenOffBus):
            if key in self.fallen:
                return _Observation(True, None, "the kernel log says it fell off the bus")
            xid = self._xids(key, (FALLEN_OFF_THE_BUS_XID,))
            return _Observation(True, None, xid.evidence) if xid.holds else _Observation(False)
        if isinstance(check, MissingFromDriver):
            if not self.read:
                return _Observation(None)
            if key in self.missing:
                return _Observation(True, None, f"the PCI bus lists {key}, the driver does not")
            return _Observation(False)
        assert isinstance(check, StuckChildren)
        if self.stuck is None:
            return _Observation(None)
        if self.stuck:
            return _Observation(True, None, f"{self.stuck} nvidia-smi children SIGKILL did not end")
        return _Observation(False)

    def _cell(self, key: str, check: Cell) -> _Observation:
        read = self.cell(key, check.fields)
        if read is None:
            return _Observation(None)
        name, text, value = read
        evidence = f"{name} = {text}"
        if check.test is Test.ACTIVE:
            holds = value == 1.0
        elif check.test is Test.POSITIVE:
            holds = value > 0
        elif check.test is Test.AT_MOST:
            holds = value <= check.values[0]
        elif check.test is Test.ONE_OF:
            holds = value in check.values
        elif check.test is Test.BELOW_FIELD:
            other = self.cell(key, (check.other,))
            if other is None:
                return _Observation(None)
            holds = value < other[2]
            evidence += f" (max {other[1]})"
        else:
            previous = self.previous.counters.get((key, name))
            self.counters[(key, name)] = value
            if previous is None:
                return _Observation(None)
            holds = value > previous
            evidence = f"{name} rose from {previous:g} to {value:g}"
        return _Observation(holds, None, evidence)

    def _xids(self, key: str, codes: Sequence[int]) -> _Observation:
        latest: float | None = None
        parts: list[str] = []
        for record in self.xids.get(key, ()):
            if record.xid not in codes or record.count <= 0:
                continue
            at = record.last_seen
            if at is None:  # an untimed replayed line: it moved when its count did
                count, moved = self.previous.untimed_xids.get((key, record.xid), (0, self.now))
                moved = self.now if record.count != count else moved
                self.untimed[(key, record.xid)] = (record.count, moved)
                at = moved
            latest = at if latest is None else max(latest, at)
            parts.append(f"XID {record.xid} x{record.count}, last at {_when(at)}")
        if latest is None:
            return _Observation(False)
        return _Observation(True, latest, "; ".join(parts))


def _step(reason: Reason, track: _Track, seen: _Observation, now: float) -> _Track:
    """The reason's track after this observation."""
    if seen.holds is None:
        return track
    if not seen.holds:
        run_since = None
        last_fired = track.last_fired
    else:
        at = now if seen.at is None else seen.at
        run_since = track.run_since if track.run_since is not None else at
        last_fired = track.last_fired
        if at - run_since >= reason.sustain_seconds and (last_fired is None or at > last_fired):
            last_fired = at
    if reason.hold_seconds is None:
        holding = bool(seen.holds) and last_fired is not None
    else:
        holding = last_fired is not None and now - last_fired <= reason.hold_seconds
    if not holding:
        return _Track(run_since, last_fired)
    assert last_fired is not None
    since = track.since if track.since is not None else last_fired
    return _Track(run_since, last_fired, since, seen.evidence if seen.holds else track.evidence)


def judge(snapshot: Snapshot, fields: Sequence[QueryField], previous: VerdictMemory, now: float) -> Judgement:
    """Every GPU's verdict now, in bus order (GPUs known only by uuid last), and the memory for the next one."""
    inputs = _Inputs(snapshot, fields, previous, now)
    tracks: dict[tuple[str, str], _Track] = {}
    verdicts: list[GpuVerdict] = []
    for key in sorted(inputs.gpus, key=lambda gpu: (not inputs.gpus[gpu][1], gpu)):
        uuid, pci = inputs.gpus[key]
        findings: dict[Subsystem, list[Finding]] = {subsystem: [] for subsystem in Subsystem}
        for reason in REASONS:
            track = _step(reason, previous.tracks.get((key, reason.name), _Track()), inputs.observe(key, reason), now)
            if track != _Track():
                tracks[(key, reason.name)] = track
            if track.since is not None and track.last_fired is not None:
                findings[reason.subsystem].append(Finding(reason, track.evidence, track.since, track.last_fired))
        subsystems = tuple(
            SubsystemVerdict(subsystem, max((f.reason.state for f in found), default=State.OK), tuple(found))
            for subsystem, found in findings.items()
        )
        verdicts.append(GpuVerdict(uuid, pci, subsystems))
    known = {**previous.gpus, **inputs.gpus}
    if len(known) > MAX_KNOWN_GPUS:  # GPUs gone for good are forgotten first
        known = dict(list(known.items())[-MAX_KNOWN_GPUS:])
    memory = VerdictMemory(tracks, inputs.counters, inputs.untimed, known)
    return Judgement(tuple(verdicts), memory)
