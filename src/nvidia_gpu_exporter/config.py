"""The one typed configuration object the command line is turned into, and its startup validation."""

from __future__ import annotations

import posixpath
import sys
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from nvidia_gpu_exporter._go.durations import format_duration
from nvidia_gpu_exporter._go.strconv import parse_int
from nvidia_gpu_exporter._go.text import go_quote, is_go_space
from nvidia_gpu_exporter.backends.exec.defaults import DEFAULT_MAX_OUTPUT_BYTES
from nvidia_gpu_exporter.backends.fleet.defaults import DEFAULT_GLOBAL_CONCURRENCY
from nvidia_gpu_exporter.exposition.dcgm_defaults import AUTO, DEFAULT_WINDOW_MS, Generation
from nvidia_gpu_exporter.health.defaults import DEFAULT_KERNEL_LOG, DEFAULT_SYSFS_PATH
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_PROC_ROOT, DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from nvidia_gpu_exporter.model.processusage import DEFAULT_MAX_PROCESSES

if TYPE_CHECKING:
    from nvidia_gpu_exporter.exposition.dcgm_counters import Counter
from nvidia_gpu_exporter.web.routes import (
    ATTRIBUTION_PATH,
    DCGM_HEALTH_PATH,
    DEFAULT_TELEMETRY_PATH,
    PPROF_PREFIX,
    PROBE_PATH,
    RESERVED_PATHS,
)

DEFAULT_PORT = 9835
DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"
DEFAULT_NVIDIA_SMI_COMMAND = "nvidia-smi"


class Backend(str, Enum):
    """``--collect.backend``: where readings come from."""

    EXEC = "exec"  # runs nvidia-smi
    NVML = "nvml"  # reads libnvidia-ml in-process
    DEMO = "demo"  # simulated GPUs


class XidSource(str, Enum):
    """``--collect.xid-source``: where XID errors come from (docs/health.md); one source, never counted twice."""

    AUTO = "auto"  # the kernel log when it can be read, else NVML events (nvml); the demo simulates its own
    KMSG = "kmsg"  # the kernel log, on every backend
    NVML = "nvml"  # NVML events (nvml backend; the demo's simulated ones)
    OFF = "off"


class Profile(str, Enum):
    """``--metrics.profile``: which names the GPU series are served under (docs/dcgm.md)."""

    NVIDIA_SMI = "nvidia_smi"  # the Go exporter's nvidia_smi_* families, byte for byte
    DCGM = "dcgm"  # dcgm-exporter's DCGM_FI_* families instead
    BOTH = "both"  # both blocks, for a migration period


class ConfigError(ValueError):
    """A flag value or combination the exporter refuses to start with."""


