"""Turning the text of one nvidia-smi cell into a sample value, exactly as the Go exporter does.

The rules are deliberately literal: hex only with a lowercase ``0x`` prefix, a handful of words, and
otherwise exactly one decimal number in the text, scaled by the unit multiplier with a single IEEE
multiply. Anything else yields no sample (``None``) rather than a guess.
"""

from __future__ import annotations

import logging
import math
import re

from nvidia_gpu_exporter._go.strconv import UINT64_MAX
from nvidia_gpu_exporter._go.text import go_lower, go_trim_space
from nvidia_gpu_exporter.model.fields import ValueKind

# Cell texts that mean "no reading": no sample, and no warning either.
ABSENT_TOKENS = frozenset({"", "n/a", "[n/a]", "[not supported]", "[insufficient permissions]"})
# In the per-process query nvidia-smi also writes this where it has no pid or memory figure.
PROCESS_ABSENT_TOKENS = ABSENT_TOKENS | {"[unknown error]"}

WORD_VALUES = {
    "enabled": 1.0,
    "yes": 1.0,
    "active": 1.0,
    "disabled": 0.0,
    "no": 0.0,
    "not active": 0.0,
    "default": 0.0,
    "exclusive_thread": 1.0,
    "prohibited": 2.0,
    "exclusive_process": 3.0,
}

ENUM_VALUES: dict[ValueKind, dict[str, float]] = {
    ValueKind.RECOVERY_ACTION: {
        "none": 0.0,
        "gpu reset": 1.0,
        "reset": 1.0,
        "node reboot": 2.0,
        "reboot": 2.0,
        "drain p2p": 3.0,
        "drain and reset": 4.0,
    },
    ValueKind.FABRIC_STATE: {
        "not supported": 0.0,
        "not started": 1.0,
        "in progress": 2.0,
        "completed": 3.0,
    },
}

_NUMBER = re.compile(r"[+-]?(?:[0-9]*[.])?[0-9]+")
_HEX_DIGITS = re.compile(r"[0-9a-fA-F]+")

log = logging.getLogger(__name__)


def _parse_hex(text: str) -> float | None:
    digits = text.replace("0x", "").replace("0X", "")  # two passes, in Go's order: "0x0X1" -> "1"
    if not _HEX_DIGITS.fullmatch(digits):
        return None
    value = int(digits, 16)
    if value > UINT64_MAX:
        return None
    return float(value)


def transform_generic(raw: str, multiplier: float) -> float | None:
    """The generic rule: hex, known words, or exactly one number times the multiplier."""
    text = go_trim_space(raw)
    if text.startswith("0x"):
        return _parse_hex(text)
    lowered = go_lower(text)
    word_value = WORD_VALUES.get(lowered)
    if word_value is not None:
        return word_value
    matches = _NUMBER.findall(lowered)
    if len(matches) != 1:
        log.debug("skipping value: not exactly one number", extra={"value": raw})
        return None
    value = float(matches[0]) * multiplier
    if math.isinf(value) or math.isnan(value):
        return None
    return value


def transform_enum(raw: str, kind: ValueKind, field: str) -> float | None:
    """The enum fields (``gpu_recovery_action``, ``fabric.state``): known words only, absent tokens silent."""
    key = go_lower(go_trim_space(raw))
    if key in ABSENT_TOKENS:
        return None
    value = ENUM_VALUES[kind].get(key)
    if value is None:
        log.warning("skipping metric: unrecognized enum value", extra={"field": field, "value": raw})
    return value


def transform_value(raw: str, kind: ValueKind, multiplier: float, field: str) -> float | None:
    """Sample value for a cell of a field of this kind, or ``None`` for no sample."""
    if kind is ValueKind.GENERIC:
        return transform_generic(raw, multiplier)
    return transform_enum(raw, kind, field)
