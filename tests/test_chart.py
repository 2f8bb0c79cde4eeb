"""The Helm chart: render and strict lint over a matrix of values, schema validation of every rendered object
(kubernetes-validate --strict for several Kubernetes versions, the Prometheus operator's CRD models), the
restricted Pod Security Standard, and the rendered flags against the real exporter.

Needs helm-python-sdk, kubernetes-validate and cloudcoil-models-prometheus-operator (installed by
.ci/steps/40-kubernetes.sh); each test skips with a clear message where its package is missing.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from deploy_helpers import (
    ATTRIBUTION_GIVES_UP,
    CHART,
    GRAFANA,
    TEST_IMAGE_REPOSITORY,
    assert_lints_strictly,
    assert_render_fails,
    assert_valid_objects,
    by_kind,
    chart_objects,
    helm_chart_module,
    one,
    render_chart,
    requests_a_gpu,
    restricted_violations,
    skip_reason,
    with_test_image,
)
from harness import MIG_FIXTURE, REPO, fake_smi_command
from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.config import validate
from nvidia_gpu_exporter.doctor import npd
from nvidia_gpu_exporter.flags import parse_args

DCGM_COUNTERS = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n"
# The value matrix of issue 6: each case renders, lints strictly with no finding and validates.
MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "service-monitor": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus"}}},
    "service-monitor-tls": {
        "serviceMonitor": {
            "enabled": True,
            "scheme": "https",
            "scrapeTimeout": "10s",
            "tlsConfig": {"insecureSkipVerify": True},
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "instanceFromNodeName": False,
            "relabelings": [{"targetLabel": "cluster", "replacement": "gpu-a"}],
            "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "nvidia_smi_pci_.*", "action": "drop"}],
        }
    },
    "pod-monitor": {"podMonitor": {"enabled": True, "scrapeTimeout": "5s"}, "service": {"enabled": False}},
    "rules": {"prometheusRule": {"enabled": True, "additionalLabels": {"role": "alert-rules"}}},
    "rules-all-on-custom": {
        "prometheusRule": {
            "enabled": True,
            "swThermalSlowdown": {"enabled": True},
            "temperatureHigh": {"thresholdCelsius": 80, "for": "2m", "severity": "critical"},
            "xidCritical": {"codes": [79, 48]},
            "xidWarning": {"codes": [94, 13]},
            "exporterDown": {"job": "gpu-nodes"},
        }
    },
    "dashboards": {"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GPUs"}}},
    "readiness": {"readiness": {"requireCollection": True, "maxStaleness": "2m", "minGpus": "pci"}},
    "host-pid-compute-apps": {"hostPID": True, "computeApps": {"enabled": True}},
    "host-network": {"hostNetwork": True, "hostPort": {"enabled": True, "port": 19835}},
    "npd-plugin": {
        "nodeProblemDetector": {
            "enabled": True,
            "url": "https://127.0.0.1:9835/-/health",
            "pluginArgs": ["--username=npd", "--password-file=/etc/npd/password", "--insecure-skip-verify"],
        }
    },
    "custom-args": {
        "backend": "demo",
        "port": 9900,
        "telemetryPath": "/gpu/metrics",
        "nvidiaSmiCommand": "/usr/local/bin/nvidia-smi",
        "queryFieldNames": ["AUTO"],
        "queryFieldNamesExclude": ["pci.*", "vbios_version"],
        "log": {"level": "debug", "format": "json"},
        "extraArgs": ["--collect.interval=15s", "--collect.timeout=5s"],
        "extraEnv": [{"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}],
    },
    "scheduling-and-naming": {
        "fullnameOverride": "gpu-exporter",
        "runtimeClassName": "",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Exists"}]}]
                }
            }
        },
        "priorityClassName": "system-node-critical",
        "podLabels": {"team": "ml-platform", "app.kubernetes.io/name": "ignored"},
        "podAnnotations": {"example.com/owner": "sre"},
        "imagePullSecrets": [{"name": "registry"}],
        "image": {"repository": "registry.example.com/nvidia-gpu-exporter", "tag": "0.1.0", "pullPolicy": "Always"},
        "updateStrategy": {"type": "OnDelete"},
        "revisionHistoryLimit": 0,
        "service": {"type": "NodePort", "nodePort": 30935, "annotations": {"example.com/x": "y"}},
        "serviceAccount": {"create": False, "name": "gpu-exporter"},
        "livenessProbe": None,
        "readinessProbe": None,
        "resources": {},
    },
    # null removes a default (Helm semantics): no security contexts, no node selector, no probes.
    "nulls": {"securityContext": None, "podSecurityContext": None, "nodeSelector": None, "livenessProbe": None},
    "everything": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
        "computeApps": {"enabled": True},
        "hostPID": True,
    },
    # Kubernetes attribution and the doctor (issue 7): GPU -> pod needs the kubelet's socket (hostPath, uid 0),
    # process -> pod needs hostPID; the doctor's RBAC alone keeps the restricted level.
    "attribution": {"kubernetes": {"podResources": {"enabled": True}}},
    "attribution-custom": {
        "kubernetes": {
            "podResources": {
                "enabled": True,
                "socketPath": "/var/lib/k0s/kubelet/pod-resources/kubelet.sock",
                "timeout": "500ms",
                "cache": "0s",
                "resourceNames": ["nvidia.com/gpu", "example.com/renamed-gpu*"],
                "podLabels": True,
            }
        },
        "securityContext": None,  # null removes the default; attribution still gets uid 0
    },
    "process-pods": {"kubernetes": {"processPods": {"enabled": True}}},
    # Shared GPUs' pods named from the API server (issue 29): list on pods, the token, $NODE_NAME.
    "pod-metadata": {
        "kubernetes": {"processPods": {"enabled": True, "podMetadata": {"enabled": True, "refresh": "1m"}}}
    },
    "doctor-rbac": {"doctor": {"rbac": {"create": True}}},
    "attribution-everything": {
        "kubernetes": {"podResources": {"enabled": True, "podLabels": True}, "processPods": {"enabled": True}},
        "doctor": {"rbac": {"create": True}},
        "backend": "nvml",
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "extraEnv": [{"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"}, {"name": "NODE_NAME", "value": "gpu-1"}],
    },
    "kernel-log": {"kernelLog": {"enabled": True}},
    "kernel-log-file": {"kernelLog": {"enabled": True, "hostPath": "/var/log/kern.log", "type": "File"}},
    # A dcgm-exporter replacement (issue 12): its port, its names, its /health and its counters file.
    "dcgm-exporter-replacement": {
        "metrics": {"profile": "dcgm"},
        "port": 9400,
        "service": {"port": 9400},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}},
        "dcgm": {"counters": DCGM_COUNTERS},
        "serviceMonitor": {"enabled": True},
    },
    "dcgm-counters-configmap": {
        "metrics": {"profile": "both"},
        "dcgm": {"countersConfigMap": {"name": "exporter-metrics-config-map"}},
        "kubernetes": {"podResources": {"enabled": True, "podLabels": True}},
        "podMonitor": {"enabled": True},
        "service": {"enabled": False},
    },
    # Standing in for dcgm-exporter's chart and the GPU Operator's (issue 27, tests/test_chart_dcgm.py).
    "dcgm-exporter-compatible": {
        "dcgmExporterCompatible": True,
        "dcgm": {"counters": DCGM_COUNTERS},
        "serviceMonitor": {"enabled": True, "relabelings": [{"targetLabel": "cluster", "replacement": "gpu-a"}]},
        "prometheusRule": {"enabled": True},
    },
    "dcgm-exporter-compatible-pod-labels": {
        "dcgmExporterCompatible": True,
        "metrics": {"profile": "both"},
        "kubernetes": {"podResources": {"enabled": True, "podLabels": True}},
        "readiness": {"requireCollection": True},
        "podMonitor": {"enabled": True},
    },
}
# Cases whose exporter pods do not meet the restricted Pod Security Standard, by design.
NOT_RESTRICTED_CASES = {
    "host-pid-compute-apps",
    "host-network",
    "everything",
    "nulls",
    "attribution",
    "attribution-custom",
    "process-pods",
    "pod-metadata",
    "attribution-everything",
    "kernel-log",
    "kernel-log-file",
    "dcgm-counters-configmap",
    "dcgm-exporter-compatible-pod-labels",
}
ATTRIBUTION_FLAGS = [
    "--kubernetes.pod-resources",
    "--kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
    "--kubernetes.pod-resources-timeout=2s",
    "--kubernetes.pod-resources-cache=5s",
    "--kubernetes.resource-names=nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-*",
]
READ_ONLY_VERBS = {"get", "list", "watch"}


def pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs: list[tuple[str, dict[str, Any]]] = []
    for document in objects:
        if document["kind"] == "DaemonSet":
            specs.append((document["metadata"]["name"], document["spec"]["template"]["spec"]))
        elif document["kind"] == "Pod":
            specs.append((document["metadata"]["name"], document["spec"]))
    return specs


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def assert_lint_reports(values: dict[str, Any]) -> None:
    """A strict lint of ``values`` reports the schema violation too."""
    report = helm_chart_module().lint(str(CHART), with_test_image(values), strict=True)
    assert report["errors"] or report["messages"], "lint should report the schema violation too"


# --- the matrix -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_chart_lints_strictly_without_findings(case: str) -> None:
    assert_lints_strictly(MATRIX[case])


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_rendered_objects_validate_strictly(case: str) -> None:
    objects = chart_objects(copy.deepcopy(MATRIX[case]))
    assert objects
    assert_valid_objects(objects)


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_pod_security_and_gpu_access(case: str) -> None:
    objects = chart_objects(copy.deepcopy(MATRIX[case]))
    specs = pod_specs(objects)
    assert {name for name, _ in specs} >= {next(iter(by_kind(objects, "DaemonSet")))["metadata"]["name"]}
    for name, spec in specs:
        assert not requests_a_gpu(spec), f"{name} requests a GPU: it would take it away from the workloads"
        problems = restricted_violations(spec)
        if case in NOT_RESTRICTED_CASES and spec["containers"][0]["name"] != "wget":
            assert problems, f"{name}: the checker should see what case {case} gives up"
        else:
            assert problems == [], f"{name} breaks the restricted Pod Security Standard: {problems}"
    env = {entry["name"]: entry.get("value") for entry in container(objects)["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_defaults_render_the_documented_objects() -> None:
    objects = chart_objects({})
    assert sorted(document["kind"] for document in objects) == ["DaemonSet", "Pod", "Service", "ServiceAccount"]
    daemonset = one(objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["automountServiceAccountToken"] is False
    assert "hostPID" not in spec
    assert "hostNetwork" not in spec
    main = container(objects)
    assert main["image"] == f"{TEST_IMAGE_REPOSITORY}:{__version__}"
    assert main["args"] == [
        "--web.listen-address=:9835",
        "--web.telemetry-path=/metrics",
        "--nvidia-smi-command=nvidia-smi",
        "--query-field-names=AUTO",
        "--log.level=info",
        "--log.format=logfmt",
    ]
    assert main["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "http"}
    assert main["ports"] == [{"name": "http", "containerPort": 9835, "protocol": "TCP"}]
    context = main["securityContext"]
    assert context["runAsUser"] == 65534
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in main["volumeMounts"]
    assert "nvidia.com/gpu" not in json.dumps(main.get("resources", {}))
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "nvidia-gpu-exporter", "app.kubernetes.io/instance": "gpu"}
    service = one(objects, "Service")
    assert service["spec"]["selector"] == selector
    test_pod = one(objects, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert not set(selector.items()) <= set(test_pod["metadata"]["labels"].items())
    assert "http://gpu-nvidia-gpu-exporter:9835/metrics" in test_pod["spec"]["containers"][0]["command"][-1]


def test_chart_version_follows_the_package() -> None:
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart_yaml["appVersion"] == __version__
    major, minor, patch = (int(part) for part in __version__.split("."))
    assert chart_yaml["version"] == f"{major + 1}.{minor}.{patch}"  # the Go chart's scheme: major one ahead
    assert chart_yaml["name"] == "nvidia-gpu-exporter"


def test_a_chart_from_the_checkout_without_an_image_says_which_value_to_set() -> None:
    chart_module = helm_chart_module()
    errors = pytest.importorskip("helm_python.errors", reason=skip_reason("helm-python-sdk"))
    with chart_module.Chart.load(CHART) as chart, pytest.raises(errors.HelmError) as raised:
        chart.render({}, name="gpu", namespace="monitoring")
    assert "image.repository is empty" in str(raised.value)


def test_custom_values_reach_the_pod() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["custom-args"]))
    main = container(objects)
    assert main["args"] == [
        "--web.listen-address=:9900",
        "--web.telemetry-path=/gpu/metrics",
        "--collect.backend=demo",
        "--nvidia-smi-command=/usr/local/bin/nvidia-smi",
        "--query-field-names=AUTO",
        "--query-field-names-exclude=pci.*,vbios_version",
        "--log.level=debug",
        "--log.format=json",
        "--collect.interval=15s",
        "--collect.timeout=5s",
    ]
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in main["env"]
    assert main["ports"][0]["containerPort"] == 9900


def test_host_namespaces_and_compute_apps() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["host-pid-compute-apps"]))
    assert one(objects, "DaemonSet")["spec"]["template"]["spec"]["hostPID"] is True
    assert "--collect.compute-apps" in container(objects)["args"]
    objects = chart_objects(copy.deepcopy(MATRIX["host-network"]))
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert container(objects)["ports"][0]["hostPort"] == 19835


def test_scheduling_naming_and_optional_fields() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["scheduling-and-naming"]))
    daemonset = one(objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["name"] == "gpu-exporter"
    assert "runtimeClassName" not in spec
    assert spec["serviceAccountName"] == "gpu-exporter"
    assert not by_kind(objects, "ServiceAccount")
    assert daemonset["spec"]["revisionHistoryLimit"] == 0
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "ml-platform"
    assert labels["app.kubernetes.io/name"] == "nvidia-gpu-exporter", "the selector labels must win"
    main = container(objects)
    assert "livenessProbe" not in main
    assert "readinessProbe" not in main
    assert main["image"] == "registry.example.com/nvidia-gpu-exporter:0.1.0"
    assert one(objects, "Service")["spec"]["ports"][0]["nodePort"] == 30935


def test_monitors_select_the_exporter_and_name_the_job() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["service-monitor"]))
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # The job label becomes the Service's app.kubernetes.io/name: the NvidiaGpuExporterDown rule selects it.
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "nvidia-gpu-exporter"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance", "action": "replace"} in (
        endpoint["relabelings"]
    )
    objects = chart_objects(copy.deepcopy(MATRIX["pod-monitor"]))
    pod_monitor = one(objects, "PodMonitor")
    assert not by_kind(objects, "Service")
    pod_labels = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["scrapeTimeout"] == "5s"


def test_dashboards_configmap_ships_the_dashboards() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["dashboards"]))
    configmap = one(objects, "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    shipped = {path.name: path.read_text(encoding="utf-8") for path in sorted(GRAFANA.glob("*.json"))}
    assert (
        set(configmap["data"])
        == set(shipped)
        == {
            "nvidia-gpu-detail.json",
            "nvidia-gpu-fleet.json",
            "nvidia-gpu-cost.json",
        }
    )
    for name, text in shipped.items():
        assert json.loads(configmap["data"][name]) == json.loads(text), name
        assert (CHART / "dashboards" / name).read_text(encoding="utf-8") == text, f"chart copy of {name} differs"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": 1}, "bogus"),
        ({"port": 70000}, "port"),
        ({"telemetryPath": "/metrics/"}, "telemetryPath"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"service": {"type": "ExternalName"}}, "type"),
        ({"log": {"level": "verbose"}}, "level"),
        ({"backend": "dcgm"}, "backend"),
        ({"serviceMonitor": {"interval": "15 seconds"}}, "interval"),
        ({"prometheusRule": {"temperatureHigh": {"thresholdCelsius": 0}}}, "thresholdCelsius"),
        ({"prometheusRule": {"temperatureHigh": {"treshold": 80}}}, "treshold"),
        ({"prometheusRule": {"collectionStale": {"thresholdSeconds": 0}}}, "thresholdSeconds"),
        ({"hostPID": "yes"}, "hostPID"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)
    assert_lint_reports(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}, "not both"),
        ({"serviceMonitor": {"enabled": True}, "service": {"enabled": False}}, "needs service.enabled"),
        (
            {"prometheusRule": {"enabled": True, "xidCritical": {"codes": [79, 94]}}},
            "XID 94 is in both",
        ),
    ],
)
def test_contradictory_values_fail_the_render(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


def test_the_demo_backend_runs_without_the_nvidia_runtime() -> None:
    """KUBERNETES.md offers `--set backend=demo` for a cluster without GPUs, which has no `nvidia` RuntimeClass."""
    objects = chart_objects({"backend": "demo"})
    assert "runtimeClassName" not in one(objects, "DaemonSet")["spec"]["template"]["spec"]
    notes = render_chart({"backend": "demo"})["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert "WARNING" not in notes
    assert 'RuntimeClass "' not in notes
    assert "The demo backend serves simulated GPUs: the pods need no NVIDIA runtime" in notes


def test_notes_warn_about_missing_runtime_class_and_host_pid() -> None:
    notes = render_chart({"runtimeClassName": "", "computeApps": {"enabled": True}})[
        "nvidia-gpu-exporter/templates/NOTES.txt"
    ]
    assert "WARNING: runtimeClassName is empty" in notes
    assert "computeApps.enabled is true but hostPID is false" in notes
    notes = render_chart({})["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert "WARNING" not in notes
    assert "restricted Pod Security Standard" in notes
    assert "requests no nvidia.com/gpu" in notes


def test_rendered_flags_run_the_real_exporter(exporter: StartExporter) -> None:
    """The args the chart renders are accepted by the exporter, and the probe paths answer 200."""
    objects = chart_objects(copy.deepcopy(MATRIX["custom-args"]))
    main = container(objects)
    # The harness listens on 127.0.0.1:0 (it reads the port from the log, so keep the log level at info).
    args = [
        arg
        for arg in main["args"]
        if not arg.startswith(("--web.listen-address=", "--log.level=", "--log.format=", "--nvidia-smi-command="))
    ]
    handle = exporter(*args)
    for probe in ("livenessProbe", "readinessProbe"):
        path = one(chart_objects({}), "DaemonSet")["spec"]["template"]["spec"]["containers"][0][probe]["httpGet"][
            "path"
        ]
        assert handle.get(path).status == 200, path
    assert "nvidia_smi_last_collect_success" in handle.scrape("/gpu/metrics")


def test_readiness_values_become_the_flags_the_exporter_accepts() -> None:
    """readiness.* (docs/compatibility.md, "Readiness") renders --web.ready.* flags that start the exporter; off by
    default, as the Go exporter's always-ready /-/ready."""
    assert not [arg for arg in container(chart_objects({}))["args"] if arg.startswith("--web.ready.")]
    args = container(chart_objects(copy.deepcopy(MATRIX["readiness"])))["args"]
    ready = [arg for arg in args if arg.startswith("--web.ready.")]
    assert ready == ["--web.ready.require-collection", "--web.ready.max-staleness=2m", "--web.ready.min-gpus=pci"]
    config = parse_args(ready).config
    validate(config)
    assert (config.ready_require_collection, config.ready_max_staleness_ns, config.ready_min_gpus) == (
        True,
        120_000_000_000,
        "pci",
    )
    counted = container(chart_objects({"readiness": {"requireCollection": True, "minGpus": "8"}}))["args"]
    assert [arg for arg in counted if arg.startswith("--web.ready.")] == [
        "--web.ready.require-collection",
        "--web.ready.min-gpus=8",
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"readiness": {"maxStaleness": "2m"}}, "need readiness.requireCollection"),
        ({"readiness": {"minGpus": "pci"}}, "need readiness.requireCollection"),
    ],
)
def test_readiness_conditions_without_require_collection_fail_the_render(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"readiness": {"requireCollection": True, "minGpus": "all"}}, "minGpus"),
        ({"readiness": {"requireCollection": True, "maxStaleness": "2 minutes"}}, "maxStaleness"),
        ({"readiness": {"requireCollection": "yes"}}, "requireCollection"),
        ({"readiness": {"gpus": 8}}, "gpus"),
    ],
)
def test_schema_rejects_bad_readiness_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)
    assert_lint_reports(values)


