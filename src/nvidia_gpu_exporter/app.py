"""The one startup sequence: arguments → validated config → backend → collector → HTTP server, until a signal.

``cli.main`` (a console) and the Windows service (``windows.service``) both start the exporter through
here, so flags are parsed, validated, logged about and served the same way whoever starts it; what is decided
before asyncio loads (parsing, validation, the web config, whether ``ssl`` may load) is in ``preflight``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvidia_gpu_exporter import __version__, logs
from nvidia_gpu_exporter._go.durations import format_duration, to_seconds
from nvidia_gpu_exporter.backends import Backend, BackendSetupError
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.command import CommandSplitError, split_command
from nvidia_gpu_exporter.backends.exec.runner import SmiRunner, SubprocessRunner, UnrunnableCommand
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError
from nvidia_gpu_exporter.config import READY_MIN_GPUS_PCI, Config, Profile, XidSource, min_gpus_count
from nvidia_gpu_exporter.config import Backend as BackendName
from nvidia_gpu_exporter.httpserver.config import WebConfig, WebConfigError
from nvidia_gpu_exporter.httpserver.security import Security
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_PROC_ROOT, DEFAULT_SOCKET
from nvidia_gpu_exporter.preflight import StartupError, checked
from nvidia_gpu_exporter.support import garbage

if TYPE_CHECKING:
    from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
    from nvidia_gpu_exporter.exposition.dcgm_counters import Counter
    from nvidia_gpu_exporter.fleet import Fleet
    from nvidia_gpu_exporter.health.source import KernelXidSource
    from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor, MigLister
    from nvidia_gpu_exporter.kubernetes.podmetadata import PodMetadata
    from nvidia_gpu_exporter.model.pcibus import PciSource
    from nvidia_gpu_exporter.web.readiness import Readiness
    from nvidia_gpu_exporter.web.settings import WebSettings

log = logging.getLogger("nvidia_gpu_exporter.main")

# What serving needs and startup's nvidia-smi runs do not: imported by the functions that use them, and all at
# once by ``serve`` while the first of those runs is under way, so that this CPU overlaps the child's run
# instead of adding to the time before the first scrape (issue 31, item 2).
SERVING_MODULES = (
    "nvidia_gpu_exporter.collector",
    "nvidia_gpu_exporter.exposition.metrics",
    "nvidia_gpu_exporter.health.source",
    "nvidia_gpu_exporter.health.sysfs",
    "nvidia_gpu_exporter.httpserver.server",
    "nvidia_gpu_exporter.web.metrics",
    "nvidia_gpu_exporter.web.readiness",
    "nvidia_gpu_exporter.web.server",
    "nvidia_gpu_exporter.web.settings",
)


# While they import, the event loop gets the interpreter back this soon when it has a child to start or read: at
# the default 5 ms the first spawn came 25-45 ms after the imports began, at this 3-13 ms (a loaded 2-core host).
IMPORTING_SWITCH_INTERVAL_SECONDS = 0.0005


def import_serving_modules() -> None:
    for name in SERVING_MODULES:
        importlib.import_module(name)


# -- config → parts -------------------------------------------------------------------------------------------


def _smallest_bound(*durations_ns: int) -> float:
    """The tightest of several timeouts where 0 means "none" (we serve bodiless GETs: read = header read)."""
    bounds = [to_seconds(value) for value in durations_ns if value > 0]
    return min(bounds) if bounds else 0.0


def web_settings(config: Config) -> WebSettings:
    from nvidia_gpu_exporter.web.settings import WebSettings  # noqa: PLC0415 - SERVING_MODULES

    return WebSettings(
        telemetry_path=config.telemetry_path,
        max_requests=config.max_requests,
        max_connections=config.max_connections,
        timeout_offset_seconds=to_seconds(config.timeout_offset_ns),
        idle_timeout_seconds=to_seconds(config.idle_timeout_ns),
        header_timeout_seconds=_smallest_bound(config.read_header_timeout_ns, config.read_timeout_ns),
        write_timeout_seconds=to_seconds(config.write_timeout_ns),
        enable_pprof=config.enable_pprof,
        openmetrics=config.enable_openmetrics,
        protobuf=config.metrics_profile is Profile.NVIDIA_SMI,
        dcgm_health=config.metrics_profile is not Profile.NVIDIA_SMI,
        dcgm_health_require_gpus=config.dcgm_health_require_gpus,
        exporter_metrics=config.exporter_metrics,
    )


def readiness(config: Config) -> Readiness | None:
    """What ``/-/ready`` waits for (``--web.ready.*``), or ``None``: always 200, as the Go exporter's."""
    if not config.ready_require_collection:
        return None
    from nvidia_gpu_exporter.web.readiness import Readiness  # noqa: PLC0415 - SERVING_MODULES

    return Readiness(
        max_staleness_seconds=to_seconds(config.ready_max_staleness_ns),
        max_staleness_text=format_duration(config.ready_max_staleness_ns),
        min_gpus=min_gpus_count(config.ready_min_gpus) or 0,
        pci_gpus=config.ready_min_gpus == READY_MIN_GPUS_PCI,
    )


