"""The DCGM output profile (docs/dcgm.md): dcgm-exporter's names, HELP, types, units and labels, from the same snapshot.

Every DCGM family the exporter can serve is declared here once, with the nvidia-smi query fields it is read from
and the header unit the value must carry (DCGM's units are nvidia-smi's: MiB, MHz, W, %, °C). A header in another
unit, an unreadable cell or a field the query lacks gives no sample: DCGM's blank-value sentinels are never
imitated. Labels are written in dcgm-exporter's order, not sorted, so its dashboards' regexes and joins keep
working.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from nvidia_gpu_exporter.exposition.dcgm_counters import Counter
from nvidia_gpu_exporter.exposition.dcgm_defaults import DEFAULT_GENERATION, DEFAULT_WINDOW_MS, Generation
from nvidia_gpu_exporter.exposition.dcgm_events import (
    NAMES as EVENT_NAMES,
)
from nvidia_gpu_exporter.exposition.dcgm_events import (
    XID_NAMES,
    DcgmEvents,
    EventFamily,
    parse_mask,
)
from nvidia_gpu_exporter.exposition.dcgm_generations import (
    RENAMES,
    SAME,
    current_name,
    declaration,
    default_type,
    facts_of,
    in_default_file,
)
from nvidia_gpu_exporter.exposition.dcgm_health import NAME as HEALTH_STATUS
from nvidia_gpu_exporter.exposition.dcgm_health import health_status_text
from nvidia_gpu_exporter.exposition.dcgm_p2p import NAME as P2P_STATUS
from nvidia_gpu_exporter.exposition.dcgm_p2p import NEEDS_NVML, p2p_status_text
from nvidia_gpu_exporter.exposition.dcgm_xids import xid_message
from nvidia_gpu_exporter.exposition.text import escape_label_value, format_value, has_surrogates, header
from nvidia_gpu_exporter.model.fabric import fabric_manager_error, fabric_manager_status
from nvidia_gpu_exporter.model.kubernetes import DraClaim, KubernetesAttribution
from nvidia_gpu_exporter.model.snapshot import (
    NVLINK_MAX_LINKS,
    GpuExtras,
    MigInstanceReading,
    NvmlExtras,
    PodShare,
    PodUsage,
    QueryField,
    Readings,
    Snapshot,
    XidRecord,
    column_of,
)
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, transform_generic

log = logging.getLogger(__name__)

# dcgm-exporter's label order: the GPU's, a GPU instance's on MIG, the node's (spelled as the generation spells
# it), then the counters file's `label` fields (LABEL_FAMILIES below), the pod's (from attribution), and a family's
# own (XIDs) last.
GPU_LABEL_NAMES = ("gpu", "UUID", "pci_bus_id", "device", "modelName")
MIG_LABEL_NAMES = ("GPU_I_PROFILE", "GPU_I_ID")
POD_LABEL_NAMES = ("pod", "namespace", "container")
# dcgm-exporter's -o / --use-old-namespace ("Use old 1.x namespace"): only these label names change
# (internal/pkg/collector/gpu_collector.go and transformation/kubernetes.go, commit d5e5f51); field names do not.
OLD_UUID_LABEL = "uuid"
OLD_POD_LABEL_NAMES = ("pod_name", "pod_namespace", "container_name")
# dcgm-exporter's labels of a ResourceClaim's device, after the pod's (docs/dcgm.md, "DRA claims").
DRA_LABEL_NAMES = (
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_driver_name",
    "dra_pool_name",
    "dra_device_name",
    "dra_mig_profile",  # a MIG device's only (an empty value is no label)
    "dra_mig_device_uuid",
)
POD_UID_LABEL = "pod_uid"  # on a pod's part of a shared GPU, after the pod's names (as the nvidia_smi_pod_* families)
XID_LABEL_NAMES = ("err_code", "err_msg")
_IDENTITY = ("index", "uuid", "pci.bus_id", "name")
LABEL = "label"  # the counters-file type of a field served as a label on every series, not as a family
NOT_ON_MIG = "-"  # DcgmFamily.on_mig of a field DCGM does not report for a GPU instance
MIB = 1_048_576
_MASK_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # before driver 555: throttle
_COMPUTE_SLICE = re.compile(r"^[0-9]+c\.")  # ``1c.3g.71gb``: a compute instance of the ``3g.71gb`` GPU instance


@dataclass(frozen=True, slots=True)
class DcgmFamily:
    """A DCGM family as dcgm-exporter's counters file declares it, and the query field it is read from."""

    name: str
    metric_type: str
    help: str
    qfield: str = ""  # "" = not a query field
    unit: str = ""  # the bracketed unit nvidia-smi's header must show ("" = a bare header)
    # On a GPU instance of a MIG GPU: "" = the parent GPU's value (a device field), NOT_ON_MIG = no series, or
    # the MigInstanceReading attribute that holds the instance's own value (bytes, or a ratio where `gpm` is set).
    on_mig: str = ""
    gpm: str = ""  # the GpuExtras attribute of an NVML GPM ratio, served as it is ("" = not a GPM field)
    extra: str = ""  # the GpuExtras attribute of another NVML reading, already in DCGM's unit ("" = none)
    # From the unit of the field's oldest name (the one its source is declared in) to this name's unit.
    factor: Fraction = SAME
    oldest: str = ""  # the field's oldest name where this is a later one ("" = this is it)
    # A value DCGM derives from several readings: the query fields read beside ``qfield``, and the function of
    # their cells (``qfield``'s first) giving the value, ``None`` for no sample.
    reads: tuple[str, ...] = ()
    decode: Callable[[Sequence[str]], float | None] | None = None
    link: int | None = None  # a per-link field: ``extra`` is then an NvLinkReading attribute of this link

    @property
    def field(self) -> str:
        """The field whatever its name: its oldest name."""
        return self.oldest or self.name


