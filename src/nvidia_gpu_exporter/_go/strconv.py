"""Go's ``strconv`` parsing rules (``ParseBool``, ``ParseInt``, ``ParseFloat``) and the integer limits they use.

Flags, config files and headers that the Go exporter parses with ``strconv`` must accept and refuse exactly
the same texts here; Python's ``int()``/``float()`` accept more (``_`` separators, non-ASCII digits,
surrounding whitespace), so they are only called on text these rules have already accepted.
"""

from __future__ import annotations

import math
import re

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1

BOOL_WORDS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}

DECIMAL_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")


def parse_bool(text: str) -> bool | None:
    """``strconv.ParseBool``: one of its twelve words, else ``None``."""
    return BOOL_WORDS.get(text)


def parse_int(text: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: ASCII decimal with an optional sign, within ``[low, high]``."""
    if not DECIMAL_INT.fullmatch(text):
        return None
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 20:
        return None  # beyond 64 bits; int() is given only the significant digits, it refuses thousands
    value = -int(digits) if text.startswith("-") else int(digits)
    return value if low <= value <= high else None


def parse_float(text: str) -> float | None:
    """``strconv.ParseFloat(text, 64)``'s syntax: decimal, hex (``0x1p-2``), ``inf``/``infinity``/``nan``.

    No ``_`` separators and ASCII digits only. A decimal beyond the float range reads as ``±inf``, as Go
    returns it (with a range error the callers here treat like any other infinity).
    """
    if _DECIMAL_FLOAT.fullmatch(text):
        return float(text)
    if _HEX_FLOAT.fullmatch(text):
        try:
            return float.fromhex(text)
        except OverflowError:
            return -math.inf if text.startswith("-") else math.inf
    lowered = text.lower()
    if lowered == "nan":  # Go takes a sign before inf, never before nan
        return math.nan
    unsigned = lowered[1:] if lowered[:1] in ("+", "-") else lowered
    if unsigned in ("inf", "infinity"):
        return -math.inf if lowered.startswith("-") else math.inf
    return None
