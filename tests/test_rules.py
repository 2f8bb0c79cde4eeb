"""Alert rules: the standalone file equals the chart's PrometheusRule, promtool checks and unit-tests every rule
(each fires on what it watches and stays quiet on a healthy host), and the annotations state the action.

promtool comes from $PROMETHEUS_BIN_DIR (Debian's prometheus package, unpacked by .ci/steps/40-kubernetes.sh);
the chart comparisons need helm-python-sdk. Tests skip with a clear message where either is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from deploy_helpers import (
    JOB,
    RULE_TESTS,
    RULES_FILE,
    alert_names,
    binary,
    render_chart,
    strip_annotations,
)
from exposition_reader import series
from harness import MIG_FIXTURE, REPO, fake_smi_command
from nvidia_gpu_exporter.model.verdicts import Action
from nvidia_gpu_exporter.model.xids import Severity, codes_of
from sysfs_fakes import gpu, make_sysfs, remove_function

RULE_TEMPLATE = "nvidia-gpu-exporter/templates/prometheusrule.yaml"
# What each alert's description must tell the on-call person to do (or where to look).
ACTIONS = {
    "NvidiaGpuExporterDown": ["exporter pod", "NetworkPolicy"],
    "NvidiaGpuExporterCollectionFailing": ["run nvidia-smi on the node", "drain the node and reboot"],
    "NvidiaGpuExporterCollectionStale": ["drain the node and reboot"],
    "NvidiaGpuExporterCollectionSlow": ["persistence", "drain and reboot"],
    "NvidiaGpuTemperatureHigh": ["cooling", "power limit"],
    "NvidiaGpuMemoryNearlyFull": ["out-of-memory", "leaked or orphaned jobs"],
    "NvidiaGpuRecoveryActionNeeded": ["1 = reset the GPU", "2 = reboot the node", "Cordon the node"],
    "NvidiaGpuXidCritical": ["Xid 79", "reseat", "Drain the GPU", "RMA"],
    "NvidiaGpuXidWarning": ["Restart the affected job", "reset the GPU", "RMA"],
    "NvidiaGpuUncorrectableEccErrors": ["Drain the GPU", "RMA"],
    "NvidiaGpuRowRemapFailure": ["RMA"],
    "NvidiaGpuRowRemapPending": ["reset it"],
    "NvidiaGpuRetiredPagesPending": ["reboot"],
    "NvidiaGpuThermalSlowdown": ["airflow", "reseat the heatsink"],
    "NvidiaGpuPowerBrake": ["PSU", "BMC"],
    "NvidiaGpuSoftwareThermalSlowdown": ["cooling", "power limit"],
    "NvidiaGpuAllocatedButIdle": ["release the GPU", "time-slicing or MIG"],
    "NvidiaGpuMissing": ["Xid 79", "reseat the GPU", "RMA"],
    "NvidiaGpuFewerThanExpected": ["lspci -k", "vfio-pci", "fallen off the bus", "Xid 79", "RMA"],
    "NvidiaGpuPciDeviceNotVisible": ["lspci -k", "vfio-pci", "fallen off the bus", "Xid 79", "reseat", "RMA"],
    "NvidiaGpuFallenOffBus": ["Drain the node and reboot it", "seating", "RMA"],
    "NvidiaGpuExporterKernelLogUnreadable": ["/dev/kmsg", "CAP_SYSLOG", "ProtectKernelLogs=no", "xid-source=nvml"],
    "NvidiaNvswitchSxidFatal": ["nvidia-fabricmanager", "reset", "reboot", "RMA"],
    "NvidiaGpuHealthFailing": ["{{ $labels.action }}", "cordon the node", "/-/health"],
    "NvidiaGpuHealthDegraded": ["{{ $labels.action }}", "next drain", "/-/health"],
}
DEFAULT_OFF = {"NvidiaGpuSoftwareThermalSlowdown", "NvidiaGpuAllocatedButIdle"}
# Every rule off by default turned on, the cost recording group included.
OPT_IN = {
    "swThermalSlowdown": {"enabled": True},
    "gpuAllocatedButIdle": {"enabled": True},
    "costRecording": {"enabled": True},
}


def promtool() -> Path:
    return binary("promtool")


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def rules_text() -> str:
    return RULES_FILE.read_text(encoding="utf-8")


def unit_test_in(workdir: Path, test_file: Path, rules: str) -> subprocess.CompletedProcess[str]:
    """Run a promtool unit-test file against ``rules`` placed beside a copy of it as rules.yml."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(test_file, workdir / test_file.name)
    (workdir / "rules.yml").write_text(rules, encoding="utf-8")
    return run_promtool("test", "rules", test_file.name, cwd=workdir)


