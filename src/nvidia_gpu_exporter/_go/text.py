"""Go's notion of whitespace, which differs from Python's.

Go's ``strings.TrimSpace`` and ``strings.Fields`` use ``unicode.IsSpace``; Python's ``str.strip()`` and
``str.split()`` also treat the ASCII separators ``\\x1c``-``\\x1f`` as whitespace. Byte parity with the Go
exporter needs Go's set everywhere a cell or a command line is trimmed or split.
"""

from __future__ import annotations

import re

GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_GO_SPACE_RUN = re.compile(f"[{re.escape(GO_SPACE)}]+")


def go_trim_space(text: str) -> str:
    """``strings.TrimSpace``."""
    return text.strip(GO_SPACE)


# Runes Go lowers differently from Python's full mapping: U+0130 to plain "i", and each byte that was not UTF-8
# (decoded here as a surrogate escape, U+DC80..U+DCFF) to U+FFFD, as strings.Map writes an invalid byte.
_GO_LOWER = {"\u0130": "i", **{chr(code): "\ufffd" for code in range(0xDC80, 0xDD00)}}


def go_lower(text: str) -> str:
    """``strings.ToLower``: every rune lowered on its own. Python's ``lower`` applies context (a final capital
    sigma becomes U+03C2, final sigma) and full mappings (U+0130 becomes two characters); Go gives U+03C3 and
    ``i``, and writes U+FFFD for a byte that is not UTF-8."""
    if text.isascii():
        return text.lower()
    return "".join(_GO_LOWER.get(char) or char.lower() for char in text)


def is_go_space(char: str) -> bool:
    """``unicode.IsSpace`` (Python's ``isspace`` also counts ``\\x1c``-``\\x1f``)."""
    return char in GO_SPACE


def go_fields(text: str) -> list[str]:
    """``strings.Fields``: split on runs of Go whitespace, no empty words."""
    return [word for word in _GO_SPACE_RUN.split(text) if word]


def collapse_go_space(text: str) -> str:
    """Replace each run of Go whitespace with one space."""
    return _GO_SPACE_RUN.sub(" ", text)


_GO_QUOTE_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``), for messages that must read exactly like the Go exporter's.

    Undecodable bytes that arrived as surrogate escapes are written as ``\\xNN``, as Go writes the raw
    invalid byte.
    """
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif char.isprintable():
            out.append(char)
        elif char in _GO_QUOTE_ESCAPES:
            out.append(_GO_QUOTE_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
