"""Which exposition format a scrape gets, from its ``Accept`` header, as the Go client (promhttp) chooses.

The entries are read like Go's ``goautoneg`` (split on ``,`` and ``;``, case-sensitive, an unreadable quality
is 0), best quality first; the first that is delimited protobuf (``application/vnd.google.protobuf`` with
``proto=io.prometheus.client.MetricFamily`` and ``encoding=delimited``, where the profile serves it), text 0.0.4
(or text without a version) or OpenMetrics 0.0.1 or 1.0.0 (or without a version, which is 0.0.1) wins, and
anything else is passed over; with no match the answer is text 0.0.4, never 406. A known ``escaping=`` seen on
the way is echoed in the ``Content-Type``: every name served is a legacy name, so no escaping changes a byte.
A protobuf answer names Go's default, ``escaping=underscores``, when the header named none, as the Go binary's does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from nvidia_gpu_exporter.exposition.openmetrics import CONTENT_TYPE_0_0_1, CONTENT_TYPE_1_0_0
from nvidia_gpu_exporter.exposition.protobuf import CONTENT_TYPE as PROTOBUF_CONTENT_TYPE
from nvidia_gpu_exporter.exposition.text import CONTENT_TYPE

_ESCAPING_SCHEMES = frozenset({"allow-utf-8", "underscores", "dots", "values"})
_DEFAULT_ESCAPING = "; escaping=underscores"  # the Go client's model.NameEscapingScheme
_OPENMETRICS = "application/openmetrics-text"
_PROTOBUF = "application/vnd.google.protobuf"
_PROTOBUF_MESSAGE = "io.prometheus.client.MetricFamily"


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The ``Content-Type`` to answer with, and whether the body is OpenMetrics or delimited protobuf."""

    content_type: str
    openmetrics: bool
    protobuf: bool = False


@dataclass(frozen=True, slots=True)
class _Entry:
    media_type: str
    params: dict[str, str]
    quality: float
    wildcards: int


def _quality(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _entries(header: str) -> list[_Entry]:
    entries = []
    for part in header.split(","):
        media_range, *params = part.strip(" ").split(";")
        kind, slash, subtype = media_range.strip(" ").partition("/")
        kind = kind.strip(" ")
        if not slash and kind != "*":
            continue
        subtype = subtype.strip(" ") if slash else "*"
        values: dict[str, str] = {}
        quality = 1.0
        for param in params:
            key, equals, value = param.partition("=")
            if not equals:
                continue
            if key.strip(" ") == "q":
                quality = _quality(value)
            else:
                values[key.strip(" ")] = value.strip(" ")
        wildcards = (kind == "*") + (subtype == "*")
        entries.append(_Entry(f"{kind}/{subtype}", values, quality, wildcards))
    return sorted(entries, key=lambda entry: (-entry.quality, entry.wildcards))


@functools.lru_cache(maxsize=32)  # a scraper sends the same header every time; each answer is immutable
def negotiate(accept: str | None, *, openmetrics: bool, protobuf: bool = False) -> Negotiated:
    """The format for a scrape with this ``Accept`` header (``None`` when there is none). Without ``openmetrics``
    an OpenMetrics entry is passed over (its ``escaping=`` still counts), as by the Go client's ``Negotiate``;
    without ``protobuf`` (a profile whose original never answers protobuf) so is a protobuf entry."""
    escaping = ""
    for entry in _entries(accept or ""):
        if entry.params.get("escaping", "") in _ESCAPING_SCHEMES:
            escaping = f"; escaping={entry.params['escaping']}"
        if (
            protobuf
            and entry.media_type == _PROTOBUF
            and entry.params.get("proto") == _PROTOBUF_MESSAGE
            and entry.params.get("encoding") == "delimited"
        ):
            return Negotiated(PROTOBUF_CONTENT_TYPE + (escaping or _DEFAULT_ESCAPING), openmetrics=False, protobuf=True)
        version = entry.params.get("version", "")
        if entry.media_type == "text/plain" and version in ("0.0.4", ""):
            return Negotiated(CONTENT_TYPE + escaping, openmetrics=False)
        if openmetrics and entry.media_type == _OPENMETRICS and version in ("1.0.0", "0.0.1", ""):
            content_type = CONTENT_TYPE_1_0_0 if version == "1.0.0" else CONTENT_TYPE_0_0_1
            return Negotiated(content_type + escaping, openmetrics=True)
    return Negotiated(CONTENT_TYPE + escaping, openmetrics=False)
