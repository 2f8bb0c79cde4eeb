"""The live view's data: ``GET /-/view.json``, the document the landing page is rendered from (docs/view.md).

One document per published snapshot, built when someone asks and cached until the next collection, so any
number of open pages cost one build per collection and nothing when nobody looks. Its shape is the JSON
Schema beside this module (``view.schema.json``); every list and string in it is bounded
(:data:`MAX_GPUS`, :data:`MAX_ROWS`, :data:`MAX_TEXT`), whatever the GPUs, processes or pods report.

The view never makes the exporter collect more than it would without it: in background mode it reads the
latest snapshot; in synchronous mode (the default) it joins or starts a collection only when the latest one
finished more than :data:`REFRESH_SECONDS` ago, so nvidia-smi runs at most once per that many seconds for
viewers, whatever their number.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.history import first_column
from nvidia_gpu_exporter.model.fields import EVENT_REASONS_PREFIX, REASON_BITS, THROTTLE_REASONS_PREFIX
from nvidia_gpu_exporter.model.snapshot import ProcessRow, QueryField, Readings, Snapshot, column_of
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, PROCESS_ABSENT_TOKENS, transform_generic
from nvidia_gpu_exporter.model.verdicts import GpuVerdict
from nvidia_gpu_exporter.model.xids import describe

SCHEMA_VERSION = 1
MAX_GPUS = 64  # GPUs listed; more are counted in gpus_omitted
MAX_ROWS = 16  # processes, pods, MIG devices and XID codes listed per GPU; more are counted as omitted
MAX_TEXT = 128  # characters kept of any text a GPU, a process or the kubelet reports
REFRESH_SECONDS = 5.0  # synchronous mode: the view starts a collection only when the latest is older than this
MIN_POLL_SECONDS = 2.0
MAX_POLL_SECONDS = 60.0

# The numbers shown per GPU: JSON key, then the query fields it is read from (the first one queried wins).
READINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilization_percent", ("utilization.gpu",)),
    ("memory_utilization_percent", ("utilization.memory",)),
    ("memory_used_mib", ("memory.used",)),
    ("memory_total_mib", ("memory.total",)),
    ("temperature_celsius", ("temperature.gpu",)),
    ("power_draw_watts", ("power.draw", "power.draw.instant", "power.draw.average")),
    ("power_limit_watts", ("power.limit", "enforced.power.limit")),
    ("clocks_sm_mhz", ("clocks.current.sm", "clocks.sm")),
    ("clocks_memory_mhz", ("clocks.current.memory", "clocks.mem")),
    ("fan_percent", ("fan.speed",)),
)
TEXTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("index", ("index",)),
    ("uuid", ("uuid",)),
    ("name", ("name",)),
    ("pci_bus_id", ("pci.bus_id",)),
    ("pstate", ("pstate",)),
)


def cut(text: str) -> str:
    """A reported text, at most :data:`MAX_TEXT` characters."""
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _number(text: str, absent: frozenset[str] = ABSENT_TOKENS) -> float | None:
    if text.strip().lower() in absent:
        return None
    return transform_generic(text, 1.0)


@dataclass(frozen=True, slots=True)
class _Columns:
    """Where each shown field sits in a GPU row, for one field list."""

    texts: tuple[tuple[str, int | None], ...]
    numbers: tuple[tuple[str, int | None], ...]
    reasons: tuple[tuple[str, int | None], ...]

    @classmethod
    def of(cls, fields: Sequence[QueryField]) -> _Columns:
        return cls(
            tuple((key, first_column(fields, names)) for key, names in TEXTS),
            tuple((key, first_column(fields, names)) for key, names in READINGS),
            tuple(
                (
                    reason,
                    first_column(fields, (f"{EVENT_REASONS_PREFIX}.{reason}", f"{THROTTLE_REASONS_PREFIX}.{reason}")),
                )
                for reason in REASON_BITS
            ),
        )


def _cell(row: tuple[str, ...], column: int | None) -> str:
    return row[column] if column is not None and column < len(row) else ""


def _collection(snapshot: Snapshot) -> dict[str, Any]:
    attempt = snapshot.attempt
    state = "none" if attempt is None else "ok" if attempt.succeeded else "failed"
    return {
        "state": state,
        "sequence": snapshot.sequence,
        "finished_at": None if attempt is None else attempt.finished_at,
        "duration_seconds": None if attempt is None else attempt.duration_seconds,
        "status_code": None if attempt is None else attempt.status_code,
        "error": None if attempt is None or attempt.error is None else cut(attempt.error),
        "failed_collections": snapshot.failed_collections,
        "last_success_at": snapshot.last_success_at,
    }


def _limited(items: Sequence[Any]) -> tuple[Sequence[Any], int]:
    return items[:MAX_ROWS], max(len(items) - MAX_ROWS, 0)


def _process(row: ProcessRow, pods: dict[tuple[str, str], tuple[str, str]]) -> dict[str, Any]:
    pod_uid, container_id = pods.get((normalize_uuid(row.gpu_uuid), row.pid), ("", ""))
    return {
        "pid": cut(row.pid),
        "name": cut(row.process_name),
        "used_memory_mib": _number(row.used_memory, PROCESS_ABSENT_TOKENS),
        "gpu_instance_id": cut(row.gpu_instance_id),
        "compute_instance_id": cut(row.compute_instance_id),
        "pod_uid": cut(pod_uid),
        "container_id": cut(container_id),
    }


def _health(verdict: GpuVerdict | None) -> dict[str, Any]:
    """The GPU's verdict (docs/health.md, "Verdicts"): ``ok`` with no reasons until one is judged."""
    if verdict is None:
        return {"state": "ok", "action": None, "action_text": None, "reasons": [], "reasons_omitted": 0}
    action = verdict.action
    listed, omitted = _limited(verdict.findings)
    return {
        "state": verdict.state.label,
        "action": None if action is None else action.value,
        "action_text": None if action is None else action.text,
        "reasons": [
            {
                "subsystem": finding.reason.subsystem.value,
                "reason": finding.reason.name,
                "state": finding.reason.state.label,
                "evidence": cut(finding.evidence),
                "since": finding.since,
                "action": finding.reason.action.value,
            }
            for finding in listed
        ],
        "reasons_omitted": omitted,
    }


