"""The nvml backend's field vocabulary: every QField it serves and the exact header nvidia-smi prints for it.

NVML has no ``--help-query-gpu``, so the fields and their returned headers ("RFields", with units) are
compiled in. The headers are what makes the metric names and unit multipliers identical to the exec
backend's, so they are copied from what real nvidia-smi prints. Field resolution mirrors exec: AUTO is
the whole catalog, an explicit list gets the identity fields appended and de-duplicated, and exclusions
apply the same way; an explicit field nobody can read is an operator error that stops startup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError, apply_exclusions, with_identity
from nvidia_gpu_exporter.model import fields as vocabulary
from nvidia_gpu_exporter.model.fields import QUERY_FIELDS, THROTTLE_REASONS_PREFIX, reason_fields
from nvidia_gpu_exporter.model.snapshot import QueryField

# Driver majors before this print the clock-event reasons under their old ``clocks_throttle_reasons`` name.
EVENT_REASONS_DRIVER_MAJOR = 555

# The nvml backend reads every field of the vocabulary; AUTO queries them all, in this order.
CATALOG: tuple[str, ...] = QUERY_FIELDS


RFIELDS: dict[str, str] = {field: vocabulary.header(field) for field in CATALOG}

MODERN_REASONS = reason_fields()
LEGACY_REASONS = reason_fields(THROTTLE_REASONS_PREFIX)
_LEGACY_OF = dict(zip(MODERN_REASONS, LEGACY_REASONS, strict=True))

# Alternative spellings nvidia-smi accepts for a catalog field; it answers under the field's own header.
ALIASES: dict[str, str] = {
    **dict(zip(LEGACY_REASONS, MODERN_REASONS, strict=True)),
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    "gpu_operation_mode.current": "gom.current",
    "gpu_operation_mode.pending": "gom.pending",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.min_limit": "power.min_limit",
    "gpu.power.max_limit": "power.max_limit",
    "gpu.power.draw.average": "power.draw.average",
    "gpu.power.draw.instant": "power.draw.instant",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
}

# Fields nvidia-smi has but this backend deliberately does not read (exec serves them when they parse).
NOT_SERVED_FIELDS = frozenset({"kmd_version", "pcie.link.gen.hostmax"})
NOT_SERVED_PREFIXES = (
    "vgpu_",
    "module.power.",
    "module.enforced.",
    "gpu.base.",
    "power_smoothing.",
    "bbx.",
    "fabric.health.",
)


@dataclass(frozen=True, slots=True)
class ResolvedField:
    """A queried field: what the exposition sees (QField, RField) and which catalog reading answers it."""

    query: QueryField
    source: str  # the catalog field whose reading fills the cell


def driver_major(version: str) -> int | None:
    """The driver's major version (the text before the first dot), or ``None`` when it does not parse."""
    head = version.split(".", 1)[0].strip()
    with contextlib.suppress(ValueError):
        if head.isascii() and head.isdigit():
            return int(head)
    return None


def uses_legacy_reasons(driver_version: str) -> bool:
    """Whether this driver's nvidia-smi spells the reasons ``clocks_throttle_reasons`` (unparsable = modern)."""
    major = driver_major(driver_version)
    return major is not None and major < EVENT_REASONS_DRIVER_MAJOR


def header(source: str, legacy: bool) -> str:
    """The header nvidia-smi of this driver era prints for a catalog field."""
    if legacy and source in _LEGACY_OF:
        return _LEGACY_OF[source]
    return RFIELDS[source]


def catalog_names(legacy: bool) -> list[str]:
    """AUTO's field list: the whole catalog, reasons spelled as this driver's nvidia-smi spells them."""
    return [_LEGACY_OF.get(field, field) if legacy else field for field in CATALOG]


def source_of(name: str) -> str | None:
    """The catalog field a requested name reads, or ``None`` when this backend cannot serve it."""
    if name in RFIELDS:
        return name
    return ALIASES.get(name)


def resolve_fields(request: FieldRequest, driver_version: str) -> tuple[ResolvedField, ...]:
    """The query fields for a request, as exec would resolve them against this driver's nvidia-smi.

    Raises :class:`FieldResolutionError` for an explicit field outside the catalog and its aliases.
    """
    legacy = uses_legacy_reasons(driver_version)
    names: Sequence[str] = catalog_names(legacy) if request.auto else request.names.split(",")
    fields = apply_exclusions(with_identity(names), request.exclude)
    resolved: list[ResolvedField] = []
    for name in fields:
        source = source_of(name)
        if source is None:
            raise FieldResolutionError(f"query field {go_quote(name)} is not supported by this backend")
        resolved.append(ResolvedField(QueryField(name, header(source, legacy)), source))
    return tuple(resolved)
