"""``GET /-/ready`` that knows, on request (``--web.ready.*``; docs/compatibility.md, "Readiness").

By default ``/-/ready`` is 200 while the process serves, as the Go exporter's: a failing ``nvidia-smi`` shows in
the metrics, not in the probe. With ``--web.ready.require-collection`` it answers 503 until a collection has
succeeded, while the last success is older than ``--web.ready.max-staleness``, and while that success saw fewer
GPUs than ``--web.ready.min-gpus`` (a count, or as many as the PCI bus lists): a node whose exporter serves no
GPU then shows as not ready, since "the symptom is an absence". The 503 body names each unmet condition.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.httpserver.responses import plain_text
from nvidia_gpu_exporter.model.snapshot import Snapshot

READY_TEXT = "Nvidia GPU Exporter is Ready.\n"
NOT_READY_TEXT = "Nvidia GPU Exporter is not ready:\n"
MAX_ERROR_CHARS = 300  # a collection error is quoted, never whole


@dataclass(frozen=True, slots=True)
class Readiness:
    """What ``/-/ready`` requires beyond a first successful collection (built from the flags by ``app``)."""

    max_staleness_seconds: float = 0.0  # 0: no bound on the last success's age
    max_staleness_text: str = ""  # the bound as --help prints it, for the reason
    min_gpus: int = 0  # GPUs the last success must have seen
    pci_gpus: bool = False  # ... or as many as the PCI bus lists (--web.ready.min-gpus=pci)

    def reasons(self, collector: Collector, now: float) -> list[str]:
        """Each unmet condition in words, naming its flag; empty when ready."""
        snapshot = collector.latest
        if snapshot.last_success_at is None:
            return [f"no collection has succeeded yet (--web.ready.require-collection){_latest_failure(snapshot)}"]
        reasons = []
        age = now - snapshot.last_success_at
        if self.max_staleness_seconds and age > self.max_staleness_seconds:
            reasons.append(
                f"the last successful collection finished {age:.0f}s ago, longer than "
                f"--web.ready.max-staleness={self.max_staleness_text}{_latest_failure(snapshot)}"
            )
        seen = collector.last_success_gpus
        if self.pci_gpus:
            if snapshot.pci is None:
                reasons.append(
                    "the PCI bus could not be read: the GPUs it lists are unknown (--web.ready.min-gpus=pci)"
                )
            else:
                expected = len({function.bus_id for function in snapshot.pci.gpus})
                if seen < expected:
                    reasons.append(
                        f"the last successful collection saw {seen} GPUs, fewer than the {expected} the PCI bus lists "
                        "(--web.ready.min-gpus=pci)"
                    )
        elif seen < self.min_gpus:
            reasons.append(
                f"the last successful collection saw {seen} GPUs, fewer than --web.ready.min-gpus={self.min_gpus}"
            )
        return reasons


def _latest_failure(snapshot: Snapshot) -> str:
    """``; the latest failed: <error>`` when the latest collection failed, so the probe says what to fix."""
    attempt = snapshot.attempt
    if attempt is None or attempt.succeeded:
        return ""
    error = " ".join((attempt.error or "unknown error").split())
    if len(error) > MAX_ERROR_CHARS:
        error = error[:MAX_ERROR_CHARS] + "..."
    return f"; the latest failed: {error}"


def ready_handler(
    collector: Collector,
    readiness: Readiness | None,
    budget_seconds: float | None,
    clock: Callable[[], float] = time.time,
) -> Callable[[Request], Awaitable[Response]]:
    """The ``/-/ready`` route. Collecting on each scrape (no ``--collect.interval``), a probe about to answer 503
    runs a collection first (joining one in flight, within ``budget_seconds``): nothing else would collect for a
    target no one scrapes because it is not ready."""

    async def ready(_: Request) -> Response:
        if readiness is None:
            return plain_text(READY_TEXT)
        reasons = readiness.reasons(collector, clock())
        if reasons and not collector.background:
            await collector.scrape(budget_seconds)
            reasons = readiness.reasons(collector, clock())
        if reasons:
            return plain_text(NOT_READY_TEXT + "".join(f"- {reason}\n" for reason in reasons), status=503)
        return plain_text(READY_TEXT)

    return ready
