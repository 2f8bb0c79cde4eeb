"""``DCGM_EXP_GPU_HEALTH_STATUS`` under the DCGM profiles (docs/dcgm.md): the verdict (docs/health.md, "Verdicts") in
dcgm-exporter's shape, so its dashboards and alerts read ours.

dcgm-exporter serves one gauge per GPU and DCGM health watch, labeled ``health_watch`` (``MEM``, ``PCIE``, ...,
and ``ALL``, its GPU-wide check) and ``health_error_code`` (a ``DCGM_FR_*`` name, ``DCGM_FR_OK`` when passing), its
value DCGM's result: 0 pass, 10 warn, 20 fail. Each of our subsystems maps to its watch; the watches no reason of
ours reads (PMU, MCU, SM, INFOROM) are left out rather than claimed healthy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvidia_gpu_exporter.exposition.text import header
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.verdicts import Finding, GpuVerdict, State, Subsystem

NAME = "DCGM_EXP_GPU_HEALTH_STATUS"
TYPE = "gauge"
HELP = "Current DCGM-reported GPU health status."  # dcgm-exporter's counters file's words
WATCHES: dict[Subsystem, str] = {
    Subsystem.PCIE: "PCIE",
    Subsystem.NVLINK: "NVLINK",
    Subsystem.MEMORY: "MEM",
    Subsystem.THERMAL: "THERMAL",
    Subsystem.POWER: "POWER",
    Subsystem.DRIVER: "DRIVER",
}
ALL_WATCH = "ALL"
RESULTS: dict[State, int] = {State.OK: 0, State.DEGRADED: 10, State.FAILING: 20}  # DCGM_HEALTH_RESULT_*
OK_CODE = "DCGM_FR_OK"


def _code(findings: Sequence[Finding], state: State) -> str:
    """The error code of the first finding (in table order) that gives the state."""
    return next((finding.reason.dcgm_error for finding in findings if finding.reason.state is state), OK_CODE)


def health_status_text(labels_by_uuid: Mapping[str, str], verdicts: Sequence[GpuVerdict]) -> str:
    """The family for the GPUs the collection read (``labels_by_uuid``: normalized uuid -> label text), in that
    order; a GPU without a verdict (none judged yet) is left out."""
    by_uuid = {normalize_uuid(verdict.uuid): verdict for verdict in verdicts if verdict.uuid}
    lines: list[str] = []
    for uuid, labels in labels_by_uuid.items():
        verdict = by_uuid.get(uuid)
        if verdict is None:
            continue
        watches = [(WATCHES[part.subsystem], part.state, part.findings) for part in verdict.subsystems]
        watches.append((ALL_WATCH, verdict.state, verdict.findings))
        for watch, state, findings in watches:
            code = _code(findings, state)
            lines.append(f'{NAME}{{{labels},health_watch="{watch}",health_error_code="{code}"}} {RESULTS[state]}\n')
    return header(NAME, HELP, TYPE) + "".join(lines) if lines else ""
