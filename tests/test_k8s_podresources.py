"""The kubelet PodResources gRPC client against a fake kubelet on a unix socket: answers, pods going
away, and every way a socket can fail (missing, not a socket, not permitted, dead, slow, silent)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from k8s_fakes import GPU0, GPU1, MIG1, FakeKubelet, dead_socket, require_grpc, silent_socket
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS
from nvidia_gpu_exporter.kubernetes.podresources import (
    GrpcPodResources,
    PodResourcesError,
    socket_problem,
)
from nvidia_gpu_exporter.kubernetes.podresources import (
    require_grpc as require_extra,
)
from nvidia_gpu_exporter.model import kubernetes as model
from nvidia_gpu_exporter.model.snapshot import GpuTable, Readings
from unit_helpers import gpu_row, query_fields

require_grpc()

GUARD_SECONDS = 10.0


def list_devices(path: Path, timeout: float = 2.0) -> tuple[model.PodDevice, ...]:
    return asyncio.run(asyncio.wait_for(GrpcPodResources(str(path)).list_devices(timeout), GUARD_SECONDS))


def failure(path: Path, timeout: float = 2.0) -> PodResourcesError:
    with pytest.raises(PodResourcesError) as raised:
        list_devices(path, timeout)
    return raised.value


def test_the_extra_is_importable() -> None:
    require_extra()


def test_list_flattens_pods_containers_and_devices(kubelet: FakeKubelet) -> None:
    kubelet.set(
        [
            ("ml", "train", "trainer", "nvidia.com/gpu", [GPU0, GPU1]),
            ("ml", "train", "sidecar", "example.com/fpga", ["fpga0"]),
            ("serve", "infer", "srv", "nvidia.com/mig-1g.10gb", [MIG1]),
            ("ml", "share", "a", "nvidia.com/gpu", [GPU1 + "::3"]),
        ]
    )
    assert list_devices(kubelet.path) == (
        model.PodDevice("ml", "train", "trainer", "nvidia.com/gpu", GPU0),
        model.PodDevice("ml", "train", "trainer", "nvidia.com/gpu", GPU1),
        model.PodDevice("ml", "train", "sidecar", "example.com/fpga", "fpga0"),
        model.PodDevice("serve", "infer", "srv", "nvidia.com/mig-1g.10gb", MIG1),
        model.PodDevice("ml", "share", "a", "nvidia.com/gpu", GPU1 + "::3"),
    )


def test_a_pod_that_goes_away_is_gone_on_the_next_call(kubelet: FakeKubelet) -> None:
    kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU0]), ("ml", "b", "c", "nvidia.com/gpu", [GPU1])])
    assert {device.pod for device in list_devices(kubelet.path)} == {"a", "b"}
    kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU0])])
    assert {device.pod for device in list_devices(kubelet.path)} == {"a"}
    assert kubelet.calls == 2


def test_a_slow_kubelet_is_cut_at_the_deadline(kubelet: FakeKubelet) -> None:
    kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU0])], delay_seconds=3.0)
    error = failure(kubelet.path, timeout=0.2)
    assert error.reason == model.TIMEOUT
    assert "DEADLINE_EXCEEDED" in error.detail


def test_a_silent_socket_is_cut_at_the_deadline(sockets: Path) -> None:
    path = sockets / "silent.sock"
    with silent_socket(path):
        assert failure(path, timeout=0.2).reason == model.TIMEOUT


def test_a_dead_socket_is_unavailable(sockets: Path) -> None:
    path = sockets / "dead.sock"
    dead_socket(path)
    error = failure(path)
    assert error.reason == model.UNAVAILABLE
    assert "UNAVAILABLE" in error.detail


def test_socket_file_problems_are_classified_before_connecting(sockets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = sockets / "nope.sock"
    assert failure(missing).reason == model.SOCKET_MISSING
    regular = sockets / "file.sock"
    regular.write_text("not a socket", encoding="utf-8")
    assert failure(regular).reason == model.NOT_A_SOCKET
    dead_socket(sockets / "root-only.sock")
    # Tests run as root, which os.access never refuses: stand in for a non-root exporter.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    problem = socket_problem(str(sockets / "root-only.sock"))
    assert problem is not None
    assert problem.reason == model.PERMISSION_DENIED
    assert "root's" in problem.detail


def test_the_attributor_over_grpc_follows_the_kubelet(kubelet: FakeKubelet) -> None:
    fields = query_fields()
    current = Readings(GpuTable((gpu_row(fields, uuid=GPU0, index="0"), gpu_row(fields, uuid=GPU1, index="1"))), None)
    settings = AttributionSettings(True, str(kubelet.path), 1.0, 0.0, DEFAULT_RESOURCE_PATTERNS)
    attributor = Attributor(settings, fields, source=GrpcPodResources(str(kubelet.path)))

    async def once() -> list[str]:
        result = await attributor.attribute(await attributor.fetch(), current)
        return sorted(pod.pod for pod in result.gpu_pods)

    kubelet.set([("ml", "a", "c", "nvidia.com/gpu", [GPU0]), ("ml", "b", "c", "nvidia.com/gpu", [GPU1 + "::0"])])
    assert asyncio.run(asyncio.wait_for(once(), GUARD_SECONDS)) == ["a", "b"]
    kubelet.set([("ml", "b", "c", "nvidia.com/gpu", [GPU1 + "::0"])])
    assert asyncio.run(asyncio.wait_for(once(), GUARD_SECONDS)) == ["b"]
