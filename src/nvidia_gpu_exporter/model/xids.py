"""What an XID code means and what an operator should do about it: the one table the alert rules, the logs,
``/-/xids`` and ``docs/xids.md`` are checked against.

Written from NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors) in our own words; a code not in the
table is still counted and served, only without an explanation. Severity decides the alert:
``critical`` pages (the GPU needs a reset, the node a reboot or the board an RMA), ``warning`` files a
ticket (a recoverable hardware or driver event), ``application`` raises no alert (the job that caused it
is at fault: its owner needs the pid, not the SRE), ``info`` is context for another XID.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    APPLICATION = "application"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class XidCode:
    code: int
    name: str
    severity: Severity
    action: str


_RESET = "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot the node"
_APP = (
    "Check the application that caused it (the pid in the log); if other applications hit it too, run GPU diagnostics"
)

XID_CODES: dict[int, XidCode] = {
    entry.code: entry
    for entry in (
        XidCode(8, "GPU stopped processing", Severity.APPLICATION, _APP),
        XidCode(13, "Graphics engine exception", Severity.APPLICATION, _APP),
        XidCode(31, "GPU memory page fault", Severity.APPLICATION, _APP + " (usually an illegal memory access)"),
        XidCode(32, "Invalid or corrupted push buffer stream", Severity.APPLICATION, _APP + "; check PCIe for errors"),
        XidCode(38, "Driver firmware error", Severity.WARNING, "Update the driver; reset the GPU if it repeats"),
        XidCode(43, "GPU stopped processing (channel reset)", Severity.APPLICATION, _APP),
        XidCode(45, "Preemptive cleanup after an earlier error", Severity.INFO, "Look at the XID before it"),
        XidCode(48, "Double-bit ECC error", Severity.CRITICAL, _RESET + " to retire or remap the bad memory"),
        XidCode(61, "Internal micro-controller warning", Severity.WARNING, "Reset the GPU if XID 62 follows"),
        XidCode(62, "Internal micro-controller halt", Severity.CRITICAL, _RESET),
        XidCode(
            63,
            "ECC page retirement or row remapping recorded",
            Severity.WARNING,
            "Reset the GPU at a convenient time to apply it",
        ),
        XidCode(
            64,
            "ECC page retirement or row remapping failed",
            Severity.CRITICAL,
            _RESET + "; if it repeats, RMA the GPU",
        ),
        XidCode(68, "Video processor exception", Severity.APPLICATION, _APP),
        XidCode(69, "Graphics engine class error", Severity.APPLICATION, _APP),
        XidCode(74, "NVLink error", Severity.CRITICAL, _RESET + "; check the NVLink connections and fabric manager"),
        XidCode(
            79,
            "GPU has fallen off the bus",
            Severity.CRITICAL,
            "Drain and reboot the node; reseat the GPU, check power and cooling; RMA if it repeats",
        ),
        XidCode(
            92, "High single-bit ECC error rate", Severity.WARNING, "Watch the ECC counters; RMA if the rate stays high"
        ),
        XidCode(
            94,
            "Contained ECC error",
            Severity.WARNING,
            "Restart the affected application; reset the GPU at a convenient time",
        ),
        XidCode(95, "Uncontained ECC error", Severity.CRITICAL, _RESET + " now: every application on it is affected"),
        XidCode(109, "Context switch timeout", Severity.APPLICATION, _APP),
        XidCode(119, "GSP RPC timeout", Severity.CRITICAL, _RESET),
        XidCode(120, "GSP error", Severity.CRITICAL, _RESET),
        XidCode(121, "C2C link error", Severity.WARNING, "Reset the GPU if it repeats"),
        XidCode(140, "Unrecovered ECC error", Severity.CRITICAL, _RESET),
        XidCode(143, "GPU initialization failure", Severity.CRITICAL, "Reboot the node; RMA the GPU if it repeats"),
    )
}


def describe(code: int) -> XidCode | None:
    """The code's entry, or ``None`` for a code the table does not know (still counted)."""
    return XID_CODES.get(code)


def codes_of(severity: Severity) -> tuple[int, ...]:
    return tuple(sorted(code for code, entry in XID_CODES.items() if entry.severity is severity))
