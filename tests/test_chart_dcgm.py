"""The chart standing in for dcgm-exporter's (issue 27, KUBERNETES.md "In place of dcgm-exporter"): with
``dcgmExporterCompatible: true`` the pods, Services and monitors look to Prometheus and to the objects written for
dcgm-exporter as dcgm-exporter's own chart and the GPU Operator render them.

tests/fixtures/dcgm-exporter/monitors.yaml holds their ServiceMonitor and Service selectors, endpoint ports and
jobs (with their sources); the tests below render this chart and check that those select its Service and pods and
name the same job. Rendered like tests/test_chart.py (which also lints and validates the value in its matrix);
needs helm-python-sdk (.ci/steps/40-kubernetes.sh) and skips without it.
"""

from __future__ import annotations

import copy
import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from deploy_helpers import assert_render_fails, by_kind, chart_objects, one, render_chart
from harness import FIXTURES, REPO
from nvidia_gpu_exporter.config import validate
from nvidia_gpu_exporter.flags import parse_args

MONITORS = yaml.safe_load((FIXTURES / "dcgm-exporter" / "monitors.yaml").read_text(encoding="utf-8"))
COMPATIBLE: dict[str, Any] = {"dcgmExporterCompatible": True}
DCGM_SELECTOR = {
    "app.kubernetes.io/name": "dcgm-exporter",
    "app.kubernetes.io/instance": "gpu",
    "app.kubernetes.io/component": "dcgm-exporter",
}
COUNTERS = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"


def compatible(**values: Any) -> dict[str, Any]:
    return {**copy.deepcopy(COMPATIBLE), **values}


def main_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    labels: dict[str, str] = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    return labels


