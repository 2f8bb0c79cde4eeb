"""Device ids as the NVIDIA device plugin hands them to the kubelet, and the resource names worth reading.

The forms seen in PodResources answers:

* ``GPU-<uuid>``: a whole GPU (``DEVICE_ID_STRATEGY=uuid``, the default);
* ``MIG-<uuid>``: a MIG device (``mig-strategy=mixed`` or ``single``);
* ``MIG-GPU-<uuid>/<gi>/<ci>``: a MIG device as drivers before R470 named it (parent uuid inside);
* ``<n>``: a whole GPU by index (``DEVICE_ID_STRATEGY=index``);
* any of those followed by ``::<n>``: replica ``n`` of a time-shared device (time-slicing, MPS).

``<gpu>:<mig>`` index pairs (MIG with the index strategy) cannot be placed without NVML's MIG indices,
so they are reported as not recognised, with the fix in the detail.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_REPLICA = re.compile(r"^(?P<base>.+?)::(?P<replica>[0-9]+)$")
_GPU = re.compile(rf"^GPU-{_UUID}$", re.IGNORECASE)
_MIG = re.compile(rf"^MIG-{_UUID}$", re.IGNORECASE)
_LEGACY_MIG = re.compile(rf"^MIG-(?P<gpu>GPU-{_UUID})/(?P<gi>[0-9]+)/(?P<ci>[0-9]+)$", re.IGNORECASE)
_INDEX = re.compile(r"^[0-9]+$")
_MIG_INDEX = re.compile(r"^[0-9]+:[0-9]+$")
_LOOKS_LIKE_GPU = re.compile(rf"(GPU|MIG)-{_UUID}", re.IGNORECASE)
# nvidia-smi -L: "GPU 0: NVIDIA A100 (UUID: GPU-...)" and, indented below it, "MIG 3g.40gb Device 0: (UUID: MIG-...)"
_LIST_GPU = re.compile(rf"^GPU\s+[0-9]+:.*\(UUID:\s*(?P<uuid>GPU-{_UUID})\)\s*$", re.IGNORECASE)
_LIST_MIG = re.compile(rf"^\s+MIG\s.*\(UUID:\s*(?P<uuid>MIG-{_UUID})\)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """What a recognised device id points at (uuids normalized like the ``uuid``/``mig_uuid`` labels)."""

    kind: str  # "gpu", "mig", "legacy_mig" or "index"
    gpu_uuid: str = ""  # "gpu" and "legacy_mig"
    mig_uuid: str = ""  # "mig"
    index: str = ""  # "index"
    gpu_instance: int | None = None  # "legacy_mig"
    compute_instance: int | None = None  # "legacy_mig"
    replica: str = ""


class UnrecognisedDeviceId(ValueError):
    """A device id of a matched resource in none of the known forms; the message says what to change."""


def parse_device_id(device_id: str) -> DeviceRef:
    """Classify one device id; raises :class:`UnrecognisedDeviceId` with a remedy for any other form."""
    text = device_id.strip()
    replica = ""
    match = _REPLICA.match(text)
    if match:
        text, replica = match["base"], match["replica"]
    if _GPU.match(text):
        return DeviceRef("gpu", gpu_uuid=normalize_uuid(text), replica=replica)
    if _MIG.match(text):
        return DeviceRef("mig", mig_uuid=normalize_mig_uuid(text), replica=replica)
    legacy = _LEGACY_MIG.match(text)
    if legacy:
        return DeviceRef(
            "legacy_mig",
            gpu_uuid=normalize_uuid(legacy["gpu"]),
            gpu_instance=int(legacy["gi"]),
            compute_instance=int(legacy["ci"]),
            replica=replica,
        )
    if _INDEX.match(text):
        return DeviceRef("index", index=str(int(text)), replica=replica)
    if _MIG_INDEX.match(text):
        raise UnrecognisedDeviceId(
            f"{device_id!r} is a MIG device by index: set the device plugin's DEVICE_ID_STRATEGY=uuid"
        )
    raise UnrecognisedDeviceId(
        f"{device_id!r} is not GPU-<uuid>, MIG-<uuid>, a GPU index, or one of those with ::<replica>"
    )


def looks_like_gpu(device_id: str) -> bool:
    """True when an id of an unmatched resource still names an NVIDIA GPU or MIG device."""
    return _LOOKS_LIKE_GPU.search(device_id) is not None


def parse_resource_patterns(text: str) -> tuple[str, ...]:
    """The comma-separated ``--kubernetes.resource-names`` globs, blanks dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def resource_matches(resource: str, patterns: Sequence[str]) -> bool:
    """Glob match (``*`` any run, case-sensitive as resource names are)."""
    return any(fnmatch.fnmatchcase(resource, pattern) for pattern in patterns)


def parse_list_gpus(text: str) -> dict[str, str]:
    """``nvidia-smi -L`` output → {normalized MIG uuid: normalized parent GPU uuid}."""
    parents: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        gpu = _LIST_GPU.match(line)
        if gpu:
            current = normalize_uuid(gpu["uuid"])
            continue
        mig = _LIST_MIG.match(line)
        if mig and current:
            parents[normalize_mig_uuid(mig["uuid"])] = current
    return parents
