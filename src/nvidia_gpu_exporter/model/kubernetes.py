"""The plain, immutable data attribution produces: what the kubelet said, and what it means per GPU/process.

Reason values are stable snake_case tokens: they are label values (``nvidia_smi_kubernetes_attribution_up``)
and JSON keys of ``GET /-/attribution`` that alerts and runbooks match on, so never reword them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why the kubelet's PodResources answer is missing (the ``reason`` label of attribution_up).
SOCKET_MISSING = "socket_missing"
PERMISSION_DENIED = "permission_denied"
NOT_A_SOCKET = "not_a_socket"
UNAVAILABLE = "unavailable"  # a socket file, but nothing answers on it (kubelet down or restarting)
TIMEOUT = "timeout"
RPC_ERROR = "rpc_error"

# Why a GPU or a listed device has no mapping.
NO_POD_REQUESTS_GPU = "no_pod_requests_this_gpu"
RESOURCE_NOT_MATCHED = "resource_name_not_matched"
DEVICE_ID_NOT_RECOGNISED = "device_id_not_recognised"
GPU_NOT_VISIBLE = "gpu_not_visible"  # the id names a GPU this exporter does not read
MIG_DEVICE_UNKNOWN = "mig_device_unknown"  # a MIG uuid no inventory places on a parent GPU

# Why a process has no pod.
HOSTPID_OFF = "hostpid_off"
PROCESS_NOT_VISIBLE = "process_not_visible"
NOT_IN_A_POD = "not_in_a_pod"
CGROUP_UNREADABLE = "cgroup_unreadable"
MIG_MONITOR_ENV_MISSING = "mig_monitor_env_missing"
PROCESS_QUERY_FAILED = "process_query_failed"


@dataclass(frozen=True, slots=True)
class PodDevice:
    """One device id the kubelet lists as allocated to one container, exactly as received.

    A device of a ResourceClaim (Dynamic Resource Allocation) has ``claim_name`` set, no ``resource``, and its
    driver's device name as ``device_id``.
    """

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    claim_namespace: str = ""
    claim_name: str = ""
    driver: str = ""
    pool: str = ""


@dataclass(frozen=True, slots=True)
class DraClaim:
    """A container's ResourceClaim device, and the GPU it is (``uuid`` "" when the device name places none): the
    parent GPU of a MIG device."""

    uuid: str
    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    # A MIG device's GPU instance profile and MIG uuid, where its name places it on a GPU instance read ("" else).
    mig_profile: str = ""
    mig_uuid: str = ""


@dataclass(frozen=True, slots=True)
class PodResourcesReading:
    """One answer (``ok``) or failure (``reason`` set) of the kubelet's ``List``."""

    ok: bool
    reason: str = ""
    detail: str = ""
    devices: tuple[PodDevice, ...] = ()
    fetched_at: float = 0.0  # Unix time


@dataclass(frozen=True, slots=True)
class GpuPod:
    """A container holding a whole GPU, a MIG device of it, or a time-sliced replica of either."""

    uuid: str  # parent GPU, normalized like every ``uuid`` label
    mig_uuid: str  # normalized MIG device uuid; "" for a whole GPU
    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    replica: str = ""  # the ``n`` of a ``<id>::<n>`` time-slicing replica


@dataclass(frozen=True, slots=True)
class UnmatchedDevice:
    """A listed device that maps to no GPU of this exporter, and why (``uuid`` when the id names one)."""

    device: PodDevice
    reason: str
    detail: str
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class ProcessPod:
    """The pod and container a GPU process runs in, from its cgroup (``reason`` set when unknown)."""

    uuid: str  # normalized GPU uuid of the process row
    pid: str
    pod_uid: str = ""
    container_id: str = ""
    runtime: str = ""  # containerd, cri-o, docker, or "" when the layout does not say
    reason: str = ""
    detail: str = ""


# Why the API server's pod list is missing (the ``reason`` label of the pod metadata failures counter).
API_UNREACHABLE = "unreachable"  # no connection, TLS refused, or the connection broke
API_TIMEOUT = "timeout"
API_UNAUTHORIZED = "unauthorized"  # 401: the token is not accepted
API_FORBIDDEN = "forbidden"  # 403: RBAC does not let the account list pods
API_HTTP_ERROR = "http_error"  # another HTTP status
API_TOO_LARGE = "too_large"  # the answer is longer than the exporter reads
API_INVALID_ANSWER = "invalid_answer"  # not JSON, or not a pod list
API_FAILURE_REASONS = (
    API_UNREACHABLE, API_TIMEOUT, API_UNAUTHORIZED, API_FORBIDDEN, API_HTTP_ERROR, API_TOO_LARGE, API_INVALID_ANSWER,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PodDirectory:
    """What the API server says of this node's pods: names by pod uid, container names by container id.

    ``pods`` maps a uid, and a static pod's config hash (its cgroup's "uid"), to (namespace, pod); ``containers``
    maps a runtime's container id (64 hex, without the ``containerd://`` scheme) to the container's name.
    """

    pods: dict[str, tuple[str, str]]
    containers: dict[str, str]
    read_at: float = 0.0  # monotonic seconds


@dataclass(frozen=True, slots=True)
class KubernetesAttribution:
    """What attribution adds to one published snapshot."""

    pod_resources: PodResourcesReading | None  # None: --kubernetes.pod-resources is off
    socket: str = ""
    gpu_pods: tuple[GpuPod, ...] = ()
    unmatched: tuple[UnmatchedDevice, ...] = ()
    processes: tuple[ProcessPod, ...] | None = None  # None: --kubernetes.process-pods off or no process rows
    process_reason: str = ""  # set when no process can be attributed at all (hostpid_off, ...)
    process_detail: str = ""
    claims: tuple[DraClaim, ...] | None = None  # None: --kubernetes.dra-claims off or no kubelet answer

    def pod_holders(self) -> dict[tuple[str, str], tuple[str, str, str]]:
        """(GPU uuid, MIG uuid or "") -> (pod, namespace, container) of each device exactly one container holds
        (every time-sliced replica of it included); a device several containers share has no entry."""
        holders: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        for link in self.gpu_pods:
            holders.setdefault((link.uuid, link.mig_uuid), set()).add((link.pod, link.namespace, link.container))
        return {key: next(iter(found)) for key, found in holders.items() if len(found) == 1}

    def sole_holders(self) -> dict[str, tuple[str, str, str]]:
        """GPU uuid → (container, namespace, pod) for GPUs held whole (or every replica) by exactly one container.

        A GPU shared by several containers (time-slicing) has no one holder: any one pick would be wrong,
        and one series per pod would multiply sums. Neither does a GPU split into MIG devices: its per-GPU
        series cover every slice, not the one a pod holds. ``nvidia_smi_gpu_pod_info`` lists them all.
        """
        split = {link.uuid for link in self.gpu_pods if link.mig_uuid}
        return {
            uuid: (container, namespace, pod)
            for (uuid, mig_uuid), (pod, namespace, container) in self.pod_holders().items()
            if not mig_uuid and uuid not in split
        }
