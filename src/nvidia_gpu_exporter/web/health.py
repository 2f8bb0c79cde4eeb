"""``GET /-/health``: every GPU's health verdict, with each reason's evidence, since when it holds and what to do
(docs/health.md, "Verdicts").

The verdict was judged when the latest collection was published (:mod:`..model.judge`); this report only reads it,
so a client polling it (the node-problem-detector plugin, a dashboard) never starts an nvidia-smi run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.model.snapshot import Snapshot
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.verdicts import Finding, GpuVerdict, State


def _finding(finding: Finding) -> dict[str, Any]:
    reason = finding.reason
    hold = reason.hold_seconds
    return {
        "reason": reason.name,
        "state": reason.state.label,
        "summary": reason.summary,
        "evidence": finding.evidence,
        "since": finding.since,
        "last_evidence": finding.last_evidence,
        # None: it holds as long as its evidence does (the node's reboot, the GPU back on the driver)
        "holds_until": finding.last_evidence + hold if hold else None,
        "action": reason.action.value,
        "action_text": reason.action.text,
    }


def _gpu(verdict: GpuVerdict) -> dict[str, Any]:
    action = verdict.action
    return {
        "uuid": normalize_uuid(verdict.uuid),
        "pci_bus_id": verdict.pci_bus_id,
        "state": verdict.state.label,
        "action": action.value if action is not None else None,
        "action_text": action.text if action is not None else None,
        "subsystems": [
            {
                "subsystem": part.subsystem.value,
                "state": part.state.label,
                "reasons": [_finding(finding) for finding in part.findings],
            }
            for part in verdict.subsystems
        ],
    }


def build_health_report(snapshot: Snapshot) -> dict[str, Any]:
    """The node's worst state, then each GPU's verdict."""
    worst = max((verdict.state for verdict in snapshot.verdicts), default=State.OK)
    return {
        "state": worst.label,
        "gpus": [_gpu(verdict) for verdict in snapshot.verdicts],
    }


def health_handler(collector: Collector) -> Callable[[Request], Awaitable[Response]]:
    async def handle(_: Request) -> Response:
        report = build_health_report(collector.latest)
        return Response(text=json.dumps(report, indent=2) + "\n", content_type="application/json")

    return handle
