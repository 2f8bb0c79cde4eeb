"""``GET /-/xids``: the XIDs the exporter knows, each with what it means and what to do (docs/health.md).

A scrape says ``xid="79"``; an SRE paged at night needs "GPU has fallen off the bus: drain and reboot the
node" and the process that hit it. This report is the snapshot's XIDs joined with the XID table of
:mod:`..model.xids`. It never starts a collection: a client asking for it costs no nvidia-smi run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.model.snapshot import Snapshot
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.xids import describe


def _meaning(code: int) -> dict[str, str]:
    entry = describe(code)
    if entry is None:
        return {"name": "", "severity": "unknown", "action": "Look the code up in NVIDIA's XID catalog"}
    return {"name": entry.name, "severity": entry.severity.value, "action": entry.action}


def build_report(snapshot: Snapshot) -> dict[str, Any]:
    status = snapshot.kernel_log
    return {
        "source": snapshot.xid_source,
        "kernel_log": None
        if status is None
        else {
            "state": status.state.value,
            "path": status.path,
            "records": status.records,
            "lost_records": status.lost,
            "dropped_events": status.dropped,
        },
        "xids": [
            {
                "uuid": normalize_uuid(record.gpu_uuid),
                "xid": record.xid,
                "count": record.count,
                "last_seen": record.last_seen,
                **_meaning(record.xid),
            }
            for record in snapshot.xids
        ],
        "recent": [
            {
                "uuid": normalize_uuid(row.gpu_uuid),
                "pci_bus_id": row.pci_bus_id,
                "xid": row.xid,
                "pid": row.pid,
                "process_name": row.process_name,
                "pod_uid": row.pod.pod_uid,
                "container_id": row.pod.container_id,
                "namespace": row.pod.namespace,
                "pod": row.pod.pod,
                "container": row.pod.container,
                "seen_at": row.seen_at,
                **_meaning(row.xid),
            }
            for row in snapshot.xid_occurrences
        ],
        "nvswitch_sxids": [
            {
                "pci_bus_id": record.pci_bus_id,
                "sxid": record.sxid,
                "severity": record.severity,
                "count": record.count,
                "last_seen": record.last_seen,
            }
            for record in snapshot.sxids
        ],
        "fallen_off_bus": [
            {"uuid": normalize_uuid(gpu.gpu_uuid), "pci_bus_id": gpu.pci_bus_id} for gpu in snapshot.gpus_fallen_off
        ],
    }


def xids_handler(collector: Collector) -> Callable[[Request], Awaitable[Response]]:
    async def handle(_: Request) -> Response:
        report = build_report(collector.no_result())
        return Response(text=json.dumps(report, indent=2) + "\n", content_type="application/json")

    return handle
