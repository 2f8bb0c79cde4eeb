"""A/B of the TLS receive buffer: the exporter's 16 KiB against asyncio's own 256 KiB, alternating runs.

Each round starts the exporter twice (TLS + basic auth, cached mode): once as shipped, once through a
launcher that sets ``CompactTLSProtocol.max_size`` back to asyncio's 256 KiB; ``wrk`` loads each at 8 and
50 clients and the exporter's RSS is read after both loads. Python >= 3.11, Linux, needs ``wrk``.

    python benchmarks/bench_tls_buffer.py [--duration 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
from bench_http import PASSWORD, USER, data_args, make_pki, status_kib, web_config, wrk

ASYNCIO_BUFFER_LAUNCHER = """\
import sys
from nvidia_gpu_exporter import cli
from nvidia_gpu_exporter.httpserver import tlsbuffer

tlsbuffer.CompactTLSProtocol.max_size = 256 * 1024
sys.exit(cli.main())
"""


def argv_builder(launcher: Path | None) -> Callable[..., list[str]]:
    entry = [str(launcher)] if launcher else ["-m", "nvidia_gpu_exporter"]

    def build(*args: str) -> list[str]:
        return [sys.executable, *entry, "--web.listen-address=127.0.0.1:0", *args]

    return build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds of wrk per client count")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-tls-buffer-"))
    cert, key = make_pki(directory)
    config = web_config(directory, cert, key, auth=True)
    launcher = directory / "asyncio_buffer.py"
    launcher.write_text(ASYNCIO_BUFFER_LAUNCHER)
    data, source = data_args()
    header = ["Authorization: Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()]
    print(f"source: {source}; TLS + basic auth; wrk -d{args.duration}s")
    print("| build | round | req/s at 8 clients | req/s at 50 clients | RSS after |")
    print("|---|---:|---:|---:|---:|")
    for round_number in range(1, args.rounds + 1):
        for name, entry in (("16 KiB (shipped)", None), ("256 KiB (asyncio's)", launcher)):
            harness.exporter_argv = argv_builder(entry)
            exporter = harness.start_exporter([*data, f"--web.config.file={config}"], None)
            try:
                time.sleep(1.5)  # the first background collection
                url = f"https://{exporter.address}/metrics"
                rates = [wrk(url, clients, args.duration, header)[0] for clients in (8, 50)]
                rss = status_kib(exporter.process.pid) / 1024
            finally:
                exporter.stop()
            print(f"| {name} | {round_number} | {rates[0]:,.0f} | {rates[1]:,.0f} | {rss:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()
