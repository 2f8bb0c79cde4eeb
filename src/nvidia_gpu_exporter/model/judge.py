"""The verdict per GPU: :data:`.verdicts.REASONS` evaluated on a snapshot, the previous verdict's memory and the time.

A pure function: the collector calls :func:`judge` once per published snapshot and keeps the returned memory for
the next call. A reason fires when its input says so (a cell for ``sustain_seconds`` in a row) and holds for
``hold_seconds`` after its evidence last moved (an XID's time, the last collection whose cell said so), so a
throttle blinking on and off is one finding, not a flapping verdict. A cell a collection could not read (a failed
collection, a field not queried) changes nothing: the finding keeps its last state until a collection says.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nvidia_gpu_exporter.model.fabric import FABRIC_FIELDS, fabric_manager_status
from nvidia_gpu_exporter.model.fields import value_kind
from nvidia_gpu_exporter.model.snapshot import QueryField, Snapshot, XidRecord
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, transform_value
from nvidia_gpu_exporter.model.verdicts import (
    REASONS,
    REASONS_BY_NAME,
    Cell,
    FabricManager,
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

    tracks: Mapping[str, Mapping[str, _Track]] = field(default_factory=dict)  # gpu key -> reason -> live track
    counters: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (gpu key, field) -> last value
    untimed_xids: Mapping[tuple[str, int], tuple[int, float]] = field(default_factory=dict)  # -> (count, moved at)
    gpus: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # gpu key -> (uuid, pci_bus_id)
    # A GPU with no live track whose inputs read as before keeps its verdict unjudged (most GPUs, most of the time).
    inputs: Mapping[str, tuple[object, ...]] = field(default_factory=dict)  # gpu key -> what its reasons read
    verdicts: Mapping[str, GpuVerdict] = field(default_factory=dict)
    latest: tuple[GpuVerdict, ...] = ()


@dataclass(frozen=True, slots=True)
class Judgement:
    verdicts: tuple[GpuVerdict, ...]
    memory: VerdictMemory


@dataclass(frozen=True, slots=True)
class _Observation:
    holds: bool | None  # None: cannot be told now (the previous state stands)
    at: float | None = None  # when the evidence last moved; None: now
    evidence: str = ""
    began: float | None = None  # since when the backend says a cell has said so (None: from this sight on)


_EMPTY = _Track()
_FALSE = _Observation(False)
_UNKNOWN = _Observation(None)
# Cell texts repeat from one collection to the next ("No", "Not Active", "16"): their values are remembered, so a
# healthy GPU costs a dictionary lookup per reason (benchmarks/bench_verdict.py). Bounded: emptied when full.
_VALUES: dict[tuple[str, str], float | None] = {}
_MAX_VALUES = 4096
_TIMES: dict[int, str] = {}


_COLUMNS: list[tuple[Sequence[QueryField], dict[str, int]]] = []  # the last query's, kept with it


def _columns(fields: Sequence[QueryField]) -> dict[str, int]:
    """Each query field's column (worked out once per query: a backend's fields never change)."""
    if _COLUMNS and _COLUMNS[0][0] is fields:
        return _COLUMNS[0][1]
    columns = {query.qfield: position for position, query in enumerate(fields)}
    _COLUMNS[:] = [(fields, columns)]
    return columns


def _key(uuid: str, pci: str) -> str:
    return pci.upper() if pci else uuid.lower()


def _when(at: float) -> str:
    second = int(at)
    text = _TIMES.get(second)
    if text is None:
        if len(_TIMES) >= _MAX_VALUES:
            _TIMES.clear()
        text = _TIMES[second] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
    return text


def _value(name: str, text: str) -> float | None:
    """The cell's number as the metrics read it (None: absent or not a number)."""
    key = (name, text)
    try:
        return _VALUES[key]
    except KeyError:
        pass
    if len(_VALUES) >= _MAX_VALUES:
        _VALUES.clear()
    stripped = text.strip()
    value = None if stripped.lower() in ABSENT_TOKENS else transform_value(stripped, value_kind(name), 1.0, name)
    _VALUES[key] = value
    return value