# In default-counters.csv's order; the disabled ECC and retired-page lines too, since nvidia-smi has them.
FIELD_FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "clocks.current.sm", "[MHz]"),
    DcgmFamily("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "clocks.current.memory", "[MHz]"),
    DcgmFamily("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "temperature.memory"),
    DcgmFamily("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature.gpu"),
    DcgmFamily("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power.draw", "[W]"),
    DcgmFamily("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization.gpu", "[%]", NOT_ON_MIG),
    DcgmFamily(
        "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization.memory", "[%]", NOT_ON_MIG
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "utilization.encoder", "[%]", NOT_ON_MIG
    ),
    DcgmFamily(
        "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "utilization.decoder", "[%]", NOT_ON_MIG
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory.free", "[MiB]", "memory_free_bytes"
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory.used", "[MiB]", "memory_used_bytes"
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        "memory.reserved",
        "[MiB]",
        "memory_reserved_bytes",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc.errors.corrected.volatile.total",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc.errors.uncorrected.volatile.total",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "ecc.errors.corrected.aggregate.total",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "ecc.errors.uncorrected.aggregate.total",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        "retired_pages.single_bit_ecc.count",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        "retired_pages.double_bit.count",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows.uncorrectable",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "remapped_rows.correctable",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "remapped_rows.failure"
    ),
)
# dcgm-exporter lists it from 4.9 on: memory.total, in bytes; a GPU instance's own.
FB_CAPACITY = DcgmFamily(
    "DCGM_FI_DEV_FB_CAPACITY_BYTES",
    "gauge",
    "Total GPU memory capacity (in bytes).",
    "memory.total",
    "[MiB]",
    "memory_total_bytes",
    factor=Fraction(MIB),
)
# Not a query field: NVML's energy counter (nvml and demo backends), served in DCGM's millijoules.
TOTAL_ENERGY = DcgmFamily(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."
)
XID_ERRORS = DcgmFamily("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
# Not query fields: NVML GPM's activity (nvml backend, Hopper and newer), percent / 100 as DCGM's profiling ratios.
PROF_FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        on_mig="graphics_activity_ratio",
        gpm="graphics_activity_ratio",
    ),
    DcgmFamily(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        on_mig="tensor_activity_ratio",
        gpm="tensor_activity_ratio",
    ),
    DcgmFamily(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        on_mig=NOT_ON_MIG,
        gpm="dram_activity_ratio",
    ),
)
# Not query fields: NVML readings only the DCGM profile asks for (nvml backend; the demo simulates PCIe rates).
PCIE_REPLAY = DcgmFamily(
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", extra="pcie_replay_count"
)
NVLINK_BANDWIDTH = DcgmFamily(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "counter",
    "Total number of NVLink bandwidth counters for all lanes.",
    extra="nvlink_mib_per_second",
)
# NVML's PCIe throughput (a 20 ms driver sample, bytes per second); a GPU instance's own from its GPM window.
PCIE_FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
        "bytes per second.",
        on_mig="pcie_tx_bytes_per_second",
        extra="pcie_tx_bytes_per_second",
    ),
    DcgmFamily(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in "
        "bytes per second.",
        on_mig="pcie_rx_bytes_per_second",
        extra="pcie_rx_bytes_per_second",
    ),
)
# The families of dcgm-exporter's default file up to generation 4.8 (the disabled ECC and retired-page lines too),
# under their oldest names, in the order the profile renders them without a counters file.
DCGM_FAMILIES: tuple[DcgmFamily, ...] = (
    *FIELD_FAMILIES[:5],
    TOTAL_ENERGY,
    PCIE_REPLAY,
    *FIELD_FAMILIES[5:-3],
    NVLINK_BANDWIDTH,
    *FIELD_FAMILIES[-3:],
    *PROF_FAMILIES,
    *PCIE_FAMILIES,
    XID_ERRORS,
)
# Every family this profile can serve: those, and the ones later generations added, each after its neighbours.
_RESERVED = [family.name for family in DCGM_FAMILIES].index("DCGM_FI_DEV_FB_RESERVED")
ALL_FAMILIES: tuple[DcgmFamily, ...] = (*DCGM_FAMILIES[: _RESERVED + 1], FB_CAPACITY, *DCGM_FAMILIES[_RESERVED + 1 :])
# Fields no dcgm-exporter default file lists, served only when a counters file does (public counters files and
# dcgm-exporter's commented lines ask for them), each from the NVML reading DCGM's own field reads
# (DcgmCacheManager.cpp, dcgm_fields.cpp): in DCGM's units (MHz, %, MiB, W; violation times in ns).
LISTED_ONLY_FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily(
        "DCGM_FI_DEV_VIDEO_CLOCK", "gauge", "Video encoder/decoder clock (in MHz).", "clocks.current.video", "[MHz]"
    ),
    DcgmFamily("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum supported SM clock (in MHz).", "clocks.max.sm", "[MHz]"),
    DcgmFamily(
        "DCGM_FI_DEV_MAX_MEM_CLOCK", "gauge", "Maximum supported memory clock (in MHz).", "clocks.max.memory", "[MHz]"
    ),
    DcgmFamily("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in 0-100%).", "fan.speed", "[%]"),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_USAGE_INSTANT",
        "gauge",
        "Current instantaneous power usage (in W).",
        "power.draw.instant",
        "[W]",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Configured power management limit (in W).", "power.limit", "[W]"
    ),
    DcgmFamily("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", "gauge", "Minimum power limit (in W).", "power.min_limit", "[W]"),
    DcgmFamily("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "gauge", "Maximum power limit (in W).", "power.max_limit", "[W]"),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "gauge", "Default power limit (in W).", "power.default_limit", "[W]"
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "gauge",
        "Effective power limit enforced by the driver after all limiters (in W).",
        "enforced.power.limit",
        "[W]",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gauge",
        "Whether pages are pending retirement (1 means pending and 0 means not pending).",
        "retired_pages.pending",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "Framebuffer memory total (in MiB).",
        "memory.total",
        "[MiB]",
        "memory_total_bytes",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in ns).",
        extra="power_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in ns).",
        extra="thermal_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
        "counter",
        "Throttling duration due to sync-boost constraints (in ns).",
        extra="sync_boost_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "counter",
        "Throttling duration due to board limit constraints (in ns).",
        extra="board_limit_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
        "counter",
        "Throttling duration due to low utilization (in ns).",
        extra="low_util_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "counter",
        "Throttling duration due to reliability constraints (in ns).",
        extra="reliability_violation_ns",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        extra="nvlink_crc_flit_errors",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
        extra="nvlink_crc_data_errors",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        extra="nvlink_replay_errors",
    ),
    DcgmFamily(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        extra="nvlink_recovery_errors",
    ),
)

