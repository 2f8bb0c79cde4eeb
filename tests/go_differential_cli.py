"""The command-line dimension of the differential fuzz: drawn command lines given to the Go exporter and to ours,
each run until it exits or starts listening, and what an operator sees compared.

Compared: whether it listened; else its exit status, which stream printed (stdout, stderr) and the first words of
what it printed, and the ``err`` of its ``failed to run`` line with the form of that line (Go logs a parse error
before its logger is set up, in the standard library's ``2006/01/02 15:04:05 ERROR ...`` form). Left out, each for
its reason: what ``--help-man``, ``--help-long`` and the completion scripts print on stdout beyond its being there, the
rest of ``--help`` and ``--version`` (their layout and our own flags and subcommands are deliberate differences,
docs/compatibility.md, "Deliberate differences"), the time in a log line (the clock). Never drawn: ``--completion-bash``
(it completes our own flags too), dcgm-exporter's short options such as ``-a``, ``-f``, ``-v`` or ``-x`` (they start the
dcgm-exporter way, docs/dcgm.md), a missing ``--web.config.file`` (refused here, served by Go without its settings:
the deliberate "fail closed" difference).

Every case starts with the same two flags (the fake nvidia-smi on the shared fixture capture, and a listen address
on port 0), then 0 to 4 drawn words.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harness import FIXTURE_CAPTURES, REPO, exporter_argv, fake_smi_command

WORDS = (
    "--collect.interval=5s",
    "--collect.interval",
    "5s",
    "10",
    "--collect.interval=10",
    "--collect.timeout=-1s",
    "--collect.timeout=1d",
    "--web.read-timeout=1.5h",
    "--web.timeout-offset=-1ms",
    "--log.level=debug",
    "--log.level",
    "warn",
    "--log.level=x",
    "--log.format=json",
    "--log.format=x",
    "--web.max-requests=3",
    "--web.max-requests",
    "--web.max-requests=1.5",
    "--web.max-requests=1e3",
    "--web.max-requests=-1",
    "--web.max-requests=x",
    "--web.max-requests=0x10",
    "--web.max-requests=99999999999999999999",
    "--web.telemetry-path=/m",
    "--web.telemetry-path=m",
    "--web.telemetry-path=/",
    "--web.telemetry-path=/m/",
    "--web.telemetry-path=/a//b",
    "--web.telemetry-path=/-/ready",
    "--web.network=udp",
    "--web.network=tcp4",
    "--web.network=unix",  # the listen address is then a socket file in the case's own working directory
    "--collect.compute-apps",
    "--no-collect.compute-apps",
    "--collect.compute-apps=false",
    "--collect.compute-apps=x",
    "--no-collect.compute-apps=true",
    "--collect.compute-apps-mig",
    "--collect.pcie-throughput",
    "--collect.backend=foo",
    "--collect.backend=demo",
    "--query-field-names",
    "--query-field-names=",
    "--query-field-names=uuid,name",
    "--query-field-names-exclude=*",
    "--shutdown-on-error",
    "--demo-config=/nonexistent",
    "--help",
    "-h",
    "-hh",
    "-hx",
    "--help=x",
    "--no-help",
    "--version",
    "--version=x",
    "--no-version",
    "--help-long",
    "--help-man",
    "--completion-script-bash",
    "-q",
    "x",
    "-",
    "--",
    "--foo",
    "--foo=1",
    "--no-foo",
    "@/nonexistent/args",
)
LISTEN_SECONDS = 30.0
_FAILED = re.compile(r'failed to run"? err=("(?:[^"\\]|\\.)*"|\S+)')
_GO_DEFAULT_LOGGER = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ")


def draw_command_line(rng: random.Random) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4)))]


@dataclass(frozen=True)
class Ending:
    """How one command line ended, as far as an operator can tell the two exporters apart."""

    listened: bool
    code: int | None = None
    stdout: str = ""  # the first line's first words
    stderr: str = ""
    error: str = ""  # the ``failed to run`` line's err, and its form

    @classmethod
    def of(cls, stdout: str, stderr: str, code: int) -> Ending:
        error = ""
        for line in stderr.splitlines():
            match = _FAILED.search(line)
            if match:
                form = "go-default-logger" if _GO_DEFAULT_LOGGER.match(line) else "structured"
                error = f"{form}: {match.group(1)}"
        return cls(False, code, _opening(stdout), "" if error else _opening(stderr), error)


def _opening(text: str) -> str:
    """The first two words of the usage and of the version block (``usage: nvidia_gpu_exporter``,
    ``nvidia_gpu_exporter, version``); only whether anything was printed for the other texts."""
    first = " ".join(text.lstrip("\n").split("\n", 1)[0].split()[:2])
    if first.startswith(("usage:", "nvidia_gpu_exporter,")):
        return first
    return "printed" if text else ""


def run_to_end(argv: Sequence[str], cwd: str | os.PathLike[str] = REPO) -> Ending:
    """Run ``argv`` in ``cwd`` until it exits or says it is listening (then it is stopped)."""
    process = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
    )
    streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
    listening = threading.Event()

    def pump(name: str) -> None:
        pipe = process.stdout if name == "stdout" else process.stderr
        assert pipe is not None
        for raw in pipe:
            line = raw.decode("utf-8", "replace")
            streams[name].append(line)
            if name == "stderr" and "Listening on" in line:
                listening.set()

    readers = [threading.Thread(target=pump, args=(name,), daemon=True) for name in streams]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + LISTEN_SECONDS
    while process.poll() is None and not listening.is_set() and time.monotonic() < deadline:
        listening.wait(0.05)
    if process.poll() is None:
        process.kill()
        process.wait()
        for reader in readers:
            reader.join(5)
        return Ending(True) if listening.is_set() else Ending(False, None, error="hung")
    for reader in readers:
        reader.join(5)
    return Ending.of("".join(streams["stdout"]), "".join(streams["stderr"]), process.returncode)


@dataclass
class CliDifference:
    case_number: int
    words: list[str]
    go: Ending
    ours: Ending

    def report(self) -> str:
        return f"cli case {self.case_number}: {self.words}\n  go:   {self.go}\n  ours: {self.ours}"


@dataclass
class CliTally:
    cases: int = 0
    differences: list[CliDifference] = field(default_factory=list)


def run_cli(
    go_binary: str, seed: int, cases: int, *, on_difference: Callable[[CliDifference], None] = lambda _: None
) -> CliTally:
    rng = random.Random(seed)
    fixed = [
        "--nvidia-smi-command=" + fake_smi_command(FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"),
        "--web.listen-address=127.0.0.1:0",
    ]
    tally = CliTally()
    for case_number in range(cases):
        words = draw_command_line(rng)
        # Each in an empty directory: with --web.network=unix, 127.0.0.1:0 names a socket file there, which a
        # killed exporter leaves behind
        with tempfile.TemporaryDirectory() as place:
            go = run_to_end([go_binary, *fixed, *words], place)
        with tempfile.TemporaryDirectory() as place:
            ours = run_to_end([*exporter_argv(), *fixed[:1], *words], place)
        tally.cases += 1
        if go != ours:
            difference = CliDifference(case_number, words, go, ours)
            tally.differences.append(difference)
            on_difference(difference)
    return tally


__all__ = ("CliDifference", "CliTally", "Ending", "draw_command_line", "run_cli", "run_to_end")
