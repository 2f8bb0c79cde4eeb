"""Cached-scrape HTTP throughput and latency (wrk), and memory, of the real exporter and of a reference.

The exporter runs as a child process in cached mode (``--collect.interval``), so every scrape is served
from the rendered snapshot, in three set-ups: plain HTTP, TLS, and TLS + basic auth (bcrypt cost 10).
The reference is prometheus_client's built-in server (the one the Python peer nvitop-exporter uses)
serving the same payload through a collector, plain and TLS (it has no auth). The exporter's data: the
shared H200 capture through the fake nvidia-smi when ``../shared/conformance`` is present, else the
demo backend. Needs ``wrk`` (Debian: ``apt-get install wrk``) for the throughput tables.

    python benchmarks/bench_http.py [--duration 10] [--scrapes 20000]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import os
import platform
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness import CONFORMANCE, Exporter, fake_smi_command, start_exporter

H200 = CONFORMANCE / "captures" / "linux-x86_64__nvidia-h200__590.48.01.txt"
USER, PASSWORD = "prometheus", "benchmark-password"
CLIENTS = (1, 8, 50)


def data_args() -> tuple[list[str], str]:
    common = ["--collect.interval=30s", "--collect.compute-apps", "--web.max-requests=0"]
    if H200.is_file():
        command = fake_smi_command(H200, "--state", "load")
        return [*common, "--nvidia-smi-command", command], "exec + fake nvidia-smi, shared H200 capture (load)"
    return [*common, "--collect.backend=demo"], "demo backend (2 GPUs)"


def make_pki(directory: Path) -> tuple[Path, Path]:
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = directory / "cert.pem", directory / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def web_config(directory: Path, cert: Path, key: Path, auth: bool) -> Path:
    import bcrypt

    text = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    if auth:
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
        text += f"basic_auth_users:\n  {USER}: {hashed}\n"
    path = directory / ("web-auth.yml" if auth else "web-tls.yml")
    path.write_text(text)
    return path


def status_kib(pid: int, key: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def wrk(url: str, connections: int, duration: int, headers: list[str]) -> tuple[float, str, str]:
    command = ["wrk", "-t", str(min(connections, 2)), "-c", str(connections), "-d", f"{duration}s", "--latency"]
    for header in headers:
        command += ["-H", header]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx or 3xx responses" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    distribution = out.split("Latency Distribution", 1)[1]
    p50 = re.search(r"50%\s+(\S+)", distribution).group(1)  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+(\S+)", distribution).group(1)  # type: ignore[union-attr]
    return rate, p50, p99


def scrape_many(address: str, count: int, context: ssl.SSLContext | None = None, auth: str = "") -> float:
    host, port = address.rsplit(":", 1)
    if context is None:
        connection: http.client.HTTPConnection = http.client.HTTPConnection(host, int(port), timeout=30)
    else:
        connection = http.client.HTTPSConnection(host, int(port), timeout=30, context=context)
    headers = {"Authorization": auth} if auth else {}
    started = time.perf_counter()
    for _ in range(count):
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
    connection.close()
    return time.perf_counter() - started


def wait_for_data(exporter: Exporter) -> str:
    for _ in range(200):
        body = exporter.scrape()
        if "nvidia_smi_gpu_info{" in body:
            return body
        time.sleep(0.05)
    raise RuntimeError("no GPU data after 10 s")


REFERENCE_SERVER = textwrap.dedent(
    """
    import sys, time
    from prometheus_client import start_http_server
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry, Collector

    payload = open(sys.argv[1]).read()

    class Replay(Collector):
        def collect(self):
            yield from text_string_to_metric_families(payload)

    registry = CollectorRegistry()
    registry.register(Replay())
    kwargs = {"certfile": sys.argv[3], "keyfile": sys.argv[4]} if len(sys.argv) > 3 else {}
    start_http_server(int(sys.argv[2]), addr="127.0.0.1", registry=registry, **kwargs)
    print("ready", flush=True)
    while True:
        time.sleep(3600)
    """
)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def table(title: str, rows: list[tuple[int, float, str, str]], rss_kib: int) -> None:
    print(f"\n{title} (RSS after the runs: {rss_kib / 1024:.1f} MiB)")
    print("| clients | req/s | p50 | p99 |")
    print("|---:|---:|---:|---:|")
    for clients, rate, p50, p99 in rows:
        print(f"| {clients} | {rate:,.0f} | {p50} | {p99} |")


def bench_exporter(args: argparse.Namespace, extra: list[str], scheme: str, headers: list[str], title: str) -> None:
    argv, _ = data_args()
    exporter = start_exporter([*argv, *extra])
    try:
        host_port = exporter.address
        context = None
        if scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        auth = headers[0].split(": ", 1)[1] if headers else ""
        for _ in range(200):
            try:
                scrape_many(host_port, 1, context, auth)
                break
            except AssertionError:
                time.sleep(0.05)
        rows = [
            (clients, *wrk(f"{scheme}://{host_port}/metrics", clients, args.duration, headers)) for clients in CLIENTS
        ]
        table(title, rows, status_kib(exporter.process.pid))
    finally:
        exporter.stop()


def bench_reference(args: argparse.Namespace, payload: Path, tls: tuple[Path, Path] | None, title: str) -> None:
    port = free_port()
    command = [sys.executable, "-c", REFERENCE_SERVER, str(payload), str(port)]
    if tls is not None:
        command += [str(tls[0]), str(tls[1])]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        scheme = "https" if tls else "http"
        rows = [
            (clients, *wrk(f"{scheme}://127.0.0.1:{port}/metrics", clients, args.duration, [])) for clients in CLIENTS
        ]
        table(title, rows, status_kib(server.pid))
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20_000)
    args = parser.parse_args()
    argv, source = data_args()
    print(f"source: {source}; python {platform.python_version()}; {os.cpu_count()} CPUs; {platform.machine()}")

    exporter = start_exporter(argv)
    try:
        body = wait_for_data(exporter)
        pid = exporter.process.pid
        scrape_many(exporter.address, 500)
        rest = status_kib(pid)
        elapsed = scrape_many(exporter.address, args.scrapes)
        after = status_kib(pid)
        print(
            f"body {len(body)} bytes. {args.scrapes} sequential keep-alive scrapes in {elapsed:.1f} s: "
            f"RSS at rest {rest / 1024:.1f} MiB -> {after / 1024:.1f} MiB after (growth {(after - rest) / 1024:+.2f} "
            f"MiB), open fds {len(os.listdir(f'/proc/{pid}/fd'))}"
        )
    finally:
        exporter.stop()
    if not shutil.which("wrk"):
        print("wrk not found: skipping the throughput tables")
        return

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        cert, key = make_pki(directory)
        payload = directory / "payload.txt"
        payload.write_text(body)
        basic = "Authorization: Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        bench_exporter(args, [], "http", [], "nvidia_gpu_exporter, plain HTTP")
        tls_config = web_config(directory, cert, key, auth=False)
        bench_exporter(args, [f"--web.config.file={tls_config}"], "https", [], "nvidia_gpu_exporter, TLS")
        auth_config = web_config(directory, cert, key, auth=True)
        bench_exporter(
            args, [f"--web.config.file={auth_config}"], "https", [basic], "nvidia_gpu_exporter, TLS + basic auth"
        )
        bench_reference(args, payload, None, "prometheus_client start_http_server, plain HTTP, same payload")
        bench_reference(args, payload, (cert, key), "prometheus_client start_http_server, TLS, same payload")


if __name__ == "__main__":
    main()