# DCGM's per-link NVLink fields, DCGM_FI_DEV_NVLINK_<kind>_L<n> for links 0-17 (dcgm_fields.h; DCGM 4's header names
# the bandwidth ones DCGM_FI_DEV_NVLINK_THROUGHPUT_L<n> too): the name's stem, type, HELP and NvLinkReading
# attribute of each kind, served only when a counters file lists them and only for the links the GPU has.
NVLINK_LINK_KINDS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH", "gauge", "NVLink lane {link} throughput (in MB/s).", "mib_per_second"),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT",
        "counter",
        "NVLink flow-control CRC errors on link {link}.",
        "crc_flit_errors",
    ),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT", "counter", "NVLink data CRC errors on link {link}.", "crc_data_errors"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT", "counter", "NVLink retries on link {link}.", "replay_errors"),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT", "counter", "NVLink recovery errors on link {link}.", "recovery_errors"),
)
NVLINK_LINK_FAMILIES: tuple[DcgmFamily, ...] = tuple(
    DcgmFamily(f"{stem}_L{link}", metric_type, text.format(link=link), extra=attribute, link=link)
    for stem, metric_type, text, attribute in NVLINK_LINK_KINDS
    for link in range(NVLINK_MAX_LINKS)
)
NVLINK_THROUGHPUT_NAMES = {  # dcgm_fields.h's alias block (v4.6.0): the same field ids
    f"DCGM_FI_DEV_NVLINK_THROUGHPUT_L{link}": f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}"
    for link in range(NVLINK_MAX_LINKS)
}
NVLINK_LINK_NAMES = frozenset((*(family.name for family in NVLINK_LINK_FAMILIES), *NVLINK_THROUGHPUT_NAMES))


def _fm_status(cells: Sequence[str]) -> float | None:
    status = fabric_manager_status(cells[0], cells[1])
    return None if status is None else float(status)


def _fm_error(cells: Sequence[str]) -> float | None:
    code = fabric_manager_error(cells[0], cells[1])
    return None if code is None else float(code)


# Fabric health on NVSwitch systems (dcgm_fields.h 170-173), listed-only too: from nvidia-smi's fabric.* cells,
# which the nvml backend reads with nvmlDeviceGetGpuFabricInfoV as DCGM does (model/fabric.py).
FABRIC_FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily(
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
        "gauge",
        "The status of the fabric manager - a value from dcgmFabricManagerStatus_t.",
        "fabric.state",
        reads=("fabric.status",),
        decode=_fm_status,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE",
        "gauge",
        "The failure that happened while starting the Fabric Manager, if any.",
        "fabric.state",
        reads=("fabric.status",),
        decode=_fm_error,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FABRIC_CLIQUE_ID",
        "gauge",
        "The ID of the fabric clique to which this GPU belongs.",
        "fabric.cliqueId",
    ),
    # 174 and 175: NVML's values, read beside the others for the DCGM profile (nvidia-smi prints the mask's parts
    # as words, not the mask); dcgm-exporter's newest files list them commented out, typed gauge.
    DcgmFamily("DCGM_FI_DEV_FABRIC_HEALTH_MASK", "gauge", "GPU fabric health status mask.", extra="fabric_health_mask"),
    DcgmFamily(
        "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", "gauge", "GPU fabric health summary.", extra="fabric_health_summary"
    ),
)
# A string: a `label` field, as dcgm-exporter serves strings.
FABRIC_CLUSTER_UUID = DcgmFamily(
    "DCGM_FI_DEV_FABRIC_CLUSTER_UUID", LABEL, "The uuid of the cluster to which this GPU belongs", "fabric.clusterUuid"
)
# DCGM 4's Field Naming Standard renamed some fields; go-dcgm maps both names to one field id (const_fields.go).
DCGM_RENAMED: dict[str, str] = {
    "DCGM_FI_DEV_FABRIC_MANAGER_ERROR": "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE",
    **NVLINK_THROUGHPUT_NAMES,
}
DRIVER_VERSION = DcgmFamily("DCGM_FI_DRIVER_VERSION", LABEL, "Driver Version", "driver_version")
# The `label` fields nvidia-smi can give, in default-counters.csv's order; only the driver's is on by default.
LABEL_FAMILIES: tuple[DcgmFamily, ...] = (
    DRIVER_VERSION,
    DcgmFamily("DCGM_FI_DEV_SERIAL", LABEL, "Device Serial Number", "serial"),
    DcgmFamily("DCGM_FI_DEV_OEM_INFOROM_VER", LABEL, "OEM inforom version", "inforom.oem"),
    DcgmFamily("DCGM_FI_DEV_ECC_INFOROM_VER", LABEL, "ECC inforom version", "inforom.ecc"),
    DcgmFamily("DCGM_FI_DEV_POWER_INFOROM_VER", LABEL, "Power management object inforom version", "inforom.pwr"),
    DcgmFamily("DCGM_FI_DEV_INFOROM_IMAGE_VER", LABEL, "Inforom image version", "inforom.img"),
    DcgmFamily("DCGM_FI_DEV_VBIOS_VERSION", LABEL, "VBIOS version of the device", "vbios_version"),
)


