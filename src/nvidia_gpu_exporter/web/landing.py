"""The landing page at ``/``: exporter-toolkit's links, then the live view of the GPUs (docs/view.md).

The page is complete without JavaScript: every value is rendered here, as tables, from the view document
(:mod:`.view`). Its inline script then polls ``/-/view.json`` and redraws the same tables with DOM calls
(``textContent``, never ``innerHTML``), so a hostile process or GPU name is text in both paths: here every
reported value goes through :func:`html.escape`. No external assets: the CSS, the script and the SVG
sparklines are inline, so the page works on an air-gapped node and under a strict proxy.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.web.routes import (
    HEALTH_PATH,
    PPROF_PREFIX,
    READY_PATH,
    VERDICTS_PATH,
    VIEW_JSON_PATH,
    XIDS_PATH,
)
from nvidia_gpu_exporter.web.settings import WebSettings

SPARK_WIDTH = 120
SPARK_HEIGHT = 24

# The rows of each GPU's table: label, the document key, its unit, and the history series drawn beside it.
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("Utilization", "utilization_percent", "%", "utilization_percent"),
    ("Memory used", "memory_used_mib", "MiB", "memory_used_mib"),
    ("Temperature", "temperature_celsius", "°C", "temperature_celsius"),
    ("Power", "power_draw_watts", "W", "power_draw_watts"),
    ("SM clock", "clocks_sm_mhz", "MHz", "clocks_sm_mhz"),
    ("Memory clock", "clocks_memory_mhz", "MHz", ""),
    ("Fan", "fan_percent", "%", ""),
)

ASSETS = resources.files("nvidia_gpu_exporter.web") / "assets"
STYLE = (ASSETS / "view.css").read_text(encoding="utf-8")  # inlined: the page loads nothing else
SCRIPT = (ASSETS / "view.js").read_text(encoding="utf-8")
if "</" in SCRIPT or "</" in STYLE:  # would end the inline element early
    raise RuntimeError("the live view's inline assets must not contain '</'")
HOT_CELSIUS = 85.0  # a GPU at or above this temperature is marked HOT on the page


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _when(timestamp: float | None) -> str:
    return "never" if timestamp is None else time.strftime("%H:%M:%S", time.localtime(timestamp))


def sparkline(points: Sequence[float | None], label: str) -> str:
    """An inline SVG polyline of the points (gaps skipped), scaled to its own range, labelled for screen readers."""
    values = [value for value in points if value is not None]
    if not values:
        return (
            f'<svg class="spark" viewBox="0 0 {SPARK_WIDTH} {SPARK_HEIGHT}" role="img" '
            f'aria-label="{_e(label)}: no points"></svg>'
        )
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = SPARK_WIDTH / (len(points) - 1) if len(points) > 1 else 0.0
    coordinates = " ".join(
        f"{index * step:.1f},{SPARK_HEIGHT - 1 - (value - low) / span * (SPARK_HEIGHT - 2):.1f}"
        for index, value in enumerate(points)
        if value is not None
    )
    description = f"{label}: {len(values)} points, {low:.1f} to {high:.1f}"
    return (
        f'<svg class="spark" viewBox="0 0 {SPARK_WIDTH} {SPARK_HEIGHT}" role="img" aria-label="{_e(description)}">'
        f'<polyline points="{coordinates}"></polyline></svg>'
    )


def _table(caption: str, heads: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f'<th scope="col">{_e(name)}</th>' for name in heads)
    body = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><caption>{_e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _more(count: int, what: str) -> str:
    return f'<p class="mute">and {count} more {what} not shown</p>' if count > 0 else ""


@dataclass(frozen=True)
class _Listing:
    """One of the lists under a GPU's readings: the document's ``key`` (its ``<key>_omitted`` counts what the
    document left out), the table's caption and column heads, a row's cells from one item, and the items' name in
    the plural for the line under the table."""

    key: str
    caption: str
    heads: tuple[str, str, str, str]
    row: Callable[[dict[str, Any]], Sequence[object]]
    plural: str

    def render(self, gpu: dict[str, Any]) -> str:
        """The table (none when the list is empty), then how many more there are."""
        listed = gpu[self.key]
        table = _table(self.caption, self.heads, [self.row(item) for item in listed]) if listed else ""
        return table + _more(gpu[f"{self.key}_omitted"], self.plural)


def _process_row(process: dict[str, Any]) -> Sequence[object]:
    memory = process["used_memory_mib"]
    return (process["pid"], process["name"], "n/a" if memory is None else f"{_num(memory)} MiB", process["pod_uid"])


def _xid_row(xid: dict[str, Any]) -> Sequence[object]:
    return (xid["xid"], xid["count"], f"{xid['name'] or 'unknown'} ({xid['severity']})", _when(xid["last_seen"]))


LISTINGS = (
    _Listing("processes", "Processes", ("PID", "Name", "Memory", "Pod"), _process_row, "processes"),
    _Listing(
        "pods",
        "Pods",
        ("Namespace", "Pod", "Container", "MIG device"),
        lambda pod: (pod["namespace"], pod["pod"], pod["container"], pod["mig_uuid"]),
        "pods",
    ),
    _Listing(
        "mig_devices",
        "MIG devices",
        ("GPU instance", "Compute instance", "Profile", "UUID"),
        lambda device: (device["gpu_instance_id"], device["compute_instance_id"], device["profile"], device["uuid"]),
        "MIG devices",
    ),
    _Listing("xids", "XID errors", ("XID", "Count", "Meaning", "Last seen"), _xid_row, "XID codes"),
)


VERDICT_CLASSES = {"ok": "ok", "degraded": "degraded", "failing": "failed"}


def _verdict(health: dict[str, Any]) -> str:
    """The GPU's verdict, first in its card: its state, what to do, and each reason with its evidence."""
    state = health["state"]
    text = f"Health: {state.upper() if state != 'ok' else state}"
    if health["action_text"]:
        text += f": {health['action_text']}"
    items = "".join(
        f"<li>{_e(reason['subsystem'])}: {_e(reason['reason'])} ({_e(reason['state'])}), {_e(reason['evidence'])}, "
        f"since {_e(_when(reason['since']))}</li>"
        for reason in health["reasons"]
    )
    reasons = f'<ul class="reasons">{items}</ul>' if items else ""
    return f'<p class="verdict {VERDICT_CLASSES[state]}">{_e(text)}</p>{reasons}' + _more(
        health["reasons_omitted"], "reasons"
    )


