"""Pod names for the pod uids of GPU processes: this node's pods as the API server lists them (opt-in).

A process's cgroup names its pod by uid and its container by the runtime's id; the kubelet's PodResources
answer names pods and containers but gives no uid. One ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``
joins them: each pod's uid (and a static pod's config hash, which its cgroup carries instead) to its namespace
and name, each container id to the container's name. It is what dcgm-exporter's pod informer reads, listed
instead of watched: at most once per ``--kubernetes.pod-metadata-refresh`` (sooner, at most every
:data:`UNKNOWN_UID_RETRY_SECONDS`, when a process runs in a pod the last answer did not list), in a thread, with
its answer bounded in time and size. A failure keeps the last good answer for :data:`KEEP_SECONDS`, is
counted by reason and logged when it starts and when it ends; nothing here ever raises into a collection.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from nvidia_gpu_exporter.kubernetes.apiclient import ApiClient
from nvidia_gpu_exporter.model.kubernetes import (
    API_FAILURE_REASONS,
    API_FORBIDDEN,
    API_HTTP_ERROR,
    API_INVALID_ANSWER,
    API_TIMEOUT,
    API_TOO_LARGE,
    API_UNAUTHORIZED,
    API_UNREACHABLE,
    PodDirectory,
)

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a node's pods (110 by default, 250 at most, a few KiB each) with room to spare
TIMEOUT_SECONDS = 5.0  # one list: connecting, the answer's first byte and its last
KEEP_SECONDS = 600.0  # how long the last good answer names pods while the API server does not answer
UNKNOWN_UID_RETRY_SECONDS = 5.0
MAX_NAME_CHARACTERS = 253  # a Kubernetes object name's limit; the answer is not trusted to keep it
MAX_STATUS_BYTES = 64 * 1024  # of an error answer, for its message
_CHUNK_BYTES = 64 * 1024
_CONTAINER_ID = re.compile(r"^[a-z0-9-]+://(?P<id>[0-9a-f]{64})$")
_STATUS_KEYS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
_STATIC_POD_ANNOTATIONS = ("kubernetes.io/config.hash", "kubernetes.io/config.mirror")


class PodListError(Exception):
    """A list that gave no pods: ``reason`` is one of the model's ``API_*`` tokens."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _text(value: Any) -> str:
    """A label-safe string: cut to a name's length, lone surrogates (which JSON allows) replaced."""
    if not isinstance(value, str):
        return ""
    return value[:MAX_NAME_CHARACTERS].encode("utf-8", "replace").decode("utf-8")


def parse_pod_list(data: bytes, read_at: float = 0.0) -> PodDirectory:
    """The names a ``PodList`` JSON answer gives; items without a uid, namespace or name are skipped."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise PodListError(API_INVALID_ANSWER, f"the answer is not JSON: {error}") from None
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list):
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise PodListError(API_INVALID_ANSWER, f"the answer is not a PodList (kind {str(kind)[:64]!r})")
    pods: dict[str, tuple[str, str]] = {}
    containers: dict[str, str] = {}
    for item in items:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(metadata, dict):
            continue
        uid, namespace, name = (_text(metadata.get(key)) for key in ("uid", "namespace", "name"))
        if not (uid and namespace and name):
            continue
        pods[uid] = (namespace, name)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            for key in _STATIC_POD_ANNOTATIONS:
                config_hash = _text(annotations.get(key))
                if config_hash:
                    pods.setdefault(config_hash, (namespace, name))
        status = item.get("status")
        for key in _STATUS_KEYS:
            statuses = status.get(key) if isinstance(status, dict) else None
            for container in statuses if isinstance(statuses, list) else ():
                if not isinstance(container, dict):
                    continue
                found = _CONTAINER_ID.match(_text(container.get("containerID")))
                container_name = _text(container.get("name"))
                if found and container_name:
                    containers[found["id"]] = container_name
    return PodDirectory(pods, containers, read_at)


def _status_message(error: urllib.error.HTTPError) -> str:
    """The ``message`` of a Kubernetes ``Status`` answer (its first 64 KiB), or the HTTP reason."""
    try:
        body = json.loads(error.read(MAX_STATUS_BYTES))
    except (ValueError, OSError, http.client.HTTPException):
        return str(error.reason)
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, str):
        return message[:512]
    return str(error.reason)


def _http_reason(status: int) -> str:
    return {401: API_UNAUTHORIZED, 403: API_FORBIDDEN}.get(status, API_HTTP_ERROR)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would send the bearer token on to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class PodLister:
    """One blocking list of a node's pods (run it in a thread): the whole answer within ``timeout_seconds``."""

    def __init__(
        self,
        client: ApiClient,
        node: str,
        *,
        timeout_seconds: float = TIMEOUT_SECONDS,
        max_bytes: int = MAX_ANSWER_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.node = node
        self.timeout_seconds = timeout_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._opener = urllib.request.build_opener(_NoRedirects(), urllib.request.HTTPSHandler(context=client.context))
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
        self.url = f"{client.access.server}/api/v1/pods?{query}"

    def __call__(self) -> PodDirectory:
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})  # noqa: S310 - http(s)
        if self.client.access.token:
            request.add_header("Authorization", f"Bearer {self.client.access.token}")
        deadline = self._clock() + self.timeout_seconds
        try:
            with self._opener.open(request, timeout=self.timeout_seconds) as reply:
                data = self._read(reply, deadline)
        except urllib.error.HTTPError as error:
            raise PodListError(_http_reason(error.code), f"HTTP {error.code}: {_status_message(error)}") from None
        except TimeoutError:
            raise PodListError(API_TIMEOUT, f"no complete answer within {self.timeout_seconds:g}s") from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise PodListError(API_TIMEOUT, f"no answer within {self.timeout_seconds:g}s") from None
            raise PodListError(API_UNREACHABLE, str(error.reason)) from None
        except (OSError, http.client.HTTPException) as error:
            raise PodListError(API_UNREACHABLE, str(error) or type(error).__name__) from None
        return parse_pod_list(data, self._clock())

    def _read(self, reply: http.client.HTTPResponse, deadline: float) -> bytes:
        """The body, refused past ``max_bytes`` (announced or read) or past the deadline (a trickling server)."""
        too_large = f"the answer is longer than {self.max_bytes} bytes"
        length = reply.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > self.max_bytes:
            raise PodListError(API_TOO_LARGE, too_large)
        chunks: list[bytes] = []
        size = 0
        while chunk := reply.read1(_CHUNK_BYTES):
            size += len(chunk)
            if size > self.max_bytes:
                raise PodListError(API_TOO_LARGE, too_large)
            if self._clock() > deadline:
                raise PodListError(API_TIMEOUT, f"no complete answer within {self.timeout_seconds:g}s")
            chunks.append(chunk)
        return b"".join(chunks)


