"""Property tests for the fake nvidia-smi: no input makes it crash, and its outputs keep their shape."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter.capture.engine import Answer, Fixed, GpuEntry, Range, Scenario, answer
from nvidia_gpu_exporter.capture.format import FENCE, CaptureError, parse_capture
from nvidia_gpu_exporter.capture.format import load_capture as load
from nvidia_gpu_exporter.fakesmi.cli import Invocation, UsageError, parse_flags, resolve, run

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
LINUX = load(FIXTURES / "fixture-linux-2gpu-mig.txt")
WINDOWS = load(FIXTURES / "fixture-windows-1gpu.txt")
_LINUX_CSV = LINUX.find("idle", "query-gpu (csv")
assert _LINUX_CSV is not None
LINUX_FIELDS = _LINUX_CSV.command.split()[1].removeprefix("--query-gpu=").split(",")

SCENARIOS = [
    Scenario(LINUX),
    Scenario(LINUX, state="load", fluctuate=True, overrides={"temperature.gpu": Range(20, 90)}),
    Scenario(WINDOWS, gpus=3, seed=5, fluctuate=True),
    Scenario(
        WINDOWS,
        state="load",
        gpus=(GpuEntry(uuid="GPU-x", overrides={"power.draw": Range(0.5, 1.5)}), GpuEntry(serial="S")),
        overrides={"pstate": Fixed("P0")},
        seed=-7,
    ),
    Scenario(WINDOWS, state="missing", gpus=1),
]

field_lists = st.lists(st.sampled_from([*LINUX_FIELDS, "bogus", "", " uuid", "used_gpu_memory", "pid"])).map(",".join)
tokens = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["--format=csv", "--version", "-L", "--help-query-gpu", "topo", "-m", "", "nvidia-smi"]),
    field_lists.map(lambda fields: "--query-gpu=" + fields),
    field_lists.map(lambda fields: "--query-compute-apps=" + fields),
)
argvs = st.one_of(
    st.lists(tokens, max_size=4),
    st.tuples(tokens, st.just("--format=csv")).map(list),
)


@settings(max_examples=300, deadline=None)
@given(scenario=st.sampled_from(SCENARIOS), args=argvs)
def test_answer_never_raises_and_exit_codes_follow_the_contract(scenario: Scenario, args: list[str]) -> None:
    result = answer(scenario, args)
    assert result.exit_code in (0, 1, 2)
    if result.exit_code == 0:
        assert result.stderr == ""
        assert result.stdout.endswith("\n")
    elif result.exit_code == 1:
        assert result.stderr == ""
        assert result.stdout.endswith("\n")
        assert len(result.stdout) > 1
    else:
        assert result.stdout == ""
        assert result.stderr.startswith("fake-nvidia-smi: ")


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(st.sampled_from(LINUX_FIELDS), min_size=1), state=st.sampled_from(["idle", "load"]))
def test_any_recorded_field_subset_projects_one_cell_per_field(fields: list[str], state: str) -> None:
    result = answer(Scenario(LINUX, state=state), [f"--query-gpu={','.join(fields)}", "--format=csv"])
    assert result.exit_code == 0
    lines = result.stdout[:-1].split("\n")
    assert len(lines) == 3
    assert all(len(line.split(", ")) == len(fields) for line in lines)


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_parser_raises_only_capture_error_on_any_text(text: str) -> None:
    with contextlib.suppress(CaptureError):
        parse_capture(text)


capture_lines = st.lists(
    st.one_of(
        st.sampled_from([FENCE, "# a :: b", "# idle :: query-gpu (csv", "# $ nvidia-smi -L", "#", "", "  ", "x"]),
        st.text(max_size=20),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(lines=capture_lines)
def test_parser_on_capture_like_text(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        parsed = parse_capture(text)
    except CaptureError:
        return
    assert parsed.sections
    if "\r" not in text:
        assert parse_capture(text.replace("\n", "\r\n")) == parsed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    whole=st.integers(min_value=0, max_value=10**6),
    decimals=st.integers(min_value=0, max_value=4),
    suffix=st.sampled_from(["", " W", " %", " MHz", " MiB", "%", " C"]),
    seed=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_fluctuation_keeps_the_cell_shape(whole: int, decimals: int, suffix: str, seed: int) -> None:
    number = f"{whole}.{'5' * decimals}" if decimals else str(whole)
    cell = number + suffix
    capture = parse_capture(
        f"{FENCE}\n# idle :: query-gpu (csv\n# $ nvidia-smi --query-gpu=power.draw --format=csv\n{FENCE}\n"
        f"power.draw\n{cell}\n"
    )
    result = answer(Scenario(capture, seed=seed, fluctuate=True), ["--query-gpu=power.draw", "--format=csv"])
    value = result.stdout.split("\n")[1]
    pattern = r"[0-9]+" + (rf"\.[0-9]{{{decimals}}}" if decimals else "") + re.escape(suffix)
    assert re.fullmatch(pattern, value), (cell, value)
    number_after = float(value[: len(value) - len(suffix)] if suffix else value)
    assert number_after >= 0
    if suffix.strip() == "%":
        assert number_after <= 100


finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)


@settings(max_examples=300, deadline=None)
@given(bounds=st.tuples(finite, finite).map(sorted), seed=st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_range_values_are_plain_and_within_bounds(bounds: list[float], seed: int) -> None:
    low, high = bounds
    capture = parse_capture(
        f"{FENCE}\n# idle :: query-gpu (csv\n# $ nvidia-smi --query-gpu=t --format=csv\n{FENCE}\nt\n1\n"
    )
    result = answer(Scenario(capture, seed=seed, overrides={"t": Range(low, high)}), ["--query-gpu=t", "--format=csv"])
    value = result.stdout.split("\n")[1]
    assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", value), value
    if low.is_integer() and high.is_integer():
        assert "." not in value
        assert int(low) <= int(value) <= int(high)
    else:
        assert low <= float(value) <= high


flag_tokens = st.one_of(
    st.sampled_from(
        [
            "--capture",
            str(FIXTURES / "fixture-windows-1gpu.txt"),
            "no-such-capture",
            "/no/such/capture.txt",
            "--state",
            "load",
            "--set",
            "--set-range",
            "t=1:2",
            "power.draw=5",
            "--seed",
            "--gpus",
            "2",
            "--fluctuate",
            "false",
            "--exit",
            "--fail-arg",
            "--stderr-msg",
            "--query-gpu=uuid,power.draw",
            "--format=csv",
            "-L",
        ]
    ),
    # no config files, delays or help; and no random paths, which could name a device such as /dev/stdin
    st.text(max_size=12).filter(
        lambda text: (
            not text.startswith(("--config", "--delay", "--help", ".")) and "/" not in text and "\\" not in text
        )
    ),
)


def invocation_or_problem(argv: list[str]) -> Invocation | str:
    try:
        return resolve(*parse_flags(argv))
    except UsageError as error:
        return str(error)


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(flag_tokens, max_size=8))
def test_cli_handles_any_flag_sequence_with_a_message_or_an_answer(argv: list[str]) -> None:
    invocation = invocation_or_problem(argv)
    if isinstance(invocation, str):
        assert invocation
        return
    result = run(invocation, sleep=lambda seconds: None)
    injection = invocation.injection
    if injection.exit_code is not None:
        expected_stderr = f"{injection.stderr_msg}\n" if injection.stderr_msg else ""
        assert result == Answer("", expected_stderr, injection.exit_code)
    elif result.exit_code == 2:
        assert result.stdout == ""
        assert result.stderr.startswith("fake-nvidia-smi: ")
    else:
        assert result.exit_code in (0, 1)
