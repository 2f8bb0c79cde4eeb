"""The one typed configuration object the command line is turned into, and its startup validation."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from .durations import format_duration
from .exposition.gotext import is_go_space

BACKENDS = ("exec", "nvml", "demo")
DEFAULT_NVIDIA_SMI_COMMAND = "nvidia-smi"
RESERVED_ROUTES = ("/-/healthy", "/-/ready")
PPROF_ROUTE = "/debug/pprof"
ATTRIBUTION_ROUTE = "/-/attribution"  # served only with Kubernetes attribution on
DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_NAMES = "nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-*"


class ConfigError(ValueError):
    """A flag value or combination the exporter refuses to start with."""


@dataclass(frozen=True, slots=True)
class Config:
    """Every flag of the exporter, typed; durations in nanoseconds as Go parses them."""

    listen_addresses: tuple[str, ...] = (":9835",)
    web_config_file: str = ""
    systemd_socket: bool = False
    network: str = "tcp"
    read_timeout_ns: int = 10_000_000_000
    read_header_timeout_ns: int = 10_000_000_000
    write_timeout_ns: int = 15_000_000_000
    idle_timeout_ns: int = 60_000_000_000
    telemetry_path: str = "/metrics"
    max_requests: int = 40
    timeout_offset_ns: int = 500_000_000
    enable_pprof: bool = False
    nvidia_smi_command: str = DEFAULT_NVIDIA_SMI_COMMAND
    query_field_names: str = "AUTO"
    query_field_names_exclude: str = ""
    backend: str = "exec"
    collect_interval_ns: int = 0
    collect_timeout_ns: int = 10_000_000_000
    compute_apps: bool = False
    compute_apps_mig: bool = False
    pcie_throughput: bool = False
    demo_config: str = ""
    shutdown_on_error: bool = False
    kubernetes_pod_resources: bool = False
    kubernetes_pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    kubernetes_pod_resources_timeout_ns: int = 2_000_000_000
    kubernetes_pod_resources_cache_ns: int = 5_000_000_000
    kubernetes_resource_names: str = DEFAULT_RESOURCE_NAMES
    kubernetes_pod_labels: bool = False
    kubernetes_process_pods: bool = False
    kubernetes_proc_root: str = "/proc"
    log_level: str = "info"
    log_format: str = "logfmt"


def telemetry_path_problem(path: str) -> str | None:
    """Why a telemetry path is unusable, or ``None`` when it is fine."""
    if not path.startswith("/"):
        return f"web.telemetry-path must start with '/', got {path!r}"
    if path == "/":
        return "web.telemetry-path must not be '/': the landing page lives there"
    if path.endswith("/"):
        return f"web.telemetry-path must not end with '/', got {path!r}"
    if posixpath.normpath(path) != path or "//" in path:
        return f"web.telemetry-path must be a clean path (no '//', '/./' or '/../'), got {path!r}"
    for char in "{}%?#":
        if char in path:
            return f"web.telemetry-path must not contain {char!r}, got {path!r}"
    if any(is_go_space(char) for char in path):
        return f"web.telemetry-path must not contain whitespace, got {path!r}"
    if path in RESERVED_ROUTES:
        return f"web.telemetry-path must not be {path}: that route is reserved"
    if path == PPROF_ROUTE or path.startswith(PPROF_ROUTE + "/"):
        return f"web.telemetry-path must not be under {PPROF_ROUTE}: that route is reserved, got {path!r}"
    return None


def validate(config: Config) -> None:
    """Startup validation, in the Go exporter's order; raises :class:`ConfigError` at the first problem."""
    for name, value in (
        ("collect.interval", config.collect_interval_ns),
        ("collect.timeout", config.collect_timeout_ns),
    ):
        if value < 0:
            raise ConfigError(f"{name} must not be negative, got {format_duration(value)}")
    problem = telemetry_path_problem(config.telemetry_path)
    if problem:
        raise ConfigError(problem)
    if config.max_requests < 0:
        raise ConfigError(f"web.max-requests must not be negative, got {config.max_requests}")
    if config.timeout_offset_ns < 0:
        raise ConfigError(f"web.timeout-offset must not be negative, got {format_duration(config.timeout_offset_ns)}")
    backend = config.backend
    if backend != "exec" and config.nvidia_smi_command != DEFAULT_NVIDIA_SMI_COMMAND:
        raise ConfigError(f"--nvidia-smi-command cannot be combined with --collect.backend={backend}")
    if backend == "exec" and config.pcie_throughput:
        raise ConfigError("--collect.pcie-throughput requires --collect.backend=nvml")
    if backend == "exec" and config.compute_apps_mig:
        raise ConfigError("--collect.compute-apps-mig requires --collect.backend=nvml or demo")
    if config.compute_apps_mig and not config.compute_apps:
        raise ConfigError("--collect.compute-apps-mig requires --collect.compute-apps")
    if config.demo_config and backend != "demo":
        raise ConfigError("--demo-config requires --collect.backend=demo")
    validate_kubernetes(config)


def validate_kubernetes(config: Config) -> None:
    """The ``--kubernetes.*`` flags; with attribution off (the default) nothing here can fail."""
    if config.kubernetes_pod_labels and not config.kubernetes_pod_resources:
        raise ConfigError("--kubernetes.pod-labels requires --kubernetes.pod-resources")
    if config.kubernetes_process_pods and not config.compute_apps:
        raise ConfigError("--kubernetes.process-pods requires --collect.compute-apps")
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
    if config.kubernetes_process_pods and not config.kubernetes_proc_root:
        raise ConfigError("--kubernetes.proc-root must not be empty")
    attribution = config.kubernetes_pod_resources or config.kubernetes_process_pods
    if attribution and config.telemetry_path == ATTRIBUTION_ROUTE:
        raise ConfigError(f"web.telemetry-path must not be {ATTRIBUTION_ROUTE} with Kubernetes attribution on")
