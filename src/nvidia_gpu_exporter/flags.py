"""Command-line parsing with the Go exporter's (kingpin's) syntax and flag names.

``--flag=value`` or ``--flag value``; booleans as ``--flag`` or ``--no-flag``; ``@FILE`` expands to the file's
lines; ``--web.listen-address`` may repeat. Durations use Go syntax or Prometheus' ``d``/``w``/``y``.

dcgm-exporter's command line and environment are accepted too (``DCGM_OPTIONS``, at the end of this module), so
its DaemonSets run this exporter with only the image changed; no other environment variable is read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nvidia_gpu_exporter._go.durations import DurationError, format_duration, parse_duration, parse_flag_duration
from nvidia_gpu_exporter._go.strconv import INT64_MIN, parse_bool, parse_float
from nvidia_gpu_exporter._go.text import GO_SPACE, go_quote
from nvidia_gpu_exporter.config import DEFAULT_LISTEN_ADDRESS, Backend, Config, Profile, XidSource
from nvidia_gpu_exporter.exposition.dcgm_defaults import AUTO, DEFAULT_GENERATION, IMAGE_DIRECTORY, Generation
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS
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
    """What the command line asks for: run, or print one text (kingpin's informational flags) and exit 0."""

    RUN = "run"
    HELP = "help"
    HELP_LONG = "help-long"
    HELP_MAN = "help-man"
    VERSION = "version"
    COMPLETION_BASH = "completion-bash"
    COMPLETION_SCRIPT_BASH = "completion-script-bash"
    COMPLETION_SCRIPT_ZSH = "completion-script-zsh"


# Flags that print a text and end parsing, as kingpin's pre-actions: the first on the command line wins, over
# --help too. All but --version are hidden from --help, the man page and the completions, as in kingpin.
_GENERATORS = {
    f"--{action.value}": action
    for action in (
        Action.HELP_LONG,
        Action.HELP_MAN,
        Action.VERSION,
        Action.COMPLETION_SCRIPT_BASH,
        Action.COMPLETION_SCRIPT_ZSH,
    )
}
_COMPLETION_FLAG = f"--{Action.COMPLETION_BASH.value}"
HELP_TEXT = "Show context-sensitive help (also try --help-long and --help-man)."
VERSION_TEXT = "Show application version."
DESCRIPTION = "Prometheus exporter for NVIDIA GPUs, a drop-in for the Go nvidia_gpu_exporter."


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    attribute: str
    help: str
    kind: Kind
    choices: tuple[str, ...] = ()
    placeholder: str = ""
    short: str = ""  # a one-letter alias (``-f FILE``), only where a tool we replace has it


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
    Flag(
        "web.network",
        "network",
        "Network to listen on: tcp (dual stack), tcp4, tcp6 or unix (the address is a socket's path).",
        Kind.STRING,
    ),
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
        "web.enable-pprof-unauthenticated",
        "enable_pprof_unauthenticated",
        "Allow --web.enable-pprof without basic auth or client certificates in --web.config.file (the profiling "
        "endpoints show the command line and run for minutes).",
        Kind.BOOL,
    ),
    Flag(
        "web.enable-openmetrics",
        "enable_openmetrics",
        "Answer a scrape that prefers OpenMetrics (Prometheus' does) in OpenMetrics; without it such a scrape gets "
        "the text format, as from the Go exporter and dcgm-exporter.",
        Kind.BOOL,
    ),
    Flag(
        "web.ready.require-collection",
        "ready_require_collection",
        "Answer /-/ready with 503 until a collection has succeeded (and while --web.ready.max-staleness or "
        "--web.ready.min-gpus is not met); without it /-/ready is always 200, as in the Go exporter.",
        Kind.BOOL,
    ),
    Flag(
        "web.ready.max-staleness",
        "ready_max_staleness_ns",
        "With --web.ready.require-collection: 503 while the last successful collection is older than this; 0 "
        "means no bound.",
        Kind.DURATION,
    ),
    Flag(
        "web.ready.min-gpus",
        "ready_min_gpus",
        "With --web.ready.require-collection: 503 while the last successful collection saw fewer GPUs than this "
        "number, or than the PCI bus lists (pci).",
        Kind.STRING,
        placeholder="<n|pci>",
    ),
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
        "collect.max-output-bytes",
        "collect_max_output_bytes",
        "Most bytes one nvidia-smi run may print on stdout (and on stderr); past it the run is killed and the "
        "collection fails.",
        Kind.INT,
    ),
    Flag(
        "collect.stream-interval",
        "collect_stream_interval_ns",
        "Exec backend: keep one nvidia-smi running that prints its table every interval (-lms), and serve its "
        "latest table instead of running nvidia-smi per collection; 0 runs it per collection.",
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
        "collect.process-usage",
        "process_usage",
        "Collect per-process SM, memory-controller, encoder and decoder utilization and used memory of every "
        "process on each GPU (exec: nvidia-smi pmon; nvml: process utilization samples).",
        Kind.BOOL,
    ),
    Flag(
        "collect.process-usage-max-processes",
        "process_usage_max_processes",
        "Most processes per GPU with series of their own in the per-process usage families; the rest are summed "
        'into one series per GPU (pid="other"). 0 serves only those sums.',
        Kind.INT,
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
        "dcgm.collectors",
        "dcgm_collectors",
        "dcgm-exporter's counters CSV file: the DCGM fields to serve, with their type and help "
        "(needs --metrics.profile=dcgm or both).",
        Kind.STRING,
        short="f",  # dcgm-exporter's -f / --collectors
    ),
    Flag(
        "dcgm.compatibility",
        "dcgm_compatibility",
        "The dcgm-exporter release line whose label and field names and units the DCGM profile serves; auto: "
        f"the one the counters file's names say (or the releases that name an absent image file), else the newest, "
        f"{DEFAULT_GENERATION.value}.",
        Kind.ENUM,
        (AUTO, *(generation.value for generation in Generation)),
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
        "kubernetes.pod-metadata",
        "kubernetes_pod_metadata",
        "Name the pods of --kubernetes.process-pods' uids (namespace, pod, container) from the Kubernetes API "
        "server's list of this node's pods (needs list on pods).",
        Kind.BOOL,
    ),
    Flag(
        "kubernetes.pod-metadata-refresh",
        "kubernetes_pod_metadata_refresh_ns",
        "List the node's pods at most this often (sooner, at most every 5s, for a pod the last list lacks).",
        Kind.DURATION,
    ),
    Flag(
        "kubernetes.node-name",
        "kubernetes_node_name",
        "This node's name, whose pods --kubernetes.pod-metadata lists; empty: the NODE_NAME environment variable.",
        Kind.STRING,
    ),
    Flag(
        "kubernetes.kubeconfig",
        "kubernetes_kubeconfig",
        "A kubeconfig file for --kubernetes.pod-metadata; empty: the pod's in-cluster service account.",
        Kind.STRING,
    ),
    Flag(
        "kubernetes.proc-root",
        "kubernetes_proc_root",
        "Where the host's /proc is mounted, for --kubernetes.process-pods, --kubernetes.dra-claims and --slurm.jobs.",
        Kind.STRING,
    ),
    Flag(
        "kubernetes.dra-claims",
        "kubernetes_dra_claims",
        "Serve the ResourceClaims (Dynamic Resource Allocation) whose NVIDIA DRA driver devices containers hold.",
        Kind.BOOL,
    ),
    Flag(
        "slurm.jobs",
        "slurm_jobs",
        "Label GPU processes and GPUs with the Slurm job running them, from the processes' cgroups and environ.",
        Kind.BOOL,
    ),
    Flag(
        "fleet.targets-file",
        "fleet_targets_file",
        "Fleet mode: YAML file of SSH targets served at /probe?target=<name> (needs the 'fleet' extra; docs/fleet.md).",
        Kind.STRING,
    ),
    Flag(
        "fleet.max-concurrent",
        "fleet_max_concurrent",
        "Fleet mode: nvidia-smi runs in flight over SSH at once, across every target.",
        Kind.INT,
    ),
    Flag("log.level", "log_level", "Only log messages with the given severity or above.", Kind.ENUM, tuple(LEVELS)),
    Flag("log.format", "log_format", "Output format of log messages.", Kind.ENUM, FORMATS),
)
_BY_NAME = {flag.name: flag for flag in FLAGS}
_BY_SHORT = {flag.short: flag for flag in FLAGS if flag.short}