def build_document(
    snapshot: Snapshot,
    fields: Sequence[QueryField],
    history: dict[str, dict[str, list[float | None]]],
    *,
    poll_seconds: float,
    points_per_gpu: int,
    now: float,
) -> dict[str, Any]:
    """The view document (view.schema.json) for one snapshot."""
    readings: Readings | None = snapshot.attempt.readings if snapshot.attempt is not None else None
    columns = _Columns.of(fields)
    uuid_column = column_of(fields, "uuid")
    kubernetes = snapshot.kubernetes
    process_pods: dict[tuple[str, str], tuple[str, str]] = {}
    if kubernetes is not None and kubernetes.processes is not None:
        process_pods = {(pod.uuid, pod.pid): (pod.pod_uid, pod.container_id) for pod in kubernetes.processes}
    processes = readings.processes if readings is not None else None
    extras = readings.extras if readings is not None else None
    rows = readings.gpus.rows if readings is not None else ()
    verdicts = {normalize_uuid(verdict.uuid): verdict for verdict in snapshot.verdicts if verdict.uuid}
    gpus: list[dict[str, Any]] = []
    for row in rows[:MAX_GPUS]:
        raw_uuid = _cell(row, uuid_column)
        uuid = normalize_uuid(raw_uuid)
        gpu: dict[str, Any] = {key: cut(_cell(row, column)) for key, column in columns.texts}
        gpu["health"] = _health(verdicts.get(uuid))
        gpu.update({key: _number(_cell(row, column)) for key, column in columns.numbers})
        gpu["clock_event_reasons"] = [
            reason for reason, column in columns.reasons if column is not None and _number(_cell(row, column)) == 1.0
        ]
        mine = [process for process in processes.rows if normalize_uuid(process.gpu_uuid) == uuid] if processes else []
        listed, gpu["processes_omitted"] = _limited(mine)
        gpu["processes"] = [_process(process, process_pods) for process in listed]
        pods = [link for link in kubernetes.gpu_pods if link.uuid == uuid] if kubernetes is not None else []
        listed, gpu["pods_omitted"] = _limited(pods)
        gpu["pods"] = [
            {
                "namespace": cut(link.namespace),
                "pod": cut(link.pod),
                "container": cut(link.container),
                "mig_uuid": cut(link.mig_uuid),
            }
            for link in listed
        ]
        devices = [device for device in extras.mig_devices if normalize_uuid(device.gpu_uuid) == uuid] if extras else []
        listed, gpu["mig_devices_omitted"] = _limited(devices)
        gpu["mig_devices"] = [
            {
                "uuid": cut(normalize_mig_uuid(device.mig_uuid)),
                "gpu_instance_id": device.gpu_instance_id,
                "compute_instance_id": device.compute_instance_id,
                "profile": cut(device.profile),
            }
            for device in listed
        ]
        xids = [record for record in snapshot.xids if normalize_uuid(record.gpu_uuid) == uuid]
        listed, gpu["xids_omitted"] = _limited(xids)
        gpu["xids"] = []
        for record in listed:
            entry = describe(record.xid)
            gpu["xids"].append(
                {
                    "xid": record.xid,
                    "count": record.count,
                    "last_seen": record.last_seen,
                    "name": "" if entry is None else entry.name,
                    "severity": "unknown" if entry is None else entry.severity.value,
                }
            )
        gpu["history"] = history.get(raw_uuid, {"t": []})
        gpus.append(gpu)
    kernel_log = snapshot.kernel_log
    return {
        "schema_version": SCHEMA_VERSION,
        "exporter_version": __version__,
        "generated_at": now,
        "poll_seconds": poll_seconds,
        "points_per_gpu": points_per_gpu,
        "collection": _collection(snapshot),
        "processes_collected": processes is not None,
        "attribution": kubernetes is not None,
        "xid_source": snapshot.xid_source,
        "kernel_log": None if kernel_log is None else {"state": kernel_log.state.value, "path": cut(kernel_log.path)},
        "fallen_off_bus": [
            {"uuid": cut(normalize_uuid(gpu.gpu_uuid)), "pci_bus_id": cut(gpu.pci_bus_id)}
            for gpu in snapshot.gpus_fallen_off[:MAX_ROWS]
        ],
        "gpus": gpus,
        "gpus_omitted": max(len(rows) - MAX_GPUS, 0),
    }


