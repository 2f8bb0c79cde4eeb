"""PCI addresses, the one key the kernel log, sysfs and nvidia-smi share for a GPU.

Each writes it differently: nvidia-smi's ``pci.bus_id`` is ``00000000:3B:00.0``, the driver's kernel lines
say ``0000:3b:00`` (no function), sysfs names ``0000:3b:00.0``. GPUs are function 0 of their device, so the
key is domain, bus and device; the label form is nvidia-smi's, so series join with ``nvidia_smi_gpu_info``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ADDRESS = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})(?:\.(?P<function>[0-7]))?"
)
# sysfs names a function domain:bus:device.function in lower-case hex, the domain 4 digits (more behind a VMD).
_SYSFS_NAME = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
MAX_DOMAIN = 0xFFFF_FFFF
MAX_DEVICE = 0x1F  # five bits in the PCI address


@dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """Domain, bus and device of a PCI function (the function number is not part of a GPU's identity)."""

    domain: int
    bus: int
    device: int

    @property
    def label(self) -> str:
        """nvidia-smi's ``pci.bus_id`` form: ``00000000:3B:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.0"

    @property
    def kernel(self) -> str:
        """The NVIDIA driver's form in kernel-log lines: ``0000:3b:00``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"


def parse_pci_address(text: str) -> PciAddress | None:
    """Any of the three spellings (domain optional, function optional); ``None`` for anything else."""
    match = _ADDRESS.fullmatch(text.strip())
    if match is None:
        return None
    device = int(match["device"], 16)
    if device > MAX_DEVICE:
        return None
    return PciAddress(int(match["domain"] or "0", 16), int(match["bus"], 16), device)


def smi_bus_id(address: str) -> str | None:
    """A sysfs function name (``0000:3b:00.0``) in nvidia-smi's form (``00000000:3B:00.0``), the function kept
    (sysfs lists each function apart); ``None`` for anything else."""
    match = _SYSFS_NAME.fullmatch(address)
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.{function}"
