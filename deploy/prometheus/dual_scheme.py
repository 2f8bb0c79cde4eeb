"""The dual-scheme alert pack: the chart's core GPU alerts, each matching `nvidia_smi_*` or `DCGM_FI_*` series.

Mixed fleets (nodes on this exporter's default names, nodes on `--metrics.profile=dcgm` or on NVIDIA's
dcgm-exporter) then need one rule set. Nothing here restates a rule: thresholds, `for:`, severities, XID codes,
windows and annotations come from the chart's rendered rules (the source of nvidia-gpu-exporter-rules.yml), and
which DCGM field is which `nvidia_smi_*` family, with the unit factor between them, comes from the exporter's
DCGM table (nvidia_gpu_exporter.exposition.dcgm). sync_rules.py writes the result; tests/test_dcgm_rules.py and
tests/dual-scheme.test.yml check it.

Each alert is `(nvidia_smi arm) or (DCGM arm)`, both arms aggregated `by` the labels the chart's alert carries
(`job`, `instance`, `uuid`, and `xid` or `pci_bus_id` where it has them; `job` and `instance` alone for a
missing GPU), the DCGM arm's `uuid` cut from its `UUID` (`GPU-3f1a…` -> `3f1a…`, the chart's form) and its
`xid` copied from `err_code`. A GPU served in both names (`--metrics.profile=both`) so gives one series, and
one alert, whose labels equal the chart alert's, so Alertmanager merges it with the chart's alert when both
packs are loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nvidia_gpu_exporter.exposition.dcgm import FIELD_FAMILIES, XID_ERRORS
from nvidia_gpu_exporter.exposition.dcgm_generations import same_unit_throughout, spellings
from nvidia_gpu_exporter.exposition.naming import derive_name
from nvidia_gpu_exporter.health.ledger import FALLEN_OFF_THE_BUS_XID
from nvidia_gpu_exporter.model.fields import header

GROUP = "nvidia-gpu-dual-scheme"
GPU_LABELS = ("job", "instance", "uuid")
_COMPARISON = re.compile(r"^(nvidia_smi_\w+) (==|!=|>=|<=|>|<) (\S+)$")
_RATIO = re.compile(r"^((nvidia_smi_\w+) / nvidia_smi_memory_total_bytes) (>) (\S+)$")
_MISSING = re.compile(
    r"^\(count by \(job, instance\) \(nvidia_smi_gpu_info\) or .+\)"
    r" < max_over_time\(\(count by \(job, instance\) \(nvidia_smi_gpu_info\)\)(\[[0-9a-z]+:[0-9a-z]+\])\)"
    r" and on \(job, instance\) nvidia_smi_last_collect_success == 1$"
)
_FALLEN = re.compile(r"^nvidia_smi_gpu_fallen_off_bus == 1$")
_XID = re.compile(r'^time\(\) - nvidia_smi_xid_last_timestamp_seconds\{xid=~"([0-9|]+)"\} < (\d+)$')


def twins() -> dict[str, tuple[str, float]]:
    """`nvidia_smi_*` family -> (its DCGM field, the factor from DCGM's unit to the family's), from the table."""
    found: dict[str, tuple[str, float]] = {}
    for family in FIELD_FAMILIES:
        derived = derive_name(header(family.qfield))
        found[derived.name] = (family.name, derived.multiplier)
    return found


def _parsed(pattern: re.Pattern[str], expr: str) -> tuple[str, ...]:
    """The groups of a chart expression of the shape this rewrite knows; a changed chart rule stops the script."""
    match = pattern.match(expr)
    if match is None:
        raise ValueError(f"the chart's expression {expr!r} no longer has the shape {pattern.pattern!r}")
    return match.groups()


def _any_name(dcgm_name: str, selector: str = "", offset: str = "") -> str:
    """The field under each name a dcgm-exporter generation gives it (`A or B`: a target serves one of them)."""
    names = [f"{name}{selector}{offset}" for name in spellings(dcgm_name)]
    return names[0] if len(names) == 1 else f"({' or '.join(names)})"


def _in_chart_units(nvidia_smi_name: str) -> str:
    dcgm_name, multiplier = twins()[nvidia_smi_name]
    if not same_unit_throughout(dcgm_name):
        raise ValueError(f"{dcgm_name} changed unit in a later generation: one threshold cannot hold for each name")
    return _any_name(dcgm_name) if multiplier == 1.0 else f"{_any_name(dcgm_name)} * {multiplier:g}"


def _by(labels: tuple[str, ...], expr: str) -> str:
    return f"max by ({', '.join(labels)}) ({expr})"


def _dcgm_labels(expr: str) -> str:
    """The DCGM series with the chart's `uuid` (from `UUID`)."""
    return f'label_replace({expr}, "uuid", "$1", "UUID", "GPU-(.+)")'


