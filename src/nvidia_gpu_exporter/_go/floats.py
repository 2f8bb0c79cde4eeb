"""Float formatting exactly as the Go Prometheus client writes sample values.

Go writes ``strconv.FormatFloat(v, 'g', -1, 64)``: the shortest digits that round-trip (the same digits
as Python's ``repr``), in scientific notation iff the decimal exponent is < -4 or >= 6. Python's ``repr``
switches at 16 instead, so ``8589934592`` must print as ``8.589934592e+09``, never ``8589934592.0``.
"""

from __future__ import annotations

import math

_SCIENTIFIC_MIN_EXPONENT = -4
_SCIENTIFIC_FROM_EXPONENT = 6  # shortest %g: Go decides with precision 6


def _shortest_digits(value: float) -> tuple[str, int]:
    """Shortest round-trip digits of a positive finite float and the decimal exponent of the first digit."""
    text = repr(value)
    mantissa, _, exponent_text = text.partition("e")
    exponent = int(exponent_text) if exponent_text else 0
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    digits = whole + fraction
    exponent += len(whole) - 1
    stripped = digits.lstrip("0")
    exponent -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    return digits, exponent


def format_go_float(value: float) -> str:
    """A sample value as Go's exposition writes it: ``1``, ``0.57``, ``8.589934592e+09``, ``+Inf``."""
    if value == 1:
        return "1"
    if value == 0:
        return "0"
    if value == -1:
        return "-1"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if -1e6 < value < 1e6 and value.is_integer():  # fast path: below 1e6 an integer prints as itself
        return str(int(value))
    if 1e-4 <= abs(value) < 1e6:  # fast path: plain in Go and in repr (which switches at 1e-4 and 1e16), same digits
        return repr(value)
    sign = "-" if value < 0 else ""
    digits, exponent = _shortest_digits(abs(value))
    if exponent < _SCIENTIFIC_MIN_EXPONENT or exponent >= _SCIENTIFIC_FROM_EXPONENT:
        mantissa = digits[0]
        if len(digits) > 1:
            mantissa += "." + digits[1:]
        exponent_sign = "-" if exponent < 0 else "+"
        return f"{sign}{mantissa}e{exponent_sign}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    integer_digits = exponent + 1
    if len(digits) <= integer_digits:
        return sign + digits + "0" * (integer_digits - len(digits))
    return f"{sign}{digits[:integer_digits]}.{digits[integer_digits:]}"
