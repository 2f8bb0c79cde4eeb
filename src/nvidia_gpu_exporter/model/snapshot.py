"""The plain, immutable readings a backend produces and the collector publishes.

Backends know nothing of Prometheus: a reading is the text nvidia-smi printed (or would print) for each
field of each GPU, plus the per-process rows. Turning that text into samples is the exposition's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvidia_gpu_exporter.model.jobs import ProcessJob
    from nvidia_gpu_exporter.model.kubernetes import KubernetesAttribution
    from nvidia_gpu_exporter.model.pcibus import PciInventory
    from nvidia_gpu_exporter.model.verdicts import GpuVerdict


class StatusFamily(Enum):
    """Which status a backend reports for each collection (the exposition names its family)."""

    COMMAND_EXIT_CODE = "command_exit_code"  # the exit status of the nvidia-smi run
    NVML_RETURN_CODE = "nvml_return_code"  # NVML's return code (the demo reports this one too)


@dataclass(frozen=True, slots=True)
class QueryField:
    """A field as queried (``fan.speed``) and the header nvidia-smi returns for it (``fan.speed [%]``)."""

    qfield: str
    rfield: str


def column_of(fields: Sequence[QueryField], qfield: str) -> int | None:
    """Where a query field's cells sit in each row of a :class:`GpuTable`, or ``None`` when it was not queried."""
    return next((position for position, field in enumerate(fields) if field.qfield == qfield), None)