@dataclass(frozen=True, slots=True)
class Subcommand:
    """A first word that runs something other than the exporter (``cli.main`` dispatches it)."""

    name: str
    arguments: str  # after the name in --help: "[<flags>]" or ""
    text: str
    windows_only: bool = False


DOCTOR_DESCRIPTION = "Check a GPU node for the NVIDIA exporter: exit 0 all good, 1 warnings, 2 failures."
# Listed after the flags in --help and the man page: the flags' lines stay those of the Go exporter's usage.
SUBCOMMANDS = (
    Subcommand("doctor", "[<flags>]", f"{DOCTOR_DESCRIPTION} Its flags: nvidia_gpu_exporter doctor --help."),
    Subcommand(
        "install",
        "[<flags>]",
        "Windows only: register the Windows service (or reconfigure it) to run the exporter with these flags.",
        windows_only=True,
    ),
    Subcommand("uninstall", "", "Windows only: stop and remove the Windows service.", windows_only=True),
)


@dataclass(frozen=True, slots=True)
class Parsed:
    """Either a config to run with, or an informational action (help, version); ``--completion-bash`` keeps
    the words it completes."""

    config: Config
    action: Action = Action.RUN
    words: tuple[str, ...] = ()
    dcgm_exporter: bool = False  # invoked the dcgm-exporter way (its flags, its environment or its name)
    notices: tuple[Notice, ...] = ()  # dcgm-exporter options accepted without effect, each with why


_LOG_LEVEL_FLAG, _LOG_FORMAT_FLAG = "log.level", "log.format"  # promslog's own Set methods, not kingpin enums


def _convert(flag: Flag, value: str) -> Any:
    """A raw value as the Go flag's ``Set`` reads it, erring in its words (kingpin adds no flag name)."""
    if flag.kind in (Kind.STRING, Kind.STRINGS):
        return value
    if flag.kind is Kind.BOOL:  # only a dcgm-exporter option brings a value: kingpin never gives a boolean one
        truth = parse_bool(value)
        if truth is None:
            raise FlagError(f"strconv.ParseBool: parsing {value!r}: invalid syntax")
        return truth
    if flag.kind is Kind.DURATION:
        try:
            return parse_flag_duration(value)
        except DurationError as error:
            raise FlagError(str(error)) from error
    if flag.kind is Kind.INT:
        return _kingpin_int(value)
    if flag.name == _LOG_LEVEL_FLAG:
        if value.lower() not in flag.choices:
            raise FlagError(f"unrecognized log level {value}")
        return value.lower()
    if value not in flag.choices:
        if flag.name == _LOG_FORMAT_FLAG:
            raise FlagError(f"unrecognized log format {value}")
        raise FlagError(f"enum value must be one of {','.join(flag.choices)}, got '{value}'")
    return value


def _kingpin_int(value: str) -> int:
    """kingpin's ``Int()``: ``strconv.ParseFloat`` then Go's ``int(v)``, which truncates toward zero and turns
    NaN and anything beyond int64 into its minimum (amd64)."""
    number = parse_float(value)
    if number is None:
        raise FlagError(f'strconv.ParseFloat: parsing "{value}": invalid syntax')
    if math.isinf(number):
        raise FlagError(f'strconv.ParseFloat: parsing "{value}": value out of range')
    if math.isnan(number) or not INT64_MIN <= number < -float(INT64_MIN):
        return INT64_MIN
    return int(number)


@dataclass(frozen=True, slots=True)
class _Reading:
    """What kingpin's parse pass collected before it stopped: flags with their raw values, and why it stopped."""

    elements: list[tuple[Flag, str | None]]  # the raw value; None for a bare boolean, "false" for --no-
    generator: Action | None
    help_asked: bool
    parse_error: FlagError | None  # unknown flag, missing value, positional argument, unreadable @file


class _TokenKind(Enum):
    LONG = "long"
    SHORT = "short"
    ARG = "arg"
    ERROR = "error"
    END = "end"


ARGS_FILE_MAX_BYTES = 1 << 20  # an @file larger than this is refused: kingpin reads any size
ARGS_FILE_MAX_EXPANSIONS = 64  # @files read in one command line: a file naming itself would expand forever


