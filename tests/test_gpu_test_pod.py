"""The runbook's `gpu-test` pod (deploy/kubernetes/gpu-test-pod.yaml): a CUDA base image that runs nvidia-smi
once on one requested GPU. It validates strictly against every Kubernetes version the chart is checked with,
meets the restricted Pod Security Standard, and is exactly the pod the doctor's `gpu-test-pod` check creates
(nvidia_gpu_exporter.doctor.gputest), so the file and the check cannot drift. kubernetes-validate is installed
by .ci/steps/40-kubernetes.sh; the validation skips with a clear message without it."""

from __future__ import annotations

from typing import Any

import yaml

from deploy_helpers import DEPLOY, KUBERNETES_VERSIONS, kubernetes_validate, requests_a_gpu, restricted_violations
from nvidia_gpu_exporter.doctor.gputest import GPU_TEST_POD

MANIFEST = DEPLOY / "kubernetes" / "gpu-test-pod.yaml"


def manifest() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return document


def test_the_manifest_is_the_runbooks_gpu_test_pod() -> None:
    pod = manifest()
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["name"]) == ("v1", "Pod", "gpu-test")
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["image"].startswith("nvidia/cuda:12.")
    assert container["image"].endswith("-base-ubuntu22.04")
    assert container["command"] == ["nvidia-smi"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert requests_a_gpu(spec)
    assert restricted_violations(spec) == []


def test_the_manifest_is_the_pod_the_doctor_creates() -> None:
    assert manifest() == GPU_TEST_POD


def test_the_manifest_validates_for_every_kubernetes_version() -> None:
    validator = kubernetes_validate()
    for version in KUBERNETES_VERSIONS:
        validator.validate(manifest(), version, strict=True)