def service_named(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (service,) = [service for service in by_kind(objects, "Service") if service["metadata"]["name"] == name]
    found: dict[str, Any] = service
    return found


def selects(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return match_labels.items() <= labels.items()


def operator_job(monitor: dict[str, Any], service: dict[str, Any]) -> str:
    """The Prometheus Operator's `job` of a ServiceMonitor's target: the Service's jobLabel label, else its name."""
    job_label = monitor.get("jobLabel")
    job: str = service["metadata"]["labels"][job_label] if job_label else service["metadata"]["name"]
    return job


# --- what the value gives -----------------------------------------------------------------------------------------


def test_it_listens_on_9400_with_the_port_named_metrics() -> None:
    objects = chart_objects(compatible(serviceMonitor={"enabled": True}))
    main = main_container(objects)
    assert "--web.listen-address=:9400" in main["args"]
    assert main["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    service = service_named(objects, "gpu-dcgm-exporter")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}]
    assert one(objects, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"


@pytest.mark.parametrize(("profile", "served"), [("", "dcgm"), ("dcgm", "dcgm"), ("both", "both")])
def test_it_serves_the_dcgm_profile(profile: str, served: str) -> None:
    args = main_container(chart_objects(compatible(metrics={"profile": profile})))["args"]
    config = parse_args(args).config
    validate(config)
    assert config.metrics_profile.value == served
    assert config.listen_addresses == (":9400",)


def test_the_nvidia_smi_profile_cannot_stand_in_for_dcgm_exporter() -> None:
    assert_render_fails(compatible(metrics={"profile": "nvidia_smi"}), "dcgmExporterCompatible serves DCGM names")


def test_names_and_selector_labels_are_dcgm_exporters_charts() -> None:
    objects = chart_objects(compatible(serviceMonitor={"enabled": True}))
    daemonset = one(objects, "DaemonSet")
    assert daemonset["metadata"]["name"] == "gpu-dcgm-exporter"  # dcgm-exporter's fullname for release `gpu`
    assert daemonset["spec"]["selector"]["matchLabels"] == DCGM_SELECTOR
    assert selects(DCGM_SELECTOR, pod_labels(objects))
    assert pod_labels(objects)["app"] == "nvidia-dcgm-exporter", "the GPU Operator's Service selects pods by app"
    service = service_named(objects, "gpu-dcgm-exporter")
    assert service["spec"]["selector"] == DCGM_SELECTOR
    assert selects(DCGM_SELECTOR, service["metadata"]["labels"])
    assert one(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"] == DCGM_SELECTOR


def test_a_second_service_carries_the_gpu_operators_port_and_app_label() -> None:
    service = service_named(chart_objects(compatible()), "gpu-dcgm-exporter-gpu-operator")
    assert service["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
    assert service["spec"]["selector"] == DCGM_SELECTOR
    assert service["spec"]["ports"] == [
        {"name": "gpu-metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_by_default_the_names_and_ports_stay_the_charts_own() -> None:
    objects = chart_objects({"serviceMonitor": {"enabled": True}})
    assert [service["metadata"]["name"] for service in by_kind(objects, "Service")] == ["gpu-nvidia-gpu-exporter"]
    assert "app" not in pod_labels(objects)
    assert main_container(objects)["ports"][0]["name"] == "http"


def test_the_service_monitor_scrapes_as_dcgm_exporters_chart() -> None:
    """No jobLabel (the job is the Service's name), honorLabels false, and no relabeling of `instance`."""
    relabel = {"targetLabel": "cluster", "replacement": "gpu-a"}
    objects = chart_objects(compatible(serviceMonitor={"enabled": True, "relabelings": [relabel]}))
    spec = one(objects, "ServiceMonitor")["spec"]
    assert "jobLabel" not in spec
    (endpoint,) = spec["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is False
    assert endpoint["relabelings"] == [relabel]


def test_pod_labels_arrive_as_exported_labels() -> None:
    """With pod attribution on, the series' pod, namespace and container meet the target's and become exported_*
    (honorLabels false), as on dcgm-exporter's chart; nothing drops the target's own."""
    values = compatible(
        kubernetes={"podResources": {"enabled": True, "podLabels": True}}, serviceMonitor={"enabled": True}
    )
    (endpoint,) = one(chart_objects(values), "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["honorLabels"] is False
    assert "relabelings" not in endpoint
    values = compatible(kubernetes={"podResources": {"enabled": True, "podLabels": True}}, podMonitor={"enabled": True})
    (endpoint,) = one(chart_objects(values), "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is False
    assert endpoint["port"] == "metrics"


@pytest.mark.parametrize(
    ("values", "readiness_path"),
    [({}, "/health"), ({"readiness": {"requireCollection": True}}, "/-/ready")],
)
def test_the_probes_ask_health_on_the_metrics_port(values: dict[str, Any], readiness_path: str) -> None:
    main = main_container(chart_objects(compatible(**values)))
    assert main["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert main["readinessProbe"]["httpGet"] == {"path": readiness_path, "port": "metrics"}
    assert main["livenessProbe"]["periodSeconds"] == 30, "the probe's timing stays the values'"


def test_the_counters_configmap_is_mounted_and_read() -> None:
    objects = chart_objects(compatible(dcgm={"counters": COUNTERS}))
    configmap = one(objects, "ConfigMap")
    assert configmap["data"] == {"counters.csv": COUNTERS}
    config = parse_args(main_container(objects)["args"]).config
    assert config.dcgm_collectors == "/etc/nvidia-gpu-exporter/dcgm/counters.csv"
    volumes = one(objects, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    assert {"name": configmap["metadata"]["name"]} == next(
        {"name": volume["configMap"]["name"]} for volume in volumes if volume["name"] == "dcgm-counters"
    )


def test_the_exporter_down_rule_and_the_notes_name_the_job_the_monitor_gives() -> None:
    rendered = render_chart(compatible(serviceMonitor={"enabled": True}, prometheusRule={"enabled": True}))
    rules = yaml.safe_load(rendered["nvidia-gpu-exporter/templates/prometheusrule.yaml"])
    expressions = [rule["expr"] for group in rules["spec"]["groups"] for rule in group["rules"]]
    assert 'up{job="gpu-dcgm-exporter"} == 0' in expressions
    notes = rendered["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert 'through ServiceMonitor gpu-dcgm-exporter (job "gpu-dcgm-exporter")' in notes
    assert "port-forward ds/gpu-dcgm-exporter 9400" in notes
    helm_test = yaml.safe_load(rendered["nvidia-gpu-exporter/templates/tests/test-connection.yaml"])
    assert "http://gpu-dcgm-exporter:9400/metrics" in helm_test["spec"]["containers"][0]["command"][-1]


def test_fleet_mode_cannot_stand_in_for_dcgm_exporter() -> None:
    assert_render_fails(
        compatible(fleet={"enabled": True}), "dcgmExporterCompatible belongs to the node-local DaemonSet"
    )


@pytest.mark.parametrize("value", ["yes", 1])
def test_the_schema_wants_a_boolean(value: object) -> None:
    assert_render_fails({"dcgmExporterCompatible": value}, "dcgmExporterCompatible")


# --- selected by their monitors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "release"),
    [
        pytest.param("dcgm-exporter-chart", "dcgm-exporter", id="dcgm-exporter-chart"),
        pytest.param("gpu-operator", "nvidia-dcgm-exporter", id="gpu-operator"),
    ],
)
def test_their_service_monitor_and_service_select_ours(source: str, release: str) -> None:
    """Their ServiceMonitor finds one of our Services, with the port it scrapes, and names the job theirs does;
    their Service selects our pods and reaches the exporter's port. Installed under the release name the source
    uses, our own ServiceMonitor names that job too."""
    theirs = MONITORS[source]
    namespace = theirs["namespace"]
    objects = chart_objects(compatible(serviceMonitor={"enabled": True}), name=release, namespace=namespace)
    monitor = theirs["serviceMonitor"]
    assert namespace in monitor["namespaceSelector"]["matchNames"]
    selected = [
        service
        for service in by_kind(objects, "Service")
        if selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
        and service["metadata"]["namespace"] == namespace
    ]
    assert len(selected) == 1, [service["metadata"]["name"] for service in selected]
    (service,) = selected
    (endpoint,) = monitor["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert selects(service["spec"]["selector"], pod_labels(objects))
    assert operator_job(monitor, service) == theirs["job"]
    # Their Service routes to our pods and to the port the exporter listens on.
    assert selects(theirs["service"]["selector"], pod_labels(objects))
    container_ports = {(port["name"], port["containerPort"]) for port in main_container(objects)["ports"]}
    for port in theirs["service"]["ports"]:
        assert port["targetPort"] in {number for _, number in container_ports} | {name for name, _ in container_ports}
    ours = one(objects, "ServiceMonitor")["spec"]
    our_service = next(
        service
        for service in by_kind(objects, "Service")
        if selects(ours["selector"]["matchLabels"], service["metadata"]["labels"])
    )
    if source == "dcgm-exporter-chart":
        assert operator_job(ours, our_service) == theirs["job"]
        assert our_service["metadata"]["name"] == theirs["service"]["name"]
    assert ours["endpoints"][0]["honorLabels"] is endpoint["honorLabels"]


# --- the documented command ---------------------------------------------------------------------------------------


def set_values(command: str) -> tuple[str, dict[str, Any]]:
    """The release name and the values of a `helm upgrade --install` command's `--set` options."""
    words = shlex.split(command.replace("\\\n", " "))
    release = words[words.index("--install") + 1]
    values: dict[str, Any] = {}
    for option, assignment in itertools.pairwise(words):
        if option != "--set":
            continue
        path, _, text = assignment.partition("=")
        *parents, leaf = path.split(".")
        target = values
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = yaml.safe_load(text)
    return release, values


def test_the_migration_guides_command_installs_the_stand_in() -> None:
    """docs/migrating-from-dcgm-exporter.md's command renders dcgm-exporter's names and passes the profile once."""
    guide = (REPO / "docs" / "migrating-from-dcgm-exporter.md").read_text(encoding="utf-8")
    (command,) = [
        block for block in re.findall(r"```sh\n(.*?)```", guide, re.DOTALL) if "dcgmExporterCompatible" in block
    ]
    release, values = set_values(command)
    objects = chart_objects(values, name=release)
    assert one(objects, "DaemonSet")["metadata"]["name"] == MONITORS["dcgm-exporter-chart"]["service"]["name"]
    args = main_container(objects)["args"]
    assert [arg for arg in args if arg.startswith("--metrics.profile")] == ["--metrics.profile=dcgm"]
    assert parse_args(args).config.dcgm_collectors.endswith("/metrics")


# --- the real exporter ----------------------------------------------------------------------------------------------


def test_the_rendered_pod_answers_its_probes_and_serves_dcgm_names(exporter: StartExporter, tmp_path: Path) -> None:
    """The rendered args start the real exporter (on a free port, the demo backend): the probes' routes answer 200
    and the metrics are dcgm-exporter's."""
    objects = chart_objects(compatible(dcgm={"counters": COUNTERS}))
    counters = tmp_path / "counters.csv"
    counters.write_text(one(objects, "ConfigMap")["data"]["counters.csv"], encoding="utf-8")
    main = main_container(objects)
    args = [
        f"--dcgm.collectors={counters}" if arg.startswith("--dcgm.collectors=") else arg
        for arg in main["args"]
        if not arg.startswith(("--web.listen-address=", "--log.", "--nvidia-smi-command="))
    ]
    handle = exporter(*args, "--collect.backend=demo")
    for probe in ("livenessProbe", "readinessProbe"):
        assert handle.get(main[probe]["httpGet"]["path"]).status == 200, probe
    assert "DCGM_FI_DEV_GPU_TEMP{" in handle.scrape()