# dcgm-exporter 1.x's names that its 1.x-compatibility counters file lists, and the DCGM field each stands for: the
# part of go-dcgm's legacy field table (pkg/dcgm/legacy_fields.csv, commit 0740c4c) naming a field offered here.
LEGACY_NAMES: dict[str, str] = {
    "dcgm_sm_clock": "DCGM_FI_DEV_SM_CLOCK",
    "dcgm_memory_clock": "DCGM_FI_DEV_MEM_CLOCK",
    "dcgm_memory_temp": "DCGM_FI_DEV_MEMORY_TEMP",
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_total_energy_consumption": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "dcgm_gpu_utilization": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_mem_copy_utilization": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "dcgm_enc_utilization": "DCGM_FI_DEV_ENC_UTIL",
    "dcgm_dec_utilization": "DCGM_FI_DEV_DEC_UTIL",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_power_violation": "DCGM_FI_DEV_POWER_VIOLATION",
    "dcgm_thermal_violation": "DCGM_FI_DEV_THERMAL_VIOLATION",
    "dcgm_sync_boost_violation": "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "dcgm_board_limit_violation": "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
    "dcgm_low_util_violation": "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "dcgm_reliability_violation": "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_ecc_sbe_volatile_total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "dcgm_ecc_dbe_volatile_total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "dcgm_ecc_sbe_aggregate_total": "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "dcgm_ecc_dbe_aggregate_total": "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "dcgm_retired_pages_sbe": "DCGM_FI_DEV_RETIRED_SBE",
    "dcgm_retired_pages_dbe": "DCGM_FI_DEV_RETIRED_DBE",
    "dcgm_retired_pages_pending": "DCGM_FI_DEV_RETIRED_PENDING",
    "dcgm_nvlink_flit_crc_error_count_total": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_data_crc_error_count_total": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_replay_error_count_total": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_recovery_error_count_total": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "dcgm_nvlink_bandwidth_total": "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "dcgm_fi_prof_gr_engine_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "dcgm_fi_prof_pipe_tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dcgm_fi_prof_dram_active": "DCGM_FI_PROF_DRAM_ACTIVE",
    "dcgm_fi_prof_pcie_tx_bytes": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "dcgm_fi_prof_pcie_rx_bytes": "DCGM_FI_PROF_PCIE_RX_BYTES",
}


def _every_spelling() -> dict[str, DcgmFamily]:
    """Every name a field has had, each with its own HELP and unit: a counters file may use any of them (1.x's
    lower-case ones in the field's DCGM unit, as go-dcgm maps them to the same field)."""
    every = (
        *ALL_FAMILIES,
        *LISTED_ONLY_FAMILIES,
        *NVLINK_LINK_FAMILIES,
        *FABRIC_FAMILIES,
        *LABEL_FAMILIES,
        FABRIC_CLUSTER_UUID,
    )
    known = {family.name: family for family in every}
    for rename in RENAMES:
        older = known[rename.old]
        known[rename.new] = replace(
            older,
            name=rename.new,
            metric_type=rename.metric_type or older.metric_type,
            help=rename.help or older.help,
            extra=rename.source or older.extra,
            factor=SAME if rename.source else older.factor * rename.factor,
            oldest=older.field,
        )
    for legacy, current in (*LEGACY_NAMES.items(), *DCGM_RENAMED.items()):
        known[legacy] = replace(known[current], name=legacy, oldest=known[current].field)
    return known


_KNOWN = _every_spelling()


def default_families(generation: Generation) -> tuple[DcgmFamily, ...]:
    """What a generation serves without a counters file: its default file's fields (the disabled ECC and
    retired-page ones too), under its names, and its driver-version label field."""
    families: list[DcgmFamily] = []
    for family in (*ALL_FAMILIES, DRIVER_VERSION):
        if not in_default_file(family.name, generation):
            continue
        served = _KNOWN[current_name(family.name, generation)]
        if retyped := default_type(family.name, generation):
            served = replace(served, metric_type=retyped)
        declared = declaration(family.name, generation)
        if declared is not None:
            served = replace(served, metric_type=declared[0], help=declared[1])
        families.append(served)
    return tuple(families)


def _scaled(value: float, factor: Fraction) -> float:
    """A value in another unit, rounded once: ``factor`` is a whole multiplier or one over a divisor."""
    if factor.denominator == 1:
        return value * factor.numerator
    return value * factor.numerator / factor.denominator


_SINGLE_VALUE_TYPES = ("gauge", "counter")


def node_hostname(environ: Mapping[str, str]) -> str:
    """The ``hostname`` label: ``NODE_NAME`` (set from the pod's node in Kubernetes), as dcgm-exporter reads it."""
    return environ.get("NODE_NAME") or socket.gethostname()


def _header_unit(query_field: str, header_text: str) -> str:
    """The bracketed unit of a header (``memory.free [MiB]`` -> ``[MiB]``), "" for a bare one."""
    return header_text[len(query_field) :].strip() if header_text.startswith(query_field) else header_text


def _gpu_order(index: str) -> tuple[int, str]:
    """Numeric index order (``2`` before ``10``), as dcgm-exporter walks its GPU ids."""
    return (int(index), index) if index.isdigit() else (1 << 31, index)


def dcgm_value(value: float) -> str:
    """Whole numbers as integers, as dcgm-exporter writes DCGM's integer fields (an energy counter never goes
    ``1.23456789e+08``); fractions in Go's shortest form."""
    if value.is_integer() and abs(value) < 2.0**63:
        return str(int(value))
    return format_value(value)


def latest_xid(records: Sequence[XidRecord]) -> XidRecord:
    """The record seen last; one with a time beats one without, and the first wins a tie."""
    return max(records, key=lambda record: (record.last_seen is not None, record.last_seen or 0.0))


@dataclass(frozen=True, slots=True)
class _GpuInstance:
    """A GPU instance of a MIG GPU as dcgm-exporter monitors it: its id, profile and MIG devices."""

    gpu_instance_id: int
    profile: str
    mig_uuids: frozenset[str]
    reading: MigInstanceReading | None


@dataclass(frozen=True, slots=True)
class _Entity:
    """What one series per family stands for: a whole GPU, or one GPU instance of a MIG GPU (``instance`` set)."""

    order: tuple[tuple[int, str], int]
    uuid: str  # the (parent) GPU's, normalized
    labels: str  # without braces, up to the family's own labels
    cells: tuple[str, ...]
    instance: _GpuInstance | None = None
    held: bool = False  # one container holds it (its labels name the pod): it is that pod's, never split


