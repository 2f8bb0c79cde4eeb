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

from nvidia_gpu_exporter.model.fields import (
    IDENTITY_FIELDS,
    QUERY_FIELDS,
    THROTTLE_REASONS_PREFIX,
    ecc_error_fields,
    fields_under,
    header,
    reason_fields,
)
from nvidia_gpu_exporter.model.snapshot import QueryField

log = logging.getLogger(__name__)

AUTO = "AUTO"

# The fields the Go exporter's built-in table knows (every supported driver has them), queried with their headers
# as nvidia-smi prints them only when discovery or the mapping query fails. The table predates driver 555, so
# it spells the clock reasons the old way.
_GO_BUILTIN = frozenset(
    {
        *reason_fields(),
        *ecc_error_fields(),
        *fields_under("clocks."),
        *fields_under("retired_pages."),
        *fields_under("encoder.stats."),
        *(
            f"{group}.{state}"
            for group in ("driver_model", "gom", "ecc.mode", "mig.mode")
            for state in ("current", "pending")
        ),
        "accounting.buffer_size",
        "accounting.mode",
        "compute_cap",
        "compute_mode",
        "count",
        "display_active",
        "display_mode",
        "driver_version",
        "enforced.power.limit",
        "fan.speed",
        "index",
        "inforom.ecc",
        "inforom.img",
        "inforom.oem",
        "inforom.pwr",
        "memory.free",
        "memory.total",
        "memory.used",
        "name",
        "pci.bus",
        "pci.bus_id",
        "pci.device",
        "pci.device_id",
        "pci.domain",
        "pci.sub_device_id",
        "pcie.link.gen.current",
        "pcie.link.gen.max",
        "pcie.link.width.current",
        "pcie.link.width.max",
        "persistence_mode",
        "power.default_limit",
        "power.draw",
        "power.limit",
        "power.management",
        "power.max_limit",
        "power.min_limit",
        "pstate",
        "serial",
        "temperature.gpu",
        "temperature.memory",
        "timestamp",
        "utilization.gpu",
        "utilization.memory",
        "uuid",
        "vbios_version",
    }
)
_LEGACY_REASONS = dict(zip(reason_fields(), reason_fields(THROTTLE_REASONS_PREFIX), strict=True))
BUILTIN_FIELDS: dict[str, str] = {
    _LEGACY_REASONS.get(field, field): header(_LEGACY_REASONS.get(field, field))
    for field in QUERY_FIELDS
    if field in _GO_BUILTIN
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
