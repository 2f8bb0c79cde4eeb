"""The doctor's checks against Prometheus (``--prometheus-url``): the last two items of the runbook's checklist.

``prometheus-target``: Prometheus has the exporter's scrape job and every one of its targets is up (the
runbook's "Prometheus scrapes it"); ``prometheus-rules``: the exporter's rule groups are loaded and every rule
in them evaluates without error. Both read the Prometheus HTTP API (``/api/v1/targets``, ``/api/v1/rules``), each
call bounded by ``--timeout``; nothing is written.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvidia_gpu_exporter.doctor.report import CheckResult, Status

DEFAULT_JOB = "nvidia-gpu-exporter"
# The groups of deploy/prometheus/nvidia-gpu-exporter-rules.yml (also the chart's PrometheusRule) and of the
# dual-scheme pack; either one loaded counts.
DEFAULT_RULE_GROUPS = ("nvidia-gpu-exporter", "nvidia-gpu-dual-scheme")
TARGET_CHECK = "prometheus-target"
TARGET_TITLE = "Prometheus scrapes the exporter"
RULES_CHECK = "prometheus-rules"
RULES_TITLE = "the exporter's alert rules are loaded and healthy"
_SHOWN = 3  # broken targets or rules named in one line
_ERROR_CHARACTERS = 160  # of one rule's or target's last error (Prometheus' own can list whole series)


@dataclass(frozen=True, slots=True)
class PrometheusOptions:
    url: str
    job: str = DEFAULT_JOB
    rule_groups: tuple[str, ...] = DEFAULT_RULE_GROUPS
    timeout_seconds: float = 5.0


class _Unreachable(Exception):
    pass


def _api(options: PrometheusOptions, path: str) -> Any:
    """The ``data`` of a Prometheus API answer; raises _Unreachable with a one-line reason."""
    url = options.url.rstrip("/") + path
    try:
        with urllib.request.urlopen(url, timeout=options.timeout_seconds) as reply:  # noqa: S310 - the user's URL
            answer = json.loads(reply.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        raise _Unreachable(f"{url} answers HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise _Unreachable(f"{url}: {getattr(error, 'reason', error)}") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise _Unreachable(f"{url}: not a Prometheus API answer")
    return answer.get("data")


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _short(error: str) -> str:
    return error if len(error) <= _ERROR_CHARACTERS else error[: _ERROR_CHARACTERS - 1] + "…"


def check_target(options: PrometheusOptions) -> CheckResult:
    try:
        data = _api(options, "/api/v1/targets?" + urllib.parse.urlencode({"state": "active"}))
    except _Unreachable as error:
        return CheckResult(TARGET_CHECK, TARGET_TITLE, Status.FAIL, str(error), "check --prometheus-url")
    targets = [t for t in data.get("activeTargets", []) or [] if t.get("labels", {}).get("job") == options.job]
    if not targets:
        jobs = sorted({str(t.get("labels", {}).get("job", "")) for t in data.get("activeTargets", []) or []})
        return CheckResult(
            TARGET_CHECK,
            TARGET_TITLE,
            Status.FAIL,
            f"no active target of job {options.job!r} (jobs: {_listed(jobs) or 'none'})",
            "enable the chart's serviceMonitor or podMonitor with the labels your Prometheus selects, or name the"
            " scrape job --prometheus-job (the rules expect nvidia-gpu-exporter)",
        )
    down = [t for t in targets if t.get("health") != "up"]
    if down:
        broken = [
            f"{t.get('scrapeUrl', '?')} ({t.get('health')}: {t.get('lastError') or 'no scrape yet'})" for t in down
        ]
        return CheckResult(
            TARGET_CHECK,
            TARGET_TITLE,
            Status.FAIL,
            f"{len(down)} of {len(targets)} target(s) of job {options.job!r} not up: {_listed(broken)}",
            "a refused or timed-out scrape: the exporter pod, its port, a NetworkPolicy; read the target's error",
        )
    return CheckResult(TARGET_CHECK, TARGET_TITLE, Status.PASS, f"{len(targets)} target(s) of job {options.job!r} up")


def check_rules(options: PrometheusOptions) -> CheckResult:
    try:
        data = _api(options, "/api/v1/rules")
    except _Unreachable as error:
        return CheckResult(RULES_CHECK, RULES_TITLE, Status.FAIL, str(error), "check --prometheus-url")
    groups = [g for g in data.get("groups", []) or [] if g.get("name") in options.rule_groups]
    if not groups:
        return CheckResult(
            RULES_CHECK,
            RULES_TITLE,
            Status.FAIL,
            f"no rule group named {' or '.join(options.rule_groups)} is loaded",
            "load deploy/prometheus/nvidia-gpu-exporter-rules.yml (rule_files:) or enable the chart's prometheusRule"
            " with the labels your Prometheus selects rules by",
        )
    rules = [(str(g["name"]), rule) for g in groups for rule in g.get("rules", []) or []]
    broken = [
        f"{rule.get('name')}: {_short(str(rule.get('lastError', '')))}"
        for _, rule in rules
        if rule.get("health") == "err"
    ]
    if broken:
        return CheckResult(
            RULES_CHECK,
            RULES_TITLE,
            Status.FAIL,
            f"{len(broken)} rule(s) fail to evaluate: {_listed(broken)}",
            "fix the expression (or the data it joins): an alert whose rule errors never fires",
        )
    loaded = ", ".join(str(g["name"]) for g in groups)
    unevaluated = [str(rule.get("name")) for _, rule in rules if rule.get("health") != "ok"]
    if unevaluated:
        return CheckResult(
            RULES_CHECK,
            RULES_TITLE,
            Status.WARN,
            f"{loaded}: {len(unevaluated)} of {len(rules)} rule(s) not evaluated yet: {_listed(unevaluated)}",
            "run the doctor again after one evaluation interval",
        )
    return CheckResult(RULES_CHECK, RULES_TITLE, Status.PASS, f"{loaded}: {len(rules)} rule(s) loaded and healthy")


def prometheus_checks(options: PrometheusOptions) -> list[CheckResult]:
    return [check_target(options), check_rules(options)]