@dataclass(frozen=True, slots=True)
class _PodPart:
    """One pod's part of a shared GPU or GPU instance: its series' labels and what it is split by."""

    labels: str
    share: float  # 0-1 of the entity's utilization and power
    memory_mib: float | None  # its processes' used memory, in DCGM's whole MiB
    energy_mj: float | None  # its energy since it was first seen there, in DCGM's mJ


def _claim_values(claim: DraClaim) -> tuple[str, ...]:
    """A claim's values in :data:`DRA_LABEL_NAMES`' order."""
    return (
        claim.claim_name, claim.claim_namespace, claim.driver, claim.pool, claim.device, claim.mig_profile,
        claim.mig_uuid,
    )  # fmt: skip


def _sum(first: float | None, second: float | None) -> float | None:
    return first if second is None else second if first is None else first + second


def _per_pod(shares: Iterable[PodShare]) -> list[PodShare]:
    """One share per pod: a pod on two GPU instances of a GPU served whole is one part of it, not two series."""
    merged: dict[str, PodShare] = {}
    for share in shares:
        found = merged.get(share.pod_uid)
        merged[share.pod_uid] = (
            share
            if found is None
            else replace(
                found,
                share=found.share + share.share,
                used_memory_bytes=_sum(found.used_memory_bytes, share.used_memory_bytes),
                energy_joules=_sum(found.energy_joules, share.energy_joules),
            )
        )
    return list(merged.values())


# The fields split per pod on a shared GPU (docs/dcgm.md, "Per-pod shares"), by their oldest names: a fraction of
# time the GPU (or GPU instance) was busy, and power, by the pod's share; memory used by the pod's own processes;
# energy by the pods' energy counters. Every other field says something of the whole GPU and stays per GPU.
SPLIT_BY_SHARE = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)
SPLIT_BY_MEMORY = "DCGM_FI_DEV_FB_USED"


def gpu_instances(extras: NvmlExtras | None) -> dict[str, list[_GpuInstance]]:
    """Normalized parent uuid -> its GPU instances by id; compute instances of one GPU instance are one entity."""
    if extras is None:
        return {}
    profiles: dict[tuple[str, int], str] = {}
    devices: dict[tuple[str, int], set[str]] = {}
    for device in extras.mig_devices:
        key = (normalize_uuid(device.gpu_uuid), device.gpu_instance_id)
        profiles.setdefault(key, _COMPUTE_SLICE.sub("", device.profile))
        devices.setdefault(key, set()).add(normalize_mig_uuid(device.mig_uuid))
    readings: dict[tuple[str, int], MigInstanceReading] = {}
    for reading in extras.mig_instances:
        readings.setdefault((normalize_uuid(reading.gpu_uuid), reading.gpu_instance_id), reading)
    by_gpu: dict[str, list[_GpuInstance]] = {}
    for key in sorted(profiles):
        instance = _GpuInstance(key[1], profiles[key], frozenset(devices[key]), readings.get(key))
        by_gpu.setdefault(key[0], []).append(instance)
    return by_gpu


def _value_type_problem(counter: Counter) -> str | None:
    """Why an exporter family (events, P2P) cannot have the listed type: it is a value."""
    if counter.metric_type not in ("gauge", "counter"):
        return f"typed {counter.metric_type}: it is a value, served as a gauge or counter"
    return None


def _not_servable(family: DcgmFamily | None, counter: Counter) -> str | None:
    """Why a counters-file record cannot be served as written, or ``None`` when its type fits the field."""
    if family is None:
        return "not offered by this exporter"
    if family.metric_type == LABEL:
        return None if counter.metric_type == LABEL else f"a label field, not a {counter.metric_type}"
    if counter.metric_type == LABEL:
        return "a value, not a label"
    if counter.metric_type not in _SINGLE_VALUE_TYPES:
        return f"a single value cannot be a {counter.metric_type}"
    return None


