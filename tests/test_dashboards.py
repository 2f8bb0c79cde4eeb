"""Grafana dashboards: generated from deploy/grafana/build_dashboards.py, well formed, and every panel query and
every variable query parses (promtool) and returns data from a real Prometheus scraping the demo backend.

The live test needs Debian's prometheus and promtool in $PROMETHEUS_BIN_DIR (installed by
.ci/steps/40-kubernetes.sh) and skips with a clear message without them. Grafana itself cannot run here, so the
variables are resolved the way Grafana does it: each variable query runs against Prometheus in order, and the
panels are evaluated for every value of a single-value variable, or with the `All` value of a multi-value one.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_helpers import (
    CHART,
    GRAFANA,
    JOB,
    PROBE_ERRORS,
    Server,
    binary,
    get_json,
    prometheus,
    query,
    scrape_config,
    wait_target_up,
)
from harness import REPO, start_exporter
from polling import wait_until

DASHBOARDS = ("nvidia-gpu-detail.json", "nvidia-gpu-fleet.json")
VARIABLES = ("datasource", "job", "node", "gpu")
COST = "nvidia-gpu-cost.json"  # per namespace, with variables of its own
COST_VARIABLES = ("datasource", "job", "price_gpu_hour", "price_kwh")
# Grafana's built-in variables, with values that fit a 1 s scrape interval.
BUILTINS = {"$__rate_interval": "10s", "$__interval": "2s", "$__range": "1h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_METRIC = re.compile(r"\bnvidia_smi_[a-z0-9_]+\b")
LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^query_result\((.*)\)$", re.DOTALL)
DATA_TIMEOUT = 90.0


def load(name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((GRAFANA / name).read_text(encoding="utf-8"))
    return board


def all_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows; rows themselves left out."""
    found: list[dict[str, Any]] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def targets(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in all_panels(board):
        for target in panel["targets"]:
            yield f"{board['uid']}: {panel['title']} [{target['refId']}]", target


def substitute(expr: str, values: dict[str, str]) -> str:
    for builtin, value in BUILTINS.items():
        expr = expr.replace(builtin, value)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group(0))

    return _VARIABLE.sub(replace, expr)


# --- static checks ----------------------------------------------------------------------------------------------