def _comparison(expr: str) -> str:
    """`nvidia_smi_x > T` -> both arms of `x` against `T`."""
    name, operator, threshold = _parsed(_COMPARISON, expr)
    return (
        f"{_by(GPU_LABELS, name)} {operator} {threshold}"
        f"\nor {_by(GPU_LABELS, _dcgm_labels(_in_chart_units(name)))} {operator} {threshold}"
    )


def _memory_ratio(expr: str) -> str:
    """DCGM has no total: used + free + reserved, as nvidia-smi's memory.total adds them (reserved may be absent)."""
    ratio, used, operator, threshold = _parsed(_RATIO, expr)
    table = twins()
    # each name of a generation in one unit (MiB up to 4.8, bytes from 4.9): the ratio is the same in either
    used_dcgm = _any_name(table[used][0])
    free_dcgm = _any_name(table["nvidia_smi_memory_free_bytes"][0])
    reserved_dcgm = _any_name(table["nvidia_smi_memory_reserved_bytes"][0])
    dcgm_ratio = f"{used_dcgm} / ({used_dcgm} + {free_dcgm} + ({reserved_dcgm} or 0 * {used_dcgm}))"
    return (
        f"{_by(GPU_LABELS, ratio)} {operator} {threshold}"
        f"\nor {_by(GPU_LABELS, _dcgm_labels(dcgm_ratio))} {operator} {threshold}"
    )


def _xid(expr: str) -> str:
    """DCGM keeps only the last XID, without a time: its series (one per `err_code`) counts as recent while it is
    younger than the chart's window, i.e. absent from the data of one window ago."""
    codes, window = _parsed(_XID, expr)
    labels = (*GPU_LABELS, "xid")
    recent = _any_name(XID_ERRORS.name, '{err_code=~"' + codes + '"}')
    before = _any_name(XID_ERRORS.name, offset=f" offset {window}s")
    appeared = f"{recent} unless on (job, instance, UUID, err_code) {before}"
    with_xid = f'label_replace({appeared}, "xid", "$1", "err_code", "(.+)")'
    return f"{_by(labels, expr)}\nor {_by(labels, _dcgm_labels(with_xid))}"


def _fallen_off_bus(expr: str) -> str:
    """DCGM's sign of a GPU off the bus is its last XID being that one."""
    _parsed(_FALLEN, expr)
    labels = (*GPU_LABELS, "pci_bus_id")
    dcgm = _any_name(XID_ERRORS.name, f'{{err_code="{FALLEN_OFF_THE_BUS_XID}"}}')
    return f"{_by(labels, expr)}\nor {_by(labels, _dcgm_labels(dcgm))}"


def _gpu_missing(expr: str) -> str:
    """Fewer GPUs than in the chart's window. DCGM has no info family: a GPU is there while its temperature (which
    every GPU reports) is served, and a failed collection, which serves no DCGM series at all, counts no GPU, as
    the chart's arm waits for a working collection."""
    (window,) = _parsed(_MISSING, expr)
    gpus = f"count by (job, instance) ({_any_name(twins()['nvidia_smi_temperature_gpu'][0])})"
    return f"({expr})\nor {gpus} < max_over_time(({gpus}){window})"


# The chart's alerts that have a DCGM twin, and how each one's expression gets its DCGM arm.
DUAL: dict[str, Callable[[str], str]] = {
    "NvidiaGpuTemperatureHigh": _comparison,
    "NvidiaGpuMemoryNearlyFull": _memory_ratio,
    "NvidiaGpuXidCritical": _xid,
    "NvidiaGpuXidWarning": _xid,
    "NvidiaGpuUncorrectableEccErrors": _comparison,
    "NvidiaGpuRowRemapFailure": _comparison,
    "NvidiaGpuMissing": _gpu_missing,
    "NvidiaGpuFallenOffBus": _fallen_off_bus,
}


def dual_scheme_groups(chart_groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pack's one group from the chart's rendered groups: the DUAL alerts, their expressions rewritten."""
    rules = [rule for group in chart_groups for rule in group["rules"] if rule.get("alert") in DUAL]
    if [rule["alert"] for rule in rules] != list(DUAL):
        raise ValueError("the chart lost or reordered an alert of the dual-scheme pack")
    return [{"name": GROUP, "rules": [{**rule, "expr": DUAL[rule["alert"]](rule["expr"])} for rule in rules]}]