class _Inputs:
    """The snapshot's inputs, indexed by GPU once per verdict."""

    def __init__(self, snapshot: Snapshot, fields: Sequence[QueryField], memory: VerdictMemory, now: float) -> None:
        self.now = now
        self.columns = _columns(fields)
        self.rows: dict[str, tuple[str, ...]] = {}
        self.gpus: dict[str, tuple[str, str]] = {}
        attempt = snapshot.attempt
        readings = attempt.readings if attempt is not None else None
        self.read = readings is not None
        self.held_since = readings.held_since if readings is not None else {}
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
        self.untimed: dict[tuple[str, int], tuple[int, float]] = dict(memory.untimed_xids)
        self.previous = memory
        self.read_columns = _read_columns(fields, self.columns)

    def signature(self, key: str) -> tuple[object, ...]:
        """Everything the reasons read of this GPU: equal signatures and no live track give equal verdicts."""
        row = self.rows.get(key)
        cells = tuple(row[column] for column in self.read_columns) if row is not None else None
        xids = tuple((r.xid, r.count, r.last_seen) for r in self.xids.get(key, ()))
        return (cells, xids, key in self.fallen, key in self.missing, self.read, self.stuck)

    def cell(self, key: str, names: Sequence[str]) -> tuple[str, str, float] | None:
        """The first queried spelling's (field, text, value), or None when not read or not a number."""
        row = self.rows.get(key)
        if row is None:
            return None
        for name in names:
            column = self.columns.get(name)
            if column is None:
                continue
            text = row[column]
            value = _value(name, text)
            return None if value is None else (name, text.strip(), value)
        return None

    def observe(self, key: str, reason: Reason) -> _Observation:
        check = reason.check
        if isinstance(check, Cell):
            return self._cell(key, check)
        if isinstance(check, Xids):
            return self._xids(key, check.codes)
        if isinstance(check, FabricManager):
            return self._fabric(key, check)
        if isinstance(check, FallenOffBus):
            if key in self.fallen:  # the ledger keeps no time: the evidence is as old as the exporter's first sight
                known = self.previous.tracks.get(key, {}).get(reason.name)
                seen = known.last_fired if known is not None else None
                return _Observation(True, seen, "the kernel log says it fell off the bus")
            return self._xids(key, (FALLEN_OFF_THE_BUS_XID,))
        if isinstance(check, MissingFromDriver):
            if not self.read:
                return _UNKNOWN
            if key in self.missing:
                return _Observation(True, None, f"the PCI bus lists {key}, the driver does not")
            return _FALSE
        assert isinstance(check, StuckChildren)
        if self.stuck is None:
            return _UNKNOWN
        if self.stuck:
            return _Observation(True, None, f"{self.stuck} nvidia-smi children SIGKILL did not end")
        return _FALSE

    def _cell(self, key: str, check: Cell) -> _Observation:
        read = self.cell(key, check.fields)
        if read is None:
            return _UNKNOWN
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
                return _UNKNOWN
            holds = value < other[2]
            evidence += f" (max {other[1]})"
        else:
            previous = self.previous.counters.get((key, name))
            self.counters[(key, name)] = value
            if previous is None:
                return _UNKNOWN
            holds = value > previous
            evidence = f"{name} rose from {previous:g} to {value:g}"
        began = self.held_since.get((self.gpus[key][0], name)) if self.held_since else None
        return _Observation(holds, None, evidence, began)

    def _fabric(self, key: str, check: FabricManager) -> _Observation:
        """The fabric manager status of the GPU's two fabric cells, as DCGM derives it (model/fabric.py)."""
        row = self.rows.get(key)
        columns = [self.columns.get(name) for name in FABRIC_FIELDS]
        if row is None or any(column is None for column in columns):
            return _UNKNOWN
        state, status = (row[column].strip() for column in columns if column is not None)
        found = fabric_manager_status(state, status)
        if found is None:
            return _UNKNOWN
        evidence = f"{FABRIC_FIELDS[0]} = {state}, {FABRIC_FIELDS[1]} = {status}"
        return _Observation(found in check.statuses, None, evidence)

    def _xids(self, key: str, codes: Sequence[int]) -> _Observation:
        if key not in self.xids:
            return _FALSE
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
            return _FALSE
        return _Observation(True, latest, "; ".join(parts))


_CELL_FIELDS = tuple(
    dict.fromkeys(
        [
            *(
                name
                for reason in REASONS
                if isinstance(reason.check, Cell)
                for name in (*reason.check.fields, *((reason.check.other,) if reason.check.other else ()))
            ),
            *(FABRIC_FIELDS if any(isinstance(reason.check, FabricManager) for reason in REASONS) else ()),
        ]
    )
)


def _read_columns(fields: Sequence[QueryField], columns: Mapping[str, int]) -> tuple[int, ...]:
    """The columns of the cells some reason reads, in this query."""
    return tuple(columns[name] for name in _CELL_FIELDS if name in columns)


