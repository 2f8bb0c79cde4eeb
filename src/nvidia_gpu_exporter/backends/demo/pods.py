"""The demo's Kubernetes node: the kubelet's PodResources answer and the pods of the simulated processes' cgroups,
so per-pod shares, GPU-seconds and the cost dashboard have data with the demo alone (docs/demo.md, "Pods").

The built-in fleet's GPUs share out as a cluster's often do: a training GPU time-sliced between the training pod,
a profiler pod and a notebook that holds a replica but runs nothing; an inference GPU shared through MPS by the
Triton server's pod and a batch pod whose jobs come and go; an idle GPU held whole by a notebook. Pods are placed
by the simulated pids (``4242 + 1000 * index`` and the offsets the fleet gives its processes), so they follow
the processes without reading the simulation's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.backends.demo.model import WORKLOADS, demo_uuid
from nvidia_gpu_exporter.model.kubernetes import PodDevice
from nvidia_gpu_exporter.support.sha256 import sha256

SOCKET = "demo://kubelet"
RESOURCE = "nvidia.com/gpu"
BASE_PID = 4242
PIDS_PER_GPU = 1000
BATCH_OFFSET = 100  # the inference GPUs' short batch jobs (model.py)


@dataclass(frozen=True, slots=True)
class DemoPod:
    namespace: str
    pod: str
    container: str
    offsets: tuple[int, ...]  # the pids (less the GPU's base pid) of its processes; () runs none
    batch: bool = False  # also every pid from BATCH_OFFSET on


# Per workload: the pods holding a replica each (whole when alone), in replica order.
LAYOUT: dict[str, tuple[DemoPod, ...]] = {
    "training": (
        DemoPod("ml-training", "llm-finetune", "trainer", (0,)),
        DemoPod("ml-training", "profiler", "dcgmproftester", (7,)),
        DemoPod("research", "notebook-ada", "jupyter", ()),
    ),
    "inference": (
        DemoPod("serving", "triton", "tritonserver", (0,)),
        DemoPod("serving", "batch-infer", "worker", (), batch=True),
    ),
    "idle": (DemoPod("research", "notebook-bob", "jupyter", ()),),
}


def pod_uid(namespace: str, pod: str) -> str:
    """A stable, version-4-shaped uid per pod, as the API server gives one."""
    text = sha256(f"nvidia_gpu_exporter/demo/pod/{namespace}/{pod}".encode()).hexdigest()
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-8{text[17:20]}-{text[20:32]}"


def container_id(namespace: str, pod: str, container: str) -> str:
    return sha256(f"nvidia_gpu_exporter/demo/container/{namespace}/{pod}/{container}".encode()).hexdigest()


class DemoKubelet:
    """The simulated node's pods for ``workloads`` (each GPU's, by index), as PodResources and cgroups say."""

    socket = SOCKET

    def __init__(self, workloads: Sequence[str]) -> None:
        self.workloads = tuple(workloads)

    @classmethod
    def for_gpus(cls, count: int) -> DemoKubelet:
        """The built-in fleet's GPUs cycle training, inference, idle (model.py)."""
        return cls([WORKLOADS[index % len(WORKLOADS)] for index in range(count)])

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]:
        devices: list[PodDevice] = []
        for index, workload in enumerate(self.workloads):
            pods = LAYOUT.get(workload, ())
            uuid = demo_uuid(index)
            for replica, pod in enumerate(pods):
                device = uuid if len(pods) == 1 else f"{uuid}::{replica}"
                devices.append(PodDevice(pod.namespace, pod.pod, pod.container, RESOURCE, device))
        return tuple(devices)

    def process_pod(self, pid: str) -> tuple[str, str] | None:
        """(pod uid, container id) of a simulated process, from its pid; None for a process in no pod."""
        if not pid.isdigit() or int(pid) < BASE_PID:
            return None
        index, offset = divmod(int(pid) - BASE_PID, PIDS_PER_GPU)
        if index >= len(self.workloads):
            return None
        for pod in LAYOUT.get(self.workloads[index], ()):
            if offset in pod.offsets or (pod.batch and offset >= BATCH_OFFSET):
                return pod_uid(pod.namespace, pod.pod), container_id(pod.namespace, pod.pod, pod.container)
        return None
