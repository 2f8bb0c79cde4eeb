"""docs/migrating-from-dcgm-exporter.md against the code: its field mapping tables are the exporter's DCGM table
(through the same derivation the dual-scheme rules use, so the guide and the rules cannot disagree), and every
flag of this exporter it names exists."""

from __future__ import annotations

import re
from types import ModuleType

from harness import REPO, load_script
from nvidia_gpu_exporter.exposition.dcgm import (
    DCGM_FAMILIES,
    NVLINK_BANDWIDTH,
    PCIE_FAMILIES,
    PCIE_REPLAY,
    PROF_FAMILIES,
    TOTAL_ENERGY,
    XID_ERRORS,
)
from nvidia_gpu_exporter.flags import FLAGS
from test_docs import rows_of, section

GUIDE = REPO / "docs" / "migrating-from-dcgm-exporter.md"
FORWARD_HEADER = ("DCGM field", "nvidia_smi family", "Factor")
REVERSE_HEADER = ("nvidia_smi family", "DCGM field", "Factor")
# The two DCGM families that are no query field: their twins, and the factor from DCGM's value to ours.
ENERGY = ("nvidia_smi_energy_joules_total", "0.001")  # mJ -> J
XID_TWINS = ("nvidia_smi_xid_errors_total", "nvidia_smi_xid_last_timestamp_seconds")
XID_FACTOR = "— (DCGM's value is the last code seen; ours count each code and time its last occurrence, by `xid` label)"
# The GPM fields (nvml backend) have no nvidia_smi family for a whole GPU; on MIG, the GPU instance's family.
GPM_TWINS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (
        "— (none for a whole GPU; a GPU instance's is `nvidia_smi_mig_graphics_activity_ratio`)",
        "1",
    ),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
        "— (none for a whole GPU; a GPU instance's is `nvidia_smi_mig_tensor_activity_ratio`)",
        "1",
    ),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("— (none)", "—"),
}
# The other NVML readings (nvml backend): PCIe rates are the same reading as nvidia_smi_pcie_throughput_* (both in
# bytes per second); the replay counter and NVLink bytes have no nvidia_smi family.
PCIE_TWINS = {
    PCIE_FAMILIES[0].name: "nvidia_smi_pcie_throughput_tx_bytes_per_second",
    PCIE_FAMILIES[1].name: "nvidia_smi_pcie_throughput_rx_bytes_per_second",
}
NVML_ONLY = {PCIE_REPLAY.name: ("— (none)", "—"), NVLINK_BANDWIDTH.name: ("— (none)", "—")}
_FLAG = re.compile(r"`(--[a-z][a-z0-9.-]*)(?:=[^`]*)?`")


def dual_scheme() -> ModuleType:
    """deploy/prometheus/dual_scheme.py, the one derivation of the nvidia_smi twin of each DCGM field."""
    return load_script(REPO / "deploy" / "prometheus" / "dual_scheme.py")


def expected_rows() -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    twins: dict[str, tuple[str, float]] = dual_scheme().twins()
    by_dcgm = {dcgm: (f"`{name}`", f"{factor:.10g}") for name, (dcgm, factor) in twins.items()}
    by_dcgm[TOTAL_ENERGY.name] = (f"`{ENERGY[0]}`", ENERGY[1])
    by_dcgm[XID_ERRORS.name] = (", ".join(f"`{name}`" for name in XID_TWINS), XID_FACTOR)
    assert GPM_TWINS.keys() == {family.name for family in PROF_FAMILIES}
    by_dcgm.update(GPM_TWINS)
    by_dcgm.update(NVML_ONLY)
    by_dcgm.update({dcgm: (f"`{name}`", "1") for dcgm, name in PCIE_TWINS.items()})
    forward: list[tuple[str, ...]] = [(f"`{family.name}`", *by_dcgm[family.name]) for family in DCGM_FAMILIES]
    reverse = {name: (dcgm, f"{factor:.10g}") for name, (dcgm, factor) in twins.items()}
    reverse[ENERGY[0]] = (TOTAL_ENERGY.name, ENERGY[1])
    reverse.update(dict.fromkeys(XID_TWINS, (XID_ERRORS.name, XID_FACTOR)))
    reverse.update({name: (dcgm, "1") for dcgm, name in PCIE_TWINS.items()})
    return forward, [(f"`{name}`", f"`{dcgm}`", factor) for name, (dcgm, factor) in sorted(reverse.items())]


def test_the_mapping_tables_are_the_exporters_dcgm_table() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    forward, reverse = expected_rows()
    assert rows_of(section(text, "From DCGM's names"), FORWARD_HEADER) == forward
    assert rows_of(section(text, "From this exporter's names"), REVERSE_HEADER) == reverse


def test_every_flag_the_guide_gives_for_this_exporter_exists() -> None:
    known = {f"--{flag.name}" for flag in FLAGS}
    rows = rows_of(section(GUIDE.read_text(encoding="utf-8"), "Flags"), ("dcgm-exporter", "There", "This exporter"))
    assert len(rows) >= 15
    named = {flag for row in rows for flag in _FLAG.findall(row[2])}
    assert {"--web.listen-address", "--collect.interval", "--kubernetes.pod-resources"} <= named
    assert named - known == set()
    assert "--web.listen-address=:9400" in rows[2][2]
