"""Build the Grafana dashboards of the exporter: a per-GPU detail view, a fleet overview and cost allocation.

Dashboards as code: this script writes ``deploy/grafana/*.json`` and the byte-identical copies in the Helm chart's
``dashboards/`` (the chart's ConfigMap ships those to the Grafana sidecar). tests/test_dashboards.py fails when
the files differ from what this script builds, and proves against a real Prometheus scraping the demo backend
that every panel query and every variable query parses and returns data.

Run: ``python deploy/grafana/build_dashboards.py`` (standard library only).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHART_DASHBOARDS = HERE.parent / "helm" / "nvidia-gpu-exporter" / "dashboards"
TAG = "nvidia_gpu_exporter"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]

# Selectors: the detail view shows one GPU (`uuid="$gpu"`), the overview any set of nodes and GPUs.
DETAIL = 'job="$job", instance="$node", uuid="$gpu"'
DETAIL_NODE = 'job="$job", instance="$node"'
FLEET = 'job="$job", instance=~"$node", uuid=~"$gpu"'
FLEET_NODE = 'job="$job", instance=~"$node"'

# Throttle and clock event reasons: drivers >= 555 say clocks_event_reasons, older ones clocks_throttle_reasons.
REASONS = [
    ("sw_power_cap", "SW power cap"),
    ("sw_thermal_slowdown", "SW thermal"),
    ("hw_slowdown", "HW slowdown"),
    ("hw_thermal_slowdown", "HW thermal"),
    ("hw_power_brake_slowdown", "HW power brake"),
    ("sync_boost", "Sync boost"),
    ("applications_clocks_setting", "App clocks"),
    ("gpu_idle", "Idle"),
]


def reason(name: str, selector: str) -> str:
    return (
        f"(nvidia_smi_clocks_event_reasons_{name}{{{selector}}}"
        f" or nvidia_smi_clocks_throttle_reasons_{name}{{{selector}}})"
    )


def throttled(selector: str) -> str:
    """1 per GPU while any slowdown reason other than idle, app clocks and sync boost is active, else 0."""
    active = " + ".join(reason(name, selector) for name, _ in REASONS[:5])
    return f"clamp_max({active}, 1)"


def by_gpu(expr: str, selector: str) -> str:
    """Add the GPU's index and name (from gpu_info) to each series, for legends like `node #0 NVIDIA H200`."""
    return f"({expr}) * on (job, instance, uuid) group_left (index, name) nvidia_smi_gpu_info{{{selector}}}"


def mig_profile(selector: str) -> str:
    """One series per GPU instance with its profile, the compute slice prefix (`1c.`) stripped."""
    return (
        "max by (job, instance, uuid, gpu_instance_id, profile) "
        f'(label_replace(nvidia_smi_mig_info{{{selector}}}, "profile", "$1", "profile", "^[0-9]+c\\\\.(.*)$"))'
    )


def by_mig(expr: str, selector: str) -> str:
    return f"({expr}) * on (job, instance, uuid, gpu_instance_id) group_left (profile) {mig_profile(selector)}"


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    title: str
    kind: str
    targets: list[Target]
    width: int = 12
    height: int = 8
    unit: str = ""
    description: str = ""
    min: float | None = None
    max: float | None = None
    thresholds: list[tuple[float | None, str]] = field(default_factory=list)
    mappings: list[Json] = field(default_factory=list)
    options: Json = field(default_factory=dict)
    custom: Json = field(default_factory=dict)
    transformations: list[Json] = field(default_factory=list)
    decimals: int | None = None


@dataclass
class Row:
    title: str


Item = Panel | Row


def na_mapping() -> Json:
    return {"type": "value", "options": {"-1": {"text": "N/A", "index": 0}}}


def recovery_mapping() -> Json:
    return {
        "type": "value",
        "options": {
            "0": {"text": "none", "color": "green", "index": 0},
            "1": {"text": "reset GPU", "color": "red", "index": 1},
            "2": {"text": "reboot node", "color": "red", "index": 2},
            "3": {"text": "drain P2P", "color": "orange", "index": 3},
            "4": {"text": "drain and reset", "color": "red", "index": 4},
        },
    }


def on_off_mapping(on: str, off: str) -> Json:
    return {
        "type": "value",
        "options": {"0": {"text": off, "color": "green", "index": 0}, "1": {"text": on, "color": "red", "index": 1}},
    }


def render_panel(panel: Panel, panel_id: int, x: int, y: int) -> Json:
    steps: list[Json] = [
        {"color": color, "value": value} for value, color in (panel.thresholds or [(None, "green"), (80.0, "red")])
    ]
    defaults: Json = {"unit": panel.unit or "short", "thresholds": {"mode": "absolute", "steps": steps}}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.mappings:
        defaults["mappings"] = panel.mappings
    if panel.custom:
        defaults["custom"] = panel.custom
    targets: list[Json] = []
    for index, target in enumerate(panel.targets):
        entry: Json = {
            "datasource": DATASOURCE,
            "refId": chr(ord("A") + index),
            "expr": target.expr,
            "legendFormat": target.legend or "__auto",
            "range": not target.instant,
            "instant": target.instant,
        }
        if target.table:
            entry["format"] = "table"
        targets.append(entry)
    options = dict(panel.options)
    if panel.kind == "timeseries":
        options.setdefault("legend", {"displayMode": "list", "placement": "bottom", "showLegend": True})
        options.setdefault("tooltip", {"mode": "multi", "sort": "desc"})
    rendered: Json = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }
    if panel.description:
        rendered["description"] = panel.description
    if panel.transformations:
        rendered["transformations"] = panel.transformations
    return rendered


