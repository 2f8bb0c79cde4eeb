"""The exporter's footprint (issue 16): RSS at rest per configuration, where it goes by import, startup to the
first successful scrape, CPU and RSS as the GPU count grows, and RSS over many cached scrapes.

Every figure is the real exporter (``python -m nvidia_gpu_exporter`` on 127.0.0.1, port 0) read from
``/proc/<pid>``: RSS is ``VmRSS``, CPU is the exporter's own ``utime + stime`` (its nvidia-smi children's
CPU is theirs, not counted). The exec backend runs the project's fake nvidia-smi (a Python process per
query) on ``tests/fixtures/captures/fixture-windows-1gpu.txt`` replicated with ``--gpus N``; the nvml
backend loads the fake libnvidia-ml (``tests/fakenvml/fake_nvml.c``, compiled here with room for 256 GPUs)
through ``LD_LIBRARY_PATH``, as ``tests/test_nvml_e2e.py`` does.

The import breakdown runs the exec configuration once more with a meta-path hook that reads RSS around each
module's loading (``create_module``, which maps an extension's shared library, and ``exec_module``) and
charges each module what it added itself, as ``-X importtime``'s "self" column does for time.

Every child (the exporter, the fake nvidia-smi) reads its modules' bytecode from a cache the first start
writes (``PYTHONPYCACHEPREFIX`` in a temporary directory, after one unmeasured start of each configuration),
as an installed exporter does: pip compiles the wheel's modules at install and the container image runs
``compileall``. A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` compiles every module of
ours from source at every start instead (several times the import time: ``--from-source`` measures that).

    python benchmarks/bench_footprint.py [--rest 2] [--scrapes 20000] [--skip-scaling] [--from-source]
    python benchmarks/bench_footprint.py --startup-only 7 [--baseline SRC] [--go-binary PATH]   # only the startup
    python benchmarks/bench_footprint.py --rest-only 5 [--baseline SRC] [--go-binary PATH]   # RSS at rest, TLS or not
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_hooks import LOADER_PROXY, WRAPPING_FINDER
from nvml_fake import compile_fake_nvml, nvml_env

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "captures" / "fixture-windows-1gpu.txt"
LISTENING = re.compile(r'msg="Listening on" address=(\S+)')
TICKS = os.sysconf("SC_CLK_TCK")
STARTUP_SECONDS = 60.0
GPU_COUNTS_EXEC = (1, 8, 64, 255)  # the fake nvidia-smi replicates into at most 255 GPUs (the PCI bus byte)
GPU_COUNTS_NVML = (1, 8, 64, 256)

# Run inside the exporter child: charge each module the RSS its own loading added, then run the exporter.
IMPORT_HOOK = (
    r"""
import _thread, atexit, json, os, sys
_statm = open("/proc/self/statm", "rb", buffering=0)
_page = os.sysconf("SC_PAGE_SIZE")
def _rss():
    _statm.seek(0)
    return int(_statm.read().split()[1]) * _page
_start = _rss()
_stacks = {}  # a thread's own: the exporter imports the serving modules on a thread as main imports too
_self = {}
def _measured(name, function, *args):
    stack = _stacks.setdefault(_thread.get_ident(), [])
    stack.append(0)
    before = _rss()
    try:
        return function(*args)
    finally:
        total = _rss() - before
        children = stack.pop()
        _self[name] = _self.get(name, 0) + total - children
        if stack:
            stack[-1] += total
"""
    + LOADER_PROXY
    + r"""
class _Loader(_LoaderProxy):
    def create_module(self, spec):
        return _measured(self._name, self._loader.create_module, spec)
    def exec_module(self, module):
        return _measured(self._name, self._loader.exec_module, module)
"""
    + WRAPPING_FINDER
    + r"""
def _dump():
    with open(os.environ["FOOTPRINT_IMPORTS"], "w") as out:
        json.dump({"start": _start, "end": _rss(), "self": _self}, out)
