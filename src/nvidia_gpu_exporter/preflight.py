"""What a start decides before the event loop exists: the arguments parsed and validated, the web config read,
and whether the process needs Python's TLS stack at all.

Nothing here imports asyncio (nor does anything it imports), so ``cli.main`` can keep ``ssl`` out of an
exporter that serves no TLS before ``asyncio``, which would import it, is first loaded
(:mod:`nvidia_gpu_exporter.support.sslgate`; issue 16). :mod:`nvidia_gpu_exporter.app` runs the rest of the
startup sequence and re-exports these names for the Windows service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.flags import Action, FlagError, Parsed, parse_args
from nvidia_gpu_exporter.httpserver.config import WebConfig, WebConfigError, load_web_config


class StartupError(Exception):
    """The exporter cannot start; the message is logged as ``failed to run``."""


def parse(arguments: Sequence[str], environ: Mapping[str, str] | None = None, *, dcgm_exporter: bool = False) -> Parsed:
    """The command line, parsed (not yet validated), with dcgm-exporter's variables of ``environ`` when given
    (``flags.parse_args``); a parse error is a :class:`StartupError`."""
    try:
        return parse_args(arguments, environ, dcgm_exporter=dcgm_exporter)
    except FlagError as error:
        raise StartupError(f"failed to parse the command line: {error}") from error


def checked(config: Config) -> Config:
    """The config if the exporter would start with it; a :class:`StartupError` naming the problem otherwise."""
    try:
        validate(config)
    except ConfigError as error:
        raise StartupError(str(error)) from error
    return config


def config_to_run(arguments: Sequence[str]) -> Config:
    """Parse and validate arguments that must run the exporter (``--help``/``--version`` are refused)."""
    parsed = parse(arguments)
    if parsed.action is not Action.RUN:
        raise StartupError(f"--help and --version cannot be baked into the service (got {parsed.action.value})")
    return checked(parsed.config)


def web_config(config: Config) -> WebConfig | None:
    """``--web.config.file`` read and checked (certificates and keys loaded), or ``None`` without one."""
    if not config.web_config_file:
        return None
    try:
        return load_web_config(config.web_config_file)
    except WebConfigError as error:
        raise StartupError(str(error)) from error


def needs_ssl(config: Config, web: WebConfig | None) -> bool:
    """Whether anything this configuration runs may import ``ssl``: serving TLS (``tls_server_config``), fleet
    mode (asyncssh and its crypto stack, kept as a precaution) and the kubelet's PodResources API (grpc, the
    same), and the API server's pod list (``--kubernetes.pod-metadata``, HTTPS); ``--kubernetes.process-pods``
    reads cgroups and pprof profiles the process: neither touches TLS. A reload cannot change the answer: TLS
    turned on in the web config applies after a restart (``httpserver/security.py``)."""
    tls = web is not None and web.tls is not None
    kubernetes = config.kubernetes_pod_resources or config.kubernetes_pod_metadata
    return tls or bool(config.fleet_targets_file) or kubernetes
