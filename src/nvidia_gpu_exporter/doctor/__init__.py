"""``nvidia_gpu_exporter doctor``: the GPU node checklist of the runbook, as one command.

Each check prints PASS, WARN, FAIL (or SKIP when a prerequisite is missing) with a one-line remedy.
Two opt-in groups cover the rest of the runbook's checklist: ``--prometheus-url`` (Prometheus scrapes the
exporter, its rules are loaded and healthy) and ``--gpu-test-pod`` (the runbook's gpu-test pod schedules onto
this node and succeeds; it creates a pod, so it is never run unasked).
Exit status: 0 all good, 1 warnings, 2 failures, 3 the doctor's own arguments are wrong. ``--json``
prints the same as a document for scripts; ``--root`` points every file check at another directory
(the host's filesystem mounted in a pod, or a fake node in tests).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from nvidia_gpu_exporter.config import DEFAULT_NVIDIA_SMI_COMMAND
from nvidia_gpu_exporter.doctor.cluster import ClusterOptions, cluster_checks
from nvidia_gpu_exporter.doctor.gputest import GpuTestOptions
from nvidia_gpu_exporter.doctor.node import DEFAULT_EXPORTER_URL, NodeOptions, node_checks
from nvidia_gpu_exporter.doctor.prometheus import DEFAULT_JOB, DEFAULT_RULE_GROUPS, PrometheusOptions, prometheus_checks
from nvidia_gpu_exporter.doctor.report import CheckResult, exit_code, render_json, render_text
from nvidia_gpu_exporter.flags import DOCTOR_DESCRIPTION
from nvidia_gpu_exporter.kubernetes.apiclient import SERVICE_ACCOUNT_DIR
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_SOCKET

USAGE_ERROR = 3


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a bad argument, which would read as "failures": raise instead."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser(environ: Mapping[str, str]) -> _Parser:
    parser = _Parser(
        prog="nvidia_gpu_exporter doctor",
        description=DOCTOR_DESCRIPTION,
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--root", default="/", help="look up every file under this directory (default: /)")
    parser.add_argument(
        "--nvidia-smi-command", default=DEFAULT_NVIDIA_SMI_COMMAND, help="nvidia-smi, as the exporter runs it"
    )
    parser.add_argument(
        "--image-cuda",
        default=environ.get("CUDA_VERSION", ""),
        help="warn when this CUDA version (an image's; default: $CUDA_VERSION) is newer than the driver's",
    )
    parser.add_argument(
        "--kubernetes.pod-resources-socket",
        dest="pod_resources_socket",
        default=DEFAULT_SOCKET,
        help="the kubelet PodResources socket (looked up under --root)",
    )
    parser.add_argument("--exporter-url", default=DEFAULT_EXPORTER_URL, help="the exporter to scrape")
    parser.add_argument("--kubeconfig", default="", help="kubeconfig to use instead of the in-cluster account")
    parser.add_argument("--service-account-dir", default=SERVICE_ACCOUNT_DIR, help=argparse.SUPPRESS)
    parser.add_argument(
        "--node-name",
        default=environ.get("NODE_NAME", "") or socket.gethostname(),
        help="this node's name in Kubernetes (default: $NODE_NAME, else the hostname)",
    )
    parser.add_argument("--no-kubernetes", action="store_true", help="skip the checks against the API server")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds allowed for each probe (default: 5)")
    parser.add_argument("--prometheus-url", default="", help="check that this Prometheus scrapes the exporter")
    parser.add_argument(
        "--prometheus-job", default=DEFAULT_JOB, help=f"the exporter's scrape job there (default: {DEFAULT_JOB})"
    )
    parser.add_argument(
        "--prometheus-rule-group",
        dest="prometheus_rule_groups",
        action="append",
        help=f"a rule group of the exporter's, repeatable (default: {', '.join(DEFAULT_RULE_GROUPS)})",
    )
    parser.add_argument(
        "--gpu-test-pod", action="store_true", help="create the runbook's gpu-test pod on this node and wait for it"
    )
    parser.add_argument("--gpu-test-namespace", default="default", help="its namespace (default: default)")
    parser.add_argument(
        "--gpu-test-timeout", type=float, default=120.0, help="seconds it may take to finish (default: 120)"
    )
    return parser


def run_checks(arguments: argparse.Namespace, environ: Mapping[str, str]) -> list[CheckResult]:
    node = NodeOptions(
        root=Path(arguments.root),
        nvidia_smi_command=arguments.nvidia_smi_command,
        image_cuda=arguments.image_cuda,
        pod_resources_socket=arguments.pod_resources_socket,
        exporter_url=arguments.exporter_url,
        timeout_seconds=arguments.timeout,
    )
    results = node_checks(node)
    if not arguments.no_kubernetes:
        gpu_test = None
        if arguments.gpu_test_pod:
            gpu_test = GpuTestOptions(
                node_name=arguments.node_name,
                namespace=arguments.gpu_test_namespace,
                timeout_seconds=arguments.gpu_test_timeout,
                request_timeout_seconds=arguments.timeout,
            )
        cluster = ClusterOptions(
            node_name=arguments.node_name,
            kubeconfig=arguments.kubeconfig,
            service_account_dir=arguments.service_account_dir,
            timeout_seconds=arguments.timeout,
            gpu_test=gpu_test,
        )
        results += cluster_checks(cluster, environ)
    if arguments.prometheus_url:
        groups = tuple(arguments.prometheus_rule_groups or DEFAULT_RULE_GROUPS)
        prometheus = PrometheusOptions(arguments.prometheus_url, arguments.prometheus_job, groups, arguments.timeout)
        results += prometheus_checks(prometheus)
    return results


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Run the checklist; returns the exit status."""
    environ = os.environ if environ is None else environ
    try:
        arguments = _parser(environ).parse_args(list(argv))
    except _UsageError as error:
        sys.stderr.write(f"nvidia_gpu_exporter doctor: {error}\n")
        return USAGE_ERROR
    if arguments.timeout <= 0 or arguments.gpu_test_timeout <= 0:
        sys.stderr.write("nvidia_gpu_exporter doctor: --timeout and --gpu-test-timeout must be positive\n")
        return USAGE_ERROR
    results = run_checks(arguments, environ)
    sys.stdout.write(render_json(results) if arguments.json else render_text(results))
    return exit_code(results)
