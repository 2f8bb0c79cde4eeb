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
DAY = 24 * HOUR
WEEK = 7 * DAY
YEAR = 365 * DAY
# Prometheus' duration grammar (prometheus/common ``model.Duration``): integer counts, largest unit first.
_PROMETHEUS_UNITS = {"y": YEAR, "w": WEEK, "d": DAY, "h": HOUR, "m": MINUTE, "s": SECOND, "ms": MILLISECOND}
_PROMETHEUS = re.compile("".join(f"(?:([0-9]+){unit})?" for unit in _PROMETHEUS_UNITS))
_LIMIT = 1 << 63


class DurationError(ValueError):
    """The text is not a Go duration."""


def _quote(text: str) -> str:
    """Go's ``time`` quoting: ``"`` and ``\\`` escaped, control and non-ASCII characters as their UTF-8 bytes."""
    out: list[str] = []
    for char in text:
        if char < " " or char >= "\x80":
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))
        else:
            out.append("\\" + char if char in '"\\' else char)
    return '"' + "".join(out) + '"'


def _leading_digits(text: str, position: int) -> int:
    end = position
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    return end


def _small_int(digits: str) -> int | None:
    """The number ``digits`` spell, or ``None`` above 2**63 (so thousands of digits never reach ``int()``)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(_LIMIT)):
        return None
    number = int(significant or "0")
    return number if number <= _LIMIT else None


def parse_duration(text: str) -> int:
    """Parse a Go duration into nanoseconds; raise :class:`DurationError` with Go's wording otherwise.

    Follows ``time.ParseDuration`` step by step (sign, components of digits, optional fraction and unit,
    unsigned 64-bit overflow checks, the fraction scaled in floating point) so that the accepted set and
    every error message are Go's.
    """
    invalid = DurationError(f"time: invalid duration {_quote(text)}")
    position = 0
    negative = False
    if text[:1] in ("+", "-"):
        negative = text[0] == "-"
        position = 1
    if text[position:] == "0":
        return 0
    if position == len(text):
        raise invalid
    total = 0
    while position < len(text):
        if not (text[position] == "." or "0" <= text[position] <= "9"):
            raise invalid
        end = _leading_digits(text, position)
        whole = _small_int(text[position:end])
        if whole is None:
            raise invalid
        has_whole = end > position
        position = end
        fraction, scale, has_fraction = 0, 1.0, False
        if position < len(text) and text[position] == ".":
            end = _leading_digits(text, position + 1)
            has_fraction = end > position + 1
            for digit in text[position + 1 : end]:
                grown = fraction * 10 + int(digit)
                if fraction > (_LIMIT - 1) // 10 or grown > _LIMIT:
                    continue  # Go stops accumulating precision once the digits overflow
                fraction, scale = grown, scale * 10
            position = end
        if not has_whole and not has_fraction:
            raise invalid
        end = position
        while end < len(text) and not (text[end] == "." or "0" <= text[end] <= "9"):
            end += 1
        if end == position:
            raise DurationError(f"time: missing unit in duration {_quote(text)}")
        unit = text[position:end]
        position = end
        if unit not in _UNITS:
            raise DurationError(f"time: unknown unit {_quote(unit)} in duration {_quote(text)}")
        scale_ns = _UNITS[unit]
        if whole > _LIMIT // scale_ns:
            raise invalid
        value = whole * scale_ns
        if fraction > 0:
            value += int(float(fraction) * (float(scale_ns) / scale))
            if value > _LIMIT:
                raise invalid
        total += value
        if total > _LIMIT:
            raise invalid
    if negative:
        return -total
    if total > INT64_MAX:
        raise invalid
    return total


def parse_flag_duration(text: str) -> int:
    """A duration flag's value as the Go exporter reads it: Go syntax, else Prometheus' ``d``, ``w``, ``y``.

    The one parser of every duration flag, so ``--collect.interval=1d`` means a day everywhere; what neither
    grammar accepts (or overflows) is reported with Go's message.
    """
    try:
        return parse_duration(text)
    except DurationError:
        match = _PROMETHEUS.fullmatch(text)
        if not text or match is None:
            raise
        total = 0
        for count, scale in zip(match.groups(), _PROMETHEUS_UNITS.values(), strict=True):
            number = _small_int(count or "")
            if number is None:
                raise
            total += number * scale
        if total > INT64_MAX:
            raise
        return total


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