def test_dashboards_are_generated_and_copied_into_the_chart() -> None:
    completed = subprocess.run(
        [sys.executable, str(GRAFANA / "build_dashboards.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    for name in (*DASHBOARDS, COST):
        assert (CHART / "dashboards" / name).read_bytes() == (GRAFANA / name).read_bytes()
    assert sorted(path.name for path in GRAFANA.glob("*.json")) == sorted((*DASHBOARDS, COST))


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_structure(name: str) -> None:
    board = load(name)
    assert board["tags"] == ["nvidia_gpu_exporter"]
    assert [variable["name"] for variable in board["templating"]["list"]] == list(VARIABLES)
    assert board["links"]
    assert board["links"][0]["tags"] == ["nvidia_gpu_exporter"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
    for where, target in targets(board):
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        names = {m.group(1) or m.group(2) for m in _VARIABLE.finditer(target["expr"])}
        assert names <= set(VARIABLES) | {"__rate_interval", "__interval", "__range", "1"}, (where, names)
    for panel in all_panels(board):
        refs = [target["refId"] for target in panel["targets"]]
        assert refs, panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]


def test_dashboards_cover_the_runbook_topics() -> None:
    """Per-GPU detail and fleet overview with utilization, memory, temperature, power and energy, clocks and
    throttling, ECC/XID (with the processes XIDs blame), per-process and MIG panels."""
    for name in DASHBOARDS:
        text = " ".join(target["expr"] for _, target in targets(load(name)))
        for metric in (
            "nvidia_smi_utilization_gpu_ratio",
            "nvidia_smi_memory_used_bytes",
            "nvidia_smi_temperature_gpu",
            "nvidia_smi_power_draw_watts",
            "nvidia_smi_energy_joules_total",
            "nvidia_smi_clocks_current_sm_clock_hz",
            "nvidia_smi_clocks_event_reasons_hw_thermal_slowdown",
            "nvidia_smi_ecc_errors_uncorrected_volatile_total",
            "nvidia_smi_xid_errors_total",
            "nvidia_smi_xid_occurrence_timestamp_seconds",
            "nvidia_smi_compute_app_used_memory_bytes",
            "nvidia_smi_mig_info",
            "nvidia_smi_mig_memory_used_bytes",
            "nvidia_smi_mig_sm_activity_ratio",
        ):
            assert metric in text, f"{name} has no panel on {metric}"
    assert load("nvidia-gpu-detail.json")["templating"]["list"][3]["multi"] is False
    assert load("nvidia-gpu-fleet.json")["templating"]["list"][3]["multi"] is True


def test_cost_dashboard_structure() -> None:
    """Per namespace: GPU-hours allocated and used, kWh, and a cost from the two price variables."""
    board = load(COST)
    assert board["tags"] == ["nvidia_gpu_exporter"]
    variables = board["templating"]["list"]
    assert [variable["name"] for variable in variables] == list(COST_VARIABLES)
    assert [variable["type"] for variable in variables[2:]] == ["textbox", "textbox"]
    text = " ".join(target["expr"] for _, target in targets(board))
    for needed in (
        "nvidia_smi_pod_gpu_allocated_seconds_total",
        "nvidia_smi_pod_gpu_used_seconds_total",
        "nvidia_smi_pod_energy_joules_total",
        "$price_gpu_hour",
        "$price_kwh",
        "sum by (namespace)",
    ):
        assert needed in text, needed
    for where, target in targets(board):
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        names = {m.group(1) or m.group(2) for m in _VARIABLE.finditer(target["expr"])}
        assert names <= set(COST_VARIABLES) | {"__rate_interval", "__range", "1"}, (where, names)


# --- against a real Prometheus ----------------------------------------------------------------------------------


@dataclass
class Live:
    prometheus: Server
    instance: str

    def metric_names(self) -> set[str]:
        return set(get_json(self.prometheus.url + "/api/v1/label/__name__/values")["data"])


@contextlib.contextmanager
def scraped_demo(args: list[str], workdir: Path) -> Iterator[Live]:
    """The demo backend started with ``args``, and a Prometheus in ``workdir`` that scrapes it every second, once
    its target is up."""
    handle = start_exporter(["--collect.backend=demo", *args])
    try:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [scrape_config(handle.address)],
        }
        with prometheus(config, workdir) as server:
            wait_target_up(server)
            yield Live(server, handle.address)
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    binary("prometheus")
    binary("promtool")
    # The demo is healthy by default: the Compose stack's config turns every simulated fault on, so the XID and
    # lost-GPU panels have data too (docs/demo.md, "Faults on request").
    faults = REPO / "deploy" / "compose" / "demo" / "demo.yaml"
    args = [f"--demo-config={faults}", "--collect.compute-apps", "--collect.compute-apps-mig"]
    with scraped_demo(args, tmp_path_factory.mktemp("prometheus")) as served:
        yield served


def resolve_variable(server: Server, variable: dict[str, Any], values: dict[str, str]) -> list[tuple[str, str]]:
    """(text, value) pairs of one query variable, computed as Grafana does from its Prometheus query."""
    definition = substitute(variable["query"]["query"], values)
    if match := LABEL_VALUES.match(definition):
        expr, label = match.group(1) or "", match.group(2)
        params = urllib.parse.urlencode({"match[]": expr}) if expr else ""
        answer = get_json(server.url + f"/api/v1/label/{label}/values?{params}")
        assert answer["status"] == "success", answer
        return [(value, value) for value in answer["data"]]
    match = _QUERY_RESULT.match(definition)
    assert match, definition
    answer = query(server, match.group(1))
    assert answer["status"] == "success", answer
    pattern = re.compile(variable["regex"].strip("/").replace("(?<", "(?P<"))
    pairs: list[tuple[str, str]] = []
    for sample in answer["data"]["result"]:
        labels = ", ".join(f'{key}="{value}"' for key, value in sorted(sample["metric"].items()))
        line = f"{{{labels}}} {sample['value'][1]} {int(sample['value'][0] * 1000)}"
        found = pattern.search(line)
        assert found, (pattern.pattern, line)
        pairs.append((found.group("text"), found.group("value")))
    return pairs


def variable_combinations(server: Server, board: dict[str, Any]) -> list[dict[str, str]]:
    """Every selection to evaluate: all values of single-value variables, `All` for multi-value ones."""
    choices: list[list[tuple[str, str]]] = []
    chosen: dict[str, str] = {}
    names: list[str] = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        options = resolve_variable(server, variable, chosen)
        assert options, f"{board['uid']}: variable {variable['name']} has no values"
        if variable["multi"]:
            options = [("All", variable["allValue"])]
        chosen[variable["name"]] = options[0][1]
        names.append(variable["name"])
        choices.append(options)
    return [dict(zip(names, (value for _, value in combo), strict=True)) for combo in product(*choices)]


def test_variables_resolve_like_grafana(live: Live) -> None:
    board = load("nvidia-gpu-detail.json")
    job, node, gpu = board["templating"]["list"][1:]
    assert resolve_variable(live.prometheus, job, {}) == [(JOB, JOB)]
    assert resolve_variable(live.prometheus, node, {"job": JOB}) == [(live.instance, live.instance)]
    gpus = resolve_variable(live.prometheus, gpu, {"job": JOB, "node": live.instance})
    assert sorted(text for text, _ in gpus) == ["0 NVIDIA H200", "1 NVIDIA H200"]
    assert all(re.fullmatch(r"[0-9a-f-]{36}", value) for _, value in gpus)


def test_every_query_parses_with_promtool(live: Live, tmp_path: Path) -> None:
    """Each panel and variable expression, variables substituted, as a recording rule for `promtool check rules`."""
    values = {"job": JOB, "node": live.instance, "gpu": ".*", "datasource": "prometheus"}
    expressions: list[str] = []
    for name in DASHBOARDS:
        board = load(name)
        expressions += [substitute(target["expr"], values) for _, target in targets(board)]
        for variable in board["templating"]["list"][1:]:
            definition = substitute(variable["query"]["query"], values)
            match = LABEL_VALUES.match(definition) or _QUERY_RESULT.match(definition)
            assert match, definition
            expressions.append(match.group(1))
    rules = {
        "groups": [
            {"name": "dashboards", "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(expressions)]}
        ]
    }
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    completed = subprocess.run(
        [str(binary("promtool")), "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"SUCCESS: {len(expressions)} rules found" in completed.stdout


def test_every_metric_named_in_a_panel_exists(live: Live) -> None:
    """Catches a misspelt metric even inside an `or` arm that would hide it (the legacy throttle spelling, which
    drivers before 555 use, must be the twin of a served clocks_event_reasons name). The MIG activity families
    appear from the demo's second collection on, hence the bounded polling."""
    wanted: dict[str, str] = {}
    for name in DASHBOARDS:
        for where, target in targets(load(name)):
            for metric in _METRIC.findall(target["expr"]):
                twin = metric.replace("nvidia_smi_clocks_throttle_reasons_", "nvidia_smi_clocks_event_reasons_")
                wanted.setdefault(twin, f"{where}: {metric}")
    missing: dict[str, str] = {}

    def served() -> bool:
        missing.clear()
        missing.update({metric: where for metric, where in wanted.items() if metric not in live.metric_names()})
        return not missing

    try:
        wait_until(
            served,
            "every metric of the dashboards to be scraped",
            timeout=DATA_TIMEOUT,
            interval=1.0,
            ignoring=PROBE_ERRORS,
        )
    except AssertionError:
        pytest.fail(f"metrics not served by the demo backend: {sorted(missing.values())}")
    assert len(wanted) > 50


def test_the_data_check_catches_typos_and_parse_errors(live: Live) -> None:
    """The proof below can fail: a misspelt metric returns no data, a broken expression an error."""
    assert query(live.prometheus, 'nvidia_smi_temperature_gpu{job="nvidia-gpu-exporter"}')["data"]["result"]
    assert query(live.prometheus, 'nvidia_smi_temperatur_gpu{job="nvidia-gpu-exporter"}')["data"]["result"] == []
    assert query(live.prometheus, "sum(rate(nvidia_smi_energy_joules_total[1m])")["status"] == "error"


def wait_for_data(
    ask: Callable[[str], dict[str, Any]],
    name: str,
    queries: dict[str, list[str]],
    *,
    timeout: float = DATA_TIMEOUT,
    interval: float = 1.0,
) -> None:
    """Poll until every panel target (``queries``: where -> the expressions to try, one per variable combination)
    has data for one of its expressions; fails naming the targets still without data, or the first query error (an
    error never heals, so it stops the polling)."""
    pending = dict(queries)
    failures: dict[str, str] = {}

    def all_answered() -> bool:
        for where, expressions in list(pending.items()):
            for expr in expressions:
                answer = ask(expr)
                if answer["status"] != "success":
                    failures[where] = json.dumps(answer)
                    return True
                if answer["data"]["result"]:
                    del pending[where]
                    break
        return not pending

    try:
        wait_until(
            all_answered, f"data for every panel of {name}", timeout=timeout, interval=interval, ignoring=PROBE_ERRORS
        )
    except AssertionError:
        pytest.fail(f"{name}: panels without data after {timeout:.0f}s: {sorted(pending)}")
    assert failures == {}, failures


def _answers(*results: list[Any], status: str = "success") -> Callable[[str], dict[str, Any]]:
    """A fake Prometheus whose queries answer ``results`` in turn (the last one again and again)."""
    remaining = list(results)

    def ask(_expr: str) -> dict[str, Any]:
        result = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return {"status": status, "data": {"result": result}}

    return ask


@pytest.mark.parametrize(
    ("ask", "fails"),
    [
        (_answers([], [{"value": 1}]), None),
        (_answers([]), "panels without data after"),
        (_answers([], status="error"), '"status": "error"'),
    ],
    ids=["data-at-the-second-try", "never-data", "query-error"],
)
def test_the_data_wait_fails_on_a_panel_without_data_or_a_query_error(
    ask: Callable[[str], dict[str, Any]], fails: str | None
) -> None:
    """The in-process check that the live tests' wait can fail (Prometheus is not needed for it)."""
    if fails is None:
        wait_for_data(ask, "board", {"board: panel [A]": ["up"]}, timeout=1.0, interval=0.01)
        return
    with pytest.raises((AssertionError, pytest.fail.Exception), match=fails):
        wait_for_data(ask, "board", {"board: panel [A]": ["up"]}, timeout=0.05, interval=0.01)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_returns_data(live: Live, name: str) -> None:
    board = load(name)
    combinations = variable_combinations(live.prometheus, board)
    if board["templating"]["list"][3]["multi"]:
        assert combinations == [{"job": JOB, "node": ".*", "gpu": ".*"}]
    else:
        assert len(combinations) == 2, combinations  # the demo's two GPUs
    queries = {
        where: [substitute(target["expr"], {**values, "datasource": "prometheus"}) for values in combinations]
        for where, target in targets(board)
    }
    wait_for_data(lambda expr: query(live.prometheus, expr), name, queries)
    panel_count = len(all_panels(board))
    assert panel_count >= 20, panel_count
    print(f"{name}: {panel_count} panels, {len(dict(targets(board)))} queries, all with data at {time.time():.0f}")


def test_stat_and_gauge_panels_of_the_detail_dashboard_answer_one_series_per_gpu(live: Live) -> None:
    """A gauge or stat given two series shows two values; the GPU utilization gauge once did on every GPU."""
    board = load("nvidia-gpu-detail.json")
    panels = [panel for panel in all_panels(board) if panel["type"] in ("gauge", "stat")]
    assert any(panel["title"] == "GPU utilization" for panel in panels)
    wait_target_up(live.prometheus)
    for values in variable_combinations(live.prometheus, board):
        for panel in panels:
            for target in panel["targets"]:
                answer = query(live.prometheus, substitute(target["expr"], {**values, "datasource": "prometheus"}))
                assert len(answer["data"]["result"]) <= 1, (panel["title"], values, answer["data"]["result"])


@pytest.fixture(scope="module")
def cost_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """The demo as its own Kubernetes node (docs/demo.md, "Pods"): shared GPUs, pods, GPU-seconds and energy."""
    binary("prometheus")
    args = [
        "--collect.compute-apps",
        "--collect.process-usage",
        "--kubernetes.pod-resources",
        "--kubernetes.process-pods",
    ]
    with scraped_demo(args, tmp_path_factory.mktemp("prometheus")) as served:
        yield served


def test_every_cost_panel_returns_data_against_the_demo(cost_live: Live) -> None:
    board = load(COST)
    job, gpu_hour, kwh = board["templating"]["list"][1:]
    assert resolve_variable(cost_live.prometheus, job, {}) == [(JOB, JOB)]
    values = {"job": JOB, "datasource": "prometheus", gpu_hour["name"]: gpu_hour["query"], kwh["name"]: kwh["query"]}
    queries = {where: [substitute(target["expr"], values)] for where, target in targets(board)}
    wait_for_data(lambda expr: query(cost_live.prometheus, expr), COST, queries)
    allocated = query(cost_live.prometheus, panel_expr(board, "GPU-hours allocated", values))
    assert {series["metric"]["namespace"] for series in allocated["data"]["result"]} == {
        "ml-training",
        "research",
        "serving",
    }


def panel_expr(board: dict[str, Any], title: str, values: dict[str, str]) -> str:
    """The substituted expression of the panel titled ``title``."""
    (panel,) = [panel for panel in all_panels(board) if panel["title"] == title]
    return substitute(panel["targets"][0]["expr"], values)
