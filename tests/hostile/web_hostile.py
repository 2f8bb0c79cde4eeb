"""Helpers of the hostile-client tests (``test_web_*.py`` here): the exporter as a child process on a socket
this process bound (so it may log at any level), its RSS from ``/proc``, and raw loopback clients.

The child's open-file limit is set in the child only (a launcher lowers ``RLIMIT_NOFILE`` before it execs the
exporter); this test process keeps its own.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from async_helpers import bounded
from harness import FIXTURE_CAPTURES, REPO, fake_smi_command, http_get
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.security import Security
from nvidia_gpu_exporter.httpserver.server import bind_socket
from nvidia_gpu_exporter.web.server import WebServer
from nvidia_gpu_exporter.web.settings import WebSettings
from polling import wait_until

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
ONE_GPU = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"  # one GPU: --gpus can replicate it
# As systemd passes a listener: fd 3 plus LISTEN_PID/LISTEN_FDS; optionally a lower open-file limit first.
LAUNCHER = (
    "import os, resource, sys\n"
    "nofile = int(sys.argv[2])\n"
    "if nofile:\n"
    "    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
    "os.dup2(int(sys.argv[1]), 3)\n"
    "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1')\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


@dataclass
class Child:
    """An exporter child process serving on ``port``; its stderr is collected line by line."""

    process: subprocess.Popen[bytes]
    port: int
    lines: list[str] = field(default_factory=list)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc/<pid>/status")

    def get(self, path: str = "/metrics", timeout: float = 30.0) -> tuple[int, bytes]:
        response = http_get(f"http://127.0.0.1:{self.port}{path}", timeout=timeout)
        return response.status, response.body

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


@contextmanager
def exporter_child(args: Sequence[str], *, nofile: int = 0) -> Iterator[Child]:
    """The exporter (exec backend on the fake nvidia-smi unless ``args`` say otherwise), stopped afterwards."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    argv = [sys.executable, "-m", "nvidia_gpu_exporter", "--web.systemd-socket", *args]
    if not any(arg.startswith(("--nvidia-smi-command", "--collect.backend")) for arg in args):
        argv += ["--nvidia-smi-command", fake_smi_command(CAPTURE)]
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(listener.fileno()), str(nofile), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
        pass_fds=(listener.fileno(),),
    )
    child = Child(process, listener.getsockname()[1])
    listener.close()

    def pump() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            child.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_until(lambda: child.get("/-/healthy", timeout=5)[0] == 200, "the exporter to answer", ignoring=(OSError,))
        yield child
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(10)


def send_request(sock: socket.socket, path: str = "/metrics") -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: exporter\r\n\r\n".encode("ascii"))


def read_response(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    """What the server sends until it closes the connection (or ``limit`` bytes), over at most 10 s."""
    data = b""
    deadline = time.monotonic() + 10
    while len(data) < limit and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def connect_many(port: int, count: int) -> list[socket.socket]:
    """``count`` connections started at once (non-blocking: none waits for the server to accept it)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def non_reading_client(port: int, path: str = "/metrics") -> socket.socket:
    """A connection that asks for ``path`` and never reads: a 4 KiB receive buffer, so the answer stays with the
    server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    send_request(sock, path)
    return sock


def web_settings(**overrides: object) -> WebSettings:
    """Settings of an in-process server: the defaults' timeouts unless ``overrides`` say otherwise."""
    values: dict[str, object] = {
        "telemetry_path": "/metrics",
        "max_requests": 0,
        "timeout_offset_seconds": 0.5,
        "idle_timeout_seconds": 60.0,
        "header_timeout_seconds": 10.0,
        "write_timeout_seconds": 15.0,
        "enable_pprof": False,
    }
    values.update(overrides)
    return WebSettings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def serving(app: App, settings: WebSettings, tls: ssl.SSLContext | None = None) -> AsyncIterator[WebServer]:
    """The real ``WebServer`` for ``app`` on a loopback port-0 socket, over TLS with a ``tls`` context."""
    server = WebServer(app, settings)
    server.security.ssl_context = tls
    await server.start([bind_socket("127.0.0.1:0")])
    try:
        yield server
    finally:
        await bounded(server.stop())


@asynccontextmanager
async def serving_hello(security: Security) -> AsyncIterator[str]:
    """A ``GET /`` answering ``hello`` behind ``security`` (its auth, rate limit and TLS), on a loopback port-0
    socket; yields the URL (``https://`` when ``security`` serves TLS)."""

    async def hello(_: Request) -> Response:
        return Response(text="hello\n")

    app = App()
    app.add_get("/", hello)
    security.install(app)
    server = WebServer(app, WebSettings("/metrics", 0, 0.5, 60.0, 5.0, 0.0, False), security)
    await server.start([bind_socket("127.0.0.1:0")])
    scheme = "https" if security.tls_enabled else "http"
    try:
        yield f"{scheme}://{server.addresses[0]}/"
    finally:
        await bounded(server.stop())


async def open_client(
    server: WebServer, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.addresses[0].rsplit(":", 1)
    return await bounded(asyncio.open_connection(host, int(port), ssl=tls))


async def ask(writer: asyncio.StreamWriter, path: str, version: str = "HTTP/1.1") -> None:
    writer.write(f"GET {path} {version}\r\nHost: exporter\r\n\r\n".encode("ascii"))
    await bounded(writer.drain())


async def read_head(reader: asyncio.StreamReader) -> bytes:
    return await bounded(reader.readuntil(b"\r\n\r\n"))


def content_length(head: bytes) -> int:
    return next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )


# A flood of idle connections from a process of its own, so that this one needs no more descriptors: it raises
# its own soft limit, opens argv[2] connections to port argv[1], says how many on stdout, holds them until its
# stdin closes.
FLOOD = (
    "import resource, socket, sys\n"
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "want = int(sys.argv[2]) + 64\n"
    "if soft < want:\n"
    "    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))\n"
    "held = []\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    sock = socket.socket()\n"
    "    sock.setblocking(False)\n"
    "    sock.connect_ex(('127.0.0.1', int(sys.argv[1])))\n"
    "    held.append(sock)\n"
    "print(len(held), flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def connection_flood(port: int, count: int) -> Iterator[int]:
    """``count`` idle connections to ``port`` held by a child process; yields how many it opened."""
    process = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(port), str(count)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        yield int(process.stdout.readline() or 0)
    finally:
        process.stdin.close()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
