"""The ``nvidia_gpu_exporter`` command: flags → config → backend → collector → HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import signal
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import __version__, logs
from .backends import Backend, BackendSetupError
from .backends.cmdsplit import CommandSplitError, split_command
from .backends.fields import FieldRequest, FieldResolutionError
from .backends.runner import SmiRunner, SubprocessRunner, UnrunnableCommand
from .backends.smi import SmiBackend
from .collector import Collector
from .config import Config, ConfigError, validate
from .durations import to_seconds
from .exposition.metrics import Exposition
from .flags import FlagError, parse_args, usage
from .web import ListenError, MetricsEndpoint, WebServer, WebSettings, bind_socket, build_app
from .webconfig import WebConfigError
from .websecurity import Security

if TYPE_CHECKING:
    from .kubernetes.attribution import Attributor

log = logging.getLogger("nvidia_gpu_exporter.main")

PROGRAM = "nvidia_gpu_exporter"


class StartupError(Exception):
    """The exporter cannot start; the message is logged as ``failed to run``."""


def version_text() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    return (
        f"{PROGRAM}, version {__version__} (branch: , revision: )\n"
        f"  build user:       \n"
        f"  build date:       \n"
        f"  python version:   {platform.python_version()}\n"
        f"  platform:         {sys.platform.replace('win32', 'windows')}/{arch}\n"
        f"  tags:             \n"
    )


def _smallest_bound(*durations_ns: int) -> float:
    """The tightest of several timeouts where 0 means "none" (we serve bodiless GETs: read = header read)."""
    bounds = [to_seconds(value) for value in durations_ns if value > 0]
    return min(bounds) if bounds else 0.0


def web_settings(config: Config) -> WebSettings:
    return WebSettings(
        listen_addresses=config.listen_addresses,
        network=config.network,
        telemetry_path=config.telemetry_path,
        max_requests=config.max_requests,
        timeout_offset_seconds=to_seconds(config.timeout_offset_ns),
        idle_timeout_seconds=to_seconds(config.idle_timeout_ns),
        header_timeout_seconds=_smallest_bound(config.read_header_timeout_ns, config.read_timeout_ns),
        write_timeout_seconds=to_seconds(config.write_timeout_ns),
        enable_pprof=config.enable_pprof,
    )


async def build_backend(config: Config) -> Backend:
    """Start the configured backend (its startup queries included)."""
    timeout = to_seconds(config.collect_timeout_ns) or None
    request = FieldRequest(config.query_field_names, config.query_field_names_exclude)
    if config.backend == "exec":
        runner: SmiRunner
        try:
            runner = SubprocessRunner(split_command(config.nvidia_smi_command))
        except CommandSplitError as error:
            # As in Go: the exporter still starts, and every run fails with exit code -1 and this reason.
            log.error("invalid --nvidia-smi-command", extra={"err": str(error)})
            runner = UnrunnableCommand(f"invalid --nvidia-smi-command: {error}")
        try:
            return await SmiBackend.start(runner, request, timeout_seconds=timeout, compute_apps=config.compute_apps)
        except FieldResolutionError as error:
            raise StartupError(f"failed to resolve query fields: {error}") from error
    if config.backend == "demo":
        from .backends.demo import start_demo_backend  # noqa: PLC0415 - only the demo needs its model

        try:
            return await start_demo_backend(config, request)
        except (BackendSetupError, FieldResolutionError) as error:
            raise StartupError(f"failed to set up the demo backend: {error}") from error
    try:
        from .backends.nvml import start_nvml_backend  # noqa: PLC0415 - imports pynvml: only for this backend
    except ImportError as error:
        raise StartupError(f"failed to set up the nvml backend: not available in this build ({error.msg})") from error
    try:
        return await start_nvml_backend(
            request, compute_apps=config.compute_apps, pcie_throughput=config.pcie_throughput
        )
    except (BackendSetupError, FieldResolutionError) as error:
        raise StartupError(f"failed to set up the nvml backend: {error}") from error


def build_attributor(config: Config, backend: Backend) -> Attributor | None:
    """Kubernetes attribution, when a ``--kubernetes.*`` flag asks for it (imported only then)."""
    if not (config.kubernetes_pod_resources or config.kubernetes_process_pods):
        return None
    from .kubernetes import setup  # noqa: PLC0415 - attribution is opt-in
    from .kubernetes.podresources import MissingExtra  # noqa: PLC0415

    try:
        return setup.build_attributor(config, backend)
    except MissingExtra as error:
        raise StartupError(str(error)) from error


def listen_sockets(config: Config) -> list[socket.socket]:
    """The listening sockets: systemd's (socket activation) or one bound per --web.listen-address."""
    if config.systemd_socket:
        from .systemd import activation_sockets  # noqa: PLC0415 - Linux only

        return list(activation_sockets())
    return [bind_socket(address, config.network) for address in config.listen_addresses]


async def serve(config: Config) -> int:
    """Run the exporter until SIGINT/SIGTERM (exit 0) or a fatal collection error (nvidia-smi's code)."""
    log.info("Starting nvidia_gpu_exporter", extra={"version": __version__, "backend": config.backend})
    try:
        security = Security.from_file(config.web_config_file)
    except WebConfigError as error:
        raise StartupError(str(error)) from error
    backend = await build_backend(config)
    try:
        attributor = build_attributor(config, backend)
    except StartupError:
        await backend.aclose()
        raise
    exposition = Exposition(
        backend.fields,
        backend.status_family,
        mig_process_labels=config.compute_apps_mig,
        kubernetes_pod_labels=config.kubernetes_pod_labels,
    )
    stop = asyncio.Event()
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
    )
    settings = web_settings(config)
    endpoint = MetricsEndpoint(collector, exposition, settings)
    try:
        sockets = listen_sockets(config)
    except (ListenError, OSError) as error:
        await backend.aclose()
        raise StartupError(str(error)) from error
    server = WebServer(build_app(endpoint, settings, security), settings, security)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    collector.start()
    try:
        await server.start(sockets)
        await stop.wait()
        log.info("Shutting down")
    finally:
        await collector.aclose()
        await server.stop()
        await backend.aclose()
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the process exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["doctor"]:  # `nvidia_gpu_exporter doctor`: the node checklist, exit 0/1/2
        from .doctor import main as doctor_main  # noqa: PLC0415 - a separate command

        return doctor_main(arguments[1:])
    if sys.platform == "win32":  # `install`/`uninstall`, and running under the Service Control Manager (§1.4)
        from . import winservice  # noqa: PLC0415 - Windows only

        handled = winservice.dispatch(arguments, process_argv=argv is None)
        if handled is not None:
            return handled
    logs.configure()
    try:
        parsed = parse_args(arguments)
    except FlagError as error:
        log.error("failed to run", extra={"err": f"failed to parse the command line: {error}"})
        return 1
    if parsed.action == "help":
        sys.stdout.write(usage(PROGRAM))
        return 0
    if parsed.action == "version":
        sys.stdout.write(version_text())
        return 0
    config = parsed.config
    logs.configure(config.log_level, config.log_format)
    try:
        validate(config)
        return asyncio.run(serve(config))
    except (ConfigError, StartupError) as error:
        log.error("failed to run", extra={"err": str(error)})
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