def _gpu(gpu: dict[str, Any], hot_celsius: float) -> str:
    rows = []
    history = gpu["history"]
    for label, key, unit, series in ROWS:
        value = gpu[key]
        text = _num(value, 1 if key == "power_draw_watts" else 0)
        if value is not None and key == "memory_used_mib" and gpu["memory_total_mib"] is not None:
            text += f" / {_num(gpu['memory_total_mib'])}"
        if value is not None:
            text += f" {unit}"
        if value is not None and key == "power_draw_watts" and gpu["power_limit_watts"] is not None:
            text += f" of {_num(gpu['power_limit_watts'])} W"
        hot = key == "temperature_celsius" and value is not None and value >= hot_celsius
        cell = f'<td class="n hot">{_e(text)} HOT</td>' if hot else f'<td class="n">{_e(text)}</td>'
        spark = sparkline(history.get(series, []), label) if series else ""
        rows.append(f'<tr><th scope="row">{_e(label)}</th>{cell}<td>{spark}</td></tr>')
    reasons = ", ".join(gpu["clock_event_reasons"]) or "none"
    rows.append(f'<tr><th scope="row">Clock event reasons</th><td colspan="2">{_e(reasons)}</td></tr>')
    parts = [
        f'<section class="gpu" aria-label="GPU {_e(gpu["index"])}">',
        f"<h3>GPU {_e(gpu['index'])}: {_e(gpu['name'])}</h3>",
        _verdict(gpu["health"]),
        f'<p class="mute">{_e(gpu["uuid"])} · {_e(gpu["pci_bus_id"])}'
        + (f" · {_e(gpu['pstate'])}" if gpu["pstate"] else "")
        + "</p>",
        f"<table><caption>Readings</caption><tbody>{''.join(rows)}</tbody></table>",
    ]
    parts.extend(listing.render(gpu) for listing in LISTINGS)
    parts.append("</section>")
    return "".join(parts)


