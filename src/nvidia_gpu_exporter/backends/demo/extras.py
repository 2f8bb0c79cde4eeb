"""The demo's NVML-only surface: the ``extras:`` block of ``--demo-config`` and the per-cycle synthesis.

What the demo simulates (docs/demo.md, "What it simulates"): an energy counter that integrates each GPU's
power draw, PCIe traffic within configured bounds, a MIG topology whose busy GPU instances run hot, and an
XID history plus random ongoing events. The coherence rules are the contract, not any particular random numbers.

Determinism: every random value is drawn from one source per cycle, seeded from ``extras.seed`` and the
cycle number, in a fixed order (PCIe, MIG memory, MIG activity, XIDs). Two runs with the same seed
therefore draw the same PCIe rates, MIG memory and activity, XID codes and GPUs, cycle by cycle. What
depends on the wall clock is left to it on purpose: the energy counter integrates power over the real
elapsed time between cycles (joules must match watts times seconds), and ongoing XIDs fire when real time
passes their schedule and carry the receive time. Seeding each cycle afresh (instead of continuing one
stream) keeps a wall-clock-dependent number of XID draws in one cycle from shifting any later cycle's
values.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration, to_seconds
from nvidia_gpu_exporter.model.snapshot import (
    GpuExtras,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    ProcessList,
    ProcessRow,
    XidRecord,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid

GIB = 1 << 30
DEFAULT_FALLBACK_WATTS = 120.0
DEFAULT_XID_CODES = (13, 31, 43, 48, 63, 79, 119)
MAX_XIDS_PER_CYCLE = 10
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

EXTRAS_KEYS = ("seed", "energy-fallback-power-watts", "pcie", "mig", "xids")
PCIE_KEYS = ("tx-bytes-per-second", "rx-bytes-per-second")
BOUNDS_KEYS = ("min", "max")
MIG_KEYS = ("gpu", "instances")
INSTANCE_KEYS = ("gi", "profile", "cis", "memory-total-bytes", "busy")
XIDS_KEYS = ("initial", "interval", "codes")
XID_EVENT_KEYS = ("gpu", "xid", "count")

_PROFILE_SIZE = re.compile(r"\.([0-9]+)gb$", re.IGNORECASE)
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class ExtrasError(ValueError):
    """The ``extras:`` block breaks the schema; the message starts with the offending key path."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """A closed range ``[min, max]`` a value is drawn from."""

    min: float
    max: float

    def draw(self, rng: random.Random) -> float:
        return self.min + rng.random() * (self.max - self.min)


DEFAULT_PCIE_TX = Bounds(0.2e9, 3e9)
DEFAULT_PCIE_RX = Bounds(0.5e9, 8e9)
BUSY_MEMORY, IDLE_MEMORY = Bounds(0.55, 0.90), Bounds(0.02, 0.10)
BUSY_ACTIVITY, IDLE_ACTIVITY = Bounds(0.70, 1.0), Bounds(0.0, 0.05)
BUSY_PCIE_SHARE, IDLE_PCIE_SHARE = Bounds(0.2, 0.6), Bounds(0.0, 0.02)


@dataclass(frozen=True, slots=True)
class MigInstanceSpec:
    """One GPU instance of the simulated topology and its compute instances (``cis``)."""

    gi: int
    profile: str
    cis: int = 1
    memory_total_bytes: int = 0
    busy: bool = False


@dataclass(frozen=True, slots=True)
class MigGpuSpec:
    """The MIG topology of one simulated GPU (by index)."""

    gpu: int
    instances: tuple[MigInstanceSpec, ...]


@dataclass(frozen=True, slots=True)
class XidEventSpec:
    """``count`` XID ``xid`` errors on GPU ``gpu``, applied at the first cycle."""

    gpu: int
    xid: int
    count: int


@dataclass(frozen=True, slots=True)
class ExtrasSpec:
    """The validated ``extras:`` block (defaults filled in); ``seed=None`` means wall-clock seeded."""

    seed: int | None = None
    fallback_watts: float = DEFAULT_FALLBACK_WATTS
    pcie_tx: Bounds = DEFAULT_PCIE_TX
    pcie_rx: Bounds = DEFAULT_PCIE_RX
    mig: tuple[MigGpuSpec, ...] = ()
    xid_initial: tuple[XidEventSpec, ...] = ()
    xid_interval_seconds: float | None = None
    xid_codes: tuple[int, ...] = DEFAULT_XID_CODES

    @property
    def mig_gpus(self) -> frozenset[int]:
        """Indices of the GPUs with a MIG topology (they report MIG mode ``Enabled``)."""
        return frozenset(entry.gpu for entry in self.mig)

    def check_gpu_count(self, count: int) -> None:
        """Reject GPU indices the simulated machine does not have (known only once it answered)."""
        for position, entry in enumerate(self.mig):
            if entry.gpu >= count:
                raise ExtrasError(f"extras.mig[{position}].gpu: GPU {entry.gpu} does not exist ({count} GPUs)")
        for position, event in enumerate(self.xid_initial):
            if event.gpu >= count:
                raise ExtrasError(f"extras.xids.initial[{position}].gpu: GPU {event.gpu} does not exist ({count} GPUs)")


DEFAULT_SCENARIO = ExtrasSpec(
    mig=(
        MigGpuSpec(
            0,
            (
                MigInstanceSpec(2, "3g.71gb", cis=2, memory_total_bytes=71 * GIB, busy=True),
                MigInstanceSpec(7, "1g.18gb", cis=1, memory_total_bytes=18 * GIB),
            ),
        ),
    ),
    xid_initial=(XidEventSpec(1, 79, 2),),
    xid_interval_seconds=600.0,
)
"""The built-in scenario (docs/demo.md, "The default scenario"), served when no ``--demo-config`` is given."""


# -- validation ------------------------------------------------------------------------------------------


def _shown(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else repr(value)


def _mapping(value: object, path: str, allowed: tuple[str, ...]) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ExtrasError(f"{path}: must be a mapping, got {_shown(value)}")
    for key in value:
        if key not in allowed:
            raise ExtrasError(f"{path}: unknown key {key!r}, want one of {', '.join(allowed)}")
    return value


def _list(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise ExtrasError(f"{path}: must be a list, got {_shown(value)}")
    return value


def _int(value: object, path: str, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ExtrasError(f"{path}: must be an integer, got {_shown(value)}")
    if value < minimum:
        raise ExtrasError(f"{path}: must be at least {minimum}, got {value}")
    return value


def _number(value: object, path: str) -> float:
    """A finite number; YAML 1.1 reads ``3e9`` as a string, so plain numeric text is accepted too."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        value = float(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ExtrasError(f"{path}: must be a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError as error:
        raise ExtrasError(f"{path}: must be a finite number, got {value!r}") from error
    if not math.isfinite(number):
        raise ExtrasError(f"{path}: must be a finite number, got {value!r}")
    return number