def _settled(name: str, track: _Track, now: float) -> bool:
    """Whether the track can change only with its input: not holding and no sustain running, or holding on evidence
    with its own time (an XID's, a GPU fallen off the bus) and not yet expired."""
    reason = REASONS_BY_NAME[name]
    if track.since is None:
        return track.run_since is None or reason.sustain_seconds == 0
    if not isinstance(reason.check, Xids | FallenOffBus) or track.last_fired is None:
        return False
    return reason.hold_seconds is None or now - track.last_fired < reason.hold_seconds


def _step(reason: Reason, track: _Track, seen: _Observation, now: float) -> _Track:
    """The reason's track after this observation."""
    if seen.holds is None or (track is _EMPTY and not seen.holds):
        return track
    if not seen.holds:
        run_since = None
        last_fired = track.last_fired
    else:
        at = now if seen.at is None else seen.at
        if track.run_since is not None:
            run_since = track.run_since
        else:
            run_since = at if seen.began is None else min(seen.began, at)
        last_fired = track.last_fired
        if at - run_since >= reason.sustain_seconds and (last_fired is None or at > last_fired):
            last_fired = at
    if reason.hold_seconds is None:
        holding = bool(seen.holds) and last_fired is not None
    else:
        holding = last_fired is not None and now - last_fired <= reason.hold_seconds
    if not holding:
        return _Track(run_since, last_fired) if run_since is not None or last_fired is not None else _EMPTY
    assert last_fired is not None
    since = track.since if track.since is not None else last_fired
    return _Track(run_since, last_fired, since, seen.evidence if seen.holds else track.evidence)


def judge(snapshot: Snapshot, fields: Sequence[QueryField], previous: VerdictMemory, now: float) -> Judgement:
    """Every GPU's verdict now, in bus order (GPUs known only by uuid last), and the memory for the next one."""
    inputs = _Inputs(snapshot, fields, previous, now)
    tracks: dict[str, dict[str, _Track]] = {}
    signatures: dict[str, tuple[object, ...]] = {}
    judged: dict[str, GpuVerdict] = {}
    for key in sorted(inputs.gpus, key=lambda gpu: (not inputs.gpus[gpu][1], gpu)):
        uuid, pci = inputs.gpus[key]
        signature = signatures[key] = inputs.signature(key)
        before = previous.verdicts.get(key)
        if (
            before is not None
            and all(_settled(name, track, now) for name, track in previous.tracks.get(key, {}).items())
            and previous.inputs.get(key) == signature
            and (before.uuid, before.pci_bus_id) == (uuid, pci)
        ):
            judged[key] = before
            if key in previous.tracks:
                tracks[key] = dict(previous.tracks[key])
            continue
        live = previous.tracks.get(key, {})
        mine: dict[str, _Track] = {}
        findings: dict[Subsystem, list[Finding]] = {subsystem: [] for subsystem in Subsystem}
        for reason in REASONS:
            track = _step(reason, live.get(reason.name, _EMPTY), inputs.observe(key, reason), now)
            if track is not _EMPTY:
                mine[reason.name] = track
            if track.since is not None and track.last_fired is not None:
                findings[reason.subsystem].append(Finding(reason, track.evidence, track.since, track.last_fired))
        if mine:
            tracks[key] = mine
        verdict = GpuVerdict(
            uuid,
            pci,
            tuple(
                SubsystemVerdict(subsystem, max((f.reason.state for f in found), default=State.OK), tuple(found))
                for subsystem, found in findings.items()
            ),
        )
        judged[key] = before if verdict == before else verdict  # an unchanged verdict keeps its identity
    verdicts = tuple(judged.values())
    if len(verdicts) == len(previous.latest) and all(a is b for a, b in zip(verdicts, previous.latest, strict=True)):
        verdicts = previous.latest  # the same object: what renders it can reuse its text
    known = {**previous.gpus, **inputs.gpus}
    if len(known) > MAX_KNOWN_GPUS:  # GPUs gone for good are forgotten first
        known = dict(list(known.items())[-MAX_KNOWN_GPUS:])
    # What is kept of a GPU is kept only while the GPU is known: a GPU gone for good takes it along.
    counters = {pair: value for pair, value in inputs.counters.items() if pair[0] in known}
    untimed = {pair: moved for pair, moved in inputs.untimed.items() if pair[0] in known}
    memory = VerdictMemory(tracks, counters, untimed, known, signatures, judged, verdicts)
    return Judgement(verdicts, memory)