def rendered_rules(values: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        render_chart({"prometheusRule": {"enabled": True, **values}})[RULE_TEMPLATE]
    )
    return document


def checks_by_alert(test_file: Path) -> dict[str, list[bool]]:
    """For each alert named in a promtool test file: one bool per check, True when it expects the alert to fire."""
    document = yaml.safe_load(test_file.read_text(encoding="utf-8"))
    checks: dict[str, list[bool]] = {}
    for test in document["tests"]:
        for check in test.get("alert_rule_test", []):
            checks.setdefault(check["alertname"], []).append(bool(check.get("exp_alerts")))
    return checks


# --- without any binary -----------------------------------------------------------------------------------------


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    alerts = alert_names(rules_text())
    assert len(alerts) == len(set(alerts)) == 23
    checks = checks_by_alert(RULE_TESTS / "rules.test.yml")
    optin = checks_by_alert(RULE_TESTS / "optin-rules.test.yml")
    for alert in alerts:
        assert True in checks.get(alert, []), f"{alert} has no test that it fires"
        assert False in checks.get(alert, []), f"{alert} has no test that it stays quiet"
    for alert in DEFAULT_OFF:
        assert True in optin.get(alert, []), alert
        assert False in optin.get(alert, []), alert
    assert set(checks) == set(alerts), "rules.test.yml names an alert that the rules file lacks"
    # The healthy-host test covers every alert, with nothing expected.
    healthy = yaml.safe_load((RULE_TESTS / "rules.test.yml").read_text(encoding="utf-8"))["tests"][0]
    assert healthy["name"] == "healthy host raises nothing"
    assert {check["alertname"] for check in healthy["alert_rule_test"]} == set(alerts)
    assert all(check["exp_alerts"] == [] for check in healthy["alert_rule_test"])


def test_every_alert_states_the_corrective_action() -> None:
    document = yaml.safe_load(rules_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} == set(ACTIONS) - DEFAULT_OFF
    for rule in rules:
        annotations = rule["annotations"]
        assert "{{ $labels.instance }}" in annotations["summary"], rule["alert"]
        for phrase in ACTIONS[rule["alert"]]:
            assert phrase in annotations["description"], f"{rule['alert']}: {phrase!r} missing"
        assert rule["labels"]["severity"] in ("warning", "critical")


@pytest.mark.parametrize("alert", ["NvidiaGpuHealthFailing", "NvidiaGpuHealthDegraded"])
def test_the_verdict_alerts_explain_every_action_of_the_table(alert: str) -> None:
    """The action is a label; the description says what each value means, in the verdict table's words."""
    rules = {rule["alert"]: rule for group in yaml.safe_load(rules_text())["groups"] for rule in group["rules"]}
    description = rules[alert]["annotations"]["description"]
    for action in Action:
        assert f"{action.value} = {action.text[0].lower()}{action.text[1:]}" in description, action


def test_the_seed_thresholds_are_the_defaults() -> None:
    rules = {rule["alert"]: rule for group in yaml.safe_load(rules_text())["groups"] for rule in group["rules"]}
    assert rules["NvidiaGpuTemperatureHigh"]["expr"] == "nvidia_smi_temperature_gpu > 85"
    assert rules["NvidiaGpuTemperatureHigh"]["for"] == "5m"
    assert rules["NvidiaGpuExporterDown"]["expr"] == f'up{{job="{JOB}"}} == 0'
    # Reset-class Xids by allowlist, timestamp based: a first event (a new series) fires at once.
    xid = rules["NvidiaGpuXidCritical"]["expr"]
    assert re.fullmatch(r'time\(\) - nvidia_smi_xid_last_timestamp_seconds\{xid=~"[0-9|]+"\} < 600', xid), xid
    assert "for" not in rules["NvidiaGpuXidCritical"]


@pytest.mark.parametrize(
    ("alert", "severity"),
    [("NvidiaGpuXidCritical", Severity.CRITICAL), ("NvidiaGpuXidWarning", Severity.WARNING)],
    ids=["critical-codes-are-the-tables", "warning-codes-are-the-tables"],
)
def test_the_xid_alerts_take_their_codes_from_the_xid_table(alert: str, severity: Severity) -> None:
    rules = {rule["alert"]: rule for group in yaml.safe_load(rules_text())["groups"] for rule in group["rules"]}
    codes = re.search(r'xid=~"([^"]+)"', rules[alert]["expr"])
    assert codes is not None
    assert sorted(int(code) for code in codes.group(1).split("|")) == list(codes_of(severity))


# --- helm-python-sdk --------------------------------------------------------------------------------------------


