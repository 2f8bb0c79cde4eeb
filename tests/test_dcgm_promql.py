"""PromQL written by others against dcgm-exporter returns data from this exporter (issue 27, "Done when").

tests/fixtures/dcgm-exporter/promql.yaml holds the expressions, each with its source, the dcgm-exporter
generation it was written for and, where it cannot answer here, the reason. Per generation, one cluster of two
"nodes" runs under `--metrics.profile=dcgm --dcgm.compatibility=<generation>`: the demo backend (a MIG GPU and
a whole one) and the nvml backend on the fake libnvidia-ml (an H200 whose NVML GPM gives the DCGM_FI_PROF_*
ratios), each with a counters file of the generation's default fields plus the ones no default file lists that
the expressions read (ADDED_FIELDS: max clocks, the power limit, FB_TOTAL, fan speed). Both read a fake kubelet,
which gives one GPU of each node to a pod, and a real Prometheus scrapes them as dcgm-exporter's Helm chart has it
scraped: a ServiceMonitor's target (job `dcgm-exporter`, `instance` the pod's address on port 9400, the scraped
pod's own `namespace`/`pod`/`container`/`service`/`endpoint` target labels) with honor_labels false, so the
exporter's pod labels arrive as `exported_*`.

The live tests are slow (a cluster per generation) and need Debian's prometheus in $PROMETHEUS_BIN_DIR, grpcio
(the `kubernetes` extra) and a C compiler: .ci/steps/40-kubernetes.sh installs them and runs them; elsewhere they
skip with a message naming what is missing.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_helpers import PROBE_ERRORS, Server, binary, prometheus, query, wait_target_up
from harness import REPO, Exporter, start_exporter
from k8s_fakes import FakeKubelet, require_grpc, short_socket_dir
from nvidia_gpu_exporter.exposition.dcgm import LISTED_ONLY_FAMILIES, default_families
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvml_fixtures import ControlFile, FakeNvmlLibrary
from polling import wait_until
from test_dashboards import substitute

FIXTURE = REPO / "tests" / "fixtures" / "dcgm-exporter" / "promql.yaml"
JOB = "dcgm-exporter"  # the job a ServiceMonitor of dcgm-exporter's chart (release "dcgm-exporter") gives
NODE = "gpu-node-1"
# The two nodes' dcgm-exporter pods as Kubernetes service discovery labels them: `instance` is the pod's IP and
# container port, and the pod/namespace/container target labels are the exporter pod's own.
DEMO_INSTANCE = "10.0.0.7:9400"
NVML_INSTANCE = "10.0.0.8:9400"
WORKLOAD_NAMESPACE = "ml"
DATA_TIMEOUT = 60.0
# What each tool puts in for a template variable: Grafana's `All` of 12239's multi-value variables (a regex of
# every value), the console plugin's selected GPU and project, OpenCost's window and cluster label (its
# defaults), the Data on EKS dashboard's textbox and constants.
STATIC_VARIABLES = {
    "instance": f"({re.escape(DEMO_INSTANCE)}|{re.escape(NVML_INSTANCE)})".replace("\\", "\\\\"),
    "gpu": "(0|1)",
    "project": WORKLOAD_NAMESPACE,
    "namespace": WORKLOAD_NAMESPACE,
    "window": "5m",
    "cluster_label": "cluster_id",
    "dcgm_scrape_seconds": "30",
    "gpu_hourly_rate": "2.24208",
}
# DeepOps repeats its row for each value of $hostname (every instance, without its port): a panel has data when
# one of its rows has.
REPEATED = {"hostname": [instance.removesuffix(":9400") for instance in (DEMO_INSTANCE, NVML_INSTANCE)]}
DEMO_CONFIG = {"extras": {"mig": [{"gpu": 0, "instances": [{"gi": 2, "profile": "3g.71gb", "cis": 2, "busy": True}]}]}}
_COMMIT = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} \S+")
# dcgm-exporter serves a field only when its counters file lists it, and no default file lists these: the
# tools that read them are run as their operators run dcgm-exporter, with a counters file that adds them to the
# generation's default fields.
ADDED_FIELDS = (
    "DCGM_FI_DEV_MAX_SM_CLOCK",
    "DCGM_FI_DEV_MAX_MEM_CLOCK",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
    "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_DEV_FAN_SPEED",
)


class NoData(Exception):
    """The expression evaluated, and returned an empty result."""


def entries() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
    return loaded


def entry_id(index: int, entry: dict[str, Any]) -> str:
    owner_repo = entry["source"].split("@", 1)[0].split("/", 1)[1]
    return f"{index:02d}-{owner_repo}-{entry['generation']}"


def params() -> list[Any]:
    found = []
    for index, entry in enumerate(entries()):
        marks = []
        if "unavailable" in entry:
            marks.append(pytest.mark.xfail(strict=True, raises=NoData, reason=entry["unavailable"]))
        found.append(pytest.param(entry, id=entry_id(index, entry), marks=marks))
    return found


# --- the fixture file itself ------------------------------------------------------------------------------------


def test_every_expression_names_its_source_and_generation() -> None:
    generations = {generation.value for generation in Generation}
    for entry in entries():
        assert set(entry) <= {"source", "generation", "expr", "pods", "operand", "nonzero", "unavailable"}, entry
        assert _COMMIT.match(entry["source"]), entry["source"]
        assert entry["generation"] in generations, entry
        assert ("exported_" in entry["expr"]) is (entry.get("pods") == "exported"), entry
        assert entry.get("operand", "") in entry["expr"], entry
        assert entry.get("nonzero", False) is entry["expr"].endswith("or vector(0)"), entry
        assert entry.get("unavailable", "x").strip(), entry


def test_at_least_fifty_distinct_expressions_must_return_data() -> None:
    answering = {entry["expr"] for entry in entries() if "unavailable" not in entry}
    assert len(answering) >= 50, len(answering)


def test_the_fixtures_summary_counts_what_it_holds() -> None:
    """The header's numbers are the file's: expressions, those that must answer, distinct texts among them."""
    header = FIXTURE.read_text(encoding="utf-8").split("\n- source:", 1)[0]
    total = re.search(r"# (\d+) expressions from", header)
    answering = re.search(r"Every other expression \((\d+), of which (\d+) distinct", header)
    assert total, header
    assert answering, header
    unavailable = [entry for entry in entries() if "unavailable" in entry]
    expected = {entry["expr"] for entry in entries() if "unavailable" not in entry}
    assert int(total.group(1)) == len(entries())
    assert int(answering.group(1)) == len(entries()) - len(unavailable)
    assert int(answering.group(2)) == len(expected)


# --- against a real Prometheus ----------------------------------------------------------------------------------


@dataclass
class Cluster:
    prometheus: Server
    variables: dict[str, str]


def scrape_target(address: str, instance: str, pod: str) -> dict[str, Any]:
    """One dcgm-exporter pod as a ServiceMonitor of its chart makes it a target."""
    labels = {
        "instance": instance,
        "namespace": "gpu-operator",
        "pod": pod,
        "container": "exporter",
        "service": JOB,
        "endpoint": "metrics",
    }
    return {"targets": [address], "labels": labels}


def whole_gpu_uuid(exporter: Exporter) -> str:
    """The UUID of the first GPU the exporter serves that is not in MIG mode."""
    for line in exporter.scrape().splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{") and "GPU_I_ID" not in line:
            found = re.search(r'UUID="([^"]+)"', line)
            assert found, line
            return found.group(1)
    raise AssertionError(f"no whole GPU in {exporter.address}'s DCGM_FI_DEV_GPU_TEMP")


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory, fake_nvml_library: FakeNvmlLibrary
) -> Iterator[Callable[[str], Cluster]]:
    """A cluster per generation, started when a test first asks for it and kept to the module's end (a
    parametrized module fixture would be set up again for every expression: its cache is keyed by the
    parameter's position, not its value)."""
    binary("prometheus")
    require_grpc()
    with ExitStack() as stack:
        started: dict[str, Cluster] = {}

        def cluster_of(generation: str) -> Cluster:
            if generation not in started:
                started[generation] = stack.enter_context(
                    running_cluster(generation, tmp_path_factory, fake_nvml_library)
                )
            return started[generation]

        yield cluster_of


