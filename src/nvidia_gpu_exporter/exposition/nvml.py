"""The NVML-only families (docs/metrics.md, "NVML-only families"): energy, PCIe, MIG and XID counters.

Pure functions from the backend-neutral readings (:class:`~..snapshot.NvmlExtras`, the snapshot's XID
records) to :class:`~.text.Family` objects; the exposition sorts and renders them with everything else.
A reading of ``None`` means the driver could not report it, so the series is simply absent (never a
fake ``0``). Every ``uuid`` label is normalized like the GPU families' (dashboards join on it) and every
``mig_uuid`` loses its ``MIG-`` prefix the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.exposition.transform import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.model.snapshot import MigInstanceReading, NvmlExtras, XidRecord

ENERGY = "nvidia_smi_energy_joules_total"
PCIE_TX = "nvidia_smi_pcie_throughput_tx_bytes_per_second"
PCIE_RX = "nvidia_smi_pcie_throughput_rx_bytes_per_second"
MIG_INFO = "nvidia_smi_mig_info"
MIG_MEMORY_TOTAL = "nvidia_smi_mig_memory_total_bytes"
MIG_MEMORY_USED = "nvidia_smi_mig_memory_used_bytes"
MIG_MEMORY_FREE = "nvidia_smi_mig_memory_free_bytes"
MIG_MEMORY_RESERVED = "nvidia_smi_mig_memory_reserved_bytes"
MIG_GRAPHICS_ACTIVITY = "nvidia_smi_mig_graphics_activity_ratio"
MIG_SM_ACTIVITY = "nvidia_smi_mig_sm_activity_ratio"
MIG_SM_OCCUPANCY = "nvidia_smi_mig_sm_occupancy_ratio"
MIG_TENSOR_ACTIVITY = "nvidia_smi_mig_tensor_activity_ratio"
MIG_PCIE_TX = "nvidia_smi_mig_pcie_throughput_tx_bytes_per_second"
MIG_PCIE_RX = "nvidia_smi_mig_pcie_throughput_rx_bytes_per_second"
XID_ERRORS = "nvidia_smi_xid_errors_total"
XID_LAST_TIMESTAMP = "nvidia_smi_xid_last_timestamp_seconds"

GPU_LABELS = ("uuid",)
MIG_INFO_LABELS = ("uuid", "mig_uuid", "gpu_instance_id", "compute_instance_id", "profile")
MIG_INSTANCE_LABELS = ("uuid", "gpu_instance_id")
XID_LABELS = ("uuid", "xid")

_PCIE_WINDOW = " by the GPU, sampled by the driver over a dedicated 20ms window."
_MIG_MEMORY_TAIL = (
    "). The framebuffer belongs to the GPU instance and is shared by its compute instances "
    "(verified live: sibling compute instances report identical values)."
)
_MIG_WINDOW_TAIL = (
    " Computed over the window between the two most recent collections; "
    "absent on the first collection that sees the GPU instance."
)

HELP = {
    ENERGY: "Total energy consumed by the GPU in joules since the driver was last loaded. "
    "Resets on a driver reload; absent on GPUs that cannot report it.",
    PCIE_TX: "PCIe traffic transmitted" + _PCIE_WINDOW,
    PCIE_RX: "PCIe traffic received" + _PCIE_WINDOW,
    MIG_INFO: "A metric with a constant '1' value labeled by the identity of a MIG device: the parent "
    "GPU's uuid, the MIG device's own uuid, its GPU instance and compute instance ids, and its profile.",
    MIG_MEMORY_TOTAL: "Memory of the GPU instance (total" + _MIG_MEMORY_TAIL,
    MIG_MEMORY_USED: "Memory of the GPU instance (used" + _MIG_MEMORY_TAIL,
    MIG_MEMORY_FREE: "Memory of the GPU instance (free" + _MIG_MEMORY_TAIL,
    MIG_MEMORY_RESERVED: "Memory of the GPU instance (reserved" + _MIG_MEMORY_TAIL,
    MIG_GRAPHICS_ACTIVITY: "Fraction of time the GPU instance's graphics/compute engines were active."
    + _MIG_WINDOW_TAIL,
    MIG_SM_ACTIVITY: "Fraction of time the GPU instance's SMs were active." + _MIG_WINDOW_TAIL,
    MIG_SM_OCCUPANCY: "Fraction of the GPU instance's resident warp slots that were occupied." + _MIG_WINDOW_TAIL,
    MIG_TENSOR_ACTIVITY: "Fraction of time the GPU instance's tensor pipes were active." + _MIG_WINDOW_TAIL,
    MIG_PCIE_TX: "PCIe traffic transmitted by the GPU instance." + _MIG_WINDOW_TAIL,
    MIG_PCIE_RX: "PCIe traffic received by the GPU instance." + _MIG_WINDOW_TAIL,
    XID_ERRORS: "Number of XID errors observed on the GPU since the exporter started. A series appears "
    "when its first event arrives; earlier history cannot be replayed.",
    XID_LAST_TIMESTAMP: "Unix timestamp of the most recently observed XID error, as received by the "
    "exporter (the driver events carry no timestamp of their own).",
}

# Per-GPU-instance families and the reading each one takes its value from, in declaration order.
_INSTANCE_VALUES: tuple[tuple[str, Callable[[MigInstanceReading], float | None]], ...] = (
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


def _family(name: str, metric_type: str, labels: tuple[str, ...]) -> Family:
    return Family(name, HELP[name], metric_type, labels)


def gpu_extras_families(extras: NvmlExtras) -> list[Family]:
    """Energy counter and PCIe tx/rx gauges, one sample per GPU that reports the value."""
    energy = _family(ENERGY, "counter", GPU_LABELS)
    tx = _family(PCIE_TX, "gauge", GPU_LABELS)
    rx = _family(PCIE_RX, "gauge", GPU_LABELS)
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
    info = _family(MIG_INFO, "gauge", MIG_INFO_LABELS)
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
    families = {name: _family(name, "gauge", MIG_INSTANCE_LABELS) for name, _ in _INSTANCE_VALUES}
    for reading in first_per_instance(extras.mig_instances):
        labels = (normalize_uuid(reading.gpu_uuid), str(reading.gpu_instance_id))
        for name, value_of in _INSTANCE_VALUES:
            value = value_of(reading)
            if value is not None:
                families[name].add(labels, value)
    return list(families.values())


def extras_families(extras: NvmlExtras) -> list[Family]:
    """Every family a successful NVML (or demo) collection adds; empty families render nothing."""
    return [*gpu_extras_families(extras), mig_info_family(extras), *mig_instance_families(extras)]


def xid_families(records: Sequence[XidRecord]) -> list[Family]:
    """XID counters and last-seen times; rendered whatever the collection's outcome (they outlive it)."""
    errors = _family(XID_ERRORS, "counter", XID_LABELS)
    last = _family(XID_LAST_TIMESTAMP, "gauge", XID_LABELS)
    for record in records:
        labels = (normalize_uuid(record.gpu_uuid), str(record.xid))
        errors.add(labels, float(record.count))
        last.add(labels, record.last_seen)
    return [errors, last]
