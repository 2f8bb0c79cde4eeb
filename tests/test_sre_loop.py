"""The SRE loop end to end with real binaries, all on loopback (two loops: a hot GPU, and an XID in the kernel log).

fake nvidia-smi at 95 °C -> exporter (exec backend) -> Prometheus with the shipped rules (a test copy whose
`for:` is 2 s and whose groups evaluate every second) -> Alertmanager -> a webhook receiver. The receiver must get
the firing NvidiaGpuTemperatureHigh for both GPUs with the right labels and annotations, and nothing else (every
other shipped rule stays quiet on this healthy-but-hot machine); once the fake's config drops the temperature to
50 °C it must get the resolved notification.

Needs Debian's prometheus and prometheus-alertmanager in $PROMETHEUS_BIN_DIR (.ci/steps/40-kubernetes.sh
installs them); skips with a clear message without them.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from deploy_helpers import (
    JOB,
    POLL_INTERVAL,
    PROBE_ERRORS,
    RULES_FILE,
    alertmanager,
    binary,
    get_json,
    prometheus,
    scrape_config,
    wait_target_up,
    webhook_receiver,
)
from harness import FIXTURE_CAPTURES, fake_smi_command, start_exporter
from polling import wait_until
from sysfs_fakes import gpu, make_sysfs, remove_function

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
ALERT = "NvidiaGpuTemperatureHigh"
SHORT_FOR = "2s"


def fast_rules(path: Path = RULES_FILE) -> tuple[str, list[str]]:
    """Rules (the shipped ones by default) with every `for:` shortened and a 1 s evaluation interval (the test
    copy), and their alert names."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for group in document["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            names.append(rule["alert"])
            if "for" in rule:
                rule["for"] = SHORT_FOR
    return yaml.safe_dump(document, sort_keys=False), names


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """Every alert to the webhook at once, resolved ones too."""
    return {
        "route": {
            "receiver": "hook",
            "group_by": ["alertname"],
            "group_wait": "0s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "hook", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }


def prometheus_config(exporter: str, alertmanager_port: int) -> dict[str, Any]:
    """Scrape the exporter and evaluate the rules every second, alerting to the Alertmanager."""
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]},
        "rule_files": ["rules.yml"],
        "scrape_configs": [scrape_config(exporter, interval="1s")],
    }


def write_fake_config(path: Path, celsius: int) -> None:
    path.write_text(yaml.safe_dump({"overrides": {"temperature.gpu": celsius}}), encoding="utf-8")


