"""The nvidia-smi field vocabulary, written once: field families, the header nvidia-smi prints for a field, the
fields that identify a GPU, and the two fields whose values are enums.

Every backend speaks it: exec asks nvidia-smi for these fields, nvml renders the same headers and cells from
NVML, the demo simulates them, and the exposition names metrics after the headers. A field's header (the
"RField", e.g. ``fan.speed [%]``) decides its metric name and unit, so it must read the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

# Always queried, never excluded (gpu_info and every uuid label depend on them), in the order gpu_info's HELP
# text lists them.
IDENTITY_FIELDS = (
    "uuid",
    "name",
    "driver_model.current",
    "driver_model.pending",
    "vbios_version",
    "driver_version",
    "pci.bus_id",
    "serial",
    "compute_cap",
    "pci.sub_device_id",
    "index",
)

ECC_KINDS = ("corrected", "uncorrected")
ECC_SCOPES = ("volatile", "aggregate")
# The memory locations with an error counter of their own, in nvidia-smi's order; every scope also has a total.
ECC_LOCATIONS = ("device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu", "sram")
ECC_TOTAL = "total"

# Clock event reasons (called throttle reasons before driver 555), in nvidia-smi's order: two bitmasks, then one
# flag per reason. The bits are NVML's nvmlClocksEventReasons.
EVENT_REASONS_PREFIX = "clocks_event_reasons"
THROTTLE_REASONS_PREFIX = "clocks_throttle_reasons"
REASON_MASKS = ("supported", "active")
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "sw_thermal_slowdown": 0x20,
    "sync_boost": 0x10,
}
REASON_SUFFIXES = (*REASON_MASKS, *REASON_BITS)
# The reasons with a time counter (microseconds active), in nvidia-smi's order.
REASON_COUNTER_SUFFIXES = (
    "sw_power_cap",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
REASON_COUNTERS_PREFIX = "clocks_event_reasons_counters"

_CLOCK_PREFIXES = ("clocks.current.", "clocks.applications.", "clocks.default_applications.", "clocks.max.")


class ValueKind(Enum):
    """How a field's cells become numbers: the generic rule, or one of the two enum fields (keyed by query name)."""

    GENERIC = "generic"
    RECOVERY_ACTION = "gpu_recovery_action"
    FABRIC_STATE = "fabric.state"


def value_kind(qfield: str) -> ValueKind:
    for kind in (ValueKind.RECOVERY_ACTION, ValueKind.FABRIC_STATE):
        if qfield == kind.value:
            return kind
    return ValueKind.GENERIC


def ecc_error_fields(locations: Iterable[str] = (*ECC_LOCATIONS, ECC_TOTAL)) -> tuple[str, ...]:
    """``ecc.errors.<kind>.<scope>.<location>`` for every kind and scope, in nvidia-smi's order."""
    wanted = tuple(locations)
    return tuple(
        f"ecc.errors.{kind}.{scope}.{location}" for kind in ECC_KINDS for scope in ECC_SCOPES for location in wanted
    )


def reason_fields(prefix: str = EVENT_REASONS_PREFIX) -> tuple[str, ...]:
    """The clock-reason fields under their modern (``clocks_event_reasons``) or legacy prefix."""
    return tuple(f"{prefix}.{suffix}" for suffix in REASON_SUFFIXES)


def reason_counter_fields() -> tuple[str, ...]:
    return tuple(f"{REASON_COUNTERS_PREFIX}.{suffix}" for suffix in REASON_COUNTER_SUFFIXES)


