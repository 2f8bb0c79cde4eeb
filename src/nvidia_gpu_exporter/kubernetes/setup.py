"""From the ``--kubernetes.*`` flags to an :class:`~.attribution.Attributor` (or none: attribution is opt-in)."""

from __future__ import annotations

from ..backends import Backend
from ..backends.runner import SmiRunner
from ..backends.smi import SmiBackend
from ..config import Config
from ..durations import to_seconds
from .attribution import AttributionSettings, Attributor, MigLister
from .devices import parse_resource_patterns
from .podresources import GrpcPodResources, require_grpc


def settings_from(config: Config) -> AttributionSettings:
    return AttributionSettings(
        pod_resources=config.kubernetes_pod_resources,
        socket=config.kubernetes_pod_resources_socket,
        timeout_seconds=to_seconds(config.kubernetes_pod_resources_timeout_ns),
        cache_seconds=to_seconds(config.kubernetes_pod_resources_cache_ns),
        resource_patterns=parse_resource_patterns(config.kubernetes_resource_names),
        process_pods=config.kubernetes_process_pods,
        proc_root=config.kubernetes_proc_root,
    )


def _mig_lister(runner: SmiRunner) -> MigLister:
    """``nvidia-smi -L`` through the exec backend's own command (``ssh host nvidia-smi`` included)."""

    async def list_gpus() -> str:
        result = await runner.run(["-L"])
        if not result.ok:
            raise RuntimeError(result.describe_failure())
        return result.stdout

    return list_gpus


def build_attributor(config: Config, backend: Backend) -> Attributor | None:
    """The attributor the flags ask for; raises :class:`~.podresources.MissingExtra` without grpcio."""
    settings = settings_from(config)
    if not settings.pod_resources and not settings.process_pods:
        return None
    source = None
    if settings.pod_resources:
        require_grpc()
        source = GrpcPodResources(settings.socket)
    # NVML and the demo report MIG devices with their readings; only exec needs nvidia-smi -L for them.
    lister = _mig_lister(backend.runner) if isinstance(backend, SmiBackend) else None
    return Attributor(settings, backend.fields, source=source, mig_lister=lister)