class DcgmExposition:
    """Renders the DCGM families of snapshots of one backend configuration; what is served is decided once.

    Without ``counters`` every family this exporter offers is served, with ``DCGM_FI_DRIVER_VERSION`` as the one
    label field (dcgm-exporter's default). With them, exactly the records it can serve, in the file's order and
    with the file's type and HELP; one warning at construction lists the others and why. ``energy`` says whether
    the backend reads NVML's energy counter (nvml and demo), ``gpm`` whether it samples NVML GPM (nvml),
    ``extras`` whether it reads the other NVML readings (PCIe replays and rates, NVLink bandwidth, P2P status: nvml,
    demo). A MIG GPU whose GPU instances the readings list is served per GPU instance, as dcgm-exporter monitors it;
    ``pod_labels`` adds the holding container's labels, ``dra_claims`` repeats a GPU's series for each container
    whose ResourceClaim holds it, with the claim's labels. ``generation`` is the dcgm-exporter generation to look
    like: its node label's spelling and, without a counters file, its default fields under its names and units.
    ``xids`` says whether XIDs are read at all: only then does a GPU without one get the ``No Error`` series.
    ``old_namespace`` spells the uuid and pod labels as dcgm-exporter's ``-o`` does.
    """

    def __init__(
        self,
        fields: Sequence[QueryField],
        hostname: str | None,
        *,
        counters: Sequence[Counter] | None = None,
        energy: bool = True,
        gpm: bool = False,
        extras: bool = True,
        pod_labels: bool = False,
        dra_claims: bool = False,
        model_name_dashes: bool = False,
        generation: Generation = DEFAULT_GENERATION,
        xids: bool = True,
        xid_window_ms: int = DEFAULT_WINDOW_MS,
        clock_events_window_ms: int = DEFAULT_WINDOW_MS,
        old_namespace: bool = False,
    ) -> None:
        identity = [column_of(fields, name) for name in _IDENTITY]
        missing = [name for name, column in zip(_IDENTITY, identity, strict=True) if column is None]
        if missing:
            raise ValueError(f"identity fields missing from the query: {', '.join(missing)}")
        self._identity = tuple(column for column in identity if column is not None)
        self.hostname = hostname  # None: no hostname label (dcgm-exporter's -n / --no-hostname)
        self.hostname_label = facts_of(generation).hostname_label
        self.generation = generation
        self.xids = xids
        self.model_name_dashes = model_name_dashes  # its --replace-blanks-in-model-name
        self.pod_labels = pod_labels  # --kubernetes.pod-labels
        self._gpu_label_names = (
            tuple(OLD_UUID_LABEL if name == "UUID" else name for name in GPU_LABEL_NAMES)
            if old_namespace
            else GPU_LABEL_NAMES
        )
        self._pod_label_names = OLD_POD_LABEL_NAMES if old_namespace else POD_LABEL_NAMES
        self.dra_claims = dra_claims  # --kubernetes.dra-claims: a claimed GPU's series once per claiming container
        self._served: list[tuple[DcgmFamily, int | None]] = []
        self._label_columns: list[tuple[str, int]] = []
        self._decoded: dict[str, tuple[int, ...]] = {}  # a derived family's columns, by its name as served
        unavailable: list[str] = []
        first_line: dict[str, int] = {}
        # Only when listed, as dcgm-exporter (its default file has it commented out): the built-in set stays its own.
        self._health_status = any(counter.name == HEALTH_STATUS for counter in counters or ())
        events: list[EventFamily] = []
        self._p2p: EventFamily | None = None  # DCGM_EXP_P2P_STATUS as listed (dcgm_p2p.py)
        self._mask_column = next(
            (column for name in _MASK_FIELDS if (column := column_of(fields, name)) is not None), None
        )
        for counter in counters or ():
            if counter.name in first_line:  # dcgm-exporter serves a field's first record only
                first = first_line[counter.name]
                unavailable.append(
                    f"{counter.name} (line {counter.line}: listed again, first on line {first}: "
                    "the first record is served)"
                )
                continue
            first_line[counter.name] = counter.line
            if counter.name == HEALTH_STATUS:  # the verdict, rendered last (dcgm_health.py)
                continue
            if counter.name == P2P_STATUS:
                reason = _value_type_problem(counter) or (None if extras else NEEDS_NVML)
                if reason is None:
                    self._p2p = EventFamily(counter.name, counter.metric_type, counter.help)
                else:
                    unavailable.append(f"{counter.name} (line {counter.line}: {reason})")
                continue
            if counter.name in EVENT_NAMES:
                reason = self._event_problem(counter)
                if reason is None:
                    events.append(EventFamily(counter.name, counter.metric_type, counter.help))
                else:
                    unavailable.append(f"{counter.name} (line {counter.line}: {reason})")
                continue
            family = _KNOWN.get(counter.name)
            reason = _not_servable(family, counter)
            if family is not None and reason is None:
                reason = self._place(
                    replace(family, metric_type=counter.metric_type, help=counter.help), fields, energy, gpm, extras
                )
            if reason is not None:
                unavailable.append(f"{counter.name} (line {counter.line}: {reason})")
        if counters is None:
            for family in default_families(generation):
                reason = self._place(family, fields, energy, gpm, extras)
                if reason is not None and reason.startswith("its header"):  # an absent source is no news here
                    unavailable.append(f"{family.name} ({reason})")
        self._events = DcgmEvents(events, xid_window_ms, clock_events_window_ms) if events else None
        if unavailable:
            where = {"file": counters[0].source} if counters else {}
            log.warning("not serving DCGM fields", extra={**where, "fields": ", ".join(unavailable)})

    def _event_problem(self, counter: Counter) -> str | None:
        """Why an exporter event family cannot be served as listed, or ``None``."""
        problem = _value_type_problem(counter)
        if problem is not None:
            return problem
        if counter.name in XID_NAMES and not self.xids:
            return "XIDs are not read (--collect.xid-source=off)"
        if counter.name not in XID_NAMES and self._mask_column is None:
            return f"{_MASK_FIELDS[0]} is not queried"
        return None

    def _place(
        self, family: DcgmFamily, fields: Sequence[QueryField], energy: bool, gpm: bool, extras: bool
    ) -> str | None:
        """Serve a family (or label field) from its source, or say why this backend's query cannot give it."""
        if (
            family.field == XID_ERRORS.name
            or (family.field == TOTAL_ENERGY.name and energy)
            or (family.gpm and gpm)
            or (family.extra and extras)
        ):
            self._served.append((family, None))
            return None
        if family.field == TOTAL_ENERGY.name or family.extra:
            return "needs the nvml or demo backend"
        if family.gpm:
            return "needs the nvml backend: NVML GPM"
        if family.decode is not None:
            columns = [column_of(fields, name) for name in (family.qfield, *family.reads)]
            missing = [name for name, at in zip((family.qfield, *family.reads), columns, strict=True) if at is None]
            if missing:
                return f"{missing[0]} is not queried"
            self._decoded[family.name] = tuple(at for at in columns if at is not None)
            self._served.append((family, columns[0]))
            return None
        column = column_of(fields, family.qfield)
        if column is None:
            return f"{family.qfield} is not queried"
        if family.metric_type == LABEL:
            self._label_columns.append((family.name, column))
        elif _header_unit(family.qfield, fields[column].rfield) == family.unit:
            self._served.append((family, column))
        else:
            return f"its header {fields[column].rfield!r} is not in {family.unit or 'no unit'}"
        return None

    def _labels(
        self,
        cells: Sequence[str],
        mig: tuple[str, str] | None,
        pod: tuple[str, str, str] | None,
        extra: Sequence[tuple[str, str]] = (),
    ) -> str | None:
        """The label text (without braces) of a GPU or GPU instance, or ``None`` for one that cannot be labelled."""
        index, uuid, bus_id, name = (cells[column] for column in self._identity)
        if self.model_name_dashes:  # as dcgm-exporter: blank runs collapsed and trimmed, then each one a dash
            name = "-".join(name.split())
        pairs = list(zip(self._gpu_label_names, (index, uuid, bus_id, "nvidia" + index, name), strict=True))
        if mig is not None:
            pairs += zip(MIG_LABEL_NAMES, mig, strict=True)
        if self.hostname is not None:
            pairs.append((self.hostname_label, self.hostname))
        pairs += [
            (label, cells[column])
            for label, column in self._label_columns
            if cells[column].strip().lower() not in ABSENT_TOKENS  # dcgm-exporter adds a label only when read
        ]
        if pod is not None:
            pairs += [(label, value) for label, value in zip(self._pod_label_names, pod, strict=True) if value]
        pairs += [(label, value) for label, value in extra if value]
        if any(has_surrogates(value) for _, value in pairs):
            return None
        return ",".join(f'{label}="{escape_label_value(value)}"' for label, value in pairs)

    def render(self, snapshot: Snapshot) -> str:
        """The DCGM text of a snapshot: nothing unless its collection succeeded (DCGM has no health series)."""
        attempt = snapshot.attempt
        if attempt is None or attempt.readings is None:
            return ""
        attribution = snapshot.kubernetes if self.pod_labels or self.dra_claims else None
        text = self._render(attempt.readings, snapshot.xids, attribution, snapshot.pod_usage)
        if self._events is not None:
            text += self._event_text(attempt.finished_at, attempt.readings, snapshot.xids, attribution)
        extras = attempt.readings.extras
        if self._p2p is not None and extras is not None and extras.p2p is not None:
            text += p2p_status_text(
                self._p2p.metric_type, self._p2p.help, extras.p2p, self._whole_gpus(attempt.readings)
            )
        if not self._health_status:
            return text
        rows = attempt.readings.gpus.rows
        gpus = {normalize_uuid(row[self._identity[1]]): self._labels(row, None, None) for row in rows}
        return text + health_status_text({uuid: labels for uuid, labels in gpus.items() if labels}, snapshot.verdicts)

    def _whole_gpus(self, readings: Readings) -> dict[str, tuple[str, str]]:
        """Each GPU read, as a whole GPU: normalized uuid -> (index, label text); one that cannot be labelled is
        left out."""
        gpus: dict[str, tuple[str, str]] = {}
        for row in readings.gpus.rows:
            labels = self._labels(row, None, None)
            if labels is not None:
                gpus[normalize_uuid(row[self._identity[1]])] = (row[self._identity[0]], labels)
        return gpus

    def _event_text(
        self,
        now: float,
        readings: Readings,
        xids: Sequence[XidRecord],
        attribution: KubernetesAttribution | None,
    ) -> str:
        """The listed event families, this collection (finished at ``now``) one sample of each GPU."""
        assert self._events is not None
        masks: dict[str, int] = {}
        if self._mask_column is not None:
            for cells in readings.gpus.rows:
                mask = parse_mask(cells[self._mask_column])
                if mask is not None:
                    masks[normalize_uuid(cells[self._identity[1]])] = mask
        entities = [(entity.uuid, entity.labels) for entity in self._entities(readings, attribution)]
        return self._events.text(now, entities, xids if self.xids else (), masks)

    def _entities(self, readings: Readings, attribution: KubernetesAttribution | None) -> list[_Entity]:
        """Every GPU, or each GPU instance of a MIG GPU, in index (then GPU instance id) order."""
        instances = gpu_instances(readings.extras)
        holders = attribution.pod_holders() if attribution is not None and self.pod_labels else {}
        claims = self._claims(attribution)
        entities: list[_Entity] = []
        for cells in readings.gpus.rows:
            index, raw_uuid = cells[self._identity[0]], cells[self._identity[1]]
            uuid = normalize_uuid(raw_uuid)
            parts: list[tuple[int, str | None, _GpuInstance | None]] = [
                (
                    instance.gpu_instance_id,
                    self._labels(
                        cells,
                        (instance.profile, str(instance.gpu_instance_id)),
                        self._instance_holder(uuid, instance, holders),
                    ),
                    instance,
                )
                for instance in instances.get(uuid, ())
            ] or [(-1, self._labels(cells, None, holders.get((uuid, ""))), None)]
            for gpu_instance_id, labels, instance in parts:
                if labels is None:
                    log.error("dropping a GPU whose identity is not valid UTF-8 from the DCGM profile")
                    continue
                order = (_gpu_order(index), gpu_instance_id)
                if uuid in claims:  # one copy per claiming container, which it is (never split per pod)
                    mig = (instance.profile, str(instance.gpu_instance_id)) if instance is not None else None
                    for claim in claims[uuid]:
                        pod = (claim.pod, claim.namespace, claim.container)
                        extra = zip(DRA_LABEL_NAMES, _claim_values(claim), strict=True)
                        claimed = self._labels(cells, mig, pod, list(extra))
                        if claimed is not None:
                            entities.append(_Entity(order, uuid, claimed, cells, instance, held=True))
                    continue
                held = self._held(uuid, instance, holders)
                entities.append(_Entity(order, uuid, labels, cells, instance, held))
        entities.sort(key=lambda entity: entity.order)
        return entities

    def _claims(self, attribution: KubernetesAttribution | None) -> dict[str, list[DraClaim]]:
        """GPU uuid -> the ResourceClaim devices on it, one per container (its first), as dcgm-exporter keeps them;
        a device placed on no GPU read has no series to label."""
        if attribution is None or not self.dra_claims or not attribution.claims:
            return {}
        found: dict[str, dict[tuple[str, str, str], DraClaim]] = {}
        for claim in attribution.claims:
            if claim.uuid:
                found.setdefault(claim.uuid, {}).setdefault((claim.namespace, claim.pod, claim.container), claim)
        return {uuid: list(per_container.values()) for uuid, per_container in found.items()}

    def _held(
        self, uuid: str, instance: _GpuInstance | None, holders: dict[tuple[str, str], tuple[str, str, str]]
    ) -> bool:
        if instance is None:
            return (uuid, "") in holders
        return self._instance_holder(uuid, instance, holders) is not None

    def _pod_parts(self, entity: _Entity, pods: Sequence[PodShare]) -> list[_PodPart]:
        """The parts of an entity its pods used; none for an entity one container holds (its labels say whose).

        A whole GPU's pods have their shares of it; a GPU instance's are shared by memory, each pod's used memory
        over the instance's (drivers give no per-process utilization on MIG), scaled down should they exceed it.
        """
        if entity.held:
            return []
        if entity.instance is None:
            mine = _per_pod(pod for pod in pods if pod.uuid == entity.uuid)
            shares = [pod.share for pod in mine]
        else:
            instance_id = str(entity.instance.gpu_instance_id)
            mine = [pod for pod in pods if pod.uuid == entity.uuid and pod.gpu_instance_id == instance_id]
            reading = entity.instance.reading
            used = reading.memory_used_bytes if reading is not None else None
            memory = [pod.used_memory_bytes or 0.0 for pod in mine]
            total = max(sum(memory), used or 0.0)
            shares = [part / total if total > 0 else 0.0 for part in memory]
        parts: list[_PodPart] = []
        for pod, share in zip(mine, shares, strict=True):
            named = (pod.pod, pod.namespace, pod.container)
            mig = (entity.instance.profile, str(entity.instance.gpu_instance_id)) if entity.instance else None
            labels = self._labels(entity.cells, mig, named if any(named) else None)
            if labels is None:
                continue
            memory_mib = None if pod.used_memory_bytes is None else float(pod.used_memory_bytes // MIB)
            energy_mj = None if pod.energy_joules is None else float(round(pod.energy_joules * 1000.0))
            uid = f'{POD_UID_LABEL}="{escape_label_value(pod.pod_uid)}"'
            parts.append(_PodPart(f"{labels},{uid}", share, memory_mib, energy_mj))
        return parts

    @staticmethod
    def _split(family: DcgmFamily, value: float, parts: Sequence[_PodPart]) -> tuple[float, list[tuple[str, float]]]:
        """The entity's remainder and each pod's part of one value of a family split per pod."""
        own: list[tuple[str, float]] = []
        for part in parts:
            if family.field in SPLIT_BY_SHARE:
                own.append((part.labels, value * part.share))
            elif family.field == SPLIT_BY_MEMORY and part.memory_mib is not None:
                own.append((part.labels, part.memory_mib))
            elif family.field == TOTAL_ENERGY.name and part.energy_mj is not None:
                own.append((part.labels, part.energy_mj))
        if not own:  # a field that stays per GPU, or one no pod has a value of
            return value, own
        return max(0.0, value - sum(part for _, part in own)), own

    @staticmethod
    def _instance_holder(
        uuid: str, instance: _GpuInstance, holders: dict[tuple[str, str], tuple[str, str, str]]
    ) -> tuple[str, str, str] | None:
        """The one container holding every held MIG device of a GPU instance, or ``None``."""
        found = {holders.get((uuid, mig_uuid)) for mig_uuid in instance.mig_uuids} - {None}
        return next(iter(found)) if len(found) == 1 else None

    def _render(
        self,
        readings: Readings,
        xids: Sequence[XidRecord],
        attribution: KubernetesAttribution | None,
        pod_usage: PodUsage | None = None,
    ) -> str:
        """The served families in order, one series per entity (and per pod of a shared one, for the fields split
        per pod); XIDs only for GPUs still read."""
        entities = self._entities(readings, attribution)
        pods = pod_usage.pods if pod_usage is not None else ()
        pod_parts = {entity.order: self._pod_parts(entity, pods) for entity in entities} if pods else {}
        per_gpu = {
            normalize_uuid(extra.gpu_uuid): extra
            for extra in (readings.extras.gpus if readings.extras is not None else ())
        }
        by_gpu: dict[str, list[XidRecord]] = {}
        for record in xids:
            by_gpu.setdefault(normalize_uuid(record.gpu_uuid), []).append(record)
        parts: list[str] = []
        for family, column in self._served:
            lines: list[str] = []
            for entity in entities:
                value: float | None
                extra = per_gpu.get(entity.uuid)
                if entity.instance is not None and family.on_mig:
                    reading = None if family.on_mig == NOT_ON_MIG else entity.instance.reading
                    own = None if reading is None else getattr(reading, family.on_mig)
                    if own is not None and not (family.gpm or family.extra):  # bytes, in whole MiB as DCGM's
                        own = float(own // MIB)
                    value = own
                elif family.link is not None:
                    value = _link_value(extra, family)
                elif family.gpm or family.extra:
                    value = None if extra is None else getattr(extra, family.gpm or family.extra)
                elif family.field == TOTAL_ENERGY.name:
                    joules = None if extra is None else extra.energy_joules
                    value = None if joules is None else float(round(joules * 1000.0))
                elif family.field == XID_ERRORS.name:
                    if self.xids:
                        records = by_gpu.get(entity.uuid)
                        code = latest_xid(records).xid if records else 0  # 0: dcgm-exporter's "No Error"
                        message = escape_label_value(xid_message(code, self.generation))
                        lines.append(f'{family.name}{{{entity.labels},err_code="{code}",err_msg="{message}"}} {code}\n')
                    continue
                elif family.decode is not None:
                    value = family.decode([entity.cells[at] for at in self._decoded[family.name]])
                else:
                    raw = entity.cells[column] if column is not None else ""
                    value = None if raw.strip().lower() in ABSENT_TOKENS else transform_generic(raw, 1.0)
                if value is None:
                    continue
                per_pod: list[tuple[str, float]] = []
                if pod_parts.get(entity.order):
                    value, per_pod = self._split(family, value, pod_parts[entity.order])
                for labels, part in [(entity.labels, value), *per_pod]:
                    lines.append(f"{family.name}{{{labels}}} {dcgm_value(_scaled(part, family.factor))}\n")
            if lines:
                parts.append(header(family.name, family.help, family.metric_type) + "".join(lines))
        return "".join(parts)


def _link_value(extra: GpuExtras | None, family: DcgmFamily) -> float | None:
    """A per-link field's value: ``None`` (no series, as DCGM's blank) for a link the GPU does not have."""
    links = () if extra is None else extra.nvlink_links
    reading = next((found for found in links if found.link == family.link), None)
    return None if reading is None else getattr(reading, family.extra)
