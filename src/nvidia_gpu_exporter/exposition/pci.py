"""The lost-GPU families (docs/metrics.md, "PCI devices"): what the node's PCI bus lists, beside the GPUs the
backend reports, whatever the collection's outcome (a lost GPU often makes nvidia-smi fail).

A node whose bus lists no NVIDIA function gets neither family, so its output stays byte for byte the Go
exporter's; a reading of ``None`` (sysfs unreadable) renders nothing either.
"""

from __future__ import annotations

from nvidia_gpu_exporter.exposition.families import GPUS_EXPECTED, PCI_DEVICE_INFO
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.pcibus import PciInventory, PciKind


def pci_families(inventory: PciInventory | None) -> list[Family]:
    """The GPUs expected and one info sample per function; a repeated bus id is kept once, never a failed scrape."""
    if inventory is None or not inventory.functions:
        return []
    info = PCI_DEVICE_INFO.family()
    seen: set[str] = set()
    gpus = 0
    for function in inventory.functions:
        if function.bus_id in seen:
            continue
        seen.add(function.bus_id)
        gpus += function.kind is PciKind.GPU
        info.add((function.bus_id, function.kind.value, function.device_id, function.driver), 1.0)
    expected = GPUS_EXPECTED.family()
    expected.add((), float(gpus))
    return [expected, info]
