"""Prometheus' delimited protobuf format from the rendered text format 0.0.4, byte for byte as the Go client writes it.

Each family becomes one ``io.prometheus.client.MetricFamily`` message, preceded by its length as a varint, the way
Go's ``protodelim.MarshalTo`` writes it, with the fields in number order as Go's ``proto.Marshal`` writes them:
MetricFamily{name=1, help=2, type=3, metric=4}, Metric{label=1, gauge=2, counter=3, untyped=5, timestamp_ms=6},
LabelPair{name=1, value=2}, Gauge/Counter/Untyped{value=1 double}. Every field the text states is written, empty
strings and zero values included (proto2 keeps presence): a family has its help exactly when the text has its
``# HELP`` line, as both come from the same field in Go.

The rewrite is exact: the text holds every value in Go's shortest round-trip form (``NaN`` is Go's ``math.NaN()``,
whose bits Python's ``float("nan")`` does not have; a negative zero, which the text format writes as ``0``, must be
rendered as ``-0`` within ``text.signed_zeros()`` for its sign to reach the protobuf, as Go's does), HELP texts and
label values unescape to the bytes rendered (a HELP byte that is not UTF-8 passes as it is, as proto2 strings are
not validated), and the families and their samples are already in the Go client's order.
"""

from __future__ import annotations

import re
import struct

CONTENT_TYPE = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"

_TYPES = {b"counter": 0, b"gauge": 1, b"summary": 2, b"untyped": 3, b"histogram": 4}
_VALUE_FIELDS = {0: 3, 1: 2, 3: 5}  # MetricType -> the Metric field that holds a sample's value
_UNTYPED = 3
_GO_NAN = struct.pack("<Q", 0x7FF8000000000001)  # math.NaN(), as Go's strconv.ParseFloat("NaN") returns it
_ESCAPE = re.compile(rb"\\(.)", re.DOTALL)
_HELP = b"# HELP "
_TYPE = b"# TYPE "


class ProtobufError(ValueError):
    """The text is not text format 0.0.4 as the exposition writes it (a bug, never a property of the input)."""


def varint(value: int) -> bytes:
    """An unsigned varint; a negative int64 as its 64-bit two's complement (ten bytes), as protobuf writes it."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _double(number: int, text: bytes) -> bytes:
    if text == b"NaN":
        return varint(number << 3 | 1) + _GO_NAN
    try:
        value = float(text)
    except ValueError as error:
        raise ProtobufError(f"not a sample value: {text!r}") from error
    return varint(number << 3 | 1) + struct.pack("<d", value)


def _unescape(text: bytes) -> bytes:
    return _ESCAPE.sub(lambda match: b"\n" if match[1] == b"n" else match[1], text)


def _labels(line: bytes, at: int) -> tuple[bytes, int]:
    """The LabelPair fields of the ``{...}`` block starting at ``line[at]``, and the offset after its ``}``."""
    out = bytearray()
    at += 1
    while line[at : at + 1] != b"}":
        equals = line.index(b'="', at)
        name = line[at:equals]
        at = end = equals + 2
        while line[end : end + 1] != b'"':
            end += 2 if line[end : end + 1] == b"\\" else 1
            if end >= len(line):
                raise ProtobufError(f"unterminated label value: {line!r}")
        value = _unescape(line[at:end])
        out += _length_delimited(1, _length_delimited(1, name) + _length_delimited(2, value))
        at = end + 1
        if line[at : at + 1] == b",":
            at += 1
    return bytes(out), at + 1


def _sample(line: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """A sample line's metric name, its encoded labels, its value and its timestamp (empty when none)."""
    brace = line.find(b"{")
    space = line.find(b" ")
    if space == -1:
        raise ProtobufError(f"a sample line without a value: {line!r}")
    if brace != -1 and brace < space:
        name = line[:brace]
        labels, at = _labels(line, brace)
    else:
        name, labels, at = line[:space], b"", space
    value, _, timestamp = line[at + 1 :].partition(b" ")
    return name, labels, value, timestamp


def _metric(labels: bytes, value: bytes, timestamp: bytes, metric_type: int) -> bytes:
    message = labels + _length_delimited(_VALUE_FIELDS.get(metric_type, 5), _double(1, value))
    if timestamp:
        try:
            message += varint(6 << 3) + varint(int(timestamp))
        except ValueError as error:
            raise ProtobufError(f"not a timestamp: {timestamp!r}") from error
    return message


class _Family:
    __slots__ = ("help", "metrics", "name", "type")

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.help: bytes | None = None
        self.type = _UNTYPED
        self.metrics: list[bytes] = []

    def encode(self) -> bytes:
        message = _length_delimited(1, self.name)
        if self.help is not None:
            message += _length_delimited(2, self.help)
        message += varint(3 << 3) + varint(self.type)
        message += b"".join(_length_delimited(4, metric) for metric in self.metrics)
        return varint(len(message)) + message


def to_protobuf(text: bytes) -> bytes:
    """Rewrite whole families of text format 0.0.4 as length-delimited ``MetricFamily`` messages."""
    out: list[bytes] = []
    family: _Family | None = None

    def start(name: bytes) -> _Family:
        if family is not None:
            out.append(family.encode())
        return _Family(name)

    for line in text.split(b"\n"):
        if not line:
            continue
        if line.startswith(_HELP):
            name, _, help_text = line[len(_HELP) :].partition(b" ")
            family = start(name)
            family.help = _unescape(help_text)
        elif line.startswith(_TYPE):
            name, _, kind = line[len(_TYPE) :].partition(b" ")
            if family is None or family.name != name or family.metrics:
                family = start(name)
            family.type = _TYPES.get(kind, _UNTYPED)
        elif line.startswith(b"#"):
            continue
        else:
            name, labels, value, timestamp = _sample(line)
            if family is None or name != family.name:  # a family without header lines is untyped
                family = start(name)
            family.metrics.append(_metric(labels, value, timestamp, family.type))
    if family is not None:
        out.append(family.encode())
    return b"".join(out)
