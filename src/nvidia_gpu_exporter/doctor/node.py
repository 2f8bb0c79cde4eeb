"""The node half of the checklist: driver, nvidia-smi/NVML, GPUs, GPUs on the PCI bus, CUDA, device nodes,
the kernel log's XIDs, container runtime, kubelet socket, and the exporter's own scrape.

Every file is looked up under ``--root`` (``/`` by default; ``/host`` when the host's filesystem is
mounted there; a fake node's directory in tests), so the same checks serve a shell on the node, a pod,
and CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvidia_gpu_exporter.backends.exec.command import CommandSplitError, split_command
from nvidia_gpu_exporter.backends.exec.output import CsvShapeError, parse_cuda_version, parse_gpu_csv
from nvidia_gpu_exporter.backends.exec.runner import run_once
from nvidia_gpu_exporter.config import DEFAULT_NVIDIA_SMI_COMMAND, DEFAULT_PORT
from nvidia_gpu_exporter.doctor.report import CheckResult, Status
from nvidia_gpu_exporter.health.source import KernelXidSource
from nvidia_gpu_exporter.health.sysfs import SysfsError, devices_directory, scan_in_thread
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS, DEFAULT_SOCKET
from nvidia_gpu_exporter.model.pci import smi_bus_id
from nvidia_gpu_exporter.model.pcibus import NO_DRIVER, PciFunction
from nvidia_gpu_exporter.model.snapshot import KernelLogState, XidRecord
from nvidia_gpu_exporter.model.xids import Severity, describe
from nvidia_gpu_exporter.support.extras import install_hint
from nvidia_gpu_exporter.web.routes import DEFAULT_TELEMETRY_PATH

DEFAULT_EXPORTER_URL = f"http://127.0.0.1:{DEFAULT_PORT}{DEFAULT_TELEMETRY_PATH}"

GPU_QUERY_FIELDS = ("index", "uuid", "name", "driver_version", "pci.bus_id")
CONTAINERD_CONFIGS = (
    "etc/containerd/config.toml",
    "var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "var/lib/rancher/rke2/agent/etc/containerd/config.toml",
)
CONTAINERD_DROPINS = ("etc/containerd/conf.d", "etc/containerd/config.d")
CRIO_CONFIGS = ("etc/crio/crio.conf",)
CRIO_DROPINS = ("etc/crio/crio.conf.d",)
DOCKER_CONFIG = "etc/docker/daemon.json"
CDI_DIRS = ("etc/cdi", "var/run/cdi")
_KERNEL_MODULE = re.compile(r"Kernel Module\s+([0-9][0-9.]*)")
_CONTAINERD_NVIDIA = re.compile(r"runtimes\.[\"']?nvidia[\"']?\]|nvidia-container-runtime")
_CONTAINERD_DEFAULT = re.compile(r"default_runtime_name\s*=\s*[\"']nvidia[\"']")
_CRIO_NVIDIA = re.compile(r"crio\.runtime\.runtimes\.[\"']?nvidia[\"']?\]|nvidia-container-runtime")
_CDI_KIND = re.compile(r"[\"']?kind[\"']?\s*:\s*[\"']?nvidia\.com/gpu[\"']?")
_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)")


@dataclass(frozen=True, slots=True)
class NodeOptions:
    root: Path
    nvidia_smi_command: str = DEFAULT_NVIDIA_SMI_COMMAND
    image_cuda: str = ""
    pod_resources_socket: str = DEFAULT_SOCKET
    exporter_url: str = DEFAULT_EXPORTER_URL
    timeout_seconds: float = 5.0


@dataclass(slots=True)
class GpuProbe:
    """What nvidia-smi (or, failing that, NVML) says about the GPUs."""

    source: str = ""  # "nvidia-smi", "NVML", or "" when neither answered
    smi_error: str = ""
    nvml_error: str = ""
    gpus: list[tuple[str, str, str]] = field(default_factory=list)  # (index, uuid, name)
    bus_ids: list[str] = field(default_factory=list)  # nvidia-smi's pci.bus_id of each GPU (NVML: not read)
    driver_version: str = ""
    cuda_version: str = ""


def under_root(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


# -- driver -----------------------------------------------------------------------------------------------


def check_driver(options: NodeOptions) -> CheckResult:
    path = under_root(options.root, "proc/driver/nvidia/version")
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return CheckResult(
            "driver",
            "NVIDIA kernel driver",
            Status.FAIL,
            f"{path} is missing: the NVIDIA kernel module is not loaded",
            "install the NVIDIA driver on the node and load it (modprobe nvidia), then reboot if it asks",
        )
    match = _KERNEL_MODULE.search(text)
    version = match.group(1) if match else "unknown version"
    return CheckResult("driver", "NVIDIA kernel driver", Status.PASS, f"kernel module {version} loaded")


# -- nvidia-smi / NVML ------------------------------------------------------------------------------------


def _run_smi(argv: Sequence[str], args: Sequence[str], timeout: float) -> str:
    """One nvidia-smi run through the exporter's own runner: on the timeout its whole process group is killed
    (a wrapper's children too, not only the direct child), and its output is bounded by the same cap."""
    result = run_once(argv, args, timeout)
    if not result.ok:
        raise RuntimeError(result.describe_failure())
    return result.stdout


def _probe_smi(options: NodeOptions, probe: GpuProbe) -> bool:
    try:
        argv = split_command(options.nvidia_smi_command)
        csv_text = _run_smi(
            argv, ["--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv"], options.timeout_seconds
        )
        table = parse_gpu_csv(csv_text, len(GPU_QUERY_FIELDS))
    except (CommandSplitError, RuntimeError, CsvShapeError) as error:
        probe.smi_error = f"{options.nvidia_smi_command}: {error}"
        return False
    probe.source = "nvidia-smi"
    probe.gpus = [(row[0], row[1], row[2]) for row in table.rows]
    probe.bus_ids = [smi_bus_id(row[4]) or row[4] for row in table.rows]
    probe.driver_version = table.rows[0][3] if table.rows else ""
    try:
        probe.cuda_version = parse_cuda_version(_run_smi(argv, ["--version"], options.timeout_seconds))
    except RuntimeError:
        probe.cuda_version = ""
    return True


def _probe_nvml(probe: GpuProbe) -> bool:
    try:
        import pynvml  # noqa: PLC0415 - only when nvidia-smi fails
    except ImportError as error:
        probe.nvml_error = f"NVML bindings missing: {error}"
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        probe.nvml_error = f"NVML: {error}"
        return False
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append((str(index), str(pynvml.nvmlDeviceGetUUID(handle)), str(pynvml.nvmlDeviceGetName(handle))))
        probe.gpus = gpus
        probe.driver_version = str(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        probe.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except pynvml.NVMLError as error:
        probe.nvml_error = f"NVML: {error}"
        return False
    finally:
        pynvml.nvmlShutdown()
    probe.source = "NVML"
    return True


def probe_gpus(options: NodeOptions) -> GpuProbe:
    probe = GpuProbe()
    if not _probe_smi(options, probe):
        _probe_nvml(probe)
    return probe


def check_smi(probe: GpuProbe) -> CheckResult:
    title = "nvidia-smi or NVML"
    if probe.source == "nvidia-smi":
        return CheckResult("nvidia-smi", title, Status.PASS, f"nvidia-smi answers (driver {probe.driver_version})")
    if probe.source == "NVML":
        return CheckResult(
            "nvidia-smi",
            title,
            Status.WARN,
            f"NVML answers (driver {probe.driver_version}) but nvidia-smi does not: {probe.smi_error}",
            "run the exporter with --collect.backend=nvml, or fix --nvidia-smi-command",
        )
    return CheckResult(
        "nvidia-smi",
        title,
        Status.FAIL,
        f"{probe.smi_error}; {probe.nvml_error}",
        "install the driver's utilities on the node; in a pod, use the NVIDIA runtime "
        "(runtimeClassName: nvidia) with NVIDIA_DRIVER_CAPABILITIES=utility",
    )


def check_gpus(probe: GpuProbe) -> CheckResult:
    if not probe.source:
        return CheckResult("gpus", "GPUs listed", Status.SKIP, "neither nvidia-smi nor NVML answered")
    if not probe.gpus:
        return CheckResult(
            "gpus",
            "GPUs listed",
            Status.FAIL,
            f"{probe.source} lists no GPU",
            "check NVIDIA_VISIBLE_DEVICES (all, for the exporter) and dmesg for NVRM/Xid errors",
        )
    listed = ", ".join(f"{index}: {name} ({uuid})" for index, uuid, name in probe.gpus)
    return CheckResult("gpus", "GPUs listed", Status.PASS, f"{len(probe.gpus)} GPU(s): {listed}")


# -- GPUs on the PCI bus ----------------------------------------------------------------------------------


def _bound(function: PciFunction) -> str:
    holder = "no driver" if function.driver == NO_DRIVER else f"driver {function.driver}"
    return f"{function.bus_id} ({holder})"


def _pci_remedy(hidden: Sequence[PciFunction]) -> str:
    """What to do about GPUs the driver does not report, by what holds them."""
    drivers = {function.driver for function in hidden}
    remedies = []
    held = [function.bus_id for function in hidden if function.driver not in ("nvidia", NO_DRIVER)]
    if held:
        remedies.append(
            f"lspci -k -s {held[0]} shows the driver holding it: remove the vfio-pci (or driverctl) binding and "
            "bind it to nvidia"
        )
    if NO_DRIVER in drivers:
        remedies.append(
            "lspci -k shows no driver bound: load the driver (modprobe nvidia) and read dmesg for NVRM errors "
            "(an unsupported GPU, a driver built for another kernel)"
        )
    if "nvidia" in drivers:
        remedies.append(
            "a GPU bound to nvidia that the driver does not list has usually fallen off the bus: dmesg | grep -i -e "
            "'fallen off the bus' -e 'Xid 79'; drain the node, reboot it, reseat the GPU and RMA it if it repeats"
        )
    return "; ".join(remedies)


def check_pci(options: NodeOptions, probe: GpuProbe) -> CheckResult:
    """The NVIDIA GPUs sysfs lists against the ones nvidia-smi (or NVML) sees: a lost GPU stays on the bus."""
    title = "GPUs on the PCI bus visible to the driver"
    sysfs = under_root(options.root, "sys")
    directory = devices_directory(str(sysfs))
    if not os.path.isdir(directory):
        return CheckResult(
            "pci",
            title,
            Status.SKIP,
            f"no {directory}: sysfs is not mounted under --root",
            "with --root at the host's filesystem, mount the host's /sys at <root>/sys too",
        )
    try:
        inventory = scan_in_thread(str(sysfs), options.timeout_seconds).inventory
    except SysfsError as error:
        return CheckResult("pci", title, Status.WARN, str(error), "read the node's /sys as root")
    gpus, switches = inventory.gpus, len(inventory.nvswitches)
    if not gpus:
        if probe.gpus:
            return CheckResult(
                "pci",
                title,
                Status.WARN,
                f"{directory} lists no NVIDIA GPU but {probe.source} lists {len(probe.gpus)}",
                "point --root at the node's filesystem with its /sys",
            )
        return CheckResult(
            "pci",
            title,
            Status.FAIL,
            f"{directory} lists no NVIDIA GPU (vendor 0x10de, class 0x0300 or 0x0302)",
            "check that the GPUs are seated, powered and enabled in the BIOS; lspci -nn -d 10de: lists them",
        )
    listed = f"sysfs lists {len(gpus)} NVIDIA GPU(s)"
    if not probe.source:
        return CheckResult(
            "pci",
            title,
            Status.FAIL,
            f"{listed} but neither nvidia-smi nor NVML answered: " + ", ".join(_bound(function) for function in gpus),
            _pci_remedy(gpus),
        )
    visible = set(probe.bus_ids)
    hidden = [function for function in gpus if function.bus_id not in visible] if visible else []
    if not hidden and len(probe.gpus) < len(gpus):
        hidden = [function for function in gpus if function.driver != "nvidia"] or list(gpus)
    if hidden:
        return CheckResult(
            "pci",
            title,
            Status.FAIL,
            f"{listed}, {probe.source} sees {len(probe.gpus)}"
            + (": not visible " + ", ".join(_bound(function) for function in hidden) if visible else ""),
            _pci_remedy(hidden),
        )
    if len(probe.gpus) > len(gpus):
        return CheckResult(
            "pci",
            title,
            Status.WARN,
            f"{listed} but {probe.source} sees {len(probe.gpus)}",
            "point --root at the node's filesystem with its /sys",
        )
    nvswitches = f" (and {switches} NVSwitch(es))" if switches else ""
    return CheckResult(
        "pci",
        title,
        Status.PASS,
        f"{len(gpus)} NVIDIA GPU(s) on the PCI bus, all visible to {probe.source}{nvswitches}",
    )


def _version(text: str) -> tuple[int, int] | None:
    match = _VERSION.match(text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_cuda(probe: GpuProbe, image_cuda: str) -> CheckResult:
    title = "driver's CUDA version"
    if not probe.source:
        return CheckResult("cuda", title, Status.SKIP, "neither nvidia-smi nor NVML answered")
    driver = _version(probe.cuda_version)
    if driver is None:
        return CheckResult("cuda", title, Status.WARN, "the driver reports no CUDA version", "update the NVIDIA driver")
    if not image_cuda:
        return CheckResult(
            "cuda", title, Status.PASS, f"the driver supports CUDA up to {probe.cuda_version} (--image-cuda compares)"
        )
    image = _version(image_cuda)
    if image is None:
        return CheckResult("cuda", title, Status.WARN, f"--image-cuda {image_cuda!r} is not a version like 12.4")
    if image > driver:
        return CheckResult(
            "cuda",
            title,
            Status.WARN,
            f"the image's CUDA {image_cuda} is newer than the driver supports ({probe.cuda_version}): CUDA calls fail "
            "with 'driver version is insufficient' unless the image ships the CUDA forward-compat package",
            f"upgrade the driver to one for CUDA {image[0]}.{image[1]}, or use an image built for CUDA "
            f"{probe.cuda_version} or older",
        )
    return CheckResult(
        "cuda", title, Status.PASS, f"the driver supports CUDA {probe.cuda_version}; the image needs {image_cuda}"
    )


# -- device nodes -----------------------------------------------------------------------------------------


def check_devices(options: NodeOptions) -> CheckResult:
    title = "/dev/nvidia* device nodes"
    directory = under_root(options.root, "dev")
    nodes = sorted(directory.glob("nvidia*")) if directory.is_dir() else []
    names = {node.name for node in nodes}
    gpu_nodes = sorted(name for name in names if re.fullmatch(r"nvidia[0-9]+", name))
    if not nodes:
        return CheckResult(
            "devices",
            title,
            Status.FAIL,
            f"no nvidia* device nodes in {directory}",
            "load the driver on the node; in a pod, use the NVIDIA runtime or a CDI device so they are injected",
        )
    missing = [name for name in ("nvidiactl", "nvidia-uvm") if name not in names]
    if not gpu_nodes:
        missing.append("nvidia<N>")
    unusable = [node.name for node in nodes if not node.is_dir() and not _readable(node)]  # nvidia-caps: a dir
    if missing or unusable:
        problems = []
        if missing:
            problems.append("missing: " + ", ".join(missing))
        if unusable:
            problems.append("not readable and writable: " + ", ".join(unusable))
        return CheckResult(
            "devices",
            title,
            Status.WARN,
            f"{directory}: " + "; ".join(problems),
            "nvidia-uvm appears once a CUDA program ran (or nvidia-modprobe -u -c=0); run as a user in the "
            "device nodes' group or as root",
        )
    return CheckResult(
        "devices", title, Status.PASS, f"nvidiactl, nvidia-uvm and {', '.join(gpu_nodes)} present and readable"
    )


def _readable(path: Path) -> bool:
    return os.access(path, os.R_OK | os.W_OK)


# -- kernel log -------------------------------------------------------------------------------------------

_KERNEL_LOG_REMEDIES = {
    KernelLogState.ABSENT: "in a pod, mount the host's /dev/kmsg (a hostPath of type CharDevice) or point "
    "--collect.kernel-log at a copy of the host's log",
    KernelLogState.RESTRICTED: "kernel.dmesg_restrict=1: grant the exporter CAP_SYSLOG, or set "
    "--collect.xid-source=nvml with the nvml backend",
    KernelLogState.PERMISSION_DENIED: "let the exporter read /dev/kmsg (systemd: ProtectKernelLogs=no and "
    "DeviceAllow=/dev/kmsg r in a drop-in), or set --collect.xid-source=nvml with the nvml backend",
    KernelLogState.ERROR: "read the error above; until then the exporter serves no XIDs from the kernel log",
}


def _xid_summary(records: Sequence[XidRecord]) -> tuple[Severity | None, str, str]:
    """The worst severity among the XIDs, a one-line list of them, and the action for the worst."""
    order = (Severity.CRITICAL, Severity.WARNING, Severity.APPLICATION, Severity.INFO)
    worst: Severity | None = None
    action = ""
    parts = []
    for record in records:
        entry = describe(record.xid)
        severity = entry.severity if entry is not None else Severity.WARNING  # unknown: worth a look
        name = entry.name if entry is not None else "not in the XID table"
        parts.append(f"XID {record.xid} x{record.count} on GPU {record.gpu_uuid} ({name}, {severity.value})")
        if worst is None or order.index(severity) < order.index(worst):
            worst, action = severity, entry.action if entry is not None else "look the code up in NVIDIA's catalog"
    return worst, "; ".join(parts), action


def check_kernel_log(options: NodeOptions) -> CheckResult:
    """Whether the exporter can read XIDs from the kernel log, and the XIDs it holds since boot."""
    title = "Kernel log (XIDs since boot)"
    path = under_root(options.root, "dev/kmsg")
    restrict = under_root(options.root, "proc/sys/kernel/dmesg_restrict")
    source = KernelXidSource(str(path), restrict_file=restrict, file_poll_seconds=0.05)
    if not source.readable:
        state = source.status().state
        source.stop()
        return CheckResult(
            "kernel-log",
            title,
            Status.WARN,
            f"{path} cannot be read ({state.value}): XIDs then come only from NVML events, or not at all",
            _KERNEL_LOG_REMEDIES.get(state, ""),
        )
    source.start()
    try:
        complete = source.reader.replayed.wait(options.timeout_seconds)
        records, fallen, status = source.records(), source.fallen_off(), source.status()
    finally:
        source.stop()
    if not complete:
        return CheckResult(
            "kernel-log", title, Status.WARN, f"{path}: still reading after {options.timeout_seconds:g}s", ""
        )
    worst, listed, action = _xid_summary(records)
    if fallen:
        listed += "; fallen off the bus: " + ", ".join(gpu.pci_bus_id for gpu in fallen)
    if worst is None:
        return CheckResult("kernel-log", title, Status.PASS, f"{path} readable: {status.records} records, no XID")
    status_of = {Severity.CRITICAL: Status.FAIL, Severity.WARNING: Status.WARN}
    result = status_of.get(worst, Status.PASS)
    return CheckResult("kernel-log", title, result, f"{path}: {listed}", action if result != Status.PASS else "")


# -- container runtime ------------------------------------------------------------------------------------


def _texts(root: Path, files: Sequence[str], dropins: Sequence[str]) -> list[tuple[Path, str]]:
    found = [under_root(root, name) for name in files]
    for directory in dropins:
        base = under_root(root, directory)
        if base.is_dir():
            found += sorted(path for path in base.iterdir() if path.is_file())
    texts = []
    for path in found:
        try:
            texts.append((path, path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return texts


def _docker(root: Path) -> tuple[bool, str] | None:
    path = under_root(root, DOCKER_CONFIG)
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    except ValueError:
        return False, f"Docker: {path} is not valid JSON"
    if not isinstance(document, dict):
        return False, f"Docker: {path} is not a JSON object"
    runtimes = document.get("runtimes")
    if isinstance(runtimes, dict) and "nvidia" in runtimes:
        default = " (default)" if document.get("default-runtime") == "nvidia" else ""
        return True, f"Docker: nvidia runtime{default} in {path}"
    return False, f"Docker: no nvidia runtime in {path}"


def _cdi_specs(root: Path) -> list[str]:
    specs = []
    for directory in CDI_DIRS:
        base = under_root(root, directory)
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
                continue
            try:
                if _CDI_KIND.search(path.read_text(encoding="utf-8", errors="replace")):
                    specs.append(str(path))
            except OSError:
                continue
    return specs


def check_runtime(options: NodeOptions) -> CheckResult:
    title = "container runtime configured for NVIDIA"
    root = options.root
    configured: list[str] = []
    unconfigured: list[str] = []
    for label, pattern, texts in (
        ("containerd", _CONTAINERD_NVIDIA, _texts(root, CONTAINERD_CONFIGS, CONTAINERD_DROPINS)),
        ("CRI-O", _CRIO_NVIDIA, _texts(root, CRIO_CONFIGS, CRIO_DROPINS)),
    ):
        hits = [path for path, text in texts if pattern.search(text)]
        if hits:
            default = any(_CONTAINERD_DEFAULT.search(text) for _, text in texts) and label == "containerd"
            configured.append(f"{label}: nvidia runtime{' (default)' if default else ''} in {hits[0]}")
        elif texts:
            unconfigured.append(f"{label}: no nvidia runtime in {', '.join(str(path) for path, _ in texts)}")
    docker = _docker(root)
    if docker is not None:
        (configured if docker[0] else unconfigured).append(docker[1])
    specs = _cdi_specs(root)
    if specs:
        configured.append(f"CDI: nvidia.com/gpu spec in {', '.join(specs)}")
    if configured:
        return CheckResult("runtime", title, Status.PASS, "; ".join(configured))
    if unconfigured:
        return CheckResult(
            "runtime",
            title,
            Status.FAIL,
            "; ".join(unconfigured),
            "nvidia-ctk runtime configure --runtime=containerd (or crio, docker), then restart the runtime; "
            "or generate CDI specs with nvidia-ctk cdi generate",
        )
    return CheckResult(
        "runtime",
        title,
        Status.WARN,
        f"no containerd, CRI-O or Docker configuration and no CDI spec under {root}",
        "run the doctor on the node, or with --root pointing at the host's filesystem mounted read-only",
    )


# -- kubelet PodResources ---------------------------------------------------------------------------------


def check_pod_resources(options: NodeOptions) -> CheckResult:
    from nvidia_gpu_exporter.kubernetes.devices import resource_matches  # noqa: PLC0415
    from nvidia_gpu_exporter.kubernetes.podresources import (  # noqa: PLC0415
        GrpcPodResources,
        MissingExtra,
        PodResourcesError,
        socket_problem,
    )

    title = "kubelet PodResources socket"
    path = str(under_root(options.root, options.pod_resources_socket))
    problem = socket_problem(path)
    if problem is not None:
        status = Status.WARN if problem.reason == "socket_missing" else Status.FAIL
        return CheckResult(
            "pod-resources",
            title,
            status,
            problem.detail,
            "mount /var/lib/kubelet/pod-resources read-only into the exporter (as root: the socket is root's) "
            "and start it with --kubernetes.pod-resources",
        )
    try:
        devices = asyncio.run(GrpcPodResources(path).list_devices(options.timeout_seconds))
    except MissingExtra:
        return CheckResult(
            "pod-resources",
            title,
            Status.WARN,
            f"{path} exists but grpcio is not installed, so List was not called",
            install_hint("kubernetes"),
        )
    except PodResourcesError as error:
        return CheckResult(
            "pod-resources",
            title,
            Status.FAIL,
            f"{error.reason}: {error.detail}",
            "check that the kubelet runs and that this is its socket (KubeletPodResources is GA since 1.20)",
        )
    gpu = [device for device in devices if resource_matches(device.resource, DEFAULT_RESOURCE_PATTERNS)]
    containers = {(device.namespace, device.pod, device.container) for device in gpu}
    return CheckResult(
        "pod-resources",
        title,
        Status.PASS,
        f"List answers: {len(gpu)} NVIDIA device(s) allocated to {len(containers)} container(s)",
    )


# -- the exporter's own scrape ----------------------------------------------------------------------------


def _sample(text: str, name: str) -> tuple[str, float] | None:
    """The first sample of a family: (its label block, its value)."""
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            series, _, value = line.rpartition(" ")
            try:
                return series[len(name) :], float(value)
            except ValueError:
                return None
    return None


def check_exporter(options: NodeOptions) -> CheckResult:
    title = "the exporter's scrape"
    url = options.exporter_url
    try:
        with urllib.request.urlopen(url, timeout=options.timeout_seconds) as reply:  # noqa: S310 - the user's URL
            text = reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return CheckResult(
            "exporter", title, Status.FAIL, f"{url} answers HTTP {error.code}", "read the exporter's log"
        )
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        return CheckResult(
            "exporter",
            title,
            Status.WARN,
            f"no exporter answers at {url}: {reason}",
            f"pass --exporter-url (in the exporter's pod: {DEFAULT_EXPORTER_URL})",
        )
    # the collection's own family, served under every --metrics.profile; the Go exporter's name before it existed
    success = _sample(text, "nvidia_gpu_exporter_collection_success") or _sample(
        text, "nvidia_smi_last_collect_success"
    )
    if success is None:
        return CheckResult(
            "exporter",
            title,
            Status.WARN,
            f"{url} has no nvidia_gpu_exporter_collection_success (nor nvidia_smi_last_collect_success)",
            "check --exporter-url",
        )
    if success[1] != 1:
        return CheckResult(
            "exporter",
            title,
            Status.FAIL,
            f"{url}: the exporter's most recent collection failed",
            "read its log for 'failed to collect metrics'",
        )
    gpus = sum(1 for line in text.splitlines() if line.startswith("nvidia_smi_gpu_info{")) or _dcgm_gpus(text)
    attribution = _sample(text, "nvidia_smi_kubernetes_attribution_up")
    if attribution is not None and attribution[1] != 1:
        return CheckResult(
            "exporter",
            title,
            Status.WARN,
            f"{url}: collection OK ({gpus} GPU(s)) but pod attribution is down {attribution[0]}",
            "GET /-/attribution on the exporter says why and what to change",
        )
    return CheckResult("exporter", title, Status.PASS, f"{url}: collection OK, {gpus} GPU(s)")


# Any generation's field names, and dcgm-exporter 1.x's (a counters file may list them); `uuid` under its -o.
_DCGM_UUID = re.compile(r'^(?:DCGM_FI_[A-Z0-9_]+|dcgm_[a-z0-9_]+)\{[^}]*\b(?:UUID|uuid)="([^"]*)"')


def _dcgm_gpus(text: str) -> int:
    """The GPUs a DCGM-profile scrape names (its ``UUID`` labels: a MIG GPU's instances share their GPU's)."""
    return len({match.group(1) for line in text.splitlines() if (match := _DCGM_UUID.match(line))})


def node_checks(options: NodeOptions) -> list[CheckResult]:
    probe = probe_gpus(options)
    return [
        check_driver(options),
        check_smi(probe),
        check_gpus(probe),
        check_pci(options, probe),
        check_cuda(probe, options.image_cuda),
        check_devices(options),
        check_kernel_log(options),
        check_runtime(options),
        check_pod_resources(options),
        check_exporter(options),
    ]