@dataclass(frozen=True, slots=True)
class XidChoice:
    """Where the XIDs come from (``--collect.xid-source``): exactly one source, so nothing is counted twice."""

    kernel_log: KernelXidSource | None  # set when the kernel log is the source
    backend_xids: bool  # NVML events (or the demo's simulated ones)
    name: str  # the xid_source_info label

    def close(self) -> None:
        if self.kernel_log is not None:
            self.kernel_log.stop()


def _process_pod(config: Config) -> Callable[[int], tuple[str, str]] | None:
    """With --kubernetes.process-pods, the (pod uid, container id) of an XID's process from its cgroup."""
    if not config.kubernetes_process_pods:
        return None
    from nvidia_gpu_exporter.kubernetes.cgroups import lookup_process  # noqa: PLC0415 - attribution is opt-in

    def process_pod(pid: int) -> tuple[str, str]:
        pod = lookup_process(config.kubernetes_proc_root, str(pid)).pod
        return (pod.pod_uid, pod.container_id) if pod is not None else ("", "")

    return process_pod


DEMO_KERNEL_LOG = "demo (simulated kernel log)"


def choose_xid_source(config: Config) -> XidChoice:
    """``auto``: the kernel log when it opens (or always with exec, which has no other source; its status
    series then says why it cannot be read); NVML events otherwise; the demo simulates a kernel log."""
    from nvidia_gpu_exporter.health.source import KernelXidSource  # noqa: PLC0415 - SERVING_MODULES

    choice = config.xid_source
    if choice is XidSource.OFF:
        return XidChoice(None, backend_xids=False, name="off")
    if sys.platform == "win32" and config.backend is not BackendName.DEMO:  # no kernel log to read there
        nvml = config.backend is BackendName.NVML
        return XidChoice(None, backend_xids=nvml, name="nvml" if nvml else "off")
    if choice is XidSource.AUTO and config.backend is BackendName.DEMO:
        # The demo's simulated kernel log, handed to the same parser and ledger that read a node's.
        return XidChoice(KernelXidSource(DEMO_KERNEL_LOG, fed=True), backend_xids=False, name="demo")
    if choice is XidSource.NVML:
        return XidChoice(None, backend_xids=True, name="demo" if config.backend is BackendName.DEMO else "nvml")
    source = KernelXidSource(config.kernel_log, process_pod=_process_pod(config))
    if choice is XidSource.AUTO and config.backend is BackendName.NVML and not source.readable:
        source.stop()
        log.info("XIDs from NVML events: the kernel log cannot be read", extra={"reason": source.status().state.value})
        return XidChoice(None, backend_xids=True, name="nvml")
    source.start()
    return XidChoice(source, backend_xids=False, name="kmsg")


async def with_nvml(
    config: Config, backend: Backend, *, p2p_status: bool = False, nvlink_links: bool = False
) -> Backend:
    """The exec backend under the DCGM profile reads beside nvidia-smi what only NVML can give, when libnvidia-ml
    loads (backends/nvml/supplement.py); under the nvidia_smi profile nothing consumes those readings."""
    if config.metrics_profile is Profile.NVIDIA_SMI:
        return backend
    try:
        from nvidia_gpu_exporter.backends.nvml.supplement import supplement  # noqa: PLC0415 - imports pynvml
    except ImportError as error:
        log.warning(
            "the exec backend reads no NVML-only DCGM fields",
            extra={"reason": f"the NVML bindings are not available in this build ({error.msg})"},
        )
        return backend
    return await supplement(
        backend,
        pcie_throughput=config.pcie_throughput,
        p2p_status=p2p_status,
        mig_placements=config.kubernetes_dra_claims,
        nvlink_links=nvlink_links,
    )


def reads_nvml(config: Config, backend: Backend) -> bool:
    """Whether the readings carry NVML's extras: the nvml and demo backends', or the exec one's supplement."""
    if config.backend is not BackendName.EXEC:
        return True
    if config.metrics_profile is Profile.NVIDIA_SMI:
        return False
    try:
        from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented  # noqa: PLC0415 - imports pynvml
    except ImportError:
        return False
    return isinstance(backend, NvmlSupplemented)


