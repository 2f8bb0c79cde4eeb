"""Prometheus text format 0.0.4, written the way the Go client writes it.

Families are sorted by name, label pairs by label name, samples by their label values in label-name
order (plain string comparison), values in Go's float format. A family without samples is omitted.
Two samples with the same name and label values are an error, never a silently doubled series.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from nvidia_gpu_exporter._go.floats import format_go_float

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LABEL_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})
_HELP_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n"})
NEGATIVE_ZERO = "-0"  # only within signed_zeros(): the text format writes it as 0, as Go's does
_SIGNED_ZEROS: ContextVar[bool] = ContextVar("signed_zeros", default=False)


class DuplicateSeriesError(ValueError):
    """Two samples share a name and label values; the whole scrape must fail rather than be partial."""


def encode(text: str) -> bytes:
    """The bytes of a rendered exposition. nvidia-smi's output is decoded with surrogate escapes, and a byte that
    is not UTF-8 can reach the text only in a HELP line (labels holding one are dropped, names never hold one):
    it goes out as that byte, as the Go exporter writes it, so no driver output can fail a scrape."""
    return text.encode("utf-8", "surrogateescape")


def has_surrogates(text: str) -> bool:
    """True when the text came from bytes that were not valid UTF-8 (decoded with surrogateescape): a label value
    holding one is dropped with its series."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def escape_label_value(value: str) -> str:
    return value.translate(_LABEL_ESCAPES)


def escape_help(text: str) -> str:
    return text.translate(_HELP_ESCAPES)


def format_value(value: float) -> str:
    """Go float formatting (not memoized: hot query-field values are cached per field by the exposition)."""
    if value == 0 and math.copysign(1.0, value) < 0 and _SIGNED_ZEROS.get():
        return NEGATIVE_ZERO
    return format_go_float(value)


@contextlib.contextmanager
def signed_zeros() -> Iterator[None]:
    """Render a negative zero as ``-0`` meanwhile: for the protobuf rewrite, since Go's protobuf keeps the sign bit
    that its text (``0``) drops. Never for text that is served."""
    token = _SIGNED_ZEROS.set(True)
    try:
        yield
    finally:
        _SIGNED_ZEROS.reset(token)


def label_block(pairs: Iterable[tuple[str, str]]) -> str:
    """``{a="1",b="2"}`` from pairs already sorted by label name; empty string for no labels."""
    inner = ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)
    return "{" + inner + "}" if inner else ""


def header(name: str, help_text: str, metric_type: str) -> str:
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {metric_type}\n"


@dataclass(slots=True)
class Family:
    """A metric family being assembled: samples are (label values in ``label_names`` order, value)."""

    name: str
    help: str
    metric_type: str  # "gauge" or "counter"
    label_names: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, label_values: Sequence[str], value: float) -> None:
        self.samples.append((tuple(label_values), value))


def render_family(family: Family) -> str:
    """One family's text block, samples sorted; raises :class:`DuplicateSeriesError` on a repeated series."""
    if not family.samples:
        return ""
    order = sorted(range(len(family.label_names)), key=lambda index: family.label_names[index])
    if order == list(range(len(order))):  # label names already in order (most families): no reordering per sample
        keyed = sorted(family.samples)
    else:
        keyed = sorted(((tuple(values[index] for index in order), value) for values, value in family.samples))
    # Each label's ``name="`` once per family, not once per sample: per-pod families have thousands of samples.
    starts = [f'{family.label_names[index]}="' for index in order]
    name = family.name
    lines = [header(name, family.help, family.metric_type)]
    previous: tuple[str, ...] | None = None
    for values, value in keyed:
        pairs = [start + text.translate(_LABEL_ESCAPES) + '"' for start, text in zip(starts, values, strict=True)]
        labels = "{" + ",".join(pairs) + "}" if pairs else ""
        if values == previous:
            raise DuplicateSeriesError(
                f"collected metric {name}{labels} was collected before with the same name and label values"
            )
        previous = values
        lines.append(f"{name}{labels} {format_value(value)}\n")
    return "".join(lines)


def render_blocks(blocks: Iterable[tuple[str, str]]) -> str:
    """Join pre-rendered ``(family name, text)`` blocks in family-name order."""
    return "".join(text for _, text in sorted(blocks, key=lambda block: block[0]))