def test_restricted_check_catches_a_weakened_security_context() -> None:
    """The restricted-PSS assertions can fail: emptied security contexts or an added capability are caught."""
    objects = chart_objects({"securityContext": None, "podSecurityContext": None})  # null removes a default
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    problems = restricted_violations(spec)
    assert any("allowPrivilegeEscalation" in problem for problem in problems)
    assert any("drop ALL" in problem for problem in problems)
    assert any("runAsNonRoot" in problem for problem in problems)
    assert any("seccompProfile" in problem for problem in problems)
    weakened = copy.deepcopy(MATRIX["defaults"])
    weakened["securityContext"] = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    spec = one(chart_objects(weakened), "DaemonSet")["spec"]["template"]["spec"]
    assert restricted_violations(spec) == ["nvidia-gpu-exporter: adds capabilities ['SYS_ADMIN']"]


# --- Kubernetes attribution and the doctor (issue 7) ------------------------------------------------------------


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_defaults_leave_attribution_off_and_set_node_name() -> None:
    objects = chart_objects({})
    main = container(objects)
    assert not [arg for arg in main["args"] if arg.startswith("--kubernetes.")]
    assert [mount["name"] for mount in main["volumeMounts"]] == ["tmp"]
    assert [volume["name"] for volume in pod_spec(objects)["volumes"]] == ["tmp"]
    assert not by_kind(objects, "ClusterRole")
    assert not by_kind(objects, "ClusterRoleBinding")
    node_name = [entry for entry in main["env"] if entry["name"] == "NODE_NAME"]
    assert node_name == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {entry["name"] for entry in main["env"]}