def _required(entries: Mapping[str, object], key: str, path: str) -> object:
    if key not in entries or entries[key] is None:
        raise ExtrasError(f"{path}.{key}: required")
    return entries[key]


def _bounds(value: object, path: str, default: Bounds) -> Bounds:
    if value is None:
        return default
    entries = _mapping(value, path, BOUNDS_KEYS)
    low = _number(_required(entries, "min", path), f"{path}.min")
    high = _number(_required(entries, "max", path), f"{path}.max")
    if low < 0:
        raise ExtrasError(f"{path}.min: must not be negative, got {low:g}")
    if low > high:
        raise ExtrasError(f"{path}: min {low:g} is greater than max {high:g}")
    return Bounds(low, high)


def _instance(value: object, path: str) -> MigInstanceSpec:
    entries = _mapping(value, path, INSTANCE_KEYS)
    gi = _int(_required(entries, "gi", path), f"{path}.gi")
    profile = _required(entries, "profile", path)
    if not isinstance(profile, str) or not profile.strip():
        raise ExtrasError(f"{path}.profile: must be a non-empty string, got {_shown(profile)}")
    cis = 1 if entries.get("cis") is None else _int(entries["cis"], f"{path}.cis")
    memory = entries.get("memory-total-bytes")
    if memory is None:
        size = _PROFILE_SIZE.search(profile)
        if size is None:
            raise ExtrasError(
                f"{path}.memory-total-bytes: required, the profile {profile!r} has no .<N>gb size to derive it"
            )
        total = int(size.group(1)) * GIB
    else:
        total = _int(memory, f"{path}.memory-total-bytes", minimum=1)
    busy = entries.get("busy", False)
    if busy is None:
        busy = False
    if not isinstance(busy, bool):
        raise ExtrasError(f"{path}.busy: must be true or false, got {_shown(busy)}")
    return MigInstanceSpec(gi, profile, cis, total, busy)