def test_rules_file_equals_the_chart_prometheusrule() -> None:
    rendered = rendered_rules({})
    shipped = yaml.safe_load(rules_text())
    assert rendered["spec"]["groups"] == shipped["groups"], (
        "the rules file differs from the chart: run python deploy/prometheus/sync_rules.py"
    )
    completed = subprocess.run(
        [sys.executable, str(RULES_FILE.parent / "sync_rules.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr


def test_rule_knobs_reach_the_rules() -> None:
    rendered = rendered_rules(
        {
            "temperatureHigh": {"thresholdCelsius": 80, "for": "2m", "severity": "critical"},
            "xidCritical": {"codes": [79], "windowSeconds": 120},
            "memoryNearlyFull": {"thresholdRatio": 0.9},
            "exporterDown": {"job": "gpu-nodes"},
            "rowRemapPending": {"enabled": False},
            "swThermalSlowdown": {"enabled": True, "for": "1h"},
            "gpuAllocatedButIdle": {"enabled": True, "window": "2h", "usedRatio": 0.1},
        }
    )
    rules = {rule["alert"]: rule for rule in rendered["spec"]["groups"][0]["rules"]}
    temperature = rules["NvidiaGpuTemperatureHigh"]
    assert (temperature["expr"], temperature["for"], temperature["labels"]["severity"]) == (
        "nvidia_smi_temperature_gpu > 80",
        "2m",
        "critical",
    )
    assert "stayed above 80 °C" in temperature["annotations"]["description"]
    assert rules["NvidiaGpuXidCritical"]["expr"] == 'time() - nvidia_smi_xid_last_timestamp_seconds{xid=~"79"} < 120'
    assert rules["NvidiaGpuMemoryNearlyFull"]["expr"].endswith("> 0.9")
    assert rules["NvidiaGpuExporterDown"]["expr"] == 'up{job="gpu-nodes"} == 0'
    assert "NvidiaGpuRowRemapPending" not in rules
    assert rules["NvidiaGpuSoftwareThermalSlowdown"]["for"] == "1h"
    idle = rules["NvidiaGpuAllocatedButIdle"]["expr"]
    assert "[2h])) >= 0.1" in idle
    assert "[1h]" not in idle


def test_all_rules_off_renders_no_prometheusrule() -> None:
    toggles = {
        key: {"enabled": False}
        for key in yaml.safe_load(
            (RULES_FILE.parents[1] / "helm" / "nvidia-gpu-exporter" / "values.yaml").read_text(encoding="utf-8")
        )["prometheusRule"]
        if key not in ("enabled", "additionalLabels", "dualScheme")
    }
    assert len(toggles) == 26
    assert RULE_TEMPLATE not in render_chart({"prometheusRule": {"enabled": True, **toggles}})
    assert RULE_TEMPLATE not in render_chart({})


# --- promtool ---------------------------------------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    completed = run_promtool("check", "rules", RULES_FILE)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "SUCCESS: 23 rules found" in completed.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    completed = unit_test_in(tmp_path, RULE_TESTS / "rules.test.yml", strip_annotations(rules_text()))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "SUCCESS" in completed.stdout


def test_promtool_annotation_tests_pass() -> None:
    completed = run_promtool("test", "rules", RULE_TESTS / "annotations.test.yml")
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.parametrize(
    ("mutation", "alert"),
    [
        (("nvidia_smi_temperature_gpu > 85", "nvidia_smi_temperature_gpu > 96"), "NvidiaGpuTemperatureHigh"),
        (("|79|", "|"), "NvidiaGpuXidCritical"),
        (("< max_over_time", "> max_over_time"), "NvidiaGpuMissing"),
        ((" or 0 * count by (job, instance) (nvidia_smi_gpus_expected)", ""), "NvidiaGpuFewerThanExpected"),
        (
            ("unless on (job, instance, pci_bus_id)", "and on (job, instance, pci_bus_id)"),
            "NvidiaGpuPciDeviceNotVisible",
        ),
        (("nvidia_smi_gpu_recovery_action > 0", "nvidia_smi_gpu_recovery_action > 2"), "NvidiaGpuRecoveryActionNeeded"),
        (('{state="failing"} == 1', '{state="degraded"} == 1'), "NvidiaGpuHealthFailing"),
        (('{state="degraded"} == 1', '{state="degraded"} > 1'), "NvidiaGpuHealthDegraded"),
    ],
)
def test_unit_tests_catch_a_broken_rule(tmp_path: Path, mutation: tuple[str, str], alert: str) -> None:
    """The unit tests bite: a rule with a wrong threshold, a lost allowlist entry or a flipped comparison fails."""
    old, new = mutation
    rules = rules_text()
    assert old in rules
    completed = unit_test_in(tmp_path, RULE_TESTS / "rules.test.yml", strip_annotations(rules.replace(old, new, 1)))
    assert completed.returncode != 0
    assert f"alertname: {alert}" in completed.stdout + completed.stderr


# The exporter's own scrape, turned into promtool input series: what it serves for a GPU left to vfio-pci raises
# both lost-GPU alerts, and the same node with that GPU gone from the bus raises neither.
LOST_GPU_FAMILIES = (
    "nvidia_smi_gpus_expected",
    "nvidia_smi_pci_device_info",
    "nvidia_smi_gpu_info",
    "nvidia_smi_last_collect_success",
)


def input_series(scrape: str, instance: str) -> list[dict[str, str]]:
    """The scrape's samples of the lost-GPU families as promtool series, held for 30 minutes."""
    found = []
    for name in LOST_GPU_FAMILIES:
        for sample in series(scrape, name):
            labels = {"job": JOB, "instance": instance, **sample.labels}
            if name == "nvidia_smi_gpu_info":  # the join needs these two; the rest only lengthens the file
                labels = {key: labels[key] for key in ("job", "instance", "uuid", "pci_bus_id")}
            text = ",".join(f"{key}={json.dumps(value)}" for key, value in labels.items())
            found.append({"series": f"{name}{{{text}}}", "values": f"{sample.value:g}x30"})
    return found


def test_the_exporters_scrape_of_a_lost_gpu_raises_the_alerts(tmp_path: Path, exporter: StartExporter) -> None:
    promtool()  # skips before starting anything when promtool is missing
    tree = make_sysfs(
        tmp_path / "sys", [gpu("0000:07:00.0"), gpu("0000:0f:00.0"), gpu("0000:5e:00.0", driver="vfio-pci")]
    )
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), f"--collect.sysfs-path={tree}")
    lost = handle.scrape()
    remove_function(tree, "0000:5e:00.0")
    healthy = handle.scrape()
    lost_alerts = [
        {"exp_labels": {"severity": "warning", "job": JOB, "instance": "node-lost"}},
    ]
    device_alerts = [
        {
            "exp_labels": {
                "severity": "warning",
                "job": JOB,
                "instance": "node-lost",
                "pci_bus_id": "00000000:5E:00.0",
                "kind": "gpu",
                "device_id": "0x2335",
                "driver": "vfio-pci",
            }
        }
    ]
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "the exporter's scrape of a node with a GPU left to vfio-pci",
                "interval": "1m",
                "input_series": input_series(lost, "node-lost") + input_series(healthy, "node-healthy"),
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "NvidiaGpuFewerThanExpected", "exp_alerts": lost_alerts},
                    {"eval_time": "15m", "alertname": "NvidiaGpuPciDeviceNotVisible", "exp_alerts": device_alerts},
                ],
            }
        ],
    }
    test_file = _write(tmp_path / "scrape.test.yml", yaml.safe_dump(tests, sort_keys=False))
    completed = unit_test_in(tmp_path / "unit", test_file, strip_annotations(rules_text()))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_opt_in_rules_unit_tests_pass(tmp_path: Path) -> None:
    """Rendered with every rule on, the chart adds the opt-in rules; their unit tests pass."""
    everything = rendered_rules(OPT_IN)
    names = {rule["alert"] for rule in everything["spec"]["groups"][0]["rules"]}
    assert [group["name"] for group in everything["spec"]["groups"]] == [
        "nvidia-gpu-exporter",
        "nvidia-gpu-exporter-cost",
    ]
    assert names == set(alert_names(rules_text())) | DEFAULT_OFF
    rules = yaml.safe_dump({"groups": everything["spec"]["groups"]}, sort_keys=False)
    completed = run_promtool("check", "rules", _write(tmp_path / "all.yml", rules))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    completed = unit_test_in(tmp_path / "unit", RULE_TESTS / "optin-rules.test.yml", strip_annotations(rules))
    assert completed.returncode == 0, completed.stdout + completed.stderr


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_kubernetes_md_scrape_example_is_valid(tmp_path: Path) -> None:
    """The Prometheus config of KUBERNETES.md (job name, pod discovery, shipped rules) passes promtool."""
    text = (REPO / "KUBERNETES.md").read_text(encoding="utf-8")
    blocks = [block for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) if "scrape_configs" in block]
    assert len(blocks) == 1
    config = yaml.safe_load(blocks[0])
    job = config["scrape_configs"][0]
    assert job["job_name"] == JOB
    # Debian builds Prometheus without Kubernetes service discovery, so promtool would reject the section: check its
    # shape here and let promtool check the rest (relabelings, rule file) with a static target in its place.
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"names": ["monitoring"]}}]
    job["static_configs"] = [{"targets": ["127.0.0.1:9835"]}]
    shutil.copy(RULES_FILE, tmp_path / RULES_FILE.name)
    completed = run_promtool("check", "config", _write(tmp_path / "prometheus.yml", yaml.safe_dump(config)))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "SUCCESS: 23 rules found" in completed.stdout
