"""The server's own counters, which the exporter renders among its self-metrics."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ConnectionStats:
    """The HTTP server's connections: how many are open, and those it closed or cut itself."""

    open: int = 0
    closed: dict[str, int] = field(
        default_factory=lambda: {"body_timeout": 0, "evicted": 0, "header_timeout": 0, "refused": 0}
    )
    responses_incomplete: int = 0
