"""Command line of the fake ``nvidia-smi``: ``fake [fake flags...] <nvidia-smi arguments...>``.

The exporter runs this as a fresh process for every nvidia-smi call it makes, so the start stays light
(PyYAML only when ``--config`` is used). Fake flags are consumed from the front until the first token that
is not one; the rest is the nvidia-smi invocation, answered by :func:`engine.answer`. Failure injection
(``--delay``, ``--exit``, ``--fail-arg``) lives here, not in the engine, so in-process users leave it out.

Loop mode (``-l``/``--loop``, ``-lms``/``--loop-ms``) answers as nvidia-smi does: the CSV header once, then every
GPU's rows each interval until killed (docs/fake-nvidia-smi.md, "Loop mode"), with ``--die-after``,
``--hang-after`` and ``--flood-after`` to fail the exporter's streaming mode on demand.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
from nvidia_gpu_exporter._go.strconv import DECIMAL_INT, parse_bool, parse_float, parse_int
from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter._go.text import go_trim_space as go_trim
from nvidia_gpu_exporter.capture.config import ConfigError, FakeSmiConfig, load_config
from nvidia_gpu_exporter.capture.engine import (
    DEFAULT_STATE,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    MAX_GPUS,
    PROG,
    Answer,
    Fixed,
    Generator,
    GpuEntry,
    Range,
    Scenario,
    ScenarioError,
    answer,
    check_range,
    check_value,
    validate_settings,
)
from nvidia_gpu_exporter.capture.format import Capture, CaptureError, load_capture

CAPTURES_ENV = "NVIDIA_GPU_EXPORTER_CAPTURES"
"""Directory in which a bare ``--capture NAME`` is looked up (the project embeds no capture corpus)."""

USAGE = f"""\
usage: nvidia-gpu-exporter-fake-smi [fake flags...] <nvidia-smi arguments...>
       python -m nvidia_gpu_exporter.fakesmi [fake flags...] <nvidia-smi arguments...>

A fake nvidia-smi that answers from a recorded capture file. Fake flags come first (--flag=value or
--flag value); the first token that is not a fake flag starts the nvidia-smi invocation to answer.
`--query-gpu=<fields> --format=csv` and `--query-compute-apps=<fields> --format=csv` are answered by
projecting the recorded CSV; any other invocation (`--version`, `--help-query-gpu`, `-L`, `-q`, ...)
replays the section recorded for the same command line.

capture and values:
  --capture X            capture file to replay (required here or in --config). A path, or a NAME
                         (.txt optional) looked up in the directory ${CAPTURES_ENV}
  --state S              capture state to serve (default {DEFAULT_STATE}; e.g. load)
  --set FIELD=VALUE      fixed value for a field in every data row (repeatable, later wins)
  --set-range FIELD=MIN:MAX
                         random value per data row (repeatable); integral bounds print integers
  --seed N               int64 seed for ranges and fluctuation (default: different on every call)
  --gpus N               replicate the captured GPU into N simulated GPUs (1-{MAX_GPUS})
  --fluctuate[=BOOL]     jitter utilization, temperatures, fan, power, current clocks, used memory
  --config FILE          YAML with the same settings; any flag wins over the file

