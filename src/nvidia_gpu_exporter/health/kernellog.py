"""What the NVIDIA driver writes to the kernel log, parsed: XIDs, a GPU's uuid, GPUs fallen off the bus, SXIDs.

The formats are the driver's own ``printf`` formats (open-gpu-kernel-modules, ``kernel_rc.c``):

- ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`` (current drivers;
  ``pid='<unknown>', name=<unknown>`` when no process is known)
- ``NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 43, pid=..., name=..., ...`` (an XID on a MIG device)
- ``NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000`` (older drivers, no pid)
- ``NVRM: GPU at PCI:0000:3b:00: GPU-2f8e...`` (logged once per GPU before its first XID)
- ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``
- ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error``

A line reaches us as a ``/dev/kmsg`` record (``priority,sequence,microseconds,flags;message``), as
``dmesg`` prints it (``[  123.456789] message``), or with a syslog or journal prefix; the message is found
wherever it sits in the line. Docs: ``docs/health.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvidia_gpu_exporter.model.pci import PciAddress, parse_pci_address

MAX_MESSAGE_CHARACTERS = 240  # of an event's free text, kept for logs and /-/xids

_KMSG_RECORD = re.compile(r"(?P<priority>\d+),(?P<sequence>\d+),(?P<usec>\d+),[^;]*;(?P<message>.*)", re.DOTALL)
_DMESG_TIME = re.compile(r"(?:<\d+>)?\[\s*(?P<seconds>\d+)\.(?P<fraction>\d{1,9})\]\s?(?P<message>.*)", re.DOTALL)
_PCI = r"(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?)"
_XID = re.compile(r"NVRM: Xid \(PCI:" + _PCI + r"(?P<mig>[^)]*)\): (?P<code>\d{1,9})(?:, ?(?P<rest>.*))?")
_MIG_GPU_INSTANCE = re.compile(r"GPU-I:(\d{1,5})")
_MIG_COMPUTE_INSTANCE = re.compile(r"GPU-CI:(\d{1,5})")
_PID = re.compile(r"pid=(?:(?P<pid>\d{1,10})|'?<unknown>'?)(?:, |,|$)")
_NAME = re.compile(r"name=(?P<name>.*?)(?:, |$)")
_IDENTITY = re.compile(r"NVRM: GPU at PCI:" + _PCI + r": (?P<uuid>GPU-[0-9a-fA-F-]{8,64})")
_FALLEN = re.compile(r"NVRM: GPU (?:at PCI:)?" + _PCI + r": GPU has fallen off the bus")
_SXID = re.compile(
    r"(?P<switch>nvidia-nvswitch\d{1,4}): SXid \(PCI:" + _PCI + r"\): (?P<code>\d{1,9})(?:, ?(?P<rest>.*))?"
)
UNKNOWN_PROCESS = "<unknown>"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One kernel-log line: its message and, where the line carries it, the kernel time in microseconds."""

    message: str
    kernel_usec: int | None = None  # since boot (the kernel's monotonic clock)
    sequence: int | None = None  # a /dev/kmsg record's sequence number: one per record, rising, never reused


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An XID the driver reported for a GPU, with the process that caused it where the driver knows it."""

    pci: PciAddress
    code: int
    pid: int | None = None
    process_name: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """The driver naming a GPU's uuid at its PCI address (once per GPU, before its first XID)."""

    pci: PciAddress
    uuid: str


@dataclass(frozen=True, slots=True)
class FallenOffBus:
    """The driver lost the GPU: it no longer answers on the PCI bus."""

    pci: PciAddress


@dataclass(frozen=True, slots=True)
class SxidEvent:
    """An NVSwitch error (``SXid``); NVSwitches are not GPUs, so these are kept apart."""

    pci: PciAddress
    code: int
    switch: str
    fatal: bool | None  # None when the line does not say
    text: str = ""


KernelEvent = XidEvent | GpuIdentity | FallenOffBus | SxidEvent


def parse_line(line: str) -> LogLine:
    """Split a ``/dev/kmsg`` record or a ``dmesg`` line into time and message; other lines are all message."""
    record = _KMSG_RECORD.match(line)
    if record is not None:
        return LogLine(record["message"], int(record["usec"]), int(record["sequence"]))
    dmesg = _DMESG_TIME.match(line)
    if dmesg is not None:
        fraction = (dmesg["fraction"] + "000000")[:6]
        return LogLine(dmesg["message"], int(dmesg["seconds"]) * 1_000_000 + int(fraction))
    return LogLine(line)


def _text(rest: str) -> str:
    return rest.strip()[:MAX_MESSAGE_CHARACTERS]


def _xid(match: re.Match[str]) -> XidEvent | None:
    pci = parse_pci_address(match["pci"])
    if pci is None:
        return None
    rest = match["rest"] or ""
    pid: int | None = None
    name = ""
    pid_match = _PID.match(rest)
    if pid_match is not None:
        pid = int(pid_match["pid"]) if pid_match["pid"] else None
        rest = rest[pid_match.end() :]
        name_match = _NAME.match(rest)
        if name_match is not None:
            name = name_match["name"].strip()
            rest = rest[name_match.end() :]
    if name == UNKNOWN_PROCESS:
        name = ""
    mig = match["mig"] or ""
    gpu_instance = _MIG_GPU_INSTANCE.search(mig)
    compute_instance = _MIG_COMPUTE_INSTANCE.search(mig)
    return XidEvent(
        pci,
        int(match["code"]),
        pid,
        name[:MAX_MESSAGE_CHARACTERS],
        int(gpu_instance.group(1)) if gpu_instance else None,
        int(compute_instance.group(1)) if compute_instance else None,
        _text(rest),
    )


def parse_message(message: str) -> KernelEvent | None:
    """The driver event a message reports, or ``None`` for every other kernel message."""
    if "NVRM: " in message:
        if (xid := _XID.search(message)) is not None:
            return _xid(xid)
        if (identity := _IDENTITY.search(message)) is not None:
            pci = parse_pci_address(identity["pci"])
            return GpuIdentity(pci, identity["uuid"]) if pci is not None else None
        if (fallen := _FALLEN.search(message)) is not None:
            pci = parse_pci_address(fallen["pci"])
            return FallenOffBus(pci) if pci is not None else None
        return None
    if "SXid" in message and (sxid := _SXID.search(message)) is not None:
        pci = parse_pci_address(sxid["pci"])
        if pci is None:
            return None
        rest = sxid["rest"] or ""
        severity, _, tail = rest.partition(",")
        fatal = {"fatal": True, "non-fatal": False}.get(severity.strip().lower())
        return SxidEvent(pci, int(sxid["code"]), sxid["switch"], fatal, _text(tail if fatal is not None else rest))
    return None
