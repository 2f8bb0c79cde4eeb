"""The Kubernetes GPU runbook's DCGM-named checks against ``--metrics.profile=dcgm``, end to end (issue 12).

One loop for the module: the fake nvidia-smi (a conformance capture of an H100, whose query records every field
NVIDIA's dashboard 12239 reads, and a config file whose temperature override the test rewrites at run time) ->
the exporter under the DCGM profile -> a real Prometheus with the runbook's alert (a copy whose `for:` is 2 s;
promtool tests the verbatim 5 m rule in tests/test_dcgm_rules.py) -> a real Alertmanager -> a webhook receiver.
The same Prometheus scrapes a second exporter, the nvml backend on the fake libnvidia-ml (an H200 with GPM), the
one source of the profiling counters (DCGM_FI_PROF_*, from NVML GPM).

- Dashboard 12239, unmodified: its variables are resolved as Grafana does (label_values, then `All` as
  Grafana's regex of every value) and every panel's query must return data. Every family a panel reads is in
  the exporter's own family table (docs/dcgm.md); the tensor-core panel (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) gets
  its data from the nvml exporter alone, as the exec backend has no GPM.
- The runbook's `GPUHighTemperature` fires for the hot GPU with dcgm-exporter's labels, and resolves; so does
  the dual-scheme pack's `NvidiaGpuTemperatureHigh`, with the chart's labels (`uuid` cut from `UUID`).

Needs ../shared (dcgm-exporter's dashboard, the conformance capture) and Debian's prometheus and
prometheus-alertmanager in $PROMETHEUS_BIN_DIR (.ci/steps/40-kubernetes.sh); skips with a clear message without.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_helpers import (
    JOB,
    PROBE_ERRORS,
    RULE_TESTS,
    RULES_FILE,
    Server,
    Webhook,
    alertmanager,
    binary,
    get_json,
    prometheus,
    query,
    scrape_config,
    wait_target_up,
    webhook_receiver,
)
from harness import SHARED, Exporter, fake_smi_command, start_exporter
from nvidia_gpu_exporter.exposition.dcgm import DCGM_FAMILIES
from nvml_fixtures import ControlFile, FakeNvmlLibrary
from polling import wait_until
from test_dashboards import LABEL_VALUES, all_panels, substitute
from test_sre_loop import alertmanager_config, fast_rules, write_fake_config

DASHBOARD = SHARED / "dcgm" / "dcgm-exporter-dashboard.json"
CAPTURE = SHARED / "conformance" / "captures" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
RUNBOOK_RULES = RULE_TESTS / "runbook-rules.yml"
DUAL_RULES = RULES_FILE.parent / "nvidia-gpu-exporter-dual-scheme-rules.yml"
ALERT = "GPUHighTemperature"
DUAL_ALERT = "NvidiaGpuTemperatureHigh"
NODE = "gpu-node-1"
NVML_JOB = "nvml-gpm"
TENSOR_PANEL = "Tensor Core Utilization"
_DCGM_NAME = re.compile(r"\bDCGM_[A-Z0-9_]+\b")
# The characters Grafana escapes in a value of a multi-value variable used in a Prometheus regex.
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")
DATA_TIMEOUT = 60.0


def shared_file(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is absent: the shared reference data (../shared) is not beside this checkout")
    return path


def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(shared_file(DASHBOARD).read_text(encoding="utf-8"))
    return board


def panel_queries(board: dict[str, Any]) -> dict[str, list[str]]:
    """Panel title -> its PromQL targets, rows' nested panels included."""
    return {panel["title"]: [target["expr"] for target in panel.get("targets", [])] for panel in all_panels(board)}


def runbook_rules() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(RUNBOOK_RULES.read_text(encoding="utf-8"))
    return document