def poll_seconds_for(collector: Collector) -> float:
    """How often an open page asks again: the collection interval, or the refresh floor, within bounds."""
    wanted = collector.interval_seconds if collector.background else REFRESH_SECONDS
    return min(max(wanted, MIN_POLL_SECONDS), MAX_POLL_SECONDS)


class LiveView:
    """The view's document, its JSON and its page for the latest snapshot, built at most once per snapshot.

    The build runs in a worker thread (two GPUs with a full history: about 13 ms; the bounded worst case:
    about a second), one at a time, so the event loop keeps answering ``/-/healthy`` and scrapes meanwhile.
    """

    def __init__(
        self, collector: Collector, budget_seconds: float | None, render: Callable[[dict[str, Any]], str]
    ) -> None:
        self.collector = collector
        self.budget_seconds = budget_seconds
        self.render = render
        self.poll_seconds = poll_seconds_for(collector)
        self._key: tuple[int, bool] | None = None
        self._json = b""
        self._page = ""
        self._lock = asyncio.Lock()

    async def snapshot(self) -> Snapshot:
        """The latest snapshot, after a collection when it is older than :data:`REFRESH_SECONDS` (sync mode)."""
        collector = self.collector
        latest = collector.latest
        if collector.background:
            return latest if latest.attempt is not None else collector.no_result()
        finished = latest.attempt.finished_at if latest.attempt is not None else None
        if finished is not None and time.time() - finished < REFRESH_SECONDS:
            return latest
        return await collector.scrape(self.budget_seconds)

    def _build(self, snapshot: Snapshot, history: dict[str, dict[str, list[float | None]]]) -> tuple[bytes, str]:
        collector = self.collector
        document = build_document(
            snapshot,
            collector.backend.fields,
            history,
            poll_seconds=self.poll_seconds,
            points_per_gpu=collector.history.points,
            now=time.time(),
        )
        encoded = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        return encoded, self.render(document)

    async def _current(self) -> None:
        snapshot = await self.snapshot()
        key = (snapshot.sequence, snapshot.attempt is not None)
        async with self._lock:
            if key == self._key:
                return
            history = self.collector.history.series()  # read on the loop, where the collector appends
            self._json, self._page = await asyncio.to_thread(self._build, snapshot, history)
            self._key = key

    async def json_bytes(self) -> bytes:
        await self._current()
        return self._json

    async def page(self) -> str:
        await self._current()
        return self._page

    def cached_page(self) -> str | None:
        """The page last built, without collecting or building (what ``HEAD /`` measures); ``None`` before one."""
        return self._page if self._key is not None else None