def layout(items: list[Item]) -> list[Json]:
    """Place panels left to right in rows of 24 columns; each Row starts a new line."""
    panels: list[Json] = []
    x = y = 0
    line_height = 0
    for panel_id, item in enumerate(items, start=1):
        if isinstance(item, Row):
            y += line_height
            x, line_height = 0, 0
            panels.append(
                {
                    "id": panel_id,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y += 1
            continue
        if x + item.width > 24:
            y += line_height
            x, line_height = 0, 0
        panels.append(render_panel(item, panel_id, x, y))
        x += item.width
        line_height = max(line_height, item.height)
    return panels


def query_variable(name: str, label: str, query: str, *, multi: bool, regex: str = "", sort: int = 1) -> Json:
    variable: Json = {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "StandardVariableQuery"},
        "refresh": 2,
        "regex": regex,
        "sort": sort,
        "multi": multi,
        "includeAll": multi,
        "current": {},
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }
    if multi:
        variable["allValue"] = ".*"
    return variable


def templating(*, multi: bool) -> Json:
    gpu_query = (
        'query_result(label_join(nvidia_smi_gpu_info{job="$job", instance=~"$node"},'
        ' "gpu_label", " ", "index", "name"))'
    )
    return {
        "list": [
            {
                "type": "datasource",
                "name": "datasource",
                "label": "Data source",
                "query": "prometheus",
                "current": {},
                "hide": 0,
                "includeAll": False,
                "multi": False,
                "options": [],
                "refresh": 1,
                "regex": "",
                "skipUrlSync": False,
            },
            query_variable("job", "Job", "label_values(nvidia_smi_gpu_info, job)", multi=False),
            query_variable("node", "Node", 'label_values(nvidia_smi_gpu_info{job="$job"}, instance)', multi=multi),
            # Text "#<index> <name>", value the uuid; gpu_label sorts before index, name and uuid in the result.
            query_variable(
                "gpu",
                "GPU",
                gpu_query,
                multi=multi,
                regex='/gpu_label="(?<text>[^"]+)".*uuid="(?<value>[^"]+)"/',
                sort=3,
            ),
        ]
    }


def dashboard(uid: str, title: str, description: str, items: list[Item], *, multi: bool, other: str) -> Json:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "title": other,
                "tags": [TAG],
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "url": "",
                "tooltip": "",
            }
        ],
        "templating": templating(multi=multi),
        "panels": layout(items),
    }


Steps = list[tuple[float | None, str]]
PERCENT: Steps = [(None, "green"), (0.8, "orange"), (0.95, "red")]
TEMPERATURE: Steps = [(None, "green"), (75.0, "orange"), (85.0, "red")]
ALWAYS_GREEN: Steps = [(None, "green")]


def organize(hidden: Sequence[str], renamed: dict[str, str] | None = None) -> Json:
    """Grafana's organize transformation: hide these table columns, rename those."""
    options: Json = {"excludeByName": dict.fromkeys(hidden, True)}
    if renamed:
        options["renameByName"] = renamed
    return {"id": "organize", "options": options}


def fleet_stat(
    title: str,
    expr: str,
    thresholds: list[tuple[float | None, str]],
    *,
    unit: str = "",
    decimals: int | None = None,
    description: str = "",
) -> Panel:
    """One of the fleet's headline numbers: a small stat panel of one instant query."""
    return Panel(
        title,
        "stat",
        [Target(expr, instant=True)],
        width=3,
        height=4,
        unit=unit,
        thresholds=thresholds,
        description=description,
        decimals=decimals,
    )


def recent_xids_table(selector: str, *, width: int, hidden: Sequence[str], description: str = "") -> Panel:
    """The kernel log's recent XIDs with the process (and pod) each blamed, shared by both dashboards."""
    return Panel(
        "Recent XIDs and the processes that caused them",
        "table",
        [Target(f"nvidia_smi_xid_occurrence_timestamp_seconds{{{selector}}} * 1000", instant=True, table=True)],
        width=width,
        unit="dateTimeAsIso",
        description=description,
        transformations=[organize(hidden, {"xid": "Xid", "process_name": "process", "Value": "seen at"})],
    )


def mig_inventory_table(title: str, selector: str) -> Panel:
    """The MIG device inventory (``nvidia_smi_mig_info``) as a table, shared by both dashboards."""
    return Panel(
        title,
        "table",
        [Target(f"nvidia_smi_mig_info{{{selector}}}", instant=True, table=True)],
        thresholds=ALWAYS_GREEN,
        transformations=[organize(("Time", "Value", "__name__", "job"))],
    )