async def build_backend(
    config: Config,
    *,
    watch_xids: bool = True,
    demo_kernel_log: KernelXidSource | None = None,
    p2p_status: bool = False,
    nvlink_links: bool = False,
) -> Backend:
    """Start the configured backend (its startup queries included); the demo hands its simulated kernel-log
    records to ``demo_kernel_log``; ``p2p_status``: NVML reads every GPU pair's NVLink P2P status (the counters
    file lists DCGM_EXP_P2P_STATUS); ``nvlink_links``: NVML reads each NVLink (it lists a per-link field)."""
    timeout = to_seconds(config.collect_timeout_ns) or None
    request = FieldRequest(config.query_field_names, config.query_field_names_exclude)
    if config.backend is BackendName.EXEC:
        runner: SmiRunner
        try:
            runner = SubprocessRunner(
                split_command(config.nvidia_smi_command), max_output_bytes=config.collect_max_output_bytes
            )
        except CommandSplitError as error:
            # As in Go: the exporter still starts, and every run fails with exit code -1 and this reason.
            log.error("invalid --nvidia-smi-command", extra={"err": str(error)})
            runner = UnrunnableCommand(f"invalid --nvidia-smi-command: {error}")
        try:
            if config.collect_stream_interval_ns and isinstance(runner, SubprocessRunner):
                # Imported only when streaming (docs/collection-modes.md): a per-scrape start loads none of it.
                from nvidia_gpu_exporter.backends.exec.stream import start_streaming  # noqa: PLC0415

                streaming = await start_streaming(
                    runner,
                    request,
                    interval_seconds=to_seconds(config.collect_stream_interval_ns),
                    timeout_seconds=timeout,
                    compute_apps=config.compute_apps,
                    process_usage=config.process_usage,
                )
                return await with_nvml(config, streaming, p2p_status=p2p_status, nvlink_links=nvlink_links)
            smi = await SmiBackend.start(
                runner,
                request,
                timeout_seconds=timeout,
                compute_apps=config.compute_apps,
                process_usage=config.process_usage,
            )
            return await with_nvml(config, smi, p2p_status=p2p_status, nvlink_links=nvlink_links)
        except FieldResolutionError as error:
            raise StartupError(f"failed to resolve query fields: {error}") from error
        except BackendSetupError as error:
            raise StartupError(f"failed to start the nvidia-smi stream: {error}") from error
    if config.backend is BackendName.DEMO:
        from nvidia_gpu_exporter.backends.demo.backend import DemoBackend  # noqa: PLC0415 - only the demo needs it
        from nvidia_gpu_exporter.health.reader import kernel_clock  # noqa: PLC0415 - with the kernel log's parser

        try:
            return await DemoBackend.start(
                request,
                config_path=config.demo_config,
                compute_apps=config.compute_apps,
                process_usage=config.process_usage,
                mig_process_labels=config.compute_apps_mig,
                kernel_log=demo_kernel_log.feed if demo_kernel_log is not None else None,
                kernel_clock=kernel_clock,
            )
        except (BackendSetupError, FieldResolutionError) as error:
            raise StartupError(f"failed to set up the demo backend: {error}") from error
    try:
        from nvidia_gpu_exporter.backends.nvml import open_backend  # noqa: PLC0415 - imports pynvml
    except ImportError as error:
        raise StartupError(f"failed to set up the nvml backend: not available in this build ({error.msg})") from error
    try:
        return await asyncio.to_thread(  # off the event loop: nvmlInit can block on a sick driver
            open_backend,
            request,
            compute_apps=config.compute_apps,
            process_usage=config.process_usage,
            pcie_throughput=config.pcie_throughput,
            watch_xids=watch_xids,
            gpm_whole_gpus=config.metrics_profile is not Profile.NVIDIA_SMI,  # only the DCGM profile serves it
            dcgm_readings=config.metrics_profile is not Profile.NVIDIA_SMI,  # PCIe replays, NVLink bandwidth: the same
            p2p_status=p2p_status,
            nvlink_links=nvlink_links,
            mig_placements=config.kubernetes_dra_claims,  # only the DRA claims' dra_mig_* labels use placements
        )
    except (BackendSetupError, FieldResolutionError) as error:
        raise StartupError(f"failed to set up the nvml backend: {error}") from error


