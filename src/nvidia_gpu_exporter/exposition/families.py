"""Every metric family the exporter owns, in one table: name, type, HELP text and label names.

The query-field families (``nvidia_smi_temperature_gpu``, ...) are not here: their names and units come
from the headers nvidia-smi returns (:mod:`.naming`). Everything else the exporter renders is declared
once below, and these names are reserved: a query field deriving one of them is never exported. The
renderers (:mod:`.metrics`, :mod:`.nvml`, :mod:`.kubernetes`, :mod:`.selfmetrics`) only fill in samples.
``docs/metrics.md`` describes each family; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvidia_gpu_exporter.exposition.text import Family, header
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import StatusFamily

PREFIX = "nvidia_smi_"


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """What a family is; :meth:`family` starts one to add samples to."""

    name: str
    type: str  # "gauge" or "counter"
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> Family:
        return Family(self.name, self.help, self.type, self.labels)

    def header(self) -> str:
        return header(self.name, self.help, self.type)


# -- collection health (every backend) ------------------------------------------------------------------------

FAILED_COLLECTIONS = FamilySpec("nvidia_smi_failed_scrapes_total", "counter", "Number of failed collections")
LAST_SUCCESS = FamilySpec(
    "nvidia_smi_last_collect_success", "gauge", "Whether the most recent collection succeeded (1) or not (0)"
)
LAST_SUCCESS_TIMESTAMP = FamilySpec(
    "nvidia_smi_last_collect_success_timestamp_seconds",
    "gauge",
    "Unix timestamp of the most recent successful collection",
)
LAST_DURATION = FamilySpec(
    "nvidia_smi_last_collect_duration_seconds", "gauge", "Duration of the most recent collection"
)
COMMAND_EXIT_CODE = FamilySpec("nvidia_smi_command_exit_code", "gauge", "Exit code of the most recent nvidia-smi run")
NVML_RETURN_CODE = FamilySpec(
    "nvidia_smi_nvml_return_code", "gauge", "NVML return code of the most recent collection (0 = success)"
)
STATUS: dict[StatusFamily, FamilySpec] = {
    StatusFamily.COMMAND_EXIT_CODE: COMMAND_EXIT_CODE,
    StatusFamily.NVML_RETURN_CODE: NVML_RETURN_CODE,
}

# -- GPU identity and processes ---------------------------------------------------------------------------------

GPU_INFO_LABELS = (*(field.replace(".", "_") for field in IDENTITY_FIELDS), "cuda_version")
GPU_INFO = FamilySpec(
    "nvidia_smi_gpu_info",
    "gauge",
    "A metric with a constant '1' value labeled by gpu uuid, " + ", ".join(GPU_INFO_LABELS[1:]) + ".",
    GPU_INFO_LABELS,
)
PROCESS_LABELS = ("uuid", "pid", "process_name")
MIG_PROCESS_LABELS = (*PROCESS_LABELS, "gpu_instance_id", "compute_instance_id")  # --collect.compute-apps-mig
COMPUTE_APP_INFO = FamilySpec(
    "nvidia_smi_compute_app_info",
    "gauge",
    "A metric with a constant '1' value labeled by the identity of a process with a compute context on a GPU.",
    PROCESS_LABELS,
)
COMPUTE_APP_MEMORY = FamilySpec(
    "nvidia_smi_compute_app_used_memory_bytes",
    "gauge",
    "GPU memory used by the process. Absent when the driver cannot report it (e.g. Windows WDDM).",
    PROCESS_LABELS,
)
COMPUTE_APPS = FamilySpec(
    "nvidia_smi_compute_apps", "gauge", "Number of processes with a compute context on the GPU.", ("uuid",)
)
COMPUTE_APPS_SUCCESS = FamilySpec(
    "nvidia_smi_compute_apps_last_collect_success",
    "gauge",
    "Whether the most recent per-process collection succeeded (1) or not (0)",
)

# -- per-process usage (--collect.process-usage; every backend) -------------------------------------------------
# The processes past --collect.process-usage-max-processes on a GPU are summed into the series with pid="other".

PROCESS_USAGE_LABELS = ("uuid", "pid", "process_name")
OVERFLOW_PID = "other"
_USAGE_WINDOW = " over the driver's latest sample window. Absent when the source gave no value."


def _process_utilization(engine: str, text: str) -> FamilySpec:
    return FamilySpec(
        f"nvidia_smi_process_{engine}_utilization_ratio", "gauge", text + _USAGE_WINDOW, PROCESS_USAGE_LABELS
    )


PROCESS_SM_UTILIZATION = _process_utilization("sm", "Fraction of time the process had a kernel running on the GPU")
PROCESS_MEMORY_UTILIZATION = _process_utilization(
    "memory", "Fraction of time the GPU's memory was read or written for the process (bandwidth, not capacity)"
)
PROCESS_ENCODER_UTILIZATION = _process_utilization("encoder", "Fraction of time the process used the video encoder")
PROCESS_DECODER_UTILIZATION = _process_utilization("decoder", "Fraction of time the process used the video decoder")
PROCESS_USED_MEMORY = FamilySpec(
    "nvidia_smi_process_used_memory_bytes",
    "gauge",
    "GPU memory used by the process. Absent when the driver cannot report it.",
    PROCESS_USAGE_LABELS,
)
PROCESS_USAGE_OVERFLOW = FamilySpec(
    "nvidia_smi_process_usage_overflow_processes",
    "gauge",
    'Number of processes on the GPU past --collect.process-usage-max-processes, summed in the pid="other" series.',
    ("uuid",),
)
PROCESS_USAGE_SUCCESS = FamilySpec(
    "nvidia_smi_process_usage_last_collect_success",
    "gauge",
    "Whether the most recent per-process usage collection succeeded (1) or not (0)",
)
PROCESS_USAGE_OVERFLOWED = FamilySpec(
    "nvidia_gpu_exporter_process_usage_overflowed_processes_total",
    "counter",
    'Processes summed into a GPU\'s pid="other" per-process usage series instead of their own, over every '
    "collection since the exporter started (--collect.process-usage-max-processes).",
)

# -- per-pod shares of shared GPUs (--collect.process-usage with --kubernetes.process-pods) ------------------------

POD_SHARE_LABELS = ("uuid", "gpu_instance_id", "pod_uid", "namespace", "pod", "container")
_POD_NAMES = (
    " namespace, pod and container come from the API server's pod list with --kubernetes.pod-metadata, else only "
    "where one container holds the GPU; join kube_pod_info{uid} otherwise."
)

POD_SM_UTILIZATION = FamilySpec(
    "nvidia_smi_pod_sm_utilization_ratio",
    "gauge",
    "Sum of the SM utilization ratios of the pod's processes on the GPU over the driver's latest sample window."
    + _POD_NAMES,
    POD_SHARE_LABELS,
)
POD_USED_MEMORY = FamilySpec(
    "nvidia_smi_pod_used_memory_bytes",
    "gauge",
    "GPU memory used by the pod's processes on the GPU." + _POD_NAMES,
    POD_SHARE_LABELS,
)
POD_GPU_SHARE = FamilySpec(
    "nvidia_smi_pod_gpu_share_ratio",
    "gauge",
    "The pod's share of the GPU: its processes' part of the GPU's summed per-process SM utilization, or of their "
    "used memory when that sum is 0; host processes' parts belong to no pod." + _POD_NAMES,
    POD_SHARE_LABELS,
)
POD_POWER = FamilySpec(
    "nvidia_smi_pod_power_draw_watts",
    "gauge",
    "The GPU's power draw times the pod's share of the GPU (nvidia_smi_pod_gpu_share_ratio)." + _POD_NAMES,
    POD_SHARE_LABELS,
)
POD_ENERGY = FamilySpec(
    "nvidia_smi_pod_energy_joules_total",
    "counter",
    "Energy of the GPU attributed to the pod since the exporter first saw it there: each collection's increment "
    "of nvidia_smi_energy_joules_total times the pod's share." + _POD_NAMES,
    POD_SHARE_LABELS,
)
UNATTRIBUTED_ENERGY = FamilySpec(
    "nvidia_smi_unattributed_energy_joules_total",
    "counter",
    "Energy of the GPU since the exporter started that no pod's share covers: host processes, pods past "
    "--collect.process-usage-max-processes, and collections in which no process used the GPU.",
    ("uuid",),
)
POD_GPU_USED_SECONDS = FamilySpec(
    "nvidia_smi_pod_gpu_used_seconds_total",
    "counter",
    "GPU-seconds the pod used on the GPU since the exporter first saw it there: each collection's interval times "
    "the pod's SM utilization ratio (at most 1); absent where the driver reports no per-process utilization (MIG)."
    + _POD_NAMES,
    POD_SHARE_LABELS,
)

# -- GPU-seconds allocated per pod (--kubernetes.pod-resources) --------------------------------------------------

POD_GPU_ALLOCATED_SECONDS = FamilySpec(
    "nvidia_smi_pod_gpu_allocated_seconds_total",
    "counter",
    "GPU-seconds allocated to the pod since the exporter first saw it hold the GPU: each collection's interval "
    "times the pod's part of the devices of the GPU the kubelet lists as held (a whole GPU, time-sliced replicas, "
    "MIG devices), whether or not it runs a process.",
    ("uuid", "namespace", "pod"),
)

# -- NVML-only readings (nvml backend, and the demo that simulates it) ------------------------------------------

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

ENERGY = FamilySpec(
    "nvidia_smi_energy_joules_total",
    "counter",
    "Total energy consumed by the GPU in joules since the driver was last loaded. "
    "Resets on a driver reload; absent on GPUs that cannot report it.",
    GPU_LABELS,
)
PCIE_TX = FamilySpec(
    "nvidia_smi_pcie_throughput_tx_bytes_per_second", "gauge", "PCIe traffic transmitted" + _PCIE_WINDOW, GPU_LABELS
)
PCIE_RX = FamilySpec(
    "nvidia_smi_pcie_throughput_rx_bytes_per_second", "gauge", "PCIe traffic received" + _PCIE_WINDOW, GPU_LABELS
)
MIG_INFO = FamilySpec(
    "nvidia_smi_mig_info",
    "gauge",
    "A metric with a constant '1' value labeled by the identity of a MIG device: the parent GPU's uuid, the MIG "
    "device's own uuid, its GPU instance and compute instance ids, and its profile.",
    MIG_INFO_LABELS,
)


def _mig_memory(kind: str) -> FamilySpec:
    return FamilySpec(
        f"nvidia_smi_mig_memory_{kind}_bytes",
        "gauge",
        f"Memory of the GPU instance ({kind}" + _MIG_MEMORY_TAIL,
        MIG_INSTANCE_LABELS,
    )


def _mig_window(suffix: str, text: str) -> FamilySpec:
    return FamilySpec(f"nvidia_smi_mig_{suffix}", "gauge", text + _MIG_WINDOW_TAIL, MIG_INSTANCE_LABELS)


MIG_MEMORY_TOTAL = _mig_memory("total")
MIG_MEMORY_USED = _mig_memory("used")
MIG_MEMORY_FREE = _mig_memory("free")
MIG_MEMORY_RESERVED = _mig_memory("reserved")
MIG_GRAPHICS_ACTIVITY = _mig_window(
    "graphics_activity_ratio", "Fraction of time the GPU instance's graphics/compute engines were active."
)
MIG_SM_ACTIVITY = _mig_window("sm_activity_ratio", "Fraction of time the GPU instance's SMs were active.")
MIG_SM_OCCUPANCY = _mig_window(
    "sm_occupancy_ratio", "Fraction of the GPU instance's resident warp slots that were occupied."
)
MIG_TENSOR_ACTIVITY = _mig_window(
    "tensor_activity_ratio", "Fraction of time the GPU instance's tensor pipes were active."
)
MIG_PCIE_TX = _mig_window("pcie_throughput_tx_bytes_per_second", "PCIe traffic transmitted by the GPU instance.")
MIG_PCIE_RX = _mig_window("pcie_throughput_rx_bytes_per_second", "PCIe traffic received by the GPU instance.")
XID_ERRORS = FamilySpec(
    "nvidia_smi_xid_errors_total",
    "counter",
    "Number of XID errors observed on the GPU: from the kernel log, every one since boot that its ring buffer still "
    "holds; from NVML events, those since the exporter started. A series appears when its first event arrives.",
    XID_LABELS,
)
XID_LAST_TIMESTAMP = FamilySpec(
    "nvidia_smi_xid_last_timestamp_seconds",
    "gauge",
    "Unix timestamp of the most recent XID error: the kernel's own time from the kernel log, the time the exporter "
    "received it from NVML events (they carry no timestamp of their own).",
    XID_LABELS,
)

# -- node health from the kernel log (every backend; docs/health.md) --------------------------------------------

XID_OCCURRENCE = FamilySpec(
    "nvidia_smi_xid_occurrence_timestamp_seconds",
    "gauge",
    "Unix timestamp of a recent XID error on the GPU, labeled by the process the driver blamed for it (pid and "
    "process_name empty when it did not know), its pod_uid and container_id (with --kubernetes.process-pods) and "
    "the namespace, pod and container holding the GPU then (with --kubernetes.pod-resources); the last few "
    "distinct ones per GPU, from the kernel log.",
    ("uuid", "pci_bus_id", "xid", "pid", "process_name", "pod_uid", "container_id", "namespace", "pod", "container"),
)
GPU_FALLEN_OFF_BUS = FamilySpec(
    "nvidia_smi_gpu_fallen_off_bus",
    "gauge",
    "A metric with a constant '1' value for each GPU the kernel log says fell off the bus since boot (its own line "
    "or XID 79). The GPU stays lost until the node reboots.",
    ("uuid", "pci_bus_id"),
)
SXID_LABELS = ("pci_bus_id", "sxid", "severity")
SXID_ERRORS = FamilySpec(
    "nvidia_smi_nvswitch_sxid_errors_total",
    "counter",
    "Number of NVSwitch errors (SXids) in the kernel log since boot, by switch (pci_bus_id), code and severity "
    "(fatal, non_fatal, or empty when the line did not say).",
    SXID_LABELS,
)
SXID_LAST_TIMESTAMP = FamilySpec(
    "nvidia_smi_nvswitch_sxid_last_timestamp_seconds",
    "gauge",
    "Unix timestamp of the most recent NVSwitch error (SXid) of the code on the switch, the kernel's own time.",
    SXID_LABELS,
)
XID_SOURCE = FamilySpec(
    "nvidia_gpu_exporter_xid_source_info",
    "gauge",
    "A metric with a constant '1' value labeled by where XID errors come from: kmsg (the kernel log), nvml (NVML "
    "events), demo (simulated) or off.",
    ("source",),
)
KERNEL_LOG_UP = FamilySpec(
    "nvidia_gpu_exporter_kernel_log_up",
    "gauge",
    "Whether the kernel log can be read for XID errors (1) or not (0, with the reason label saying why: absent, "
    "dmesg_restrict, permission_denied, error). A silent XID panel means nothing when this is 0.",
    ("reason",),
)
KERNEL_LOG_RECORDS = FamilySpec(
    "nvidia_gpu_exporter_kernel_log_records_total", "counter", "Kernel log records read since the exporter started."
)
KERNEL_LOG_LOST = FamilySpec(
    "nvidia_gpu_exporter_kernel_log_lost_records_total",
    "counter",
    "Times the kernel overwrote log records before the exporter read them (XIDs among them are not counted).",
)
KERNEL_LOG_DROPPED = FamilySpec(
    "nvidia_gpu_exporter_kernel_log_dropped_events_total",
    "counter",
    "XID events not counted because the log named more GPUs or codes than the exporter keeps (a flooded log).",
)

# -- the health verdict per GPU and subsystem (docs/health.md, "Verdicts") ---------------------------------------

GPU_HEALTH_LABELS = ("uuid", "pci_bus_id", "subsystem")
GPU_HEALTH_REASON_LABELS = (*GPU_HEALTH_LABELS, "reason", "state", "action")
GPU_HEALTH_STATE = FamilySpec(
    "nvidia_gpu_exporter_gpu_health_state",
    "gauge",
    "The health verdict of a GPU's subsystem (memory, pcie, thermal, power, nvlink, driver): 0 ok, 1 degraded, "
    "2 failing.",
    GPU_HEALTH_LABELS,
)
GPU_HEALTH_REASON = FamilySpec(
    "nvidia_gpu_exporter_gpu_health_reason_info",
    "gauge",
    "A metric with a constant '1' value for each reason a GPU's subsystem is not ok, labeled by the state it "
    "gives and the recommended action.",
    GPU_HEALTH_REASON_LABELS,
)
GPU_HEALTH_REASON_SINCE = FamilySpec(
    "nvidia_gpu_exporter_gpu_health_reason_since_timestamp_seconds",
    "gauge",
    "Unix timestamp since when the reason holds on the GPU's subsystem.",
    GPU_HEALTH_REASON_LABELS,
)

# -- Kubernetes attribution (opt-in; reserved whether or not it is on) ------------------------------------------

GPU_POD_LABELS = ("uuid", "namespace", "pod", "container", "mig_uuid")
COMPUTE_APP_POD_LABELS = ("uuid", "pid", "pod_uid", "container_id")
ATTRIBUTION_UP = FamilySpec(
    "nvidia_smi_kubernetes_attribution_up",
    "gauge",
    "Whether the kubelet's PodResources API answered the most recent attribution request (1) or not (0, with the "
    "reason label saying why).",
    ("reason",),
)
GPU_POD_INFO = FamilySpec(
    "nvidia_smi_gpu_pod_info",
    "gauge",
    "A metric with a constant '1' value for each container holding a GPU, a MIG device of it (mig_uuid) or a "
    "time-sliced replica, as the kubelet's PodResources API reports. Join on uuid.",
    GPU_POD_LABELS,
)
GPU_DRA_CLAIM_LABELS = (
    "uuid", "namespace", "pod", "container", "claim_namespace", "claim_name", "driver", "pool", "device",
)  # fmt: skip
GPU_DRA_CLAIM_INFO = FamilySpec(
    "nvidia_smi_gpu_dra_claim_info",
    "gauge",
    "A metric with a constant '1' value for each ResourceClaim device of NVIDIA's DRA driver (gpu.nvidia.com) "
    "a container holds, as the kubelet's PodResources API reports; uuid is empty where the device is no GPU read.",
    GPU_DRA_CLAIM_LABELS,
)
COMPUTE_APP_POD_INFO = FamilySpec(
    "nvidia_smi_compute_app_pod_info",
    "gauge",
    "A metric with a constant '1' value labeled by the pod uid and container id of a process with a compute "
    "context, from its cgroup. Join on uuid and pid with nvidia_smi_compute_app_info, on pod_uid with "
    "kube_pod_info{uid}.",
    COMPUTE_APP_POD_LABELS,
)
POD_METADATA_FAILURES = FamilySpec(
    "nvidia_gpu_exporter_pod_metadata_failures_total",
    "counter",
    "Lists of the node's pods from the Kubernetes API server that gave no answer, by reason, since the exporter "
    "started (--kubernetes.pod-metadata); the last good answer names pods meanwhile, for at most 10 minutes.",
    ("reason",),
)

# -- Slurm jobs (--slurm.jobs): which job runs each GPU process, and which jobs each GPU runs ------------------

SLURM_PROCESS_JOB_LABELS = ("uuid", "pid", "job_id", "step", "uid", "user", "job_name")
SLURM_GPU_JOB_LABELS = ("uuid", "job_id", "uid", "user", "job_name")
PROCESS_SLURM_JOB_INFO = FamilySpec(
    "nvidia_smi_process_slurm_job_info",
    "gauge",
    "A metric with a constant '1' value labeled by the Slurm job of a GPU process, from its cgroup and environ. "
    "Join on uuid and pid with the per-process families.",
    SLURM_PROCESS_JOB_LABELS,
)
GPU_SLURM_JOB_INFO = FamilySpec(
    "nvidia_smi_gpu_slurm_job_info",
    "gauge",
    "A metric with a constant '1' value for each Slurm job with a process on the GPU.",
    SLURM_GPU_JOB_LABELS,
)

# -- lost GPUs: the NVIDIA functions sysfs lists (every backend; only when sysfs lists one) ---------------------

PCI_DEVICE_LABELS = ("pci_bus_id", "kind", "device_id", "driver")
GPUS_EXPECTED = FamilySpec(
    "nvidia_smi_gpus_expected",
    "gauge",
    "Number of NVIDIA GPU PCI functions (VGA or 3D controller) sysfs lists, whichever driver holds them. More than "
    "count(nvidia_smi_gpu_info) means the driver lost a GPU.",
)
PCI_DEVICE_INFO = FamilySpec(
    "nvidia_smi_pci_device_info",
    "gauge",
    "A metric with a constant '1' value for each NVIDIA GPU or NVSwitch PCI function sysfs lists, labeled by its bus "
    "id (as nvidia_smi_gpu_info has it), kind, device id and bound driver (none when unbound).",
    PCI_DEVICE_LABELS,
)

# -- the exporter's own process (outside nvidia_smi_*, named as Go's client names them) -------------------------

BUILD_INFO = FamilySpec(
    "nvidia_gpu_exporter_build_info",
    "gauge",
    "A metric with a constant '1' value labeled by version, revision, branch, pythonversion, goos, goarch and tags "
    "from which nvidia_gpu_exporter was built.",
    ("branch", "goarch", "goos", "pythonversion", "revision", "tags", "version"),
)
PROCESS_CPU = FamilySpec("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
PROCESS_MAX_FDS = FamilySpec("process_max_fds", "gauge", "Maximum number of open file descriptors.")
PROCESS_OPEN_FDS = FamilySpec("process_open_fds", "gauge", "Number of open file descriptors.")
PROCESS_RESIDENT_MEMORY = FamilySpec("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
PROCESS_START_TIME = FamilySpec(
    "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds."
)
PROCESS_VIRTUAL_MEMORY = FamilySpec("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
HANDLER_REQUESTS = FamilySpec(
    "promhttp_metric_handler_requests_total", "counter", "Total number of scrapes by HTTP status code.", ("code",)
)
HANDLER_IN_FLIGHT = FamilySpec(
    "promhttp_metric_handler_requests_in_flight", "gauge", "Current number of scrapes being served."
)
HANDLER_ERRORS = FamilySpec(
    "promhttp_metric_handler_errors_total",
    "counter",
    "Total number of internal errors encountered by the promhttp metric handler.",
    ("cause",),
)
HTTP_CONNECTIONS = FamilySpec(
    "nvidia_gpu_exporter_http_connections", "gauge", "Number of open HTTP connections (--web.max-connections caps it)."
)
HTTP_CONNECTIONS_CLOSED = FamilySpec(
    "nvidia_gpu_exporter_http_connections_closed_total",
    "counter",
    "HTTP connections closed by the exporter, by reason: header_timeout (request headers not received in time), "
    "body_timeout (a request body not received in time), evicted (stalled or idle, closed to make room at "
    "--web.max-connections) or refused (answered 503: every connection busy).",
    ("reason",),
)
HTTP_RESPONSES_INCOMPLETE = FamilySpec(
    "nvidia_gpu_exporter_http_responses_incomplete_total",
    "counter",
    "HTTP responses cut off because the client read nothing of them for --web.write-timeout.",
)
# Served only with --web.config.file, named like Prometheus' own prometheus_config_last_reload_* families.
WEB_CONFIG_RELOAD_SUCCESSFUL = FamilySpec(
    "nvidia_gpu_exporter_web_config_last_reload_successful",
    "gauge",
    "Whether the last --web.config.file reload attempt was successful (a failed one keeps the previous settings).",
)
WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP = FamilySpec(
    "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds",
    "gauge",
    "Timestamp of the last successful --web.config.file reload (or of its startup read).",
)

# -- the collection's health under one name whatever --metrics.profile (docs/metrics.md, "Collection health") ---
# The nvidia_smi_* ones above keep the Go exporter's names and bytes; these are what the chart's test, NOTES,
# the doctor and the alert rules read, so a DCGM-profile install has them too.

COLLECTION_FAILURES = FamilySpec(
    "nvidia_gpu_exporter_collection_failures_total",
    "counter",
    "Number of failed collections since the exporter started, whatever --metrics.profile.",
)
COLLECTION_SUCCESS = FamilySpec(
    "nvidia_gpu_exporter_collection_success",
    "gauge",
    "Whether the most recent collection succeeded (1) or not (0), whatever --metrics.profile.",
)
COLLECTION_SUCCESS_TIMESTAMP = FamilySpec(
    "nvidia_gpu_exporter_collection_success_timestamp_seconds",
    "gauge",
    "Unix timestamp of the most recent successful collection, whatever --metrics.profile.",
)
COLLECTION_DURATION = FamilySpec(
    "nvidia_gpu_exporter_collection_duration_seconds",
    "gauge",
    "Duration of the most recent collection, whatever --metrics.profile.",
)
COLLECTION_EXIT_CODE = FamilySpec(
    "nvidia_gpu_exporter_collection_exit_code",
    "gauge",
    "Status of the most recent collection (0 = success): nvidia-smi's exit code, or NVML's return code on the nvml "
    "and demo backends, whatever --metrics.profile.",
)
COLLECTION: tuple[FamilySpec, ...] = (
    COLLECTION_EXIT_CODE,
    COLLECTION_DURATION,
    COLLECTION_FAILURES,
    COLLECTION_SUCCESS,
    COLLECTION_SUCCESS_TIMESTAMP,
)

# -- fleet mode (GET /probe?target=<name>, docs/fleet.md): after the target's nvidia_smi_* block ---------------

PROBE_SUCCESS = FamilySpec("probe_success", "gauge", "Whether the probe's collection over SSH succeeded (1) or not (0)")
PROBE_DURATION = FamilySpec(
    "probe_duration_seconds", "gauge", "Seconds the probe took: field discovery, the SSH runs and the rendering"
)

OWNED: tuple[FamilySpec, ...] = (
    FAILED_COLLECTIONS,
    LAST_SUCCESS,
    LAST_SUCCESS_TIMESTAMP,
    LAST_DURATION,
    COMMAND_EXIT_CODE,
    NVML_RETURN_CODE,
    GPU_INFO,
    COMPUTE_APP_INFO,
    COMPUTE_APP_MEMORY,
    COMPUTE_APPS,
    COMPUTE_APPS_SUCCESS,
    PROCESS_SM_UTILIZATION,
    PROCESS_MEMORY_UTILIZATION,
    PROCESS_ENCODER_UTILIZATION,
    PROCESS_DECODER_UTILIZATION,
    PROCESS_USED_MEMORY,
    PROCESS_USAGE_OVERFLOW,
    PROCESS_USAGE_SUCCESS,
    PROCESS_USAGE_OVERFLOWED,
    POD_SM_UTILIZATION,
    POD_USED_MEMORY,
    POD_GPU_SHARE,
    POD_POWER,
    POD_ENERGY,
    UNATTRIBUTED_ENERGY,
    POD_GPU_USED_SECONDS,
    POD_GPU_ALLOCATED_SECONDS,
    ENERGY,
    PCIE_TX,
    PCIE_RX,
    MIG_INFO,
    MIG_MEMORY_TOTAL,
    MIG_MEMORY_USED,
    MIG_MEMORY_FREE,
    MIG_MEMORY_RESERVED,
    MIG_GRAPHICS_ACTIVITY,
    MIG_SM_ACTIVITY,
    MIG_SM_OCCUPANCY,
    MIG_TENSOR_ACTIVITY,
    MIG_PCIE_TX,
    MIG_PCIE_RX,
    XID_ERRORS,
    XID_LAST_TIMESTAMP,
    XID_OCCURRENCE,
    GPU_FALLEN_OFF_BUS,
    SXID_ERRORS,
    SXID_LAST_TIMESTAMP,
    XID_SOURCE,
    KERNEL_LOG_UP,
    KERNEL_LOG_RECORDS,
    KERNEL_LOG_LOST,
    KERNEL_LOG_DROPPED,
    GPU_HEALTH_STATE,
    GPU_HEALTH_REASON,
    GPU_HEALTH_REASON_SINCE,
    ATTRIBUTION_UP,
    GPU_POD_INFO,
    GPU_DRA_CLAIM_INFO,
    COMPUTE_APP_POD_INFO,
    POD_METADATA_FAILURES,
    PROCESS_SLURM_JOB_INFO,
    GPU_SLURM_JOB_INFO,
    GPUS_EXPECTED,
    PCI_DEVICE_INFO,
)
PROCESS: tuple[FamilySpec, ...] = (
    PROCESS_CPU,
    PROCESS_MAX_FDS,
    PROCESS_OPEN_FDS,
    PROCESS_RESIDENT_MEMORY,
    PROCESS_START_TIME,
    PROCESS_VIRTUAL_MEMORY,
)
HTTP: tuple[FamilySpec, ...] = (HTTP_CONNECTIONS, HTTP_CONNECTIONS_CLOSED, HTTP_RESPONSES_INCOMPLETE)
WEB_CONFIG: tuple[FamilySpec, ...] = (WEB_CONFIG_RELOAD_SUCCESSFUL, WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP)
SELF: tuple[FamilySpec, ...] = (
    BUILD_INFO,
    *COLLECTION,
    *HTTP,
    *WEB_CONFIG,
    *PROCESS,
    HANDLER_REQUESTS,
    HANDLER_IN_FLIGHT,
    HANDLER_ERRORS,
)
# A query field deriving one of these names is dropped, whichever backend or option would render it.
RESERVED_NAMES = frozenset(spec.name for spec in OWNED if spec.name.startswith(PREFIX))
# The wall-clock families: their values change on every run, so byte comparisons leave them out.
WALL_CLOCK_FAMILIES = frozenset(
    {
        LAST_DURATION.name,
        LAST_SUCCESS_TIMESTAMP.name,
        XID_LAST_TIMESTAMP.name,
        XID_OCCURRENCE.name,
        SXID_LAST_TIMESTAMP.name,
        GPU_HEALTH_REASON_SINCE.name,
        WEB_CONFIG_RELOAD_SUCCESS_TIMESTAMP.name,
        COLLECTION_DURATION.name,
        COLLECTION_SUCCESS_TIMESTAMP.name,
    }
)

# -- the exec runner's stuck children (outside nvidia_smi_*, whose bytes stay the Go exporter's) -----------------
# The counter is not the gauge's name plus _total: parsers (OpenMetrics, prometheus_client) name a counter's
# family without its _total, and two families would then share one name.

STUCK_CHILDREN = FamilySpec(
    "nvidia_gpu_exporter_stuck_children",
    "gauge",
    "Number of nvidia-smi children killed that have not exited yet: stuck in the kernel, the driver may be wedged. "
    "While one is, no nvidia-smi is started and every collection fails.",
)
STUCK_CHILDREN_TOTAL = FamilySpec(
    "nvidia_gpu_exporter_children_stuck_total",
    "counter",
    "Number of nvidia-smi children that did not exit after SIGKILL (stuck in the kernel) since the exporter started.",
)

# -- the exec backend's NVML supplement under the DCGM profile (docs/dcgm.md, "The exec backend and NVML") --------

SUPPLEMENT_FAILURES = FamilySpec(
    "nvidia_gpu_exporter_nvml_supplement_failures_total",
    "counter",
    "NVML cycles run beside nvidia-smi (the exec backend under the DCGM profile) that failed since the exporter "
    "started, by reason: NVML's return code, or in_progress while the previous one was still in the driver. Those "
    "collections are served without the NVML-only fields.",
    ("reason",),
)
