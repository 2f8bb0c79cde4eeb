"""Sequential scrapes of a large cached body (255 GPUs, both profiles: about 650 KB plain), plain and gzip.

Measures what writing a body as shared parts in 16 KiB chunks (httpserver/body.py) costs against one joined copy
per request: run it on two checkouts (``PYTHONPATH=<other>/src``) and compare the medians.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import FIXTURE_CAPTURES, fake_smi_command, http_get, start_exporter
from polling import wait_until

ONE_GPU = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per encoding")
    arguments = parser.parse_args()
    exporter = start_exporter(
        [
            "--nvidia-smi-command",
            fake_smi_command(ONE_GPU, "--gpus", "255"),
            "--collect.interval=1h",
            "--metrics.profile=both",
        ]
    )
    try:
        wait_until(lambda: b"_gpu_info{" in exporter.get().body, "the first collection")
        for encoding in ("identity", "gzip"):
            times = []
            size = 0
            for _ in range(arguments.scrapes):
                started = time.perf_counter()
                response = http_get(exporter.url + "/metrics", {"Accept-Encoding": encoding})
                times.append(time.perf_counter() - started)
                size = len(response.body)
            times.sort()
            median, p90 = times[len(times) // 2], times[len(times) * 9 // 10]
            print(f"{encoding:8} {size:>8,} bytes  median {median * 1000:.1f} ms  p90 {p90 * 1000:.1f} ms")
    finally:
        exporter.stop()


if __name__ == "__main__":
    main()
