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


@dataclass(slots=True)
class ReloadStats:
    """The web config's reloads, as Prometheus reports its own configuration's: whether the last check that found
    a change applied it, and when one last did (the startup read counts as the first)."""

    last_success_timestamp: float
    last_successful: bool = True

    def succeeded(self, now: float) -> None:
        self.last_successful = True
        self.last_success_timestamp = now

    def failed(self) -> None:
        self.last_successful = False