ANY_RED: Steps = [(None, "green"), (1.0, "red")]
TIMELINE = {"fillOpacity": 80, "lineWidth": 0}


def timeseries(
    title: str,
    lines: Sequence[tuple[str, str]],
    *,
    width: int = 12,
    unit: str = "",
    min: float | None = 0,
    max: float | None = None,
    thresholds: Steps | None = None,
    description: str = "",
) -> Panel:
    """A time series panel: a range query per `(expression, legend)` in `lines`, its axis from 0 unless `min` says
    otherwise; `thresholds`, where given, are drawn as lines across it."""
    return Panel(
        title,
        "timeseries",
        [Target(expr, legend) for expr, legend in lines],
        width=width,
        unit=unit,
        description=description,
        min=min,
        max=max,
        thresholds=thresholds or [],
        custom={"thresholdsStyle": {"mode": "line"}} if thresholds else {},
    )


def gauge(
    title: str,
    expr: str,
    *,
    unit: str = "percentunit",
    max: float = 1,
    thresholds: Steps = PERCENT,
    mappings: list[Json] | None = None,
    description: str = "",
) -> Panel:
    """A gauge 4 columns (of 24) wide, from 0 to `max`: a ratio unless `unit` says otherwise."""
    return Panel(
        title,
        "gauge",
        [Target(expr)],
        width=4,
        unit=unit,
        min=0,
        max=max,
        thresholds=thresholds,
        mappings=mappings or [],
        description=description,
    )


