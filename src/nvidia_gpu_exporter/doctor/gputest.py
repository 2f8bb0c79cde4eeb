"""The runbook's `gpu-test` pod, and the doctor's check that it schedules onto this node and succeeds.

The pod (deploy/kubernetes/gpu-test-pod.yaml is this object, a test keeps them equal) runs ``nvidia-smi`` once
in a CUDA base image on one requested ``nvidia.com/gpu``: it proves the device plugin hands out a GPU, the
NVIDIA runtime injects the driver, and the GPU answers, which the exporter (requesting no GPU) cannot. It meets
the restricted Pod Security Standard, so it runs in any namespace.

The check is opt-in (``--gpu-test-pod``): it creates a pod, takes a GPU for a few seconds and needs ``create``,
``get`` and ``delete`` on pods in its namespace, beyond the chart's read-only doctor RBAC. It pins the pod to
this node by node affinity (the scheduler still decides, so "does not fit" is seen), waits a bounded time for it
to finish, and deletes it whatever happened.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from nvidia_gpu_exporter.doctor.report import CheckResult, Status
from nvidia_gpu_exporter.kubernetes.apiclient import ApiClient, ApiError

CHECK = "gpu-test-pod"
TITLE = "a gpu-test pod schedules and runs nvidia-smi"
GPU_TEST_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "gpu-test",
        "labels": {"app.kubernetes.io/name": "gpu-test", "app.kubernetes.io/part-of": "nvidia-gpu-exporter"},
    },
    "spec": {
        "restartPolicy": "Never",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "cuda",
                "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["nvidia-smi"],
                "resources": {"limits": {"nvidia.com/gpu": 1}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                },
            }
        ],
    },
}
RBAC_REMEDY = "grant create, get and delete on pods in that namespace (or run the doctor with your own kubeconfig)"


@dataclass(frozen=True, slots=True)
class GpuTestOptions:
    node_name: str
    namespace: str = "default"
    timeout_seconds: float = 120.0
    poll_seconds: float = 1.0
    request_timeout_seconds: float = 5.0


def pod_for(node_name: str) -> dict[str, Any]:
    """The gpu-test pod with a generated name and a required affinity to this node (matched by name)."""
    pod = copy.deepcopy(GPU_TEST_POD)
    pod["metadata"]["generateName"] = pod["metadata"].pop("name") + "-"
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    return pod


def _waiting(pod: dict[str, Any]) -> str:
    """Why a pod is not done: the scheduler's message, or the container's waiting reason."""
    status = pod.get("status", {}) or {}
    for condition in status.get("conditions", []) or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason', '')}"
    for container in status.get("containerStatuses", []) or []:
        waiting = (container.get("state", {}) or {}).get("waiting")
        if waiting:
            return f"container waiting: {waiting.get('reason', '')} {waiting.get('message', '')}".rstrip()
    return f"phase {status.get('phase', 'unknown')}"


def _failure(pod: dict[str, Any]) -> str:
    for container in (pod.get("status", {}) or {}).get("containerStatuses", []) or []:
        terminated = (container.get("state", {}) or {}).get("terminated")
        if terminated:
            return f"nvidia-smi exited {terminated.get('exitCode')} ({terminated.get('reason', '')})"
    return str((pod.get("status", {}) or {}).get("message", "the pod failed"))


def check_gpu_test_pod(client: ApiClient, options: GpuTestOptions) -> CheckResult:
    """Create the pod, poll it until it succeeds, fails or the time is up, and delete it."""
    pods = f"/api/v1/namespaces/{quote(options.namespace, safe='')}/pods"
    request_timeout = options.request_timeout_seconds
    try:
        created = client.request("POST", pods, body=pod_for(options.node_name), timeout=request_timeout)
    except ApiError as error:
        remedy = RBAC_REMEDY if error.status in (401, 403) else "check the namespace and the API server"
        where = f"in namespace {options.namespace!r}"
        return CheckResult(CHECK, TITLE, Status.FAIL, f"cannot create the pod {where}: {error}", remedy)
    name = str(created.get("metadata", {}).get("name", ""))
    path = f"{pods}/{quote(name, safe='')}"
    try:
        return _wait(client, path, name, options)
    finally:
        # The result already says what happened; a pod that could not be deleted is named in it.
        with contextlib.suppress(ApiError):
            client.request("DELETE", path, timeout=request_timeout)


def _wait(client: ApiClient, path: str, name: str, options: GpuTestOptions) -> CheckResult:
    deadline = time.monotonic() + options.timeout_seconds
    state = "never read"
    for _ in range(math.ceil(options.timeout_seconds / options.poll_seconds) + 1):
        try:
            pod = client.get(path, timeout=options.request_timeout_seconds)
        except ApiError as error:
            state = f"cannot read it: {error}"
        else:
            phase = (pod.get("status", {}) or {}).get("phase")
            if phase == "Succeeded":
                return CheckResult(
                    CHECK, TITLE, Status.PASS, f"{name} ran nvidia-smi on node {options.node_name} and succeeded"
                )
            if phase == "Failed":
                return CheckResult(
                    CHECK,
                    TITLE,
                    Status.FAIL,
                    f"{name} failed: {_failure(pod)}",
                    f"kubectl logs {name} -n {options.namespace}: a driver or runtime problem on the node",
                )
            state = _waiting(pod)
        if time.monotonic() >= deadline:
            break
        time.sleep(options.poll_seconds)
    return CheckResult(
        CHECK,
        TITLE,
        Status.FAIL,
        f"{name} did not finish within {options.timeout_seconds:g}s: {state}",
        "no allocatable nvidia.com/gpu free on this node, a taint without toleration, or a slow image pull"
        " (raise --gpu-test-timeout)",
    )