class _Tokens:
    """kingpin's tokenizer (``ParseContext.Next``): ``--name[=value]``, ``-x`` (combined booleans split), a lone
    ``-`` as an empty argument, everything after ``--`` an argument, and ``@FILE`` replaced by its lines."""

    def __init__(self, argv: Sequence[str]) -> None:
        self._args = list(reversed(argv))  # popped from the end
        self._pushed: list[tuple[_TokenKind, str]] = []
        self._args_only = False
        self._expansions = 0

    def push(self, kind: _TokenKind, value: str) -> None:
        self._pushed.append((kind, value))

    def next(self) -> tuple[_TokenKind, str]:
        if self._pushed:
            return self._pushed.pop()
        while self._args:
            arg = self._args.pop()
            if self._args_only:
                return _TokenKind.ARG, arg
            if arg == "--":
                self._args_only = True
                continue
            if arg.startswith("--"):
                name, has_value, value = arg[2:].partition("=")
                if has_value:
                    self.push(_TokenKind.ARG, value)
                return _TokenKind.LONG, name
            if arg.startswith("-"):
                return self._short(arg)
            if arg.startswith("@"):
                problem = self._expand(arg[1:])
                if problem is not None:
                    return _TokenKind.ERROR, problem
                continue
            return _TokenKind.ARG, arg
        return _TokenKind.END, ""

    def _short(self, arg: str) -> tuple[_TokenKind, str]:
        if len(arg) == 1:
            return _TokenKind.ARG, ""
        short, rest = arg[1], arg[2:]
        flag = _BY_SHORT.get(short)
        if flag is not None and flag.kind is not Kind.BOOL:  # ``-fFILE``; ``-f=FILE`` as dcgm-exporter reads it
            if rest:
                self.push(_TokenKind.ARG, rest.removeprefix("="))
            return _TokenKind.SHORT, short
        if rest:
            self._args.append("-" + rest)
        return _TokenKind.SHORT, short

    def _expand(self, name: str) -> str | None:
        """Put ``name``'s lines in place of ``@name`` (kingpin's ``ExpandArgsFromFile``); else why not."""
        if not name:
            return "expected @ file to expand arguments from"
        self._expansions += 1
        if self._expansions > ARGS_FILE_MAX_EXPANSIONS:
            return f"failed to read arguments from {go_quote(name)}: more than {ARGS_FILE_MAX_EXPANSIONS} @files"
        try:
            with open(name, "rb") as file:
                data = file.read(ARGS_FILE_MAX_BYTES + 1)
        except OSError as error:
            if isinstance(error, IsADirectoryError):
                return f"failed to read arguments from {go_quote(name)}: read {name}: is a directory"
            reason = os.strerror(error.errno) if error.errno else str(error)
            return f"failed to open arguments file {go_quote(name)}: open {name}: {reason[:1].lower()}{reason[1:]}"
        if len(data) > ARGS_FILE_MAX_BYTES:
            return f"failed to read arguments from {go_quote(name)}: larger than {ARGS_FILE_MAX_BYTES} bytes"
        lines = data.decode("utf-8", "surrogateescape").removesuffix("\n").split("\n") if data else []
        kept = [line.removesuffix("\r") for line in lines]
        kept = [line for line in kept if not line.startswith("#") and line.strip(GO_SPACE)]
        self._args.extend(reversed(kept))
        return None


def _read(argv: Sequence[str]) -> _Reading:
    """kingpin's parse pass: flags and raw values in order, no value converted yet, stopping where it stops."""
    elements: list[tuple[Flag, str | None]] = []
    generator: Action | None = None
    help_asked = False
    tokens = _Tokens(argv)

    def stopped(error: str | None) -> _Reading:
        return _Reading(elements, generator, help_asked, None if error is None else FlagError(error))

    while True:
        kind, name = tokens.next()
        if kind is _TokenKind.END:
            return stopped(None)
        if kind is _TokenKind.ERROR:
            return stopped(name)
        if kind is _TokenKind.ARG:
            return stopped(f"unexpected {name}")
        written = f"-{name}" if kind is _TokenKind.SHORT else f"--{name}"
        if kind is _TokenKind.SHORT:
            if name == "h":
                help_asked = True
                continue
            flag = _BY_SHORT.get(name)
            if flag is None:
                return stopped(f"unknown short flag '{written}'")
        else:
            invert = name.startswith("no-") and not _known_long(name)
            name = name[3:] if invert else name
            if not _known_long(name):
                return stopped(f"unknown long flag '{written}'")
            if name == "help":  # the informational flags are kingpin booleans: negated, they still ask
                help_asked = True
                continue
            if f"--{name}" in _GENERATORS:
                generator = generator or _GENERATORS[f"--{name}"]
                continue
            flag = _BY_NAME[name]
            if flag.kind is Kind.BOOL:
                elements.append((flag, "false" if invert else None))
                continue
            if invert:
                return stopped(f"unknown long flag '{written}'")
        value_kind, value = tokens.next()
        if value_kind is not _TokenKind.ARG:
            tokens.push(value_kind, value)
            return stopped(f"expected argument for flag '{written}'")
        elements.append((flag, value))


def _known_long(name: str) -> bool:
    return name in _BY_NAME or name == "help" or f"--{name}" in _GENERATORS


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None, *, dcgm_exporter: bool = False) -> Parsed:
    """Parse the exporter's arguments (without the program name), deciding in kingpin's order.

    A generating flag (``--version``, ``--help-man``, ...) read before any parse error wins; then a parse error;
    then ``--help``; then a positional argument; then each value in turn, where a flag given twice that does
    not repeat is an error too. dcgm-exporter's options in ``argv`` or ``environ`` (``None``: no environment
    is read), or ``dcgm_exporter`` (the ``dcgm-exporter`` command), start from dcgm-exporter's defaults instead
    (:func:`dcgm_invocation`); our own flags still win over them.
    """
    invocation = dcgm_invocation(argv, environ, named=dcgm_exporter)
    if invocation is None:
        return _parse_kingpin(argv, Config())
    parsed = _parse_kingpin(invocation.argv, invocation.base)
    config, notices = _dcgm_finished(parsed.config, invocation)
    return dataclasses.replace(parsed, config=config, dcgm_exporter=True, notices=notices)


def _parse_kingpin(argv: Sequence[str], base: Config) -> Parsed:
    """Our own (kingpin) command line over ``base``: what it sets replaces the base's value."""
    if _COMPLETION_FLAG in argv:  # kingpin completes whatever else is there, however broken
        words = list(argv)
        words.remove(_COMPLETION_FLAG)
        return Parsed(Config(), Action.COMPLETION_BASH, tuple(words))
    reading = _read(argv)
    if reading.generator is not None:
        return Parsed(Config(), reading.generator)
    if reading.parse_error is not None:
        raise reading.parse_error
    if reading.help_asked:
        return Parsed(Config(), Action.HELP)
    values: dict[str, Any] = {}
    listen: list[str] = []
    for flag, raw in reading.elements:
        if flag.kind is Kind.STRINGS:
            listen.append(_convert(flag, raw or ""))
            continue
        if flag.attribute in values:
            raise FlagError(f"flag '{flag.name}' cannot be repeated")
        values[flag.attribute] = True if raw is None else _convert(flag, raw)
    if listen:
        values["listen_addresses"] = tuple(listen)
    return Parsed(dataclasses.replace(base, **values))