def detail_items() -> list[Item]:
    s, n = DETAIL, DETAIL_NODE
    return [
        Row("Overview"),
        Panel(
            "GPU",
            "table",
            [Target(f"nvidia_smi_gpu_info{{{s}}}", instant=True, table=True)],
            width=24,
            height=4,
            transformations=[organize(("Time", "Value", "__name__"))],
        ),
        gauge(
            "GPU utilization",
            # Both arms summed: with their label sets equal, `or` adds the N/A arm only where the ratio is absent.
            f"sum(nvidia_smi_utilization_gpu_ratio{{{s}}}) or sum(nvidia_smi_gpu_info{{{s}}}) * 0 - 1",
            mappings=[na_mapping()],
            description="Fraction of time a kernel ran; N/A on MIG-enabled GPUs (see the MIG panels).",
        ),
        gauge("Memory allocated", f"nvidia_smi_memory_used_bytes{{{s}}} / nvidia_smi_memory_total_bytes{{{s}}}"),
        gauge("Temperature", f"nvidia_smi_temperature_gpu{{{s}}}", unit="celsius", max=100, thresholds=TEMPERATURE),
        gauge(
            "Power of limit",
            f"nvidia_smi_power_draw_watts{{{s}}} / (nvidia_smi_enforced_power_limit_watts{{{s}}}"
            f" or nvidia_smi_power_limit_watts{{{s}}})",
        ),
        Panel(
            "Recovery action",
            "stat",
            [Target(f"nvidia_smi_gpu_recovery_action{{{s}}}", instant=True)],
            width=4,
            thresholds=ANY_RED,
            mappings=[recovery_mapping()],
            description="What the driver asks for: a GPU reset, a node reboot or a drain.",
        ),
        Panel(
            "Throttled",
            "stat",
            [Target(throttled(s), instant=True)],
            width=4,
            thresholds=ANY_RED,
            mappings=[on_off_mapping("throttled", "no")],
            description="A power cap, thermal or hardware slowdown holds the clocks down.",
        ),
        Row("Utilization and memory"),
        timeseries(
            "Utilization",
            [
                (f"nvidia_smi_utilization_gpu_ratio{{{s}}}", "GPU"),
                (f"nvidia_smi_utilization_memory_ratio{{{s}}}", "memory controller"),
                (f"nvidia_smi_utilization_encoder_ratio{{{s}}}", "encoder"),
                (f"nvidia_smi_utilization_decoder_ratio{{{s}}}", "decoder"),
            ],
            unit="percentunit",
            max=1,
        ),
        timeseries(
            "Memory",
            [
                (f"nvidia_smi_memory_used_bytes{{{s}}}", "used"),
                (f"nvidia_smi_memory_reserved_bytes{{{s}}}", "reserved"),
                (f"nvidia_smi_memory_total_bytes{{{s}}}", "total"),
            ],
            unit="bytes",
        ),
        Row("Temperature, power and energy"),
        timeseries(
            "Temperature",
            [(f"nvidia_smi_temperature_gpu{{{s}}}", "core"), (f"nvidia_smi_temperature_memory{{{s}}}", "memory (HBM)")],
            width=8,
            unit="celsius",
            thresholds=TEMPERATURE,
            min=None,
        ),
        timeseries(
            "Power",
            [
                (f"nvidia_smi_power_draw_watts{{{s}}}", "draw"),
                (f"rate(nvidia_smi_energy_joules_total{{{s}}}[$__rate_interval])", "from the energy counter"),
                (f"nvidia_smi_enforced_power_limit_watts{{{s}}}", "enforced limit"),
            ],
            width=8,
            unit="watt",
            description="The sampled draw against the average from the energy counter (NVML and demo backends).",
        ),
        Panel(
            "Energy in the time range",
            "stat",
            [Target(f"increase(nvidia_smi_energy_joules_total{{{s}}}[$__range]) / 3.6e6", instant=True)],
            width=8,
            unit="kwatth",
            decimals=3,
            thresholds=ALWAYS_GREEN,
        ),
        Row("Clocks and throttling"),
        timeseries(
            "Clocks",
            [
                (f"nvidia_smi_clocks_current_graphics_clock_hz{{{s}}}", "graphics"),
                (f"nvidia_smi_clocks_current_sm_clock_hz{{{s}}}", "SM"),
                (f"nvidia_smi_clocks_current_memory_clock_hz{{{s}}}", "memory"),
                (f"nvidia_smi_clocks_current_video_clock_hz{{{s}}}", "video"),
                (f"nvidia_smi_clocks_max_graphics_clock_hz{{{s}}}", "graphics max"),
            ],
            unit="hertz",
        ),
        Panel(
            "Throttle reasons",
            "state-timeline",
            [Target(reason(name, s), legend) for name, legend in REASONS],
            mappings=[on_off_mapping("active", "off")],
            thresholds=ANY_RED,
            custom=TIMELINE,
            options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
        ),
        timeseries(
            "Time throttled per second",
            [
                (f"rate(nvidia_smi_clocks_event_reasons_counters_{name}_seconds{{{s}}}[$__rate_interval])", legend)
                for name, legend in [
                    ("sw_power_cap", "SW power cap"),
                    ("sw_thermal_slowdown", "SW thermal"),
                    ("hw_thermal_slowdown", "HW thermal"),
                    ("hw_power_brake_slowdown", "HW power brake"),
                    ("sync_boost", "Sync boost"),
                ]
            ],
            unit="percentunit",
            description="From the driver's cumulative counters (drivers 535 and later).",
        ),
        Panel(
            "Performance state",
            "state-timeline",
            [Target(f"nvidia_smi_pstate{{{s}}}", "P-state")],
            thresholds=[(None, "green"), (2.0, "orange"), (8.0, "blue")],
            custom=TIMELINE,
            options={"showValue": "auto", "mergeValues": True, "rowHeight": 0.8},
            description="P0 is full performance, P8 and above idle.",
        ),
        Row("PCIe"),
        timeseries(
            "PCIe throughput",
            [
                (f"nvidia_smi_pcie_throughput_tx_bytes_per_second{{{s}}}", "TX"),
                (f"nvidia_smi_pcie_throughput_rx_bytes_per_second{{{s}}}", "RX"),
            ],
            unit="Bps",
        ),
        Panel(
            "PCIe link",
            "stat",
            [
                Target(f"nvidia_smi_pcie_link_gen_current{{{s}}}", "gen", instant=True),
                Target(f"nvidia_smi_pcie_link_gen_max{{{s}}}", "gen max", instant=True),
                Target(f"nvidia_smi_pcie_link_width_current{{{s}}}", "width", instant=True),
                Target(f"nvidia_smi_pcie_link_width_max{{{s}}}", "width max", instant=True),
            ],
            thresholds=ALWAYS_GREEN,
            description="A link below its maximum generation or width under load points at a bad slot or riser.",
        ),
        Row("ECC and XID"),
        Panel(
            "Uncorrectable ECC errors",
            "stat",
            [Target(f"nvidia_smi_ecc_errors_uncorrected_volatile_total{{{s}}}", "since driver load", instant=True)],
            width=6,
            thresholds=ANY_RED,
        ),
        Panel(
            "Remapped rows",
            "stat",
            [
                Target(f"nvidia_smi_remapped_rows_correctable{{{s}}}", "correctable", instant=True),
                Target(f"nvidia_smi_remapped_rows_uncorrectable{{{s}}}", "uncorrectable", instant=True),
                Target(f"nvidia_smi_remapped_rows_pending{{{s}}}", "pending (reset)", instant=True),
                Target(f"nvidia_smi_remapped_rows_failure{{{s}}}", "failure (RMA)", instant=True),
            ],
            width=6,
            thresholds=ANY_RED,
        ),
        timeseries(
            "ECC errors",
            [
                (f"nvidia_smi_ecc_errors_corrected_volatile_total{{{s}}}", "corrected"),
                (f"nvidia_smi_ecc_errors_uncorrected_volatile_total{{{s}}}", "uncorrected"),
            ],
        ),
        timeseries(
            "XID errors by code",
            [(f"nvidia_smi_xid_errors_total{{{s}}}", "Xid {{xid}}")],
            description="From the kernel log, every XID since boot; from NVML events, those since the exporter "
            "started (docs/health.md).",
        ),
        Panel(
            "Last XID",
            "table",
            [Target(f"time() - nvidia_smi_xid_last_timestamp_seconds{{{s}}}", instant=True, table=True)],
            unit="s",
            thresholds=[(None, "red"), (600.0, "green")],
            transformations=[organize(("Time", "job", "instance", "uuid"), {"xid": "Xid", "Value": "seconds ago"})],
        ),
        recent_xids_table(
            s,
            width=24,
            hidden=("Time", "job", "instance", "uuid"),
            description="From the kernel log: the last few distinct XIDs on this GPU, with the pid, process and "
            "(with --kubernetes.process-pods) pod the driver blamed. GET /-/xids on the exporter says what each "
            "code means and what to do.",
        ),
        Row("Processes"),
        Panel(
            "Processes",
            "table",
            [
                Target(
                    f"nvidia_smi_compute_app_used_memory_bytes{{{s}}} or nvidia_smi_compute_app_info{{{s}}} * 0",
                    instant=True,
                    table=True,
                )
            ],
            unit="bytes",
            thresholds=ALWAYS_GREEN,
            description="Needs --collect.compute-apps, and hostPID in Kubernetes.",
            transformations=[organize(("Time", "job", "instance", "uuid"), {"Value": "memory"})],
        ),
        timeseries(
            "Process memory",
            [(f"nvidia_smi_compute_app_used_memory_bytes{{{s}}}", "{{process_name}} ({{pid}})")],
            unit="bytes",
        ),
        Row("MIG"),
        mig_inventory_table("MIG devices", s),
        Panel(
            "MIG memory used",
            "bargauge",
            [
                Target(
                    by_mig(f"nvidia_smi_mig_memory_used_bytes{{{s}}} / nvidia_smi_mig_memory_total_bytes{{{s}}}", s),
                    "GI {{gpu_instance_id}} {{profile}}",
                    instant=True,
                )
            ],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=PERCENT,
            options={"displayMode": "gradient", "orientation": "horizontal"},
        ),
        *(
            timeseries(
                f"MIG {what}",
                [(by_mig(f"nvidia_smi_mig_{metric}_ratio{{{s}}}", s), "GI {{gpu_instance_id}} {{profile}}")],
                width=8,
                unit="percentunit",
                max=1,
            )
            for what, metric in (
                ("SM activity", "sm_activity"),
                ("tensor activity", "tensor_activity"),
                ("SM occupancy", "sm_occupancy"),
            )
        ),
        Row("Exporter"),
        Panel(
            "Collection",
            "stat",
            [Target(f"nvidia_smi_last_collect_success{{{n}}}", instant=True)],
            width=6,
            thresholds=[(None, "red"), (1.0, "green")],
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "failing", "color": "red", "index": 0},
                        "1": {"text": "ok", "color": "green", "index": 1},
                    },
                }
            ],
        ),
        Panel(
            "Last success",
            "stat",
            [Target(f"time() - nvidia_smi_last_collect_success_timestamp_seconds{{{n}}}", instant=True)],
            width=6,
            unit="s",
            thresholds=[(None, "green"), (300.0, "red")],
        ),
        timeseries(
            "Collection duration and failures",
            [
                (f"nvidia_smi_last_collect_duration_seconds{{{n}}}", "duration (s)"),
                (f"rate(nvidia_smi_failed_scrapes_total{{{n}}}[$__rate_interval])", "failures per second"),
            ],
        ),
        timeseries(
            "Utilization vs. power",
            [
                (f"nvidia_smi_utilization_gpu_ratio{{{s}}}", "GPU utilization"),
                (
                    f"nvidia_smi_power_draw_watts{{{s}}} / nvidia_smi_enforced_power_limit_watts{{{s}}}",
                    "power of limit",
                ),
            ],
            width=24,
            unit="percentunit",
        ),
    ]