def test_attribution_mounts_the_kubelet_socket_read_only_and_runs_as_root() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["attribution"]))
    spec = pod_spec(objects)
    main = container(objects)
    assert main["args"][-len(ATTRIBUTION_FLAGS) :] == ATTRIBUTION_FLAGS
    assert "--kubernetes.pod-labels" not in main["args"]
    assert "--kubernetes.process-pods" not in main["args"]
    mounts = {mount["name"]: mount for mount in main["volumeMounts"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    # uid 0 for the root-owned socket, and nothing else given up.
    context = main["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (0, 0, False)
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True
    assert "privileged" not in context
    pod_context = spec["securityContext"]
    assert (pod_context["runAsUser"], pod_context["runAsNonRoot"]) == (0, False)
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostPID" not in spec
    # The restricted checker sees exactly what attribution gives up: the hostPath volume and uid 0.
    assert restricted_violations(spec) == ATTRIBUTION_GIVES_UP


def test_attribution_values_reach_the_flags_and_the_mount() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["attribution-custom"]))
    main = container(objects)
    assert main["args"][-6:] == [
        "--kubernetes.pod-resources",
        "--kubernetes.pod-resources-socket=/var/lib/k0s/kubelet/pod-resources/kubelet.sock",
        "--kubernetes.pod-resources-timeout=500ms",
        "--kubernetes.pod-resources-cache=0s",
        "--kubernetes.resource-names=nvidia.com/gpu,example.com/renamed-gpu*",
        "--kubernetes.pod-labels",
    ]
    mounts = {mount["name"]: mount for mount in main["volumeMounts"]}
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/k0s/kubelet/pod-resources"
    assert mounts["pod-resources"]["readOnly"] is True
    volumes = {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    # securityContext: null removed the defaults; the socket's uid is still set.
    assert main["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}


@pytest.mark.parametrize(
    "case", ["attribution", "attribution-custom", "process-pods", "pod-metadata", "attribution-everything"]
)
def test_rendered_attribution_flags_are_accepted_by_the_exporter(case: str) -> None:
    """The exporter's own parser and startup validation accept what the chart renders, with its meaning."""
    objects = chart_objects(copy.deepcopy(MATRIX[case]))
    parsed = parse_args(container(objects)["args"])
    assert parsed.action == "run"
    config = parsed.config
    validate(config)
    values = MATRIX[case]["kubernetes"]
    pod_resources = values.get("podResources", {})
    assert config.kubernetes_pod_resources is pod_resources.get("enabled", False)
    assert config.kubernetes_pod_labels is pod_resources.get("podLabels", False)
    assert config.kubernetes_process_pods is values.get("processPods", {}).get("enabled", False)
    if case == "attribution-custom":
        assert config.kubernetes_pod_resources_socket == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
        assert config.kubernetes_pod_resources_timeout_ns == 500_000_000
        assert config.kubernetes_pod_resources_cache_ns == 0
        assert config.kubernetes_resource_names == "nvidia.com/gpu,example.com/renamed-gpu*"
    elif config.kubernetes_pod_resources:
        assert config.kubernetes_pod_resources_timeout_ns == 2_000_000_000
        assert config.kubernetes_pod_resources_cache_ns == 5_000_000_000
    if config.kubernetes_process_pods:
        assert config.compute_apps
    pod_metadata = values.get("processPods", {}).get("podMetadata", {})
    assert config.kubernetes_pod_metadata is pod_metadata.get("enabled", False)
    if config.kubernetes_pod_metadata:
        assert config.kubernetes_pod_metadata_refresh_ns == 60_000_000_000


def test_process_pods_turn_on_host_pid_compute_apps_and_the_mig_environment() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["process-pods"]))
    spec = pod_spec(objects)
    main = container(objects)
    assert spec["hostPID"] is True
    assert "--collect.compute-apps" in main["args"]
    assert main["args"][-1] == "--kubernetes.process-pods"
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in main["env"]
    assert "--kubernetes.pod-resources" not in main["args"]
    assert "pod-resources" not in {volume["name"] for volume in spec["volumes"]}
    assert main["securityContext"]["runAsUser"] == 65534, "process -> pod reads /proc/<pid>/cgroup: no root needed"
    assert restricted_violations(spec) == ["hostPID is true"]
    # The user's own entries win over the chart's: no name twice.
    main = container(chart_objects(copy.deepcopy(MATRIX["attribution-everything"])))
    names = [entry["name"] for entry in main["env"]]
    assert sorted(names) == sorted(set(names))
    assert {"name": "NODE_NAME", "value": "gpu-1"} in main["env"]
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in main["env"]


def test_doctor_rbac_is_read_only_and_bound_to_the_exporter() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["doctor-rbac"]))
    role = one(objects, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "monitoring"}
    ]
    assert role["metadata"]["name"] == "monitoring-gpu-nvidia-gpu-exporter-doctor"  # cluster-scoped: per namespace
    spec = pod_spec(objects)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is True, "the doctor's in-cluster access needs the token"
    assert account["automountServiceAccountToken"] is True
    assert restricted_violations(spec) == []
    assert not [arg for arg in container(objects)["args"] if arg.startswith("--kubernetes.")]
    # An existing account named by the user is bound instead.
    objects = chart_objects({"doctor": {"rbac": {"create": True}}, "serviceAccount": {"create": False, "name": "ops"}})
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "ops"