@dataclass(frozen=True, slots=True)
class Config:
    """Every flag of the exporter, typed; durations in nanoseconds as Go parses them."""

    listen_addresses: tuple[str, ...] = (DEFAULT_LISTEN_ADDRESS,)
    web_config_file: str = ""
    systemd_socket: bool = False
    network: str = "tcp"
    read_timeout_ns: int = 10_000_000_000
    read_header_timeout_ns: int = 10_000_000_000
    write_timeout_ns: int = 15_000_000_000
    idle_timeout_ns: int = 60_000_000_000
    telemetry_path: str = DEFAULT_TELEMETRY_PATH
    max_requests: int = 40
    max_connections: int = 256
    timeout_offset_ns: int = 500_000_000
    enable_pprof: bool = False
    enable_pprof_unauthenticated: bool = False
    enable_openmetrics: bool = False  # the Go exporter's and dcgm-exporter's handlers never answer in OpenMetrics
    # --web.ready.*: what GET /-/ready waits for (docs/compatibility.md, "Readiness"); off, as the Go exporter's
    ready_require_collection: bool = False
    ready_max_staleness_ns: int = 0  # 0 = no bound on the last success's age
    ready_min_gpus: str = "0"  # GPUs the last success must have seen: a count, or "pci" (what sysfs lists)
    nvidia_smi_command: str = DEFAULT_NVIDIA_SMI_COMMAND
    query_field_names: str = "AUTO"
    query_field_names_exclude: str = ""
    backend: Backend = Backend.EXEC
    collect_interval_ns: int = 0
    collect_timeout_ns: int = 10_000_000_000
    collect_max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    collect_stream_interval_ns: int = 0  # 0: nvidia-smi per collection; >0: one long-lived nvidia-smi -lms
    compute_apps: bool = False
    compute_apps_mig: bool = False
    process_usage: bool = False
    process_usage_max_processes: int = DEFAULT_MAX_PROCESSES
    pcie_throughput: bool = False
    xid_source: XidSource = XidSource.AUTO
    kernel_log: str = DEFAULT_KERNEL_LOG
    demo_config: str = ""
    shutdown_on_error: bool = False
    metrics_profile: Profile = Profile.NVIDIA_SMI
    dcgm_collectors: str = ""  # dcgm-exporter's counters file; "" = every DCGM field we offer
    # the dcgm-exporter generation whose names are served; None: `auto`, the counters file's (resolve_generation)
    dcgm_compatibility: Generation | None = None
    # the counters file of dcgm-exporter's image a dcgm-exporter invocation named, absent here: under `auto`, its
    # releases' generation is served (dcgm_generations.IMAGE_FILES)
    dcgm_image_collectors: str = ""
    # dcgm-exporter's own options with no flag of ours (flags.DCGM_OPTIONS): -n, --replace-blanks-in-model-name,
    # -x / --xid-count-window-size and --clock-events-count-window-size (milliseconds)
    dcgm_hostname_label: bool = True
    dcgm_model_name_dashes: bool = False
    dcgm_old_namespace: bool = False  # dcgm-exporter's -o: its 1.x label names
    dcgm_xid_count_window_ms: int = DEFAULT_WINDOW_MS
    dcgm_clock_events_count_window_ms: int = DEFAULT_WINDOW_MS
    dcgm_inline_counters: tuple[Counter, ...] = ()  # a dcgm-exporter YAML config file's metrics.fields
    dcgm_health_require_gpus: bool = False  # --health-require-gpus: /health answers 503 while no GPU is seen
    exporter_metrics: bool = True  # process_*, promhttp_*; dcgm-exporter's start leaves them out
    sysfs_path: str = DEFAULT_SYSFS_PATH  # where the NVIDIA PCI functions are read (lost GPUs)
    kubernetes_pod_resources: bool = False
    kubernetes_pod_resources_socket: str = DEFAULT_SOCKET
    kubernetes_pod_resources_timeout_ns: int = 2_000_000_000
    kubernetes_pod_resources_cache_ns: int = 5_000_000_000
    kubernetes_resource_names: str = ",".join(DEFAULT_RESOURCE_PATTERNS)
    kubernetes_pod_labels: bool = False
    kubernetes_process_pods: bool = False
    kubernetes_pod_metadata: bool = False
    kubernetes_pod_metadata_refresh_ns: int = 30_000_000_000
    kubernetes_node_name: str = ""
    kubernetes_kubeconfig: str = ""
    kubernetes_proc_root: str = DEFAULT_PROC_ROOT
    kubernetes_dra_claims: bool = False
    slurm_jobs: bool = False
    fleet_targets_file: str = ""  # "" = no fleet mode (no /probe)
    fleet_max_concurrent: int = DEFAULT_GLOBAL_CONCURRENCY
    log_level: str = "info"
    log_format: str = "logfmt"

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", Backend(self.backend))  # a plain "demo" is taken too
        object.__setattr__(self, "xid_source", XidSource(self.xid_source))
        object.__setattr__(self, "metrics_profile", Profile(self.metrics_profile))
        chosen = self.dcgm_compatibility
        object.__setattr__(self, "dcgm_compatibility", None if chosen in (None, AUTO) else Generation(chosen))


def telemetry_path_problem(path: str) -> str | None:
    """Why a telemetry path is unusable, or ``None`` when it is fine; worded as the Go exporter words it."""
    quoted = go_quote(path)
    if not path.startswith("/"):
        return f"web.telemetry-path must start with a slash, got {quoted}"
    if path == "/":
        return 'web.telemetry-path must not be "/", it would collide with the landing page'
    if path.endswith("/"):
        return f"web.telemetry-path must not end with a slash, got {quoted}"
    if posixpath.normpath(path) != path or "//" in path:
        return f"web.telemetry-path must be a clean path without empty or relative segments, got {quoted}"
    if any(char in path for char in "{}%?#"):
        return f"web.telemetry-path must not contain the characters {{}}%?#, got {quoted}"
    if any(is_go_space(char) for char in path):
        return f"web.telemetry-path must not contain whitespace, got {quoted}"
    if path in RESERVED_PATHS or path == PPROF_PREFIX or path.startswith(PPROF_PREFIX + "/"):
        return f"web.telemetry-path {quoted} collides with the exporter's own routes"
    return None


