"""Pod uid and container id of a host process, from ``/proc/<pid>/cgroup``.

The kubelet puts every container in a cgroup under its pod's, so the path names both, whatever the
layout:

* cgroup v1 (one ``id:controllers:path`` line per hierarchy) and v2 (one ``0::path`` line), and hybrids;
* the cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container-id>``;
* the systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>
  .slice/cri-containerd-<id>.scope`` (``crio-<id>.scope`` for CRI-O, ``docker-<id>.scope`` for Docker);
* containerd's own systemd form ``.../kubepods-burstable-pod<uid>.slice:cri-containerd:<id>``;
* paths seen through a private cgroup namespace, which start with ``/..`` segments.

Nothing here needs root: ``/proc/<pid>/cgroup`` is world-readable. It needs the host's PID namespace
(``hostPID: true``), or the pids nvidia-smi reports name other processes or none at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from nvidia_gpu_exporter.model.kubernetes import CGROUP_UNREADABLE, HOSTPID_OFF, NOT_IN_A_POD, PROCESS_NOT_VISIBLE

Found = TypeVar("Found")

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
# "pod<uid>" (cgroupfs) or "kubepods[-qos]-pod<uid>.slice" (systemd), optionally ":runtime:<id>" after it.
_POD_SEGMENT = re.compile(
    rf"^(?:kubepods(?:-[a-z]+)?-)?pod(?P<uid>{_UID})(?:\.slice)?(?::(?P<runtime>[a-z-]+):(?P<id>[0-9a-f]{{64}}))?$"
)
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio|docker|containerd)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True, slots=True)
class CgroupPod:
    """The pod (and, for a container process, the container) a cgroup path belongs to."""

    pod_uid: str  # with dashes, as the API server and kube-state-metrics print it
    container_id: str = ""  # the runtime's 64-hex id; "" for a pod-level process (e.g. CRI-O's conmon)
    runtime: str = ""  # containerd, cri-o, docker; "" when the cgroupfs layout does not say


@dataclass(frozen=True, slots=True)
class ProcessLookup:
    """A process's pod, or why there is none."""

    pod: CgroupPod | None
    reason: str = ""
    detail: str = ""


def _uid(text: str) -> str:
    """Dashes as the API prints uids (the systemd driver escapes them to ``_``); a static pod's 32-hex
    config hash has none and stays as it is."""
    return text.replace("_", "-")


def parse_cgroup_path(path: str) -> CgroupPod | None:
    """The pod in one cgroup path, or ``None`` when the path is not under a Kubernetes pod."""
    segments = [segment for segment in path.split("/") if segment and segment != ".."]
    for position, segment in enumerate(segments):
        pod = _POD_SEGMENT.match(segment)
        if not pod:
            continue
        uid = _uid(pod["uid"])
        if pod["id"]:
            return CgroupPod(uid, pod["id"], _RUNTIMES.get(pod["runtime"], pod["runtime"]))
        for candidate in segments[position + 1 :]:
            container = _CONTAINER_SEGMENT.match(candidate)
            if container:
                return CgroupPod(uid, container["id"], _RUNTIMES.get(container["prefix"] or "", ""))
        return CgroupPod(uid)
    return None


def best_of_cgroup_file(
    text: str, parse_path: Callable[[str], Found | None], complete: Callable[[Found], bool]
) -> Found | None:
    """What ``parse_path`` finds in the paths of a ``/proc/<pid>/cgroup`` file (``hierarchy:controllers:path``
    lines, v1, v2 or hybrid): the first ``complete`` finding, else the first finding, else None."""
    best: Found | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = parse_path(parts[2])
        if found is None:
            continue
        if complete(found):
            return found
        best = best or found
    return best


def parse_cgroup_file(text: str) -> CgroupPod | None:
    """The pod named by a ``/proc/<pid>/cgroup`` file (v1, v2 or hybrid); a container id beats none."""
    return best_of_cgroup_file(text, parse_cgroup_path, lambda pod: bool(pod.container_id))