atexit.register(_dump)
from nvidia_gpu_exporter.cli import main
sys.exit(main())
"""
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat(5))


@dataclass
class Client:
    """Where to scrape and how (plain or TLS, with or without basic auth)."""

    tls: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def connect(self, address: str) -> http.client.HTTPConnection:
        host, port = address.rsplit(":", 1)
        if self.tls is None:
            return http.client.HTTPConnection(host, int(port), timeout=60)
        return http.client.HTTPSConnection(host, int(port), timeout=60, context=self.tls)


@dataclass
class Exporter:
    process: subprocess.Popen[bytes]
    started: float
    listening: float
    address: str
    client: Client
    log: list[str]

    def get(self, connection: http.client.HTTPConnection, path: str = "/metrics") -> tuple[int, bytes]:
        connection.request("GET", path, headers={"Accept-Encoding": "gzip", **self.client.headers})
        response = connection.getresponse()
        body = response.read()
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return response.status, body

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    client: Client | None = None,
    python_args: Sequence[str] = ("-m", "nvidia_gpu_exporter"),
) -> Exporter:
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, *python_args, "--web.listen-address=127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    lines: list[str] = []
    address: list[str] = []
    found = threading.Event()

    def pump() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            match = LISTENING.search(line)
            if match and not address:
                address.append(match.group(1))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    found.wait(STARTUP_SECONDS)
    if not address:
        process.kill()
        process.wait()
        sys.exit("the exporter did not start:\n" + "\n".join(lines[-20:]))
    return Exporter(process, started, time.monotonic(), address[0], client or Client(), lines)


def first_scrape(exporter: Exporter, connection: http.client.HTTPConnection) -> tuple[float, bytes]:
    """Seconds from the exporter's start to its first 200 on /metrics, and that body."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        status, body = exporter.get(connection)
        if status == 200 and b"nvidia_smi_" in body:
            return time.monotonic() - exporter.started, body
        time.sleep(0.05)
    sys.exit("no successful scrape:\n" + "\n".join(exporter.log[-20:]))


def series(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


# -- the configurations -------------------------------------------------------------------------------------


def fake_smi(gpus: int = 1) -> str:
    return f"{sys.executable} -m nvidia_gpu_exporter.fakesmi --capture {CAPTURE} --gpus {gpus}"


def tls_auth(directory: Path) -> tuple[list[str], Client]:
    """A trustme certificate and one bcrypt (cost 10) user in a --web.config.file."""
    import bcrypt
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(directory / "key.pem"))
    digest = bcrypt.hashpw(b"secret", bcrypt.gensalt(10)).decode()
    config = directory / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {directory / 'cert.pem'}\n  key_file: {directory / 'key.pem'}\n"
        f"basic_auth_users:\n  bench: '{digest}'\n"
    )
    context = ssl.create_default_context()
    ca.configure_trust(context)
    import base64

    token = base64.b64encode(b"bench:secret").decode()
    return [f"--web.config.file={config}"], Client(context, {"Authorization": f"Basic {token}"})


@dataclass
class Scenario:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    client: Client = field(default_factory=Client)


def scenarios(directory: Path, library: Path) -> list[Scenario]:
    tls_args, tls_client = tls_auth(directory)
    exec_args = ["--nvidia-smi-command", fake_smi()]
    return [
        Scenario("exec (fake nvidia-smi), plain HTTP", exec_args),
        Scenario("exec, TLS + basic auth", [*exec_args, *tls_args], client=tls_client),
        Scenario("nvml (fake libnvidia-ml, 8 GPUs)", ["--collect.backend=nvml"], nvml_env(library)),
        Scenario("demo", ["--collect.backend=demo"]),
    ]


# -- the measurements ---------------------------------------------------------------------------------------


