"""Which fields to query: AUTO discovery, explicit lists, exclusions and the built-in fallback list.

Resolution happens once at startup. Identity fields are always queried and never excluded, because
``gpu_info`` and every ``uuid`` label depend on them. When discovery or the mapping query fails the
exporter falls back to a built-in list rather than refusing to start, except for an explicit list with a
field nobody knows, which is an operator error worth stopping for.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.exposition.metrics import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import QueryField

log = logging.getLogger(__name__)

AUTO = "AUTO"


def _expand(pattern: str, *alternatives: str) -> list[str]:
    return [pattern.format(alternative) for alternative in alternatives]


_UNIT_FIELDS: dict[str, str] = {
    "fan.speed": "[%]",
    **dict.fromkeys(_expand("memory.{}", "total", "used", "free"), "[MiB]"),
    **dict.fromkeys(_expand("utilization.{}", "gpu", "memory"), "[%]"),
    **dict.fromkeys(
        _expand("{}", "power.draw", "power.limit", "enforced.power.limit", "power.default_limit")
        + _expand("power.{}", "min_limit", "max_limit"),
        "[W]",
    ),
    **dict.fromkeys(_expand("clocks.current.{}", "graphics", "sm", "memory", "video"), "[MHz]"),
    **dict.fromkeys(_expand("clocks.applications.{}", "graphics", "memory"), "[MHz]"),
    **dict.fromkeys(_expand("clocks.default_applications.{}", "graphics", "memory"), "[MHz]"),
    **dict.fromkeys(_expand("clocks.max.{}", "graphics", "sm", "memory"), "[MHz]"),
}

_ECC_LOCATIONS = (
    "device_memory",
    "dram",
    "register_file",
    "l1_cache",
    "l2_cache",
    "texture_memory",
    "cbu",
    "sram",
    "total",
)

_UNITLESS_FIELDS: tuple[str, ...] = (
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
    "pci.device_id",
    "pci.sub_device_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "index",
    "display_mode",
    "display_active",
    "persistence_mode",
    "accounting.mode",
    "accounting.buffer_size",
    "driver_model.current",
    "driver_model.pending",
    "vbios_version",
    "inforom.img",
    "inforom.oem",
    "inforom.ecc",
    "inforom.pwr",
    "gom.current",
    "gom.pending",
    "pstate",
    *_expand(
        "clocks_throttle_reasons.{}",
        "supported",
        "active",
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
        "sync_boost",
    ),
    "compute_mode",
    "compute_cap",
    *_expand("encoder.stats.{}", "sessionCount", "averageFps", "averageLatency"),
    "ecc.mode.current",
    "ecc.mode.pending",
    *(
        f"ecc.errors.{kind}.{scope}.{location}"
        for kind in ("corrected", "uncorrected")
        for scope in ("volatile", "aggregate")
        for location in _ECC_LOCATIONS
    ),
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "temperature.gpu",
    "temperature.memory",
    "power.management",
    "mig.mode.current",
    "mig.mode.pending",
)

# QField -> RField for the fields every supported driver knows; used only when discovery or the mapping
# query fails.
BUILTIN_FIELDS: dict[str, str] = {
    **{field: field for field in _UNITLESS_FIELDS},
    **{field: f"{field} {unit}" for field, unit in _UNIT_FIELDS.items()},
}


class FieldResolutionError(ValueError):
    """The configured fields cannot be resolved (explicit list with an unknown field)."""


@dataclass(frozen=True, slots=True)
class FieldRequest:
    """The operator's ``--query-field-names`` and ``--query-field-names-exclude`` values."""

    names: str = AUTO
    exclude: str = ""

    @property
    def auto(self) -> bool:
        return self.names.split(",") == [AUTO]


def dedupe(fields: Iterable[str]) -> list[str]:
    """Keep the first occurrence of each field."""
    return list(dict.fromkeys(fields))


def with_identity(fields: Iterable[str]) -> list[str]:
    """Append the identity fields and de-duplicate."""
    return dedupe([*fields, *IDENTITY_FIELDS])


def exclusion_patterns(exclude: str) -> list[re.Pattern[str]]:
    """Glob patterns (``*`` = any sequence, everything else literal) as regexes, used with fullmatch."""
    patterns = []
    for raw in exclude.split(","):
        pattern = raw.strip()
        if pattern:
            patterns.append(re.compile(".*".join(re.escape(part) for part in pattern.split("*"))))
    return patterns


def apply_exclusions(fields: Sequence[str], exclude: str) -> list[str]:
    """Remove fields matching any pattern, except identity fields (kept, with a warning)."""
    patterns = exclusion_patterns(exclude)
    if not patterns:
        return list(fields)
    kept: list[str] = []
    excluded: list[str] = []
    for field in fields:
        if any(pattern.fullmatch(field) for pattern in patterns):
            if field in IDENTITY_FIELDS:
                log.warning("ignoring exclusion of required query field", extra={"field": field})
                kept.append(field)
            else:
                excluded.append(field)
        else:
            kept.append(field)
    if excluded:
        log.info("excluding query fields", extra={"fields": ",".join(excluded)})
    return kept


def builtin_mapping(fields: Sequence[str]) -> list[QueryField] | None:
    """RFields from the built-in table, or ``None`` when a field is not in it."""
    if all(field in BUILTIN_FIELDS for field in fields):
        return [QueryField(field, BUILTIN_FIELDS[field]) for field in fields]
    return None


def first_unknown(fields: Sequence[str]) -> str:
    return next(field for field in fields if field not in BUILTIN_FIELDS)
