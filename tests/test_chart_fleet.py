"""The chart's fleet mode (docs/fleet.md, KUBERNETES.md "Fleet mode"): ONE exporter as a Deployment instead of
the DaemonSet, the targets file and known_hosts from a ConfigMap, the SSH key from a Secret copied 0400 for the
container user, no GPU, and a ServiceMonitor with one ``/probe?target=<name>`` endpoint per target.

Rendered and checked like tests/test_chart.py: strict lint, strict validation for several Kubernetes versions and
the Prometheus operator's models, the restricted Pod Security Standard; the rendered targets file goes through
the exporter's own parser and the rendered args through its flag parser. The kustomize overlay
deploy/kustomize/overlays/fleet renders the same pod and the same probe endpoints. Needs helm-python-sdk,
kubernetes-validate and cloudcoil-models-prometheus-operator (.ci/steps/40-kubernetes.sh); skips without them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from deploy_helpers import (
    CHART,
    CONTAINER_FIELDS,
    KUSTOMIZE,
    assert_lints_strictly,
    assert_pod_matches_the_charts,
    assert_render_fails,
    assert_valid_objects,
    by_kind,
    chart_objects,
    kustomize,
    one,
    render_chart,
    requests_a_gpu,
    restricted_violations,
)
from nvidia_gpu_exporter.backends.fleet.targets import TARGET_NAME, parse_targets
from nvidia_gpu_exporter.config import validate
from nvidia_gpu_exporter.flags import parse_args

KNOWN_HOSTS = "10.0.1.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOfGpu01\n"
TARGETS: dict[str, Any] = {
    "groups": {"rack1": {"port": 2222, "targets": {"gpu-01": {"host": "10.0.1.1"}, "gpu-02": {"host": "10.0.1.2"}}}},
    "targets": {"gaming-pc": {"host": "192.168.1.20", "command": "nvidia-smi.exe"}, "workstation": {}},
}
FLEET: dict[str, Any] = {
    "fleet": {
        "enabled": True,
        "targets": TARGETS,
        "sshKeySecret": {"name": "fleet-ssh-key"},
        "knownHosts": KNOWN_HOSTS,
    }
}


def fleet_values(**extra: Any) -> dict[str, Any]:
    values = copy.deepcopy(FLEET)
    for key, value in extra.items():
        if key == "fleet":
            values["fleet"].update(value)
        else:
            values[key] = value
    return values


MATRIX: dict[str, dict[str, Any]] = {
    "fleet": fleet_values(),
    "fleet-service-monitor": fleet_values(
        serviceMonitor={
            "enabled": True,
            "interval": "30s",
            "scrapeTimeout": "20s",
            "additionalLabels": {"release": "kube-prometheus"},
            "relabelings": [{"targetLabel": "cluster", "replacement": "home"}],
            "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "nvidia_smi_pci_.*", "action": "drop"}],
        }
    ),
    "fleet-custom": fleet_values(
        fleet={
            "targets": {**TARGETS, "defaults": {"user": "monitor", "timeout": "5s"}},
            "sshKeySecret": {"name": "keys", "key": "fleet.key"},
            "maxConcurrent": 16,
        },
        fullnameOverride="gpu-fleet",
        extraArgs=["--web.max-requests=20"],
        extraEnv=[{"name": "TZ", "value": "UTC"}],
        podAnnotations={"example.com/owner": "sre"},
        revisionHistoryLimit=3,
        prometheusRule={"enabled": True},
    ),
}
FLEET_DIR = "/etc/nvidia-gpu-exporter/fleet"
KEY_FILE = "/etc/nvidia-gpu-exporter/ssh/id"


def deployment_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def exporter_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment_pod(objects)["containers"]
    assert len(containers) == 1
    return containers[0]


def rendered_targets(objects: list[dict[str, Any]]) -> str:
    text: str = one(objects, "ConfigMap")["data"]["targets.yml"]
    return text


# --- the matrix -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_fleet_chart_lints_strictly_without_findings(case: str) -> None:
    assert_lints_strictly(MATRIX[case])


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_fleet_objects_validate_strictly(case: str) -> None:
    assert_valid_objects(chart_objects(copy.deepcopy(MATRIX[case])))


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_fleet_pod_is_restricted_and_needs_no_gpu(case: str) -> None:
    spec = deployment_pod(chart_objects(copy.deepcopy(MATRIX[case])))
    assert restricted_violations(spec) == []
    assert not requests_a_gpu(spec)
    assert "runtimeClassName" not in spec, "no NVIDIA runtime: the GPUs are on the SSH hosts"
    env = {
        entry["name"]
        for entry in exporter_container([{"kind": "Deployment", "spec": {"template": {"spec": spec}}}]).get("env", [])
    }
    assert not {name for name in env if name.startswith("NVIDIA_")}


# --- what fleet mode renders ------------------------------------------------------------------------------------


def test_fleet_replaces_the_daemonset_with_one_deployment() -> None:
    objects = chart_objects(fleet_values())
    assert sorted(document["kind"] for document in objects) == [
        "ConfigMap",
        "Deployment",
        "Pod",
        "Service",
        "ServiceAccount",
    ]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    service = one(objects, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_rendered_targets_file_is_accepted_and_points_at_the_mounts() -> None:
    objects = chart_objects(fleet_values())
    targets = parse_targets(rendered_targets(objects), "rendered ConfigMap")
    assert sorted(targets.by_name) == ["gaming-pc", "gpu-01", "gpu-02", "workstation"]
    for target in targets.by_name.values():
        assert target.settings.identity_file == KEY_FILE
        assert target.settings.known_hosts == f"{FLEET_DIR}/known_hosts"
    assert targets.by_name["gpu-01"].settings.port == 2222
    assert targets.by_name["gaming-pc"].settings.command == "nvidia-smi.exe"
    assert one(objects, "ConfigMap")["data"]["known_hosts"] == KNOWN_HOSTS


def test_defaults_given_in_the_values_win_over_the_mounted_paths() -> None:
    defaults = {"identity_file": "/keys/other", "known_hosts": "/keys/known", "user": "monitor"}
    objects = chart_objects(fleet_values(fleet={"targets": {**TARGETS, "defaults": defaults}}))
    target = parse_targets(rendered_targets(objects)).by_name["workstation"]
    assert (target.settings.identity_file, target.settings.known_hosts, target.settings.user) == (
        "/keys/other",
        "/keys/known",
        "monitor",
    )


def test_mounts_match_the_targets_file_and_the_secret_stays_in_the_init_container() -> None:
    objects = chart_objects(fleet_values())
    spec = deployment_pod(objects)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    main = exporter_container(objects)
    mounts = {mount["mountPath"]: mount for mount in main["volumeMounts"]}
    assert volumes[mounts[FLEET_DIR]["name"]]["configMap"]["name"] == one(objects, "ConfigMap")["metadata"]["name"]
    assert volumes[mounts[os.path.dirname(KEY_FILE)]["name"]]["emptyDir"]["medium"] == "Memory"
    assert all(mount.get("readOnly") for path, mount in mounts.items() if path != "/tmp")
    secret_volumes = {name for name, volume in volumes.items() if "secret" in volume}
    assert volumes[next(iter(secret_volumes))]["secret"]["secretName"] == "fleet-ssh-key"
    assert not secret_volumes & {mount["name"] for mount in main["volumeMounts"]}, "the exporter sees only the copy"
    (init,) = spec["initContainers"]
    assert secret_volumes <= {mount["name"] for mount in init["volumeMounts"]}
    assert init["command"][-1] == KEY_FILE
    # fsGroup lets the init container (the exporter's user) read the Secret's root-owned file.
    assert spec["securityContext"]["fsGroup"] == init["securityContext"]["runAsGroup"] == 65534


def test_the_init_container_copies_the_key_0400_for_its_user(tmp_path: Path) -> None:
    """The init container's own command, run here: the copy is the key, mode 0400, the running user's; a rerun
    (the pod's init container restarted over the same memory volume) replaces it."""
    (init,) = deployment_pod(chart_objects(fleet_values()))["initContainers"]
    program, *options, source, destination = init["command"]
    assert program == "/usr/bin/python3"
    secret = tmp_path / "secret"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n")
    secret.chmod(0o440)
    copy_path = tmp_path / "id"
    for key in (b"first key\n", b"rotated key\n"):
        secret.chmod(0o640)
        secret.write_bytes(key)
        subprocess.run([sys.executable, *options, str(secret), str(copy_path)], check=True, timeout=30)
        info = copy_path.stat()
        assert copy_path.read_bytes() == key
        assert stat.S_IMODE(info.st_mode) == 0o400
        assert info.st_uid == os.getuid()
    assert (source, destination) == ("/etc/nvidia-gpu-exporter/ssh-secret/id_ed25519", KEY_FILE)


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_rendered_fleet_args_are_accepted_by_the_exporter(case: str) -> None:
    config = parse_args(exporter_container(chart_objects(copy.deepcopy(MATRIX[case])))["args"]).config
    validate(config)
    assert config.fleet_targets_file == f"{FLEET_DIR}/targets.yml"
    if case == "fleet-custom":
        assert config.fleet_max_concurrent == 16


def test_the_real_exporter_serves_the_rendered_targets_file(exporter: StartExporter, tmp_path: Path) -> None:
    """The exporter starts on the rendered args and targets file, its pod probes answer, and /probe knows exactly
    the rendered targets (an unknown one is refused; nothing is dialled for it)."""
    objects = chart_objects(fleet_values())
    targets_file = tmp_path / "targets.yml"
    targets_file.write_text(rendered_targets(objects), encoding="utf-8")
    main = exporter_container(objects)
    args = [
        f"--fleet.targets-file={targets_file}" if arg.startswith("--fleet.targets-file=") else arg
        for arg in main["args"]
        if not arg.startswith(("--web.listen-address=", "--log.level=", "--log.format="))
    ]
    handle = exporter(*args)
    for probe in ("livenessProbe", "readinessProbe"):
        assert handle.get(main[probe]["httpGet"]["path"]).status == 200, probe
    refused = handle.get("/probe?target=gpu-03")
    assert refused.status == 400
    assert "unknown target" in refused.body.decode()


def test_service_monitor_probes_each_target_with_its_name_as_instance() -> None:
    monitor = one(chart_objects(copy.deepcopy(MATRIX["fleet-service-monitor"])), "ServiceMonitor")
    endpoints = monitor["spec"]["endpoints"]
    assert [endpoint["params"]["target"] for endpoint in endpoints] == [
        ["gaming-pc"],
        ["gpu-01"],
        ["gpu-02"],
        ["workstation"],
    ]
    for endpoint in endpoints:
        assert (endpoint["path"], endpoint["port"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
            "/probe",
            "http",
            "30s",
            "20s",
        )
        relabelings = endpoint["relabelings"]
        assert relabelings[0] == {"action": "replace", "sourceLabels": ["__param_target"], "targetLabel": "instance"}
        assert {"action": "labeldrop", "regex": "pod|container"} in relabelings
        assert relabelings[-1] == {"targetLabel": "cluster", "replacement": "home"}
        assert "__meta_kubernetes_pod_node_name" not in json.dumps(endpoint), "the exporter's node is no GPU host's"


def test_without_fleet_the_chart_renders_no_fleet_object() -> None:
    objects = chart_objects({})
    assert by_kind(objects, "Deployment") == []
    assert by_kind(objects, "ConfigMap") == []
    assert len(by_kind(objects, "DaemonSet")) == 1


def test_the_schema_target_name_pattern_is_the_parsers() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    targets = schema["properties"]["fleet"]["properties"]["targets"]["properties"]
    expected = f"^{TARGET_NAME.pattern}$"
    assert targets["targets"]["propertyNames"]["pattern"] == expected
    assert targets["groups"]["additionalProperties"]["properties"]["targets"]["propertyNames"]["pattern"] == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(fleet_values(fleet={"targets": {}}), "at least one target", id="no-targets"),
        pytest.param(
            fleet_values(fleet={"targets": {"groups": {"g": {"port": 22}}}}), "at least one target", id="empty-group"
        ),
        pytest.param(
            fleet_values(fleet={"sshKeySecret": {"name": ""}}), "fleet.sshKeySecret.name is empty", id="no-key"
        ),
        pytest.param(fleet_values(fleet={"knownHosts": ""}), "fleet.knownHosts is empty", id="no-known-hosts"),
        pytest.param(fleet_values(podMonitor={"enabled": True}), "podMonitor.enabled belongs to", id="pod-monitor"),
        pytest.param(
            fleet_values(kernelLog={"enabled": True}, hostNetwork=True),
            "hostNetwork, kernelLog.enabled belongs to",
            id="node-local-values",
        ),
        pytest.param(
            fleet_values(kubernetes={"podResources": {"enabled": True}}),
            "kubernetes.podResources.enabled belongs to",
            id="attribution",
        ),
        pytest.param(
            fleet_values(readiness={"requireCollection": True}),
            "readiness.requireCollection belongs to",
            id="readiness",
        ),
    ],
)
def test_contradictory_fleet_values_fail_the_render(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(fleet_values(fleet={"sshKey": "x"}), "sshKey", id="unknown-fleet-key"),
        pytest.param(fleet_values(fleet={"targets": {"hosts": {}}}), "hosts", id="unknown-targets-file-key"),
        pytest.param(
            fleet_values(fleet={"targets": {"targets": {"gpu 01": {}}}}), "gpu 01", id="target-name-with-a-space"
        ),
        pytest.param(
            fleet_values(fleet={"targets": {"groups": {"g": {"targets": {"-gpu": {}}}}}}),
            "-gpu",
            id="group-target-name-with-a-leading-dash",
        ),
        pytest.param(fleet_values(fleet={"sshKeySecret": {"name": "k", "key": "../id"}}), "key", id="key-with-a-path"),
        pytest.param(fleet_values(fleet={"maxConcurrent": -1}), "maxConcurrent", id="negative-concurrency"),
    ],
)
def test_schema_rejects_bad_fleet_values(values: dict[str, Any], message: str) -> None:
    assert_render_fails(values, message)


