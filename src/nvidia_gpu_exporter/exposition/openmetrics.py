"""OpenMetrics text 1.0.0 from the rendered text format 0.0.4, the way the Go client writes it.

The exposition renders text 0.0.4 once per snapshot; a scrape that negotiates OpenMetrics gets that text
rewritten line by line, which is exact because every family is ``# HELP``, ``# TYPE`` and then its samples
(gauges and counters only, no timestamps): a counter family ending in ``_total`` is named without it (its
samples keep it), a counter without that suffix is typed ``unknown``; HELP also escapes ``"``; a value without
a point or exponent gains ``.0``. No ``# UNIT`` and no ``_created`` lines, as the Go client writes by default.
The scrape ends with :data:`OPENMETRICS_EOF`.
"""

from __future__ import annotations

CONTENT_TYPE_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
CONTENT_TYPE_0_0_1 = "application/openmetrics-text; version=0.0.1; charset=utf-8"
OPENMETRICS_EOF = b"# EOF\n"

_HELP = b"# HELP "
_TYPE = b"# TYPE "
_TOTAL = b"_total"
_KEPT_VALUES = (b"NaN", b"+Inf", b"-Inf")


def _value(text: bytes) -> bytes:
    """Go's OpenMetrics float: the text format's, with ``.0`` on a number that has no point or exponent."""
    if text in _KEPT_VALUES or b"." in text or b"e" in text:
        return text
    return text + b".0"


def to_openmetrics(text: bytes) -> bytes:
    """Rewrite whole families of text format 0.0.4 as OpenMetrics (without the final ``# EOF``)."""
    out: list[bytes] = []
    help_line: bytes | None = None
    for line in text.split(b"\n")[:-1]:
        if line.startswith(_HELP):
            help_line = line
            continue
        if line.startswith(_TYPE):
            name, _, kind = line[len(_TYPE) :].partition(b" ")
            family = name
            if kind == b"counter":
                family, kind = (name[: -len(_TOTAL)], kind) if name.endswith(_TOTAL) else (name, b"unknown")
            if help_line is not None:
                help_text = help_line[len(_HELP) + len(name) + 1 :]
                out.append(_HELP + family + b" " + help_text.replace(b'"', b'\\"'))
                help_line = None
            out.append(_TYPE + family + b" " + kind)
            continue
        value_start = line.rindex(b" ") + 1
        out.append(line[:value_start] + _value(line[value_start:]))
    return b"".join(part + b"\n" for part in out)