def fleet_items() -> list[Item]:
    s, n = FLEET, FLEET_NODE
    legend = "{{instance}} #{{index}} {{name}}"
    return [
        Row("Fleet"),
        fleet_stat("Nodes", f"count(count by (instance) (nvidia_smi_gpu_info{{{s}}}))", ALWAYS_GREEN),
        fleet_stat("GPUs", f"count(nvidia_smi_gpu_info{{{s}}})", ALWAYS_GREEN),
        fleet_stat(
            "Average utilization", f"avg(nvidia_smi_utilization_gpu_ratio{{{s}}})", ALWAYS_GREEN, unit="percentunit"
        ),
        fleet_stat("Power draw", f"sum(nvidia_smi_power_draw_watts{{{s}}})", ALWAYS_GREEN, unit="watt"),
        fleet_stat(
            "Energy in the time range",
            f"sum(increase(nvidia_smi_energy_joules_total{{{s}}}[$__range])) / 3.6e6",
            ALWAYS_GREEN,
            unit="kwatth",
            decimals=3,
        ),
        fleet_stat("GPUs above 85 °C", f"count(nvidia_smi_temperature_gpu{{{s}}} > 85) or vector(0)", ANY_RED),
        fleet_stat("Failing collections", f"count(nvidia_smi_last_collect_success{{{n}}} == 0) or vector(0)", ANY_RED),
        fleet_stat(
            "GPUs needing action",
            f"count(nvidia_smi_gpu_recovery_action{{{s}}} > 0"
            f" or nvidia_smi_remapped_rows_pending{{{s}}} == 1"
            f" or nvidia_smi_remapped_rows_failure{{{s}}} == 1) or vector(0)",
            ANY_RED,
            description="Recovery action requested, row remap pending (reset) or failed (RMA).",
        ),
        Panel(
            "GPUs",
            "table",
            [
                Target(f"nvidia_smi_gpu_info{{{s}}}", instant=True, table=True),
                Target(f"nvidia_smi_utilization_gpu_ratio{{{s}}}", instant=True, table=True),
                Target(
                    f"nvidia_smi_memory_used_bytes{{{s}}} / nvidia_smi_memory_total_bytes{{{s}}}",
                    instant=True,
                    table=True,
                ),
                Target(f"nvidia_smi_temperature_gpu{{{s}}}", instant=True, table=True),
                Target(f"nvidia_smi_power_draw_watts{{{s}}}", instant=True, table=True),
                Target(f"nvidia_smi_pstate{{{s}}}", instant=True, table=True),
                Target(throttled(s), instant=True, table=True),
                Target(f"nvidia_smi_ecc_errors_uncorrected_volatile_total{{{s}}}", instant=True, table=True),
                Target(f"nvidia_smi_gpu_recovery_action{{{s}}}", instant=True, table=True),
            ],
            width=24,
            height=8,
            thresholds=ALWAYS_GREEN,
            transformations=[
                {"id": "joinByField", "options": {"byField": "uuid", "mode": "outer"}},
                organize(
                    ("Time", "__name__", "Value #A"),
                    {
                        "Value #B": "utilization",
                        "Value #C": "memory",
                        "Value #D": "°C",
                        "Value #E": "watts",
                        "Value #F": "P-state",
                        "Value #G": "throttled",
                        "Value #H": "uncorrectable ECC",
                        "Value #I": "recovery action",
                    },
                ),
            ],
        ),
        Row("Utilization and memory"),
        timeseries(
            "GPU utilization",
            [(by_gpu(f"nvidia_smi_utilization_gpu_ratio{{{s}}}", s), legend)],
            unit="percentunit",
            max=1,
        ),
        timeseries(
            "Memory allocated",
            [(by_gpu(f"nvidia_smi_memory_used_bytes{{{s}}} / nvidia_smi_memory_total_bytes{{{s}}}", s), legend)],
            unit="percentunit",
            max=1,
        ),
        Row("Temperature, power and energy"),
        timeseries(
            "Temperature",
            [(by_gpu(f"nvidia_smi_temperature_gpu{{{s}}}", s), legend)],
            width=8,
            unit="celsius",
            min=None,
            thresholds=TEMPERATURE,
        ),
        timeseries("Power draw", [(by_gpu(f"nvidia_smi_power_draw_watts{{{s}}}", s), legend)], width=8, unit="watt"),
        timeseries(
            "Power per node (energy counter)",
            [(f"sum by (instance) (rate(nvidia_smi_energy_joules_total{{{s}}}[$__rate_interval]))", "{{instance}}")],
            width=8,
            unit="watt",
        ),
        Row("Clocks and throttling"),
        timeseries(
            "SM clock", [(by_gpu(f"nvidia_smi_clocks_current_sm_clock_hz{{{s}}}", s), legend)], width=8, unit="hertz"
        ),
        timeseries(
            "Memory clock",
            [(by_gpu(f"nvidia_smi_clocks_current_memory_clock_hz{{{s}}}", s), legend)],
            width=8,
            unit="hertz",
        ),
        Panel(
            "Throttled GPUs",
            "state-timeline",
            [Target(by_gpu(throttled(s), s), legend)],
            width=8,
            mappings=[on_off_mapping("throttled", "no")],
            thresholds=ANY_RED,
            custom=TIMELINE,
            options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
        ),
        Row("ECC and XID"),
        timeseries(
            "Uncorrectable ECC errors",
            [(by_gpu(f"nvidia_smi_ecc_errors_uncorrected_volatile_total{{{s}}}", s), legend)],
            width=8,
        ),
        Panel(
            "XID errors in the time range",
            "bargauge",
            [
                Target(
                    f"sum by (instance, uuid, xid) (increase(nvidia_smi_xid_errors_total{{{s}}}[$__range]))",
                    "{{instance}} {{uuid}} Xid {{xid}}",
                    instant=True,
                )
            ],
            width=8,
            thresholds=ANY_RED,
            options={"displayMode": "basic", "orientation": "horizontal"},
        ),
        Panel(
            "Recovery actions",
            "state-timeline",
            [Target(by_gpu(f"nvidia_smi_gpu_recovery_action{{{s}}}", s), legend)],
            width=8,
            mappings=[recovery_mapping()],
            thresholds=ANY_RED,
            custom=TIMELINE,
            options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8},
        ),
        Row("Node health"),
        timeseries(
            "GPUs on the PCI bus and visible to the driver",
            [
                (f"sum by (instance) (nvidia_smi_gpus_expected{{{n}}})", "{{instance}} on the bus"),
                (f"count by (instance) (nvidia_smi_gpu_info{{{n}}})", "{{instance}} visible"),
            ],
            width=8,
            description="sysfs's NVIDIA GPUs against those nvidia-smi or NVML reports: a gap is a GPU left to "
            "vfio-pci, without a driver, or fallen off the bus.",
        ),
        recent_xids_table(s, width=8, hidden=("Time", "job")),
        Panel(
            "Kernel log and GPUs fallen off the bus",
            "table",
            [
                Target(f"nvidia_gpu_exporter_kernel_log_up{{{n}}}", instant=True, table=True),
                Target(f"nvidia_smi_gpu_fallen_off_bus{{{s}}}", instant=True, table=True),
            ],
            width=8,
            description="kernel_log_up 0 (with its reason) means the XID panels cannot show anything; a GPU "
            "fallen off the bus stays lost until the node reboots.",
            transformations=[{"id": "merge", "options": {}}],
        ),
        Row("Processes and MIG"),
        Panel(
            "Top processes by GPU memory",
            "bargauge",
            [
                Target(
                    f"topk(10, nvidia_smi_compute_app_used_memory_bytes{{{s}}})",
                    "{{instance}} {{process_name}} ({{pid}})",
                    instant=True,
                )
            ],
            width=8,
            unit="bytes",
            thresholds=ALWAYS_GREEN,
            options={"displayMode": "gradient", "orientation": "horizontal"},
            description="Needs --collect.compute-apps, and hostPID in Kubernetes.",
        ),
        timeseries("Processes per GPU", [(by_gpu(f"nvidia_smi_compute_apps{{{s}}}", s), legend)], width=8),
        Panel(
            "MIG memory used",
            "bargauge",
            [
                Target(
                    by_mig(f"nvidia_smi_mig_memory_used_bytes{{{s}}}", s),
                    "{{instance}} GI {{gpu_instance_id}} {{profile}}",
                    instant=True,
                )
            ],
            width=8,
            unit="bytes",
            thresholds=ALWAYS_GREEN,
            options={"displayMode": "gradient", "orientation": "horizontal"},
        ),
        mig_inventory_table("MIG instances", s),
        timeseries(
            "MIG SM activity",
            [
                (
                    by_mig(f"nvidia_smi_mig_sm_activity_ratio{{{s}}}", s),
                    "{{instance}} GI {{gpu_instance_id}} {{profile}}",
                )
            ],
            unit="percentunit",
            max=1,
        ),
        Row("Exporters"),
        timeseries(
            "Collection duration", [(f"nvidia_smi_last_collect_duration_seconds{{{n}}}", "{{instance}}")], unit="s"
        ),
        timeseries(
            "Seconds since the last successful collection",
            [(f"time() - nvidia_smi_last_collect_success_timestamp_seconds{{{n}}}", "{{instance}}")],
            unit="s",
            thresholds=[(None, "green"), (300.0, "red")],
        ),
    ]