def _default_text(flag: Flag, defaults: Config) -> str:
    value = getattr(defaults, flag.attribute)
    if flag.kind is Kind.DURATION:
        return format_duration(value)
    if flag.kind is Kind.STRINGS:
        return ", ".join(value)
    if flag.kind is Kind.BOOL:
        return ""
    if value is None and flag.choices:  # an enum left to be decided at startup: its first choice says so (auto)
        return flag.choices[0]
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def _entries(describe: Callable[[Flag], str] | None = None) -> list[tuple[str, str, str]]:
    """Each visible flag as ``(flag, value placeholder, help with its default)``, in ``--help`` order."""
    defaults = Config()
    entries = [("-h, --help", "", HELP_TEXT), ("--version", "", VERSION_TEXT)]
    for flag in FLAGS:
        if flag.kind is Kind.BOOL:
            name, placeholder = f"--[no-]{flag.name}", ""
        else:
            placeholder = flag.placeholder or f"<{flag.kind.value}>"
            if flag.choices:
                placeholder = "<" + "|".join(flag.choices) + ">"
            name = f"--{flag.name}"
        if flag.short:
            name = f"-{flag.short}, {name}"
        text = describe(flag) if describe else flag.help
        default = _default_text(flag, defaults)
        entries.append((name, placeholder, f'{text} (default: "{default}")' if default else text))
    return entries


def usage(program: str = "nvidia_gpu_exporter", describe: Callable[[Flag], str] | None = None) -> str:
    """``--help`` text: every visible flag with its default."""
    lines = [f"usage: {program} [<flags>]", "", DESCRIPTION, "", "Flags:"]
    help_entry, version_entry, *flag_entries = _entries(describe)
    for name, _, text in (help_entry, version_entry):
        lines.append(f"{'  ' if name.startswith('-h') else '      '}{name}".ljust(30) + text)
    for name, placeholder, text in flag_entries:
        indent = "      " if name.startswith("--") else "  "  # a short flag's "-f, " takes the indent's place
        lines.append(f"{indent}{name}={placeholder}" if placeholder else f"{indent}{name}")
        lines.append(f"          {text}")
    lines += ["", "Commands:"]
    for subcommand in SUBCOMMANDS:
        lines.append(f"  {subcommand.name} {subcommand.arguments}".rstrip())
        lines.append(f"          {subcommand.text}")
    return "\n".join(lines) + "\n"


def _roff(text: str) -> str:
    """Text safe in a roff line: backslashes and hyphens escaped, no request at the line start."""
    escaped = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + escaped if escaped.startswith((".", "'")) else escaped


def man_page(program: str, version: str) -> str:
    """``--help-man``: a man(7) page of the visible flags, for ``man -l`` or packaging."""
    lines = [
        f'.TH {program.upper()} 1 "" "{_roff(program)} {_roff(version)}" "User Commands"',
        ".SH NAME",
        f"{_roff(program)} \\- {_roff(DESCRIPTION)}",
        ".SH SYNOPSIS",
        f".B {_roff(program)}",
        "[\\fIflags\\fR]",
        ".SH DESCRIPTION",
        _roff(DESCRIPTION),
        ".SH OPTIONS",
    ]
    for name, placeholder, text in _entries():
        names = ", ".join(f"\\fB{_roff(part.replace('[no-]', ''))}\\fR" for part in name.split(", "))
        lines += [".TP", names + (f"=\\fI{_roff(placeholder)}\\fR" if placeholder else ""), _roff(text)]
    lines.append(".SH COMMANDS")
    for subcommand in SUBCOMMANDS:
        arguments = f" \\fI{_roff(subcommand.arguments)}\\fR" if subcommand.arguments else ""
        lines += [".TP", f"\\fB{_roff(subcommand.name)}\\fR{arguments}", _roff(subcommand.text)]
    return "\n".join(lines) + "\n"


def completions(words: Sequence[str]) -> list[str]:
    """``--completion-bash``: the candidates for the last word, as kingpin offers them (the shell filters them).

    A word starting with ``--`` gets every visible flag; a complete enum flag (or a value after it) gets its
    values, none once the value is one of them; other flags and plain words get nothing, so the shell falls back
    to file names. ``--flag=value`` as one word keeps its flag on the values, and bash's split at ``=`` is undone.
    """
    current = words[-1] if words else ""
    previous = words[-2] if len(words) > 1 else ""
    if previous == "=" and len(words) > 2:  # bash: "--flag", "=", "value"
        current, previous = words[-1], words[-3]
    elif current == "=" and previous:  # bash: "--flag", "="
        current = ""
    prefix = ""
    if previous.startswith("--") and not current.startswith("--"):
        name, value = previous[2:], current
    elif current.startswith("--"):
        name, equals, value = current[2:].partition("=")
        prefix = f"--{name}=" if equals else ""
    else:
        return []
    flag = _BY_NAME.get(name)
    if flag is None:
        return ["--help", *(f"--{each.name}" for each in FLAGS), "--version"]
    options = list(flag.choices)
    if not options or (value in options and not any(o != value and o.startswith(value) for o in options)):
        return []
    return [prefix + option for option in options]


def bash_completion_script(program: str) -> str:
    """``--completion-script-bash``: ``eval "$(nvidia_gpu_exporter --completion-script-bash)"`` in ~/.bashrc."""
    function = f"_{program}_bash_autocomplete"
    return f"""# bash completion for {program}; load with: eval "$({program} --completion-script-bash)"
{function}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}"
    local -a words=("${{COMP_WORDS[@]:1:COMP_CWORD}}")
    if [[ "$cur" == "=" ]]; then
        cur=""
    fi
    local IFS=$'\\n'
    local candidates
    candidates="$("${{COMP_WORDS[0]}}" --completion-bash "${{words[@]}}" 2>/dev/null)"
    COMPREPLY=($(compgen -W "$candidates" -- "$cur"))
    return 0
}}
complete -o default -F {function} {program}
"""


