"""A fake sysfs PCI tree in a test's directory, laid out as the kernel lays out the real one.

``<root>/bus/pci/devices/<address>`` is a symlink to ``<root>/devices/pci0000:00/<address>``, the directory
holding ``vendor``, ``device`` and ``class``; its ``driver`` symlink points at ``<root>/bus/pci/drivers/<name>``.
The reader must follow both links, as it does on a node.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NVIDIA = "0x10de"
H200 = "0x2335"
CLASS_3D = "0x030200"
CLASS_VGA = "0x030000"
CLASS_NVSWITCH = "0x068000"
CLASS_AUDIO = "0x040300"


@dataclass(frozen=True, slots=True)
class FakeFunction:
    """One PCI function; ``driver`` None = no driver bound. Attribute texts are written as given."""

    address: str  # the sysfs name, 0000:3b:00.0
    vendor: str = NVIDIA
    device: str = H200
    pci_class: str = CLASS_3D
    driver: str | None = "nvidia"


def gpu(address: str, driver: str | None = "nvidia", device: str = H200) -> FakeFunction:
    return FakeFunction(address, device=device, driver=driver)


def nvswitch(address: str) -> FakeFunction:
    return FakeFunction(address, device="0x22a3", pci_class=CLASS_NVSWITCH, driver="nvidia-nvswitch")


def other(address: str, vendor: str = "0x8086") -> FakeFunction:
    return FakeFunction(address, vendor=vendor, device="0x1234", pci_class="0x060400", driver="pcieport")


def device_dir(root: Path, address: str) -> Path:
    """Where the function's attribute files are (behind the bus/pci/devices symlink)."""
    return root / "devices" / "pci0000:00" / address


def add_function(root: Path, function: FakeFunction) -> Path:
    """Add one function to the tree (created on first use); returns its attribute directory."""
    directory = device_dir(root, function.address)
    directory.mkdir(parents=True)
    for name, text in (("vendor", function.vendor), ("device", function.device), ("class", function.pci_class)):
        (directory / name).write_text(text + "\n", encoding="ascii")
    if function.driver is not None:
        (root / "bus" / "pci" / "drivers" / function.driver).mkdir(parents=True, exist_ok=True)
        (directory / "driver").symlink_to(Path("..", "..", "..", "bus", "pci", "drivers", function.driver))
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    (devices / function.address).symlink_to(Path("..", "..", "..", "devices", "pci0000:00", function.address))
    return directory


def remove_function(root: Path, address: str) -> None:
    """Take a function off the bus, as a hot-removed device leaves sysfs."""
    os.unlink(root / "bus" / "pci" / "devices" / address)
    shutil.rmtree(device_dir(root, address))


def make_sysfs(root: Path, functions: Iterable[FakeFunction] = ()) -> Path:
    """A tree with these functions (an empty bus/pci/devices when none); returns ``root``."""
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    for function in functions:
        add_function(root, function)
    return root