@dataclass(frozen=True, slots=True)
class GpuTable:
    """One row of trimmed cell texts per GPU, in the order of the resolved query fields."""

    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process with a compute context, as raw texts (the pid already checked to be an integer)."""

    gpu_uuid: str
    pid: str
    process_name: str
    used_memory: str
    gpu_instance_id: str = ""
    compute_instance_id: str = ""


@dataclass(frozen=True, slots=True)
class ProcessList:
    """The per-process query's outcome; a failed query has no rows and must not look like an idle GPU."""

    succeeded: bool
    rows: tuple[ProcessRow, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessUsageRow:
    """One process's use of one GPU (``--collect.process-usage``): utilization in percent (0-100) over the
    driver's latest sample window, framebuffer memory in bytes; ``None`` where the source gave no value."""

    gpu_uuid: str
    pid: str
    process_name: str
    sm_percent: float | None = None
    memory_percent: float | None = None  # memory-controller busy time, not capacity
    encoder_percent: float | None = None
    decoder_percent: float | None = None
    used_memory_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessUsageOverflow:
    """The processes of one GPU past the per-GPU cap, summed (each value ``None`` when none of them had one)."""

    gpu_uuid: str  # normalized
    processes: int
    sm_percent: float | None = None
    memory_percent: float | None = None
    encoder_percent: float | None = None
    decoder_percent: float | None = None
    used_memory_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """The per-process usage reading; a failed one has no rows and must not look like idle GPUs.

    Backends fill ``rows``; the collector's cap (:mod:`.processusage`) moves the rows past it into ``overflow``.
    """

    succeeded: bool
    rows: tuple[ProcessUsageRow, ...] = ()
    overflow: tuple[ProcessUsageOverflow, ...] = ()


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's use of one GPU in one collection (:mod:`.podusage` says how); the names are "" unless the API
    server's pod list names the pod or one container holds the GPU."""

    uuid: str  # normalized
    pod_uid: str
    gpu_instance_id: str = ""  # the MIG GPU instance its processes run in, where the process list says; else ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    processes: int = 0
    sm_percent: float | None = None  # the sum of its processes' (None when none had a value)
    used_memory_bytes: float | None = None
    share: float = 0.0  # 0-1: its part of the GPU, by the rule in :mod:`.podusage`
    power_watts: float | None = None  # the GPU's power draw times the share (None: no power reading)
    energy_joules: float | None = None  # its energy since it was first seen (None: the GPU reports none)
    used_seconds: float | None = None  # GPU-seconds used since first seen (None: no SM utilization to integrate)


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """One pod's allocation of one GPU as the kubelet lists it, and its GPU-seconds allocated since first seen."""

    uuid: str  # normalized
    namespace: str
    pod: str
    fraction: float  # its part of the GPU: the devices of it the pod holds over all the devices of it held
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What a collection serves per pod, and per GPU the energy no pod's use accounts for, since the start."""

    pods: tuple[PodShare, ...] = ()
    unattributed_energy: tuple[tuple[str, float], ...] = ()  # (uuid, joules)


@dataclass(frozen=True, slots=True)
class GpuExtras:
    """NVML-only per-GPU readings (``None`` = the GPU cannot report it: no series)."""

    gpu_uuid: str  # as the driver reports it (``GPU-...``); the exposition normalizes it
    energy_joules: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    # NVML GPM (Hopper and newer, not in MIG mode) over the window between two collections, as ratios 0-1.
    graphics_activity_ratio: float | None = None
    tensor_activity_ratio: float | None = None
    dram_activity_ratio: float | None = None  # DRAM bandwidth used vs its theoretical maximum
    # Read only for the DCGM profile (nvml backend): PCIe replays, and the NVLink bandwidth over all links as DCGM
    # computes it (payload sent and received between two collections, in its MiB/s).
    pcie_replay_count: float | None = None
    nvlink_mib_per_second: float | None = None
    nvlink_bytes_per_second: float | None = None  # the same KiB/s times 1024, untruncated: DCGM 4.7's unit (4.9's)
    # Each NVLink the GPU has, read only when a counters file lists a per-link field (DCGM_FI_DEV_NVLINK_*_L<n>).
    nvlink_links: tuple[NvLinkReading, ...] = ()
    # Read only for the DCGM profile, as DCGM reads them (NVML field values): the time the clocks were held down by
    # each performance policy since the driver loaded (ns), and NVLink error counts summed over all links.
    power_violation_ns: float | None = None
    thermal_violation_ns: float | None = None
    sync_boost_violation_ns: float | None = None
    board_limit_violation_ns: float | None = None
    low_util_violation_ns: float | None = None
    reliability_violation_ns: float | None = None
    nvlink_crc_flit_errors: float | None = None
    nvlink_crc_data_errors: float | None = None
    nvlink_replay_errors: float | None = None
    nvlink_recovery_errors: float | None = None
    # Read only for the DCGM profile: NVML's fabric health (nvmlDeviceGetGpuFabricInfoV) as DCGM serves it, the mask
    # from the v2 struct on, the summary only from the v3 struct (model/fabric.py).
    fabric_health_mask: float | None = None
    fabric_health_summary: float | None = None


NVLINK_MAX_LINKS = 18  # DCGM's per-link fields cover links 0-17 (DCGM_NVLINK_MAX_LINKS_PER_GPU)


@dataclass(frozen=True, slots=True)
class NvLinkReading:
    """One NVLink of a GPU as DCGM's per-link fields give it: its bandwidth in DCGM's MiB/s (computed as the
    all-links one, from this link's data counters) and its four error counts since the driver loaded."""

    link: int
    mib_per_second: float | None = None
    crc_flit_errors: float | None = None
    crc_data_errors: float | None = None
    replay_errors: float | None = None
    recovery_errors: float | None = None


# The GpuExtras counters above that DCGM reads as NVML field values (violation times, NVLink error counts).
DCGM_FIELD_COUNTERS = (
    "power_violation_ns",
    "thermal_violation_ns",
    "sync_boost_violation_ns",
    "board_limit_violation_ns",
    "low_util_violation_ns",
    "reliability_violation_ns",
    "nvlink_crc_flit_errors",
    "nvlink_crc_data_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
)


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device (a compute instance inside a GPU instance) of a MIG-enabled GPU."""

    gpu_uuid: str  # the parent GPU
    mig_uuid: str  # ``MIG-...`` as reported; the exposition strips the prefix
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # ``3g.71gb``, or ``1c.3g.71gb`` for a compute slice
    # Its GPU instance's (profile id, placement start, placement size) as nvmlGpuInstanceGetInfo gives them: what
    # NVIDIA's DRA driver names a MIG device by (``gpu-<minor>-mig-<id>-<start>-<size>``); None where NVML would
    # not say (it needs a privileged caller).
    placement: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class MigInstanceReading:
    """Per GPU instance: its memory (bytes) and, from GPM samples, its activity ratios and PCIe rates."""

    gpu_uuid: str
    gpu_instance_id: int
    memory_total_bytes: float | None = None
    memory_used_bytes: float | None = None
    memory_free_bytes: float | None = None
    memory_reserved_bytes: float | None = None
    graphics_activity_ratio: float | None = None
    sm_activity_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_activity_ratio: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class P2PStatus:
    """NVML's NVLink peer-to-peer status between every two GPUs (``nvmlDeviceGetP2PStatus`` with
    ``NVML_P2P_CAPS_INDEX_NVLINK``, as DCGM reads it): ``statuses[i][j]`` from ``uuids[i]`` to ``uuids[j]``, an
    ``nvmlGpuP2PStatus_t`` (0 OK, 1 chipset, 2 GPU, 3 topology not supported, 4 disabled by regkey, 5 not supported,
    6 unknown); the diagonal means nothing."""

    uuids: tuple[str, ...]  # as the driver reports them, in NVML index order
    statuses: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class NvmlExtras:
    """The families only NVML (and the demo, which simulates it) can serve."""

    gpus: tuple[GpuExtras, ...] = ()
    mig_devices: tuple[MigDevice, ...] = ()
    mig_instances: tuple[MigInstanceReading, ...] = ()
    p2p: P2PStatus | None = None  # read only when asked for (DCGM_EXP_P2P_STATUS listed); None: not read, or failed


@dataclass(frozen=True, slots=True)
class XidRecord:
    """XID errors of one code on one GPU (they outlive failed collections).

    NVML counts the events since the exporter started, the kernel log those since boot that its ring
    buffer still holds.
    """

    gpu_uuid: str
    xid: int
    count: int
    last_seen: float | None  # Unix time of the latest one, fractional; None when no line said when


@dataclass(frozen=True, slots=True)
class XidPod:
    """The pod an XID is blamed on, as known when its line was read (every part "" when unknown).

    ``pod_uid`` and ``container_id`` come from the blamed pid's cgroup (--kubernetes.process-pods);
    ``namespace``, ``pod`` and ``container`` name the one container the kubelet said held the whole GPU
    then (--kubernetes.pod-resources), left empty for a GPU shared by several or split into MIG devices.
    """

    pod_uid: str = ""
    container_id: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class XidOccurrence:
    """One recent XID with the process that caused it, as the kernel log names them (the last few per GPU)."""

    gpu_uuid: str
    pci_bus_id: str  # nvidia-smi's form, ``00000000:3B:00.0``
    xid: int
    pid: str  # "" when the driver did not know
    process_name: str
    seen_at: float | None
    pod: XidPod = XidPod()


@dataclass(frozen=True, slots=True)
class SxidRecord:
    """NVSwitch errors (SXids) of one code on one switch, from the kernel log since boot."""

    pci_bus_id: str  # the switch's, in nvidia-smi's form
    sxid: int
    severity: str  # "fatal", "non_fatal", or "" when the line did not say
    count: int
    last_seen: float | None


@dataclass(frozen=True, slots=True)
class FallenGpu:
    """A GPU the driver said fell off the bus; it stays lost until the node reboots."""

    gpu_uuid: str
    pci_bus_id: str


class KernelLogState(Enum):
    """Whether the kernel-log XID source works, and if not, the reason an operator can act on."""

    UP = "up"
    DISABLED = "disabled"  # --collect.xid-source picked another source
    ABSENT = "absent"  # no such file (a container without /dev/kmsg)
    RESTRICTED = "dmesg_restrict"  # kernel.dmesg_restrict=1 and no CAP_SYSLOG
    PERMISSION_DENIED = "permission_denied"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class KernelLogStatus:
    """The kernel-log source's health, so a silent XID panel is never mistaken for a healthy GPU."""

    state: KernelLogState
    path: str
    records: int = 0  # log records read since start
    lost: int = 0  # records the kernel overwrote before we read them
    dropped: int = 0  # events beyond the ledger's bounds