# -- cost allocation per namespace (docs/metrics.md "GPU-seconds", KUBERNETES.md "Cost allocation") ---------------

COST_JOB = 'job="$job"'
# kube-state-metrics' pods by uid, for the pods the exporter names by uid only (a shared GPU's).
POD_NAMESPACE = 'max by (pod_uid, namespace) (label_replace(kube_pod_info, "pod_uid", "$1", "uid", "(.*)"))'
UNNAMED = "(pods by uid only)"


def per_namespace(family: str, window: str) -> str:
    """``increase`` of a per-pod counter over ``window``, per namespace: the exporter's own namespace label where
    one container holds the GPU, kube_pod_info's for the pods it knows by uid only, and those neither names
    summed under UNNAMED rather than dropped (the demo has no kube-state-metrics)."""
    series = f"increase({family}{{{COST_JOB}}}[{window}])"
    unnamed = f'increase({family}{{{COST_JOB}, namespace=""}}[{window}])'
    return (
        f"sum by (namespace) ({series} * on (pod_uid) group_left (namespace) {POD_NAMESPACE}"
        f' or increase({family}{{{COST_JOB}, namespace!=""}}[{window}])'
        f' or label_replace({unnamed} unless on (pod_uid) {POD_NAMESPACE}, "namespace", "{UNNAMED}", "", ""))'
    )