def test_hot_gpu_pages_through_alertmanager_and_resolves(tmp_path: Path) -> None:
    binary("prometheus")
    binary("prometheus-alertmanager", "alertmanager")
    started = time.monotonic()
    fake_config = tmp_path / "fake-smi.yml"
    write_fake_config(fake_config, 95)
    rules, rule_names = fast_rules()
    assert ALERT in rule_names
    assert len(rule_names) == 23

    with webhook_receiver() as hook:
        am_config = alertmanager_config(hook.url)
        quiet_log = tmp_path / "kmsg"  # this machine's own kernel log must not decide which alerts fire
        quiet_log.write_text("")
        handle = start_exporter(
            [
                f"--nvidia-smi-command={fake_smi_command(CAPTURE, '--config', str(fake_config))}",
                "--collect.timeout=20s",
                f"--collect.kernel-log={quiet_log}",
            ]
        )
        try:
            assert "nvidia_smi_temperature_gpu" in handle.scrape()
            with alertmanager(am_config, tmp_path / "alertmanager") as am:
                config = prometheus_config(handle.address, am.port)
                with prometheus(config, tmp_path / "prometheus", {"rules.yml": rules}) as prom:
                    rule_groups = get_json(prom.url + "/api/v1/rules")["data"]["groups"]
                    assert sorted(rule["name"] for rule in rule_groups[0]["rules"]) == sorted(rule_names)
                    wait_target_up(prom)
                    target_up = time.monotonic()

                    # Alertmanager may flush the group after the first of the two alerts of an evaluation; the next
                    # flush (group_interval 1 s) then carries both.
                    firing = hook.wait_for(
                        "the firing notification for both GPUs",
                        lambda body: (
                            body["status"] == "firing"
                            and body["commonLabels"].get("alertname") == ALERT
                            and len(body["alerts"]) == 2
                        ),
                        timeout=90,
                    )
                    fired = time.monotonic()
                    uuids = sorted(alert["labels"]["uuid"] for alert in firing["alerts"])
                    assert len(uuids) == 2, firing
                    for alert in firing["alerts"]:
                        labels = alert["labels"]
                        assert labels == {
                            "alertname": ALERT,
                            "severity": "warning",
                            "job": JOB,
                            "instance": handle.address,
                            "uuid": labels["uuid"],
                        }
                        assert alert["status"] == "firing"
                        assert (
                            alert["annotations"]["summary"] == f"GPU {labels['uuid']} on {handle.address} is at 95 °C"
                        )
                        assert "cooling" in alert["annotations"]["description"]
                    assert firing["receiver"] == "hook"

                    write_fake_config(fake_config, 50)
                    cooled = time.monotonic()

                    def resolved_notifications() -> list[dict[str, Any]]:
                        """Alertmanager may resolve the two GPUs' alerts in one notification or in two."""
                        return [
                            body
                            for body in hook.received
                            if body["status"] == "resolved" and body["commonLabels"].get("alertname") == ALERT
                        ]

                    def resolved_uuids() -> list[str]:
                        return sorted(
                            {alert["labels"]["uuid"] for body in resolved_notifications() for alert in body["alerts"]}
                        )

                    hook.wait_for(
                        "the resolved notifications of both GPUs", lambda _: resolved_uuids() == uuids, timeout=60
                    )
                    resolved_at = time.monotonic()
                    assert resolved_uuids() == uuids
                    assert all(
                        alert["status"] == "resolved" for body in resolved_notifications() for alert in body["alerts"]
                    )

                    # Only the temperature alert ever fired: every other shipped rule stayed quiet on live data.
                    alerts_seen = {alert["labels"]["alertname"] for body in hook.received for alert in body["alerts"]}
                    assert alerts_seen == {ALERT}, hook.received
                    wait_until(
                        lambda: (
                            not [
                                a
                                for a in get_json(prom.url + "/api/v1/alerts")["data"]["alerts"]
                                if a["state"] == "firing"
                            ]
                        ),
                        "Prometheus to show no firing alert",
                        timeout=30,
                        interval=POLL_INTERVAL,
                        ignoring=PROBE_ERRORS,
                    )
        finally:
            handle.stop()
    print(
        f"SRE loop: target up {target_up - started:.1f}s after start, firing webhook {fired - target_up:.1f}s"
        f" after target up ({fired - started:.1f}s from start), resolved {resolved_at - cooled:.1f}s after cooling"
    )


XID_ALERTS = {"NvidiaGpuXidCritical", "NvidiaGpuFallenOffBus"}
LOST_GPU_ALERTS = {"NvidiaGpuFewerThanExpected", "NvidiaGpuPciDeviceNotVisible"}
HEALTH_ALERTS = {"NvidiaGpuHealthFailing"}  # the verdict (docs/health.md): XID 79 is `fallen_off_bus`, failing
LOST_GPU = "0000:1a:00.0"  # on the fake bus, bound to nvidia, and not in the capture: the driver lost it
MIG_GPU0 = "3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"  # at 00000000:07:00.0 in the fixture capture


def _kmsg_xid_79(sequence: int) -> str:
    """A /dev/kmsg record of XID 79 stamped now (kernel microseconds since boot, as the kernel writes it)."""
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000)
    return (
        f"3,{sequence},{usec},-;NVRM: Xid (PCI:0000:07:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n"
    )


def _firing(body: dict[str, Any], name: str) -> bool:
    return bool(body["status"] == "firing" and body["commonLabels"].get("alertname") == name)