def zsh_completion_script(program: str) -> str:
    """``--completion-script-zsh``: save as ``_{program}`` on ``$fpath``, or ``source`` it."""
    return f"""#compdef {program}
_{program}() {{
    local -a candidates
    candidates=(${{(f)"$(${{words[1]}} --completion-bash "${{(@)words[2,$CURRENT]}}" 2>/dev/null)"}})
    compadd -a candidates
    if [[ $compstate[nmatches] -eq 0 && $words[$CURRENT] != -* ]]; then
        _files
    fi
}}
if [[ "$(basename -- ${{(%):-%x}})" != "_{program}" ]]; then
    compdef _{program} {program}
fi
"""


# -- dcgm-exporter's command line and environment (docs/dcgm.md, "Swapping the image") -------------------------
# Its DaemonSets (its own Helm chart, the GPU Operator's) pass its flags and DCGM_EXPORTER_* variables to whatever
# the image runs; each option below either becomes our flags' values, as dcgm-exporter would behave, or is accepted
# with a startup warning saying why it changes nothing. Names, aliases, variables and defaults are those of
# dcgm-exporter's pkg/cmd/app.go (urfave/cli) as its main branch has it after 4.9.0; 4.10.0 is the newest
# release (docs/dcgm.md, "Swapping the image", lists each source).

DCGM_EXPORTER_PROGRAM = "dcgm-exporter"
DCGM_LISTEN_ADDRESS = ":9400"
DCGM_COLLECT_INTERVAL_MS = 30_000
DCGM_DEFAULT_COLLECTORS = IMAGE_DIRECTORY + "default-counters.csv"
_MILLISECOND_NS = 1_000_000
_NO_HOST_ENGINE = "there is no DCGM host engine or library here: the GPUs are read through nvidia-smi or NVML"
_NO_WATCHES = "there are no DCGM field watches here: each collection reads the GPUs afresh and keeps no samples"
_NO_CONTAINER_LABELS = "container runtime labels are not read (use -k for Kubernetes pods)"


class DcgmKind(Enum):
    """How dcgm-exporter (urfave/cli) reads an option's value."""

    STRING = "string"
    INT = "int"
    BOOL = "bool"
    STRINGS = "strings"  # comma-separated in the environment, repeatable on the command line
    DURATION = "duration"  # Go's time.ParseDuration; dcgm-exporter keeps its default for a value it cannot read


@dataclass(frozen=True, slots=True)
class Notice:
    """A dcgm-exporter option accepted without effect: as given (flag or variable) and why."""

    option: str
    why: str


@dataclass(frozen=True, slots=True)
class DcgmOption:
    """One option of dcgm-exporter. ``apply`` turns its value into our ``Config`` fields; without it, ``why``
    says why a value outside ``harmless`` (values asking for what we do anyway) changes nothing here."""

    name: str
    aliases: tuple[str, ...]
    env: str
    kind: DcgmKind
    apply: Callable[[Any], dict[str, Any]] | None = None
    why: str = ""
    harmless: tuple[str, ...] = ()


def _when(attribute_values: dict[str, Any]) -> Callable[[Any], dict[str, Any]]:
    """A boolean option that sets ``attribute_values`` when true and nothing when false."""
    return lambda on: dict(attribute_values) if on else {}


def _log_format(value: str) -> dict[str, Any]:
    formats = {"text": "logfmt", "json": "json"}  # slog's text handler writes logfmt
    if value not in formats:
        raise FlagError(f"invalid --log-format '{value}': text or json")
    return {"log_format": formats[value]}


def _max_concurrent_scrapes(limit: int) -> dict[str, Any]:
    """dcgm-exporter answers 503 past the limit, as --web.max-requests does; it refuses 0 or less at startup."""
    if limit <= 0:
        raise FlagError(f"invalid max-concurrent-scrapes parameter value: {limit}, must be greater than 0")
    return {"max_requests": limit}


def _resource_names(names: list[str]) -> dict[str, Any]:
    """dcgm-exporter adds these names to nvidia.com/gpu and the MIG resources; so do we, to our defaults."""
    return {"kubernetes_resource_names": ",".join((*DEFAULT_RESOURCE_PATTERNS, *names))}


