"""Command-line parsing with the Go exporter's (kingpin's) syntax and flag names.

``--flag=value`` or ``--flag value``; booleans as ``--flag``, ``--no-flag`` or ``--flag=false``;
``--web.listen-address`` may repeat. Durations use Go syntax. No environment variables are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nvidia_gpu_exporter._go.durations import DurationError, format_duration, parse_duration
from nvidia_gpu_exporter._go.strconv import DECIMAL_INT, parse_bool, parse_int
from nvidia_gpu_exporter.config import DEFAULT_LISTEN_ADDRESS, Backend, Config, Profile, XidSource
from nvidia_gpu_exporter.logs import FORMATS, LEVELS


class FlagError(ValueError):
    """The command line cannot be parsed."""


class Kind(Enum):
    """How a flag's value is read, and how ``--help`` shows it."""

    STRING = "string"
    STRINGS = "strings"  # repeatable; every occurrence adds one value
    BOOL = "bool"
    DURATION = "duration"  # Go syntax, carried as nanoseconds
    INT = "int"
    ENUM = "enum"  # one of ``choices``


class Action(str, Enum):
    """What the command line asks for."""

    RUN = "run"
    HELP = "help"
    VERSION = "version"


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    attribute: str
    help: str
    kind: Kind
    choices: tuple[str, ...] = ()
    placeholder: str = ""


