"""Write nvidia-gpu-exporter-rules.yml from the Helm chart's PrometheusRule template (the single source).

The chart template holds every rule with its knobs; rendered with the default values it gives the groups of the
standalone rules file for Prometheus without the operator, and (dual_scheme.py) the dual-scheme pack, whose core
alerts match `nvidia_smi_*` or `DCGM_FI_*` series. tests/test_rules.py fails when they differ.
Needs helm-python-sdk (`pip install helm-python-sdk`); run from anywhere: `python deploy/prometheus/sync_rules.py`.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import yaml
from dual_scheme import dual_scheme_groups

HERE = Path(__file__).resolve().parent
CHART = HERE.parent / "helm" / "nvidia-gpu-exporter"
RULES = HERE / "nvidia-gpu-exporter-rules.yml"
DUAL_RULES = HERE / "nvidia-gpu-exporter-dual-scheme-rules.yml"
KUSTOMIZE_RULE = HERE.parent / "kustomize" / "components" / "prometheus-operator" / "prometheusrule.yaml"
KUSTOMIZE_DUAL_RULE = HERE.parent / "kustomize" / "components" / "dual-scheme-rules" / "prometheusrule.yaml"
CHART_DUAL_RULES = CHART / "rules" / "dual-scheme.yaml"  # read by templates/prometheusrule-dual-scheme.yaml
HEADER = """\
# Alert rules for the NVIDIA GPU exporter, for Prometheus without the Prometheus Operator (rule_files:).
# GENERATED from deploy/helm/nvidia-gpu-exporter/templates/prometheusrule.yaml with the chart's default values
# by deploy/prometheus/sync_rules.py; edit the template, then run that script. The Helm chart's PrometheusRule
# carries the same groups. NvidiaGpuExporterDown expects the scrape job to be named "nvidia-gpu-exporter".
# Tests: deploy/prometheus/tests/ (promtool test rules), tests/test_rules.py, tests/test_sre_loop.py.
"""

DUAL_HEADER = """\
# The dual-scheme alert pack: the core GPU alerts of nvidia-gpu-exporter-rules.yml, each matching this exporter's
# nvidia_smi_* names or DCGM's DCGM_FI_* names (--metrics.profile=dcgm, or NVIDIA's dcgm-exporter), so that a
# mixed fleet needs one rule set. Same alert names, thresholds and annotations as the chart's rules, and the same
# labels (job, instance, and uuid, xid or pci_bus_id where it has them), so a GPU served in both names alerts once.
# GENERATED from deploy/helm/nvidia-gpu-exporter/templates/prometheusrule.yaml (default values) and the
# exporter's DCGM field table by deploy/prometheus/sync_rules.py (dual_scheme.py); docs/migrating-from-dcgm-exporter.md.
# Tests: deploy/prometheus/tests/dual-scheme.test.yml (promtool test rules), tests/test_dcgm_rules.py.
"""


class _Dumper(yaml.SafeDumper):
    """Writes a multi-line string (a dual-scheme expression, one arm a line) as a literal block."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def rendered_groups_text() -> str:
    """The `groups:` block of the PrometheusRule rendered with the default values, at its indentation there."""
    from helm_python.chart import Chart  # noqa: PLC0415 - optional, heavy dependency of this script only

    # The checked-in chart has no default image (the release fills it in); the rules do not depend on it.
    values = {"prometheusRule": {"enabled": True}, "image": {"repository": "registry.example.com/nvidia-gpu-exporter"}}
    with Chart.load(CHART) as chart:
        manifests = chart.render(values, name="nvidia-gpu-exporter", namespace="default")
    text: str = manifests["nvidia-gpu-exporter/templates/prometheusrule.yaml"]
    lines = text.split("\n")
    start = lines.index("  groups:")
    return "\n".join(lines[start:]).rstrip("\n") + "\n"


def outputs() -> dict[Path, str]:
    groups = rendered_groups_text()
    kustomize_header = HEADER.replace(
        "for Prometheus without the Prometheus Operator (rule_files:)", "as a PrometheusRule for kustomize"
    )
    dual = dual_scheme_groups(yaml.safe_load(textwrap.dedent(groups))["groups"])
    dual_groups = yaml.dump({"groups": dual}, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return {
        RULES: HEADER + textwrap.dedent(groups),
        DUAL_RULES: DUAL_HEADER + dual_groups,
        CHART_DUAL_RULES: DUAL_HEADER + dual_groups,
        KUSTOMIZE_DUAL_RULE: DUAL_HEADER
        + "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\n"
        + "metadata:\n  name: nvidia-gpu-exporter-dual-scheme\nspec:\n"
        + textwrap.indent(dual_groups, "  "),
        KUSTOMIZE_RULE: kustomize_header
        + "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: nvidia-gpu-exporter\nspec:\n"
        + groups,
    }


def main() -> int:
    stale = {path: text for path, text in outputs().items() if not path.is_file() or path.read_text("utf-8") != text}
    if "--check" in sys.argv[1:]:
        for path in stale:
            print(f"{path} is out of date: run python deploy/prometheus/sync_rules.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in stale.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
