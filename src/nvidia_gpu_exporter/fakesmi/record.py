"""``nvidia-gpu-exporter-capture``: record this machine's ``nvidia-smi`` as a capture file, for the fake
``nvidia-smi`` and the demo backend to replay (docs/fake-nvidia-smi.md, "Recording a capture of your machine").

    nvidia-gpu-exporter-capture --output my-machine.txt                          # capabilities and "idle"
    nvidia-gpu-exporter-capture --output my-machine.txt --state load --append    # again while a job runs

It runs exactly what the exporter runs (``--version``, ``--help-query-gpu``, ``-L``, the default table, every
field ``--help-query-gpu`` lists in one ``--query-gpu`` and ``--query-compute-apps``), each through the
exporter's runner (its timeout kills the whole process group, its output is capped), and writes the sections in
the capture file format. Nothing is masked: a capture holds the machine's uuids and serial numbers.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.backends.exec.command import CommandSplitError, split_command
from nvidia_gpu_exporter.backends.exec.output import parse_help_query_gpu
from nvidia_gpu_exporter.backends.exec.runner import RunResult, run_once
from nvidia_gpu_exporter.capture.format import (
    CAPABILITIES_STATE,
    COMPUTE_APPS_LABEL_PREFIX,
    GPU_CSV_LABEL_PREFIX,
    Capture,
    CaptureError,
    Section,
    load_capture,
    parse_capture,
    render_capture,
)
from nvidia_gpu_exporter.config import DEFAULT_NVIDIA_SMI_COMMAND

PROG = "nvidia-gpu-exporter-capture"
COMPUTE_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")
DEFAULT_TIMEOUT_SECONDS = 30.0
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Run = Callable[[Sequence[str]], RunResult]


class RecordError(Exception):
    """A command the capture needs failed; the message names it."""


def _section(run: Run, state: str, label: str, args: Sequence[str]) -> Section:
    result = run(args)
    command = " ".join(["nvidia-smi", *args])
    if not result.ok:
        raise RecordError(f"{command}: {result.describe_failure()}")
    body = result.stdout.replace("\r\n", "\n").strip("\n")
    if not body:
        raise RecordError(f"{command}: printed nothing")
    return Section(state=state, label=label, command=command, body=body)


def capabilities(run: Run) -> list[Section]:
    """What does not change with the load: versions, the queryable fields, the GPU list."""
    return [
        _section(run, CAPABILITIES_STATE, "version", ["--version"]),
        _section(run, CAPABILITIES_STATE, "help-query-gpu", ["--help-query-gpu"]),
        _section(run, CAPABILITIES_STATE, "list (-L)", ["-L"]),
    ]


def state_sections(run: Run, state: str, help_query_gpu: str) -> list[Section]:
    """One machine state: the default table, every field the driver lists, and the compute processes."""
    fields = parse_help_query_gpu(help_query_gpu)
    if not fields:
        raise RecordError("nvidia-smi --help-query-gpu lists no fields")
    query_gpu = [f"--query-gpu={','.join(fields)}", "--format=csv"]
    query_apps = [f"--query-compute-apps={','.join(COMPUTE_APPS_FIELDS)}", "--format=csv"]
    return [
        _section(run, state, "nvidia-smi (default table)", []),
        _section(run, state, f"{GPU_CSV_LABEL_PREFIX}, what the exporter parses)", query_gpu),
        _section(run, state, f"{COMPUTE_APPS_LABEL_PREFIX} (per-process)", query_apps),
    ]


def metadata(command: str, now: datetime) -> str:
    return "\n".join([
        f"collected_at:   {now.strftime('%Y-%m-%dT%H:%M:%SZ')}",
        "masked:         no (uuids and serial numbers are this machine's)",
        f"os:             {platform.system().lower()} ({platform.platform(terse=True)})",
        f"kernel:         {platform.release()}",
        f"arch:           {platform.machine()}",
        f"recorded_by:    {PROG} {__version__}, --nvidia-smi-command {command!r}",
    ])  # fmt: skip


def record(run: Run, state: str, existing: Capture | None, command: str, now: datetime) -> Capture:
    """A new capture (capabilities and ``state``), or ``existing`` with ``state`` added."""
    if existing is None:
        sections = capabilities(run)
        header = metadata(command, now)
        name = ""
    else:
        if state in existing.states():
            raise RecordError(f"the capture already has the state {state!r}")
        sections = list(existing.sections)
        header, name = existing.metadata, existing.name
    help_section = next(s for s in sections if s.state == CAPABILITIES_STATE and s.label == "help-query-gpu")
    return Capture(name=name, metadata=header, sections=(*sections, *state_sections(run, state, help_section.body)))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Record this machine's nvidia-smi as a capture file for the fake nvidia-smi and the demo.",
    )
    parser.add_argument("--output", required=True, help="the capture file to write")
    parser.add_argument("--state", default="idle", help="the machine state recorded: idle (default), load, ...")
    parser.add_argument(
        "--append", action="store_true", help="add the state to the existing --output capture instead of a new one"
    )
    parser.add_argument(
        "--nvidia-smi-command", default=DEFAULT_NVIDIA_SMI_COMMAND, help="as the exporter's flag (default nvidia-smi)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds per nvidia-smi run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    output = Path(arguments.output)
    state = arguments.state.strip()
    if not state or state == CAPABILITIES_STATE or "::" in state or any(c.isspace() for c in state):
        sys.stderr.write(f"{PROG}: --state {arguments.state!r}: want one word other than {CAPABILITIES_STATE!r}\n")
        return EXIT_USAGE
    if not arguments.timeout > 0:
        sys.stderr.write(f"{PROG}: --timeout must be above 0\n")
        return EXIT_USAGE
    try:
        argv_base = split_command(arguments.nvidia_smi_command)
        existing = load_capture(output) if arguments.append else None
        if existing is None and output.exists():
            raise RecordError(f"{output} exists: use --append to add a state, or another --output")
        capture = record(
            lambda args: run_once(argv_base, args, arguments.timeout),
            state,
            existing,
            arguments.nvidia_smi_command,
            datetime.now(timezone.utc),
        )
        text = render_capture(capture)
        parse_capture(text)  # what is written must read back
        temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8", errors="surrogateescape")
        temporary.replace(output)
    except (CommandSplitError, CaptureError, RecordError, OSError) as error:
        sys.stderr.write(f"{PROG}: {error}\n")
        return EXIT_FAILED
    sys.stderr.write(f"{PROG}: wrote {output} (states: {', '.join(capture.states())})\n")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
