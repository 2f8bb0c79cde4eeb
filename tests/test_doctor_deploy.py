"""The doctor's deployment checks (issue 12, the rest of the runbook's checklist), through `nvidia_gpu_exporter
doctor` itself:

- ``--prometheus-url``: against a real Prometheus (one for the module) scraping the demo backend with the
  shipped rules and one rule that cannot evaluate: the target is up and the rules are healthy; a wrong job, a
  missing group, a broken rule and an unreachable Prometheus each fail with what to do.
- ``--gpu-test-pod``: against the fake API server on loopback, playing the kubelet's part through the pod's
  status: the runbook's gpu-test pod is created pinned to this node, succeeds, fails or never schedules
  (bounded by ``--gpu-test-timeout``), and is deleted whatever happened.

The Prometheus tests need Debian's prometheus in $PROMETHEUS_BIN_DIR (.ci/steps/40-kubernetes.sh) and skip
with a clear message without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_helpers import (
    PROBE_ERRORS,
    RULES_FILE,
    Server,
    binary,
    free_port,
    prometheus,
    scrape_config,
    wait_target_up,
)
from harness import Exporter, start_exporter
from k8s_fakes import FakeApiServer
from nvidia_gpu_exporter.doctor.gputest import GPU_TEST_POD
from nvidia_gpu_exporter.doctor.prometheus import PrometheusOptions, check_rules
from nvidia_gpu_exporter.doctor.report import CheckResult, Status
from polling import wait_until
from test_doctor import UNREACHABLE, run_doctor

NODE = "gpu-node-7"
TOKEN = "doctor-token"
NAMESPACE = "gpu-checks"
BROKEN_GROUP = "broken-rules"
# Many-to-many: with two GPUs, `on ()` matches two series on each side, so every evaluation errors.
BROKEN_RULE = {"record": "broken:temperature", "expr": "nvidia_smi_temperature_gpu + on () nvidia_smi_temperature_gpu"}


def doctor(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> dict[str, CheckResult]:
    """The doctor with no node to look at (an empty root, nothing to scrape) and the given checks."""
    _, results, _ = run_doctor(
        capsys, f"--root={tmp_path}", "--nvidia-smi-command=/bin/false", f"--exporter-url={UNREACHABLE}", *args
    )
    return results


# --- Prometheus -------------------------------------------------------------------------------------------------


@dataclass
class Live:
    prometheus: Server
    exporter: Exporter


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    binary("prometheus")
    handle = start_exporter(["--collect.backend=demo"])
    try:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yml", "broken.yml"],
            "scrape_configs": [scrape_config(handle.address)],
        }
        broken_rules = yaml.safe_dump({"groups": [{"name": BROKEN_GROUP, "rules": [BROKEN_RULE]}]})
        rule_files = {"rules.yml": RULES_FILE.read_text(encoding="utf-8"), "broken.yml": broken_rules}
        with prometheus(config, tmp_path_factory.mktemp("prometheus"), rule_files) as server:
            wait_target_up(server)
            shipped = PrometheusOptions(server.url, rule_groups=("nvidia-gpu-exporter",))
            broken = PrometheusOptions(server.url, rule_groups=(BROKEN_GROUP,))
            # A rule evaluated before the first scrape is healthy: wait for one evaluation on data.
            wait_until(
                lambda: (check_rules(shipped).status, check_rules(broken).status) == (Status.PASS, Status.FAIL),
                "the shipped rules to be evaluated and the broken one to fail on data",
                timeout=60,
                interval=0.5,
                ignoring=PROBE_ERRORS,
            )
            yield Live(server, handle)
    finally:
        handle.stop()


def test_prometheus_scrapes_the_exporter_and_its_rules_are_healthy(
    live: Live, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    results = doctor(capsys, tmp_path, "--no-kubernetes", f"--prometheus-url={live.prometheus.url}")
    assert results["prometheus-target"].status is Status.PASS, results["prometheus-target"]
    assert results["prometheus-target"].detail == "1 target(s) of job 'nvidia-gpu-exporter' up"
    assert results["prometheus-rules"].status is Status.PASS, results["prometheus-rules"]
    assert results["prometheus-rules"].detail.startswith("nvidia-gpu-exporter: ")
    assert results["prometheus-rules"].detail.endswith("rule(s) loaded and healthy")


def test_a_wrong_job_a_missing_group_and_a_broken_rule_fail_with_a_remedy(
    live: Live, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"--prometheus-url={live.prometheus.url}"
    results = doctor(capsys, tmp_path, "--no-kubernetes", url, "--prometheus-job=gpu", "--prometheus-rule-group=gpus")
    target, rules = results["prometheus-target"], results["prometheus-rules"]
    assert (target.status, rules.status) == (Status.FAIL, Status.FAIL)
    assert target.detail == "no active target of job 'gpu' (jobs: nvidia-gpu-exporter)"
    assert "serviceMonitor" in target.remedy
    assert rules.detail == "no rule group named gpus is loaded"
    assert "rule_files" in rules.remedy
    broken = doctor(capsys, tmp_path, "--no-kubernetes", url, f"--prometheus-rule-group={BROKEN_GROUP}")
    rules = broken["prometheus-rules"]
    assert rules.status is Status.FAIL
    assert rules.detail.startswith("1 rule(s) fail to evaluate: broken:temperature: ")
    assert "found duplicate series" in rules.detail


def test_an_unreachable_prometheus_fails_both_checks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    results = doctor(capsys, tmp_path, "--no-kubernetes", f"--prometheus-url={url}", "--timeout=2")
    for check in ("prometheus-target", "prometheus-rules"):
        assert results[check].status is Status.FAIL
        assert results[check].detail.startswith(f"{url}/api/v1/"), results[check]
        assert results[check].remedy == "check --prometheus-url"


def test_without_a_prometheus_url_there_is_no_prometheus_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    results = doctor(capsys, tmp_path, "--no-kubernetes")
    assert "prometheus-target" not in results
    assert "prometheus-rules" not in results


# --- the gpu-test pod -------------------------------------------------------------------------------------------


@dataclass
class FakeCluster:
    """The API server's side of one gpu-test pod: what was created, the phases it reports, whether it was deleted."""

    phases: list[dict[str, Any]]
    create_status: int = 201
    created: list[dict[str, Any]] | None = None
    deleted: bool = False

    def __call__(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        if method == "POST" and path == pods:
            if self.create_status != 201:
                return self.create_status, {"kind": "Status", "message": 'pods is forbidden: cannot create "pods"'}
            self.created = [*(self.created or []), body]
            return 201, {**body, "metadata": {**body["metadata"], "name": "gpu-test-x7k2p"}}
        if path == f"{pods}/gpu-test-x7k2p":
            if method == "DELETE":
                self.deleted = True
                return 200, {"kind": "Pod"}
            status = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
            return 200, {"kind": "Pod", "status": status}
        return None


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(TOKEN).start()
    yield server
    server.stop()


def gpu_test(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer, fake: FakeCluster, timeout: str = "10"
) -> CheckResult:
    api.handler = fake
    results = doctor(
        capsys,
        tmp_path,
        f"--kubeconfig={api.kubeconfig(tmp_path / 'kubeconfig')}",
        f"--node-name={NODE}",
        "--gpu-test-pod",
        f"--gpu-test-namespace={NAMESPACE}",
        f"--gpu-test-timeout={timeout}",
    )
    return results["gpu-test-pod"]


PENDING = {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}


def test_the_gpu_test_pod_is_created_on_this_node_succeeds_and_is_deleted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer
) -> None:
    fake = FakeCluster([PENDING, {"phase": "Succeeded"}])
    result = gpu_test(capsys, tmp_path, api, fake)
    assert result.status is Status.PASS, result
    assert result.detail == f"gpu-test-x7k2p ran nvidia-smi on node {NODE} and succeeded"
    assert fake.created is not None
    (pod,) = fake.created
    assert pod["metadata"]["generateName"] == "gpu-test-"
    assert pod["spec"]["containers"] == GPU_TEST_POD["spec"]["containers"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
    }
    assert fake.deleted


