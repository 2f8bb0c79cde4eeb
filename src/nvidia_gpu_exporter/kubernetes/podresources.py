"""The kubelet PodResources v1 ``List`` call over its unix socket (gRPC), classified into stable reasons.

``grpcio`` and ``protobuf`` are the optional ``kubernetes`` extra, imported only here and only when
attribution is on; :func:`require_grpc` runs at startup so a missing extra stops the exporter with a
message naming it, instead of failing on every collection.

Each call opens a fresh channel and closes it: a long-lived gRPC channel that saw the kubelet go away
backs off reconnecting for up to two minutes, while a new channel over a unix socket costs microseconds.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Protocol

from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_SOCKET
from nvidia_gpu_exporter.model.kubernetes import (
    NOT_A_SOCKET,
    PERMISSION_DENIED,
    RPC_ERROR,
    SOCKET_MISSING,
    TIMEOUT,
    UNAVAILABLE,
    PodDevice,
)
from nvidia_gpu_exporter.support.extras import install_hint

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own send limit for this API


class MissingExtra(RuntimeError):
    """grpcio/protobuf are absent or too old for the generated modules."""


class PodResourcesError(Exception):
    """A failed ``List``: a stable ``reason`` token and a human ``detail``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class PodResourcesSource(Protocol):
    """Where attribution gets the kubelet's allocations from (a gRPC client, or a fake in unit tests)."""

    @property
    def socket(self) -> str: ...

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]: ...


def _extra_hint() -> str:
    return f"{install_hint('kubernetes')} (grpcio and protobuf)"


def _import_grpc() -> tuple[Any, Any, Any]:
    """``(grpc, podresources_pb2, podresources_pb2_grpc)``, or :class:`MissingExtra`."""
    try:
        import grpc  # noqa: PLC0415 - optional extra, only for attribution

        from nvidia_gpu_exporter.kubernetes.proto import podresources_pb2, podresources_pb2_grpc  # noqa: PLC0415 - they import grpc/protobuf
    except ImportError as error:
        raise MissingExtra(
            f"--kubernetes.pod-resources needs the 'kubernetes' extra: {_extra_hint()}: {error}"
        ) from error
    except Exception as error:  # the generated code's version checks raise RuntimeError/VersionError
        raise MissingExtra(
            f"--kubernetes.pod-resources needs newer grpcio/protobuf than installed: {_extra_hint()}: {error}"
        ) from error
    return grpc, podresources_pb2, podresources_pb2_grpc


def require_grpc() -> None:
    """Fail now, at startup, when the extra is missing (raises :class:`MissingExtra`)."""
    _import_grpc()


def socket_problem(path: str) -> PodResourcesError | None:
    """Why the socket file cannot be used, from the file itself (no connection attempted)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return PodResourcesError(
            SOCKET_MISSING, f"{path} does not exist: mount the kubelet's pod-resources directory into the exporter"
        )
    except PermissionError as error:
        return PodResourcesError(PERMISSION_DENIED, f"{path}: {error.strerror}")
    except OSError as error:
        return PodResourcesError(SOCKET_MISSING, f"{path}: {error.strerror or error}")
    if not stat.S_ISSOCK(info.st_mode):
        return PodResourcesError(NOT_A_SOCKET, f"{path} is not a unix socket")
    if not os.access(path, os.R_OK | os.W_OK):
        return PodResourcesError(
            PERMISSION_DENIED,
            f"{path} is not readable and writable by uid {os.geteuid()}: the kubelet socket is root's",
        )
    return None


def flatten(response: Any) -> tuple[PodDevice, ...]:
    """Every (pod, container, resource, device id) of a ``ListPodResourcesResponse``, in answer order; then each
    container's ResourceClaim devices (driver, pool and device name), which a kubelet before 1.27 never sends."""
    devices: list[PodDevice] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for group in container.devices:
                devices.extend(
                    PodDevice(pod.namespace, pod.name, container.name, group.resource_name, device_id)
                    for device_id in group.device_ids
                )
            for claim in container.dynamic_resources:
                devices.extend(
                    PodDevice(
                        pod.namespace,
                        pod.name,
                        container.name,
                        "",
                        found.device_name,
                        claim.claim_namespace,
                        claim.claim_name,
                        found.driver_name,
                        found.pool_name,
                    )
                    for found in claim.claim_resources
                )
    return tuple(devices)


class GrpcPodResources:
    """The real source: the kubelet's ``v1.PodResourcesLister/List`` on a unix socket."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET) -> None:
        self._socket = socket_path

    @property
    def socket(self) -> str:
        return self._socket

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]:
        """One ``List`` bounded by ``timeout_seconds``; raises :class:`PodResourcesError`."""
        problem = socket_problem(self._socket)
        if problem is not None:
            raise problem
        grpc, pb2, pb2_grpc = _import_grpc()
        channel = grpc.aio.insecure_channel(
            "unix://" + os.path.abspath(self._socket),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        try:
            stub = pb2_grpc.PodResourcesListerStub(channel)
            response = await stub.List(pb2.ListPodResourcesRequest(), timeout=timeout_seconds)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            reason = {
                grpc.StatusCode.UNAVAILABLE: UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED: TIMEOUT,
                grpc.StatusCode.PERMISSION_DENIED: PERMISSION_DENIED,
            }.get(code, RPC_ERROR)
            raise PodResourcesError(reason, f"{code.name}: {error.details()}") from None
        finally:
            await channel.close()
        return flatten(response)