def at_rest(scenario: Scenario, rest: float) -> tuple[float, float, float]:
    """(seconds to listening, seconds to the first successful scrape, RSS MiB after it and `rest` idle)."""
    exporter = start(scenario.args, scenario.env, scenario.client)
    try:
        connection = exporter.client.connect(exporter.address)
        took, _ = first_scrape(exporter, connection)
        connection.close()
        time.sleep(rest)
        return exporter.listening - exporter.started, took, rss_mib(exporter.process.pid)
    finally:
        exporter.stop()


def group(module: str) -> str:
    top = module.split(".", maxsplit=1)[0]
    if top in {"pynvml", "_ctypes", "ctypes"}:
        return "pynvml + ctypes"
    if top in {"ssl", "_ssl"}:
        return "ssl + _ssl"
    if top in {"_hashlib", "hashlib", "_blake2", "hmac", "secrets", "_sha512", "_md5", "_sha1", "_sha256"}:
        return "hashlib, hmac, secrets"
    if top in {"email", "http", "urllib"}:
        return "email, http, urllib"
    return top


def import_breakdown(scenario: Scenario, directory: Path, top: int) -> None:
    dump = directory / "imports.json"
    env = {**scenario.env, "FOOTPRINT_IMPORTS": str(dump)}
    exporter = start(scenario.args, env, scenario.client, python_args=("-c", IMPORT_HOOK))
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        connection.close()
        rss = rss_mib(exporter.process.pid)
    finally:
        exporter.stop()
    data = json.loads(dump.read_text())
    groups: dict[str, list[float]] = {}
    for module, added in data["self"].items():
        entry = groups.setdefault(group(module), [0.0, 0])
        entry[0] += added / 2**20
        entry[1] += 1
    print(f"\n### Import breakdown: {scenario.name}\n")
    print(
        f"Interpreter before any import of ours: {data['start'] / 2**20:.1f} MiB; after the first scrape "
        f"{rss:.1f} MiB; {len(data['self'])} modules loaded. RSS each package added while loading:\n"
    )
    print("| package | modules | RSS added |")
    print("|---|---:|---:|")
    ranked = sorted(groups.items(), key=lambda item: -item[1][0])
    for name, (mib, count) in ranked[:top]:
        print(f"| {name} | {int(count)} | {mib:.2f} MiB |")
    rest = sum(mib for _, (mib, _) in ranked[top:])
    print(f"| {len(ranked) - top} other packages | | {rest:.2f} MiB |")
    print(f"| **all imports** | {len(data['self'])} | {sum(mib for mib, _ in groups.values()):.2f} MiB |")


def cpu_per_scrape(exporter: Exporter, connection: http.client.HTTPConnection, count: int) -> float:
    """Milliseconds of exporter CPU per scrape over `count` sequential keep-alive scrapes."""
    pid = exporter.process.pid
    before = cpu_seconds(pid)
    for _ in range(count):
        status, _ = exporter.get(connection)
        assert status == 200, status
    return (cpu_seconds(pid) - before) / count * 1000


@dataclass
class ScalingRow:
    backend: str
    gpus: int
    series: int
    body_kib: float
    collection_ms: float
    cached_ms: float
    rss_mib: float


def scaling(library: Path, collections: int, cached: int) -> list[ScalingRow]:
    rows = []
    for backend, counts in (("exec", GPU_COUNTS_EXEC), ("nvml", GPU_COUNTS_NVML)):
        for gpus in counts:
            if backend == "exec":
                args, env = ["--nvidia-smi-command", fake_smi(gpus)], {}
            else:
                args, env = ["--collect.backend=nvml"], nvml_env(library, gpus)
            exporter = start(args, env)  # a collection per scrape
            try:
                connection = exporter.client.connect(exporter.address)
                _, body = first_scrape(exporter, connection)
                per_collection = cpu_per_scrape(exporter, connection, collections)
            finally:
                exporter.stop()
            exporter = start([*args, "--collect.interval=30s", "--web.max-requests=0"], env)  # cached scrapes
            try:
                connection = exporter.client.connect(exporter.address)
                first_scrape(exporter, connection)
                cpu_per_scrape(exporter, connection, 100)  # warm-up
                per_cached = cpu_per_scrape(exporter, connection, cached)
                rss = rss_mib(exporter.process.pid)
            finally:
                exporter.stop()
            rows.append(ScalingRow(backend, gpus, series(body), len(body) / 1024, per_collection, per_cached, rss))
    return rows