def _verdict_firing(body: dict[str, Any], *, reason: str, action: str) -> bool:
    """A firing verdict notification holding an alert for the reason, with its action."""
    return _firing(body, "NvidiaGpuHealthFailing") and any(
        (alert["labels"].get("reason"), alert["labels"].get("action")) == (reason, action) for alert in body["alerts"]
    )


def test_a_kernel_log_xid_and_a_lost_gpu_on_the_exec_backend_page_through_alertmanager(tmp_path: Path) -> None:
    """The default exec backend serves no NVML events: the XID comes from the kernel log, as on a real node;
    a GPU the bus lists and the driver does not pages until it leaves the bus."""
    binary("prometheus")
    binary("prometheus-alertmanager", "alertmanager")
    rules, _ = fast_rules()
    kernel_log = tmp_path / "kmsg"
    kernel_log.write_text("6,1,1000,-;Linux version 6.1.0\n")
    sysfs = make_sysfs(tmp_path / "sys", [gpu("0000:07:00.0"), gpu("0000:0f:00.0"), gpu(LOST_GPU)])
    with webhook_receiver() as hook:
        am_config = alertmanager_config(hook.url)
        handle = start_exporter(
            [
                f"--nvidia-smi-command={fake_smi_command(CAPTURE)}",
                f"--collect.kernel-log={kernel_log}",
                f"--collect.sysfs-path={sysfs}",
            ]
        )
        try:
            with alertmanager(am_config, tmp_path / "alertmanager") as am:
                config = prometheus_config(handle.address, am.port)
                with prometheus(config, tmp_path / "prometheus", {"rules.yml": rules}) as prom:
                    wait_target_up(prom)
                    with kernel_log.open("a") as log:
                        log.write(_kmsg_xid_79(2))
                    critical = hook.wait_for(
                        "the critical XID notification",
                        lambda body: (
                            body["status"] == "firing"
                            and body["commonLabels"].get("alertname") == "NvidiaGpuXidCritical"
                        ),
                        timeout=90,
                    )
                    (alert,) = critical["alerts"]
                    assert alert["labels"] == {
                        "alertname": "NvidiaGpuXidCritical",
                        "severity": "critical",
                        "job": JOB,
                        "instance": handle.address,
                        "uuid": MIG_GPU0,
                        "xid": "79",
                    }
                    assert "/-/xids" in alert["annotations"]["description"]
                    hook.wait_for(
                        "the fallen-off-the-bus notification",
                        lambda body: (
                            body["status"] == "firing"
                            and body["commonLabels"].get("alertname") == "NvidiaGpuFallenOffBus"
                        ),
                        timeout=60,
                    )
                    lost = hook.wait_for(
                        "the GPU-not-visible notification",
                        lambda body: _firing(body, "NvidiaGpuPciDeviceNotVisible"),
                        timeout=60,
                    )
                    assert lost["alerts"][0]["labels"]["pci_bus_id"] == "00000000:1A:00.0"
                    hook.wait_for(
                        "the fewer-than-expected notification",
                        lambda body: _firing(body, "NvidiaGpuFewerThanExpected"),
                        timeout=60,
                    )
                    # One per GPU: the lost GPU's `missing_from_driver` and the XID 79 GPU's `fallen_off_bus`, both
                    # failing with the node rebooted as the action.
                    for reason in ("missing_from_driver", "fallen_off_bus"):
                        hook.wait_for(
                            f"the verdict's failing notification for {reason}, with its action",
                            partial(_verdict_firing, reason=reason, action="reboot_node"),
                            timeout=60,
                        )
                    remove_function(sysfs, LOST_GPU)
                    hook.wait_for(
                        "the lost GPU's alert resolved once it left the bus",
                        lambda body: (
                            body["status"] == "resolved"
                            and body["commonLabels"].get("alertname") == "NvidiaGpuPciDeviceNotVisible"
                        ),
                        timeout=60,
                    )
                    alerts_seen = {alert["labels"]["alertname"] for body in hook.received for alert in body["alerts"]}
                    assert alerts_seen == XID_ALERTS | LOST_GPU_ALERTS | HEALTH_ALERTS, hook.received
        finally:
            handle.stop()
