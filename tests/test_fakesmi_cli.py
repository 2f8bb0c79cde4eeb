"""The fake nvidia-smi's command line (docs/fake-nvidia-smi.md, "Flags"): flag parsing, config merging, capture
lookup and failure injection, in-process through ``main`` and as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from nvidia_gpu_exporter._go.durations import parse_duration
from nvidia_gpu_exporter.capture.engine import Answer, generated_uuid
from nvidia_gpu_exporter.fakesmi.cli import CAPTURES_ENV, Injection, main, parse_flags, resolve, run

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "captures"
LINUX = str(FIXTURES / "fixture-linux-2gpu-mig.txt")
WINDOWS = str(FIXTURES / "fixture-windows-1gpu.txt")
GPU_QUERY = ["--query-gpu=uuid,temperature.gpu", "--format=csv"]
APPS_ARG = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
WINDOWS_UUID = "GPU-5b0d7e19-a4c3-4f26-8e91-3c7a2f6d0e48"


@pytest.fixture(autouse=True)
def _no_captures_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURES_ENV, raising=False)


def fake(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``main`` in-process: (exit status, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------------------------
# Flag parsing


@pytest.mark.parametrize(
    "argv",
    [
        ["--capture", WINDOWS, "--state", "load", *GPU_QUERY],
        [f"--capture={WINDOWS}", "--state=load", *GPU_QUERY],
        ["--state=load", "--capture", WINDOWS, *GPU_QUERY],
    ],
    ids=["space-separated", "equals", "any-order"],
)
def test_flag_value_forms(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert fake(capsys, *argv) == (0, f"uuid, temperature.gpu\n{WINDOWS_UUID}, 66\n", "")


def test_fake_flags_end_at_the_first_other_token(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fake(capsys, "--capture", WINDOWS, "--version", "--state", "load")
    assert (code, out) == (2, "")
    assert err == 'fake-nvidia-smi: capture has no section recorded for "--version --state load" in state "idle"\n'


def test_a_flag_value_may_look_like_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fake(capsys, "--capture", WINDOWS, "--fail-arg", "--query-compute-apps", *GPU_QUERY)
    assert code == 0
    assert out.startswith("uuid, temperature.gpu\n")


@pytest.mark.parametrize(
    "flag",
    [
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
    ],
)
def test_missing_flag_value_is_exit_2(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert fake(capsys, flag) == (2, "", f"fake-nvidia-smi: flag {flag} needs a value\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--exit", "x"], 'invalid --exit value "x": not an integer'),
        (["--exit", "1.0"], 'invalid --exit value "1.0": not an integer'),
        (["--seed", "9223372036854775808"], 'invalid --seed value "9223372036854775808": value out of range'),
        (["--seed", "1_000"], 'invalid --seed value "1_000": not an integer'),
        (["--seed", "9" * 5000], f'invalid --seed value "{"9" * 5000}": value out of range'),
        (["--gpus", "0"], "gpu count must be between 1 and 255, got 0"),
        (["--gpus", "256"], "gpu count must be between 1 and 255, got 256"),
        (["--gpus", "two"], 'invalid --gpus value "two": not an integer'),
        (["--delay", "5"], 'invalid --delay value "5": time: missing unit in duration "5"'),
        (["--delay", "soon"], 'invalid --delay value "soon": time: invalid duration "soon"'),
        (["--set", "temperature.gpu"], 'invalid --set "temperature.gpu", want field=value'),
        (["--set", "=5"], 'invalid --set "=5", want field=value'),
        (["--set", "name=a,b"], 'value for "name" must not contain a comma or newline'),
        (["--set", "name=a\nb"], 'value for "name" must not contain a comma or newline'),
        (["--set-range", "t"], 'invalid --set-range "t", want field=min:max'),
        (["--set-range", "t=5"], 'invalid --set-range for "t", want min:max'),
        (["--set-range", "t=x:5"], 'invalid --set-range min for "t": "x" is not a number'),
        (["--set-range", "t=1:"], 'invalid --set-range max for "t": "" is not a number'),
        (["--set-range", "t=1_0:20"], 'invalid --set-range min for "t": "1_0" is not a number'),
        (["--set-range", "t=5:1"], 'range for "t" has min 5 greater than max 1'),
        (["--set-range", "t=-inf:1"], 'range for "t" must have finite bounds'),
        (["--set-range", "t=nan:1"], 'range for "t" must have finite bounds'),
        (["--set-range", "t=1:+Infinity"], 'range for "t" must have finite bounds'),
        (["--set-range", "t=+nan:1"], 'invalid --set-range min for "t": "+nan" is not a number'),
        (["--set-range", "t=0x10:20"], 'invalid --set-range min for "t": "0x10" is not a number'),
        (["--fluctuate=maybe"], 'invalid --fluctuate value "maybe": want a boolean'),
        (["--fluctuate=yes"], 'invalid --fluctuate value "yes": want a boolean'),
        (["--config", ""], "--config needs a path"),
        (["--help=me"], "flag --help takes no value"),
        (
            ["--gpus", "2", "--set", "uuid=x"],
            'field "uuid" is a per-GPU identity and cannot be overridden while gpus is active',
        ),
    ],
    ids=[
        "exit-word",
        "exit-float",
        "seed-overflow",
        "seed-underscore",
        "seed-of-thousands-of-digits",
        "gpus-zero",
        "gpus-too-many",
        "gpus-word",
        "delay-missing-unit",
        "delay-word",
        "set-without-equals",
        "set-empty-field",
        "set-comma",
        "set-newline",
        "range-without-equals",
        "range-without-colon",
        "range-bad-min",
        "range-empty-max",
        "range-underscore",
        "range-min-above-max",
        "range-infinite",
        "range-nan",
        "range-signed-infinity",
        "range-signed-nan-is-not-a-go-float",
        "range-hex-without-exponent",
        "fluctuate-word",
        "fluctuate-yaml-word",
        "config-empty",
        "help-with-value",
        "identity-override-with-gpus",
    ],
)
def test_bad_flag_is_exit_2_with_a_message(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert fake(capsys, "--capture", WINDOWS, *argv, *GPU_QUERY) == (2, "", f"fake-nvidia-smi: {message}\n")


@pytest.mark.parametrize(
    ("spec", "cell"),
    [
        pytest.param("0x1p3:0x1p3", "8", id="go-hex-float"),
        pytest.param(" 1e1 : 1E1 ", "10", id="exponent-and-spaces"),
        pytest.param("-0:+0", "0", id="signed-zero"),
    ],
)
def test_set_range_bounds_are_go_floats(capsys: pytest.CaptureFixture[str], spec: str, cell: str) -> None:
    argv = ["--capture", WINDOWS, "--set-range", f"temperature.gpu={spec}", *GPU_QUERY]
    assert fake(capsys, *argv) == (0, f"uuid, temperature.gpu\n{WINDOWS_UUID}, {cell}\n", "")


@pytest.mark.parametrize(
    ("argv", "expected_rest", "fluctuate"),
    [
        (["--fluctuate", "--version"], ["--version"], True),
        (["--fluctuate", "false", "--version"], ["--version"], False),
        (["--fluctuate", "0", "-L"], ["-L"], False),
        (["--fluctuate", "T"], [], True),
        (["--fluctuate=F", "--fluctuate", "-q"], ["-q"], True),
        (["--fluctuate", "yes"], ["yes"], True),
        (["--fluctuate"], [], True),
    ],
    ids=[
        "bare-then-nvidia-smi-arg",
        "next-false-consumed",
        "next-zero-consumed",
        "next-T-consumed",
        "later-wins",
        "non-go-bool-not-consumed",
        "last-token",
    ],
)
def test_fluctuate_consumes_only_a_go_bool(argv: list[str], expected_rest: list[str], fluctuate: bool) -> None:
    flags, rest = parse_flags(argv)
    assert rest == expected_rest
    assert flags.fluctuate is fluctuate


def test_help_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fake(capsys, "--help")
    assert (code, err) == (0, "")
    assert out.startswith("usage: nvidia-gpu-exporter-fake-smi [fake flags...] <nvidia-smi arguments...>\n")
    for flag in ("--capture", "--set-range", "--fluctuate", "--fail-arg", CAPTURES_ENV):
        assert flag in out


def test_later_set_wins(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--capture", WINDOWS, "--set", "temperature.gpu=1", "--set-range", "temperature.gpu=7:7", *GPU_QUERY]
    assert fake(capsys, *argv)[1].endswith(", 7\n")
    argv = ["--capture", WINDOWS, "--set-range", "temperature.gpu=7:7", "--set", "temperature.gpu=1", *GPU_QUERY]
    assert fake(capsys, *argv)[1].endswith(", 1\n")


def test_set_allows_an_empty_value_and_equals_in_value(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--capture", WINDOWS, "--set", "pstate=", "--set", "name=a=b", "--query-gpu=pstate,name", "--format=csv"]
    assert fake(capsys, *argv) == (0, "pstate, name\n, a=b\n", "")


def test_seed_makes_ranges_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--capture", WINDOWS, "--seed", "1", "--gpus", "3", "--set-range", "temperature.gpu=90:95", "--fluctuate"]
    first = fake(capsys, *argv, *GPU_QUERY)
    assert first == fake(capsys, *argv, *GPU_QUERY)
    temperatures = [int(line.split(", ")[1]) for line in first[1].splitlines()[1:]]
    assert len(temperatures) == 3
    assert all(90 <= value <= 95 for value in temperatures)


# ----------------------------------------------------------------------------------------------
# Capture lookup


def test_capture_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fake(capsys, *GPU_QUERY)
    assert (code, out) == (2, "")
    assert err.startswith("fake-nvidia-smi: --capture is required")


@pytest.mark.parametrize("name", ["fixture-windows-1gpu", "fixture-windows-1gpu.txt"], ids=["bare-name", "with-txt"])
def test_capture_name_is_looked_up_in_the_captures_dir(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(CAPTURES_ENV, str(FIXTURES))
    monkeypatch.chdir(REPO)
    assert fake(capsys, "--capture", name, "--query-gpu=uuid", "--format=csv") == (0, f"uuid\n{WINDOWS_UUID}\n", "")


@pytest.mark.parametrize(
    "case",
    [
        ("nope", None, 'capture "nope" is not a file, and $NVIDIA_GPU_EXPORTER_CAPTURES is not set'),
        ("nope", "captures", 'capture "nope" is neither a file on disk nor in $NVIDIA_GPU_EXPORTER_CAPTURES'),
        ("missing/dir.txt", "captures", 'failed to load capture "missing/dir.txt": No such file or directory'),
        (".", None, 'failed to load capture ".": '),
        ("bad.txt", None, 'failed to parse capture file "bad.txt": line 1: text outside a block'),
    ],
    ids=["name-without-env", "name-not-in-dir", "path-not-found", "directory", "unparsable"],
)
def test_bad_capture_is_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    case: tuple[str, str | None, str],
) -> None:
    reference, env, message = case
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.txt").write_text("not a capture\n", encoding="utf-8")
    if env is not None:
        monkeypatch.setenv(CAPTURES_ENV, str(tmp_path / env))
    code, out, err = fake(capsys, "--capture", reference, *GPU_QUERY)
    assert (code, out) == (2, "")
    assert err.startswith(f"fake-nvidia-smi: {message}"), err


def test_unknown_state_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = fake(capsys, "--capture", WINDOWS, "--state", "busy", *GPU_QUERY)
    assert code == 2
    assert err == 'fake-nvidia-smi: capture has no "query-gpu (csv" section for state "busy"\n'


# ----------------------------------------------------------------------------------------------
# Failure injection


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--exit", "7", "--stderr-msg", "boom"], (7, "", "boom\n")),
        (["--exit", "7"], (7, "", "")),
        (["--exit=0", "--stderr-msg=note"], (0, "", "note\n")),
        (["--exit", "7", "--fail-arg", "--query-gpu"], (7, "", "")),
        (["--exit", "7", "--capture", "/nonexistent/capture.txt"], (7, "", "")),
    ],
    ids=[
        "exit-with-message",
        "exit-silent",
        "exit-zero-still-no-output",
        "exit-before-fail-arg",
        "exit-needs-no-capture",
    ],
)
def test_exit_injection(capsys: pytest.CaptureFixture[str], argv: list[str], expected: tuple[int, str, str]) -> None:
    assert fake(capsys, *argv, *GPU_QUERY) == expected


@pytest.mark.skipif(os.name == "nt", reason="POSIX exit statuses are one byte")
@pytest.mark.parametrize(("code", "status"), [("256", 0), ("300", 44), ("-1", 255)], ids=["256", "300", "negative"])
def test_exit_status_is_truncated_like_the_os_does(capsys: pytest.CaptureFixture[str], code: str, status: int) -> None:
    assert fake(capsys, "--exit", code, *GPU_QUERY)[0] == status


def test_fail_arg_fails_only_matching_invocations(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--capture", WINDOWS, "--fail-arg", "--query-compute-apps"]
    assert fake(capsys, *base, APPS_ARG, "--format=csv") == (
        1,
        "",
        f'fake-nvidia-smi: injected failure for "{APPS_ARG}"\n',
    )
    code, out, err = fake(capsys, *base, *GPU_QUERY)
    assert (code, err) == (0, "")
    assert out == f"uuid, temperature.gpu\n{WINDOWS_UUID}, 38\n"


def test_fail_arg_uses_stderr_msg_and_needs_no_capture(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--fail-arg", "--query-compute", "--stderr-msg", "Unable to determine the device handle"]
    assert fake(capsys, *argv, APPS_ARG, "--format=csv") == (1, "", "Unable to determine the device handle\n")


def test_empty_fail_arg_fails_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert fake(capsys, "--capture", WINDOWS, "--fail-arg", "", *GPU_QUERY)[0] == 0


def test_delay_is_slept_before_the_exit_injection() -> None:
    calls: list[str] = []

    def sleep(seconds: float) -> None:
        calls.append(f"sleep {seconds}")

    flags, rest = parse_flags(["--delay", "50ms", "--exit", "3", *GPU_QUERY])
    assert run(resolve(flags, rest), sleep) == Answer("", "", 3)
    assert calls == ["sleep 0.05"]


@pytest.mark.parametrize("delay", ["0s", "-1s"], ids=["zero", "negative"])
def test_non_positive_delay_does_not_sleep(delay: str) -> None:
    def sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds}")

    assert Injection(delay_ns=parse_duration(delay), exit_code=4).apply([], sleep) == Answer("", "", 4)


def test_delay_really_sleeps(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code, _, _ = fake(capsys, "--delay", "50ms", "--capture", WINDOWS, *GPU_QUERY)
    assert code == 0
    assert time.monotonic() - started >= 0.05


# ----------------------------------------------------------------------------------------------
# Config file merging

CONFIG = f"""\
capture: {WINDOWS}
state: load
overrides:
  temperature.gpu: 88
