"""The fake nvidia-smi's loop mode (docs/fake-nvidia-smi.md, "Loop mode"): ``-l``/``-lms`` print the header once
and then every GPU's row each interval until killed, as nvidia-smi does, with failure injection for the stream."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvidia_gpu_exporter.fakesmi.cli import UsageError, loop_interval, main, parse_flags

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "captures"
WINDOWS = str(FIXTURES / "fixture-windows-1gpu.txt")
QUERY = ["--query-gpu=uuid,temperature.gpu,utilization.gpu", "--format=csv"]
HEADER = "uuid, temperature.gpu, utilization.gpu [%]"


def start(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def read_lines(process: subprocess.Popen[bytes], count: int, seconds: float = 20.0) -> list[str]:
    """The first ``count`` lines the fake prints (it keeps running)."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while len(lines) < count and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.decode().rstrip("\n"))
    return lines


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=10)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["-lms", "250"], 0.25),
        (["--loop-ms=250"], 0.25),
        (["-l", "2"], 2.0),
        (["--loop=2"], 2.0),
        (["-l"], 5.0),
        ([], None),
    ],
)
def test_loop_interval_forms(args: list[str], want: float | None) -> None:
    """nvidia-smi's spellings: ``-l [SEC]`` (5 s without a value), ``--loop=SEC``, ``-lms MS``, ``--loop-ms=MS``."""
    interval, rest = loop_interval([*QUERY, *args])
    assert interval == want
    assert rest == QUERY


def test_loop_interval_refuses_a_bad_value() -> None:
    with pytest.raises(UsageError, match="invalid -lms value"):
        loop_interval([*QUERY, "-lms", "soon"])
    with pytest.raises(UsageError, match="must be positive"):
        loop_interval([*QUERY, "-lms", "0"])


def test_injection_flags_parse() -> None:
    flags, rest = parse_flags(["--die-after", "2", "--hang-after=3", "--flood-after", "1", *QUERY])
    assert (flags.die_after, flags.hang_after, flags.flood_after) == (2, 3, 1)
    assert rest == QUERY


def test_header_once_then_every_gpu_each_interval() -> None:
    """The header is printed once; each interval prints one row per GPU, nothing between tables (as nvidia-smi)."""
    process = start("--capture", WINDOWS, "--gpus", "3", "--fluctuate", *QUERY, "-lms", "20")
    try:
        lines = read_lines(process, 1 + 3 * 4)
    finally:
        stop(process)
    assert lines[0] == HEADER
    assert HEADER not in lines[1:]
    uuids = [line.split(", ")[0] for line in lines[1:]]
    assert uuids[:3] == uuids[3:6] == uuids[6:9] == uuids[9:12]
    assert len(set(uuids[:3])) == 3
    assert len({line.split(", ", 1)[1] for line in lines[1:]}) > 1  # --fluctuate moves the values


def test_die_after_exits_with_the_code_after_k_tables() -> None:
    process = start(
        "--capture", WINDOWS, "--die-after", "2", "--die-code", "9", "--stderr-msg", "gone", *QUERY, "-lms", "10"
    )
    out, err = process.communicate(timeout=20)
    assert process.returncode == 9
    assert out.decode().splitlines()[0] == HEADER
    assert len(out.decode().splitlines()) == 3
    assert err == b"gone\n"


def test_hang_after_stops_printing_and_stays_alive() -> None:
    process = start("--capture", WINDOWS, "--hang-after", "1", *QUERY, "-lms", "10")
    try:
        assert len(read_lines(process, 2)) == 2
        time.sleep(0.3)
        assert process.poll() is None
    finally:
        stop(process)


def test_flood_after_prints_an_endless_line() -> None:
    process = start("--capture", WINDOWS, "--flood-after", "1", *QUERY, "-lms", "10")
    try:
        assert process.stdout is not None
        assert len(read_lines(process, 2)) == 2
        data = process.stdout.read(1 << 20)
        assert len(data) == 1 << 20
        assert b"\n" not in data
    finally:
        stop(process)


def test_a_rejected_query_exits_at_once_in_loop_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--capture", WINDOWS, "--query-gpu=no.such.field", "--format=csv", "-lms", "10"])
    assert code == 1
    assert "no.such.field" in capsys.readouterr().out
