"""Floods of stalled connections against the exporter (issue 26): what it holds, and whether it keeps answering.

For each attack a child process opens ``--connections`` connections to the exporter (demo backend; over TLS for the
handshake attacks) and holds them, each stalled where the attack says: after one request line and a header line
(``head``), silent after connecting (``silent``), after the start of a TLS ClientHello (``handshake``), or silent on
the TLS port (``tls-silent``), or after a whole ClientHello (``hello``, answered by the server's first flight). The
attacker reopens what the exporter evicts, as fast as it can, for ``--seconds``. Meanwhile a prober asks
``/-/healthy`` on a new connection and a keep-alive client scrapes ``/metrics`` (as Prometheus does), each every 0.2
s. Printed per attack: the exporter's RSS and open fds at rest, at their peak and 15 s after the attack, the probes'
and scrapes' worst latency and failures, and the evictions. Linux only.

With ``--per-connection`` it measures instead what one stalled connection costs: ``--connections`` of them held
under a cap above that count (nothing evicted), the exporter's RSS growth divided by their number, ``--rounds``
times per attack on a fresh exporter.

With ``--go-binary PATH`` each measurement is made on the Go exporter too, right after this one's, the same
attack and clients (the Go exporter has no connection cap: ``--max-connections`` is this exporter's only).

    python benchmarks/bench_stalls.py [--connections 1000] [--seconds 10] [--max-connections 256] [--go-binary PATH]
    python benchmarks/bench_stalls.py --per-connection [--connections 500] [--rounds 2] [--go-binary PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import make_pki, status_kib, web_config
from harness import start_exporter

# What each attack's connections send, and whether the exporter serves TLS for it.
STALLS = {
    "head": (b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n", False),
    "silent": (b"", False),
    "handshake": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", True),  # a ClientHello's first headers
    "tls-silent": (b"", True),
    "hello": (b"", True),  # stands for a whole ClientHello, made at run time (client_hello())
}


def client_hello() -> bytes:
    """A whole TLS ClientHello, as Python's client sends it first."""
    context = ssl.create_default_context()
    client = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="exporter")
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        client.do_handshake()
    return outgoing.read()


def stall_bytes(attack: str) -> bytes:
    return client_hello() if attack == "hello" else STALLS[attack][0]


# The attacker: holds argv[3] connections to port argv[1], each sent argv[2] (hex), reopening closed ones, until
# its stdin closes.
ATTACKER = """\
import resource, selectors, socket, sys, threading
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(int(sys.argv[3]) + 256, hard), hard))
port, stall, count = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), int(sys.argv[3])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
selector = selectors.DefaultSelector()
def open_one():
    sock = socket.create_connection(("127.0.0.1", port))
    if stall:
        sock.sendall(stall)
    sock.setblocking(False)
    selector.register(sock, selectors.EVENT_READ)
for _ in range(count):
    open_one()
print("ready", flush=True)
while not stop.is_set():
    for key, _ in selector.select(0.05):
        try:
            data = key.fileobj.recv(65536)
        except OSError:
            data = b""
        if not data:
            selector.unregister(key.fileobj)
            key.fileobj.close()
            try:
                open_one()
            except OSError:
                pass
"""


def listen_overflows() -> int:
    """The machine's count of connections dropped at a full listen queue (``TcpExtListenOverflows``)."""
    lines = Path("/proc/net/netstat").read_text(encoding="ascii").splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:], strict=True))["ListenOverflows"])
    return 0


