"""The NVML-only families (docs/metrics.md, "NVML-only families"): energy, PCIe, MIG and XID counters.

Pure functions from the backend-neutral readings (:class:`~..snapshot.NvmlExtras`, the snapshot's XID
records) to :class:`~.text.Family` objects; the exposition sorts and renders them with everything else.
A reading of ``None`` means the driver could not report it, so the series is simply absent (never a
fake ``0``). Every ``uuid`` label is normalized like the GPU families' (dashboards join on it) and every
``mig_uuid`` loses its ``MIG-`` prefix the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from nvidia_gpu_exporter.exposition.families import (
    ENERGY,
    MIG_GRAPHICS_ACTIVITY,
    MIG_INFO,
    MIG_MEMORY_FREE,
    MIG_MEMORY_RESERVED,
    MIG_MEMORY_TOTAL,
    MIG_MEMORY_USED,
    MIG_PCIE_RX,
    MIG_PCIE_TX,
    MIG_SM_ACTIVITY,
    MIG_SM_OCCUPANCY,
    MIG_TENSOR_ACTIVITY,
    PCIE_RX,
    PCIE_TX,
    XID_ERRORS,
    XID_LAST_TIMESTAMP,
    FamilySpec,
)
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.snapshot import MigInstanceReading, NvmlExtras, XidRecord
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid

# Per-GPU-instance families and the reading each one takes its value from, in declaration order.
_INSTANCE_VALUES: tuple[tuple[FamilySpec, Callable[[MigInstanceReading], float | None]], ...] = (
    (MIG_MEMORY_TOTAL, lambda reading: reading.memory_total_bytes),
    (MIG_MEMORY_USED, lambda reading: reading.memory_used_bytes),
    (MIG_MEMORY_FREE, lambda reading: reading.memory_free_bytes),
    (MIG_MEMORY_RESERVED, lambda reading: reading.memory_reserved_bytes),
    (MIG_GRAPHICS_ACTIVITY, lambda reading: reading.graphics_activity_ratio),
    (MIG_SM_ACTIVITY, lambda reading: reading.sm_activity_ratio),
    (MIG_SM_OCCUPANCY, lambda reading: reading.sm_occupancy_ratio),
    (MIG_TENSOR_ACTIVITY, lambda reading: reading.tensor_activity_ratio),
    (MIG_PCIE_TX, lambda reading: reading.pcie_tx_bytes_per_second),
    (MIG_PCIE_RX, lambda reading: reading.pcie_rx_bytes_per_second),
)


def gpu_extras_families(extras: NvmlExtras) -> list[Family]:
    """Energy counter and PCIe tx/rx gauges, one sample per GPU that reports the value."""
    energy, tx, rx = ENERGY.family(), PCIE_TX.family(), PCIE_RX.family()
    for gpu in extras.gpus:
        labels = (normalize_uuid(gpu.gpu_uuid),)
        for family, value in (
            (energy, gpu.energy_joules),
            (tx, gpu.pcie_tx_bytes_per_second),
            (rx, gpu.pcie_rx_bytes_per_second),
        ):
            if value is not None:
                family.add(labels, value)
    return [energy, tx, rx]


def mig_info_family(extras: NvmlExtras) -> Family:
    """One constant-1 sample per MIG device, identifying its parent GPU, instance ids and profile."""
    info = MIG_INFO.family()
    for device in extras.mig_devices:
        info.add(
            (
                normalize_uuid(device.gpu_uuid),
                normalize_mig_uuid(device.mig_uuid),
                str(device.gpu_instance_id),
                str(device.compute_instance_id),
                device.profile,
            ),
            1.0,
        )
    return info


def first_per_instance(readings: Iterable[MigInstanceReading]) -> list[MigInstanceReading]:
    """One reading per (parent GPU, GPU instance): the first wins, because sibling compute instances of a
    GPU instance report the same framebuffer and GPM window (a repeat would be a duplicate series)."""
    seen: set[tuple[str, int]] = set()
    kept: list[MigInstanceReading] = []
    for reading in readings:
        key = (normalize_uuid(reading.gpu_uuid), reading.gpu_instance_id)
        if key not in seen:
            seen.add(key)
            kept.append(reading)
    return kept


def mig_instance_families(extras: NvmlExtras) -> list[Family]:
    """Memory (total/used/free/reserved) and the six GPM window families, once per GPU instance."""
    families = {spec.name: spec.family() for spec, _ in _INSTANCE_VALUES}
    for reading in first_per_instance(extras.mig_instances):
        labels = (normalize_uuid(reading.gpu_uuid), str(reading.gpu_instance_id))
        for spec, value_of in _INSTANCE_VALUES:
            value = value_of(reading)
            if value is not None:
                families[spec.name].add(labels, value)
    return list(families.values())


def extras_families(extras: NvmlExtras) -> list[Family]:
    """Every family a successful NVML (or demo) collection adds; empty families render nothing."""
    return [*gpu_extras_families(extras), mig_info_family(extras), *mig_instance_families(extras)]


def xid_families(records: Sequence[XidRecord]) -> list[Family]:
    """XID counters and last-seen times; rendered whatever the collection's outcome (they outlive it)."""
    errors, last = XID_ERRORS.family(), XID_LAST_TIMESTAMP.family()
    for record in records:
        labels = (normalize_uuid(record.gpu_uuid), str(record.xid))
        errors.add(labels, float(record.count))
        if record.last_seen is not None:  # a replayed log line that carried no time
            last.add(labels, record.last_seen)
    return [errors, last]