def attribution_settings(config: Config) -> AttributionSettings:
    """The ``--kubernetes.*`` flags as the attributor's settings."""
    from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings  # noqa: PLC0415 - opt-in
    from nvidia_gpu_exporter.kubernetes.devices import parse_resource_patterns  # noqa: PLC0415 - opt-in

    return AttributionSettings(
        pod_resources=config.kubernetes_pod_resources,
        socket=config.kubernetes_pod_resources_socket,
        timeout_seconds=to_seconds(config.kubernetes_pod_resources_timeout_ns),
        cache_seconds=to_seconds(config.kubernetes_pod_resources_cache_ns),
        resource_patterns=parse_resource_patterns(config.kubernetes_resource_names),
        process_pods=config.kubernetes_process_pods,
        proc_root=config.kubernetes_proc_root,
        dra_claims=config.kubernetes_dra_claims,
    )


def build_pod_metadata(config: Config, environ: Mapping[str, str]) -> PodMetadata | None:
    """The API server's list of this node's pods, when ``--kubernetes.pod-metadata`` asks for it (imported only
    then); a start without a node name or credentials to list it with stops, saying which is missing."""
    if not config.kubernetes_pod_metadata:
        return None
    from nvidia_gpu_exporter.kubernetes.apiclient import (  # noqa: PLC0415 - opt-in
        SERVICE_ACCOUNT_DIR,
        ApiClient,
        ApiConfigError,
        from_kubeconfig,
        in_cluster,
    )
    from nvidia_gpu_exporter.kubernetes.podmetadata import PodLister, PodMetadata  # noqa: PLC0415 - opt-in

    node = config.kubernetes_node_name or environ.get("NODE_NAME", "")
    if not node:
        raise StartupError(
            "--kubernetes.pod-metadata lists this node's pods and needs its name: set --kubernetes.node-name or "
            "NODE_NAME (the Helm chart sets it from spec.nodeName)"
        )
    try:
        access = (
            from_kubeconfig(config.kubernetes_kubeconfig)
            if config.kubernetes_kubeconfig
            else in_cluster(SERVICE_ACCOUNT_DIR, environ)
        )
        if access is None:
            raise StartupError(
                "--kubernetes.pod-metadata found no in-cluster service account (KUBERNETES_SERVICE_HOST, "
                f"KUBERNETES_SERVICE_PORT and {SERVICE_ACCOUNT_DIR}/token): mount the service account's token "
                "(the Helm chart's kubernetes.processPods.podMetadata.enabled does) or give --kubernetes.kubeconfig"
            )
        client = ApiClient(access)
    except (ApiConfigError, OSError, ValueError) as error:
        raise StartupError(f"--kubernetes.pod-metadata: {error}") from error
    refresh = to_seconds(config.kubernetes_pod_metadata_refresh_ns)
    return PodMetadata(PodLister(client, node), refresh_seconds=refresh, where=f"{access.server} node {node}")


def _mig_lister(runner: SmiRunner) -> MigLister:
    """``nvidia-smi -L`` through the exec backend's own command (``ssh host nvidia-smi`` included)."""

    async def list_gpus() -> str:
        result = await runner.run(["-L"])
        if not result.ok:
            raise RuntimeError(result.describe_failure())
        return result.stdout

    return list_gpus


def build_attributor(config: Config, backend: Backend) -> Attributor | None:
    """Kubernetes attribution, when a ``--kubernetes.*`` flag asks for it (imported only then)."""
    if not (config.kubernetes_pod_resources or config.kubernetes_process_pods):
        return None
    from nvidia_gpu_exporter.kubernetes.attribution import Attributor  # noqa: PLC0415 - attribution is opt-in
    from nvidia_gpu_exporter.kubernetes.podresources import (  # noqa: PLC0415 - attribution is opt-in
        GrpcPodResources,
        MissingExtra,
        require_grpc,
    )

    settings = attribution_settings(config)
    # The demo simulates the node's kubelet and cgroups (docs/demo.md, "Pods"), unless the flags name real ones or
    # the kubelet's socket is there (the demo on a real node, as the chart's demo backend runs it, reads its pods).
    simulated = (
        config.backend is BackendName.DEMO
        and config.kubernetes_pod_resources_socket == DEFAULT_SOCKET
        and not os.path.exists(DEFAULT_SOCKET)
    )
    if simulated and config.kubernetes_proc_root == DEFAULT_PROC_ROOT:
        from nvidia_gpu_exporter.backends.demo.backend import DemoBackend  # noqa: PLC0415 - only the demo needs it

        if isinstance(backend, DemoBackend):
            kubelet = backend.kubelet()
            return Attributor(
                settings,
                backend.fields,
                source=kubelet if settings.pod_resources else None,
                process_pods=kubelet.process_pod,
            )
    source = None
    if settings.pod_resources:
        try:
            require_grpc()
        except MissingExtra as error:
            raise StartupError(str(error)) from error
        source = GrpcPodResources(settings.socket)
    # NVML and the demo report MIG devices with their readings; only exec needs nvidia-smi -L for them.
    smi = getattr(backend, "inner", backend)  # the exec backend's, also with NVML reads beside it
    lister = _mig_lister(smi.runner) if isinstance(smi, SmiBackend) else None
    return Attributor(settings, backend.fields, source=source, mig_lister=lister)


