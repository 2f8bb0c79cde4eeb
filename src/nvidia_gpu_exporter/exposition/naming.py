"""Metric names, units and HELP text of the query-field families, decided once at startup.

A field's name comes from the header text nvidia-smi returns for it (the "RField", e.g.
``fan.speed [%]``): the unit suffix picks a name suffix and a multiplier, the rest is snake-cased.
Fields whose name collides with another field or with a family the exporter owns are dropped, all
claimants alike, so a value can never be exported under the wrong meaning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter._go.text import go_lower
from nvidia_gpu_exporter.exposition.families import PREFIX, RESERVED_NAMES
from nvidia_gpu_exporter.model.fields import ValueKind, value_kind

# (RField suffix, metric name suffix, multiplier); the first suffix the RField ends with wins.
UNIT_TABLE: tuple[tuple[str, str, float], ...] = (
    (" [W]", "_watts", 1.0),
    (" [MHz]", "_clock_hz", 1_000_000.0),
    (" [MiB]", "_bytes", 1_048_576.0),
    (" [%]", "_ratio", 0.01),
    (" [us]", "_seconds", 0.000001),
    (" [ms]", "_seconds", 0.001),
    (" [seconds]", "_seconds", 1.0),
    (" [W/s]", "_watts_per_second", 1.0),
)

_CAMEL_WORD = re.compile(r"(.)([A-Z][a-z]+)")
_CAMEL_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")
_INVALID_RUN = re.compile(r"[^a-zA-Z0-9_:]+")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DerivedName:
    """What the unit table and the cleanup rules make of one RField."""

    name: str  # full metric name, or "" when nothing usable is left
    multiplier: float
    best_effort: bool  # the header held characters that had to be replaced


@dataclass(frozen=True, slots=True)
class FieldMetric:
    """One exported query-field family: where its cells sit in a row and how to render them."""

    column: int
    qfield: str
    name: str
    help: str
    multiplier: float
    kind: ValueKind


def _snake_case(text: str) -> str:
    text = _CAMEL_WORD.sub(r"\1_\2", text)
    text = _CAMEL_BOUNDARY.sub(r"\1_\2", text)
    return go_lower(text)


def derive_name(rfield: str) -> DerivedName:
    """Apply the unit table, dot replacement, snake-casing and invalid-character cleanup to an RField."""
    text = rfield
    multiplier = 1.0
    for unit_suffix, name_suffix, unit_multiplier in UNIT_TABLE:
        if text.endswith(unit_suffix):
            text = text.split(" ", 1)[0] + name_suffix
            multiplier = unit_multiplier
            break
    text = _snake_case(text.replace(".", "_"))
    best_effort = False
    if " " in text or "[" in text or "]" in text:
        best_effort = True
        text = text.replace(" [", "_").replace("]", "")
    cleaned = _INVALID_RUN.sub("_", text)
    best_effort = best_effort or cleaned != text
    if not cleaned:
        return DerivedName("", multiplier, best_effort)
    return DerivedName(PREFIX + cleaned, multiplier, best_effort)


def plan_field_metrics(fields: Sequence[tuple[str, str]]) -> tuple[FieldMetric, ...]:
    """Decide the exported families for ``(QField, RField)`` pairs in query order.

    Fields are examined in sorted QField order (so logs and outcomes do not depend on query order);
    reserved names and every claimant of a shared name are dropped with an error log. The result keeps
    each field's column so rows can be read positionally.
    """
    candidates: dict[str, list[tuple[int, str, str, DerivedName]]] = {}
    for column, (qfield, rfield) in sorted(enumerate(fields), key=lambda item: item[1][0]):
        derived = derive_name(rfield)
        if derived.best_effort:
            log.error(
                "returned field contains unexpected characters, the metric name is best effort",
                extra={"field": qfield, "returned_field": rfield, "metric": derived.name},
            )
        if not derived.name:
            log.error(
                "returned field does not yield a metric name, dropping it",
                extra={"field": qfield, "returned_field": rfield},
            )
            continue
        if derived.name in RESERVED_NAMES:
            log.error(
                "query field derives a metric name the exporter reserves, dropping it",
                extra={"field": qfield, "metric": derived.name},
            )
            continue
        candidates.setdefault(derived.name, []).append((column, qfield, rfield, derived))
    plan: list[FieldMetric] = []
    for name, claimants in candidates.items():
        if len(claimants) > 1:
            log.error(
                "query fields derive the same metric name, dropping all of them",
                extra={"fields": ",".join(claimant[1] for claimant in claimants), "metric": name},
            )
            continue
        column, qfield, rfield, derived = claimants[0]
        plan.append(FieldMetric(column, qfield, name, rfield, derived.multiplier, value_kind(qfield)))
    plan.sort(key=lambda metric: metric.name)
    return tuple(plan)
