"""What is wrong with a GPU and what to do about it: the one table of verdict reasons (docs/health.md, "Verdicts").

Each reason reads one input the exporter already collects (a query field's cell, XIDs from the kernel log or
NVML, the GPUs fallen off the bus, the PCI bus, stuck nvidia-smi children), puts one subsystem of one GPU in a
state (degraded or failing), says what to do, and holds for a while after its evidence last moved so a verdict
does not flap. Written from NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors), its GPU debug guidelines
(docs.nvidia.com/deploy/gpu-debug-guidelines) and NVML's recovery actions, in our own words.
:mod:`.judge` evaluates the table; the exposition, ``/-/health``, the live view and the alert rules serve it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from nvidia_gpu_exporter.model.fabric import FABRIC_FIELDS, FabricManagerStatus


class Subsystem(str, Enum):
    MEMORY = "memory"
    PCIE = "pcie"
    THERMAL = "thermal"
    POWER = "power"
    NVLINK = "nvlink"
    DRIVER = "driver"


class State(IntEnum):
    """A subsystem's (or a GPU's) state; the worst of its reasons, the gauge's value."""

    OK = 0
    DEGRADED = 1
    FAILING = 2

    @property
    def label(self) -> str:
        return self.name.lower()


class Action(str, Enum):
    """What the operator should do, from the mildest to the most drastic."""

    RESTART_JOB = "restart_job"
    CHECK_COOLING = "check_cooling"
    CHECK_POWER = "check_power"
    CHECK_FABRIC = "check_fabric"
    DRAIN_P2P = "drain_p2p"
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    REPLACE_GPU = "replace_gpu"

    @property
    def text(self) -> str:
        return ACTION_TEXTS[self]


ACTION_TEXTS: dict[Action, str] = {
    Action.RESTART_JOB: "Restart the affected job; reset the GPU at a convenient time",
    Action.CHECK_COOLING: "Check the node's cooling (fans, airflow, inlet temperature)",
    Action.CHECK_POWER: "Check the node's power supply and the GPU's power limit and cabling",
    Action.CHECK_FABRIC: "Check nvidia-fabricmanager and the NVLink connections",
    Action.DRAIN_P2P: "Drain the jobs that use peer-to-peer (NVLink) traffic on this GPU",
    Action.RESET_GPU: "Drain the GPU's jobs, then reset it (nvidia-smi -r) or reboot the node",
    Action.REBOOT_NODE: "Drain the node and reboot it; if it repeats, reseat the GPU and check power and cooling",
    Action.REPLACE_GPU: "Drain the GPU and replace the card (RMA)",
}


class Test(str, Enum):
    """How a cell's value is judged."""

    ACTIVE = "active"  # 1 (Yes, Active, Enabled)
    POSITIVE = "positive"  # above 0
    RISES = "rises"  # above the value the previous collection read
    AT_MOST = "at_most"  # at most the threshold
    ONE_OF = "one_of"  # one of the listed values (an enum field)
    BELOW_FIELD = "below_field"  # below another field's value on the same GPU


@dataclass(frozen=True, slots=True)
class Cell:
    """A query field's cell: ``fields`` lists its spellings (the first one queried counts)."""

    fields: tuple[str, ...]
    test: Test
    values: tuple[float, ...] = ()  # AT_MOST's threshold, ONE_OF's values
    other: str = ""  # BELOW_FIELD's field


@dataclass(frozen=True, slots=True)
class Xids:
    """Any of these XID codes on the GPU, from the XID source (kernel log or NVML)."""

    codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FabricManager:
    """The fabric manager status DCGM derives from ``fabric.state`` and ``fabric.status`` (model/fabric.py, served as
    DCGM_FI_DEV_FABRIC_MANAGER_STATUS) is one of these."""

    statuses: tuple[FabricManagerStatus, ...]


@dataclass(frozen=True, slots=True)
class FallenOffBus:
    """The kernel log says the GPU fell off the bus (its own line or XID 79), or NVML counted an XID 79."""