# --- the kustomize overlay --------------------------------------------------------------------------------------

OVERLAY = KUSTOMIZE / "overlays" / "fleet"


def overlay_chart_objects() -> list[dict[str, Any]]:
    """The chart's render of what the overlay holds: its targets.yml, its Secret name, release nvidia-gpu-exporter."""
    targets = yaml.safe_load((OVERLAY / "targets.yml").read_text(encoding="utf-8"))
    values = fleet_values(
        fleet={
            "targets": targets,
            "sshKeySecret": {"name": "nvidia-gpu-exporter-fleet-ssh-key"},
            "knownHosts": (OVERLAY / "known_hosts").read_text(encoding="utf-8"),
        },
        serviceMonitor={"enabled": True},
    )
    return chart_objects(values, name="nvidia-gpu-exporter")


def test_fleet_overlay_renders_valid_restricted_objects_without_the_daemonset() -> None:
    objects = kustomize(OVERLAY)
    assert sorted(document["kind"] for document in objects) == [
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert_valid_objects(objects)
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []
    assert not requests_a_gpu(spec)
    assert one(objects, "Service")["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    parse_targets(one(objects, "ConfigMap")["data"]["targets.yml"], "overlay targets.yml")


def test_fleet_overlay_pod_matches_the_charts() -> None:
    overlay_pod = one(kustomize(OVERLAY), "Deployment")["spec"]["template"]["spec"]
    chart_pod = one(overlay_chart_objects(), "Deployment")["spec"]["template"]["spec"]
    for volume in overlay_pod["volumes"]:
        if "configMap" in volume:  # kustomize's name carries the content hash
            volume["configMap"]["name"] = volume["configMap"]["name"].rsplit("-", 1)[0]
    assert (len(overlay_pod["initContainers"]), len(overlay_pod["containers"])) == (1, 1)
    assert_pod_matches_the_charts(overlay_pod, chart_pod, (*CONTAINER_FIELDS, "command"))


def test_fleet_overlay_probes_every_target_of_its_file_as_the_chart_does() -> None:
    overlay_endpoints = one(kustomize(OVERLAY), "ServiceMonitor")["spec"]["endpoints"]
    assert overlay_endpoints == one(overlay_chart_objects(), "ServiceMonitor")["spec"]["endpoints"]


def test_the_documented_fleet_values_render_a_probe_per_target() -> None:
    """KUBERNETES.md's "Fleet mode" values (with the known_hosts its command passes by --set-file) render."""
    text = (CHART.parents[2] / "KUBERNETES.md").read_text(encoding="utf-8")
    section = text.split("\n## Fleet mode", 1)[1].split("\n## ", 1)[0]
    (block,) = [block for block in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL) if "fleet:" in block]
    values = yaml.safe_load(block)
    values["fleet"]["knownHosts"] = KNOWN_HOSTS
    objects = chart_objects(values)
    targets = parse_targets(rendered_targets(objects)).by_name
    endpoints = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert [endpoint["params"]["target"][0] for endpoint in endpoints] == sorted(targets)
    assert all(target.settings.timeout_seconds < 15 for target in targets.values()), "scrapeTimeout stays above"


def test_fleet_notes_name_the_deployment_and_a_probe_to_try() -> None:
    notes = next(text for path, text in render_chart(fleet_values()).items() if path.endswith("NOTES.txt"))
    assert "fleet mode as Deployment gpu-nvidia-gpu-exporter" in notes
    assert "port-forward deploy/gpu-nvidia-gpu-exporter 9835" in notes
    assert "/probe?target=gaming-pc" in notes
    assert "DaemonSet" not in notes
    assert "No ServiceMonitor was created" in notes
