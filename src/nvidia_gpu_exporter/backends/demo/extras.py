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

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration, to_seconds
from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends.demo.prng import SplitMix64
from nvidia_gpu_exporter.model.fabric import HEALTHY_FABRIC_MASK, FabricHealthSummary
from nvidia_gpu_exporter.model.snapshot import (
    DCGM_FIELD_COUNTERS,
    NVLINK_MAX_LINKS,
    GpuExtras,
    MigDevice,
    MigInstanceReading,
    NvLinkReading,
    NvmlExtras,
    P2PStatus,
    ProcessList,
    ProcessRow,
    XidRecord,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.verdicts import REASONS, REASONS_BY_NAME, Xids
from nvidia_gpu_exporter.support.sha256 import sha256
from nvidia_gpu_exporter.support.strictyaml import StrictYamlError, YamlNode, YamlScalar

GIB = 1 << 30
DEFAULT_FALLBACK_WATTS = 120.0
DEFAULT_XID_CODES = (13, 31, 43, 48, 63, 79, 119)
MAX_XIDS_PER_CYCLE = 10
MAX_INITIAL_COUNT = 1000  # each is one simulated kernel-log line
MAX_FRESH_EVENTS = 10_000  # kernel-log lines kept between two drains: more than initial events plus a cycle's

EXTRAS_KEYS = ("seed", "energy-fallback-power-watts", "pcie", "mig", "xids", "lost-gpus", "scenarios")
LOST_GPU_DRIVERS = ("nvidia", "vfio-pci", "none")  # what sysfs shows bound to a GPU nvidia-smi does not list
MAX_LOST_GPUS = 8
# The DCGM profile's violation times and NVLink error counts of a simulated GPU: a healthy one, never held down.
HEALTHY_COUNTERS: dict[str, float | None] = dict.fromkeys(DCGM_FIELD_COUNTERS, 0.0)
# Its NVLink fabric's health (the node is an HGX board, see _nvlink_node): no trouble of any kind.
HEALTHY_FABRIC: dict[str, float | None] = {
    "fabric_health_mask": float(HEALTHY_FABRIC_MASK),
    "fabric_health_summary": float(FabricHealthSummary.HEALTHY),
}
# Its NVLinks (an HGX board's GPUs have 18): no errors; their bandwidth is not simulated, as the all-links one is not.
HEALTHY_LINKS = tuple(NvLinkReading(link, None, 0.0, 0.0, 0.0, 0.0) for link in range(NVLINK_MAX_LINKS))
PCIE_KEYS = ("tx-bytes-per-second", "rx-bytes-per-second")
BOUNDS_KEYS = ("min", "max")
MIG_KEYS = ("gpu", "instances")
INSTANCE_KEYS = ("gi", "profile", "cis", "memory-total-bytes", "busy")
XIDS_KEYS = ("initial", "interval", "codes")
XID_EVENT_KEYS = ("gpu", "xid", "count")

_PROFILE_SIZE = re.compile(r"\.([0-9]+)gb$", re.IGNORECASE)

# The faults the demo can simulate, by the name ``extras.scenarios`` turns each on with
# (docs/demo.md, "Faults on request"): the default scenario has none, so a plain demo shows a healthy machine.
# Each active one is logged as simulated. Node faults act on the machine; GPU faults on one GPU each.
LOST_GPU, MISSING_FROM_DRIVER, STUCK_NVIDIA_SMI, RANDOM_XIDS = (
    "lost-gpu",
    "missing-from-driver",
    "stuck-nvidia-smi",
    "random-xids",
)
XID_79 = "xid-79"
NODE_SCENARIOS = (LOST_GPU, MISSING_FROM_DRIVER, STUCK_NVIDIA_SMI, RANDOM_XIDS)  # docs/demo.md says what each does
# The demo's lost GPUs by scenario: the driver sysfs shows bound to each.
LOST_BY_SCENARIO = {LOST_GPU: "nvidia", MISSING_FROM_DRIVER: "none"}


@dataclass(frozen=True, slots=True)
class GpuFault:
    """What a GPU scenario does to its GPU (the second one unless ``gpu:`` says): the cells its simulated nvidia-smi
    prints, a counter that rises at every collection, XIDs its driver logs at the first collection. A cell a
    reason must see for a while (``sustain_seconds``) has said so since that long before the demo started."""

    reason: str  # the verdict reason it shows (model.verdicts)
    cells: tuple[tuple[str, str], ...] = ()
    rising: str = ""  # a counter field that is one higher at every collection
    xid: int = 0
    xid_count: int = 1

    @property
    def held_for(self) -> float:
        """How long before the demo started its cells began to say so."""
        return REASONS_BY_NAME[self.reason].sustain_seconds if self.cells else 0.0


def _xid_faults() -> dict[str, GpuFault]:
    """One scenario per XID reason, with its first code."""
    return {
        reason.name.replace("_", "-"): GpuFault(reason.name, xid=reason.check.codes[0])
        for reason in REASONS
        if isinstance(reason.check, Xids)
    }


def _active(field: str) -> tuple[tuple[str, str], ...]:
    return ((f"clocks_event_reasons.{field}", "Active"),)


GPU_SCENARIOS: dict[str, GpuFault] = {
    XID_79: GpuFault("fallen_off_bus", xid=79, xid_count=2),
    "uncorrectable-ecc-volatile": GpuFault(
        "uncorrectable_ecc_volatile",
        (("ecc.errors.uncorrected.volatile.total", "2"), ("ecc.errors.uncorrected.aggregate.total", "2")),
    ),
    "uncorrectable-ecc-aggregate-rose": GpuFault(
        "uncorrectable_ecc_aggregate_rose", rising="ecc.errors.uncorrected.aggregate.total"
    ),
    "remapped-rows-pending": GpuFault(
        "remapped_rows_pending", (("remapped_rows.pending", "Yes"), ("remapped_rows.uncorrectable", "1"))
    ),
    "remapped-rows-failure": GpuFault("remapped_rows_failure", (("remapped_rows.failure", "Yes"),)),
    "retired-pages-pending": GpuFault("retired_pages_pending", (("retired_pages.pending", "Yes"),)),
    "link-width-below-max": GpuFault("link_width_below_max", (("pcie.link.width.current", "8"),)),
    "hw-thermal-slowdown": GpuFault("hw_thermal_slowdown", _active("hw_thermal_slowdown")),
    "sw-thermal-slowdown": GpuFault("sw_thermal_slowdown", _active("sw_thermal_slowdown")),
    "near-slowdown-temperature": GpuFault("near_slowdown_temperature", (("temperature.gpu.tlimit", "3"),)),
    "hw-power-brake": GpuFault("hw_power_brake", _active("hw_power_brake_slowdown")),
    "sustained-power-cap": GpuFault("sustained_power_cap", _active("sw_power_cap")),
    "fabric-not-ready": GpuFault("fabric_not_ready", (("fabric.state", "In Progress"),)),
    "fabric-failed": GpuFault("fabric_failed", (("fabric.state", "Completed"), ("fabric.status", "Timeout"))),
    "recovery-action-reset": GpuFault("recovery_action_reset", (("gpu_recovery_action", "GPU Reset"),)),
    "recovery-action-reboot": GpuFault("recovery_action_reboot", (("gpu_recovery_action", "Node Reboot"),)),
    "recovery-action-drain-p2p": GpuFault("recovery_action_drain_p2p", (("gpu_recovery_action", "Drain P2P"),)),
    **_xid_faults(),
}
SCENARIOS: tuple[str, ...] = (*NODE_SCENARIOS, *GPU_SCENARIOS)
# Which scenario shows each verdict reason (tests/test_verdict_scenarios.py starts the demo with every one).
REASON_SCENARIOS: dict[str, str] = {
    "missing_from_driver": MISSING_FROM_DRIVER,
    "stuck_nvidia_smi": STUCK_NVIDIA_SMI,
    **{fault.reason: name for name, fault in GPU_SCENARIOS.items()},
}
SCENARIO_XID_INTERVAL_SECONDS = 600.0  # random-xids without extras.xids.interval


class ExtrasError(ValueError):
    """The ``extras:`` block breaks the schema; the message starts with the offending key path."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """A closed range ``[min, max]`` a value is drawn from."""

    min: float
    max: float

    def draw(self, rng: SplitMix64) -> float:
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
    count: int = 1


def _default_gpu(gpu_count: int) -> int:
    """The GPU a GPU scenario without ``gpu:`` acts on: the second, or the only one."""
    return min(1, max(gpu_count - 1, 0))


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
    lost_gpus: tuple[str, ...] = ()  # one driver per GPU that sysfs lists and the simulated nvidia-smi does not
    scenarios: tuple[str, ...] = ()  # the named faults turned on (SCENARIOS), applied by :meth:`with_scenarios`
    scenario_gpus: tuple[int | None, ...] = ()  # each scenario's ``gpu:`` (None: not given)
    gpu_faults: tuple[tuple[int, GpuFault], ...] = ()  # the cell faults of the GPU scenarios, by GPU index

    @property
    def mig_gpus(self) -> frozenset[int]:
        """Indices of the GPUs with a MIG topology (they report MIG mode ``Enabled``)."""
        return frozenset(entry.gpu for entry in self.mig)

    def with_scenarios(self, gpu_count: int) -> ExtrasSpec:
        """The spec with the faults of its named scenarios added, for a simulation of ``gpu_count`` GPUs."""
        spec = self
        gpus = self.scenario_gpus or (None,) * len(self.scenarios)
        for name, gpu in zip(self.scenarios, gpus, strict=True):
            if name in LOST_BY_SCENARIO:
                spec = replace(spec, lost_gpus=(*spec.lost_gpus, LOST_BY_SCENARIO[name]))
            elif name == RANDOM_XIDS and spec.xid_interval_seconds is None:
                spec = replace(spec, xid_interval_seconds=SCENARIO_XID_INTERVAL_SECONDS)
            elif name in GPU_SCENARIOS and gpu_count:
                index = _default_gpu(gpu_count) if gpu is None else gpu
                fault = GPU_SCENARIOS[name]
                if fault.xid:
                    spec = replace(
                        spec, xid_initial=(*spec.xid_initial, XidEventSpec(index, fault.xid, fault.xid_count))
                    )
                if fault.cells or fault.rising:
                    spec = replace(spec, gpu_faults=(*spec.gpu_faults, (index, fault)))
        return spec

    def placed(self, gpu_count: int) -> str:
        """The scenarios in words, each GPU scenario with its GPU: ``lost-gpu, xid-79 on GPU 1``."""
        gpus = self.scenario_gpus or (None,) * len(self.scenarios)
        return ", ".join(
            f"{name} on GPU {_default_gpu(gpu_count) if gpu is None else gpu}" if name in GPU_SCENARIOS else name
            for name, gpu in zip(self.scenarios, gpus, strict=True)
        )

    def check_gpu_count(self, count: int) -> None:
        """Reject GPU indices the simulated machine does not have (known only once it answered)."""
        for position, entry in enumerate(self.mig):
            if entry.gpu >= count:
                raise ExtrasError(f"extras.mig[{position}].gpu: GPU {entry.gpu} does not exist ({count} GPUs)")
        for position, event in enumerate(self.xid_initial):
            if event.gpu >= count:
                raise ExtrasError(f"extras.xids.initial[{position}].gpu: GPU {event.gpu} does not exist ({count} GPUs)")
        for position, gpu in enumerate(self.scenario_gpus):
            if gpu is not None and gpu >= count:
                raise ExtrasError(f"extras.scenarios[{position}].gpu: GPU {gpu} does not exist ({count} GPUs)")


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
)
"""The built-in scenario (docs/demo.md, "The default scenario"), served when no ``--demo-config`` is given: a
healthy machine, every fault left to ``extras.scenarios``."""


# -- validation ------------------------------------------------------------------------------------------


def _finite(node: YamlNode) -> float:
    number = node.number()
    if not math.isfinite(number):
        raise node.fail(f"must be a finite number, got {node.describe()}")
    return number


def _bounds(node: YamlNode) -> Bounds:
    entries = node.mapping(BOUNDS_KEYS)
    low = _finite(entries.required("min"))
    high = _finite(entries.required("max"))
    if low < 0:
        raise entries["min"].fail(f"must not be negative, got {low:g}")
    if low > high:
        raise node.fail(f"min {low:g} is greater than max {high:g}")
    return Bounds(low, high)


def _instance(node: YamlNode) -> MigInstanceSpec:
    entries = node.mapping(INSTANCE_KEYS)
    values: dict[str, Any] = {"gi": entries.required("gi").integer(low=0)}
    profile = entries.required("profile").text()
    if not profile.strip():
        raise entries["profile"].fail(f"must be a non-empty string, got {entries['profile'].describe()}")
    values["profile"] = profile
    if "cis" in entries:
        values["cis"] = entries["cis"].integer(low=0)
    if "memory-total-bytes" in entries:
        values["memory_total_bytes"] = entries["memory-total-bytes"].integer(low=1)
    else:
        size = _PROFILE_SIZE.search(profile)
        if size is None:
            raise entries.missing(
                "memory-total-bytes", f"required, the profile {go_quote(profile)} has no .<N>gb size to derive it"
            )
        values["memory_total_bytes"] = int(size.group(1)) * GIB
    if "busy" in entries:
        values["busy"] = entries["busy"].boolean()
    return MigInstanceSpec(**values)


def _mig(node: YamlNode) -> tuple[MigGpuSpec, ...]:
    gpus: list[MigGpuSpec] = []
    for item in node.items():
        entries = item.mapping(MIG_KEYS)
        gpu = entries.required("gpu").integer(low=0)
        if any(existing.gpu == gpu for existing in gpus):
            raise entries["gpu"].fail(f"GPU {gpu} already has a MIG topology")
        raw_instances = entries.required("instances")
        if not raw_instances.items():
            raise raw_instances.fail("needs at least one GPU instance")
        instances: list[MigInstanceSpec] = []
        for raw in raw_instances.items():
            instance = _instance(raw)
            if any(existing.gi == instance.gi for existing in instances):
                raise raw.mapping(INSTANCE_KEYS)["gi"].fail(f"GPU instance {instance.gi} is listed twice")
            instances.append(instance)
        gpus.append(MigGpuSpec(gpu, tuple(instances)))
    return tuple(gpus)


def _xid_event(node: YamlNode) -> XidEventSpec:
    entries = node.mapping(XID_EVENT_KEYS)
    values = {key: entries.required(key).integer(low=0) for key in ("gpu", "xid")}
    if "count" in entries:
        values["count"] = entries["count"].integer(low=0, high=MAX_INITIAL_COUNT)
    return XidEventSpec(**values)


def _interval_seconds(node: YamlNode) -> float:
    text = node.text()
    try:
        nanoseconds = parse_duration(text)
    except DurationError as error:
        raise node.fail(str(error)) from error
    if nanoseconds <= 0:
        raise node.fail(f"must be greater than 0, got {go_quote(text)}")
    return to_seconds(nanoseconds)


def _xids(node: YamlNode, values: dict[str, Any]) -> None:
    entries = node.mapping(XIDS_KEYS)
    if "initial" in entries:
        events = (_xid_event(item) for item in entries["initial"].items())
        values["xid_initial"] = tuple(event for event in events if event.count)
    if "interval" in entries:
        values["xid_interval_seconds"] = _interval_seconds(entries["interval"])
    if "codes" in entries:
        codes = entries["codes"]
        if not codes.items():
            raise codes.fail("needs at least one XID code")
        values["xid_codes"] = tuple(code.integer(low=0) for code in codes.items())


def _lost_gpus(node: YamlNode) -> tuple[str, ...]:
    items = node.items()
    if len(items) > MAX_LOST_GPUS:
        raise node.fail(f"at most {MAX_LOST_GPUS} lost GPUs, got {len(items)}")
    drivers = []
    for item in items:
        driver = item.text()
        if driver not in LOST_GPU_DRIVERS:
            raise item.fail(f"must be one of {', '.join(LOST_GPU_DRIVERS)}, got {item.describe()}")
        drivers.append(driver)
    return tuple(drivers)


SCENARIO_KEYS = ("name", "gpu")


def _scenarios(node: YamlNode, lost_gpus: int) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
    """The scenario names, and each one's GPU: an item is a name, or ``{name, gpu}`` for a GPU scenario."""
    names: list[str] = []
    gpus: list[int | None] = []
    for item in node.items():
        entries = (
            item.mapping(SCENARIO_KEYS, "a scenario name or {name, gpu}") if not isinstance(item, YamlScalar) else None
        )
        named = entries.required("name") if entries is not None else item
        name = named.text()
        if name not in SCENARIOS:
            raise named.fail(f"must be one of {', '.join(SCENARIOS)}, got {named.describe()}")
        if name in names:
            raise named.fail(f"the scenario {go_quote(name)} is listed twice")
        gpu = None
        if entries is not None and "gpu" in entries:
            if name not in GPU_SCENARIOS:
                raise entries["gpu"].fail(f"the scenario {go_quote(name)} is not one GPU's: it takes no gpu")
            gpu = entries["gpu"].integer(low=0)
        names.append(name)
        gpus.append(gpu)
    lost = sum(1 for name in names if name in LOST_BY_SCENARIO)
    if lost and lost_gpus + lost > MAX_LOST_GPUS:
        listed = " and ".join(name for name in names if name in LOST_BY_SCENARIO)
        raise node.fail(f"{listed} would lose more than {MAX_LOST_GPUS} GPUs with extras.lost-gpus")
    return tuple(names), tuple(gpus) if any(gpu is not None for gpu in gpus) else ()


def parse_extras(node: YamlNode | None) -> ExtrasSpec:
    """Validate the ``extras:`` block (``None``: no block) into a spec; what is not set keeps its default."""
    if node is None:
        return ExtrasSpec()
    try:
        entries = node.mapping(EXTRAS_KEYS)
        values: dict[str, Any] = {}
        if "seed" in entries:
            values["seed"] = entries["seed"].integer()
        if "energy-fallback-power-watts" in entries:
            watts = entries["energy-fallback-power-watts"]
            fallback = _finite(watts)
            if fallback < 0:
                raise watts.fail(f"must not be negative, got {fallback:g}")
            if fallback:  # 0 asks for the default
                values["fallback_watts"] = fallback
        if "pcie" in entries:
            pcie = entries["pcie"].mapping(PCIE_KEYS)
            for key, name in (("tx-bytes-per-second", "pcie_tx"), ("rx-bytes-per-second", "pcie_rx")):
                if key in pcie:
                    values[name] = _bounds(pcie[key])
        if "mig" in entries:
            values["mig"] = _mig(entries["mig"])
        if "xids" in entries:
            _xids(entries["xids"], values)
        if "lost-gpus" in entries:
            values["lost_gpus"] = _lost_gpus(entries["lost-gpus"])
        if "scenarios" in entries:
            values["scenarios"], values["scenario_gpus"] = _scenarios(
                entries["scenarios"], len(values.get("lost_gpus", ()))
            )
        return ExtrasSpec(**values)
    except StrictYamlError as error:
        raise ExtrasError(str(error)) from None


# -- synthesis -------------------------------------------------------------------------------------------


def mig_uuid(parent_uuid: str, gi: int, ci: int, profile: str) -> str:
    """A stable MIG device uuid: SHA-256 of ``<parent>/<gi>/<ci>/<profile>`` as 8-4-4-4-12 hex."""
    text = sha256(f"{parent_uuid}/{gi}/{ci}/{profile}".encode()).hexdigest()[:32]
    return f"MIG-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def process_slot(pid: str, slots: int) -> int:
    """Which (GI, CI) slot a process runs in: the first SHA-256 byte of its pid text, modulo the slots."""
    return sha256(pid.encode()).digest()[0] % slots


def _nvlink_node(uuids: Sequence[str]) -> P2PStatus:
    """The simulated node's GPUs all share one NVLink fabric (an HGX board): every pair's P2P status is OK (0)."""
    ok = (0,) * len(uuids)
    return P2PStatus(tuple(uuids), (ok,) * len(uuids))


def cycle_seed(seed: int, cycle: int) -> int:
    """The seed of one cycle's random source: a hash, so neighbouring cycles draw unrelated values."""
    return int.from_bytes(sha256(f"{seed}/{cycle}".encode()).digest()[:8], "big")


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
        self._fresh: list[tuple[str, int, float]] = []  # (uuid, xid, at) since the last drain, for the kernel log

    def cycle(self, now: float, uuids: Sequence[str], powers: Sequence[float | None]) -> NvmlExtras:
        """One cycle's readings for the GPUs in table row order (``powers`` in watts, ``None`` unknown)."""
        rng = SplitMix64(cycle_seed(self.seed, self.cycles))
        self.cycles += 1
        joules = self._integrate_energy(now, uuids, powers)
        gpus = tuple(
            GpuExtras(
                uuid,
                joules[index],
                self.spec.pcie_tx.draw(rng),
                self.spec.pcie_rx.draw(rng),
                nvlink_links=HEALTHY_LINKS,
                **HEALTHY_COUNTERS,
                **HEALTHY_FABRIC,
            )
            for index, uuid in enumerate(uuids)
        )
        devices, instances = self._mig(rng, uuids)
        self._synthesize_xids(rng, now, uuids)
        return NvmlExtras(gpus, devices, instances, _nvlink_node(uuids))

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
        self, rng: SplitMix64, uuids: Sequence[str]
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
        self, rng: SplitMix64, parent: str, instance: MigInstanceSpec, seen_before: bool
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

    def _synthesize_xids(self, rng: SplitMix64, now: float, uuids: Sequence[str]) -> None:
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
            uuid = uuids[rng.below(len(uuids))]
            code = self.spec.xid_codes[rng.below(len(self.spec.xid_codes))]
            self._record(uuid, code, self._next_xid, 1)
            self._next_xid += interval * (0.5 + rng.random())
            events += 1
        if now > self._next_xid:  # still behind (a long pause): skip ahead rather than replay a storm
            self._next_xid = now + interval * (0.5 + rng.random())

    def _record(self, uuid: str, xid: int, at: float, count: int) -> None:
        room = MAX_FRESH_EVENTS - len(self._fresh)
        self._fresh.extend([(uuid, xid, at)] * max(0, min(count, room)))
        current = self._xids.get((uuid, xid))
        if current is None:
            self._xids[(uuid, xid)] = _Xid(count, at)
        else:
            current.count += count
            current.last_seen = max(current.last_seen, at)

    def drain_events(self) -> list[tuple[str, int, float]]:
        """The XID events synthesized since the last call, one per event, oldest first (bounded)."""
        fresh, self._fresh = self._fresh, []
        return fresh

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