"""


def test_config_supplies_the_capture(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "fake.yaml", CONFIG)
    assert fake(capsys, "--config", config, *GPU_QUERY) == (0, f"uuid, temperature.gpu\n{WINDOWS_UUID}, 88\n", "")


@pytest.mark.parametrize("config_first", [True, False], ids=["config-before-flags", "config-after-flags"])
def test_flags_win_over_config_wherever_it_sits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, config_first: bool
) -> None:
    config = ["--config", write(tmp_path / "fake.yaml", CONFIG)]
    flags = ["--state", "idle", "--set", "temperature.gpu=95"]
    argv = [*config, *flags] if config_first else [*flags, *config]
    expected = (0, "pstate, temperature.gpu\nP8, 95\n", "")
    assert fake(capsys, *argv, "--query-gpu=pstate,temperature.gpu", "--format=csv") == expected


@pytest.mark.parametrize("config_first", [True, False], ids=["config-before-flag", "config-after-flag"])
def test_exit_flag_wins_over_config_exit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, config_first: bool
) -> None:
    config = ["--config", write(tmp_path / "fake.yaml", "exit: 9\nstderr-msg: config\n")]
    flags = ["--exit", "5"]
    argv = [*config, *flags] if config_first else [*flags, *config]
    assert fake(capsys, *argv, *GPU_QUERY) == (5, "", "config\n")


def test_config_failure_injection_applies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "fake.yaml", "fail-arg: --query-compute-apps\nstderr-msg: from config\n")
    assert fake(capsys, "--config", config, APPS_ARG, "--format=csv") == (1, "", "from config\n")


def test_config_delay_is_used(tmp_path: Path) -> None:
    config = write(tmp_path / "fake.yaml", "delay: 20ms\nexit: 0\n")
    flags, rest = parse_flags(["--config", config])
    slept: list[float] = []
    assert run(resolve(flags, rest), slept.append).exit_code == 0
    assert slept == [0.02]


PER_GPU = f"""\
capture: {WINDOWS}
overrides:
  temperature.gpu: 50