ALLOCATED = "nvidia_smi_pod_gpu_allocated_seconds_total"
USED = "nvidia_smi_pod_gpu_used_seconds_total"
POD_ENERGY = "nvidia_smi_pod_energy_joules_total"


def cost_items() -> list[Item]:
    allocated_hours = f"sum by (namespace) (increase({ALLOCATED}{{{COST_JOB}}}[$__range])) / 3600"
    used_hours = f"{per_namespace(USED, '$__range')} / 3600"
    kwh = f"{per_namespace(POD_ENERGY, '$__range')} / 3.6e6"
    bars: Json = {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True}
    return [
        Row("Per namespace over the time range"),
        Panel(
            "Cost per namespace",
            "bargauge",
            [
                Target(
                    f'sum by (namespace) (label_replace({allocated_hours} * $price_gpu_hour, "part", "gpu", "", "")'
                    f' or label_replace({kwh} * $price_kwh, "part", "energy", "", ""))',
                    "{{namespace}}",
                    instant=True,
                )
            ],
            width=8,
            decimals=2,
            thresholds=ALWAYS_GREEN,
            options=bars,
            description="GPU-hours allocated times the price per GPU-hour, plus kWh times the price per kWh "
            "(the variables at the top).",
        ),
        Panel(
            "GPU-hours allocated",
            "bargauge",
            [Target(allocated_hours, "{{namespace}}", instant=True)],
            width=8,
            decimals=2,
            thresholds=ALWAYS_GREEN,
            options=bars,
            description="From the kubelet's PodResources (--kubernetes.pod-resources): a pod holding a GPU, a "
            "time-sliced replica or a MIG device counts whether or not it runs anything.",
        ),
        Panel(
            "GPU-hours used",
            "bargauge",
            [Target(used_hours, "{{namespace}}", instant=True)],
            width=8,
            decimals=2,
            thresholds=ALWAYS_GREEN,
            options=bars,
            description="The pods' SM utilization integrated over time. Pods on shared GPUs are known by uid "
            f"only: kube-state-metrics' kube_pod_info names their namespace, else they are summed under {UNNAMED}.",
        ),
        Panel(
            "Energy (kWh)",
            "bargauge",
            [Target(kwh, "{{namespace}}", instant=True)],
            width=8,
            decimals=3,
            unit="kwatth",
            thresholds=ALWAYS_GREEN,
            options=bars,
            description="Each GPU's energy split by its pods' shares (nvml and demo backends).",
        ),
        Panel(
            "GPU-hours allocated per pod",
            "table",
            [
                Target(
                    f"sum by (namespace, pod) (increase({ALLOCATED}{{{COST_JOB}}}[$__range])) / 3600",
                    instant=True,
                    table=True,
                )
            ],
            width=16,
            decimals=2,
            transformations=[organize(("Time",), {"Value": "GPU-hours allocated"})],
        ),
        Row("Over time"),
        timeseries(
            "GPUs allocated and used",
            [
                (f"sum by (namespace) (rate({ALLOCATED}{{{COST_JOB}}}[$__rate_interval]))", "{{namespace}} allocated"),
                (f"sum (rate({USED}{{{COST_JOB}}}[$__rate_interval]))", "used, all namespaces"),
            ],
            description="GPU-seconds per second: 1 is one whole GPU held (allocated) or kept busy (used).",
        ),
        timeseries(
            "Share of the allocated GPUs used",
            [
                (
                    f"sum (rate({USED}{{{COST_JOB}}}[$__rate_interval]))"
                    f" / sum (rate({ALLOCATED}{{{COST_JOB}}}[$__rate_interval]))",
                    "used / allocated",
                )
            ],
            unit="percentunit",
            description="Low for long: GPUs held but idle (the NvidiaGpuAllocatedButIdle rule pages on it per GPU).",
        ),
    ]