def grafana_all(values: list[str]) -> str:
    """What Grafana writes for `All` of a multi-value variable without allValue: a regex of every value."""
    escaped = [_REGEX_SPECIAL.sub(lambda match: "\\\\" + match.group(0), value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def resolve_variables(server: Server, board: dict[str, Any]) -> dict[str, str]:
    """Each query variable in order, from its label_values() query, as its `All` selection."""
    chosen: dict[str, str] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(substitute(variable["query"], chosen))
        assert match, variable["query"]
        expr, label = match.group(1) or "", match.group(2)
        params = urllib.parse.urlencode({"match[]": expr}) if expr else ""
        answer = get_json(server.url + f"/api/v1/label/{label}/values?{params}")
        assert answer["status"] == "success", (variable["name"], answer)
        assert answer["data"], (variable["name"], answer)
        assert (variable["multi"], variable["includeAll"], variable["allValue"]) == (True, True, None), variable
        chosen[variable["name"]] = grafana_all(answer["data"])
    return chosen


@dataclass
class Loop:
    exporter: Exporter
    prometheus: Server
    hook: Webhook
    fake_config: Path
    nvml: Exporter  # the nvml backend on the fake libnvidia-ml


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, fake_nvml_library: FakeNvmlLibrary) -> Iterator[Loop]:
    shared_file(DASHBOARD)
    capture = shared_file(CAPTURE)
    binary("prometheus")
    binary("prometheus-alertmanager", "alertmanager")
    workdir = tmp_path_factory.mktemp("dcgm-runbook")
    fake_config = workdir / "fake-smi.yml"
    write_fake_config(fake_config, 50)
    quiet_log = workdir / "kmsg"  # this machine's own kernel log must not add XIDs
    quiet_log.write_text("")
    control = ControlFile(workdir / "fake-nvml-control")
    control.send("gpmdev 0 45.5 12.5 30")  # percent; the fake reads it at nvmlInit
    with webhook_receiver() as hook:
        handle = start_exporter(
            [
                f"--nvidia-smi-command={fake_smi_command(capture, '--config', str(fake_config))}",
                "--metrics.profile=dcgm",
                "--dcgm.compatibility=4.8",  # dashboard 12239 and the runbook query 4.8's names
                "--collect.timeout=20s",
                f"--collect.kernel-log={quiet_log}",
            ],
            env={"NODE_NAME": NODE},
        )
        with ExitStack() as stack:
            stack.callback(handle.stop)
            nvml = start_exporter(
                [
                    "--collect.backend=nvml",
                    "--metrics.profile=dcgm",
                    "--dcgm.compatibility=4.8",
                    "--collect.xid-source=nvml",
                    f"--collect.kernel-log={quiet_log}",
                ],
                env={"NODE_NAME": NODE, **fake_nvml_library.env("h200", control=control.path)},
            )
            stack.callback(nvml.stop)
            am = stack.enter_context(alertmanager(alertmanager_config(hook.url), workdir / "alertmanager"))
            config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am.port}"]}]}]},
                "rule_files": ["runbook.yml", "dual.yml"],
                "scrape_configs": [scrape_config(handle.address), scrape_config(nvml.address, job=NVML_JOB)],
            }
            rule_files = {"runbook.yml": fast_rules(RUNBOOK_RULES)[0], "dual.yml": fast_rules(DUAL_RULES)[0]}
            server = stack.enter_context(prometheus(config, workdir / "prometheus", rule_files))
            wait_target_up(server)
            wait_target_up(server, NVML_JOB)
            # A target is up before its first collection is in: wait for both GPUs' series.
            wait_until(
                lambda: len(query(server, "count by (job) (DCGM_FI_DEV_GPU_TEMP)")["data"]["result"]) == 2,
                "both exporters' DCGM series in Prometheus",
                timeout=DATA_TIMEOUT,
                interval=0.5,
                ignoring=PROBE_ERRORS,
            )
            yield Loop(handle, server, hook, fake_config, nvml)


