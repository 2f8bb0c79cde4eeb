"""``GET /-/attribution``: per GPU, who holds it and, where nobody does, why not.

"Pod labels empty" is the most repeated complaint about GPU exporters on Kubernetes, and nothing in a
scrape can say which of half a dozen causes it is. This report does: it is the same snapshot the metrics
were rendered from, with the reason tokens of :mod:`.model` (stable, for runbooks) and a detail line
that says what to change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.httpserver.http import Request, Response
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings
from nvidia_gpu_exporter.model.kubernetes import (
    DEVICE_ID_NOT_RECOGNISED,
    MIG_DEVICE_UNKNOWN,
    MIG_MONITOR_ENV_MISSING,
    NO_POD_REQUESTS_GPU,
    GpuPod,
    KubernetesAttribution,
    ProcessPod,
    UnmatchedDevice,
)
from nvidia_gpu_exporter.model.snapshot import QueryField, Readings, Snapshot, column_of
from nvidia_gpu_exporter.model.uuids import normalize_uuid

POD_RESOURCES_OFF = "pod_resources_off"
PROCESS_PODS_OFF = "process_pods_off"
NO_READINGS = "no_gpu_readings"
MIG_MONITOR_ENV = "NVIDIA_MIG_MONITOR_DEVICES"


def _pod(link: GpuPod) -> dict[str, str]:
    return {
        "namespace": link.namespace,
        "pod": link.pod,
        "container": link.container,
        "resource": link.resource,
        "device_id": link.device_id,
        "mig_uuid": link.mig_uuid,
        "replica": link.replica,
    }


def _unmatched(entry: UnmatchedDevice) -> dict[str, str]:
    device = entry.device
    return {
        "namespace": device.namespace,
        "pod": device.pod,
        "container": device.container,
        "resource": device.resource,
        "device_id": device.device_id,
        "uuid": entry.uuid,
        "reason": entry.reason,
        "detail": entry.detail,
    }


def _process(process: ProcessPod) -> dict[str, str]:
    return {
        "pid": process.pid,
        "pod_uid": process.pod_uid,
        "container_id": process.container_id,
        "runtime": process.runtime,
        "reason": process.reason,
        "detail": process.detail,
    }


def _gpu_reason(uuid: str, attribution: KubernetesAttribution, settings: AttributionSettings) -> tuple[str, str]:
    """Why a GPU that nobody holds has no pod, most specific cause first."""
    reading = attribution.pod_resources
    if reading is None:
        return POD_RESOURCES_OFF, "start the exporter with --kubernetes.pod-resources"
    if not reading.ok:
        return reading.reason, reading.detail
    for entry in attribution.unmatched:
        if entry.uuid == uuid:
            return entry.reason, entry.detail
    unplaced = [
        entry for entry in attribution.unmatched if entry.reason in (DEVICE_ID_NOT_RECOGNISED, MIG_DEVICE_UNKNOWN)
    ]
    if unplaced:
        return unplaced[0].reason, f"{len(unplaced)} allocated device id(s) could not be placed: {unplaced[0].detail}"
    return NO_POD_REQUESTS_GPU, (
        "the kubelet lists no container allocated this GPU, a MIG device or a replica of it "
        f"(resources matched: {','.join(settings.resource_patterns)})"
    )


def _mig_enabled(readings: Readings, row: Sequence[str], mig_column: int | None, uuid: str) -> bool | None:
    if readings.extras is not None and any(normalize_uuid(d.gpu_uuid) == uuid for d in readings.extras.mig_devices):
        return True
    if mig_column is None:
        return None
    return row[mig_column].strip().lower() == "enabled"


def build_report(
    snapshot: Snapshot,
    settings: AttributionSettings,
    fields: Sequence[QueryField],
    environ: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """The JSON document of ``GET /-/attribution`` for one snapshot."""
    attribution = snapshot.kubernetes or KubernetesAttribution(None)
    reading = attribution.pod_resources
    pod_resources: dict[str, Any] = {"enabled": settings.pod_resources}
    if settings.pod_resources:
        pod_resources.update(socket=settings.socket, resource_names=list(settings.resource_patterns))
    if reading is not None:
        pod_resources.update(
            up=reading.ok, reason=reading.reason, detail=reading.detail, fetched_at=reading.fetched_at,
            devices=len(reading.devices),
        )  # fmt: skip
    process_pods: dict[str, Any] = {"enabled": settings.process_pods}
    if settings.process_pods:
        process_pods.update(
            proc_root=settings.proc_root,
            reason=attribution.process_reason,
            detail=attribution.process_detail,
            mig_monitor_devices=environ.get(MIG_MONITOR_ENV, ""),
        )
    report: dict[str, Any] = {"pod_resources": pod_resources, "process_pods": process_pods}
    attempt = snapshot.attempt
    readings = attempt.readings if attempt is not None else None
    report["collection"] = {
        "succeeded": readings is not None,
        "error": attempt.error if attempt is not None else "no collection has finished yet",
    }
    report["unmatched_devices"] = [_unmatched(entry) for entry in attribution.unmatched]
    gpus: list[dict[str, Any]] = []
    report["gpus"] = gpus
    if readings is None:
        report["reason"] = NO_READINGS
        return report
    uuid_column, index_column = column_of(fields, "uuid"), column_of(fields, "index")
    mig_column = column_of(fields, "mig.mode.current")
    if uuid_column is None:
        return report
    for row in readings.gpus.rows:
        uuid = normalize_uuid(row[uuid_column])
        links = [link for link in attribution.gpu_pods if link.uuid == uuid]
        entry: dict[str, Any] = {
            "uuid": uuid,
            "index": row[index_column].strip() if index_column is not None else "",
            "mig_enabled": _mig_enabled(readings, row, mig_column, uuid),
            "pods": [_pod(link) for link in links],
        }
        entry["reason"], entry["detail"] = ("", "") if links else _gpu_reason(uuid, attribution, settings)
        if not settings.process_pods:
            entry["processes_reason"] = PROCESS_PODS_OFF
        else:
            rows = [process for process in attribution.processes or () if process.uuid == uuid]
            entry["processes"] = [_process(process) for process in rows]
            entry["processes_reason"] = attribution.process_reason
            if not rows and entry["mig_enabled"] and environ.get(MIG_MONITOR_ENV, "") != "all":
                entry["processes_reason"] = MIG_MONITOR_ENV_MISSING
                entry["processes_detail"] = (
                    f"MIG is enabled and no process is listed: processes on MIG devices are visible to a "
                    f"container only with {MIG_MONITOR_ENV}=all (and hostPID)"
                )
        gpus.append(entry)
    gpus.sort(key=lambda gpu: gpu["uuid"])
    return report


def attribution_handler(
    collector: Collector, settings: AttributionSettings, budget_seconds: float | None
) -> Callable[[Request], Awaitable[Response]]:
    """The route: the snapshot a scrape would get now (a collection in synchronous mode), as JSON."""

    async def handle(_: Request) -> Response:
        snapshot = await collector.scrape(budget_seconds)
        report = build_report(snapshot, settings, collector.backend.fields)
        return Response(text=json.dumps(report, indent=2) + "\n", content_type="application/json")

    return handle
