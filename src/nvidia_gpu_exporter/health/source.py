"""The kernel-log XID source: a reader thread feeding a ledger, and what a collection takes from them."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from nvidia_gpu_exporter.health.defaults import DEFAULT_KERNEL_LOG
from nvidia_gpu_exporter.health.kernellog import GpuIdentity, LogLine, SxidEvent, XidEvent, parse_line, parse_message
from nvidia_gpu_exporter.health.ledger import XidLedger
from nvidia_gpu_exporter.health.reader import DMESG_RESTRICT, KernelLogReader, boot_time
from nvidia_gpu_exporter.model.pci import PciAddress, parse_pci_address
from nvidia_gpu_exporter.model.snapshot import (
    FallenGpu,
    GpuTable,
    KernelLogState,
    KernelLogStatus,
    QueryField,
    SxidRecord,
    XidOccurrence,
    XidPod,
    XidRecord,
    column_of,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.xids import describe

log = logging.getLogger(__name__)
SIMULATED = " (simulated by the demo)"  # appended to the log lines of records the demo handed over


def gpu_addresses(fields: Sequence[QueryField], table: GpuTable) -> dict[PciAddress, str]:
    """PCI address -> uuid from a collection's ``uuid`` and ``pci.bus_id`` columns (empty if either is absent)."""
    uuid_column, pci_column = column_of(fields, "uuid"), column_of(fields, "pci.bus_id")
    if uuid_column is None or pci_column is None:
        return {}
    found = {}
    for row in table.rows:
        if max(uuid_column, pci_column) < len(row):
            pci = parse_pci_address(row[pci_column])
            if pci is not None and row[uuid_column].strip():
                found[pci] = row[uuid_column].strip()
    return found


class HandedOver:
    """Stands in for the reader when the records are handed over in-process: always up, nothing to read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.state = KernelLogState.UP
        self.records = 0
        self.lost = 0
        self.replayed = threading.Event()
        self.replayed.set()

    def start(self, fd: int | None) -> None:
        """Nothing to follow."""

    def stop(self, timeout: float = 2.0) -> None:
        """Nothing to stop."""


class KernelXidSource:
    """XIDs from the kernel log since boot, whichever backend collects; see ``docs/health.md``."""

    def __init__(
        self,
        path: str = DEFAULT_KERNEL_LOG,
        *,
        booted_at: float | None = None,
        wall_clock: Callable[[], float] = time.time,
        file_poll_seconds: float = 1.0,
        restrict_file: str | os.PathLike[str] = DMESG_RESTRICT,
        process_pod: Callable[[int], tuple[str, str]] | None = None,
        fed: bool = False,
    ) -> None:
        """Read the log at ``path``; with ``fed``, nothing is read and :meth:`feed` hands the records over
        (``path`` then only names where they come from)."""
        self.wall_clock = wall_clock
        self.simulated = fed  # only the demo hands records over: its log lines say they are simulated
        self.process_pod = process_pod  # pid -> (pod uid, container id), with --kubernetes.process-pods
        self.ledger = XidLedger(boot_time(wall_clock) if booted_at is None else booted_at)
        self.reader: KernelLogReader | HandedOver
        if fed:
            self.reader = HandedOver(path)
            self._fd = None
        else:
            self.reader = KernelLogReader(
                path, self._on_line, file_poll_seconds=file_poll_seconds, restrict_file=restrict_file
            )
            self._fd = self.reader.open_now()
        self._started = False
        self._holders: Mapping[str, tuple[str, str, str]] = {}  # normalized uuid -> (container, namespace, pod)

    @property
    def readable(self) -> bool:
        """Whether the log opened at start (``--collect.xid-source=auto`` picks this source then)."""
        return self._fd is not None or isinstance(self.reader, HandedOver)

    def feed(self, records: Sequence[str]) -> None:
        """Records handed over in-process (the demo's simulated kernel log), parsed as if read live."""
        for record in records:
            self.reader.records += 1
            self._on_line(parse_line(record.rstrip("\n")), True)

    def start(self) -> None:
        self._started = True
        self.reader.start(self._fd)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop following; a source never started closes the log it opened."""
        self.reader.stop(timeout)
        if not self._started and self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _on_line(self, line: LogLine, live: bool) -> None:
        event = parse_message(line.message)
        if event is None:
            return
        at = self.ledger.wall_time(line.kernel_usec, self.wall_clock() if live else None)
        pod = self._blamed_pod(event) if live and isinstance(event, XidEvent) else XidPod()
        self.ledger.add(event, at, pod)
        simulated = SIMULATED if self.simulated else ""
        if live and isinstance(event, XidEvent):
            meaning = describe(event.code)
            log.warning(
                "XID error in the kernel log" + simulated,
                extra={
                    "pci_bus_id": event.pci.label,
                    "xid": event.code,
                    "meaning": meaning.name if meaning else "",
                    "severity": meaning.severity.value if meaning else "unknown",
                    "action": meaning.action if meaning else "",
                    "pid": event.pid if event.pid is not None else "",
                    "process_name": event.process_name,
                    "text": event.text,
                },
            )
        elif live and isinstance(event, SxidEvent):
            log.warning(
                "NVSwitch SXID error in the kernel log" + simulated,
                extra={"pci_bus_id": event.pci.label, "sxid": event.code},
            )
        elif live and not isinstance(event, GpuIdentity):
            # A simulated loss is no error of this process or node: a warning, so no log alert pages for it.
            level = logging.WARNING if self.simulated else logging.ERROR
            log.log(level, "a GPU fell off the bus" + simulated, extra={"pci_bus_id": event.pci.label})

    def _blamed_pod(self, event: XidEvent) -> XidPod:
        """The pod of a live XID, known only while it may still run (a replayed line's pid may be reused)."""
        pod_uid = container_id = ""
        if self.process_pod is not None and event.pid is not None:
            pod_uid, container_id = self.process_pod(event.pid)
        container, namespace, pod = self._holders.get(normalize_uuid(self.ledger.uuid_of(event.pci)), ("", "", ""))
        return XidPod(pod_uid, container_id, namespace, pod, container)

    def learn(
        self,
        fields: Sequence[QueryField],
        table: GpuTable,
        holders: Mapping[str, tuple[str, str, str]] | None = None,
    ) -> None:
        """Take the uuids of the GPUs a collection saw, for XIDs whose uuid the log itself did not name, and
        (with pod-resources attribution) the container holding each whole GPU, for the XIDs read next."""
        self.ledger.learn_uuids(gpu_addresses(fields, table))
        if holders is not None:
            self._holders = holders  # one reference swapped: the reader thread sees the old map or the new

    def records(self) -> tuple[XidRecord, ...]:
        return self.ledger.records()

    def occurrences(self) -> tuple[XidOccurrence, ...]:
        return self.ledger.occurrences()

    def fallen_off(self) -> tuple[FallenGpu, ...]:
        return self.ledger.fallen_off()

    def sxids(self) -> tuple[SxidRecord, ...]:
        return self.ledger.sxid_records()

    def status(self) -> KernelLogStatus:
        reader = self.reader
        return KernelLogStatus(reader.state, reader.path, reader.records, reader.lost, self.ledger.dropped)