def counters_file(generation: str, path: Path) -> Path:
    """The generation's default fields (its label field too) and ADDED_FIELDS, as a counters file."""
    listed = [family for family in LISTED_ONLY_FAMILIES if family.name in ADDED_FIELDS]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for family in (*default_families(Generation(generation)), *listed):
        writer.writerow([family.name, family.metric_type, family.help])
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


@contextmanager
def running_cluster(
    generation: str, tmp_path_factory: pytest.TempPathFactory, fake_nvml_library: FakeNvmlLibrary
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp(f"dcgm-promql-{generation}")
    demo_config = workdir / "demo.yaml"
    demo_config.write_text(yaml.safe_dump(DEMO_CONFIG), encoding="utf-8")
    quiet_log = workdir / "kmsg"  # this machine's own kernel log must not add XIDs
    quiet_log.write_text("")
    control = ControlFile(workdir / "fake-nvml-control")
    control.send("gpmdev 0 45.5 12.5 30")  # percent; the fake reads it at nvmlInit
    with ExitStack() as stack, short_socket_dir() as sockets:
        kubelet = FakeKubelet(sockets / "kubelet.sock").start()
        stack.callback(kubelet.stop)
        common = [
            "--metrics.profile=dcgm",
            f"--dcgm.compatibility={generation}",
            f"--dcgm.collectors={counters_file(generation, workdir / 'counters.csv')}",
            f"--collect.kernel-log={quiet_log}",
            "--kubernetes.pod-resources",
            f"--kubernetes.pod-resources-socket={kubelet.path}",
            "--kubernetes.pod-resources-cache=0s",
            "--kubernetes.pod-labels",
        ]
        env = {"NODE_NAME": NODE}
        demo = start_exporter(["--collect.backend=demo", f"--demo-config={demo_config}", *common], env=env)
        stack.callback(demo.stop)
        nvml = start_exporter(
            ["--collect.backend=nvml", "--collect.xid-source=nvml", *common],
            env={**env, **fake_nvml_library.env("h200", control=control.path)},
        )
        stack.callback(nvml.stop)
        nvml_uuid = whole_gpu_uuid(nvml)
        kubelet.set(
            [
                (WORKLOAD_NAMESPACE, "trainer-0", "trainer", "nvidia.com/gpu", [whole_gpu_uuid(demo)]),
                (WORKLOAD_NAMESPACE, "server-0", "server", "nvidia.com/gpu", [nvml_uuid]),
            ]
        )
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "honor_labels": False,
                    "scrape_interval": "1s",
                    "scrape_timeout": "1s",
                    "static_configs": [
                        scrape_target(demo.address, DEMO_INSTANCE, "dcgm-exporter-7xk2p"),
                        scrape_target(nvml.address, NVML_INSTANCE, "dcgm-exporter-q9z4m"),
                    ],
                }
            ],
        }
        server = stack.enter_context(prometheus(config, workdir / "prometheus"))
        wait_target_up(server, JOB)
        # Both nodes' workload pods, and a few scrapes of each (the range queries need more than one sample).
        wait_until(
            lambda: (
                len(query(server, 'DCGM_FI_DEV_GPU_TEMP{exported_pod!=""}')["data"]["result"]) == 2
                and len(query(server, f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3')["data"]["result"]) == 2
            ),
            "both nodes' pod-labelled series, three scrapes each",
            timeout=DATA_TIMEOUT,
            interval=0.5,
            ignoring=PROBE_ERRORS,
        )
        # The console plugin selects a GPU from the DCGM_FI_PROF_GR_ENGINE_ACTIVE series: the H200's.
        yield Cluster(server, {**STATIC_VARIABLES, "uuid": nvml_uuid})


def expand(expr: str, variables: dict[str, str]) -> list[str]:
    """The expression with its variables put in: once per value of a repeated one it uses, else once."""
    for name, values in REPEATED.items():
        if f"${name}" in expr:
            return [substitute(expr, {**variables, name: value}) for value in values]
    return [substitute(expr, variables)]


def answer(cluster: Cluster, expr: str, *, patient: bool) -> list[dict[str, Any]]:
    """The first non-empty result of the expression's expansions; NoData where all stay empty (at once, or after
    DATA_TIMEOUT when ``patient``)."""

    def evaluate() -> list[dict[str, Any]]:
        for expanded in expand(expr, cluster.variables):
            reply = query(cluster.prometheus, expanded)
            assert reply["status"] == "success", (expanded, reply)
            result: list[dict[str, Any]] = reply["data"]["result"]
            if result:
                return result
        return []

    if not patient:
        found = evaluate()
    else:
        try:
            found = wait_until(evaluate, f"data for {expr}", timeout=DATA_TIMEOUT, interval=1.0, ignoring=PROBE_ERRORS)
        except AssertionError as error:
            if "timed out" not in str(error):
                raise
            found = []
    if not found:
        raise NoData(f"no data for {expr}")
    return found


@pytest.mark.slow
def test_the_data_check_can_fail(clusters: Callable[[str], Cluster]) -> None:
    live = clusters("4.8")
    assert answer(live, "DCGM_FI_DEV_GPU_TEMP", patient=False)
    with pytest.raises(NoData):
        answer(live, "DCGM_FI_DEV_GPU_TEMPERATURE", patient=False)
    with pytest.raises(AssertionError):
        answer(live, "sum(DCGM_FI_DEV_GPU_TEMP", patient=False)


@pytest.mark.slow
@pytest.mark.parametrize("entry", params())
def test_expression_returns_data(clusters: Callable[[str], Cluster], entry: dict[str, Any]) -> None:
    live = clusters(entry["generation"])
    if "operand" in entry:
        # An alert whose threshold a healthy GPU does not cross: the series it compares must be there.
        answer(live, entry["operand"], patient="unavailable" not in entry)
        for expr in expand(entry["expr"], live.variables):
            reply = query(live.prometheus, expr)
            assert reply["status"] == "success", reply
        return
    result = answer(live, entry["expr"], patient="unavailable" not in entry)
    if entry.get("nonzero"):
        assert any(float(sample["value"][1]) != 0 for sample in result), result


@pytest.mark.slow
def test_pod_labels_arrive_as_exported_labels(clusters: Callable[[str], Cluster]) -> None:
    """The chart's scrape: the workload's pod labels as exported_*, the exporter pod's own as pod/namespace."""
    live = clusters("4.8")
    result = answer(live, 'DCGM_FI_DEV_GPU_TEMP{exported_pod="trainer-0"}', patient=False)
    (series,) = result
    labels = series["metric"]
    assert (labels["exported_namespace"], labels["exported_container"]) == (WORKLOAD_NAMESPACE, "trainer")
    assert (labels["namespace"], labels["pod"], labels["job"]) == ("gpu-operator", "dcgm-exporter-7xk2p", JOB)
    assert labels["instance"] == DEMO_INSTANCE