def cost_templating() -> Json:
    def price(name: str, label: str, value: str) -> Json:
        return {
            "type": "textbox",
            "name": name,
            "label": label,
            "query": value,
            "current": {"text": value, "value": value},
            "options": [{"selected": True, "text": value, "value": value}],
            "hide": 0,
            "skipUrlSync": False,
        }

    return {
        "list": [
            templating(multi=False)["list"][0],  # the data source
            query_variable("job", "Job", f"label_values({ALLOCATED}, job)", multi=False),
            price("price_gpu_hour", "Price per GPU-hour", "2.50"),
            price("price_kwh", "Price per kWh", "0.15"),
        ]
    }


def build() -> dict[str, Json]:
    detail = dashboard(
        "nvidia-gpu-detail",
        "NVIDIA GPU detail",
        "One GPU in detail: utilization, memory, temperature, power and energy, clocks and throttling, PCIe, "
        "ECC and XID errors, processes and MIG instances (nvidia_gpu_exporter).",
        detail_items(),
        multi=False,
        other="NVIDIA GPU fleet",
    )
    fleet = dashboard(
        "nvidia-gpu-fleet",
        "NVIDIA GPU fleet",
        "Every GPU of the selected nodes: health at a glance, then utilization, memory, temperature, power, "
        "clocks, errors, processes and MIG (nvidia_gpu_exporter).",
        fleet_items(),
        multi=True,
        other="NVIDIA GPU detail",
    )
    cost = dashboard(
        "nvidia-gpu-cost",
        "NVIDIA GPU cost allocation",
        "GPU-hours allocated and used and energy per Kubernetes namespace, priced by the variables "
        "(nvidia_gpu_exporter with --kubernetes.pod-resources, --kubernetes.process-pods, --collect.process-usage).",
        cost_items(),
        multi=False,
        other="NVIDIA GPU fleet",
    )
    cost["templating"] = cost_templating()
    return {"nvidia-gpu-detail.json": detail, "nvidia-gpu-fleet.json": fleet, "nvidia-gpu-cost.json": cost}


def encode(board: Json) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    outputs = {name: encode(board) for name, board in build().items()}
    stale = [
        path
        for directory in (HERE, CHART_DASHBOARDS)
        for name, text in outputs.items()
        if not (path := directory / name).is_file() or path.read_text(encoding="utf-8") != text
    ]
    if "--check" in sys.argv[1:]:
        for path in stale:
            print(f"{path} is out of date: run python deploy/grafana/build_dashboards.py", file=sys.stderr)
        return 1 if stale else 0
    CHART_DASHBOARDS.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.write_text(outputs[path.name], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