failure injection:
  --exit N               print --stderr-msg (if set) on stderr and exit N without output
  --delay D              sleep this Go duration (e.g. 50ms, 2s) before anything else
  --stderr-msg TEXT      message for --exit and --fail-arg
  --fail-arg PREFIX      fail (exit 1) invocations with an argument starting with PREFIX, answer others
  --help                 show this help (nvidia-smi's own help is `-h`)

loop mode (nvidia-smi's -l SEC, --loop=SEC, -lms MS, --loop-ms=MS: the header once, then the rows every
interval until killed) and its failure injection:
  --die-after K          exit after K tables, printing --stderr-msg (if set) on stderr
  --die-code N           the exit status of --die-after (default 1)
  --hang-after K         stop printing after K tables and stay alive until killed
  --flood-after K        after K tables print one endless line (no newline) as fast as the pipe takes it

exit codes: 0 ok, 1 rejected query or --fail-arg, 2 problem of the fake itself, N for --exit N.
"""

_VALUE_FLAGS = frozenset(
    {
        "--capture",
        "--state",
        "--stderr-msg",
        "--fail-arg",
        "--exit",
        "--delay",
        "--set",
        "--set-range",
        "--config",
        "--seed",
        "--gpus",
        "--die-after",
        "--die-code",
        "--hang-after",
        "--flood-after",
    }
)
_LOOP_SECONDS_DEFAULT = 5.0  # nvidia-smi's -l without a value
FLOOD_CHUNK = b"x" * 65536


class UsageError(Exception):
    """A problem of the fake itself (flag, config, capture): message on stderr, exit 2."""


@dataclass(frozen=True, slots=True)
class Injection:
    """Failure injection, applied before the capture is even loaded (so it works without one)."""

    exit_code: int | None = None
    delay_ns: int = 0
    stderr_msg: str = ""
    fail_arg: str = ""

    def apply(self, args: Sequence[str], sleep: Callable[[float], None] = time.sleep) -> Answer | None:
        """Sleep the delay, then return the injected failure for ``args``, or ``None`` to answer normally."""
        if self.delay_ns > 0:
            sleep(self.delay_ns / 1e9)
        if self.exit_code is not None:
            return Answer("", f"{self.stderr_msg}\n" if self.stderr_msg else "", self.exit_code)
        if self.fail_arg:
            for arg in args:
                if arg.startswith(self.fail_arg):
                    message = self.stderr_msg or f"{PROG}: injected failure for {go_quote(arg)}"
                    return Answer("", message + "\n", EXIT_REJECTED)
        return None


class Flags:
    """The fake flags as given; ``None`` means "not given", so the config or the default applies.

    A plain class rather than a dataclass: every dataclass costs the per-call process start time.
    """

    __slots__ = (
        "capture",
        "config",
        "delay_ns",
        "die_after",
        "die_code",
        "exit_code",
        "fail_arg",
        "flood_after",
        "fluctuate",
        "gpus",
        "hang_after",
        "help",
        "overrides",
        "seed",
        "state",
        "stderr_msg",
    )

    def __init__(self) -> None:
        self.help = False
        self.capture: str | None = None
        self.state: str | None = None
        self.stderr_msg: str | None = None
        self.fail_arg: str | None = None
        self.exit_code: int | None = None
        self.delay_ns: int | None = None
        self.config: str | None = None
        self.seed: int | None = None
        self.gpus: int | None = None
        self.fluctuate: bool | None = None
        self.overrides: dict[str, Generator] = {}
        self.die_after: int | None = None
        self.die_code = 1
        self.hang_after: int | None = None
        self.flood_after: int | None = None


@dataclass(frozen=True, slots=True)
class Invocation:
    """Flags and config merged: what to replay, how, with which injection, and the nvidia-smi args."""

    capture: str | None
    state: str
    seed: int | None
    overrides: dict[str, Generator]
    gpus: int | tuple[GpuEntry, ...] | None
    fluctuate: bool
    injection: Injection
    args: tuple[str, ...]
    loop: LoopPlan | None = None


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """Loop mode: the interval, and which failure to inject after how many tables."""

    interval_seconds: float
    die_after: int | None = None
    die_code: int = 1
    hang_after: int | None = None
    flood_after: int | None = None


def _loop_value(flag: str, value: str | None, scale: float) -> float:
    if value is None:
        raise UsageError(f"flag {flag} needs a value")
    number = parse_int(value)
    if number is None:
        raise UsageError(f"invalid {flag} value {go_quote(value)}: not an integer")
    if number <= 0:
        raise UsageError(f"{flag} must be positive, got {number}")
    return number * scale


def loop_interval(args: Sequence[str]) -> tuple[float | None, list[str]]:
    """nvidia-smi's loop flags taken out of ``args``: (the interval in seconds or ``None``, the other arguments).

    ``-l [SEC]`` (5 s without a value, as nvidia-smi), ``--loop=SEC``, ``-lms MS``, ``--loop-ms=MS``.
    """
    interval: float | None = None
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else None
        if arg == "-lms":
            interval = _loop_value(arg, following, 0.001)
            index += 2
            continue
        if arg == "-l":
            if following is not None and not following.startswith("-"):
                interval = _loop_value(arg, following, 1.0)
                index += 2
            else:
                interval = _LOOP_SECONDS_DEFAULT
                index += 1
            continue
        name, sep, value = arg.partition("=")
        if sep and name in ("--loop", "--loop-ms"):
            interval = _loop_value(name, value, 1.0 if name == "--loop" else 0.001)
        else:
            rest.append(arg)
        index += 1
    return interval, rest


def _go_int(flag: str, value: str) -> int:
    """An int64 flag value, with Go's two ways of refusing one."""
    number = parse_int(value)
    if number is None:
        problem = "value out of range" if DECIMAL_INT.fullmatch(value) else "not an integer"
        raise UsageError(f"invalid {flag} value {go_quote(value)}: {problem}")
    return number


def _parse_set(value: str) -> tuple[str, Generator]:
    name, sep, text = value.partition("=")
    if not sep or not name:
        raise UsageError(f"invalid --set {go_quote(value)}, want field=value")
    problem = check_value(name, text)
    if problem:
        raise UsageError(problem)
    return name, Fixed(text)


def _parse_set_range(value: str) -> tuple[str, Generator]:
    name, sep, spec = value.partition("=")
    if not sep or not name:
        raise UsageError(f"invalid --set-range {go_quote(value)}, want field=min:max")
    low_text, colon, high_text = spec.partition(":")
    if not colon:
        raise UsageError(f"invalid --set-range for {go_quote(name)}, want min:max")
    low = parse_float(go_trim(low_text))
    if low is None:
        raise UsageError(f"invalid --set-range min for {go_quote(name)}: {go_quote(low_text)} is not a number")
    high = parse_float(go_trim(high_text))
    if high is None:
        raise UsageError(f"invalid --set-range max for {go_quote(name)}: {go_quote(high_text)} is not a number")
    problem = check_range(name, low, high)
    if problem:
        raise UsageError(problem)
    return name, Range(low, high)


def _apply_flag(flags: Flags, name: str, value: str) -> None:
    if name == "--capture":
        flags.capture = value
    elif name == "--state":
        flags.state = value
    elif name == "--stderr-msg":
        flags.stderr_msg = value
    elif name == "--fail-arg":
        flags.fail_arg = value
    elif name == "--config":
        if not value:
            raise UsageError("--config needs a path")
        flags.config = value
    elif name in ("--set", "--set-range"):
        field_name, generator = _parse_set(value) if name == "--set" else _parse_set_range(value)
        flags.overrides.pop(field_name, None)  # re-insert so the latest --set is also the last in order
        flags.overrides[field_name] = generator
    elif name == "--exit":
        flags.exit_code = _go_int(name, value)
    elif name == "--delay":
        try:
            flags.delay_ns = parse_duration(value)
        except DurationError as exc:
            raise UsageError(f"invalid --delay value {go_quote(value)}: {exc}") from exc
    elif name == "--seed":
        flags.seed = _go_int(name, value)
    elif name == "--die-code":
        flags.die_code = _go_int(name, value)
    elif name in ("--die-after", "--hang-after", "--flood-after"):
        tables = _go_int(name, value)
        if tables < 0:
            raise UsageError(f"{name} must not be negative, got {tables}")
        setattr(flags, name[2:].replace("-", "_"), tables)
    else:  # --gpus
        count = _go_int(name, value)
        if not 1 <= count <= MAX_GPUS:
            raise UsageError(f"gpu count must be between 1 and {MAX_GPUS}, got {count}")
        flags.gpus = count


def parse_flags(argv: Sequence[str]) -> tuple[Flags, list[str]]:
    """Consume the fake flags from the front of ``argv``; return them and the nvidia-smi arguments."""
    flags = Flags()
    args = list(argv)
    while args:
        name, sep, value = args[0].partition("=")
        if name == "--help":
            if sep:
                raise UsageError("flag --help takes no value")
            flags.help = True
            args = args[1:]
            continue
        if name == "--fluctuate":
            args = args[1:]
            if not sep and args and parse_bool(args[0]) is not None:
                value, sep = args[0], "="
                args = args[1:]
            fluctuate = parse_bool(value) if sep else True
            if fluctuate is None:
                raise UsageError(f"invalid --fluctuate value {go_quote(value)}: want a boolean")
            flags.fluctuate = fluctuate
            continue
        if name not in _VALUE_FLAGS:
            break
        args = args[1:]
        if not sep:
            if not args:
                raise UsageError(f"flag {name} needs a value")
            value, args = args[0], args[1:]
        _apply_flag(flags, name, value)
    return flags, args


def _load_config(path: str) -> FakeSmiConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def resolve(flags: Flags, args: Sequence[str]) -> Invocation:
    """Merge the flags over the optional ``--config`` (a flag wins wherever ``--config`` sits)."""
    config = _load_config(flags.config) if flags.config else FakeSmiConfig()
    overrides = dict(config.overrides)
    for name, generator in flags.overrides.items():
        overrides.pop(name, None)
        overrides[name] = generator
    gpus: int | tuple[GpuEntry, ...] | None
    if flags.gpus is not None:
        gpus = flags.gpus  # a --gpus flag replaces config entries entirely, per-GPU overrides included
    elif isinstance(config.gpus, tuple):
        gpus = tuple(
            replace(
                entry,
                overrides={k: v for k, v in entry.overrides.items() if k not in flags.overrides},
            )
            for entry in config.gpus
        )
    else:
        gpus = config.gpus
    try:
        validate_settings(overrides, gpus)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from exc

    def pick(flag: str | None, configured: str | None) -> str | None:
        return flag if flag is not None else configured

    injection = Injection(
        exit_code=flags.exit_code if flags.exit_code is not None else config.exit,
        delay_ns=(flags.delay_ns if flags.delay_ns is not None else config.delay_ns) or 0,
        stderr_msg=pick(flags.stderr_msg, config.stderr_msg) or "",
        fail_arg=pick(flags.fail_arg, config.fail_arg) or "",
    )
    interval, args = loop_interval(args)
    loop = None
    if interval is not None:
        loop = LoopPlan(interval, flags.die_after, flags.die_code, flags.hang_after, flags.flood_after)
    return Invocation(
        capture=pick(flags.capture, config.capture),
        state=pick(flags.state, config.state) or DEFAULT_STATE,
        seed=flags.seed if flags.seed is not None else config.seed,
        overrides=overrides,
        gpus=gpus,
        fluctuate=flags.fluctuate if flags.fluctuate is not None else config.fluctuate,
        injection=injection,
        args=tuple(args),
        loop=loop,
    )


def resolve_capture(reference: str | None) -> Capture:
    """Load the capture a ``--capture`` value names: a file on disk, or a name in ``$CAPTURES_ENV``."""
    if not reference:
        raise UsageError(
            f"--capture is required: give a capture file (or a NAME found in ${CAPTURES_ENV}), "
            "or set capture: in the --config file"
        )
    try:
        os.stat(reference)
        exists = True
    except (OSError, ValueError):
        exists = False
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    if exists or any(sep in reference for sep in separators):
        path = reference
    else:
        directory = os.environ.get(CAPTURES_ENV, "")
        name = reference if reference.endswith(".txt") else reference + ".txt"
        if not directory:
            raise UsageError(
                f"capture {go_quote(reference)} is not a file, and ${CAPTURES_ENV} is not set to a "
                "directory of captures to look the name up in"
            )
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise UsageError(
                f"capture {go_quote(reference)} is neither a file on disk nor in ${CAPTURES_ENV} "
                f"({go_quote(directory)})"
            )
    try:
        return load_capture(path)
    except OSError as exc:
        raise UsageError(f"failed to load capture {go_quote(path)}: {exc.strerror or exc}") from exc
    except CaptureError as exc:
        raise UsageError(f"failed to parse capture file {go_quote(path)}: {exc}") from exc


def _scenario(invocation: Invocation) -> Scenario | Answer:
    """The scenario to answer from, or the answer saying why there is none."""
    try:
        capture = resolve_capture(invocation.capture)
        return Scenario(
            capture=capture,
            state=invocation.state,
            seed=invocation.seed,
            overrides=invocation.overrides,
            gpus=invocation.gpus,
            fluctuate=invocation.fluctuate,
        )
    except (UsageError, ScenarioError) as exc:
        return Answer("", f"{PROG}: {exc}\n", EXIT_USAGE)


def run(invocation: Invocation, sleep: Callable[[float], None] = time.sleep) -> Answer:
    """Delay, exit injection, fail-arg injection, load the capture, answer: the order of the Go fake."""
    injected = invocation.injection.apply(invocation.args, sleep)
    if injected is not None:
        return injected
    scenario = _scenario(invocation)
    if isinstance(scenario, Answer):
        return scenario
    return answer(scenario, invocation.args)


def run_loop(invocation: Invocation, plan: LoopPlan, sleep: Callable[[float], None] = time.sleep) -> int:
    """Loop mode: the CSV header once, then the rows every interval until killed (or an injected failure).

    nvidia-smi prints ``--query-gpu`` CSV in a loop with its header only at the top and no line between
    iterations (docs/fake-nvidia-smi.md, "Loop mode"); any other invocation repeats its whole answer. With a
    ``--seed``, iteration ``i`` uses seed + i, so ``--fluctuate`` and ranges move between tables.
    """
    injected = invocation.injection.apply(invocation.args, sleep)
    if injected is not None:
        _write(sys.stdout, injected.stdout)
        _write(sys.stderr, injected.stderr)
        return _exit_status(injected.exit_code)
    scenario = _scenario(invocation)
    if isinstance(scenario, Answer):
        _write(sys.stderr, scenario.stderr)
        return _exit_status(scenario.exit_code)
    csv = any(arg.startswith(("--query-gpu=", "--query-compute-apps=")) for arg in invocation.args)
    for table in itertools.count():
        if plan.die_after is not None and table >= plan.die_after:
            _write(sys.stderr, f"{invocation.injection.stderr_msg}\n" if invocation.injection.stderr_msg else "")
            return _exit_status(plan.die_code)
        if plan.hang_after is not None and table >= plan.hang_after:
            while True:
                sleep(3600)
        if plan.flood_after is not None and table >= plan.flood_after:
            while True:
                sys.stdout.buffer.write(FLOOD_CHUNK)
        current = scenario if scenario.seed is None else replace(scenario, seed=scenario.seed + table)
        result = answer(current, invocation.args)
        if result.exit_code != EXIT_OK:
            _write(sys.stdout, result.stdout)
            _write(sys.stderr, result.stderr)
            return _exit_status(result.exit_code)
        text = result.stdout
        if csv and table > 0:
            text = text.partition("\n")[2]
        _write(sys.stdout, text)
        sleep(plan.interval_seconds)
    return EXIT_OK  # pragma: no cover - the loop ends only by a return or a signal


def _write(stream: TextIO, text: str) -> None:
    """Write exact bytes (no newline translation; undecodable argv bytes written back as they came)."""
    if not text:
        return
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.write(text)
        stream.flush()
        return
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "backslashreplace")
    stream.flush()
    buffer.write(data)
    buffer.flush()