FLAGS: tuple[Flag, ...] = (
    Flag(
        "web.listen-address",
        "listen_addresses",
        "Addresses on which to expose metrics and web interface. Repeatable for multiple addresses.",
        Kind.STRINGS,
        placeholder=DEFAULT_LISTEN_ADDRESS,
    ),
    Flag(
        "web.config.file",
        "web_config_file",
        "Path to configuration file that can enable TLS or authentication.",
        Kind.STRING,
    ),
    Flag(
        "web.systemd-socket",
        "systemd_socket",
        "Use systemd socket activation listeners instead of port listeners (Linux only).",
        Kind.BOOL,
    ),
    Flag("web.network", "network", "Network to listen on: tcp (dual stack), tcp4 or tcp6.", Kind.STRING),
    Flag("web.read-timeout", "read_timeout_ns", "Maximum duration for reading the entire request.", Kind.DURATION),
    Flag(
        "web.read-header-timeout",
        "read_header_timeout_ns",
        "Maximum duration for reading the request headers.",
        Kind.DURATION,
    ),
    Flag(
        "web.write-timeout",
        "write_timeout_ns",
        "Maximum duration to answer a synchronous scrape, and that a response may wait for the client to read "
        "any of it.",
        Kind.DURATION,
    ),
    Flag(
        "web.idle-timeout",
        "idle_timeout_ns",
        "Maximum time to wait for the next request on a keep-alive connection.",
        Kind.DURATION,
    ),
    Flag("web.telemetry-path", "telemetry_path", "Path under which to expose metrics.", Kind.STRING),
    Flag(
        "web.max-requests",
        "max_requests",
        "Maximum number of concurrent scrape requests; excess get 503 at once. 0 disables the limit.",
        Kind.INT,
    ),
    Flag(
        "web.max-connections",
        "max_connections",
        "Maximum number of open connections; at the limit a new one replaces the longest idle, or gets 503 when "
        "none is idle. 0 disables the limit.",
        Kind.INT,
    ),
    Flag(
        "web.timeout-offset",
        "timeout_offset_ns",
        "Subtracted from Prometheus' X-Prometheus-Scrape-Timeout-Seconds to bound a synchronous scrape.",
        Kind.DURATION,
    ),
    Flag("web.enable-pprof", "enable_pprof", "Enable the /debug/pprof profiling endpoints.", Kind.BOOL),
    Flag(
        "nvidia-smi-command",
        "nvidia_smi_command",
        "Path or command to be used for nvidia-smi executable, with optional leading arguments "
        "(e.g. 'ssh host nvidia-smi').",
        Kind.STRING,
    ),
    Flag(
        "query-field-names",
        "query_field_names",
        "Comma-separated list of the query fields. You can find out possible fields by running "
        "`nvidia-smi --help-query-gpu`. The value `AUTO` will automatically detect the fields to query.",
        Kind.STRING,
    ),
    Flag(
        "query-field-names-exclude",
        "query_field_names_exclude",
        "Comma-separated glob patterns (* = any sequence) of query fields to leave out.",
        Kind.STRING,
    ),
    Flag(
        "collect.backend",
        "backend",
        "Collection backend: exec (runs nvidia-smi), nvml (reads libnvidia-ml) or demo (synthetic GPUs).",
        Kind.ENUM,
        tuple(backend.value for backend in Backend),
    ),
    Flag(
        "collect.interval",
        "collect_interval_ns",
        "Collect in the background every interval and serve the cached result; 0 collects on each scrape.",
        Kind.DURATION,
    ),
    Flag(
        "collect.timeout",
        "collect_timeout_ns",
        "Upper bound for one collection (and each startup nvidia-smi run); 0 means no bound.",
        Kind.DURATION,
    ),
    Flag(
        "collect.compute-apps",
        "compute_apps",
        "Collect per-process metrics (processes with a compute context on each GPU).",
        Kind.BOOL,
    ),
    Flag(
        "collect.compute-apps-mig",
        "compute_apps_mig",
        "Add gpu_instance_id and compute_instance_id labels to per-process metrics (nvml and demo backends).",
        Kind.BOOL,
    ),
    Flag(
        "collect.pcie-throughput",
        "pcie_throughput",
        "Sample PCIe TX/RX throughput per GPU (nvml backend).",
        Kind.BOOL,
    ),
    Flag(
        "collect.xid-source",
        "xid_source",
        "Where XID errors come from: auto (the kernel log if readable, else NVML events), kmsg, nvml or off.",
        Kind.ENUM,
        tuple(source.value for source in XidSource),
    ),
    Flag(
        "collect.kernel-log",
        "kernel_log",
        "The kernel log to read XIDs from: /dev/kmsg, or a file or FIFO in its format (a host log mounted elsewhere).",
        Kind.STRING,
    ),
    Flag(
        "collect.sysfs-path",
        "sysfs_path",
        "Where sysfs is mounted (the host's /sys when mounted elsewhere): its NVIDIA PCI functions are the GPUs the "
        "node should have. The demo backend simulates its own.",
        Kind.STRING,
    ),
    Flag("demo-config", "demo_config", "Demo scenario YAML file (demo backend only).", Kind.STRING),
    Flag(
        "shutdown-on-error",
        "shutdown_on_error",
        "Exit the process when a collection fails fatally (nvidia-smi exits non-zero).",
        Kind.BOOL,
    ),
    Flag(
        "metrics.profile",
        "metrics_profile",
        "Names the GPU series are served under: nvidia_smi (the Go exporter's), dcgm (dcgm-exporter's DCGM_FI_*) "
        "or both.",
        Kind.ENUM,
        tuple(profile.value for profile in Profile),
    ),
    Flag(
        "kubernetes.pod-resources",
        "kubernetes_pod_resources",
        "Attribute GPUs to pods via the kubelet PodResources API (needs the 'kubernetes' extra).",
        Kind.BOOL,
    ),
    Flag(
        "kubernetes.pod-resources-socket",
        "kubernetes_pod_resources_socket",
        "The kubelet PodResources socket.",
        Kind.STRING,
    ),
    Flag(
        "kubernetes.pod-resources-timeout",
        "kubernetes_pod_resources_timeout_ns",
        "Upper bound for one PodResources call; a slow or dead kubelet never holds a collection longer.",
        Kind.DURATION,
    ),
    Flag(
        "kubernetes.pod-resources-cache",
        "kubernetes_pod_resources_cache_ns",
        "Reuse a PodResources answer for this long; 0 asks the kubelet on every collection.",
        Kind.DURATION,
    ),
    Flag(
        "kubernetes.resource-names",
        "kubernetes_resource_names",
        "Comma-separated glob patterns of the extended resources whose devices are attributed.",
        Kind.STRING,
    ),
    Flag(
        "kubernetes.pod-labels",
        "kubernetes_pod_labels",
        "Add namespace, pod and container labels to the per-GPU series of GPUs held by one container.",
        Kind.BOOL,
    ),
    Flag(
        "kubernetes.process-pods",
        "kubernetes_process_pods",
        "Attribute GPU processes to pod uid and container id from their cgroups (needs hostPID).",
        Kind.BOOL,
    ),
    Flag(
        "kubernetes.proc-root",
        "kubernetes_proc_root",
        "Where the host's /proc is mounted, for --kubernetes.process-pods.",
        Kind.STRING,
    ),
    Flag("log.level", "log_level", "Only log messages with the given severity or above.", Kind.ENUM, tuple(LEVELS)),
    Flag("log.format", "log_format", "Output format of log messages.", Kind.ENUM, FORMATS),
)
_BY_NAME = {flag.name: flag for flag in FLAGS}