_FALSE = ("false",)
DCGM_OPTIONS: tuple[DcgmOption, ...] = (
    DcgmOption(
        "collectors",
        ("f",),
        "DCGM_EXPORTER_COLLECTORS",
        DcgmKind.STRING,
        lambda v: {"dcgm_collectors": v, "dcgm_inline_counters": ()},  # it replaces a YAML file's metric source
    ),
    DcgmOption("address", ("a",), "DCGM_EXPORTER_LISTEN", DcgmKind.STRING, lambda v: {"listen_addresses": (v,)}),
    DcgmOption(
        "collect-interval",
        ("c",),
        "DCGM_EXPORTER_INTERVAL",
        DcgmKind.INT,
        lambda ms: {"collect_interval_ns": ms * _MILLISECOND_NS},  # milliseconds: DCGM's update period
    ),
    DcgmOption(
        "kubernetes",
        ("k",),
        "DCGM_EXPORTER_KUBERNETES",
        DcgmKind.BOOL,
        lambda on: {"kubernetes_pod_resources": on, "kubernetes_pod_labels": on},
    ),
    DcgmOption(
        "use-old-namespace",
        ("o",),
        "DCGM_EXPORTER_USE_OLD_NAMESPACE",
        DcgmKind.BOOL,
        lambda on: {"dcgm_old_namespace": on},  # 1.x's label names: uuid, pod_name, pod_namespace, container_name
    ),
    DcgmOption(
        "cpu-devices",
        ("p",),
        "DCGM_EXPORTER_CPU_DEVICES_STR",
        DcgmKind.STRING,
        why="no CPU entities are served: this exporter reads NVIDIA GPUs only",
        harmless=("f",),
    ),
    DcgmOption(
        "configmap-data",
        ("m",),
        "DCGM_EXPORTER_CONFIGMAP_DATA",
        DcgmKind.STRING,
        why="the counters ConfigMap is not read through the API server: mount it as a file and pass -f",
        harmless=("none",),
    ),
    DcgmOption("remote-hostengine-info", ("r",), "DCGM_REMOTE_HOSTENGINE_INFO", DcgmKind.STRING, why=_NO_HOST_ENGINE),
    DcgmOption(
        "kubernetes-enable-pod-labels",
        (),
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        DcgmKind.BOOL,
        why="the pods' own Kubernetes labels are not read (that needs the API server); -k still adds pod, "
        "namespace and container",
        harmless=_FALSE,
    ),
    DcgmOption(
        "kubernetes-enable-pod-uid",
        (),
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        DcgmKind.BOOL,
        why="no pod uid label: the kubelet's PodResources API, the one source read, does not give it",
        harmless=_FALSE,
    ),
    DcgmOption(
        "kubernetes-gpu-id-type",
        (),
        "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",
        DcgmKind.STRING,
        why="only uid and device-name are dcgm-exporter's types; both device id forms are recognised anyway",
        harmless=("uid", "device-name"),  # the attribution recognises uuids and indices alike
    ),
    DcgmOption(
        "kubernetes-pod-label-allowlist-regex",
        (),
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        DcgmKind.STRINGS,
        why="the pods' own Kubernetes labels are not served (see --kubernetes-enable-pod-labels)",
    ),
    DcgmOption(
        "devices",
        ("d",),
        "DCGM_EXPORTER_DEVICES_STR",
        DcgmKind.STRING,
        why="GPUs are not selected: every GPU is served, a MIG GPU per GPU instance, as with dcgm-exporter's 'f'",
        harmless=("f",),
    ),
    DcgmOption(
        "no-hostname",
        ("n",),
        "DCGM_EXPORTER_NO_HOSTNAME",
        DcgmKind.BOOL,
        lambda on: {"dcgm_hostname_label": not on},
    ),
    DcgmOption(
        "switch-devices",
        ("s",),
        "DCGM_EXPORTER_OTHER_DEVICES_STR",
        DcgmKind.STRING,
        why="no NVSwitch entities are served (their SXid errors come from the kernel log: docs/health.md)",
        harmless=("f",),
    ),
    DcgmOption(
        "fake-gpus",
        (),
        "DCGM_EXPORTER_USE_FAKE_GPUS",
        DcgmKind.BOOL,
        why="no effect: simulated GPUs come from --collect.backend=demo",
        harmless=_FALSE,
    ),
    DcgmOption(
        "web-config-file", (), "DCGM_EXPORTER_WEB_CONFIG_FILE", DcgmKind.STRING, lambda v: {"web_config_file": v}
    ),
    DcgmOption(
        "xid-count-window-size",
        ("x",),
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        DcgmKind.INT,
        lambda ms: {"dcgm_xid_count_window_ms": ms},  # DCGM_EXP_XID_ERRORS_COUNT's window
    ),
    DcgmOption(
        "replace-blanks-in-model-name",
        ("rbmn",),
        "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
        DcgmKind.BOOL,
        lambda on: {"dcgm_model_name_dashes": on},
    ),
    DcgmOption("debug", (), "DCGM_EXPORTER_DEBUG", DcgmKind.BOOL, _when({"log_level": "debug"})),
    DcgmOption(
        "clock-events-count-window-size",
        (),
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        DcgmKind.INT,
        lambda ms: {"dcgm_clock_events_count_window_ms": ms},  # DCGM_EXP_CLOCK_EVENTS_COUNT's window
    ),
    DcgmOption(
        "enable-dcgm-log", (), "DCGM_EXPORTER_ENABLE_DCGM_LOG", DcgmKind.BOOL, why=_NO_HOST_ENGINE, harmless=_FALSE
    ),
    DcgmOption(
        "dcgm-log-level", (), "DCGM_EXPORTER_DCGM_LOG_LEVEL", DcgmKind.STRING, why=_NO_HOST_ENGINE, harmless=("NONE",)
    ),
    DcgmOption("log-format", (), "DCGM_EXPORTER_LOG_FORMAT", DcgmKind.STRING, _log_format),
    DcgmOption(
        "pod-resources-kubelet-socket",
        (),
        "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        DcgmKind.STRING,
        lambda v: {"kubernetes_pod_resources_socket": v},
    ),
    DcgmOption(
        "hpc-job-mapping-dir",
        (),
        "DCGM_HPC_JOB_MAPPING_DIR",
        DcgmKind.STRING,
        why="HPC job attribution is not implemented",
        harmless=("",),
    ),
    DcgmOption("nvidia-resource-names", (), "NVIDIA_RESOURCE_NAMES", DcgmKind.STRINGS, _resource_names),
    DcgmOption(
        "kubernetes-virtual-gpus",
        (),
        "KUBERNETES_VIRTUAL_GPUS",
        DcgmKind.BOOL,
        # Per-pod series of a shared GPU, each with the pod's own share (docs/dcgm.md, "Per-pod shares").
        _when({"compute_apps": True, "process_usage": True, "kubernetes_process_pods": True}),
    ),
    DcgmOption(
        "dump-enabled",
        (),
        "DCGM_EXPORTER_DUMP_ENABLED",
        DcgmKind.BOOL,
        why="debug dumps are not written",
        harmless=_FALSE,
    ),
    DcgmOption(
        "dump-directory", (), "DCGM_EXPORTER_DUMP_DIRECTORY", DcgmKind.STRING, why="debug dumps are not written"
    ),
    DcgmOption("dump-retention", (), "DCGM_EXPORTER_DUMP_RETENTION", DcgmKind.INT, why="debug dumps are not written"),
    DcgmOption(
        "dump-compression", (), "DCGM_EXPORTER_DUMP_COMPRESSION", DcgmKind.BOOL, why="debug dumps are not written"
    ),
    DcgmOption(
        "kubernetes-enable-dra",
        (),
        "KUBERNETES_ENABLE_DRA",
        DcgmKind.BOOL,
        # A claimed GPU's series once per claiming container, with its dra_* labels (docs/dcgm.md, "DRA claims").
        lambda on: {"kubernetes_dra_claims": on},
    ),
    DcgmOption(
        "disable-startup-validate",
        (),
        "DISABLE_STARTUP_VALIDATE",
        DcgmKind.BOOL,
        why="no effect: there are no DCGM prerequisites to validate",
        harmless=_FALSE,
    ),
    DcgmOption(
        "enable-gpu-bind-unbind-watch",
        (),
        "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",
        DcgmKind.BOOL,
        why="GPU bind/unbind events are not watched",
        harmless=_FALSE,
    ),
    DcgmOption(
        "gpu-bind-unbind-poll-interval",
        (),
        "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        DcgmKind.STRING,
        why="GPU bind/unbind events are not watched",
        harmless=("1s",),
    ),
    # dcgm-exporter refuses --enable-pprof without --web-config-file (_dcgm_finished), so its profiling endpoints
    # are always behind the web config's authentication or TLS, as --web.enable-pprof's are
    DcgmOption("enable-pprof", (), "DCGM_EXPORTER_ENABLE_PPROF", DcgmKind.BOOL, _when({"enable_pprof": True})),
    DcgmOption(
        "web-systemd-socket", (), "DCGM_EXPORTER_SYSTEMD_SOCKET", DcgmKind.BOOL, lambda on: {"systemd_socket": on}
    ),
    # Since 4.8.3 (its notes: YAML configuration file, web read/write timeouts, container-runtime labels). The
    # YAML file is read by dcgm_invocation, under the environment and the flags (exposition/dcgm_config_file.py).
    DcgmOption("config-file", (), "DCGM_EXPORTER_CONFIG_FILE", DcgmKind.STRING, lambda path: {}),
    DcgmOption(
        "web-read-timeout", (), "DCGM_EXPORTER_WEB_READ_TIMEOUT", DcgmKind.DURATION, lambda ns: {"read_timeout_ns": ns}
    ),
    DcgmOption(
        "web-write-timeout",
        (),
        "DCGM_EXPORTER_WEB_WRITE_TIMEOUT",
        DcgmKind.DURATION,
        lambda ns: {"write_timeout_ns": ns},  # a scrape answers within it, as dcgm-exporter's http.Server writes
    ),
    DcgmOption(
        "container-labels",
        (),
        "DCGM_EXPORTER_CONTAINER_LABELS",
        DcgmKind.BOOL,
        why=_NO_CONTAINER_LABELS,
        harmless=_FALSE,
    ),
    DcgmOption(
        "container-runtime-socket",
        (),
        "DCGM_CONTAINER_RUNTIME_SOCKET",
        DcgmKind.STRING,
        why=_NO_CONTAINER_LABELS,
        harmless=("",),
    ),
    # Since 4.8.4 (its notes: scrape limits, --enable-exporter-metrics, field-watch retention limits)
    DcgmOption(
        "max-concurrent-scrapes",
        (),
        "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES",
        DcgmKind.INT,
        _max_concurrent_scrapes,  # overlapping admitted scrapes share one render here too
    ),
    DcgmOption(
        "enable-exporter-metrics",
        (),
        "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",
        DcgmKind.BOOL,
        lambda on: {"exporter_metrics": on},  # process_* and promhttp_*; no go_*, this is not a Go process
    ),
    DcgmOption(
        "watch-max-keep-age",
        (),
        "DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",
        DcgmKind.DURATION,
        why=_NO_WATCHES,
    ),
    DcgmOption(
        "watch-max-keep-samples",
        (),
        "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES",
        DcgmKind.INT,
        why=_NO_WATCHES,
    ),
    # The newest source's /health option (NVIDIA/dcgm-exporter#744): 503 while no GPU is seen
    DcgmOption(
        "health-require-gpus",
        (),
        "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS",
        DcgmKind.BOOL,
        lambda on: {"dcgm_health_require_gpus": on},
    ),
)
# -f is left to our own parser, where it is --dcgm.collectors' short form (-fFILE and its error messages too)
_DCGM_BY_NAME = {name: option for option in DCGM_OPTIONS for name in (option.name, *option.aliases) if name != "f"}
# urfave/cli's own flags, spelled as kingpin wants them
_DCGM_INFORMATIONAL = {"h": "--help", "help": "--help", "v": "--version", "version": "--version"}