# Every query field the exporter knows, in nvidia-smi's --help-query-gpu order (a current driver's list). The
# nvml backend reads all of them, the demo simulates a subset, and exec asks nvidia-smi itself which it has.
QUERY_FIELDS: tuple[str, ...] = (
    "timestamp",
    "driver_version",
    "count",
    "name",
    "serial",
    "uuid",
    "pci.bus_id",
    "pci.domain",
    "pci.bus",
    "pci.device",
    "pci.baseClass",
    "pci.subClass",
    "pci.device_id",
    "pci.sub_device_id",
    "pcie.link.gen.current",
    "pcie.link.gen.gpucurrent",
    "pcie.link.gen.max",
    "pcie.link.gen.gpumax",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "index",
    "display_mode",
    "display_attached",
    "display_active",
    "persistence_mode",
    "addressing_mode",
    "accounting.mode",
    "accounting.buffer_size",
    "driver_model.current",
    "driver_model.pending",
    "vbios_version",
    "inforom.img",
    "inforom.oem",
    "inforom.ecc",
    "inforom.pwr",
    "inforom.checksum_validation",
    "gpu_recovery_action",
    "gom.current",
    "gom.pending",
    "fan.speed",
    "pstate",
    *reason_fields(),
    *reason_counter_fields(),
    "memory.total",
    "memory.reserved",
    "memory.used",
    "memory.free",
    "compute_mode",
    "compute_cap",
    "utilization.gpu",
    "utilization.memory",
    "utilization.encoder",
    "utilization.decoder",
    "utilization.jpeg",
    "utilization.ofa",
    "encoder.stats.sessionCount",
    "encoder.stats.averageFps",
    "encoder.stats.averageLatency",
    "dramEncryption.mode.current",
    "dramEncryption.mode.pending",
    "ecc.mode.current",
    "ecc.mode.pending",
    *ecc_error_fields(),
    "ecc.errors.uncorrected.volatile.sram.parity",
    "ecc.errors.uncorrected.volatile.sram.secded",
    "ecc.errors.uncorrected.aggregate.sram.parity",
    "ecc.errors.uncorrected.aggregate.sram.secded",
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
    "ecc.errors.uncorrected.aggregate.sram.l2",
    "ecc.errors.uncorrected.aggregate.sram.sm",
    "ecc.errors.uncorrected.aggregate.sram.mcu",
    "ecc.errors.uncorrected.aggregate.sram.pcie",
    "ecc.errors.uncorrected.aggregate.sram.other",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.correctable_inactive",
    "remapped_rows.uncorrectable",
    "remapped_rows.uncorrectable_inactive",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "remapped_rows.histogram.max",
    "remapped_rows.histogram.high",
    "remapped_rows.histogram.partial",
    "remapped_rows.histogram.low",
    "remapped_rows.histogram.none",
    "temperature.gpu",
    "temperature.gpu.tlimit",
    "temperature.memory",
    "power.management",
    "power.draw",
    "power.draw.average",
    "power.draw.instant",
    "power.limit",
    "enforced.power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "edpp_multiplier",
    "clocks.current.graphics",
    "clocks.current.sm",
    "clocks.current.memory",
    "clocks.current.video",
    "clocks.applications.graphics",
    "clocks.applications.memory",
    "clocks.default_applications.graphics",
    "clocks.default_applications.memory",
    "clocks.max.graphics",
    "clocks.max.sm",
    "clocks.max.memory",
    "mig.mode.current",
    "mig.mode.pending",
    "gsp.mode.current",
    "gsp.mode.default",
    "c2c.mode",
    "protected_memory.total",
    "protected_memory.used",
    "protected_memory.free",
    "fabric.state",
    "fabric.status",
    "fabric.cliqueId",
    "fabric.clusterUuid",
    "platform.chassis_serial_number",
    "platform.slot_number",
    "platform.tray_index",
    "platform.host_id",
    "platform.peer_type",
    "platform.module_id",
    "platform.gpu_fabric_guid",
    "hostname",
)


def fields_under(prefix: str) -> tuple[str, ...]:
    """The vocabulary's fields that start with ``prefix`` (``"pci."``), in order."""
    return tuple(field for field in QUERY_FIELDS if field.startswith(prefix))


def unit(field: str) -> str:
    """The unit nvidia-smi appends to a field's header, bracketed (``[%]``), or "" for none."""
    if field == "fan.speed" or field.startswith("utilization.") or field == "edpp_multiplier":
        return "[%]"
    if field.startswith(("memory.", "protected_memory.")):
        return "[MiB]"
    if field.startswith(REASON_COUNTERS_PREFIX + "."):
        return "[us]"
    if field.startswith(_CLOCK_PREFIXES):
        return "[MHz]"
    if field.startswith(("power.", "enforced.power.")) and field != "power.management":
        return "[W]"
    return ""


def header(field: str) -> str:
    """The header nvidia-smi prints for a field in ``--format=csv`` output: ``fan.speed [%]``, ``name``."""
    suffix = unit(field)
    return f"{field} {suffix}" if suffix else field