def validate(config: Config) -> None:
    """Startup validation, in the Go exporter's order; raises :class:`ConfigError` at the first problem."""
    for name, value in (
        ("collect.interval", config.collect_interval_ns),
        ("collect.timeout", config.collect_timeout_ns),
        ("collect.stream-interval", config.collect_stream_interval_ns),
    ):
        if value < 0:
            raise ConfigError(f"{name} must not be negative, got {format_duration(value)}")
    problem = telemetry_path_problem(config.telemetry_path)
    if problem:
        raise ConfigError(problem)
    if config.max_requests < 0:
        raise ConfigError(f"web.max-requests must not be negative, got {config.max_requests}")
    if config.max_connections < 0:
        raise ConfigError(f"web.max-connections must not be negative, got {config.max_connections}")
    if config.timeout_offset_ns < 0:
        raise ConfigError(f"web.timeout-offset must not be negative, got {format_duration(config.timeout_offset_ns)}")
    backend = config.backend
    if backend != Backend.EXEC and config.nvidia_smi_command != DEFAULT_NVIDIA_SMI_COMMAND:
        raise ConfigError(f"--nvidia-smi-command cannot be combined with --collect.backend={backend.value}")
    if backend == Backend.EXEC and config.pcie_throughput:
        raise ConfigError("--collect.pcie-throughput requires --collect.backend=nvml")
    if backend == Backend.EXEC and config.compute_apps_mig:
        raise ConfigError("--collect.compute-apps-mig requires --collect.backend=nvml or demo")
    if config.compute_apps_mig and not config.compute_apps:
        raise ConfigError("--collect.compute-apps-mig requires --collect.compute-apps")
    if config.xid_source == XidSource.NVML and backend == Backend.EXEC:
        raise ConfigError("--collect.xid-source=nvml requires --collect.backend=nvml or demo")
    if config.xid_source == XidSource.KMSG and sys.platform == "win32":
        raise ConfigError("--collect.xid-source=kmsg needs a Linux kernel log; on Windows use nvml or off")
    if config.xid_source in (XidSource.AUTO, XidSource.KMSG) and not config.kernel_log:
        raise ConfigError("--collect.kernel-log must not be empty")
    if config.demo_config and backend != Backend.DEMO:
        raise ConfigError("--demo-config requires --collect.backend=demo")
    if not config.sysfs_path:
        raise ConfigError("--collect.sysfs-path must not be empty")
    if config.metrics_profile is Profile.NVIDIA_SMI:
        if config.dcgm_collectors or config.dcgm_inline_counters:
            raise ConfigError("--dcgm.collectors requires --metrics.profile=dcgm or both")
    elif config.telemetry_path == DCGM_HEALTH_PATH:
        raise ConfigError(
            f"web.telemetry-path must not be {DCGM_HEALTH_PATH} with --metrics.profile=dcgm or both: "
            "dcgm-exporter's health route lives there"
        )
    if config.collect_max_output_bytes <= 0:
        raise ConfigError(f"--collect.max-output-bytes must be positive, got {config.collect_max_output_bytes}")
    if config.process_usage_max_processes < 0:
        raise ConfigError(
            f"--collect.process-usage-max-processes must not be negative, got {config.process_usage_max_processes}"
        )
    validate_stream(config)
    validate_kubernetes(config)
    validate_fleet(config)
    validate_readiness(config)


READY_MIN_GPUS_PCI = "pci"  # --web.ready.min-gpus=pci: as many GPUs as the PCI bus lists


def min_gpus_count(value: str) -> int | None:
    """A ``--web.ready.min-gpus`` count, or ``None`` for ``pci`` or a value that is neither (``validate`` says)."""
    return parse_int(value, low=0)


def validate_readiness(config: Config) -> None:
    """The ``--web.ready.*`` flags: a bound or a GPU count only with ``--web.ready.require-collection``."""
    staleness = config.ready_max_staleness_ns
    if staleness < 0:
        raise ConfigError(f"--web.ready.max-staleness must not be negative, got {format_duration(staleness)}")
    gpus = config.ready_min_gpus
    if gpus != READY_MIN_GPUS_PCI and min_gpus_count(gpus) is None:
        raise ConfigError(f"--web.ready.min-gpus must be a number of GPUs (0 or more) or pci, got {gpus!r}")
    if not config.ready_require_collection:
        if staleness:
            raise ConfigError("--web.ready.max-staleness requires --web.ready.require-collection")
        if min_gpus_count(gpus) != 0:
            raise ConfigError("--web.ready.min-gpus requires --web.ready.require-collection")
        return
    interval = config.collect_interval_ns
    if staleness and interval > 0 and staleness <= interval:
        raise ConfigError(
            f"--web.ready.max-staleness ({format_duration(staleness)}) must be longer than --collect.interval "
            f"({format_duration(interval)}): every collection would be stale before the next one"
        )
    if gpus == READY_MIN_GPUS_PCI and sys.platform == "win32" and config.backend is not Backend.DEMO:
        raise ConfigError("--web.ready.min-gpus=pci needs the PCI bus from sysfs (Linux) or the demo backend")