class PodMetadata:
    """The latest pod directory for the collector, listed off the event loop when due.

    A collection waits for a list it started at most ``timeout_seconds``; a list still running then (its thread
    cannot be cancelled) is adopted by the next collection, and no second one starts meanwhile, so a server that
    never finishes holds one thread, never more.
    """

    def __init__(
        self,
        lister: Callable[[], PodDirectory],
        *,
        refresh_seconds: float,
        timeout_seconds: float = TIMEOUT_SECONDS,
        keep_seconds: float = KEEP_SECONDS,
        where: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lister = lister
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = min(UNKNOWN_UID_RETRY_SECONDS, refresh_seconds)
        self.timeout_seconds = timeout_seconds
        self.keep_seconds = keep_seconds
        self.where = where  # the server and node, for the log
        self._clock = clock
        self.failures = dict.fromkeys(API_FAILURE_REASONS, 0)  # lists that failed since the start, by reason
        self.lists = 0  # lists started, for tests
        self._directory: PodDirectory | None = None
        self._task: asyncio.Future[PodDirectory] | None = None
        self._attempted_at: float | None = None
        self._last_ok = True
        self._logged: str | None = None  # "" after a success, the reason after a failure; None before either

    def _due(self, uids: Collection[str]) -> bool:
        if self._attempted_at is None:
            return True
        since = self._clock() - self._attempted_at
        if since >= self.refresh_seconds:
            return True
        known = self._directory.pods if self._directory is not None else {}
        return self._last_ok and since >= self.retry_seconds and any(uid not in known for uid in uids)

    async def directory(self, uids: Collection[str] = ()) -> PodDirectory | None:
        """The newest answer (listing first when due), or ``None`` when none is younger than ``keep_seconds``;
        ``uids`` are the pod uids the collection has processes in."""
        self._adopt()
        if self._task is None and self._due(uids):
            self._attempted_at = self._clock()
            self.lists += 1
            self._task = asyncio.ensure_future(asyncio.to_thread(self.lister))
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=self.timeout_seconds)
            self._adopt()
        directory = self._directory
        if directory is not None and self._clock() - directory.read_at > self.keep_seconds:
            self._directory = directory = None
        return directory

    def _adopt(self) -> None:
        """Take a finished list's outcome: its directory, or a counted (and, when new, logged) failure."""
        task = self._task
        if task is None or not task.done():
            return
        self._task = None
        try:
            directory = task.result()
        except PodListError as error:
            self._failed(error.reason, error.detail)
            return
        except Exception as error:  # a parser bug must not take collections down with it
            log.exception("listing the node's pods raised an unexpected error")
            self._failed(API_INVALID_ANSWER, repr(error))
            return
        self._directory, self._last_ok = replace(directory, read_at=self._clock()), True
        if self._logged != "":
            log.info("Kubernetes pod metadata is up", extra={"where": self.where, "pods": len(directory.pods)})
            self._logged = ""

    def _failed(self, reason: str, detail: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self._last_ok = False
        if self._logged != reason:
            log.warning(
                "Kubernetes pod metadata is unavailable: pods are named by uid only",
                extra={"where": self.where, "reason": reason, "detail": detail},
            )
            self._logged = reason