def test_pod_metadata_may_list_pods_with_its_token_and_node_name() -> None:
    """--kubernetes.pod-metadata lists the node's pods: a read-only ClusterRole bound to the exporter's account,
    whose token is mounted, and NODE_NAME from the downward API."""
    objects = chart_objects(copy.deepcopy(MATRIX["pod-metadata"]))
    role = one(objects, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    assert role["metadata"]["name"] == "monitoring-gpu-nvidia-gpu-exporter-pod-metadata"
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = one(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "monitoring"}
    ]
    spec = pod_spec(objects)
    assert spec["automountServiceAccountToken"] is True, "the in-cluster list needs the token"
    main = container(objects)
    assert main["args"][-3:] == [
        "--collect.process-usage",
        "--kubernetes.pod-metadata",
        "--kubernetes.pod-metadata-refresh=1m",
    ]
    # Given in extraArgs too, the flag is not given twice (the exporter refuses a repeated flag).
    given = copy.deepcopy(MATRIX["pod-metadata"]) | {"extraArgs": ["--collect.process-usage"]}
    assert container(chart_objects(given))["args"].count("--collect.process-usage") == 1
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in main["env"]
    # Beside the doctor's RBAC: two roles, each its own.
    both = copy.deepcopy(MATRIX["pod-metadata"]) | {"doctor": {"rbac": {"create": True}}}
    names = {role["metadata"]["name"] for role in by_kind(chart_objects(both), "ClusterRole")}
    assert names == {"monitoring-gpu-nvidia-gpu-exporter-doctor", "monitoring-gpu-nvidia-gpu-exporter-pod-metadata"}


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_role_is_read_only(case: str) -> None:
    objects = chart_objects(copy.deepcopy(MATRIX[case]))
    roles = by_kind(objects, "ClusterRole") + by_kind(objects, "Role")
    asked = MATRIX[case].get("doctor", {}).get("rbac", {}).get("create") or (
        MATRIX[case].get("kubernetes", {}).get("processPods", {}).get("podMetadata", {}).get("enabled")
    )
    assert bool(roles) is bool(asked)
    for role in roles:
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ_ONLY_VERBS, rule
            assert not {"*", "secrets"} & set(rule["resources"]), rule


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kubernetes": {"podResources": {"timeout": "0s"}}}, "timeout"),
        ({"kubernetes": {"podResources": {"timeout": "2 seconds"}}}, "timeout"),
        ({"kubernetes": {"podResources": {"cache": "-1s"}}}, "cache"),
        ({"kubernetes": {"podResources": {"socketPath": "kubelet.sock"}}}, "socketPath"),
        ({"kubernetes": {"podResources": {"socketPath": "/kubelet.sock"}}}, "socketPath"),
        ({"kubernetes": {"podResources": {"resourceNames": []}}}, "resourceNames"),
        ({"kubernetes": {"podResources": {"resourceNames": ["nvidia.com/gpu,nvidia.com/mig-*"]}}}, "resourceNames"),
        ({"kubernetes": {"podResources": {"enabled": "true"}}}, "enabled"),
        ({"kubernetes": {"podResources": {"labels": True}}}, "labels"),
        ({"kubernetes": {"processPods": {"enabled": 1}}}, "enabled"),
        ({"kubernetes": {"processPods": {"podMetadata": {"refresh": "0s"}}}}, "refresh"),
        ({"kubernetes": {"processPods": {"podMetadata": {"refresh": "30 seconds"}}}}, "refresh"),
        ({"kubernetes": {"processPods": {"podMetadata": {"rbac": True}}}}, "rbac"),
        ({"kubernetes": {"hostPID": True}}, "hostPID"),
        ({"doctor": {"rbac": {"enabled": True}}}, "enabled"),
    ],
)
def test_schema_rejects_bad_attribution_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)
    assert_lint_reports(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kubernetes": {"podResources": {"podLabels": True}}}, "podLabels needs kubernetes.podResources.enabled"),
        (
            {"doctor": {"rbac": {"create": True}}, "serviceAccount": {"create": False}},
            "never the namespace's default account",
        ),
        (
            {"kubernetes": {"processPods": {"podMetadata": {"enabled": True}}}},
            "podMetadata.enabled names the pods of process -> pod attribution",
        ),
        (
            {
                "kubernetes": {"processPods": {"enabled": True, "podMetadata": {"enabled": True}}},
                "serviceAccount": {"create": False},
            },
            "never the namespace's default account",
        ),
    ],
)
def test_contradictory_attribution_values_fail_the_render(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


def test_notes_explain_attribution_pod_security_and_the_doctor() -> None:
    notes = render_chart(copy.deepcopy(MATRIX["attribution"]))["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert "Pod Security level must be privileged (or the namespace exempted)" in notes
    assert "a hostPath volume (the kubelet's /var/lib/kubelet/pod-resources" in notes
    assert "uid 0" in notes
    assert "pod-security.kubernetes.io/enforce=privileged" in notes
    assert "meet the restricted Pod Security Standard" not in notes
    assert "curl -s http://127.0.0.1:9835/-/attribution" in notes
    assert (
        "kubectl -n monitoring exec ds/gpu-nvidia-gpu-exporter -- nvidia_gpu_exporter doctor --no-kubernetes" in notes
    )
    notes = render_chart(copy.deepcopy(MATRIX["process-pods"]))["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert "process -> pod (kubernetes.processPods): hostPID" in notes
    assert "hostPath" not in notes
    assert "computeApps.enabled is true but hostPID is false" not in notes
    notes = render_chart(copy.deepcopy(MATRIX["doctor-rbac"]))["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert (
        notes.rstrip().count(
            "\n  kubectl -n monitoring exec ds/gpu-nvidia-gpu-exporter -- nvidia_gpu_exporter doctor\n"
        )
        == 1
    )
    assert "/-/attribution" not in notes
    assert "meet the restricted Pod Security Standard" in notes
    notes = render_chart(
        {"port": 9900, "telemetryPath": "/gpu/metrics", **copy.deepcopy(MATRIX["attribution-custom"])}
    )["nvidia-gpu-exporter/templates/NOTES.txt"]
    assert (
        "nvidia_gpu_exporter doctor --exporter-url=http://127.0.0.1:9900/gpu/metrics"
        " --kubernetes.pod-resources-socket=/var/lib/k0s/kubelet/pod-resources/kubelet.sock --no-kubernetes"
    ) in notes


# --- the kernel log (issue 11) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "host_path", "kind", "added"),
    [
        pytest.param("kernel-log", "/dev/kmsg", "CharDevice", ["SYSLOG"], id="dev-kmsg-adds-syslog-alone"),
        pytest.param("kernel-log-file", "/var/log/kern.log", "File", None, id="a-log-file-adds-no-capability"),
    ],
)
def test_the_kernel_log_is_mounted_read_only_and_read(
    case: str, host_path: str, kind: str, added: list[str] | None
) -> None:
    objects = chart_objects(copy.deepcopy(MATRIX[case]))
    main = container(objects)
    assert "--collect.kernel-log=/host/kernel-log" in main["args"]
    mounts = {mount["name"]: mount for mount in main["volumeMounts"]}
    assert mounts["kernel-log"] == {"name": "kernel-log", "mountPath": "/host/kernel-log", "readOnly": True}
    volumes = {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}
    assert volumes["kernel-log"]["hostPath"] == {"path": host_path, "type": kind}
    capabilities = main["securityContext"]["capabilities"]
    assert capabilities.get("add") == added
    assert capabilities["drop"] == ["ALL"]
    assert parse_args(main["args"]).config.kernel_log == "/host/kernel-log"


def test_by_default_the_kernel_log_is_not_mounted() -> None:
    objects = chart_objects({})
    main = container(objects)
    assert not any(arg.startswith("--collect.kernel-log") for arg in main["args"])
    assert "kernel-log" not in {volume["name"] for volume in pod_spec(objects)["volumes"]}
    assert "add" not in main["securityContext"]["capabilities"]


# --- dcgm-exporter replacement (issue 12) -----------------------------------------------------------------------

DCGM_MOUNT = "/etc/nvidia-gpu-exporter/dcgm"


def test_a_dcgm_exporter_replacement_listens_on_9400_with_dcgms_names_and_counters() -> None:
    objects = chart_objects(copy.deepcopy(MATRIX["dcgm-exporter-replacement"]))
    main = container(objects)
    assert "--web.listen-address=:9400" in main["args"]
    assert "--metrics.profile=dcgm" in main["args"]
    assert f"--dcgm.collectors={DCGM_MOUNT}/counters.csv" in main["args"]
    assert main["ports"][0]["containerPort"] == 9400
    assert one(objects, "Service")["spec"]["ports"][0]["port"] == 9400
    assert main["livenessProbe"]["httpGet"]["path"] == "/health"
    configmap = one(objects, "ConfigMap")
    assert configmap["data"] == {"counters.csv": DCGM_COUNTERS}
    mounts = {mount["name"]: mount for mount in main["volumeMounts"]}
    assert mounts["dcgm-counters"] == {"name": "dcgm-counters", "mountPath": DCGM_MOUNT, "readOnly": True}
    volumes = {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}
    assert volumes["dcgm-counters"]["configMap"]["name"] == configmap["metadata"]["name"]
    assert "honorLabels" not in one(objects, "ServiceMonitor")["spec"]["endpoints"][0]  # no pod labels: no need


def test_an_existing_counters_configmap_is_mounted_by_its_key() -> None:
    """dcgm-exporter's chart keeps its counters under the key ``metrics``; that ConfigMap works as it is."""
    objects = chart_objects(copy.deepcopy(MATRIX["dcgm-counters-configmap"]))
    main = container(objects)
    assert f"--dcgm.collectors={DCGM_MOUNT}/metrics" in main["args"]
    assert "--metrics.profile=both" in main["args"]
    assert not by_kind(objects, "ConfigMap")
    volumes = {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}
    assert volumes["dcgm-counters"]["configMap"] == {
        "name": "exporter-metrics-config-map",
        "items": [{"key": "metrics", "path": "metrics"}],
    }


def test_pod_labels_make_the_monitors_honor_them_and_drop_the_exporters_own() -> None:
    """The honorLabels trap (docs/dcgm.md): the series' pod labels must win over the target's."""
    drop = {"action": "labeldrop", "regex": "pod|container"}
    endpoint = one(chart_objects(copy.deepcopy(MATRIX["dcgm-counters-configmap"])), "PodMonitor")["spec"][
        "podMetricsEndpoints"
    ][0]
    assert endpoint["honorLabels"] is True
    assert drop in endpoint["relabelings"]
    values = copy.deepcopy(MATRIX["attribution-everything"])
    endpoint = one(chart_objects(values), "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True
    assert drop in endpoint["relabelings"]
    endpoint = one(chart_objects(copy.deepcopy(MATRIX["service-monitor"])), "ServiceMonitor")["spec"]["endpoints"][0]
    assert "honorLabels" not in endpoint
    assert drop not in endpoint["relabelings"]


@pytest.mark.parametrize("case", ["dcgm-exporter-replacement", "dcgm-counters-configmap"])
def test_rendered_dcgm_flags_are_accepted_by_the_exporter(case: str) -> None:
    config = parse_args(container(chart_objects(copy.deepcopy(MATRIX[case])))["args"]).config
    validate(config)
    assert config.metrics_profile.value == MATRIX[case]["metrics"]["profile"]
    assert config.dcgm_collectors.startswith(DCGM_MOUNT + "/")


def test_the_replacement_answers_health_and_serves_dcgm_names(exporter: StartExporter, tmp_path: Path) -> None:
    """The rendered args start the real exporter (the counters file where the ConfigMap would be mounted)."""
    objects = chart_objects(copy.deepcopy(MATRIX["dcgm-exporter-replacement"]))
    counters = tmp_path / "counters.csv"
    counters.write_text(one(objects, "ConfigMap")["data"]["counters.csv"], encoding="utf-8")
    args = [
        f"--dcgm.collectors={counters}" if arg.startswith("--dcgm.collectors=") else arg
        for arg in container(objects)["args"]
        if not arg.startswith(("--web.listen-address=", "--log.", "--nvidia-smi-command="))
    ]
    handle = exporter(*args, "--collect.backend=demo")
    assert handle.get(container(objects)["livenessProbe"]["httpGet"]["path"]).body == b"OK"
    assert "DCGM_FI_DEV_GPU_TEMP{" in handle.scrape()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"dcgm": {"counters": DCGM_COUNTERS}}, "dcgm.counters needs metrics.profile dcgm or both"),
        (
            {"metrics": {"profile": "dcgm"}, "dcgm": {"counters": DCGM_COUNTERS, "countersConfigMap": {"name": "x"}}},
            "dcgm.counters or dcgm.countersConfigMap.name, not both",
        ),
        (
            {"metrics": {"profile": "dcgm"}, "telemetryPath": "/health"},
            "telemetryPath /health is dcgm-exporter's health route",
        ),
    ],
)
def test_contradictory_dcgm_values_fail_the_render(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


@pytest.mark.parametrize(
    ("values", "message"),
    [({"metrics": {"profile": "dcgm-exporter"}}, "profile"), ({"dcgm": {"countersConfigMap": {"nme": "x"}}}, "nme")],
)
def test_schema_rejects_bad_dcgm_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)
    assert_lint_reports(values)