@dataclass(frozen=True, slots=True)
class MissingFromDriver:
    """The PCI bus lists the GPU, the successful collection does not."""


@dataclass(frozen=True, slots=True)
class StuckChildren:
    """nvidia-smi children SIGKILL did not end (a wedged driver): every GPU of the node."""


Check = Cell | Xids | FabricManager | FallenOffBus | MissingFromDriver | StuckChildren

UNTIL_REBOOT: float | None = None  # a hold that ends only when the evidence does (the node reboots)


@dataclass(frozen=True, slots=True)
class Reason:
    """One row of the table."""

    name: str  # the ``reason`` label value, stable
    subsystem: Subsystem
    state: State
    check: Check
    action: Action
    hold_seconds: float | None  # how long it holds after its evidence last moved; None: as long as the evidence
    summary: str  # what it means, in a few words
    dcgm_error: str  # dcgm-exporter's ``health_error_code`` for it
    sustain_seconds: float = 0.0  # a cell must hold this long before the reason fires

    @property
    def input(self) -> str:
        """The input in words (docs/health.md's column)."""
        check = self.check
        if isinstance(check, Cell):
            field = " or ".join(f"`{name}`" for name in check.fields)
            if check.test is Test.ACTIVE:
                condition = "is active (1, Yes)"
            elif check.test is Test.POSITIVE:
                condition = "is above 0"
            elif check.test is Test.RISES:
                condition = "rose since the previous collection"
            elif check.test is Test.AT_MOST:
                condition = f"is at most {check.values[0]:g}"
            elif check.test is Test.ONE_OF:
                condition = "is one of " + ", ".join(f"{value:g}" for value in check.values)
            else:
                condition = f"is below `{check.other}`"
            sustained = f" for {_duration(self.sustain_seconds)}" if self.sustain_seconds else ""
            return f"{field} {condition}{sustained}"
        if isinstance(check, Xids):
            return "XID " + ", ".join(str(code) for code in check.codes)
        if isinstance(check, FabricManager):
            statuses = ", ".join(
                f"{int(status)} ({status.name.lower().replace('_', ' ')})" for status in check.statuses
            )
            fields = " and ".join(f"`{name}`" for name in FABRIC_FIELDS)
            return f"the fabric manager status DCGM derives from {fields} is {statuses}"
        if isinstance(check, FallenOffBus):
            return "the kernel log's `fallen off the bus` line or XID 79"
        if isinstance(check, MissingFromDriver):
            return "the PCI bus lists the GPU, the successful collection does not"
        return "an nvidia-smi child SIGKILL did not end (any GPU of the node)"

    @property
    def hold(self) -> str:
        """The hold in words (docs/health.md's column)."""
        if self.hold_seconds is None:
            return "until the node reboots"
        if self.hold_seconds == 0:
            return "while it holds"
        return _duration(self.hold_seconds)