def _exit_status(code: int) -> int:
    """The status the OS reports for ``code`` (Go's ``os.Exit`` truncates the same way)."""
    if os.name == "nt":
        return ((code + (1 << 31)) % (1 << 32)) - (1 << 31)
    return code & 0xFF


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake for ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            flags, rest = parse_flags(arguments)
            if flags.help:
                _write(sys.stdout, USAGE)
                return EXIT_OK
            invocation = resolve(flags, rest)
        except UsageError as exc:
            _write(sys.stderr, f"{PROG}: {exc}\n")
            return EXIT_USAGE
        if invocation.loop is not None:
            return run_loop(invocation, invocation.loop)
        result = run(invocation)
        _write(sys.stdout, result.stdout)
        _write(sys.stderr, result.stderr)
        return _exit_status(result.exit_code)
    except BrokenPipeError:
        # the reader went away (e.g. the exporter's timeout); keep Python from complaining at exit
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_REJECTED
    except KeyboardInterrupt:
        return 130


__all__ = [
    "CAPTURES_ENV",
    "USAGE",
    "Flags",
    "Injection",
    "Invocation",
    "LoopPlan",
    "UsageError",
    "loop_interval",
    "main",
    "parse_flags",
    "resolve",
    "resolve_capture",
    "run",
    "run_loop",
]