def validate_stream(config: Config) -> None:
    """``--collect.stream-interval``: off (0), or at least nvidia-smi's one millisecond, with the exec backend."""
    interval = config.collect_stream_interval_ns
    if interval == 0:
        return
    if interval < 1_000_000:
        raise ConfigError(
            "--collect.stream-interval must be at least 1ms (nvidia-smi -lms counts milliseconds), "
            f"got {format_duration(interval)}"
        )
    if config.backend != Backend.EXEC:
        raise ConfigError("--collect.stream-interval requires --collect.backend=exec")


def validate_fleet(config: Config) -> None:
    """The ``--fleet.*`` flags; with fleet mode off (the default) only the concurrency bound is checked."""
    if not 1 <= config.fleet_max_concurrent <= 4096:
        raise ConfigError(f"--fleet.max-concurrent must be between 1 and 4096, got {config.fleet_max_concurrent}")
    if config.fleet_targets_file and config.telemetry_path == PROBE_PATH:
        raise ConfigError(
            f"web.telemetry-path must not be {PROBE_PATH} with --fleet.targets-file: the probes live there"
        )


def validate_kubernetes(config: Config) -> None:
    """The ``--kubernetes.*`` flags; with attribution off (the default) nothing here can fail."""
    if config.kubernetes_pod_labels and not config.kubernetes_pod_resources:
        raise ConfigError("--kubernetes.pod-labels requires --kubernetes.pod-resources")
    if config.kubernetes_dra_claims and not config.kubernetes_pod_resources:
        raise ConfigError("--kubernetes.dra-claims requires --kubernetes.pod-resources")
    if config.kubernetes_process_pods and not config.compute_apps:
        raise ConfigError("--kubernetes.process-pods requires --collect.compute-apps")
    if config.kubernetes_pod_metadata and not config.kubernetes_process_pods:
        raise ConfigError("--kubernetes.pod-metadata requires --kubernetes.process-pods")
    if config.kubernetes_pod_metadata and not config.process_usage:
        raise ConfigError("--kubernetes.pod-metadata requires --collect.process-usage: it names the per-pod series")
    if config.kubernetes_pod_metadata and config.kubernetes_pod_metadata_refresh_ns <= 0:
        refresh = format_duration(config.kubernetes_pod_metadata_refresh_ns)
        raise ConfigError(f"kubernetes.pod-metadata-refresh must be positive, got {refresh}")
    if config.kubernetes_pod_resources:
        if config.kubernetes_pod_resources_timeout_ns <= 0:
            timeout = format_duration(config.kubernetes_pod_resources_timeout_ns)
            raise ConfigError(f"kubernetes.pod-resources-timeout must be positive, got {timeout}")
        if config.kubernetes_pod_resources_cache_ns < 0:
            cache = format_duration(config.kubernetes_pod_resources_cache_ns)
            raise ConfigError(f"kubernetes.pod-resources-cache must not be negative, got {cache}")
        if not config.kubernetes_pod_resources_socket:
            raise ConfigError("--kubernetes.pod-resources-socket must not be empty")
        if not any(part.strip() for part in config.kubernetes_resource_names.split(",")):
            raise ConfigError("--kubernetes.resource-names must name at least one resource")
    if (config.kubernetes_process_pods or config.slurm_jobs) and not config.kubernetes_proc_root:
        raise ConfigError("--kubernetes.proc-root must not be empty")
    if config.slurm_jobs and not (config.compute_apps or config.process_usage):
        raise ConfigError("--slurm.jobs requires --collect.compute-apps or --collect.process-usage")
    attribution = config.kubernetes_pod_resources or config.kubernetes_process_pods
    if attribution and config.telemetry_path == ATTRIBUTION_PATH:
        raise ConfigError(f"web.telemetry-path must not be {ATTRIBUTION_PATH} with Kubernetes attribution on")