def _duration(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


_CELL_HOLD = 300.0  # a cell's reason holds 5 minutes after the cell last said so: a throttle blinking is one event
_XID_CRITICAL_HOLD = 3600.0
_XID_WARNING_HOLD = 1800.0


def _reasons(*reasons: Reason) -> tuple[Reason, ...]:
    names = [reason.name for reason in reasons]
    if len(set(names)) != len(names):
        raise ValueError("a reason name is listed twice")
    return reasons


def _event_reason(suffix: str) -> tuple[str, ...]:
    """A clock event reason's two spellings (throttle reasons before driver 555)."""
    return (f"clocks_event_reasons.{suffix}", f"clocks_throttle_reasons.{suffix}")


REASONS: tuple[Reason, ...] = _reasons(
    # -- memory --------------------------------------------------------------------------------------------------
    Reason(
        "uncorrectable_ecc_volatile",
        Subsystem.MEMORY,
        State.FAILING,
        Cell(("ecc.errors.uncorrected.volatile.total",), Test.POSITIVE),
        Action.RESET_GPU,
        _CELL_HOLD,
        "uncorrectable ECC errors since the driver loaded",
        "DCGM_FR_VOLATILE_DBE_DETECTED",
    ),
    Reason(
        "uncorrectable_ecc_aggregate_rose",
        Subsystem.MEMORY,
        State.DEGRADED,
        Cell(("ecc.errors.uncorrected.aggregate.total",), Test.RISES),
        Action.RESET_GPU,
        _XID_CRITICAL_HOLD,
        "a new uncorrectable ECC error in the GPU's lifetime count",
        "DCGM_FR_DBE_VIOLATION",
    ),
    Reason(
        "remapped_rows_pending",
        Subsystem.MEMORY,
        State.DEGRADED,
        Cell(("remapped_rows.pending",), Test.ACTIVE),
        Action.RESET_GPU,
        _CELL_HOLD,
        "a row remapping waits for a GPU reset",
        "DCGM_FR_PENDING_ROW_REMAP",
    ),
    Reason(
        "remapped_rows_failure",
        Subsystem.MEMORY,
        State.FAILING,
        Cell(("remapped_rows.failure",), Test.ACTIVE),
        Action.REPLACE_GPU,
        _CELL_HOLD,
        "row remapping failed: the memory cannot be repaired",
        "DCGM_FR_ROW_REMAP_FAILURE",
    ),
    Reason(
        "retired_pages_pending",
        Subsystem.MEMORY,
        State.DEGRADED,
        Cell(("retired_pages.pending",), Test.ACTIVE),
        Action.RESET_GPU,
        _CELL_HOLD,
        "a page retirement waits for a GPU reset",
        "DCGM_FR_PENDING_PAGE_RETIREMENTS",
    ),
    Reason(
        "xid_uncorrectable_memory",
        Subsystem.MEMORY,
        State.FAILING,
        Xids((48, 95, 140)),
        Action.RESET_GPU,
        _XID_CRITICAL_HOLD,
        "an uncorrectable (or uncontained) memory error",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "xid_memory_repair_failed",
        Subsystem.MEMORY,
        State.FAILING,
        Xids((64,)),
        Action.REPLACE_GPU,
        _XID_CRITICAL_HOLD,
        "page retirement or row remapping failed",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "xid_memory_repair_pending",
        Subsystem.MEMORY,
        State.DEGRADED,
        Xids((63, 92)),
        Action.RESET_GPU,
        _XID_WARNING_HOLD,
        "a memory repair was recorded, or single-bit errors come often",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "xid_contained_memory",
        Subsystem.MEMORY,
        State.DEGRADED,
        Xids((94,)),
        Action.RESTART_JOB,
        _XID_WARNING_HOLD,
        "a contained memory error ended the job that hit it",
        "DCGM_FR_XID_ERROR",
    ),
    # -- PCIe ----------------------------------------------------------------------------------------------------
    Reason(
        "link_width_below_max",
        Subsystem.PCIE,
        State.DEGRADED,
        Cell(("pcie.link.width.current",), Test.BELOW_FIELD, other="pcie.link.width.max"),
        Action.REBOOT_NODE,
        _CELL_HOLD,
        "the PCIe link trained narrower than it can",
        "DCGM_FR_PCIE_WIDTH",
        sustain_seconds=300.0,
    ),
    Reason(
        "fallen_off_bus",
        Subsystem.PCIE,
        State.FAILING,
        FallenOffBus(),
        Action.REBOOT_NODE,
        UNTIL_REBOOT,
        "the GPU fell off the bus",
        "DCGM_FR_FALLEN_OFF_BUS",
    ),
    # -- thermal -------------------------------------------------------------------------------------------------
    Reason(
        "hw_thermal_slowdown",
        Subsystem.THERMAL,
        State.DEGRADED,
        Cell(_event_reason("hw_thermal_slowdown"), Test.ACTIVE),
        Action.CHECK_COOLING,
        _CELL_HOLD,
        "the hardware halves the clocks: the GPU is too hot",
        "DCGM_FR_CLOCK_THROTTLE_THERMAL",
    ),
    Reason(
        "sw_thermal_slowdown",
        Subsystem.THERMAL,
        State.DEGRADED,
        Cell(_event_reason("sw_thermal_slowdown"), Test.ACTIVE),
        Action.CHECK_COOLING,
        _CELL_HOLD,
        "the driver lowers the clocks to cool the GPU",
        "DCGM_FR_CLOCK_THROTTLE_THERMAL",
        sustain_seconds=60.0,
    ),
    Reason(
        "near_slowdown_temperature",
        Subsystem.THERMAL,
        State.DEGRADED,
        Cell(("temperature.gpu.tlimit",), Test.AT_MOST, (5.0,)),
        Action.CHECK_COOLING,
        _CELL_HOLD,
        "within 5 degrees of the slowdown temperature",
        "DCGM_FR_TEMP_VIOLATION",
        sustain_seconds=60.0,
    ),
    # -- power ---------------------------------------------------------------------------------------------------
    Reason(
        "hw_power_brake",
        Subsystem.POWER,
        State.DEGRADED,
        Cell(_event_reason("hw_power_brake_slowdown"), Test.ACTIVE),
        Action.CHECK_POWER,
        _CELL_HOLD,
        "the power brake slows the GPU (the power supply asked for it)",
        "DCGM_FR_CLOCK_THROTTLE_POWER",
    ),
    Reason(
        "sustained_power_cap",
        Subsystem.POWER,
        State.DEGRADED,
        Cell(_event_reason("sw_power_cap"), Test.ACTIVE),
        Action.CHECK_POWER,
        _CELL_HOLD,
        "capped at its power limit for half an hour",
        "DCGM_FR_CLOCK_THROTTLE_POWER",
        sustain_seconds=1800.0,
    ),
    # -- NVLink and fabric ---------------------------------------------------------------------------------------
    Reason(
        "xid_nvlink",
        Subsystem.NVLINK,
        State.FAILING,
        Xids((74,)),
        Action.RESET_GPU,
        _XID_CRITICAL_HOLD,
        "an NVLink error",
        "DCGM_FR_NVLINK_ERROR_CRITICAL",
    ),
    Reason(
        "xid_c2c_link",
        Subsystem.NVLINK,
        State.DEGRADED,
        Xids((121,)),
        Action.RESET_GPU,
        _XID_WARNING_HOLD,
        "a C2C (chip-to-chip) link error",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "fabric_not_ready",
        Subsystem.NVLINK,
        State.DEGRADED,
        Cell(("fabric.state",), Test.ONE_OF, (1.0, 2.0)),
        Action.CHECK_FABRIC,
        _CELL_HOLD,
        "the NVLink fabric has not finished training (not started, in progress)",
        "DCGM_FR_FABRIC_PROBE_STATE",
        sustain_seconds=300.0,
    ),
    Reason(
        "fabric_failed",
        Subsystem.NVLINK,
        State.FAILING,
        FabricManager((FabricManagerStatus.FAILURE,)),
        Action.CHECK_FABRIC,
        _CELL_HOLD,
        "the NVLink fabric registration completed with an error",
        "DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR",
    ),
    # -- driver --------------------------------------------------------------------------------------------------
    Reason(
        "recovery_action_reset",
        Subsystem.DRIVER,
        State.FAILING,
        Cell(("gpu_recovery_action",), Test.ONE_OF, (1.0, 4.0)),
        Action.RESET_GPU,
        _CELL_HOLD,
        "the driver asks for a GPU reset (gpu reset, drain and reset)",
        "DCGM_FR_GPU_RECOVERY_RESET",
    ),
    Reason(
        "recovery_action_reboot",
        Subsystem.DRIVER,
        State.FAILING,
        Cell(("gpu_recovery_action",), Test.ONE_OF, (2.0,)),
        Action.REBOOT_NODE,
        _CELL_HOLD,
        "the driver asks for a node reboot",
        "DCGM_FR_GPU_RECOVERY_REBOOT",
    ),
    Reason(
        "recovery_action_drain_p2p",
        Subsystem.DRIVER,
        State.DEGRADED,
        Cell(("gpu_recovery_action",), Test.ONE_OF, (3.0,)),
        Action.DRAIN_P2P,
        _CELL_HOLD,
        "the driver asks to drain peer-to-peer traffic",
        "DCGM_FR_GPU_RECOVERY_DRAIN_P2P",
    ),
    Reason(
        "xid_gpu_halted",
        Subsystem.DRIVER,
        State.FAILING,
        Xids((62, 119, 120)),
        Action.RESET_GPU,
        _XID_CRITICAL_HOLD,
        "the GPU's micro-controller or GSP firmware stopped answering",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "xid_init_failure",
        Subsystem.DRIVER,
        State.FAILING,
        Xids((143,)),
        Action.REBOOT_NODE,
        _XID_CRITICAL_HOLD,
        "the GPU failed to initialize",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "xid_driver_warning",
        Subsystem.DRIVER,
        State.DEGRADED,
        Xids((38, 61)),
        Action.RESET_GPU,
        _XID_WARNING_HOLD,
        "a driver firmware error or micro-controller warning",
        "DCGM_FR_XID_ERROR",
    ),
    Reason(
        "missing_from_driver",
        Subsystem.DRIVER,
        State.FAILING,
        MissingFromDriver(),
        Action.REBOOT_NODE,
        0.0,
        "the PCI bus has the GPU, the driver does not",
        "DCGM_FR_DEVICE_COUNT_MISMATCH",
    ),
    Reason(
        "stuck_nvidia_smi",
        Subsystem.DRIVER,
        State.FAILING,
        StuckChildren(),
        Action.REBOOT_NODE,
        _CELL_HOLD,
        "nvidia-smi hangs in the driver",
        "DCGM_FR_NVML_API",
    ),
)

REASONS_BY_NAME: dict[str, Reason] = {reason.name: reason for reason in REASONS}

# The inputs the issue names that no reason reads yet, with why (docs/health.md lists them).
NOT_EVALUATED: tuple[tuple[str, str], ...] = (
    ("PCIe replay rate", "the replay counter is read only by the nvml backend under the DCGM profile"),
    ("PCIe link generation below its maximum", "an idle GPU lowers its link generation to save power: no fault"),
    ("temperature near the shutdown limit", "no collected field gives the shutdown temperature"),
    ("NVLink error counters and down links", "no backend reads per-link NVLink state yet"),
    (
        "NVSwitch SXids",
        "an SXid names a switch, not a GPU: `NvidiaNvswitchSxidFatal` alerts on it (see above)",
    ),
    ('NVML\'s "GPU is lost"', "it fails the whole collection: `nvidia_smi_nvml_return_code` says so, not per GPU"),
)


@dataclass(frozen=True, slots=True)
class Finding:
    """A reason that holds on a GPU now, with its evidence."""

    reason: Reason
    evidence: str  # what was seen: "XID 48 x2", "remapped_rows.pending = Yes"
    since: float  # Unix time the reason began to hold
    last_evidence: float  # Unix time its evidence last moved (the hold counts from here)


@dataclass(frozen=True, slots=True)
class SubsystemVerdict:
    subsystem: Subsystem
    state: State
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    """One GPU's verdict: every subsystem, in table order; ``uuid`` as the driver spells it ("" when unknown)."""

    uuid: str
    pci_bus_id: str  # nvidia-smi's form, "" when unknown
    subsystems: tuple[SubsystemVerdict, ...]

    @property
    def state(self) -> State:
        return max((subsystem.state for subsystem in self.subsystems), default=State.OK)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(finding for subsystem in self.subsystems for finding in subsystem.findings)

    @property
    def action(self) -> Action | None:
        """The most drastic action of the worst findings (None when healthy)."""
        worst = [finding for finding in self.findings if finding.reason.state is self.state]
        return max((finding.reason.action for finding in worst), key=list(Action).index, default=None)