def _health(collection: dict[str, Any]) -> str:
    state = collection["state"]
    if state == "ok":
        first = '<span class="ok">Last collection succeeded</span>'
    elif state == "failed":
        first = '<span class="failed">Last collection FAILED</span>'
    else:
        first = '<span class="mute">No collection yet</span>'
    duration = collection["duration_seconds"]
    rest = f" at {_when(collection['finished_at'])}"
    if duration is not None:
        rest += f" in {duration:.2f} s"
    rest += f"; failed collections: {collection['failed_collections']}"
    rest += f"; last success: {_when(collection['last_success_at'])}"
    if collection["error"]:
        rest += f"; error: {collection['error']}"
    return first + _e(rest)


def landing_page(settings: WebSettings, document: dict[str, Any] | None = None) -> str:
    """The landing page: the links exporter-toolkit's page has, then the live view of ``document``."""
    links = [f'<li><a href="{html.escape(settings.telemetry_path)}">Metrics</a></li>']
    links.append(f'<li><a href="{HEALTH_PATH}">Health</a></li>')
    links.append(f'<li><a href="{READY_PATH}">Ready</a></li>')
    links.append(f'<li><a href="{XIDS_PATH}">XIDs</a></li>')
    links.append(f'<li><a href="{VERDICTS_PATH}">GPU health</a></li>')
    links.append(f'<li><a href="{VIEW_JSON_PATH}">View (JSON)</a></li>')
    if settings.enable_pprof:
        links.append(f'<li><a href="{PPROF_PREFIX}/">Profiling</a></li>')
    profiling = "enabled" if settings.enable_pprof else "disabled"
    view = ""
    if document is not None:
        gpus = "".join(_gpu(gpu, HOT_CELSIUS) for gpu in document["gpus"]) or '<p class="mute">No GPU readings.</p>'
        fallen = "".join(
            f'<li class="hot">Fallen off the bus: {_e(gpu["pci_bus_id"])} {_e(gpu["uuid"])}</li>'
            for gpu in document["fallen_off_bus"]
        )
        view = (
            f'<section id="view" aria-labelledby="view-title" data-src="{VIEW_JSON_PATH}" '
            f'data-poll-seconds="{document["poll_seconds"]:g}" data-hot-celsius="{HOT_CELSIUS:g}" '
            f'data-rows="{_e(json.dumps([[label, key, unit, bool(series)] for label, key, unit, series in ROWS]))}">\n'
            '<h2 id="view-title">GPUs</h2>\n'
            f'<p id="health" role="status">{_health(document["collection"])}</p>\n'
            '<p id="update-status" class="mute" aria-live="polite"></p>\n'
            f'<ul id="fallen">{fallen}</ul>\n'
            f'<div id="gpus" class="gpus">{gpus}{_more(document["gpus_omitted"], "GPUs")}</div>\n'
            f'<p class="mute">Sparklines: the last {document["points_per_gpu"]} collections at most.</p>\n'
            "</section>\n"
            f"<script>{SCRIPT}</script>\n"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="UTF-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>Nvidia GPU Exporter</title>\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n"
        "<header><h1>Nvidia GPU Exporter</h1></header>\n<main>\n"
        f"<p>{html.escape(settings.landing_description)} Version: {html.escape(__version__)}. "
        f"Profiling: {profiling}.</p>\n"
        f'<nav aria-label="Endpoints"><ul>\n{"".join(links)}\n</ul></nav>\n'
        f"{view}</main>\n</body>\n</html>\n"
    )
