"""Go duration syntax (``500ms``, ``1m30s``, ``0``), as the Go exporter's flags accept and print it.

Durations are carried as integer nanoseconds so that parsing and printing round-trip exactly like Go's
``time.ParseDuration`` and ``time.Duration.String``.
"""

from __future__ import annotations

import re

from nvidia_gpu_exporter._go.strconv import INT64_MAX

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_COMPONENT = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]+)")


class DurationError(ValueError):
    """The text is not a Go duration."""


def parse_duration(text: str) -> int:
    """Parse a Go duration into nanoseconds; raise :class:`DurationError` with Go's wording otherwise."""
    original = text
    if not text:
        raise DurationError(f'time: invalid duration "{original}"')
    negative = text[0] == "-"
    if text[0] in "+-":
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise DurationError(f'time: invalid duration "{original}"')
    total = 0
    position = 0
    while position < len(text):
        match = _COMPONENT.match(text, position)
        if match is None:
            if re.fullmatch(r"[0-9]*(?:\.[0-9]*)?", text[position:]) and text[position:] != ".":
                raise DurationError(f'time: missing unit in duration "{original}"')
            raise DurationError(f'time: invalid duration "{original}"')
        whole, fraction, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not fraction:
            raise DurationError(f'time: invalid duration "{original}"')
        if unit not in _UNITS:
            if (unit.strip() and unit[0].isalpha()) or unit[0] in "\u00b5\u03bc":
                raise DurationError(f'time: unknown unit "{unit}" in duration "{original}"')
            raise DurationError(f'time: invalid duration "{original}"')
        scale = _UNITS[unit]
        value = int(whole or "0") * scale
        if fraction:
            value += int(fraction) * scale // 10 ** len(fraction)
        total += value
        if total > INT64_MAX + (1 if negative else 0):
            raise DurationError(f'time: invalid duration "{original}"')
        position = match.end()
    return -total if negative else total


def _format_fraction(value: int, precision: int) -> tuple[str, int]:
    """Digits of ``value`` below ``precision`` decimal places, trailing zeros dropped (Go's fmtFrac)."""
    digits = ""
    printed = False
    for _ in range(precision):
        digit = value % 10
        printed = printed or digit != 0
        if printed:
            digits = str(digit) + digits
        value //= 10
    if printed:
        digits = "." + digits
    return digits, value


def format_duration(ns: int) -> str:
    """Render nanoseconds as Go's ``time.Duration.String`` does (``1m30s``, ``500ms``, ``0s``)."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    magnitude = abs(ns)
    if magnitude < SECOND:
        if magnitude < MICROSECOND:
            return f"{sign}{magnitude}ns"
        if magnitude < MILLISECOND:
            fraction, whole = _format_fraction(magnitude, 3)
            return f"{sign}{whole}{fraction}\u00b5s"
        fraction, whole = _format_fraction(magnitude, 6)
        return f"{sign}{whole}{fraction}ms"
    fraction, seconds = _format_fraction(magnitude, 9)
    text = f"{seconds % 60}{fraction}s"
    minutes = seconds // 60
    if minutes:
        text = f"{minutes % 60}m{text}"
        hours = minutes // 60
        if hours:
            text = f"{hours}h{text}"
    return sign + text


def to_seconds(ns: int) -> float:
    """Nanoseconds as float seconds, for asyncio timeouts."""
    return ns / SECOND