def _read(path: str, first: int = 0) -> bytes:
    """A small /proc file's bytes, or its first bytes up to ``first`` (one read) when that is all that is needed.
    os-level calls: pathlib and Python's file objects cost more than the read itself."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if first:
            return os.read(descriptor, first)
        chunks = []
        while chunk := os.read(descriptor, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def lookup_process(proc_root: str | Path, pid: str) -> ProcessLookup:
    """Read one process's cgroup file under ``proc_root`` (``/proc``, or a fake tree in tests)."""
    if not pid.isdigit():
        return ProcessLookup(None, PROCESS_NOT_VISIBLE, f"pid {pid!r} is not a process id")
    try:
        text = _read(os.path.join(proc_root, pid, "cgroup")).decode("utf-8", "replace")
    except FileNotFoundError:
        return ProcessLookup(
            None,
            PROCESS_NOT_VISIBLE,
            f"{Path(proc_root) / pid / 'cgroup'} does not exist: the exporter needs hostPID: true to see GPU processes",
        )
    except OSError as error:
        return ProcessLookup(None, CGROUP_UNREADABLE, f"{Path(proc_root) / pid / 'cgroup'}: {error.strerror or error}")
    pod = parse_cgroup_file(text)
    if pod is None:
        return ProcessLookup(None, NOT_IN_A_POD, "the process's cgroup is not under a Kubernetes pod")
    return ProcessLookup(pod)


def host_pid_problem(proc_root: str | Path) -> tuple[str, str]:
    """``(reason, detail)`` when this exporter plainly runs in a pod's own PID namespace, else ``("", "")``.

    With ``hostPID: true`` pid 1 is the node's init; without it, pid 1 is this pod's first process and its
    cgroup is a pod's. (Under a private cgroup namespace that test can pass wrongly; the per-process lookups
    then say ``process_not_visible`` instead.)
    """
    path = Path(proc_root) / "1" / "cgroup"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "", ""
    pod = parse_cgroup_file(text)
    if pod is None:
        return "", ""
    return HOSTPID_OFF, (
        f"pid 1 under {proc_root} is in pod {pod.pod_uid}: the exporter sees its own PID namespace; "
        "set hostPID: true on its pod"
    )


# The start of /proc/<pid>/stat that holds field 22, with room to spare: the pid, the command name in parentheses
# (tens of bytes) and 20 numbers of at most 20 digits each.
_STAT_HEAD = 4096
MAX_CACHED_PROCESSES = 4096  # a node's GPU processes; past it the rest are read every collection, as uncached


def start_time(stat_path: str) -> bytes | None:
    """A process's start time from its ``/proc/<pid>/stat`` (field 22, clock ticks since boot: with the pid, it
    names one process), or None when it cannot be read. Raises FileNotFoundError when the process is gone."""
    try:
        data = _read(stat_path, _STAT_HEAD)
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        return None
    head, paren, tail = data.rpartition(b")")  # the command name in parentheses may hold anything, ")" too
    fields = tail.split(maxsplit=20)
    if not paren or not head or len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[19]


class CgroupCache:
    """Each GPU process's :func:`lookup_process`, kept while the process runs.

    A process's pod does not change while it runs, so a collection reads its start time (one small file) instead of
    reading and parsing its cgroup file again; a new start time under the same pid is another process, read afresh.
    A process is forgotten when its pid is gone, or when the collection before did not look it up (it ended or left
    the GPU), so the cache holds at most the processes of two collections, and never more than ``limit``. Only a
    pod or a host process is kept: a failed read is tried again at the next lookup.
    """

    def __init__(self, proc_root: str | Path, limit: int = MAX_CACHED_PROCESSES) -> None:
        self.proc_root = proc_root
        self.limit = limit
        self._prefix = os.path.join(os.fspath(proc_root), "")  # "<proc_root>/": each lookup joins only the pid
        self._known: dict[str, tuple[bytes, ProcessLookup]] = {}  # pid -> (start time, its lookup)
        self._asked: set[str] = set()  # pids looked up since next_collection()

    def __len__(self) -> int:
        return len(self._known)

    def next_collection(self) -> None:
        """Forget the processes the collection that just ended did not look up."""
        self._known = {pid: known for pid, known in self._known.items() if pid in self._asked}
        self._asked = set()

    def lookup(self, pid: str) -> ProcessLookup:
        if not pid.isdigit():
            return lookup_process(self.proc_root, pid)
        self._asked.add(pid)
        try:
            started = start_time(f"{self._prefix}{pid}/stat")
        except FileNotFoundError:
            self._known.pop(pid, None)
            return lookup_process(self.proc_root, pid)
        known = self._known.get(pid)
        if known is not None and known[0] == started:
            return known[1]
        found = lookup_process(self.proc_root, pid)
        if started is None or (found.pod is None and found.reason != NOT_IN_A_POD):
            self._known.pop(pid, None)
        elif pid in self._known or len(self._known) < self.limit:
            self._known[pid] = (started, found)
        return found