gpus:
  - uuid: GPU-first
    overrides:
      temperature.gpu: 70
  - {{}}
"""


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], "uuid, temperature.gpu\nGPU-first, 70\n" + generated_uuid(1) + ", 50\n"),
        (["--set", "temperature.gpu=95"], "uuid, temperature.gpu\nGPU-first, 95\n" + generated_uuid(1) + ", 95\n"),
        (["--gpus", "2"], f"uuid, temperature.gpu\n{generated_uuid(0)}, 50\n{generated_uuid(1)}, 50\n"),
    ],
    ids=["entry-beats-top-level", "flag-beats-entry", "gpus-flag-replaces-entries"],
)
def test_override_layering(capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], expected: str) -> None:
    config = write(tmp_path / "fake.yaml", PER_GPU)
    assert fake(capsys, "--config", config, *flags, *GPU_QUERY) == (0, expected, "")


def test_gpus_flag_makes_config_identity_override_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "fake.yaml", f"capture: {WINDOWS}\noverrides: {{serial: S1}}\n")
    code, _, err = fake(capsys, "--config", config, "--gpus", "2", *GPU_QUERY)
    assert code == 2
    assert 'field "serial" is a per-GPU identity' in err


@pytest.mark.parametrize(
    ("text", "message"),
    [("stat: load\n", 'unknown key "stat"'), ("gpus: zero\n", "gpus: must be a count")],
    ids=["unknown-key", "bad-gpus"],
)
def test_bad_config_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "fake.yaml", text)
    code, out, err = fake(capsys, "--config", config, *GPU_QUERY)
    assert (code, out) == (2, "")
    assert err.startswith(f'fake-nvidia-smi: config "{config}": line 1: ')
    assert message in err


def test_missing_config_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = fake(capsys, "--config", str(tmp_path / "none.yaml"), *GPU_QUERY)
    assert code == 2
    assert "failed to read config" in err


# ----------------------------------------------------------------------------------------------
# As a real subprocess


def subprocess_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != CAPTURES_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def run_fake(*argv: str | bytes) -> subprocess.CompletedProcess[bytes]:
    command: Sequence[str | bytes] = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", *argv]
    return subprocess.run(command, capture_output=True, env=subprocess_env(), timeout=60, check=False)


def test_subprocess_projection_writes_exact_bytes() -> None:
    result = run_fake("--capture", LINUX, "--state", "load", "--query-gpu=index,memory.used", "--format=csv")
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        b"index, memory.used [MiB]\n0, 30412 MiB\n1, 4 MiB\n",
        b"",
    )


def test_subprocess_exit_injection() -> None:
    result = run_fake("--exit", "7", "--stderr-msg", "boom", *GPU_QUERY)
    assert (result.returncode, result.stdout, result.stderr) == (7, b"", b"boom\n")


@pytest.mark.parametrize(
    "argv",
    [["--gpus"], ["--capture", "/nonexistent/x.txt", *GPU_QUERY], ["--config", "/nonexistent.yaml", "-L"]],
    ids=["missing-value", "missing-capture", "missing-config"],
)
def test_subprocess_errors_are_messages_not_tracebacks(argv: list[str]) -> None:
    result = run_fake(*argv)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.startswith(b"fake-nvidia-smi: ")
    assert b"Traceback" not in result.stderr


def test_subprocess_delay() -> None:
    started = time.monotonic()
    result = run_fake("--delay", "50ms", "--exit", "0")
    assert result.returncode == 0
    assert time.monotonic() - started >= 0.05


def test_subprocess_seed_is_reproducible_across_processes() -> None:
    argv = ("--capture", WINDOWS, "--seed", "9", "--gpus", "2", "--fluctuate", "--set-range", "power.draw=1.5:9.5")
    first = run_fake(*argv, "--query-gpu=uuid,power.draw,temperature.gpu", "--format=csv")
    second = run_fake(*argv, "--query-gpu=uuid,power.draw,temperature.gpu", "--format=csv")
    assert first.returncode == 0
    assert first.stdout == second.stdout


@pytest.mark.skipif(os.name == "nt", reason="POSIX argv carries arbitrary bytes")
def test_subprocess_undecodable_argument_is_go_quoted() -> None:
    result = run_fake("--capture", WINDOWS, b"--query-gpu=\xff", "--format=csv")
    assert (result.returncode, result.stdout) == (1, b'Field "\\xff" is not a valid field to query.\n')


def test_subprocess_help() -> None:
    result = run_fake("--help")
    assert result.returncode == 0
    assert result.stdout.startswith(b"usage: ")
