"""RSS held by clients that send scrapes and never read the answers (issue 16: 200 of them under 128 MiB).

Starts the exporter (demo backend, cached scrapes) on a loopback port-0 socket, opens ``--clients`` connections
that each pipeline ``--pipelined`` scrapes with a 4 KiB receive buffer and read nothing, and prints the
exporter's RSS before and after (and per client). ``--src`` runs another checkout's code (its ``src``) with
this interpreter, for an A/B.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--pipelined", type=int, default=40)
    parser.add_argument("--src", help="a checkout whose src/ to run (default: the installed package)")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = str(Path(args.src) / "src")
    command = [
        sys.executable,
        "-m",
        "nvidia_gpu_exporter",
        "--web.listen-address=127.0.0.1:0",
        "--collect.interval=30s",
        "--web.max-requests=0",
        "--collect.backend=demo",
        "--web.write-timeout=60s",  # the stalled answers stay while measured
    ]
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, stderr=log, env=env)
        try:
            address = None
            for _ in range(100):  # bounded: 10 s to start
                time.sleep(0.1)
                log.seek(0)
                match = re.search(rb"address=([0-9.]+):(\d+)", log.read())
                if match:
                    address = (match.group(1).decode(), int(match.group(2)))
                    break
            if address is None:
                sys.exit("the exporter did not start")
            request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
            with socket.create_connection(address) as probe:
                probe.sendall(request)
                time.sleep(0.3)
                body = len(probe.recv(1 << 20))
            time.sleep(0.5)
            before = rss_mib(child.pid)
            clients = []
            for _ in range(args.clients):
                client = socket.socket()
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client.connect(address)
                client.sendall(request * args.pipelined)
                clients.append(client)
            time.sleep(3)
            after = rss_mib(child.pid)
            for client in clients:
                client.close()
            per_client = (after - before) * 1024 / args.clients
            print(
                f"{args.clients} clients x {args.pipelined} pipelined scrapes of ~{body} bytes, none read: "
                f"RSS {before:.1f} -> {after:.1f} MiB (+{per_client:.0f} KiB per client)"
            )
        finally:
            child.terminate()
            child.wait(timeout=10)


if __name__ == "__main__":
    main()