def resident_kinds(pid: int) -> dict[str, int]:
    """The process's resident KiB by kind of mapping: the C heap's ``[heap]`` (glibc's main arena), anonymous
    mappings (CPython's 1 MiB object arenas, other threads' malloc arenas, large blocks), files (code)."""
    kinds = {"[heap]": 0, "anonymous": 0, "files": 0, "other": 0}
    kind = "other"
    for line in Path(f"/proc/{pid}/smaps").read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            name = fields[5] if len(fields) > 5 else ""
            kind = "anonymous" if not name else "[heap]" if name == "[heap]" else "files" if name[0] == "/" else "other"
        elif fields[:1] == ["Rss:"]:
            kinds[kind] += int(fields[1])
    return kinds


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Clients:
    """The prober (a new connection per ``/-/healthy``) and the keep-alive scraper of one exporter."""

    def __init__(self, address: str, tls: ssl.SSLContext | None) -> None:
        host, port = address.rsplit(":", 1)
        self.host, self.port, self.tls = host, int(port), tls
        self.scraper = self.connection()

    def connection(self) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=10, context=self.tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    @staticmethod
    def get(connection: http.client.HTTPConnection, path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(response.status)
        return time.perf_counter() - started, body

    def probe(self) -> float:
        prober = self.connection()
        try:
            return self.get(prober, "/-/healthy")[0]
        finally:
            prober.close()

    def scrape(self) -> float:
        try:
            return self.get(self.scraper, "/metrics")[0]
        except (OSError, RuntimeError, http.client.HTTPException):
            self.scraper.close()  # reconnects at the next request
            raise


@dataclass(frozen=True)
class Outcome:
    """What one attack did to the exporter: RSS in KiB and open fds at rest, at their peak and 15 s after; the
    worst probe and scrape in seconds; the probes and scrapes that failed; connections evicted; SYNs the kernel
    dropped at a full listen queue meanwhile (the machine's count: each costs its client a 1-s retransmission)."""

    rss_kib: tuple[int, int, int]
    fds: tuple[int, int, int]
    worst_probe: float
    worst_scrape: float
    failures: int
    evicted: str
    listen_overflows: int
    grown_after_kib: dict[str, int]  # resident_kinds() 15 s after, less at rest

    def row(self, attack: str) -> str:
        rest, peak, after = (kib / 1024 for kib in self.rss_kib)
        return (
            f"| {attack} | {rest:.1f} / {peak:.1f} / {after:.1f} MiB | {' / '.join(map(str, self.fds))} "
            f"| {self.worst_probe * 1000:.0f} ms | {self.worst_scrape * 1000:.0f} ms "
            f"| {self.failures} | {self.evicted} | {self.listen_overflows} |"
        )


class Target:
    """The server under attack: this checkout's exporter (demo backend), or with ``go_binary`` the Go exporter on a
    replayed nvidia-smi (so that its scrapes time the exporter, not a fake's Python start)."""

    def __init__(self, go_binary: str | None = None) -> None:
        self.go_binary = go_binary
        self._smi: str | None = None

    def start(self, max_connections: int, config: Path | None) -> Stoppable:
        tls_args = [f"--web.config.file={config}"] if config is not None else []
        if self.go_binary is None:
            return start_exporter(["--collect.backend=demo", f"--web.max-connections={max_connections}", *tls_args])
        from bench_pipeline import go_launcher, moving_smi  # only for the Go side

        launch = go_launcher(self.go_binary)
        if self._smi is None:
            self._smi = moving_smi(Path(tempfile.mkdtemp(prefix="bench-stalls-go-")), 2, 1, launch)
        return launch(["--nvidia-smi-command", self._smi, *tls_args])


class Stoppable(Protocol):
    process: subprocess.Popen[bytes]
    address: str

    def stop(self) -> object: ...


@dataclass
class Attack:
    """One attack under way: the exporter's clients and pid, its RSS (KiB) and open fds before the attacker
    started, and the attacker."""

    clients: Clients
    pid: int
    rest: tuple[int, int]
    rest_kinds: dict[str, int]
    attacker: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop the attacker: its connections close."""
        if self.attacker.stdin is not None and not self.attacker.stdin.closed:
            self.attacker.stdin.close()
        self.attacker.wait(30)

    def measure(self) -> tuple[int, int]:
        return status_kib(self.pid), open_fds(self.pid)


@contextlib.contextmanager
def attacking(target: Target, attack: str, connections: int, max_connections: int, config: Path) -> Iterator[Attack]:
    """A fresh exporter (serving TLS with ``config`` for the TLS attacks), scraped once and at rest for 1 s, then
    ``connections`` of ``attack``'s stalled connections held against it until the block ends (once all are open
    where the attacker's "ready" has been read from its stdout)."""
    tls = STALLS[attack][1]
    exporter = target.start(max_connections, config if tls else None)
    attack_run: Attack | None = None
    try:
        context = None
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        clients = Clients(exporter.address, context)
        pid = exporter.process.pid
        clients.scrape()
        time.sleep(1)
        rest, rest_kinds = (status_kib(pid), open_fds(pid)), resident_kinds(pid)
        attacker = subprocess.Popen(
            [sys.executable, "-c", ATTACKER, str(clients.port), stall_bytes(attack).hex(), str(connections)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        attack_run = Attack(clients, pid, rest, rest_kinds, attacker)
        yield attack_run
    finally:
        if attack_run is not None:
            attack_run.stop()
        exporter.stop()


def run_attack(
    attack: str, connections: int, seconds: float, max_connections: int, config: Path, *, target: Target | None = None
) -> Outcome:
    """One attack against a fresh exporter (``config``: a web config serving TLS, for the TLS attacks)."""
    with attacking(target or Target(), attack, connections, max_connections, config) as run:
        clients = run.clients
        worst = {"probe": 0.0, "scrape": 0.0}
        failures = 0
        peak = run.rest
        overflows = listen_overflows()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, measure in (("probe", clients.probe), ("scrape", clients.scrape)):
                try:
                    worst[name] = max(worst[name], measure())
                except (OSError, RuntimeError, http.client.HTTPException):
                    failures += 1
            now = run.measure()
            peak = (max(peak[0], now[0]), max(peak[1], now[1]))
            time.sleep(0.2)
        overflows = listen_overflows() - overflows
        run.stop()
        time.sleep(15)
        after, after_kinds = run.measure(), resident_kinds(run.pid)
        body = clients.get(clients.scraper, "/metrics")[1].decode()
        evicted = re.search(r'http_connections_closed_total\{reason="evicted"\} (\S+)', body)
        return Outcome(
            (run.rest[0], peak[0], after[0]),
            (run.rest[1], peak[1], after[1]),
            worst["probe"],
            worst["scrape"],
            failures,
            evicted.group(1) if evicted else "?",
            overflows,
            {kind: after_kinds[kind] - run.rest_kinds[kind] for kind in after_kinds},
        )


def per_connection_kib(attack: str, connections: int, config: Path, target: Target | None = None) -> float:
    """The exporter's RSS growth per connection while ``connections`` of them are held stalled by ``attack``,
    none evicted (the cap is set above their count), measured 1 s after the last one connected."""
    with attacking(target or Target(), attack, connections, connections + 64, config) as run:
        assert run.attacker.stdout is not None
        run.attacker.stdout.readline()  # "ready": every connection is open
        time.sleep(1)
        held, grown = open_fds(run.pid), status_kib(run.pid) - run.rest[0]
    if held < connections:
        raise RuntimeError(f"only {held} fds open in the exporter for {connections} connections")
    return grown / connections


def tls_config(directory: Path) -> Path:
    """A web config serving TLS with a fresh certificate, in ``directory``."""
    cert, key = make_pki(directory)
    return web_config(directory, cert, key, auth=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument("--attacks", default=",".join(STALLS))
    parser.add_argument("--per-connection", action="store_true", help="measure RSS per stalled connection instead")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--where", action="store_true", help="also where the RSS that stays 15 s after lies")
    parser.add_argument("--go-binary", metavar="PATH", help="also attack the Go exporter, after this one each time")
    args = parser.parse_args()
    config = tls_config(Path(tempfile.mkdtemp(prefix="bench-stalls-")))
    targets = {"this exporter": Target()}
    if args.go_binary is not None:
        targets["Go exporter"] = Target(args.go_binary)
    if args.per_connection:
        print(f"RSS per stalled connection, {args.connections} held, KiB (rounds)")
        for attack in args.attacks.split(","):
            for name, target in targets.items():
                rounds = [per_connection_kib(attack, args.connections, config, target) for _ in range(args.rounds)]
                print(f"| {attack} | {name} | {' / '.join(f'{kib:.1f}' for kib in rounds)} |", flush=True)
        return
    print(
        f"{args.connections} stalled connections for {args.seconds:g} s, --web.max-connections={args.max_connections}"
    )
    print(
        "| attack | server | RSS rest / peak / 15 s after | fds rest / peak / after | probe worst | scrape worst |",
        end="",
    )
    print(" failures | evicted | listen overflows |\n|---|---|---|---|---:|---:|---:|---:|---:|")
    for attack in args.attacks.split(","):
        for name, target in targets.items():
            outcome = run_attack(attack, args.connections, args.seconds, args.max_connections, config, target=target)
            print(outcome.row(f"{attack} | {name}"), flush=True)
            if args.where:
                grown = ", ".join(f"{kind} {kib / 1024:+.1f}" for kind, kib in outcome.grown_after_kib.items())
                print(f"<!-- {attack}, {name}: 15 s after, MiB over rest: {grown} -->", flush=True)


if __name__ == "__main__":
    main()
