"""``DCGM_EXP_P2P_STATUS`` under the DCGM profiles (docs/dcgm.md): NVML's NVLink peer-to-peer status of every ordered
GPU pair, in dcgm-exporter's shape.

dcgm-exporter's ``p2p-status`` collector (``internal/pkg/collector/p2p_status_collector.go``, NVIDIA/dcgm-exporter
commit d5e5f51) serves, when its counters file lists the family, one series per GPU and every other GPU: the GPU's
labels, then ``link_status`` (the status's name) and ``peer_gpu`` (the other GPU's index), in that order as its
template writes a label map in key order; the value is the status code. It reads DCGM's ``dcgmGetNvLinkP2PStatus``,
which asks NVML's ``nvmlDeviceGetP2PStatus`` with ``NVML_P2P_CAPS_INDEX_NVLINK`` for each pair and fails whole
when one call fails (``DcgmCacheManager::CreateNvlinkP2PStatus``): then there is no series, as here.
"""

from __future__ import annotations

from collections.abc import Mapping

from nvidia_gpu_exporter.exposition.text import header
from nvidia_gpu_exporter.model.snapshot import P2PStatus
from nvidia_gpu_exporter.model.uuids import normalize_uuid

NAME = "DCGM_EXP_P2P_STATUS"
# p2pStatusToString: nvmlGpuP2PStatus_t (DCGM's dcgmNvLinkGpuP2PStatus_t mirrors it) -> link_status
LINK_STATUSES = (
    "OK",
    "ChipsetNotSupported",
    "GPUNotSupported",
    "TopologyNotSupported",
    "DisabledByRegKey",
    "NotSupported",
    "Unknown",
)
UNKNOWN = "Unknown"
NEEDS_NVML = (
    "needs NVML's P2P status (nvmlDeviceGetP2PStatus): the nvml or demo backend, or the exec backend with "
    "libnvidia-ml loaded"
)


def link_status(status: int) -> str:
    """dcgm-exporter's ``link_status`` of a status code; any code outside its table is ``Unknown``, as there."""
    return LINK_STATUSES[status] if 0 <= status < len(LINK_STATUSES) else UNKNOWN


def p2p_status_text(metric_type: str, help_text: str, p2p: P2PStatus, gpus: Mapping[str, tuple[str, str]]) -> str:
    """The family for the GPUs the collection read (``gpus``: normalized uuid -> (index, label text)), each to every
    other in NVML's order; a GPU NVML listed that the collection did not read is left out, as a peer too."""
    known = [(position, gpus.get(normalize_uuid(uuid))) for position, uuid in enumerate(p2p.uuids)]
    lines: list[str] = []
    for position, gpu in known:
        if gpu is None:
            continue
        for peer_position, peer in known:
            if peer is None or peer_position == position:
                continue
            status = p2p.statuses[position][peer_position]
            lines.append(f'{NAME}{{{gpu[1]},link_status="{link_status(status)}",peer_gpu="{peer[0]}"}} {status}\n')
    return header(NAME, help_text, metric_type) + "".join(lines) if lines else ""