def _mig(value: object) -> tuple[MigGpuSpec, ...]:
    if value is None:
        return ()
    gpus: list[MigGpuSpec] = []
    for position, item in enumerate(_list(value, "extras.mig")):
        path = f"extras.mig[{position}]"
        entries = _mapping(item, path, MIG_KEYS)
        gpu = _int(_required(entries, "gpu", path), f"{path}.gpu")
        if any(existing.gpu == gpu for existing in gpus):
            raise ExtrasError(f"{path}.gpu: GPU {gpu} already has a MIG topology")
        raw_instances = _list(_required(entries, "instances", path), f"{path}.instances")
        if not raw_instances:
            raise ExtrasError(f"{path}.instances: needs at least one GPU instance")
        instances: list[MigInstanceSpec] = []
        for number, raw in enumerate(raw_instances):
            instance = _instance(raw, f"{path}.instances[{number}]")
            if any(existing.gi == instance.gi for existing in instances):
                raise ExtrasError(f"{path}.instances[{number}].gi: GPU instance {instance.gi} is listed twice")
            instances.append(instance)
        gpus.append(MigGpuSpec(gpu, tuple(instances)))
    return tuple(gpus)


def _xids(value: object) -> tuple[tuple[XidEventSpec, ...], float | None, tuple[int, ...]]:
    if value is None:
        return (), None, DEFAULT_XID_CODES
    entries = _mapping(value, "extras.xids", XIDS_KEYS)
    initial: list[XidEventSpec] = []
    for position, item in enumerate(_list(entries.get("initial") or [], "extras.xids.initial")):
        path = f"extras.xids.initial[{position}]"
        event = _mapping(item, path, XID_EVENT_KEYS)
        gpu = _int(_required(event, "gpu", path), f"{path}.gpu")
        xid = _int(_required(event, "xid", path), f"{path}.xid")
        count = 1 if event.get("count") is None else _int(event["count"], f"{path}.count")
        if count:
            initial.append(XidEventSpec(gpu, xid, count))
    interval: float | None = None
    raw_interval = entries.get("interval")
    if raw_interval is not None:
        if not isinstance(raw_interval, str):
            raise ExtrasError(f"extras.xids.interval: must be a duration such as 10m, got {_shown(raw_interval)}")
        try:
            nanoseconds = parse_duration(raw_interval)
        except DurationError as error:
            raise ExtrasError(f"extras.xids.interval: {error}") from error
        if nanoseconds <= 0:
            raise ExtrasError(f"extras.xids.interval: must be greater than 0, got {raw_interval!r}")
        interval = to_seconds(nanoseconds)
    codes: tuple[int, ...] = DEFAULT_XID_CODES
    if entries.get("codes") is not None:
        raw_codes = _list(entries["codes"], "extras.xids.codes")
        if not raw_codes:
            raise ExtrasError("extras.xids.codes: needs at least one XID code")
        codes = tuple(_int(code, f"extras.xids.codes[{index}]") for index, code in enumerate(raw_codes))
    return tuple(initial), interval, codes


def parse_extras(raw: object) -> ExtrasSpec:
    """Validate a raw ``extras:`` mapping (as YAML loaded it); ``None`` gives the plain defaults."""
    if raw is None:
        return ExtrasSpec()
    entries = _mapping(raw, "extras", EXTRAS_KEYS)
    seed = entries.get("seed")
    if seed is not None:
        seed = _int(seed, "extras.seed", minimum=INT64_MIN)
        if seed > INT64_MAX:
            raise ExtrasError(f"extras.seed: {seed} is out of the int64 range")
    fallback = DEFAULT_FALLBACK_WATTS
    if entries.get("energy-fallback-power-watts") is not None:
        fallback = _number(entries["energy-fallback-power-watts"], "extras.energy-fallback-power-watts")
        if fallback < 0:
            raise ExtrasError(f"extras.energy-fallback-power-watts: must not be negative, got {fallback:g}")
        fallback = fallback or DEFAULT_FALLBACK_WATTS
    pcie = _mapping(entries.get("pcie") or {}, "extras.pcie", PCIE_KEYS)
    initial, interval, codes = _xids(entries.get("xids"))
    return ExtrasSpec(
        seed=seed,
        fallback_watts=fallback,
        pcie_tx=_bounds(pcie.get("tx-bytes-per-second"), "extras.pcie.tx-bytes-per-second", DEFAULT_PCIE_TX),
        pcie_rx=_bounds(pcie.get("rx-bytes-per-second"), "extras.pcie.rx-bytes-per-second", DEFAULT_PCIE_RX),
        mig=_mig(entries.get("mig")),
        xid_initial=initial,
        xid_interval_seconds=interval,
        xid_codes=codes,
    )