@dataclass(frozen=True, slots=True)
class Parsed:
    """Either a config to run with, or an informational action (help, version)."""

    config: Config
    action: Action = Action.RUN


def _convert(flag: Flag, value: str) -> Any:
    if flag.kind in (Kind.STRING, Kind.STRINGS):
        return value
    if flag.kind is Kind.BOOL:
        truth = parse_bool(value)
        if truth is None:
            raise FlagError(f"strconv.ParseBool: parsing {value!r}: invalid syntax for flag --{flag.name}")
        return truth
    if flag.kind is Kind.DURATION:
        try:
            return parse_duration(value)
        except DurationError as error:
            raise FlagError(f"{error} for flag --{flag.name}") from error
    if flag.kind is Kind.INT:
        number = parse_int(value)
        if number is None:
            problem = "value out of range" if DECIMAL_INT.fullmatch(value) else "invalid syntax"
            raise FlagError(f'strconv.ParseInt: parsing "{value}": {problem} for flag --{flag.name}')
        return number
    if value not in flag.choices:
        raise FlagError(f"enum value must be one of {','.join(flag.choices)}, got '{value}' for flag --{flag.name}")
    return value


def parse_args(argv: Sequence[str]) -> Parsed:
    """Parse the exporter's arguments (without the program name)."""
    values: dict[str, Any] = {}
    listen: list[str] = []
    action = Action.RUN
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token in ("-h", "--help", "--help-long", "--help-man"):
            action = Action.HELP
            continue
        if token == "--version":
            action = Action.VERSION
            continue
        if token == "--":
            if index < len(argv):
                raise FlagError(f"unexpected {argv[index]}")
            break
        if not token.startswith("--"):
            if token.startswith("-") and len(token) > 1:
                raise FlagError(f"unknown short flag '{token[:2]}'")
            raise FlagError(f"unexpected {token}")
        name, has_value, inline = token[2:].partition("=")
        negated = False
        flag = _BY_NAME.get(name)
        if flag is None and name.startswith("no-") and not has_value:
            flag = _BY_NAME.get(name[3:])
            negated = flag is not None and flag.kind is Kind.BOOL
            if not negated:
                flag = None
        if flag is None:
            raise FlagError(f"unknown long flag '--{name}'")
        if flag.kind is Kind.BOOL:
            value: Any = False if negated else (_convert(flag, inline) if has_value else True)
        else:
            if not has_value:
                if index >= len(argv):
                    raise FlagError(f"expected argument for flag '--{flag.name}'")
                inline = argv[index]
                index += 1
            value = _convert(flag, inline)
        if flag.kind is Kind.STRINGS:
            listen.append(value)
        else:
            values[flag.attribute] = value
    if listen:
        values["listen_addresses"] = tuple(listen)
    return Parsed(dataclasses.replace(Config(), **values), action)


def _default_text(flag: Flag, defaults: Config) -> str:
    value = getattr(defaults, flag.attribute)
    if flag.kind is Kind.DURATION:
        return format_duration(value)
    if flag.kind is Kind.STRINGS:
        return ", ".join(value)
    if flag.kind is Kind.BOOL:
        return ""
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def usage(program: str = "nvidia_gpu_exporter", describe: Callable[[Flag], str] | None = None) -> str:
    """``--help`` text: every flag with its default."""
    defaults = Config()
    lines = [
        f"usage: {program} [<flags>]",
        "",
        "Prometheus exporter for NVIDIA GPUs, a drop-in for the Go nvidia_gpu_exporter.",
        "",
        "Flags:",
        "  -h, --help                  Show context-sensitive help.",
        "      --version               Show application version.",
    ]
    for flag in FLAGS:
        if flag.kind is Kind.BOOL:
            left = f"--[no-]{flag.name}"
        else:
            placeholder = flag.placeholder or f"<{flag.kind.value}>"
            if flag.choices:
                placeholder = "<" + "|".join(flag.choices) + ">"
            left = f"--{flag.name}={placeholder}"
        text = describe(flag) if describe else flag.help
        default = _default_text(flag, defaults)
        suffix = f' (default: "{default}")' if default else ""
        lines.append(f"      {left}")
        lines.append(f"          {text}{suffix}")
    return "\n".join(lines) + "\n"