def test_every_panel_of_dashboard_12239_returns_data(loop: Loop) -> None:
    board = dashboard()
    values = resolve_variables(loop.prometheus, board)
    assert values["instance"] == grafana_all(sorted([loop.exporter.address, loop.nvml.address]))
    assert values["gpu"] == "0"
    queries = panel_queries(board)
    assert len(queries) == 8
    offered = {family.name for family in DCGM_FAMILIES}
    not_offered = {
        title for title, exprs in queries.items() if any(set(_DCGM_NAME.findall(expr)) - offered for expr in exprs)
    }
    assert not_offered == set()  # the profiling counter too, from NVML GPM on the nvml backend (docs/dcgm.md)
    assert queries[TENSOR_PANEL] == ['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}']
    pending = dict(queries)
    errors: dict[str, Any] = {}

    def all_answered() -> bool:
        for title, exprs in list(pending.items()):
            answers = [query(loop.prometheus, substitute(expr, values)) for expr in exprs]
            failed = [answer for answer in answers if answer["status"] != "success"]
            if failed:
                errors[title] = failed
                return True  # a query error never heals: stop polling and report it
            if all(answer["data"]["result"] for answer in answers):
                del pending[title]
        return not pending

    wait_until(all_answered, "data for every panel", timeout=DATA_TIMEOUT, interval=1.0, ignoring=PROBE_ERRORS)
    assert errors == {}
    assert pending == {}

    # The tensor-core panel's data is the nvml exporter's GPM ratio (12.5 % -> 0.125); the exec backend has none.
    def tensor() -> list[tuple[str, str]]:
        answer = query(loop.prometheus, substitute(queries[TENSOR_PANEL][0], values))
        return [(series["metric"]["job"], series["value"][1]) for series in answer["data"]["result"]]

    wait_until(
        tensor,
        "the tensor-core panel's one series",
        until=lambda found: found == [(NVML_JOB, "0.125")],
        timeout=DATA_TIMEOUT,
        interval=0.5,
        ignoring=PROBE_ERRORS,
    )
    # The substituted query really filters: another GPU selects nothing.
    other = {**values, "gpu": "7"}
    assert query(loop.prometheus, substitute(queries["GPU Temperature"][0], other))["data"]["result"] == []


def resolved_matcher(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda body: body["status"] == "resolved" and body["commonLabels"].get("alertname") == name


def test_the_runbooks_alert_and_the_dual_scheme_one_fire_and_resolve_through_alertmanager(loop: Loop) -> None:
    (rule,) = runbook_rules()["groups"][0]["rules"]
    assert rule == {"alert": ALERT, "expr": "DCGM_FI_DEV_GPU_TEMP > 85", "for": "5m"}
    write_fake_config(loop.fake_config, 95)
    firing = loop.hook.wait_for(
        "the firing GPUHighTemperature",
        lambda body: body["status"] == "firing" and body["commonLabels"].get("alertname") == ALERT,
        timeout=90,
    )
    (alert,) = firing["alerts"]
    labels = alert["labels"]
    assert labels == {
        "alertname": ALERT,
        "job": JOB,
        "instance": loop.exporter.address,
        "gpu": "0",
        "UUID": labels["UUID"],
        "pci_bus_id": "00000000:00:09.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "hostname": NODE,
        "DCGM_FI_DRIVER_VERSION": "590.48.01",
    }
    assert labels["UUID"].startswith("GPU-")
    dual = loop.hook.wait_for(
        "the dual-scheme pack's firing NvidiaGpuTemperatureHigh",
        lambda body: body["status"] == "firing" and body["commonLabels"].get("alertname") == DUAL_ALERT,
        timeout=60,
    )
    uuid = labels["UUID"].removeprefix("GPU-")
    chart_labels = {"alertname": DUAL_ALERT, "severity": "warning", "job": JOB, "instance": labels["instance"]}
    assert [alert["labels"] for alert in dual["alerts"]] == [{**chart_labels, "uuid": uuid}]
    write_fake_config(loop.fake_config, 50)
    for name, expected in ((ALERT, labels), (DUAL_ALERT, {**chart_labels, "uuid": uuid})):
        resolved = loop.hook.wait_for(f"the resolved {name}", resolved_matcher(name), timeout=60)
        assert [alert["labels"] for alert in resolved["alerts"]] == [expected]
    seen = {alert["labels"]["alertname"] for body in loop.hook.received for alert in body["alerts"]}
    assert seen == {ALERT, DUAL_ALERT}