def test_the_documented_replacement_values_render_and_start() -> None:
    """KUBERNETES.md's "In place of dcgm-exporter" values are a working chart configuration."""
    text = (CHART.parents[2] / "KUBERNETES.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    (block,) = [block for block in blocks if "dcgmExporterCompatible: true" in block]
    values = yaml.safe_load(block)
    objects = chart_objects(values)
    config = parse_args(container(objects)["args"]).config
    validate(config)
    assert (config.metrics_profile.value, config.listen_addresses) == ("dcgm", (":9400",))
    assert one(objects, "ConfigMap")["data"]["counters.csv"] == values["dcgm"]["counters"]


@pytest.mark.parametrize("profile", ["nvidia_smi", "dcgm"])
def test_helm_test_and_the_notes_check_find_a_healthy_exporter_under_every_profile(
    exporter: StartExporter, profile: str
) -> None:
    """`helm test` and the NOTES' curl read the collection's own family, which every --metrics.profile serves
    (docs/metrics.md, "Collection health"); under dcgm there is no nvidia_smi_* family to find."""
    rendered = render_chart({})
    command = yaml.safe_load(rendered["nvidia-gpu-exporter/templates/tests/test-connection.yaml"])["spec"][
        "containers"
    ][0]["command"][-1]
    helm_test = re.search(r"grep -q '([^']+)'", command)
    notes = re.search(r"grep -E '([^']+)'", rendered["nvidia-gpu-exporter/templates/NOTES.txt"])
    assert helm_test is not None
    assert notes is not None
    scrape = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), f"--metrics.profile={profile}").scrape()
    assert re.search(helm_test.group(1), scrape, re.MULTILINE), helm_test.group(1)
    found = [match.group(0) for match in re.finditer(notes.group(1) + ".*", scrape, re.MULTILINE)]
    assert "nvidia_gpu_exporter_collection_success 1" in found
    assert len(found) >= 3  # and the GPUs, in either profile's names


