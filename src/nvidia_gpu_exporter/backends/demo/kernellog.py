"""The demo's kernel log: its synthesized XIDs as the NVIDIA driver writes them to ``/dev/kmsg``.

The exporter hands these records to its kernel-log source (the same parser and ledger that read a node's
``/dev/kmsg``), so the demo shows everything a kernel log gives: counts, the process each XID blames, a GPU
fallen off the bus. They are handed over within the collection that synthesized them, so a scrape sees
them at once. Records are stamped with the kernel's clock (microseconds of ``CLOCK_MONOTONIC``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from nvidia_gpu_exporter.model.pci import parse_pci_address
from nvidia_gpu_exporter.model.snapshot import ProcessRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.xids import describe

KernelLogSink = Callable[[Sequence[str]], None]
KERN_ERR = 3  # the priority the driver's messages carry (facility kernel, level err)


def kernel_usec(at: float, kernel_clock: Callable[[], float]) -> int:
    """Unix time ``at`` on the kernel's clock (what the reader turns back into Unix time)."""
    booted = time.time() - kernel_clock()
    return max(0, int((at - booted) * 1_000_000))


class DemoKernelLog:
    """Turns synthesized XIDs into the driver's records and hands them to ``sink``."""

    def __init__(self, sink: KernelLogSink, kernel_clock: Callable[[], float] = time.monotonic) -> None:
        self.sink = sink
        self.kernel_clock = kernel_clock  # the clock the reader takes kernel time from
        self._sequence = 0
        self._named: set[str] = set()  # GPUs whose "GPU at PCI" line is in the file
        self._fallen: set[str] = set()  # bus ids whose "fallen off the bus" line is

    def lines(
        self,
        events: Sequence[tuple[str, int, float]],
        bus_ids: Mapping[str, str],
        processes: Sequence[ProcessRow],
    ) -> list[str]:
        """The records for these events: a GPU's uuid line before its first XID, then the XID with a process."""
        by_gpu: dict[str, ProcessRow] = {}
        for row in processes:
            by_gpu.setdefault(normalize_uuid(row.gpu_uuid), row)
        records = []
        for uuid, code, at in events:
            address = parse_pci_address(bus_ids.get(normalize_uuid(uuid), ""))
            if address is None:
                continue
            kernel = address.kernel
            usec = kernel_usec(at, self.kernel_clock)
            if uuid not in self._named:
                self._named.add(uuid)
                records.append(self._record(usec, f"NVRM: GPU at PCI:{kernel}: {uuid}"))
            process = by_gpu.get(normalize_uuid(uuid))
            blamed = f"pid={process.pid}, name={process.process_name}" if process else "pid='<unknown>', name=<unknown>"
            entry = describe(code)
            text = entry.name if entry is not None else "simulated"
            records.append(self._record(usec, f"NVRM: Xid (PCI:{kernel}): {code}, {blamed}, {text}"))
        return records

    def fallen_off(self, bus_ids: Sequence[str], at: float | None = None) -> list[str]:
        """The driver's line for each GPU that fell off the bus, once per GPU (an address it cannot parse: none)."""
        usec = kernel_usec(time.time() if at is None else at, self.kernel_clock)
        records = []
        for bus_id in bus_ids:
            address = parse_pci_address(bus_id)
            if address is None or bus_id in self._fallen:
                continue
            self._fallen.add(bus_id)
            records.append(self._record(usec, f"NVRM: GPU {address.kernel}.0: GPU has fallen off the bus."))
        return records

    def write_fallen_off(self, bus_ids: Sequence[str], at: float) -> None:
        records = self.fallen_off(bus_ids, at)
        if records:
            self.sink(records)

    def _record(self, usec: int, message: str) -> str:
        self._sequence += 1
        return f"{KERN_ERR},{self._sequence},{usec},-;{message}\n"

    def write(
        self,
        events: Sequence[tuple[str, int, float]],
        bus_ids: Mapping[str, str],
        processes: Sequence[ProcessRow],
    ) -> None:
        records = self.lines(events, bus_ids, processes)
        if records:
            self.sink(records)