def test_a_failed_gpu_test_pod_names_the_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer
) -> None:
    terminated = {"terminated": {"exitCode": 9, "reason": "Error"}}
    fake = FakeCluster([PENDING, {"phase": "Failed", "containerStatuses": [{"state": terminated}]}])
    result = gpu_test(capsys, tmp_path, api, fake)
    assert result.status is Status.FAIL
    assert result.detail == "gpu-test-x7k2p failed: nvidia-smi exited 9 (Error)"
    assert result.remedy.startswith(f"kubectl logs gpu-test-x7k2p -n {NAMESPACE}")
    assert fake.deleted


def test_an_unschedulable_gpu_test_pod_fails_after_the_timeout_with_the_schedulers_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer
) -> None:
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    unscheduled = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": message}]}
    fake = FakeCluster([unscheduled])
    result = gpu_test(capsys, tmp_path, api, fake, timeout="1.5")
    assert result.status is Status.FAIL
    assert result.detail == f"gpu-test-x7k2p did not finish within 1.5s: not scheduled: {message}"
    assert "nvidia.com/gpu" in result.remedy
    assert fake.deleted


def test_a_forbidden_gpu_test_pod_names_the_rbac_it_needs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer
) -> None:
    fake = FakeCluster([PENDING], create_status=403)
    result = gpu_test(capsys, tmp_path, api, fake)
    assert result.status is Status.FAIL
    assert result.detail.startswith(f"cannot create the pod in namespace {NAMESPACE!r}: ")
    assert "create, get and delete on pods" in result.remedy
    assert ("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/gpu-test-x7k2p") not in api.calls


def test_without_the_flag_no_pod_is_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api: FakeApiServer
) -> None:
    api.handler = FakeCluster([PENDING])
    results = doctor(capsys, tmp_path, f"--kubeconfig={api.kubeconfig(tmp_path / 'kubeconfig')}", f"--node-name={NODE}")
    assert "gpu-test-pod" not in results
    assert [call for call in api.calls if call[0] != "GET"] == []
