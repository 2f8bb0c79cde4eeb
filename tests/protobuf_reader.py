"""A tiny reader of Prometheus' delimited protobuf exposition, written apart from the exporter's encoder so that the
tests read its bytes with an independent decoder.

It knows only what ``io.prometheus.client.MetricFamily`` needs: varints, 64-bit doubles and length-delimited
fields. Every field is kept as ``(number, value)`` in wire order, so a test can check the order as well as the
values; :func:`families` reads a whole delimited body into :class:`Family` records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

Field = tuple[int, "int | float | bytes"]


def varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it."""
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError(f"truncated or overlong varint at byte {at}")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(message: bytes) -> list[Field]:
    """A message's fields in wire order: varints as int, fixed64 as a double, length-delimited as bytes."""
    out: list[Field] = []
    at = 0
    while at < len(message):
        key, at = varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(message, at)
            out.append((number, value))
        elif wire == 1:
            out.append((number, struct.unpack_from("<d", message, at)[0]))
            at += 8
        elif wire == 2:
            length, at = varint(message, at)
            if at + length > len(message):
                raise ValueError(f"field {number} runs past the message end")
            out.append((number, message[at : at + length]))
            at += length
        else:
            raise ValueError(f"wire type {wire} of field {number} is not one a MetricFamily uses")
    return out


def delimited(body: bytes) -> list[bytes]:
    """The messages of a length-delimited stream."""
    messages = []
    at = 0
    while at < len(body):
        length, at = varint(body, at)
        if at + length > len(body):
            raise ValueError("the last message runs past the body's end")
        messages.append(body[at : at + length])
        at += length
    return messages


@dataclass(frozen=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    kind: int  # the Metric field that holds the value: 2 gauge, 3 counter, 5 untyped (4, 7: not read)
    value: float
    timestamp_ms: int | None


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    type: int  # MetricType: 0 counter, 1 gauge, 3 untyped
    samples: tuple[Sample, ...]


def _sample(message: bytes) -> Sample:
    labels: list[tuple[str, str]] = []
    kind, value, timestamp = 0, float("nan"), None
    for number, field in fields(message):
        if number == 1 and isinstance(field, bytes):
            pair = dict(fields(field))
            name, text = pair.get(1, b""), pair.get(2, b"")
            assert isinstance(name, bytes)
            assert isinstance(text, bytes)
            labels.append((name.decode("utf-8", "surrogateescape"), text.decode("utf-8", "surrogateescape")))
        elif number in (2, 3, 5) and isinstance(field, bytes):
            inner = dict(fields(field))
            kind, found = number, inner.get(1, 0.0)
            assert isinstance(found, float)
            value = found
        elif number in (4, 7):  # a summary or histogram (Go's go_* families): kept as its kind only
            kind = number
        elif number == 6 and isinstance(field, int):
            timestamp = field
        else:
            raise ValueError(f"Metric field {number} is not one the exporter writes")
    return Sample(tuple(labels), kind, value, timestamp)


def family(message: bytes) -> Family:
    name, help_text, kind, samples = "", "", -1, []
    for number, field in fields(message):
        if number == 1 and isinstance(field, bytes):
            name = field.decode("utf-8", "surrogateescape")
        elif number == 2 and isinstance(field, bytes):
            help_text = field.decode("utf-8", "surrogateescape")
        elif number == 3 and isinstance(field, int):
            kind = field
        elif number == 4 and isinstance(field, bytes):
            samples.append(_sample(field))
        else:
            raise ValueError(f"MetricFamily field {number} is not one the exporter writes")
    return Family(name, help_text, kind, tuple(samples))


def families(body: bytes) -> list[Family]:
    """Every family of a delimited protobuf body, in order."""
    return [family(message) for message in delimited(body)]


def family_messages(body: bytes) -> dict[str, bytes]:
    """Each family's encoded message (its bytes as served, without the length prefix), by family name."""
    return {family(message).name: message for message in delimited(body)}