@dataclass(frozen=True, slots=True)
class Readings:
    """Everything one successful collection read."""

    gpus: GpuTable
    processes: ProcessList | None  # None when per-process collection is off
    cuda_version: str = ""
    extras: NvmlExtras | None = None  # None for the exec backend
    process_usage: ProcessUsage | None = None  # None when --collect.process-usage is off
    # (GPU uuid as the table spells it, field) -> Unix time its cell began to say what it says, where the backend
    # knows (the demo's fault scenarios); the verdict otherwise counts a cell's run from its first sight.
    held_since: Mapping[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A completed collection attempt, successful (``readings`` set) or failed (``error`` set)."""

    readings: Readings | None
    status_code: int
    duration_seconds: float
    finished_at: float  # Unix time
    error: str | None = None
    fatal: bool = False  # --shutdown-on-error applies
    exit_code_for_shutdown: int = 1

    @property
    def succeeded(self) -> bool:
        return self.readings is not None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scrape renders: the attempt to serve (``None`` = no result) and the health counters."""

    attempt: Attempt | None
    failed_collections: int
    last_success_at: float | None
    sequence: int = field(default=0, compare=False)  # bumps with every published snapshot
    xids: tuple[XidRecord, ...] = ()  # rendered whatever the attempt's outcome
    xid_occurrences: tuple[XidOccurrence, ...] = ()  # the kernel log's recent XIDs with their processes
    gpus_fallen_off: tuple[FallenGpu, ...] = ()
    sxids: tuple[SxidRecord, ...] = ()  # NVSwitch errors from the kernel log
    xid_source: str = ""  # kmsg, nvml, demo or off; "" when the exporter was not told (tests, embedders)
    kernel_log: KernelLogStatus | None = None  # None when the kernel-log source was never configured
    kubernetes: KubernetesAttribution | None = None  # None unless --kubernetes.* attribution is on
    stuck_children: StuckChildren | None = None  # exec only; rendered whatever the attempt's outcome
    supplement_failures: SupplementFailures | None = None  # the exec backend's NVML supplement; None without one
    pci: PciInventory | None = None  # what sysfs lists (lost GPUs); rendered whatever the attempt's outcome
    # Processes summed into an overflow series since the start (--collect.process-usage); None when that is off.
    process_usage_overflowed: int | None = None
    verdicts: tuple[GpuVerdict, ...] = ()  # each GPU's health verdict, judged once per published collection
    # Per-pod shares and energy (--collect.process-usage with --kubernetes.process-pods); None when either is off.
    pod_usage: PodUsage | None = None
    # GPU-seconds allocated per pod (--kubernetes.pod-resources answered); None when off or the kubelet did not.
    pod_allocations: tuple[PodAllocation, ...] | None = None
    # The Slurm jobs of the served GPU processes (--slurm.jobs); None when that is off.
    slurm_jobs: tuple[ProcessJob, ...] | None = None
    # Failed lists of the node's pods since the start, by reason (--kubernetes.pod-metadata); None when that is off.
    pod_metadata_failures: tuple[tuple[str, int], ...] | None = None


# Failed NVML cycles beside nvidia-smi since the start, as (reason, count) pairs in reason order.
SupplementFailures = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class StuckChildren:
    """Children of the exec backend that SIGKILL has not ended (a wedged driver): now, and ever since the start.

    Rendered whatever the collection's outcome, since while one is stuck every collection fails at once.
    """

    current: int = 0
    total: int = 0