@dataclass(frozen=True, slots=True)
class DcgmInvocation:
    """dcgm-exporter's options found in a command line and environment: ``argv`` is what is left for our own
    parser, ``base`` the config they make, ``notices`` the options accepted without effect."""

    argv: tuple[str, ...]
    base: Config
    notices: tuple[Notice, ...]


def _go_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 0, 64)``: a sign, then decimal, ``0x``, ``0o``/``0`` (octal) or ``0b``."""
    body = text.lstrip("+-")
    if len(body) > 1 and body[0] == "0" and body[1].isdigit():
        text = text[: len(text) - len(body)] + "0o" + body[1:]
    try:
        number = int(text, 0)
    except ValueError:
        return None
    return number if -(2**63) <= number < 2**63 else None


def _dcgm_value(option: DcgmOption, raw: str | None, source: str) -> Any:
    """A value as urfave/cli reads it; ``source`` is the flag as written or the environment variable."""
    from_env = not source.startswith("-")
    if option.kind is DcgmKind.BOOL:
        truth = True if raw is None else parse_bool(raw.strip() if from_env else raw)
        if truth is None:
            raise FlagError(
                f'could not parse "{raw}" as bool value from {source} for flag {option.name}'
                if from_env
                else f'invalid boolean value "{raw}" for -{source.lstrip("-")}: parse error'
            )
        return truth
    value = raw or ""
    if option.kind is DcgmKind.INT:
        number = _go_int(value.strip() if from_env else value)
        if number is None:
            raise FlagError(
                f'could not parse "{value}" as int value from {source} for flag {option.name}'
                if from_env
                else f'invalid value "{value}" for flag {source}: parse error'
            )
        return number
    if option.kind is DcgmKind.STRINGS:
        return [part.strip() for part in value.split(",") if part.strip()]
    if option.kind is DcgmKind.DURATION:
        try:
            return parse_duration(value)
        except DurationError:
            return None  # dcgm-exporter logs it and keeps its default: a notice here
    return value


def _split_dcgm(argv: Sequence[str]) -> tuple[list[str], list[tuple[DcgmOption, str | None, str]], bool]:
    """dcgm-exporter's flags (Go's syntax: ``-name``, ``--name``, ``=value`` or the next word) taken out of
    ``argv``; the rest, our own flags with their values, is left in order. The bool says whether ``-f`` (which
    our parser reads itself, ``-fFILE`` too) or ``-v`` was given: only dcgm-exporter's command line has them."""
    rest: list[str] = []
    found: list[tuple[DcgmOption, str | None, str]] = []
    short_f = False
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--":
            rest += argv[index - 1 :]
            break
        if not token.startswith("-") or token == "-":
            rest.append(token)
            continue
        name, has_value, inline = (token[2:] if token.startswith("--") else token[1:]).partition("=")
        if name in _DCGM_INFORMATIONAL and not has_value:
            short_f = short_f or name == "v"  # only dcgm-exporter has -v
            rest.append(_DCGM_INFORMATIONAL[name])
            continue
        option = _DCGM_BY_NAME.get(name)
        if option is None:
            short_f = short_f or (token.startswith("-f") and not token.startswith("--"))
            rest.append(token)
            own = _BY_NAME.get(name) if token.startswith("--") else _BY_SHORT.get(name)
            if own is not None and own.kind is not Kind.BOOL and not has_value and index < len(argv):
                rest.append(argv[index])  # its value, whatever it looks like
                index += 1
            continue
        written = token.partition("=")[0]
        if option.kind is DcgmKind.BOOL:
            found.append((option, inline if has_value else None, written))
            continue
        if not has_value:
            if index >= len(argv):
                raise FlagError(f"flag needs an argument: {written}")
            inline = argv[index]
            index += 1
        found.append((option, inline, written))
    return rest, found, short_f