# -- synthesis -------------------------------------------------------------------------------------------


def mig_uuid(parent_uuid: str, gi: int, ci: int, profile: str) -> str:
    """A stable MIG device uuid: SHA-256 of ``<parent>/<gi>/<ci>/<profile>`` as 8-4-4-4-12 hex."""
    text = hashlib.sha256(f"{parent_uuid}/{gi}/{ci}/{profile}".encode()).hexdigest()[:32]
    return f"MIG-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def process_slot(pid: str, slots: int) -> int:
    """Which (GI, CI) slot a process runs in: the first SHA-256 byte of its pid text, modulo the slots."""
    return hashlib.sha256(pid.encode()).digest()[0] % slots


def cycle_seed(seed: int, cycle: int) -> int:
    """The seed of one cycle's random source: a hash, so neighbouring cycles draw unrelated values."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{cycle}".encode()).digest()[:8], "big")


@dataclass(slots=True)
class _Xid:
    count: int
    last_seen: float


class ExtrasSynthesizer:
    """Synthesized NVML state of one demo config: energy, seen GPU instances, XID counts and schedule.

    Call :meth:`cycle` once per successful collection. A changed config gets a fresh synthesizer, which
    is how "a changed file resets all synthesized state" is kept.
    """

    def __init__(self, spec: ExtrasSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.cycles = 0
        self._last_time: float | None = None
        self._energy: dict[str, tuple[float, float]] = {}  # uuid -> (joules, watts at the last cycle)
        self._seen_instances: frozenset[tuple[str, int]] = frozenset()
        self._slots: dict[str, tuple[tuple[int, int], ...]] = {}  # normalized uuid -> (gi, ci) slots
        self._xids: dict[tuple[str, int], _Xid] = {}
        self._next_xid: float | None = None

    def cycle(self, now: float, uuids: Sequence[str], powers: Sequence[float | None]) -> NvmlExtras:
        """One cycle's readings for the GPUs in table row order (``powers`` in watts, ``None`` unknown)."""
        rng = random.Random(cycle_seed(self.seed, self.cycles))
        self.cycles += 1
        joules = self._integrate_energy(now, uuids, powers)
        gpus = tuple(
            GpuExtras(uuid, joules[index], self.spec.pcie_tx.draw(rng), self.spec.pcie_rx.draw(rng))
            for index, uuid in enumerate(uuids)
        )
        devices, instances = self._mig(rng, uuids)
        self._synthesize_xids(rng, now, uuids)
        return NvmlExtras(gpus, devices, instances)

    def _integrate_energy(self, now: float, uuids: Sequence[str], powers: Sequence[float | None]) -> list[float]:
        """Trapezoid rule over the elapsed wall time; first sight of a GPU starts at 0 J."""
        elapsed = 0.0 if self._last_time is None else now - self._last_time
        self._last_time = now
        previous, self._energy = self._energy, {}
        joules: list[float] = []
        for uuid, power in zip(uuids, powers, strict=True):
            watts = self.spec.fallback_watts if power is None else power
            total = 0.0
            if uuid in previous:
                total, previous_watts = previous[uuid]
                if elapsed > 0:
                    total += (previous_watts + watts) / 2 * elapsed
            self._energy[uuid] = (total, watts)
            joules.append(total)
        return joules

    def _mig(
        self, rng: random.Random, uuids: Sequence[str]
    ) -> tuple[tuple[MigDevice, ...], tuple[MigInstanceReading, ...]]:
        devices: list[MigDevice] = []
        readings: list[MigInstanceReading] = []
        seen: set[tuple[str, int]] = set()
        self._slots = {}
        for entry in self.spec.mig:
            if entry.gpu >= len(uuids):
                continue
            parent = uuids[entry.gpu]
            key_uuid = normalize_uuid(parent)
            slots: list[tuple[int, int]] = []
            for instance in entry.instances:
                readings.append(
                    self._instance_reading(rng, parent, instance, (key_uuid, instance.gi) in self._seen_instances)
                )
                seen.add((key_uuid, instance.gi))
                profile = f"1c.{instance.profile}" if instance.cis > 1 else instance.profile
                for ci in range(instance.cis):
                    devices.append(
                        MigDevice(
                            parent, mig_uuid(key_uuid, instance.gi, ci, instance.profile), instance.gi, ci, profile
                        )
                    )
                    slots.append((instance.gi, ci))
            self._slots[key_uuid] = tuple(slots)
        self._seen_instances = frozenset(seen)
        return tuple(devices), tuple(readings)

    def _instance_reading(
        self, rng: random.Random, parent: str, instance: MigInstanceSpec, seen_before: bool
    ) -> MigInstanceReading:
        """Memory every cycle; GPM-style activity only over a window, i.e. from the second sighting."""
        total = instance.memory_total_bytes
        reserved = total // 200
        fraction = (BUSY_MEMORY if instance.busy else IDLE_MEMORY).draw(rng)
        used = math.trunc(fraction * (total - reserved))
        reading = MigInstanceReading(
            parent,
            instance.gi,
            memory_total_bytes=float(total),
            memory_used_bytes=float(used),
            memory_free_bytes=float(total - used - reserved),
            memory_reserved_bytes=float(reserved),
        )
        if not seen_before:
            return reading
        activity = BUSY_ACTIVITY if instance.busy else IDLE_ACTIVITY
        share = BUSY_PCIE_SHARE if instance.busy else IDLE_PCIE_SHARE
        tx, rx = self.spec.pcie_tx, self.spec.pcie_rx
        return replace(
            reading,
            graphics_activity_ratio=activity.draw(rng),
            sm_activity_ratio=activity.draw(rng),
            sm_occupancy_ratio=activity.draw(rng),
            tensor_activity_ratio=Bounds(activity.min * 0.5, activity.max * 0.8).draw(rng),
            pcie_tx_bytes_per_second=Bounds(tx.min * share.min, tx.max * share.max).draw(rng),
            pcie_rx_bytes_per_second=Bounds(rx.min * share.min, rx.max * share.max).draw(rng),
        )

    def _synthesize_xids(self, rng: random.Random, now: float, uuids: Sequence[str]) -> None:
        """Initial history at the first cycle, then the ongoing schedule (at most 10 events per cycle)."""
        if self.cycles == 1:
            for event in self.spec.xid_initial:
                if event.gpu < len(uuids):
                    self._record(uuids[event.gpu], event.xid, now, event.count)
        interval = self.spec.xid_interval_seconds
        if interval is None or not uuids or not self.spec.xid_codes:
            return
        if self._next_xid is None:
            self._next_xid = now + interval * (0.5 + rng.random())
        events = 0
        while now > self._next_xid and events < MAX_XIDS_PER_CYCLE:
            uuid = uuids[rng.randrange(len(uuids))]
            code = self.spec.xid_codes[rng.randrange(len(self.spec.xid_codes))]
            self._record(uuid, code, self._next_xid, 1)
            self._next_xid += interval * (0.5 + rng.random())
            events += 1
        if now > self._next_xid:  # still behind (a long pause): skip ahead rather than replay a storm
            self._next_xid = now + interval * (0.5 + rng.random())

    def _record(self, uuid: str, xid: int, at: float, count: int) -> None:
        current = self._xids.get((uuid, xid))
        if current is None:
            self._xids[(uuid, xid)] = _Xid(count, at)
        else:
            current.count += count
            current.last_seen = max(current.last_seen, at)

    def xid_records(self) -> tuple[XidRecord, ...]:
        """XID counts so far, sorted by GPU and code."""
        return tuple(
            XidRecord(uuid, xid, state.count, state.last_seen)
            for (uuid, xid), state in sorted(self._xids.items(), key=lambda item: item[0])
        )

    def attribute(self, processes: ProcessList) -> ProcessList:
        """Give processes on a MIG GPU a (GI, CI) slot from their pid; others keep empty ids."""
        if not processes.succeeded or not self._slots:
            return processes
        rows: list[ProcessRow] = []
        for row in processes.rows:
            slots = self._slots.get(normalize_uuid(row.gpu_uuid))
            if not slots:
                rows.append(row)
                continue
            gi, ci = slots[process_slot(row.pid, len(slots))]
            rows.append(replace(row, gpu_instance_id=str(gi), compute_instance_id=str(ci)))
        return replace(processes, rows=tuple(rows))
