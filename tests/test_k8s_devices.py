"""Device ids as the NVIDIA device plugin reports them, resource-name globs, and nvidia-smi -L."""

from __future__ import annotations

import pytest

from harness import MIG_FIXTURE
from k8s_fakes import GPU0, GPU1, MIG0, MIG1
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS
from nvidia_gpu_exporter.kubernetes.devices import (
    DeviceRef,
    UnrecognisedDeviceId,
    looks_like_gpu,
    parse_device_id,
    parse_list_gpus,
    parse_resource_patterns,
    resource_matches,
)

G1 = GPU1.removeprefix("GPU-").lower()
M1 = MIG1.removeprefix("MIG-").lower()


@pytest.mark.parametrize(
    ("device_id", "expected"),
    [
        (GPU1, DeviceRef("gpu", gpu_uuid=G1)),
        (GPU1.upper(), DeviceRef("gpu", gpu_uuid=G1)),
        (f"{GPU1}::3", DeviceRef("gpu", gpu_uuid=G1, replica="3")),
        (MIG1, DeviceRef("mig", mig_uuid=M1)),
        (f"{MIG1}::0", DeviceRef("mig", mig_uuid=M1, replica="0")),
        (f"MIG-{GPU1}/7/0", DeviceRef("legacy_mig", gpu_uuid=G1, gpu_instance=7, compute_instance=0)),
        ("0", DeviceRef("index", index="0")),
        ("01::2", DeviceRef("index", index="1", replica="2")),
    ],
    ids=["gpu", "gpu-uppercase", "gpu-replica", "mig", "mig-replica", "legacy-mig", "index", "index-replica"],
)
def test_recognised_forms(device_id: str, expected: DeviceRef) -> None:
    assert parse_device_id(device_id) == expected


@pytest.mark.parametrize(
    ("device_id", "fragment"),
    [
        ("0:1", "DEVICE_ID_STRATEGY=uuid"),
        ("garbage", "not GPU-<uuid>"),
        ("GPU-1234", "not GPU-<uuid>"),
        (f"{GPU1}::", "not GPU-<uuid>"),
        (f"{GPU1}::x", "not GPU-<uuid>"),
        ("", "not GPU-<uuid>"),
    ],
)
def test_unrecognised_forms_say_what_to_change(device_id: str, fragment: str) -> None:
    with pytest.raises(UnrecognisedDeviceId, match=fragment.replace("<", ".").replace(">", ".")):
        parse_device_id(device_id)


def test_resource_patterns() -> None:
    patterns = parse_resource_patterns(" nvidia.com/gpu, ,nvidia.com/mig-* ")
    assert patterns == ("nvidia.com/gpu", "nvidia.com/mig-*")
    assert resource_matches("nvidia.com/mig-1g.10gb", patterns)
    assert not resource_matches("nvidia.com/gpu.shared", patterns)
    assert resource_matches("nvidia.com/gpu.shared", DEFAULT_RESOURCE_PATTERNS)
    assert not resource_matches("NVIDIA.com/gpu", DEFAULT_RESOURCE_PATTERNS)
    assert looks_like_gpu(f"{GPU1}::1")
    assert looks_like_gpu(MIG0)
    assert not looks_like_gpu("0000:3b:00.1")


def test_list_gpus_places_mig_devices_on_their_parent() -> None:
    section = load_capture(MIG_FIXTURE).find("capabilities", "list (-L)")
    assert section is not None
    text = section.body
    assert parse_list_gpus(text) == {
        MIG0.removeprefix("MIG-"): GPU0.removeprefix("GPU-"),
        M1: GPU0.removeprefix("GPU-"),
    }
    assert parse_list_gpus("No devices were found\n") == {}
