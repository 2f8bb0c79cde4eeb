"""The NVIDIA functions a node's PCI bus lists: the GPUs it should have, whichever driver holds them.

``health/sysfs.py`` reads them from sysfs and the demo simulates them; the exposition renders them beside the
backend's GPUs, so a GPU the driver lost (bound to vfio-pci, no driver, fallen off the bus) stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

NO_DRIVER = "none"  # the driver label of a function no driver is bound to


class PciKind(str, Enum):
    """What an NVIDIA function is; only GPUs count towards the GPUs expected."""

    GPU = "gpu"  # class 0x0300 (VGA) or 0x0302 (3D controller)
    NVSWITCH = "nvswitch"  # class 0x0680 (other bridge)


@dataclass(frozen=True, slots=True)
class PciFunction:
    """One NVIDIA GPU or NVSwitch on the bus."""

    bus_id: str  # nvidia-smi's form (00000000:3B:00.0), so it joins nvidia_smi_gpu_info{pci_bus_id}
    kind: PciKind
    device_id: str  # as sysfs prints it: 0x2335
    driver: str  # the bound driver's name (nvidia, vfio-pci, ...) or NO_DRIVER


@dataclass(frozen=True, slots=True)
class PciInventory:
    """Every NVIDIA function one reading found, in bus order; empty when the bus has none."""

    functions: tuple[PciFunction, ...] = ()

    @property
    def gpus(self) -> tuple[PciFunction, ...]:
        return tuple(function for function in self.functions if function.kind is PciKind.GPU)

    @property
    def nvswitches(self) -> tuple[PciFunction, ...]:
        return tuple(function for function in self.functions if function.kind is PciKind.NVSWITCH)


class PciSource(Protocol):
    """Where the collector gets its PCI reading, once per collection."""

    async def pci_inventory(self) -> PciInventory | None:
        """The functions on the bus, or ``None`` when they cannot be read now. Never raises."""
        ...
