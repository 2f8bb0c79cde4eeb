"""The kernel log's XIDs, counted per GPU and code, with the last few occurrences and who caused them.

The reader thread adds events; collections read immutable records. Keys come from the log, which anyone
able to write to it could flood, so every table is bounded: at most :data:`MAX_GPUS` PCI addresses,
:data:`MAX_CODES_PER_GPU` codes each and :data:`OCCURRENCES_PER_GPU` recent occurrences per GPU; events
beyond them are counted as dropped, never stored.

A GPU is named by its PCI address in the log. Its uuid comes from the driver's own ``NVRM: GPU at PCI:...``
line or from the backend's ``pci.bus_id`` readings; an address neither names yet is reported as
``unknown`` until one does (the counts are kept by address, so nothing is lost when the name arrives).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from nvidia_gpu_exporter.health.kernellog import FallenOffBus, GpuIdentity, KernelEvent, SxidEvent, XidEvent
from nvidia_gpu_exporter.model.pci import PciAddress
from nvidia_gpu_exporter.model.snapshot import FallenGpu, SxidRecord, XidOccurrence, XidPod, XidRecord

MAX_GPUS = 256
MAX_CODES_PER_GPU = 64
MAX_SXID_KEYS = 1024  # (switch, code, severity): an HGX node has 4 to 6 switches
OCCURRENCES_PER_GPU = 5
UNKNOWN_UUID = "unknown"
FALLEN_OFF_THE_BUS_XID = 79


def _latest(known: float | None, at: float | None) -> float | None:
    """The later of two times, either of which may be unknown (lines can arrive a microsecond out of order)."""
    if known is None or at is None:
        return at if known is None else known
    return max(known, at)


@dataclass(slots=True)
class _Count:
    count: int = 0
    last_seen: float | None = None

    def seen(self, at: float | None) -> None:
        self.count += 1
        self.last_seen = _latest(self.last_seen, at)


@dataclass(slots=True)
class _Gpu:
    codes: dict[int, _Count] = field(default_factory=dict)
    # (code, pid, process name) -> (when, its pod), most recent last: one series per key
    occurrences: OrderedDict[tuple[int, str, str], tuple[float | None, XidPod]] = field(default_factory=OrderedDict)
    fell_off: bool = False


class XidLedger:
    """Thread-safe counts of the kernel log's XIDs; ``boot_time`` turns kernel microseconds into Unix time."""

    def __init__(self, boot_time: float) -> None:
        self.boot_time = boot_time
        self._lock = threading.Lock()
        self._gpus: dict[PciAddress, _Gpu] = {}
        self._uuids: dict[PciAddress, str] = {}
        self._sxids: dict[tuple[PciAddress, int, str], _Count] = {}
        self.dropped = 0

    def wall_time(self, kernel_usec: int | None, seen_at: float | None) -> float | None:
        """The kernel's timestamp as Unix time; else when a live line was read; ``None`` for untimed replays."""
        if kernel_usec is not None:
            return self.boot_time + kernel_usec / 1_000_000
        return seen_at

    def add(self, event: KernelEvent, at: float | None, pod: XidPod = XidPod()) -> None:  # noqa: B008 - immutable
        """Count an event seen at ``at``; ``pod`` is the one its XID is blamed on, where known."""
        with self._lock:
            if isinstance(event, GpuIdentity):
                if event.pci in self._uuids or len(self._uuids) < MAX_GPUS:
                    self._uuids[event.pci] = event.uuid
                return
            if isinstance(event, SxidEvent):
                self._count_sxid(event, at)
                return
            if isinstance(event, XidEvent | FallenOffBus):
                gpu = self._gpu(event.pci)
                if gpu is None:
                    return
                if isinstance(event, FallenOffBus) or event.code == FALLEN_OFF_THE_BUS_XID:
                    gpu.fell_off = True
                if isinstance(event, XidEvent):
                    self._count(gpu, event, at, pod)

    def _gpu(self, pci: PciAddress) -> _Gpu | None:
        gpu = self._gpus.get(pci)
        if gpu is None:
            if len(self._gpus) >= MAX_GPUS:
                self.dropped += 1
                return None
            gpu = self._gpus[pci] = _Gpu()
        return gpu

    def _count(self, gpu: _Gpu, event: XidEvent, at: float | None, pod: XidPod) -> None:
        count = gpu.codes.get(event.code)
        if count is None:
            if len(gpu.codes) >= MAX_CODES_PER_GPU:
                self.dropped += 1
                return
            count = gpu.codes[event.code] = _Count()
        count.seen(at)
        key = (event.code, str(event.pid) if event.pid is not None else "", event.process_name)
        previous = gpu.occurrences.pop(key, None)
        gpu.occurrences[key] = (_latest(previous[0] if previous is not None else None, at), pod)
        while len(gpu.occurrences) > OCCURRENCES_PER_GPU:
            gpu.occurrences.popitem(last=False)

    def _count_sxid(self, event: SxidEvent, at: float | None) -> None:
        severity = "" if event.fatal is None else ("fatal" if event.fatal else "non_fatal")
        key = (event.pci, event.code, severity)
        count = self._sxids.get(key)
        if count is None:
            if len(self._sxids) >= MAX_SXID_KEYS:
                self.dropped += 1
                return
            count = self._sxids[key] = _Count()
        count.seen(at)

    def sxid_records(self) -> tuple[SxidRecord, ...]:
        with self._lock:
            return tuple(
                SxidRecord(pci.label, code, severity, count.count, count.last_seen)
                for (pci, code, severity), count in sorted(self._sxids.items())
            )

    def learn_uuids(self, uuids: Mapping[PciAddress, str]) -> None:
        """Names from the backend's readings; the driver's own line for an address wins over them."""
        with self._lock:
            for pci, uuid in uuids.items():
                if pci not in self._uuids and len(self._uuids) < MAX_GPUS:
                    self._uuids[pci] = uuid

    def _uuid(self, pci: PciAddress) -> str:
        return self._uuids.get(pci, UNKNOWN_UUID)

    def uuid_of(self, pci: PciAddress) -> str:
        """The uuid of the GPU at ``pci`` as known now (``unknown`` until the log or a collection names it)."""
        with self._lock:
            return self._uuid(pci)

    def records(self) -> tuple[XidRecord, ...]:
        with self._lock:
            rows = [
                XidRecord(self._uuid(pci), code, count.count, count.last_seen)
                for pci, gpu in self._gpus.items()
                for code, count in gpu.codes.items()
            ]
        return tuple(sorted(rows, key=lambda row: (row.gpu_uuid, row.xid)))

    def occurrences(self) -> tuple[XidOccurrence, ...]:
        with self._lock:
            rows = [
                XidOccurrence(self._uuid(pci), pci.label, code, pid, name, at, pod)
                for pci, gpu in sorted(self._gpus.items())
                for (code, pid, name), (at, pod) in gpu.occurrences.items()
            ]
        return tuple(rows)

    def fallen_off(self) -> tuple[FallenGpu, ...]:
        """Every GPU the driver said fell off the bus (its own line, or XID 79) since the log begins."""
        with self._lock:
            return tuple(
                FallenGpu(self._uuid(pci), pci.label) for pci, gpu in sorted(self._gpus.items()) if gpu.fell_off
            )