# A sysfs scan is bounded even when --collect.timeout=0 leaves collections unbounded: a hung read of a dying
# device must not hold every collection.
UNBOUNDED_SCAN_TIMEOUT_SECONDS = 10.0


def build_pci_source(config: Config, backend: Backend) -> PciSource | None:
    """What the PCI bus lists, for the lost-GPU families: the demo's simulated view, else sysfs (not on Windows)."""
    if config.backend is BackendName.DEMO:
        from nvidia_gpu_exporter.backends.demo.backend import DemoBackend  # noqa: PLC0415 - only the demo needs it

        return backend if isinstance(backend, DemoBackend) else None
    if sys.platform == "win32":
        return None
    from nvidia_gpu_exporter.health.sysfs import SysfsScanner  # noqa: PLC0415 - SERVING_MODULES

    timeout = to_seconds(config.collect_timeout_ns) or UNBOUNDED_SCAN_TIMEOUT_SECONDS
    return SysfsScanner(config.sysfs_path, timeout_seconds=timeout)


def dcgm_counters(config: Config) -> tuple[Counter, ...] | None:
    """The ``--dcgm.collectors`` file's records (or a dcgm-exporter YAML config file's inline fields), read before
    anything starts so a bad file costs nothing."""
    if config.dcgm_inline_counters:
        return config.dcgm_inline_counters
    if not config.dcgm_collectors:
        return None
    from nvidia_gpu_exporter.exposition.dcgm_counters import CountersError, read_counters_file  # noqa: PLC0415

    try:
        return read_counters_file(config.dcgm_collectors)
    except CountersError as error:
        raise StartupError(f"invalid --dcgm.collectors: {error}") from error


def lists_nvlink_links(counters: tuple[Counter, ...] | None) -> bool:
    """Whether the counters file asks for a per-link NVLink field (any name of one): only then does NVML read each
    link, about 90 calls per GPU."""
    if not counters:
        return False
    from nvidia_gpu_exporter.exposition.dcgm import NVLINK_LINK_NAMES  # noqa: PLC0415 - the DCGM profile's only

    return any(counter.name in NVLINK_LINK_NAMES for counter in counters)


def lists_p2p_status(counters: tuple[Counter, ...] | None) -> bool:
    """Whether the counters file asks for DCGM_EXP_P2P_STATUS: only then does NVML read every GPU pair."""
    if not counters:
        return False
    from nvidia_gpu_exporter.exposition.dcgm_p2p import NAME  # noqa: PLC0415 - the DCGM profile's only

    return any(counter.name == NAME for counter in counters)


def dcgm_exposition(
    config: Config, backend: Backend, counters: tuple[Counter, ...] | None, *, xids: bool = True
) -> DcgmExposition | None:
    """The DCGM block of --metrics.profile=dcgm or both; the nvidia_smi profile never loads its table. ``xids``:
    whether XIDs are read at all (not with --collect.xid-source=off)."""
    if config.metrics_profile is Profile.NVIDIA_SMI:
        return None
    from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition, node_hostname  # noqa: PLC0415 - profile only
    from nvidia_gpu_exporter.exposition.dcgm_generations import resolve_generation  # noqa: PLC0415 - profile only

    generation, why = resolve_generation(config.dcgm_compatibility, counters, absent=config.dcgm_image_collectors)
    log.info("serving a dcgm-exporter generation", extra={"generation": generation.value, "why": why})
    nvml = reads_nvml(config, backend)
    return DcgmExposition(
        backend.fields,
        node_hostname(os.environ) if config.dcgm_hostname_label else None,
        counters=counters,
        energy=nvml,  # NVML's energy counter; nvidia-smi has none
        gpm=nvml and config.backend is not BackendName.DEMO,  # NVML GPM samples; the demo simulates none
        extras=nvml,  # PCIe rates, replays, NVLink, violation times (nvml, the exec one's supplement; demo)
        pod_labels=config.kubernetes_pod_labels,
        dra_claims=config.kubernetes_dra_claims,
        model_name_dashes=config.dcgm_model_name_dashes,
        generation=generation,
        xids=xids,
        xid_window_ms=config.dcgm_xid_count_window_ms,
        clock_events_window_ms=config.dcgm_clock_events_count_window_ms,
        old_namespace=config.dcgm_old_namespace,
    )


