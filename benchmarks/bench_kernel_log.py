"""The kernel-log reader: replay throughput (lines/s through parse and ledger) and CPU while the log is quiet.

    .venv/bin/python benchmarks/bench_kernel_log.py --lines 200000 --idle-seconds 10

The replay writes a kmsg-format file of ordinary kernel lines with one XID in every hundred, starts the
real source on it and times the replay. The idle run follows a FIFO nobody writes to and measures the
process's CPU time while it waits: the reader sleeps in poll(), so it should be ~0.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from nvidia_gpu_exporter.health.source import KernelXidSource


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def replay(lines: int, directory: Path) -> tuple[float, int]:
    log = directory / "kmsg"
    with log.open("w") as handle:
        for n in range(lines):
            if n % 100 == 0:
                message = f"NVRM: Xid (PCI:0000:{n % 8:02x}:00): 13, pid={n}, name=python3, Graphics SM Warp Exception"
            else:
                message = f"usb 3-5: new high-speed USB device number {n} using xhci_hcd"
            handle.write(f"6,{n},{n * 1000},-;{message}\n")
    source = KernelXidSource(str(log), booted_at=0.0, file_poll_seconds=0.05)
    started = time.perf_counter()
    source.start()
    source.reader.replayed.wait(600)
    elapsed = time.perf_counter() - started
    counted = sum(record.count for record in source.records())
    source.stop()
    return elapsed, counted


def idle(seconds: float, directory: Path) -> float:
    fifo = directory / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)
    source = KernelXidSource(str(fifo), booted_at=0.0)
    source.start()
    source.reader.replayed.wait(10)
    before = _cpu_seconds()
    time.sleep(seconds)
    spent = _cpu_seconds() - before
    source.stop()
    os.close(writer)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        elapsed, counted = replay(options.lines, Path(scratch))
        rate = options.lines / elapsed
        print(f"replay: {options.lines} lines in {elapsed:.2f} s = {rate:,.0f} lines/s ({counted} XIDs)")
        spent = idle(options.idle_seconds, Path(scratch))
        print(f"idle: {spent * 1000:.1f} ms CPU in {options.idle_seconds:g} s of a quiet log")


if __name__ == "__main__":
    main()
