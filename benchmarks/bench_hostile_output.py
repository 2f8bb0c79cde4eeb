"""What a hostile nvidia-smi costs the exporter: peak resident set and /-/healthy latency during one scrape.

The real exporter runs as a child process against ``tests/hostile_smi.py``'s script, which floods stdout
(one line of N bytes) or stderr (N bytes) on the GPU query, streamed by ``head -c``; the exporter's peak
resident set is its ``VmHWM`` in /proc, and /-/healthy is asked back to back while the scrape is in flight.
Linux only.

    python benchmarks/bench_hostile_output.py [--sizes-mb 200,1024] [--valid-mb 1]

``--valid-mb`` adds a case of valid CSV rows (distinct GPUs) of about that size: the most expensive answer
that passes the cap, parsed and rendered in a thread.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import MIG_FIXTURE, start_exporter
from hostile_smi import MIB, HostileSmi, status_kib


def valid_rows(directory: Path, size: int) -> str:
    """A snippet answering the GPU query with the fake's header and ~``size`` bytes of distinct GPU rows."""
    snippet = directory / "valid.sh"
    python = shlex.quote(sys.executable)
    program = (
        "import subprocess, sys\n"
        "out = subprocess.run(sys.argv[2:], capture_output=True, text=True).stdout.strip().split(chr(10))\n"
        "header, row = out[0], out[1].split(',')\n"
        "column = [c.strip() for c in header.split(',')].index('uuid')\n"
        "size, written, index = int(sys.argv[1]), 0, 0\n"
        "print(header)\n"
        "while written < size:\n"
        "    row[column] = f' GPU-{index:08d}-0000-0000-0000-000000000000'\n"
        "    line = ','.join(row)\n"
        "    print(line)\n"
        "    written += len(line) + 1\n"
        "    index += 1\n"
    )
    (directory / "rows.py").write_text(program, encoding="utf-8")
    fake = shlex.join([sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(MIG_FIXTURE)])
    snippet.write_text(f'{python} {shlex.quote(str(directory / "rows.py"))} {size} {fake} "$@"; exit 0\n')
    return f". {shlex.quote(str(snippet))}"


def measure(label: str, smi: HostileSmi, setup: str) -> str:
    handle = start_exporter(smi.args("--collect.timeout=10s"))
    try:
        baseline = status_kib(handle.process.pid, "VmHWM")
        smi.mode(setup)
        answer: list[str] = []
        started = time.monotonic()
        scraper = threading.Thread(target=lambda: answer.append(handle.scrape()))
        scraper.start()
        latencies: list[float] = []
        while scraper.is_alive() and len(latencies) < 10000:
            probe = time.monotonic()
            handle.get("/-/healthy", timeout=60)
            latencies.append(time.monotonic() - probe)
            time.sleep(0.005)
        scraper.join(120)
        scrape_seconds = time.monotonic() - started
        peak = status_kib(handle.process.pid, "VmHWM")
        longest = max(len(line) for line in handle.stderr_lines)
    finally:
        handle.stop()
    worst = max(latencies, default=0.0) * 1000
    return (
        f"| {label} | {baseline / 1024:.1f} | {peak / 1024:.1f} | {scrape_seconds:.2f} | {len(latencies)} "
        f"| {worst:.0f} | {longest} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes-mb", default="200,1024", help="flood sizes in MiB, comma-separated")
    parser.add_argument("--valid-mb", type=float, default=1.0, help="valid rows of about this size (0: none)")
    options = parser.parse_args()
    print(
        "| Case | RSS before (MiB) | peak RSS (MiB) | scrape (s) | /-/healthy probes | worst /-/healthy (ms) "
        "| longest log line (chars) |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for size_mb in (int(part) for part in options.sizes_mb.split(",") if part):
            size = size_mb * MIB
            smi = HostileSmi.create(directory / f"stdout-{size_mb}")
            print(measure(f"{size_mb} MiB line on stdout", smi, f"head -c {size} /dev/zero | tr '\\0' x; exit 0"))
            smi = HostileSmi.create(directory / f"stderr-{size_mb}")
            print(measure(f"{size_mb} MiB on stderr", smi, f"head -c {size} /dev/zero | tr '\\0' e >&2; exit 1"))
        if options.valid_mb > 0:
            smi = HostileSmi.create(directory / "valid")
            size = int(options.valid_mb * MIB) - 64 * 1024  # just under the default cap
            print(measure(f"{options.valid_mb:g} MiB of valid rows", smi, valid_rows(directory, size)))


if __name__ == "__main__":
    main()