def build_fleet(config: Config) -> Fleet | None:
    """Fleet mode (``--fleet.targets-file``): the targets and their SSH pool; asyncssh is imported only then."""
    if not config.fleet_targets_file:
        return None
    from nvidia_gpu_exporter.backends.fleet.targets import TargetsError, load_targets  # noqa: PLC0415 - opt-in

    try:  # before asyncssh is needed: a bad file is named as such with or without the extra
        targets = load_targets(config.fleet_targets_file)
    except TargetsError as error:
        raise StartupError(f"invalid --fleet.targets-file: {error}") from error
    try:
        from nvidia_gpu_exporter.fleet import Fleet  # noqa: PLC0415 - imports asyncssh
    except ImportError as error:
        from nvidia_gpu_exporter.support.extras import install_hint  # noqa: PLC0415 - for this refusal only

        raise StartupError(
            f"--fleet.targets-file needs the 'fleet' extra ({install_hint('fleet')}): {error.msg}"
        ) from error
    return Fleet(
        config.fleet_targets_file,
        targets,
        compute_apps=config.compute_apps,
        process_usage_limit=config.process_usage_max_processes if config.process_usage else None,
        max_output_bytes=config.collect_max_output_bytes,
        max_concurrent=config.fleet_max_concurrent,
    )


def listen_sockets(config: Config) -> list[socket.socket]:
    """The listening sockets: systemd's (socket activation) or one bound per --web.listen-address."""
    if config.systemd_socket:
        from nvidia_gpu_exporter.httpserver.systemd import activation_sockets  # noqa: PLC0415 - Linux only

        return list(activation_sockets())
    from nvidia_gpu_exporter.httpserver.server import ListenError, bind_socket  # noqa: PLC0415 - SERVING_MODULES

    sockets: list[socket.socket] = []
    for address in config.listen_addresses:
        try:
            sockets.append(bind_socket(address, config.network))
        except (ListenError, OSError) as error:
            for bound in sockets:
                bound.close()
            raise StartupError(f"failed to run: failed to listen on {address}: {error}") from error
    return sockets


# -- signals --------------------------------------------------------------------------------------------------


_SIGHUP_CHECKS: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references to tasks


def reload_on_sighup(security: Security) -> None:
    """SIGHUP: re-read the web config now, as many exporters do, rather than at the next periodic check; off the
    event loop, as the periodic check is (``Security.check``: a file that blocks its reader blocks no route)."""
    if not security.path:
        log.info("received SIGHUP: nothing to reload (no --web.config.file)")
        return
    if security.checking:
        log.info("received SIGHUP: a web config check is already running", extra={"file": security.path})
        return
    log.info("received SIGHUP: reloading the web config", extra={"file": security.path})
    task = asyncio.get_running_loop().create_task(_check_now(security), name="web-config-sighup")
    _SIGHUP_CHECKS.add(task)
    task.add_done_callback(_SIGHUP_CHECKS.discard)


async def _check_now(security: Security) -> None:
    if await security.check() is False:
        log.info("web config unchanged", extra={"file": security.path})


def dump_stacks() -> None:
    """SIGQUIT: every thread's stack, one log line each, and the asyncio tasks; the exporter keeps running.

    Go's default for SIGQUIT is a goroutine dump and an exit; here the dump is the point and the exit is not.
    """
    log.warning("received SIGQUIT: logging every thread's stack, the exporter keeps running")
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        log.warning("thread stack", extra={"thread_name": names.get(ident, str(ident)), "stack": stack})
    with contextlib.suppress(RuntimeError):  # no running loop
        tasks = sorted(f"{task.get_name()}: {task.get_coro()!r}" for task in asyncio.all_tasks())
        log.warning("asyncio tasks", extra={"count": len(tasks), "tasks": "; ".join(tasks)})


def ignore_signal(name: str) -> None:
    log.info(f"received {name}: ignored (it has no use in this exporter)")


def reload_fleet_on_sighup(fleet: Fleet | None) -> None:
    """SIGHUP in fleet mode: re-read the targets file too (a bad file keeps the previous targets)."""
    if fleet is not None:
        log.info("received SIGHUP: reloading the fleet targets", extra={"file": fleet.path})
        fleet.reload()


