"""The common request read, and its response head written, without h11: httpserver/protocol.py's fast path.

h11 stays the parser of record. :func:`parse_head` accepts only a request head in a strict subset of what h11
parses, and parses it to what h11 would (tests/test_web_fastpath.py checks it against h11, differentially); any
other input is h11's, with all of its handling (errors, limits, bodies, ``100-continue``, HTTP/1.0, pipelining).
The subset, all of it in one ``data_received`` and nothing after it:

- ``GET`` or ``HEAD``, an origin-form target of visible ASCII, ``HTTP/1.1``, each line ending in CRLF;
- at most :data:`MAX_HEAD_BYTES` in all (so every line is within the protocol's line limit) and at most
  :data:`MAX_HEADERS` header lines, each ``token ":" OWS value OWS``, the value visible ASCII or obs-text with
  spaces or tabs anywhere in it, runs included (no obs-fold, no whitespace before the colon, no control byte);
- exactly one ``Host``; no ``Content-Length``, ``Transfer-Encoding``, ``Expect`` or ``Upgrade``.

:func:`response_head` writes the bytes h11's ``send(Response(...))`` writes for such a request, or returns
None where the response has something h11 treats specially or refuses (a status out of ``200..999``, a header
h11 rewrites or would reject): the protocol then has h11 write it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HEAD_BYTES = 8190  # the protocol's MAX_LINE_BYTES: a head this short has every line within the limit
MAX_HEADERS = 128  # the protocol's limit

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
# ``OWS field-value OWS`` as one class: h11's field-value (runs of visible bytes or obs-text joined by spaces and
# tabs) with the whitespace around it is exactly any run of these bytes. Written as h11 writes it (leading OWS,
# the value, trailing OWS: three quantifiers that can each take the same blanks) the pattern backtracks
# quadratically on a line of blanks that does not end as it should: 8 KB of " \t" took 197 ms per request.
_OWS_VALUE_OWS = rb"[\t\x20-\x7e\x80-\xff]*"
_HEAD = re.compile(
    rb"(GET|HEAD) (/[\x21-\x7e]*) HTTP/1\.1\r\n((?:"
    + _TOKEN
    + rb":"
    + _OWS_VALUE_OWS
    + rb"\r\n){1,%d})\r\n" % MAX_HEADERS
)
_REFUSED = frozenset((b"content-length", b"transfer-encoding", b"expect", b"upgrade"))

# h11's response-header grammar (its _abnf: a token name; a value of [^\x00\s] runs joined by spaces and tabs),
# for str: bytes' \s is exactly these six, str's is wider.
_RESPONSE_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_RESPONSE_VALUE = re.compile(r"(?:[^\x00 \t\n\r\x0b\x0c]+(?:[ \t]+[^\x00 \t\n\r\x0b\x0c]+)*)?")
# Response headers h11 rewrites (framing, Connection) or moves (Host, written first): h11 writes those.
_RESPONSE_SPECIAL = frozenset(("content-length", "transfer-encoding", "connection", "host"))
# Each header set checked and encoded once (a handful of content types, error pages' Allow): bounded, emptied
# when full. None: a set h11 must write.
_LINES_CACHE: dict[tuple[tuple[str, str], ...], bytes | None] = {}
_LINES_CACHE_MAX = 64


def _header_lines(headers: tuple[tuple[str, str], ...]) -> bytes | None:
    lines = []
    for name, value in headers:
        if (
            _RESPONSE_NAME.fullmatch(name) is None
            or _RESPONSE_VALUE.fullmatch(value) is None
            or name.lower() in _RESPONSE_SPECIAL
        ):
            return None
        lines.append(f"{name}: {value}\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        return None


class FastRequest:
    """A request head read by :func:`parse_head`: what h11 would have parsed from it."""

    __slots__ = ("headers", "keep_alive", "method", "target")

    def __init__(self, method: str, target: str, headers: list[tuple[str, str]], keep_alive: bool) -> None:
        self.method = method
        self.target = target
        self.headers = headers  # names lower-cased, values without OWS, as h11 gives them
        self.keep_alive = keep_alive  # h11's decision: no ``close`` token in a Connection header


def parse_head(data: bytes) -> FastRequest | None:
    """``data`` as one request head in the strict subset of the module docstring, or None (h11's to parse)."""
    if len(data) > MAX_HEAD_BYTES:
        return None
    match = _HEAD.fullmatch(data)
    if match is None:
        return None
    headers: list[tuple[str, str]] = []
    hosts = 0
    keep_alive = True
    for line in match.group(3).split(b"\r\n")[:-1]:
        raw_name, _, raw_value = line.partition(b":")
        name = raw_name.lower()
        value = raw_value.strip(b" \t")
        if name in _REFUSED:
            return None
        if name == b"host":
            hosts += 1
        elif name == b"connection" and b"close" in (token.strip() for token in value.lower().split(b",")):
            keep_alive = False
        headers.append((name.decode("ascii"), value.decode("utf-8", "surrogateescape")))
    if hosts != 1:
        return None
    return FastRequest(match.group(1).decode("ascii"), match.group(2).decode("ascii"), headers, keep_alive)


def response_head(
    status: int, reason: bytes, headers: Iterable[tuple[str, str]], length: int, date: bytes, *, close: bool
) -> bytes | None:
    """The head h11 writes for this response to a :func:`parse_head` request: the status line, ``headers``, then
    ``Content-Length``, ``Date`` and (``close``: keep-alive is off, by the request or the server) ``Connection:
    close``; None where h11 must write it (see the module docstring)."""
    if not 200 <= status <= 999:  # h11's range for a final response
        return None
    key = tuple(headers)
    try:
        text = _LINES_CACHE[key]
    except KeyError:
        if len(_LINES_CACHE) >= _LINES_CACHE_MAX:
            _LINES_CACHE.clear()
        text = _LINES_CACHE[key] = _header_lines(key)
    if text is None:
        return None
    return b"HTTP/1.1 %d %s\r\n%sContent-Length: %d\r\nDate: %s\r\n%s\r\n" % (
        status,
        reason,
        text,
        length,
        date,
        b"Connection: close\r\n" if close else b"",
    )