# -- the node-problem-detector plugin's monitor config ----------------------------------------------------------

MONITOR = REPO / "deploy" / "node-problem-detector" / "nvidia-gpu-exporter-monitor.json"


def npd_monitor(values: dict[str, Any]) -> dict[str, Any]:
    """The monitor config the chart's ConfigMap holds."""
    configmaps = [
        document
        for document in by_kind(chart_objects(values), "ConfigMap")
        if document["metadata"]["name"].endswith("-npd-plugin")
    ]
    (configmap,) = configmaps
    assert configmap["metadata"]["name"] == "gpu-nvidia-gpu-exporter-npd-plugin"
    monitor: dict[str, Any] = json.loads(configmap["data"]["nvidia-gpu-exporter-monitor.json"])
    return monitor


def test_the_npd_plugin_configmap_is_off_by_default() -> None:
    assert not [d for d in chart_objects({}) if d["metadata"]["name"].endswith("-npd-plugin")]


def test_the_charts_monitor_config_is_the_one_in_deploy() -> None:
    """With the exporter on the node's network, the chart ships deploy/node-problem-detector's file as it is."""
    values = {"hostNetwork": True, "nodeProblemDetector": {"enabled": True}}
    assert npd_monitor(values) == json.loads(MONITOR.read_text(encoding="utf-8"))


def test_the_plugins_url_and_credentials_reach_every_rule() -> None:
    values = MATRIX["npd-plugin"]
    monitor = npd_monitor(values)
    for rule, state in zip(monitor["rules"], ("failing", "degraded"), strict=True):
        options = npd._parser().parse_args(rule["args"][1:])  # the plugin accepts what the chart renders
        assert (options.url, options.state, options.username, options.password_file, options.insecure_skip_verify) == (
            "https://127.0.0.1:9835/-/health",
            state,
            "npd",
            "/etc/npd/password",
            True,
        )


def test_the_plugin_needs_the_nodes_network_or_a_url() -> None:
    assert_render_fails({"nodeProblemDetector": {"enabled": True}}, "nodeProblemDetector.enabled needs hostNetwork")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"nodeProblemDetector": {"pluginArgs": ["; rm -rf /"]}}, "pluginArgs", id="not-a-flag"),
        pytest.param({"nodeProblemDetector": {"url": "127.0.0.1:9835"}}, "url", id="url-without-scheme"),
        pytest.param({"nodeProblemDetector": {"invokeInterval": "1 minute"}}, "invokeInterval", id="interval"),
    ],
)
def test_schema_rejects_bad_npd_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)
