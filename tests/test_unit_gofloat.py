"""Go float formatting of sample values (docs/compatibility.md, "Float formatting")."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter._go.floats import _shortest_digits, format_go_float
from nvidia_gpu_exporter.exposition.text import format_value

EXAMPLES: list[tuple[float, str, str]] = [
    (8589934592.0, "8.589934592e+09", "8192 MiB in bytes is scientific, not repr's 8589934592.0"),
    (1234567.0, "1.234567e+06", "exponent 6 is scientific"),
    (123456.0, "123456", "exponent 5 is plain"),
    (0.00001, "1e-05", "exponent -5 is scientific with two exponent digits"),
    (0.0001, "0.0001", "exponent -4 is plain"),
    (4000.0, "4000", "plain decimal without trailing zeros"),
    (-0.0, "0", "-0 prints 0"),
    (0.0, "0", "0 prints 0"),
    (1.0, "1", "exactly 1 prints 1"),
    (-1.0, "-1", "-1 prints -1"),
    (math.nan, "NaN", "NaN"),
    (math.inf, "+Inf", "+Inf with sign"),
    (-math.inf, "-Inf", "-Inf"),
    (1.2444794109305713e09, "1.2444794109305713e+09", "17 significant digits, scientific"),
    (1e100, "1e+100", "three exponent digits"),
    (57 * 0.01, "0.5700000000000001", "57 x 0.01 shortest round-trip digits"),
    (212.553937, "212.553937", "plain with fraction"),
    (7.65e08, "7.65e+08", "765 MHz in Hz"),
    (1.32212e12, "1.32212e+12", "serial 1322120000000"),
    (5.11774942e08, "5.11774942e+08", "pci.device_id 0x1E8110DE"),
    (4.29391872e10, "4.29391872e+10", "40950 MiB"),
    (1.751475457e09, "1.751475457e+09", "whole-second timestamp"),
    (999999.0, "999999", "exponent 5 boundary stays plain"),
    (1000000.0, "1e+06", "exponent 6 boundary turns scientific"),
    (100000.0, "100000", "trailing zeros of a plain integer are kept as digits"),
    (0.5, "0.5", "plain fraction"),
    (-0.00001, "-1e-05", "negative scientific keeps the sign"),
    (-123.25, "-123.25", "negative plain keeps the sign"),
    (1e16, "1e+16", "repr's own switch point is scientific too"),
    (5e-324, "5e-324", "smallest subnormal"),
    (1.7976931348623157e308, "1.7976931348623157e+308", "largest finite"),
    (2.0, "2", "small integer without .0"),
]


@pytest.mark.parametrize(("value", "expected"), [(v, e) for v, e, _ in EXAMPLES], ids=[i for _, _, i in EXAMPLES])
def test_format_go_float_examples(value: float, expected: str) -> None:
    assert format_go_float(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(v, e) for v, e, _ in EXAMPLES], ids=[i for _, _, i in EXAMPLES])
def test_format_value_memoized_matches(value: float, expected: str) -> None:
    # the renderer's memoized path must give the same text, twice (second call hits the cache)
    assert format_value(value) == expected
    assert format_value(value) == expected


_SCIENTIFIC = re.compile(r"-?[1-9](\.[0-9]*[1-9])?e[+-][0-9]{2,3}")
_PLAIN = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?")


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_round_trips_and_scientific_iff_exponent_out_of_range(value: float) -> None:
    """Shortest round-trip digits; scientific iff the decimal exponent is < -4 or >= 6."""
    text = format_go_float(value)
    assert float(text) == value
    if value == 0:
        assert text == "0"
        return
    exponent = Decimal(repr(abs(value))).adjusted()
    if exponent < -4 or exponent >= 6:
        assert _SCIENTIFIC.fullmatch(text), text
    else:
        assert _PLAIN.fullmatch(text), text
    # the digits are exactly Python's shortest round-trip digits (repr)
    assert Decimal(text).normalize() == Decimal(repr(value)).normalize()


def _general(value: float) -> str:
    """The general path of format_go_float (shortest digits placed by Go's rule), without its fast paths."""
    digits, exponent = _shortest_digits(abs(value))
    sign = "-" if value < 0 else ""
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    integer_digits = exponent + 1
    if len(digits) <= integer_digits:
        return sign + digits + "0" * (integer_digits - len(digits))
    return f"{sign}{digits[:integer_digits]}.{digits[integer_digits:]}"


@settings(max_examples=400, deadline=None)
@given(
    st.floats(min_value=1e-4, max_value=1e6, exclude_max=True)
    | st.floats(min_value=-1e6, max_value=-1e-4, exclude_min=True)
)
def test_the_plain_range_fast_path_writes_what_the_general_path_does(value: float) -> None:
    assert format_go_float(value) == _general(value)
