"""Differential fuzzing against the real Go exporter: random but plausible nvidia-smi outputs, served by our
fake nvidia-smi to the Go binary and to ours started with the same flags, their ``nvidia_smi_*`` text compared
byte for byte.

A *setup* is what an exporter reads once at startup (the field list or the ``--help-query-gpu`` text it
discovers fields from, the CSV header that names the metrics, the ``--version`` text, the flags); a *round*
is one scrape's data (the GPU rows and the compute-apps rows). One exporter pair serves a setup for many
rounds: the fake reads its capture file on every call, so each round rewrites the file and scrapes both. Odd
rounds scrape in delimited protobuf, as Prometheus with native histograms asks, comparing the same families'
messages byte for byte instead of their text. Everything is drawn from ``random.Random(seed)``, so a seed
reproduces a run (which rounds ask for protobuf is not drawn: it leaves every earlier seed's draws as they were).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import difflib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exposition_reader import comparable
from go_differential_http import PROTOBUF_ACCEPT, Answer, Probe, ask, draw_probes, protobuf_comparable, telemetry_path
from harness import Exporter, StartupFailed, exporter_argv, fake_smi_command, start_listening
from nvidia_gpu_exporter.backends.exec.command import quote_word
from nvidia_gpu_exporter.capture.format import FENCE
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS, QUERY_FIELDS, header

RESHAPING_SMI = Path(__file__).resolve().parent / "go_differential_smi.py"
COMPUTE_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")
COMPUTE_APPS_HEADER = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]"

# -- cell values -------------------------------------------------------------------------------------------

ABSENT = ("[N/A]", "N/A", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]", "", "n/a", "[n/a]")
WORDS = (
    "Enabled",
    "Disabled",
    "Yes",
    "No",
    "Active",
    "Not Active",
    "Default",
    "Exclusive_Process",
    "Exclusive_Thread",
    "Prohibited",
    "ENABLED",
    "enabled ",
    "P0",
    "P8",
    "P15",
    "None",
    "Completed",
    "In Progress",
    "Not Started",
    "Not Supported",
    "GPU Reset",
    "Node Reboot",
    "Drain P2P",
    "Drain and Reset",
    "reboot",
    "WDDM",
    "TCC",
    "All On",
    "Compute",
    "Low Double Precision",
    "Pass",
    "Fail",
    "Unknown",
)
UNITS = ("", " W", " MiB", " MHz", " %", " C", " us", "W", " mW", " KiB", " GiB", " V", " x", "  W", " [W]")
TEXTS = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA GeForce RTX 2080 SUPER",
    'Tesla "V100"',
    "back\\slash",
    "naïve GPU",
    "名前",
    "96.00.89.00.01",
    "2026/03/14 09:26:53.123",
    "12 and 34",
    "v1.2",
    "a\tb",
    "  spaced  out  ",
    "-",
    ".",
    "1e",
    "e5",
    "+",
    "..5",
    "x12",
    "12x",
    "0.0.0",
)

# Characters where Go and Python disagree: whitespace Python strips and Go does not (U+001C..U+001F) and the
# reverse, case mappings with context or several runes (U+0130, final sigma), digits only Python's \d knows,
# and bytes that are not UTF-8 (surrogate escapes here, written back as the raw bytes).
TRICKY = (
    "\x1c",
    "\x1f",
    "\xa0",
    "\x85",
    "\u2028",
    "\u3000",
    "\u0130",
    "\u03a3",
    "\u0391\u03a3",
    "\u212a",
    "\u0661\u0662",
    "\uff11\uff12",
    "\u00b2",
    "\ufb00",
    "\udcff",
    "\udcc3(",
    "\u200b",
    "\x00",
    "\x7f",
)


def tricky(rng: random.Random, text: str) -> str:
    """``text`` with a tricky character put before, inside or after it."""
    where = rng.randrange(3)
    odd = rng.choice(TRICKY)
    if where == 0:
        return odd + text
    if where == 1:
        middle = rng.randrange(len(text) + 1)
        return text[:middle] + odd + text[middle:]
    return text + odd


def number(rng: random.Random) -> str:
    """A number as nvidia-smi might print it, including edges no real driver prints."""
    kind = rng.randrange(12)
    if kind == 0:
        return str(rng.randint(-5, 5))
    if kind == 1:
        return str(rng.randint(0, 100_000))
    if kind == 2:
        return f"{rng.uniform(0, 1000):.{rng.randint(0, 4)}f}"
    if kind == 3:
        return f"-{rng.uniform(0, 1000):.{rng.randint(0, 3)}f}"
    if kind == 4:
        return rng.choice(("1e308", "1.7976931348623157e308", "1e309", "9" * rng.randint(17, 330), "1e-320"))
    if kind == 5:
        return rng.choice(("0", "-0", "0.0", "+5", ".5", "5.", "00012", "1e5", "1E-3", "1_000", "0.1e2"))
    if kind == 6:
        return str(rng.randint(2**31, 2**64 + 10))
    if kind == 7:
        return f"{rng.uniform(0, 1e12):.6g}"
    if kind == 8:
        return str(rng.choice((0.1, 0.2, 0.3, 1 / 3, 2 / 3, 1e-7, 123456789.123456789, 4.35)))
    if kind == 9:
        return f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"
    if kind == 10:
        return rng.choice(("NaN", "nan", "Inf", "-Inf", "+Inf", "infinity"))
    return str(rng.randint(1, 99)) + "." + str(rng.randint(0, 9))


def hexadecimal(rng: random.Random) -> str:
    value = rng.choice((rng.randrange(2**16), rng.randrange(2**32), rng.randrange(2**64), 2**64 + rng.randrange(9)))
    text = format(value, "X" if rng.random() < 0.5 else "x")
    if rng.random() < 0.3:
        text = text.zfill(rng.choice((8, 16)))
    prefix = rng.choice(("0x", "0x", "0x", "0X"))
    return rng.choice((prefix + text, prefix, prefix + "ZZ", prefix + text + " W", "0x-1"))


def cell(rng: random.Random) -> str:
    """One random cell for any field (no commas: the fake's CSV cannot carry them outside process_name)."""
    roll = rng.random()
    if roll < 0.12:
        return tricky(rng, cell(rng))
    if roll < 0.35:
        return number(rng) + rng.choice(UNITS)
    if roll < 0.5:
        return rng.choice(ABSENT)
    if roll < 0.65:
        return rng.choice(WORDS)
    if roll < 0.75:
        return hexadecimal(rng)
    if roll < 0.9:
        return rng.choice(TEXTS)
    return number(rng) + " " + number(rng)


def uuid(rng: random.Random, index: int) -> str:
    body = f"{rng.randrange(16**8):08x}-{index:04x}-{rng.randrange(16**4):04x}-0000-{rng.randrange(16**12):012x}"
    form = rng.randrange(12)
    if form == 10:
        return "GPU-" + tricky(rng, body.upper())
    if form == 11:
        return "GPU-" + body.upper().replace("A", "\u0130").replace("B", "\u03a3")
    if form == 0:
        return body
    if form == 1:
        return ("GPU-" + body).upper()
    if form == 2:
        return "MIG-" + body
    if form == 3:
        return rng.choice(ABSENT)
    return "GPU-" + body


# -- a setup and its rounds --------------------------------------------------------------------------------


@dataclass
class Setup:
    """What both exporters read at startup, and the flags they get."""

    recorded: list[str]  # the fields the capture's query-gpu section records (what the fake can answer)
    headers: list[str]  # the header cell nvidia-smi prints for each recorded field
    help_text: str  # --help-query-gpu output
    version_text: str  # --version output
    flags: list[str] = field(default_factory=list)
    fake_args: list[str] = field(default_factory=list)  # failure injection for the fake (--fail-arg PREFIX)
    reshape_seed: int | None = None  # serve through go_differential_smi.py, which reshapes the CSV answers
    telemetry: str = "/metrics"  # --web.telemetry-path
    probes: list[Probe] = field(default_factory=list)  # the HTTP dimension: asked once the rounds are done


def pick_fields(rng: random.Random) -> list[str]:
    count = rng.choice((1, 3, 8, 20, 40, len(QUERY_FIELDS)))
    chosen = rng.sample(QUERY_FIELDS, min(count, len(QUERY_FIELDS)))
    if rng.random() < 0.2:
        chosen += rng.sample(("foo.bar", "new_field", "clocks_throttle_reasons.active", "power.draw.fancy"), 2)
    return chosen


def header_for(rng: random.Random, name: str) -> str:
    roll = rng.random()
    if roll < 0.6:
        return header(name)
    if roll < 0.7:
        return name
    if roll < 0.8:
        return name + rng.choice((" [MiB]", " [W]", " [%]", " [MHz]", " [us]", " [KiB]", " [GiB]", " [mW]", " []"))
    if roll < 0.85:
        return name.replace("clocks_event_reasons", "clocks_throttle_reasons").upper()
    if roll < 0.9:
        return name + " [W] [MiB]"
    if roll < 0.93:
        return tricky(rng, header(name))
    if roll < 0.95:
        return rng.choice(("", "power draw", "naïve", "a-b(c)", "9lives", "x" * 80, "temp:gpu", "__x__"))
    return header(rng.choice(QUERY_FIELDS))


def help_text(rng: random.Random, names: Sequence[str]) -> str:
    newline = "\r\n" if rng.random() < 0.05 else "\n"
    parts = ['List of valid properties to query for the switch "--query-gpu":', ""]
    for name in names:
        alias = f' or "{name.replace(".", "_")}"' if rng.random() < 0.3 else ""
        gap = rng.choice(("", "", "", " ", "\t"))
        parts += [gap, f'"{name}"{alias}', "Some description of the field, with a comma. And more."]
    if rng.random() < 0.1:
        parts += ["", '"has,comma"', "dropped by both"]
    return newline.join(parts) + newline


VERSION_TEMPLATES = (
    "NVIDIA-SMI version  : 550.54.15\nNVML version        : 550.54\nDRIVER version      : 550.54.15\n"
    "CUDA Version        : {cuda}",
    "NVIDIA-SMI version  : 610.57.04\nDRIVER version      : 610.57.04\n"
    'CUDA version        : Deprecated, see "CUDA UMD version" instead\nCUDA UMD version    : {cuda}',
    "CUDA UMD version : {cuda}\nCUDA Version : {other}",
    "CUDA Version: {cuda}",
    "cuda   VERSION\t:\t{cuda}",
    "CUDA Version : {cuda}\r\n",
    "Failed to initialize NVML: Driver/library version mismatch",
    "",
    "CUDA Version :",
    "CUDA Version : {cuda}.1",
    "CUDA Version : N/A\nCUDA UMD version : {cuda}",
    "CUDA:Version : {cuda}",
    "CUDA VERS\u0130ON : {cuda}",
    "CUDA UMD VERS\u0130ON : {cuda}\nCUDA Version : 1.1",
    "CUDA\x1cVersion : {cuda}",
    "CUDA\xa0Version\x85: {cuda}",
    "CUDA Version : \x1c{cuda}",
    "CUDA Version : {cuda}\xa0",
    "CUDA Version : \u0661\u0662.\u0663",
)


def version_text(rng: random.Random) -> str:
    cuda = rng.choice(("12.4", "13.0", "11.8", "12.10", "1.0", "99.99", "012.04"))
    return rng.choice(VERSION_TEMPLATES).format(cuda=cuda, other=rng.choice(("12.2", "x")))


def make_setup(rng: random.Random) -> Setup:
    chosen = pick_fields(rng)
    auto = rng.random() < 0.6
    flags: list[str] = []
    if auto:
        listed = list(chosen)
        recorded = list(dict.fromkeys([*IDENTITY_FIELDS, *listed]))
        text = help_text(rng, listed)
    else:
        listed = list(chosen)
        if rng.random() < 0.15 and listed:
            listed.append(rng.choice(listed))  # a field named twice
        joined = ",".join(listed)
        if rng.random() < 0.1:
            odd = (joined.replace(",", ", ", 1), joined + ",", "," + joined, joined.replace(",", ",,", 1))
            joined = rng.choice(odd)
        flags.append("--query-field-names=" + joined)
        recorded = list(dict.fromkeys([*IDENTITY_FIELDS, *listed]))
        text = help_text(rng, chosen)
    if rng.random() < 0.2:
        pattern = rng.choice(("ecc.*", "*", "clocks*", "uuid", "power.draw", "*.max", "memory.used,memory.free"))
        flags.append("--query-field-names-exclude=" + pattern)
    rng.shuffle(recorded)
    headers = [header_for(rng, name) for name in recorded]
    fake_args = failure_injection(rng)
    if fake_args[:1] == ["--delay"]:
        flags.append("--collect.timeout=1s")
    reshape_seed = rng.randrange(2**32) if rng.random() < 0.3 else None
    flags += other_flags(rng)
    telemetry = telemetry_path(rng)
    if telemetry != "/metrics":
        flags.append("--web.telemetry-path=" + telemetry)
    probes = draw_probes(rng, telemetry, rng.choice((2, 4, 8)))
    return Setup(recorded, headers, text, version_text(rng), flags, fake_args, reshape_seed, telemetry, probes)


def failure_injection(rng: random.Random) -> list[str]:
    """The fake's failures: one subcommand failing, every run exiting with a status, or every run too slow for a
    1 s ``--collect.timeout`` (which :func:`make_setup` then sets)."""
    roll = rng.random()
    if roll < 0.1:
        failing = ("--help-query-gpu", "--version", "--query-compute-apps", "--query-gpu", "--format")
        return ["--fail-arg", rng.choice(failing), "--stderr-msg", "injected failure"]
    if roll < 0.14:
        return ["--exit", str(rng.choice((1, 2, 6, 9, 12, 127, 255))), "--stderr-msg", rng.choice(("", "NVML: x"))]
    if roll < 0.16:
        return ["--delay", "3s"]
    return []


def other_flags(rng: random.Random) -> list[str]:
    """The flags beside the field lists: per-process data on or off, and the nvml-only ones exec refuses."""
    flags = ["--collect.compute-apps"] if rng.random() < 0.85 else []
    if rng.random() < 0.04:
        flags.append(rng.choice(("--collect.compute-apps-mig", "--collect.pcie-throughput")))
    return flags


@dataclass
class Round:
    gpu_rows: list[list[str]]
    app_rows: list[str]


def make_round(rng: random.Random, setup: Setup) -> Round:
    gpus = rng.choice((0, 1, 1, 1, 2, 2, 4, 8, rng.randint(1, 64)))
    rows = []
    uuids = []
    for index in range(gpus):
        row = []
        for name in setup.recorded:
            if name == "uuid":
                value = uuid(rng, index)
                uuids.append(value)
            elif name == "index" and rng.random() < 0.8:
                value = str(index)
            else:
                value = cell(rng)
            row.append(value)
        rows.append(row)
    if gpus > 1 and "uuid" in setup.recorded and rng.random() < 0.05:
        column = setup.recorded.index("uuid")
        rows[1][column] = rows[0][column]  # two GPUs with one uuid
    apps = []
    for _ in range(rng.choice((0, 0, 1, 2, 5))):
        owner = rng.choice([*uuids, "GPU-deadbeef", "", "[N/A]"]) if uuids else "GPU-deadbeef"
        if owner and rng.random() < 0.2:
            owner = owner.lower() if rng.random() < 0.5 else owner.upper()
        pid = rng.choice((str(rng.randint(1, 4_000_000)), "[N/A]", "-1", "0", "18446744073709551616", "12a"))
        name = rng.choice(
            ("/usr/bin/python3", "python", "C:\\Program Files\\app.exe", "a, b, c", '"quoted"', "名前", "", "[N/A]")
        )
        if rng.random() < 0.2:
            name = tricky(rng, name)
        if rng.random() < 0.1:
            pid = tricky(rng, pid)
        memory = rng.choice(("1234 MiB", "[N/A]", "[Not Supported]", "0 MiB", number(rng) + " MiB", "12"))
        apps.append(f"{owner}, {pid}, {name}, {memory}")
    return Round(rows, apps)


def capture_text(setup: Setup, data: Round) -> str:
    """A capture file the fake answers every call from: version, help, and the two CSV sections."""

    def block(title: str, command: str, body: str) -> str:
        return f"{FENCE}\n# {title}\n# $ {command}\n{FENCE}\n{body}\n"

    gpu_csv = "\n".join([", ".join(setup.headers), *(", ".join(row) for row in data.gpu_rows)])
    apps_csv = "\n".join([COMPUTE_APPS_HEADER, *data.app_rows])
    query = "nvidia-smi --query-gpu=" + ",".join(setup.recorded) + " --format=csv"
    apps_query = "nvidia-smi --query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS) + " --format=csv"
    return "\n\n".join(
        [
            block("capabilities :: version", "nvidia-smi --version", setup.version_text),
            block("capabilities :: help-query-gpu", "nvidia-smi --help-query-gpu", setup.help_text),
            block("idle :: query-gpu (csv, what the exporter parses)", query, gpu_csv),
            block("idle :: query-compute-apps (per-process)", apps_query, apps_csv),
        ]
    )


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one step: a fake started mid-write reads the old capture or the new, never half."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(temporary, path)


# -- running a pair ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One exporter's answer to a round: the HTTP status and its comparable text (or why it did not start)."""

    status: int
    text: str

    @classmethod
    def of(cls, exporter: Exporter | None, failure: str, path: str = "/metrics", *, protobuf: bool = False) -> Outcome:
        if exporter is None:
            return cls(-1, failure)
        response = exporter.get(path, {"Accept": PROTOBUF_ACCEPT} if protobuf else None)
        if response.status != 200:
            return cls(response.status, "")
        if protobuf:
            return cls(response.status, f"{response.headers.get('Content-Type')}\n{protobuf_comparable(response.body)}")
        text = response.body.decode("utf-8", "surrogateescape")  # bytes that are not UTF-8 must show in a diff
        return cls(response.status, comparable(text))


@dataclass
class Difference:
    setup_number: int
    round_number: int
    capture: str
    flags: list[str]
    go: Outcome
    ours: Outcome

    def report(self) -> str:
        diff = difflib.unified_diff(
            self.go.text.splitlines(), self.ours.text.splitlines(), "go", "ours", lineterm="", n=1
        )
        flags = " ".join(self.flags)
        return (
            f"setup {self.setup_number} round {self.round_number}: status go {self.go.status} ours "
            f"{self.ours.status}; flags {flags[:300]}\n" + "\n".join(diff)
        )


def start_or_none(argv: Sequence[str]) -> tuple[Exporter | None, str]:
    """The started exporter, or None and how it exited (a startup failure is an outcome to compare too)."""
    try:
        return start_listening(argv), ""
    except StartupFailed as failure:
        return None, f"exit {failure.returncode}"


@contextlib.contextmanager
def pair(pool: concurrent.futures.Executor, *argvs: Sequence[str]) -> Iterator[list[tuple[Exporter | None, str]]]:
    """Both exporters started side by side (startup is most of a setup's time), stopped on the way out."""
    pending = [pool.submit(start_or_none, argv) for argv in argvs]
    handles = [future.result() for future in pending]
    try:
        yield handles
    finally:
        for exporter, _ in handles:
            if exporter is not None:
                exporter.stop()


def smi_command(setup: Setup, capture: Path) -> str:
    """The ``--nvidia-smi-command`` both exporters get: our fake, or our fake with its CSV reshaped."""
    fake_args = ["--capture", os.fspath(capture), "--state", "idle", *setup.fake_args]
    if setup.reshape_seed is None:
        return fake_smi_command(None, *fake_args)
    words = [sys.executable, os.fspath(RESHAPING_SMI), str(setup.reshape_seed), *fake_args]
    return " ".join(quote_word(word) for word in words)


@dataclass
class HttpDifference:
    setup_number: int
    flags: list[str]
    probe: Probe
    go: Answer
    ours: Answer

    def report(self) -> str:
        flags = " ".join(self.flags)
        return (
            f"setup {self.setup_number} http {self.probe.method} {self.probe.path!r} {list(self.probe.headers)}; "
            f"flags {flags[:300]}\n  go:   {self.go}\n  ours: {self.ours}"
        )


@dataclass
class Tally:
    setups: int = 0
    rounds: int = 0
    requests: int = 0
    differences: list[Difference] = field(default_factory=list)
    http_differences: list[HttpDifference] = field(default_factory=list)


def run(
    go_binary: str,
    seed: int,
    setups: int,
    rounds: int,
    *,
    on_difference: Callable[[Difference], None] = lambda _: None,
    on_http_difference: Callable[[HttpDifference], None] = lambda _: None,
    workdir: Path | None = None,
    stop_after: float | None = None,
) -> Tally:
    """Run ``setups`` x ``rounds`` cases from ``seed``; each difference is passed to ``on_difference``. With
    ``stop_after`` (seconds), no new setup starts once that much time has passed."""
    began = time.monotonic()
    rng = random.Random(seed)
    tally = Tally()
    with tempfile.TemporaryDirectory(dir=workdir) as scratch, concurrent.futures.ThreadPoolExecutor(2) as pool:
        capture = Path(scratch) / "capture.txt"
        for setup_number in range(setups):
            if stop_after is not None and time.monotonic() - began > stop_after:
                break
            setup = make_setup(rng)
            first = make_round(rng, setup)
            write_atomically(capture, capture_text(setup, first))
            command = smi_command(setup, capture)
            flags = ["--nvidia-smi-command", command, *setup.flags]
            go_argv = [go_binary, "--web.listen-address=127.0.0.1:0", *flags]
            ours_argv = exporter_argv(*flags)
            with pair(pool, go_argv, ours_argv) as [(go, go_failure), (ours, our_failure)]:
                tally.setups += 1
                data = first
                for round_number in range(rounds):
                    if round_number:
                        data = make_round(rng, setup)
                        write_atomically(capture, capture_text(setup, data))
                    protobuf = round_number % 2 == 1
                    go_answer = pool.submit(Outcome.of, go, go_failure, setup.telemetry, protobuf=protobuf)
                    our_answer = pool.submit(Outcome.of, ours, our_failure, setup.telemetry, protobuf=protobuf)
                    outcome = (go_answer.result(), our_answer.result())
                    tally.rounds += 1
                    if outcome[0] != outcome[1]:
                        difference = Difference(
                            setup_number, round_number, capture_text(setup, data), flags[2:], *outcome
                        )
                        tally.differences.append(difference)
                        on_difference(difference)
                    if go is None and ours is None:
                        break
                if go is not None and ours is not None:
                    for probe in setup.probes:
                        asked = [pool.submit(ask, each.address, probe, setup.telemetry) for each in (go, ours)]
                        go_http, our_http = (answer.result() for answer in asked)
                        tally.requests += 1
                        if go_http != our_http:
                            http_difference = HttpDifference(setup_number, flags[2:], probe, go_http, our_http)
                            tally.http_differences.append(http_difference)
                            on_http_difference(http_difference)
    return tally


__all__ = ("Difference", "HttpDifference", "Setup", "Tally", "capture_text", "make_round", "make_setup", "run")
