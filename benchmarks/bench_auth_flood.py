"""A wrong-password flood against basic auth (docs/security.md): what Prometheus and /-/healthy see meanwhile.

The exporter runs as a child process (demo backend, cached mode) behind a web config with two users whose
hashes have bcrypt cost 10. Prometheus' credential is used once before the flood (so it is cached), then
``--clients`` concurrent connections send wrong passwords as fast as the exporter answers, for
``--seconds``. Meanwhile, once a second: a scrape with Prometheus' cached credential, a ``/-/healthy`` with
it, and the first login of the second user (uncached, so it needs bcrypt during the flood). Printed: the
latencies, how the flood was answered (401 after bcrypt, or 429 at once), and the exporter's peak RSS.

    python benchmarks/bench_auth_flood.py [--clients 300] [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import start_exporter
from hostile.auth_flood import flood, peak_rss_mib, web_config


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values):.1f} ms, max {max(values):.1f} ms ({len(values)} requests)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=20.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        config = web_config(Path(directory))
        handle = start_exporter(["--collect.backend=demo", "--collect.interval=15s", f"--web.config.file={config}"])
        try:
            result = flood(f"http://{handle.address}", options.clients, options.seconds)
            rss = peak_rss_mib(handle.process.pid)
        finally:
            handle.stop()
    print(f"clients {options.clients}, {options.seconds:.0f} s of wrong passwords (bcrypt cost 10)")
    print(f"Prometheus' scrape (cached credential): {summary(result.scrape_ms)}")
    print(f"/-/healthy (cached credential): {summary(result.healthy_ms)}")
    print(f"first login of another user during the flood: {result.first_login}")
    print(f"statuses of those: {dict(result.statuses)}")
    print(f"the flood's answers (0: no answer in 30 s): {result.flood_answers}")
    print(f"exporter peak RSS (VmHWM): {rss:.1f} MiB")


if __name__ == "__main__":
    main()