def print_scaling(rows: list[ScalingRow], collections: int, cached: int) -> None:
    print(f"\n### Scaling ({collections} collections, {cached} cached scrapes per row)\n")
    print("| backend | GPUs | series | body | CPU per collection | CPU per cached scrape | RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.backend} | {row.gpus} | {row.series:,} | {row.body_kib:.0f} KiB | {row.collection_ms:.2f} ms | "
            f"{row.cached_ms:.3f} ms | {row.rss_mib:.1f} MiB |"
        )
    for backend in ("exec", "nvml"):
        ours = [row for row in rows if row.backend == backend]
        low, high = ours[0], ours[-1]
        gpus = high.gpus - low.gpus
        count = high.series - low.series
        print(
            f"\n{backend}, from {low.gpus} to {high.gpus} GPUs: per GPU {count / gpus:.0f} series, "
            f"{(high.collection_ms - low.collection_ms) / gpus:.3f} ms CPU per collection, "
            f"{(high.cached_ms - low.cached_ms) / gpus * 1000:.2f} µs per cached scrape, "
            f"{(high.rss_mib - low.rss_mib) / gpus * 1024:.0f} KiB RSS; per series "
            f"{(high.collection_ms - low.collection_ms) / count * 1000:.2f} µs per collection, "
            f"{(high.cached_ms - low.cached_ms) / count * 1000:.3f} µs per cached scrape, "
            f"{(high.rss_mib - low.rss_mib) / count * 1024:.2f} KiB RSS."
        )


def flat(scrapes: int) -> None:
    """RSS over many cached scrapes of the exec backend (8 GPUs), sampled every tenth of the run."""
    exporter = start(["--nvidia-smi-command", fake_smi(8), "--collect.interval=30s", "--web.max-requests=0"])
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        for _ in range(500):
            exporter.get(connection)
        pid = exporter.process.pid
        samples = [rss_mib(pid)]
        started = time.monotonic()
        for index in range(1, scrapes + 1):
            status, _ = exporter.get(connection)
            assert status == 200, status
            if index % (scrapes // 10) == 0:
                samples.append(rss_mib(pid))
        took = time.monotonic() - started
    finally:
        exporter.stop()
    print(f"\n### RSS over {scrapes:,} cached keep-alive scrapes (exec, 8 GPUs, after 500 warm-up; {took:.1f} s)\n")
    print(" → ".join(f"{sample:.1f}" for sample in samples) + " MiB")
    print(f"\ngrowth {samples[-1] - samples[0]:+.2f} MiB; over the second half {samples[-1] - samples[5]:+.2f} MiB")


def wall(command: Sequence[str]) -> float:
    started = time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=REPO)
    return time.monotonic() - started