def install_signal_handlers(loop: asyncio.AbstractEventLoop, security: Security, fleet: Fleet | None = None) -> None:
    """Signals that would otherwise end the process at once, without a log line or killing nvidia-smi.

    Where a signal does not exist (Windows) or the loop cannot handle signals, nothing is installed.
    """

    def on_sighup() -> None:
        reload_on_sighup(security)
        reload_fleet_on_sighup(fleet)

    handlers: dict[str, Callable[[], None]] = {
        "SIGHUP": on_sighup,
        "SIGQUIT": dump_stacks,
        "SIGUSR1": lambda: ignore_signal("SIGUSR1"),
        "SIGUSR2": lambda: ignore_signal("SIGUSR2"),
    }
    for name, handler in handlers.items():
        if hasattr(signal, name):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(getattr(signal, name), handler)


# -- serving --------------------------------------------------------------------------------------------------


async def _build_backend_importing(
    config: Config,
    *,
    watch_xids: bool,
    demo_kernel_log: KernelXidSource | None,
    p2p_status: bool = False,
    nvlink_links: bool = False,
) -> Backend:
    """:func:`build_backend`, with :data:`SERVING_MODULES` imported on a thread meanwhile: the event loop mostly
    waits for startup's nvidia-smi runs, so the imports take CPU the start would otherwise leave idle."""
    importing = threading.Thread(target=_warm_serving_modules, name="import-serving-modules", daemon=True)
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(IMPORTING_SWITCH_INTERVAL_SECONDS)
    importing.start()
    try:
        return await build_backend(
            config,
            watch_xids=watch_xids,
            demo_kernel_log=demo_kernel_log,
            p2p_status=p2p_status,
            nvlink_links=nvlink_links,
        )
    finally:
        importing.join()  # done, or nearly: imports take less than a child's run
        sys.setswitchinterval(switch_interval)


async def _start_backend_and_xids(
    config: Config, *, p2p_status: bool, nvlink_links: bool = False
) -> tuple[Backend, XidChoice]:
    """The backend and the XID source. exec's startup reads nothing of the XID choice, so its first nvidia-smi run
    is spawned before the source is chosen, and the kernel log's parser loads beside that run (issue 31, item 2;
    the source replays the log since boot, so starting it later misses nothing); nvml watches its events by the
    choice, and the demo feeds its simulated kernel log to the source, so theirs is chosen first."""
    if config.backend is BackendName.EXEC:
        backend = await _build_backend_importing(
            config, watch_xids=False, demo_kernel_log=None, p2p_status=p2p_status, nvlink_links=nvlink_links
        )
        try:
            return backend, choose_xid_source(config)
        except BaseException:
            await backend.aclose()
            raise
    xids = choose_xid_source(config)
    try:
        demo_log = xids.kernel_log if xids.name == "demo" else None
        backend = await _build_backend_importing(
            config,
            watch_xids=xids.backend_xids,
            demo_kernel_log=demo_log,
            p2p_status=p2p_status,
            nvlink_links=nvlink_links,
        )
    except BaseException:
        xids.close()
        raise
    return backend, xids


def _warm_serving_modules() -> None:
    # A module that fails to import here fails again, with its error, where serve() imports it.
    with contextlib.suppress(Exception):
        import_serving_modules()


