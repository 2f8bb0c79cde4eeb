"""Fakes for the Kubernetes attribution and doctor tests: a kubelet PodResources gRPC server on a unix
socket, dead and silent sockets, fake ``/proc`` trees, fake node roots, and a fake API server on loopback.

grpc is imported only by :class:`FakeKubelet`, so the cgroup, doctor and API tests run without the
``kubernetes`` extra; the gRPC tests call :func:`require_grpc` first and skip with a clear message.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

# The fixture capture's GPUs (tests/fixtures/captures/fixture-linux-2gpu-mig.txt): GPU 0 has MIG enabled
# with two MIG devices, GPU 1 is a whole GPU; state "load" lists three processes on GPU 0.
GPU0 = "GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
GPU1 = "GPU-8d42e1b5-0c9f-4a73-b2e6-5f17c3d9a804"
MIG0 = "MIG-6a0e3b7c-52d1-4f9e-8a43-0c7d91e2b5f6"
MIG1 = "MIG-b1c92f04-3e6a-4d58-97f2-6e0a1d8c4b39"
LOAD_PIDS = ("41872", "41903", "41950")

GRPC_MISSING = "grpcio/protobuf (the 'kubernetes' extra) are not installed: pip install -e '.[kubernetes]'"

# (namespace, pod, container, resource, device ids)
Allocation = tuple[str, str, str, str, Sequence[str]]
# A ResourceClaim device (DRA): (namespace, pod, container, claim namespace, claim name, driver, pool, device name)
Claim = tuple[str, str, str, str, str, str, str, str]


def require_grpc() -> None:
    """Skip the calling test module when the optional extra is missing (the README's default test run)."""
    pytest.importorskip("grpc", reason=GRPC_MISSING)
    pytest.importorskip("google.protobuf", reason=GRPC_MISSING)


@contextmanager
def short_socket_dir() -> Iterator[Path]:
    """A directory under /tmp: unix socket paths must stay under 108 bytes, pytest's tmp_path may not."""
    directory = Path(tempfile.mkdtemp(prefix="k8s-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def response(allocations: Sequence[Allocation], claims: Sequence[Claim] = ()) -> Any:
    """A ``ListPodResourcesResponse`` grouping the allocations (then the claims' devices) by pod and container."""
    from nvidia_gpu_exporter.kubernetes.proto import podresources_pb2 as pb2

    pods: dict[tuple[str, str], dict[str, tuple[list[Any], list[Any]]]] = {}
    for namespace, pod, container, resource, ids in allocations:
        devices, _ = pods.setdefault((namespace, pod), {}).setdefault(container, ([], []))
        devices.append(pb2.ContainerDevices(resource_name=resource, device_ids=list(ids)))
    for namespace, pod, container, claim_namespace, claim_name, driver, pool, device in claims:
        _, dynamic = pods.setdefault((namespace, pod), {}).setdefault(container, ([], []))
        found = pb2.ClaimResource(
            driver_name=driver, pool_name=pool, device_name=device, cdi_devices=[pb2.CDIDevice(name=f"k8s.{driver}/x")]
        )
        dynamic.append(
            pb2.DynamicResource(claim_name=claim_name, claim_namespace=claim_namespace, claim_resources=[found])
        )
    return pb2.ListPodResourcesResponse(
        pod_resources=[
            pb2.PodResources(
                name=pod,
                namespace=namespace,
                containers=[
                    pb2.ContainerResources(name=name, devices=devices, dynamic_resources=dynamic)
                    for name, (devices, dynamic) in containers.items()
                ],
            )
            for (namespace, pod), containers in pods.items()
        ]
    )


@dataclass
class FakeKubelet:
    """The kubelet's ``v1.PodResourcesLister`` on a unix socket; the answer, a delay or an error can change
    between calls. ``calls`` counts the List calls answered (or started, for a delayed one)."""

    path: Path
    allocations: list[Allocation] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    delay_seconds: float = 0.0
    calls: int = 0
    _server: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> FakeKubelet:
        import grpc

        from nvidia_gpu_exporter.kubernetes.proto import podresources_pb2_grpc as pb2_grpc

        kubelet = self

        class Servicer(pb2_grpc.PodResourcesListerServicer):
            def List(self, request: Any, context: Any) -> Any:
                with kubelet._lock:
                    kubelet.calls += 1
                    delay, allocations, claims = kubelet.delay_seconds, list(kubelet.allocations), list(kubelet.claims)
                if delay:
                    time.sleep(delay)
                return response(allocations, claims)

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb2_grpc.add_PodResourcesListerServicer_to_server(Servicer(), self._server)  # type: ignore[no-untyped-call]
        self._server.add_insecure_port(f"unix://{self.path}")
        self._server.start()
        return self

    def set(self, allocations: Sequence[Allocation], delay_seconds: float = 0.0) -> None:
        with self._lock:
            self.allocations = list(allocations)
            self.delay_seconds = delay_seconds

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None


def dead_socket(path: Path) -> None:
    """A socket file nobody listens on any more (the kubelet died): connecting is refused."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


@contextmanager
def silent_socket(path: Path) -> Iterator[None]:
    """A socket that accepts connections into its backlog and never says a word (a hung kubelet)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(16)
    try:
        yield
    finally:
        sock.close()


# -- /proc ------------------------------------------------------------------------------------------------

UID = "0d2b1a3c-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
UID_ = UID.replace("-", "_")
CID = "8b1c5e0f2a7d4c3b9e6f1a0d2c5b8e7f4a3d6c9b0e1f2a5d8c7b4e3f6a9d0c1b"
CID2 = "1f2e3d4c5b6a79880716253443526170f1e2d3c4b5a69788796a5b4c3d2e1f00"

# One /proc/<pid>/cgroup file per layout the parser must read: (id, text, pod uid, container id, runtime).
CGROUP_LAYOUTS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "v1-cgroupfs-containerd",
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n",
        UID,
        CID,
        "",
    ),
    (
        "v1-systemd-containerd",
        "12:pids:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
        "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n0::/\n",
        UID,
        CID,
        "containerd",
    ),
    (
        "v1-cgroupfs-crio",
        f"9:memory:/kubepods/besteffort/pod{UID}/crio-{CID}\n",
        UID,
        CID,
        "cri-o",
    ),
    (
        "v2-systemd-containerd-guaranteed",
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        UID,
        CID,
        "containerd",
    ),
    (
        "v2-systemd-crio",
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope\n",
        UID,
        CID,
        "cri-o",
    ),
    (
        "v2-cgroupfs-containerd",
        f"0::/kubepods/besteffort/pod{UID}/{CID}\n",
        UID,
        CID,
        "",
    ),
    (
        "v2-containerd-systemd-colon-form",
        f"0::/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}\n",
        UID,
        CID,
        "containerd",
    ),
    (
        "v2-private-cgroup-namespace",
        f"0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        UID,
        CID,
        "containerd",
    ),
    (
        "v1-systemd-docker",
        f"4:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n",
        UID,
        CID,
        "docker",
    ),
    (
        "v2-systemd-crio-conmon",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/crio-conmon-{CID}.scope\n",
        UID,
        "",
        "",
    ),
    (
        "v2-static-pod-hash-uid",
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod3c1b0e2f9a8d7c6b5a4f3e2d1c0b9a8f.slice/cri-containerd-{CID2}.scope\n",
        "3c1b0e2f9a8d7c6b5a4f3e2d1c0b9a8f",
        CID2,
        "containerd",
    ),
)
HOST_INIT = "0::/init.scope\n"
HOST_SERVICE = "0::/system.slice/sshd.service\n"


def make_proc(root: Path, cgroups: Mapping[str, str], init: str = HOST_INIT) -> Path:
    """A fake ``/proc`` with ``1/cgroup`` (the node's init unless told) and ``<pid>/cgroup`` per entry."""
    proc = root / "proc"
    for pid, text in {"1": init, **cgroups}.items():
        (proc / pid).mkdir(parents=True, exist_ok=True)
        (proc / pid / "cgroup").write_text(text, encoding="utf-8")
    return proc


def write_stat(proc: Path, pid: str, start: int, comm: str = "python3") -> None:
    """``<pid>/stat`` as the kernel writes it (proc(5)): ``start`` is field 22, the start time in clock ticks."""
    fields = ["S", "1", pid, pid, "0", "-1", "4194560", *["0"] * 12, str(start), *["0"] * 30]
    (proc / pid / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n", encoding="utf-8")


# -- fake node roots (the doctor) -------------------------------------------------------------------------

DRIVER_VERSION_FILE = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
CONTAINERD_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""
CONTAINERD_PLAIN = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""


def make_node(root: Path, *, driver: bool = True, devices: Sequence[str] = (), containerd: str | None = None) -> Path:
    """A fake node filesystem for ``doctor --root``: driver version file, /dev entries, containerd config."""
    root.mkdir(parents=True, exist_ok=True)
    if driver:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(DRIVER_VERSION_FILE, encoding="utf-8")
    if devices:
        (root / "dev").mkdir()
        for name in devices:
            (root / "dev" / name).write_bytes(b"")
    if containerd is not None:
        (root / "etc/containerd").mkdir(parents=True)
        (root / "etc/containerd/config.toml").write_text(containerd, encoding="utf-8")
    return root


# -- fake Kubernetes API server ---------------------------------------------------------------------------


@dataclass
class FakeApiServer:
    """An HTTPS API server on 127.0.0.1 that answers GETs from ``routes`` (path → (status, JSON body)) and
    requires ``Authorization: Bearer <token>``; ``requests`` records (path, query) of each GET. ``handler``, when
    set, answers first, for GET, POST and DELETE: (method, path, JSON body or None) → (status, body), or None to
    fall back to ``routes``; ``calls`` records (method, path) of every request."""

    token: str
    routes: dict[str, tuple[int, Any]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    handler: Callable[[str, str, Any], tuple[int, Any] | None] | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    ca_pem: bytes = b""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> FakeApiServer:
        import trustme

        ca = trustme.CA()
        self.ca_pem = ca.cert_pem.bytes()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def do_DELETE(self) -> None:
                self._answer("DELETE")

            def _answer(self, method: str) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                sent = json.loads(self.rfile.read(length)) if length else None
                fake.calls.append((method, parts.path))
                if method == "GET":
                    fake.requests.append((parts.path, parse_qs(parts.query)))
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    self._reply(401, {"kind": "Status", "message": "Unauthorized"})
                    return
                answer = fake.handler(method, parts.path, sent) if fake.handler is not None else None
                if answer is None:
                    answer = fake.routes.get(parts.path, (404, {"kind": "Status", "message": "not found"}))
                self._reply(*answer)

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{server.server_address[1]}"
        return self

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server: CA as a file beside it (relative path), bearer token."""
        (path.parent / "ca.crt").write_bytes(self.ca_pem)
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n    certificate-authority: ca.crt\n"
            f"users:\n- name: doctor\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: doctor\n",
            encoding="utf-8",
        )
        return path

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def node_object(name: str, allocatable: Mapping[str, str], taints: Sequence[Mapping[str, str]] = ()) -> Any:
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": dict(allocatable)},
    }


def pod_object(namespace: str, name: str, image: str, *, ready: bool = True, phase: str = "Running") -> Any:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": {}},
        "spec": {"containers": [{"name": "main", "image": image}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "main", "ready": ready}]},
    }