def median(values: Sequence[float]) -> float:
    return sorted(values)[len(values) // 2]


def use_bytecode(directory: Path) -> None:
    """Children read (and the first writes) bytecode under ``directory``, whatever ``PYTHONDONTWRITEBYTECODE``
    says here: what an installed exporter does (see the module's docstring)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(directory / "pycache")


def bytecode_mode() -> str:
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return "bytecode cached, as installed"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "compiled from source at every start (PYTHONDONTWRITEBYTECODE=1)"
    return "bytecode beside the sources (__pycache__)"


# nvidia-smi runs one after the other from the start to the first scrape's answer: ours `--help-query-gpu`,
# the mapping query (with `--version` beside them) and the scrape's; the Go exporter runs `--version` after the
# other two (BENCHMARKS.md, "Start to the first scrape").
SEQUENTIAL_RUNS = {"python": 3, "go": 4}

# What a start imports, timed in CPU seconds (on a shared machine the wall time of the same import varies
# twofold): with ssl kept out, as a plain start does, where the tree can; with what serve() imports beside the
# first nvidia-smi run, where the tree defers it (app.import_serving_modules).
IMPORT_TIMER = """
import time; t = time.process_time()
try:
    from nvidia_gpu_exporter.support.sslgate import keep_ssl_out
except ImportError:
    pass
else:
    keep_ssl_out()
import nvidia_gpu_exporter.cli, nvidia_gpu_exporter.app
before = time.process_time() - t
getattr(nvidia_gpu_exporter.app, "import_serving_modules", lambda: None)()
print(before, time.process_time() - t)
"""


@dataclass
class Side:
    """One exporter measured by :func:`startup` and :func:`rest_side_by_side`: this checkout, another checkout's
    ``src/`` or the Go binary."""

    name: str
    launch: Callable[[list[str]], Exporter]
    env: dict[str, str] = field(default_factory=dict)  # a Python side's PYTHONPATH (the fake runs from it too)
    kind: str = "python"
    imports: list[tuple[float, float]] = field(default_factory=list)
    fake: list[float] = field(default_factory=list)
    listening: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def startup_sides(baseline: str | None, go_binary: str | None, client: Client | None = None) -> list[Side]:
    sides = [Side("this checkout", lambda args: start(args, client=client))]
    if baseline is not None:
        env = {"PYTHONPATH": str(Path(baseline).resolve())}
        sides.append(Side(f"baseline {baseline}", lambda args: start(args, env, client), env))
    if go_binary is not None:
        from bench_pipeline import go_launcher  # here: bench_pipeline imports this module

        sides.append(Side("Go exporter", go_launcher(go_binary, client=client), kind="go"))
    return sides


def measure_start(side: Side) -> None:
    """One start of ``side`` to its first successful scrape, just after one run of the fake on its own (the
    machine's load as the start meets it), and (Python) the imports in a fresh interpreter."""
    env = {**os.environ, **side.env}
    if side.kind == "python":
        output = subprocess.check_output([sys.executable, "-c", IMPORT_TIMER], cwd=REPO, env=env)
        before, everything = (float(value) for value in output.split())
        side.imports.append((before, everything))
    started = time.monotonic()
    subprocess.run([*fake_smi().split(), "--version"], stdout=subprocess.DEVNULL, check=True, cwd=REPO, env=env)
    side.fake.append(time.monotonic() - started)
    exporter = side.launch(["--nvidia-smi-command", fake_smi()])
    try:
        connection = exporter.client.connect(exporter.address)
        took, _ = first_scrape(exporter, connection)
        connection.close()
        side.cpu.append(cpu_seconds(exporter.process.pid))
    finally:
        exporter.stop()
    side.listening.append(exporter.listening - exporter.started)
    side.first.append(took)


# The interpreter's own CPU to the end of a ``-c`` script: what any CPython exporter pays before its first line, and
# with what an asyncio server that spawns children cannot do without (ssl kept out, as a plain start does).
FLOORS = (
    ("bare interpreter", ""),
    ("importing asyncio, logging, subprocess", "sys.modules['ssl'] = None\nimport asyncio, logging, subprocess"),
)


def interpreter_cpu(code: str) -> float:
    script = f"import sys, time\n{code}\nprint(time.process_time())"
    return float(subprocess.check_output([sys.executable, "-c", script], cwd=REPO))


def overhead(side: Side, statistic: Callable[[Sequence[float]], float]) -> float:
    """The start to the first scrape less the fake's sequential runs, each the same statistic over the rounds:
    one fake run beside one start moves with the load as much as the start does, so a pair can even go negative
    on a loaded machine."""
    return statistic(side.first) - SEQUENTIAL_RUNS[side.kind] * statistic(side.fake)


def spread(samples: Sequence[float], digits: int = 3) -> str:
    """``median / min``: on a shared machine the minimum is the start the load disturbed least."""
    return f"{median(samples):.{digits}f} / {min(samples):.{digits}f}" if samples else ""


def startup(rounds: int, baseline: str | None = None, go_binary: str | None = None) -> None:
    """Startup to the first successful scrape on exec with the fake, and its parts, the median and the minimum
    of `rounds`, the sides (this checkout, ``baseline``, the Go exporter) alternating start by start so the
    machine's load falls on each alike.

    Own overhead is the start to the first scrape less the fake's own run time (one run measured before each
    start; medians from medians, minima from minima: :func:`overhead`) for each nvidia-smi run the exporter waits
    for one after the other (:data:`SEQUENTIAL_RUNS`); the fake is a Python process, so each run costs an
    interpreter start, unlike the real one. Own CPU is the exporter process's user + system time up to its first
    successful scrape (its children's not counted): the
    figure the load disturbs least. One unmeasured start of each side first, which writes the bytecode cache
    (:func:`use_bytecode`).
    """
    sides = startup_sides(baseline, go_binary)
    for side in sides:
        if side.kind == "python":
            at_rest(Scenario("warm-up", ["--nvidia-smi-command", fake_smi()], side.env), 0)
    load = os.getloadavg()
    bare = median([wall([sys.executable, "-c", "pass"]) for _ in range(rounds)])
    floors: dict[str, list[float]] = {}
    for _ in range(rounds):
        for side in sides:
            measure_start(side)
        for name, code in FLOORS:
            floors.setdefault(name, []).append(interpreter_cpu(code))
    end = os.getloadavg()
    print(
        f"\n### Startup, exec on the fake nvidia-smi (median / min of {rounds}, sides alternating; {bytecode_mode()}; "
        f"load average {load[0]:.2f} at the start, {end[0]:.2f} at the end; bare interpreter {bare:.3f} s)\n"
    )
    print("| part, seconds (median / min) | " + " | ".join(side.name for side in sides) + " |")
    print("|---|" + "---:|" * len(sides))

    def row(label: str, values: Callable[[Side], list[float]], python_only: bool = False) -> None:
        cells = ["" if python_only and side.kind != "python" else spread(values(side)) for side in sides]
        print(f"| {label} | " + " | ".join(cells) + " |")

    row("imports, CPU: all a start imports", lambda side: [pair[1] for pair in side.imports], python_only=True)
    row("imports, CPU: before the first nvidia-smi run", lambda side: [pair[0] for pair in side.imports], True)
    row("one fake nvidia-smi run (`--version`), wall", lambda side: side.fake)
    row("start to listening, wall", lambda side: side.listening)
    row("start to first successful scrape, wall", lambda side: side.first)
    row("own CPU (user + system) to the first successful scrape", lambda side: side.cpu)
    cells = [f"{overhead(side, median):.3f} / {overhead(side, min):.3f}" for side in sides]
    print("| own overhead: the first scrape less the fake's sequential runs | " + " | ".join(cells) + " |")
    print(
        "\nCPython's floor, CPU (median / min): "
        + "; ".join(f"{name} {spread(samples)} s" for name, samples in floors.items())
        + ". /proc's CPU times count in ticks of "
        + f"{1 / TICKS:.3f} s."
    )
    go = next((side for side in sides if side.kind == "go"), None)
    if go is None:
        return
    for side in sides:
        if side.kind == "python":
            print(
                f"\n{side.name} minus Go: own overhead {overhead(side, median) - overhead(go, median):+.3f} s "
                f"(medians), {overhead(side, min) - overhead(go, min):+.3f} s (minima); own CPU "
                f"{median(side.cpu) - median(go.cpu):+.3f} s (medians), {min(side.cpu) - min(go.cpu):+.3f} s "
                f"(minima). Issue 31's bound: own overhead at most Go's + {OVERHEAD_BOUND_SECONDS} s."
            )


OVERHEAD_BOUND_SECONDS = 0.05  # issue 31, item 2
RSS_BOUND_RATIO = 1.2  # issue 31, item 3


def rest_side_by_side(rounds: int, rest: float, baseline: str | None, go_binary: str | None, directory: Path) -> None:
    """RSS at rest (after the first successful scrape and `rest` seconds idle) of this checkout, ``baseline`` and
    the Go exporter, plain HTTP and TLS + basic auth (the same web config file for both), sides alternating; the
    median and the minimum of `rounds`."""
    tls_args, tls_client = tls_auth(directory)
    configurations: list[tuple[str, list[str], Client]] = [
        ("exec, plain HTTP", [], Client()),
        ("exec, TLS + basic auth", tls_args, tls_client),
    ]
    load = os.getloadavg()
    results: dict[tuple[str, str], list[float]] = {}
    maps: dict[tuple[str, str], dict[str, float]] = {}  # the last start's RSS by mapping
    names: list[str] = []
    for configuration, extra, client in configurations:
        sides = startup_sides(baseline, go_binary, client)
        names = [side.name for side in sides]
        args = ["--nvidia-smi-command", fake_smi(), *extra]
        for side in sides:  # unmeasured: writes the bytecode cache
            rest_rss(side.launch, args, 0)
        for _ in range(rounds):
            for side in sides:
                rss, maps[configuration, side.name] = rest_rss(side.launch, args, rest)
                results.setdefault((configuration, side.name), []).append(rss)
    print(
        f"\n### RSS at rest (after the first successful scrape and {rest:g} s idle; median / min of {rounds}, sides "
        f"alternating; {bytecode_mode()}; load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the "
        "end)\n"
    )
    print("| configuration | " + " | ".join(f"{name}, MiB" for name in names) + " |")
    print("|---|" + "---:|" * len(names))
    for configuration, _, _ in configurations:
        cells = [spread(results[configuration, name], 1) for name in names]
        print(f"| {configuration} | " + " | ".join(cells) + " |")
    plain, tls = (configuration for configuration, _, _ in configurations)
    print(f"\nWhere {tls} adds to {plain} (RSS by mapping, MiB, each side's last start; [anon]: Python's objects):\n")
    print("| mapping | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    added = {name: {key: mib - maps[plain, name].get(key, 0) for key, mib in maps[tls, name].items()} for name in names}
    shown = sorted({key for name in names for key, mib in added[name].items() if abs(mib) >= 0.1})
    for key in sorted(shown, key=lambda key: -max(added[name].get(key, 0) for name in names)):
        print(f"| {key} | " + " | ".join(f"{added[name].get(key, 0):+.2f}" for name in names) + " |")
    if go_binary is None:
        return
    for configuration, _, _ in configurations:
        ours, go = results[configuration, names[0]], results[configuration, names[-1]]
        print(
            f"\n{configuration}: this checkout / Go {median(ours) / median(go):.2f}x (medians), "
            f"{min(ours) / min(go):.2f}x (minima); issue 31's bound for TLS + basic auth: {RSS_BOUND_RATIO}x."
        )


def rest_rss(launch: Callable[[list[str]], Exporter], args: list[str], rest: float) -> tuple[float, dict[str, float]]:
    """VmRSS (MiB) after the first successful scrape and `rest` seconds idle, and the RSS of each mapping."""
    exporter = launch(args)
    try:
        connection = exporter.client.connect(exporter.address)
        first_scrape(exporter, connection)
        connection.close()
        time.sleep(rest)
        return rss_mib(exporter.process.pid), mapped_rss(exporter.process.pid)
    finally:
        exporter.stop()


def mapped_rss(pid: int) -> dict[str, float]:
    """RSS (MiB) by mapping from ``/proc/<pid>/smaps``: a file by its name, else ``[heap]``, ``[anon]``, ..."""
    sizes: dict[str, float] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        words = line.split()
        if words and not words[0].endswith(":"):  # a mapping's first line: range, perms, offset, dev, inode, path
            name = os.path.basename(words[5]) if len(words) > 5 else "[anon]"
        elif words[:1] == ["Rss:"]:
            sizes[name] = sizes.get(name, 0.0) + int(words[1]) / 1024
    return sizes


def interpreter_rss(code: str) -> float:
    """VmRSS (MiB) of a fresh interpreter after running `code`."""
    script = f"{code}\nimport re\nprint(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1])"
    return int(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rest", type=float, default=2.0, help="seconds idle after the first scrape")
    parser.add_argument("--rounds", type=int, default=2, help="starts per configuration (the median is shown)")
    parser.add_argument("--collections", type=int, default=40)
    parser.add_argument("--cached", type=int, default=2000)
    parser.add_argument("--scrapes", type=int, default=20000)
    parser.add_argument("--top", type=int, default=14, help="packages shown in the import breakdown")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--startup-only", type=int, metavar="ROUNDS", help="only the startup time, median of ROUNDS")
    parser.add_argument(
        "--rest-only", type=int, metavar="ROUNDS", help="only RSS at rest, plain and TLS + basic auth, of ROUNDS"
    )
    parser.add_argument(
        "--baseline", metavar="SRC", help="--startup-only, --rest-only: also another checkout's src/, alternating"
    )
    parser.add_argument(
        "--go-binary", metavar="PATH", help="--startup-only, --rest-only: also the Go exporter, alternating"
    )
    parser.add_argument(
        "--from-source", action="store_true", help="no bytecode cache: children compile as this environment says"
    )
    args = parser.parse_args()
    import platform

    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        if not args.from_source:
            use_bytecode(directory)
        if args.startup_only:
            startup(args.startup_only, args.baseline, args.go_binary)
            return
        if args.rest_only:
            rest_side_by_side(args.rest_only, args.rest, args.baseline, args.go_binary, directory)
            return
        library = compile_fake_nvml(directory, "MAX_TOP=256", "MAX_DEVICES=512")  # room for 256 GPUs
        print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
        interpreter_rss("import asyncio")  # unmeasured: writes the bytecode cache
        bare, asyncio_only = interpreter_rss("pass"), interpreter_rss("import asyncio")
        without_ssl = interpreter_rss("import sys; sys.modules['ssl'] = None; import asyncio")
        print(
            f"bare interpreter {bare:.1f} MiB, `import asyncio` {asyncio_only:.1f} MiB, "
            f"`import asyncio` with ssl kept out {without_ssl:.1f} MiB\n"
        )
        print(
            f"### At rest (after the first successful scrape, then {args.rest:g} s idle; median of {args.rounds}; "
            f"{bytecode_mode()}; load average {os.getloadavg()[0]:.2f})\n"
        )
        print("| configuration | start to listening | start to first successful scrape | RSS at rest |")
        print("|---|---:|---:|---:|")
        configurations = scenarios(directory, library)
        for scenario in configurations:
            at_rest(scenario, 0)  # unmeasured: writes the bytecode cache of the modules this configuration loads
            results = sorted((at_rest(scenario, args.rest) for _ in range(args.rounds)), key=lambda result: result[2])
            listening, took, rss = results[len(results) // 2]
            print(f"| {scenario.name} | {listening:.2f} s | {took:.2f} s | {rss:.1f} MiB |")
        for scenario in configurations[:3]:  # exec, exec with TLS + basic auth, nvml
            import_breakdown(scenario, directory, args.top)
        if not args.skip_scaling:
            print_scaling(scaling(library, args.collections, args.cached), args.collections, args.cached)
        flat(args.scrapes)


if __name__ == "__main__":
    main()