async def serve(config: Config, web_config: WebConfig | None = None) -> int:
    """Run the exporter until SIGINT/SIGTERM (exit 0) or a fatal collection error (nvidia-smi's code);
    ``web_config`` is ``--web.config.file`` already read (``preflight.web_config``), else it is read here."""
    log.info("Starting nvidia_gpu_exporter", extra={"version": __version__, "backend": config.backend.value})
    garbage.limit_arenas()  # before the first thread (the kernel-log reader, the imports) allocates
    asyncio.get_running_loop().set_exception_handler(logs.log_loop_exception)
    try:
        if web_config is not None:
            security = Security(config.web_config_file, web_config)
        else:
            security = Security.from_file(config.web_config_file)
    except WebConfigError as error:
        raise StartupError(str(error)) from error
    if config.enable_pprof and not security.authenticates and not config.enable_pprof_unauthenticated:
        raise StartupError(
            "--web.enable-pprof needs basic_auth_users or client certificates (RequireAndVerifyClientCert) in "
            "--web.config.file: the profiling endpoints show the command line and run for minutes; "
            "--web.enable-pprof-unauthenticated serves them to anyone"
        )
    counters = dcgm_counters(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    startup = asyncio.current_task()

    def on_stop() -> None:
        """SIGINT/SIGTERM: stop serving; during startup, cancel it, which kills its nvidia-smi run."""
        if collector_started or startup is None:
            stop.set()
        else:
            startup.cancel()

    collector_started = False
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, on_stop)
    fleet = build_fleet(config)
    install_signal_handlers(loop, security, fleet)  # before startup's nvidia-smi runs, as the two above
    backend, xids = await _start_backend_and_xids(
        config, p2p_status=lists_p2p_status(counters), nvlink_links=lists_nvlink_links(counters)
    )
    if xids.name == "off" and counters:
        from nvidia_gpu_exporter.exposition.dcgm_generations import oldest_name  # noqa: PLC0415 - DCGM profile only

        listed = [counter.name for counter in counters if oldest_name(counter.name) == "DCGM_FI_DEV_XID_ERRORS"]
        if listed:
            log.warning(
                f"--dcgm.collectors lists {listed[0]}, but with --collect.xid-source=off {listed[0]} is never served"
            )
    from nvidia_gpu_exporter.collector import Collector  # noqa: PLC0415 - SERVING_MODULES, loaded above
    from nvidia_gpu_exporter.exposition.metrics import Exposition  # noqa: PLC0415
    from nvidia_gpu_exporter.httpserver.server import ListenError  # noqa: PLC0415
    from nvidia_gpu_exporter.web.metrics import MetricsEndpoint  # noqa: PLC0415
    from nvidia_gpu_exporter.web.server import WebServer, build_app  # noqa: PLC0415

    try:
        attributor = build_attributor(config, backend)
        pod_metadata = build_pod_metadata(config, os.environ)
    except StartupError:
        xids.close()
        await backend.aclose()
        raise
    exposition = Exposition(
        backend.fields,
        backend.status_family,
        mig_process_labels=config.compute_apps_mig,
        kubernetes_pod_labels=config.kubernetes_pod_labels,
        nvidia_smi=config.metrics_profile is not Profile.DCGM,
        dcgm=dcgm_exposition(config, backend, counters, xids=xids.name != "off"),
    )
    exit_code = 0

    def on_fatal(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        stop.set()

    collector = Collector(
        backend,
        timeout_seconds=to_seconds(config.collect_timeout_ns),
        interval_seconds=to_seconds(config.collect_interval_ns),
        shutdown_on_error=config.shutdown_on_error,
        on_fatal=on_fatal,
        attributor=attributor,
        kernel_log=xids.kernel_log,
        backend_xids=xids.backend_xids,
        xid_source=xids.name,
        pci=build_pci_source(config, backend),
        process_usage_limit=config.process_usage_max_processes if config.process_usage else None,
        slurm_proc_root=config.kubernetes_proc_root if config.slurm_jobs else None,
        pod_metadata=pod_metadata,
    )
    settings = web_settings(config)
    endpoint = MetricsEndpoint(collector, exposition, settings)
    try:
        sockets = listen_sockets(config)
    except StartupError:
        xids.close()
        await backend.aclose()
        raise
    except (ListenError, OSError) as error:  # socket activation's
        xids.close()
        await backend.aclose()
        raise StartupError(str(error)) from error
    probe = None
    if fleet is not None:
        from nvidia_gpu_exporter.web.probe import ProbeEndpoint  # noqa: PLC0415 - fleet mode only

        probe = ProbeEndpoint(fleet, settings).handle
    endpoint.stats.web_config = security.reloads
    app = build_app(endpoint, settings, security, probe, readiness(config))
    server = WebServer(app, settings, security, endpoint.stats.connections)
    collector_started = True
    collector.start()
    collecting_garbage: asyncio.Task[None] | None = None
    try:
        await server.start(sockets)
        garbage.settle_startup()
        collecting_garbage = asyncio.create_task(
            garbage.collect_periodically(closed_connections=lambda: server.connections.released),
            name="garbage-collection",
        )
        await stop.wait()
        log.info("Shutting down")
    finally:
        if collecting_garbage is not None:
            collecting_garbage.cancel()
        await collector.aclose()
        await server.stop()
        await backend.aclose()
        if fleet is not None:
            await fleet.aclose()
        xids.close()
    return exit_code


def run(config: Config, web_config: WebConfig | None = None) -> int:
    """Validate and serve in a new event loop; a startup problem is logged as ``failed to run`` (exit 1)."""
    try:
        return asyncio.run(serve(checked(config), web_config))
    except StartupError as error:
        log.error("failed to run", extra={"err": str(error)})
        return 1
    except KeyboardInterrupt:
        return 0
    except asyncio.CancelledError:  # SIGINT/SIGTERM during startup
        log.info("Shutting down during startup")
        return 0