def dcgm_invocation(
    argv: Sequence[str], environ: Mapping[str, str] | None, *, named: bool = False
) -> DcgmInvocation | None:
    """The dcgm-exporter options of a start, or ``None`` when it is not one: none of its flags (``-f`` counts
    only without our ``--metrics.profile``), none of its ``DCGM_*`` variables set in ``environ``, and not
    started as ``dcgm-exporter`` (``named``). Its variables
    with generic names (``NVIDIA_RESOURCE_NAMES``, ``KUBERNETES_*``, ``DISABLE_STARTUP_VALIDATE``) are read only
    then, and never make a start one. A flag beats its variable, as in urfave/cli."""
    rest, found, short_f = _split_dcgm(argv)
    env = dict(environ or {})
    # -f beside our own --metrics.profile is our short flag for --dcgm.collectors, whose start it leaves alone
    ours = any(word.startswith("--metrics.profile") for word in rest)
    triggered = named or bool(found) or (short_f and not ours)
    triggered = triggered or any(env.get(option.env) and option.env.startswith("DCGM_") for option in DCGM_OPTIONS)
    if not triggered:
        return None
    values: dict[DcgmOption, tuple[Any, str]] = {}
    for option in DCGM_OPTIONS:
        variable = env.get(option.env, "")
        if variable:
            values[option] = (_dcgm_value(option, variable, option.env), f"{option.env} in the environment")
    for option, raw, written in found:
        given = f"--{option.name}" if written.lstrip("-") == option.name else f"{written} (--{option.name})"
        values[option] = (_dcgm_value(option, raw, written), given)
    fields: dict[str, Any] = {
        "metrics_profile": Profile.DCGM,
        "listen_addresses": (DCGM_LISTEN_ADDRESS,),
        "collect_interval_ns": DCGM_COLLECT_INTERVAL_MS * _MILLISECOND_NS,
        "exporter_metrics": False,  # dcgm-exporter serves its own metrics only when asked
    }
    notices: list[Notice] = []
    config_file = values.get(_DCGM_BY_NAME["config-file"])
    if config_file is not None and config_file[0]:  # under the environment and the flags, as in dcgm-exporter
        from nvidia_gpu_exporter.exposition.dcgm_config_file import (  # noqa: PLC0415 - only with a config file
            DcgmConfigError,
            read_dcgm_config_file,
        )

        try:
            settings = read_dcgm_config_file(config_file[0])
        except DcgmConfigError as error:
            raise FlagError(f"invalid {config_file[1].removesuffix(' in the environment')}: {error}") from error
        fields.update(settings.fields)
        notices += [Notice(f"{config_file[0]}:{line} {key}", why) for key, line, why in settings.ignored]
    for option, (value, given) in values.items():
        if value is None:  # a duration dcgm-exporter cannot read either
            notices.append(Notice(given, "not a Go duration: the default is kept, as dcgm-exporter keeps its own"))
            continue
        if option.apply is not None:
            fields.update(option.apply(value))
            continue
        text = ",".join(value) if isinstance(value, list) else str(value)
        if (text.lower() if option.kind is DcgmKind.BOOL else text) not in option.harmless:
            notices.append(Notice(given, option.why))
    if fields.get("kubernetes_dra_claims") and not fields.get("kubernetes_pod_resources"):
        fields.update(kubernetes_dra_claims=False)  # dcgm-exporter reads claims in its pod mapper, which -k starts
        given = values[_DCGM_BY_NAME["kubernetes-enable-dra"]][1]
        notices.append(Notice(given, "no DRA labels without --kubernetes (-k), as in dcgm-exporter"))
    if fields.get("kubernetes_pod_resources") and importlib.util.find_spec("grpc") is None:
        fields.update(kubernetes_pod_resources=False, kubernetes_pod_labels=False, kubernetes_dra_claims=False)
        given = values[_DCGM_BY_NAME["kubernetes"]][1]
        notices.append(
            Notice(given, "no pod labels: the kubelet's PodResources API needs the 'kubernetes' extra (grpcio)")
        )
    return DcgmInvocation(tuple(rest), dataclasses.replace(Config(), **fields), tuple(notices))


def _dcgm_finished(config: Config, invocation: DcgmInvocation) -> tuple[Config, tuple[Notice, ...]]:
    """dcgm-exporter's counters file where its image keeps it: this image has none, so a path there that does
    not exist serves the built-in default set (docs/dcgm.md), said once when it was asked for by name, in the
    generation of the releases that name it; its default file is read when mounted there."""
    notices = invocation.notices
    if invocation.base.enable_pprof and config.enable_pprof and not config.web_config_file:
        raise FlagError(  # dcgm-exporter's own refusal: /debug/pprof/ must sit behind authentication or TLS
            "enable-pprof requires web-config-file so profiling endpoints are protected by exporter-toolkit auth or TLS"
        )
    if config.metrics_profile is Profile.NVIDIA_SMI:
        return config, notices
    if config.dcgm_inline_counters:
        if not config.dcgm_collectors:
            return config, notices
        config = dataclasses.replace(config, dcgm_inline_counters=())  # -f replaces a YAML file's metric source
    path = config.dcgm_collectors
    if not path and os.path.isfile(DCGM_DEFAULT_COLLECTORS):
        return dataclasses.replace(config, dcgm_collectors=DCGM_DEFAULT_COLLECTORS), notices
    if path.startswith(IMAGE_DIRECTORY) and not os.path.exists(path):
        why = (
            f"{path} is a file of dcgm-exporter's image, not in this one (nor mounted): serving the built-in "
            "DCGM field set, dcgm-exporter's default counters (docs/dcgm.md)"
        )
        absent = dataclasses.replace(config, dcgm_collectors="", dcgm_image_collectors=path)
        return absent, (*notices, Notice("--collectors", why))
    return config, notices
