"""The cluster half of the checklist, read-only and about this node only: allocatable GPUs, the device
plugin's pod, and GPU taints. Needs ``get`` on this node and ``list`` on pods (field-selected to it). The opt-in
gpu-test pod (doctor/gputest.py) is the one check that writes: it creates and deletes one pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from nvidia_gpu_exporter.doctor.gputest import CHECK as GPU_TEST_CHECK
from nvidia_gpu_exporter.doctor.gputest import TITLE as GPU_TEST_TITLE
from nvidia_gpu_exporter.doctor.gputest import GpuTestOptions, check_gpu_test_pod
from nvidia_gpu_exporter.doctor.report import CheckResult, Status
from nvidia_gpu_exporter.kubernetes.apiclient import ApiAccess, ApiClient, ApiConfigError, ApiError, discover

GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_PLUGIN_MARKERS = ("nvidia-device-plugin", "k8s-device-plugin")
RBAC_REMEDY = "grant the doctor's service account get on nodes and list on pods (the Helm chart's doctor RBAC)"


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    node_name: str
    kubeconfig: str = ""
    service_account_dir: str = "/var/run/secrets/kubernetes.io/serviceaccount"
    timeout_seconds: float = 5.0
    gpu_test: GpuTestOptions | None = None  # None: the gpu-test pod is not run


def _api_failure(check: str, title: str, error: ApiError, node: str) -> CheckResult:
    if error.status in (401, 403):
        return CheckResult(check, title, Status.FAIL, f"the API server refused: {error}", RBAC_REMEDY)
    if error.status == 404:
        return CheckResult(
            check,
            title,
            Status.FAIL,
            f"node {node!r} not found: {error}",
            "pass --node-name (in a pod: the downward API's spec.nodeName as NODE_NAME)",
        )
    return CheckResult(check, title, Status.FAIL, str(error), "check the API server address and credentials")


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def check_allocatable(node: Mapping[str, Any], name: str) -> CheckResult:
    title = "allocatable nvidia.com/gpu"
    allocatable = node.get("status", {}).get("allocatable", {}) or {}
    gpu = {key: _quantity(value) for key, value in allocatable.items() if key.startswith("nvidia.com/")}
    offered = {key: count for key, count in sorted(gpu.items()) if count > 0}
    if not offered:
        return CheckResult(
            "node-allocatable",
            title,
            Status.FAIL,
            f"node {name} offers no nvidia.com/* resources (allocatable: {gpu or 'none'})",
            "the device plugin is not advertising GPUs: check its pod's log on this node",
        )
    listed = ", ".join(f"{key}={count}" for key, count in offered.items())
    return CheckResult("node-allocatable", title, Status.PASS, f"node {name} allocatable: {listed}")


def check_taints(node: Mapping[str, Any], name: str) -> CheckResult:
    title = "GPU taints"
    taints = node.get("spec", {}).get("taints", []) or []
    gpu = [taint for taint in taints if str(taint.get("key", "")).startswith(GPU_RESOURCE)]
    if not gpu:
        return CheckResult(
            "gpu-taints",
            title,
            Status.WARN,
            f"node {name} has no {GPU_RESOURCE} taint: pods that need no GPU can be scheduled onto it",
            f"kubectl taint nodes {name} {GPU_RESOURCE}=present:NoSchedule (GPU pods then need the toleration)",
        )
    listed = ", ".join(f"{t.get('key')}={t.get('value', '')}:{t.get('effect', '')}" for t in gpu)
    return CheckResult("gpu-taints", title, Status.PASS, f"node {name} is tainted {listed}")


def _is_device_plugin(pod: Mapping[str, Any]) -> bool:
    metadata = pod.get("metadata", {})
    texts = [str(metadata.get("name", "")), *map(str, (metadata.get("labels") or {}).values())]
    texts += [str(container.get("image", "")) for container in pod.get("spec", {}).get("containers", []) or []]
    return any(marker in text for text in texts for marker in DEVICE_PLUGIN_MARKERS)


def check_device_plugin(pods: Mapping[str, Any], name: str) -> CheckResult:
    title = "NVIDIA device plugin on this node"
    found = [pod for pod in pods.get("items", []) or [] if _is_device_plugin(pod)]
    if not found:
        return CheckResult(
            "device-plugin",
            title,
            Status.FAIL,
            f"no NVIDIA device plugin pod runs on node {name}",
            "install the device plugin (or the GPU Operator) and check its DaemonSet's nodeSelector/tolerations",
        )
    for pod in found:
        status = pod.get("status", {})
        statuses = status.get("containerStatuses", []) or []
        if status.get("phase") == "Running" and statuses and all(item.get("ready") for item in statuses):
            namespace = pod.get("metadata", {}).get("namespace", "")
            return CheckResult(
                "device-plugin", title, Status.PASS, f"{namespace}/{pod['metadata']['name']} is running and ready"
            )
    first = found[0]
    return CheckResult(
        "device-plugin",
        title,
        Status.FAIL,
        f"{first.get('metadata', {}).get('name')} is {first.get('status', {}).get('phase', 'unknown')}, not ready",
        "kubectl describe pod / logs on it: the usual causes are a missing NVIDIA runtime or driver",
    )


def _connect(options: ClusterOptions, environ: Mapping[str, str]) -> tuple[CheckResult, ApiClient | None]:
    """The ``kubernetes-access`` result, and a client when the API server can be reached."""
    access_title = "Kubernetes API access"
    try:
        access: ApiAccess | None = discover(options.kubeconfig, options.service_account_dir, environ)
    except (ApiConfigError, OSError) as error:
        return CheckResult(
            "kubernetes-access", access_title, Status.FAIL, str(error), "fix or replace the kubeconfig"
        ), None
    if access is None:
        return CheckResult(
            "kubernetes-access",
            access_title,
            Status.WARN,
            "no in-cluster service account and no kubeconfig: node checks against the API were skipped",
            "run the doctor in the exporter's pod, or pass --kubeconfig",
        ), None
    try:
        client = ApiClient(access)
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
        return CheckResult("kubernetes-access", access_title, Status.FAIL, f"{access.source}: {error}"), None
    return CheckResult("kubernetes-access", access_title, Status.PASS, f"{access.source}, {access.server}"), client


def cluster_checks(options: ClusterOptions, environ: Mapping[str, str]) -> list[CheckResult]:
    access, client = _connect(options, environ)
    results = [access]
    if client is None:
        if options.gpu_test is not None:
            results.append(CheckResult(GPU_TEST_CHECK, GPU_TEST_TITLE, Status.SKIP, "no access to the API server"))
        return results
    name = options.node_name
    timeout = options.timeout_seconds
    try:
        node = client.get(f"/api/v1/nodes/{quote(name, safe='')}", timeout=timeout)
    except ApiError as error:
        results.append(_api_failure("node-allocatable", "allocatable nvidia.com/gpu", error, name))
        results.append(CheckResult("gpu-taints", "GPU taints", Status.SKIP, "the node could not be read"))
    else:
        results += [check_allocatable(node, name), check_taints(node, name)]
    try:
        pods = client.get("/api/v1/pods", {"fieldSelector": f"spec.nodeName={name}"}, timeout=timeout)
    except ApiError as error:
        results.append(_api_failure("device-plugin", "NVIDIA device plugin on this node", error, name))
    else:
        results.append(check_device_plugin(pods, name))
    if options.gpu_test is not None:
        results.append(check_gpu_test_pod(client, options.gpu_test))
    return results
