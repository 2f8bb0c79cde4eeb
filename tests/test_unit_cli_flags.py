"""Command-line parsing, startup validation in order and Go durations (docs/compatibility.md, "Command line")."""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter._go.durations import DurationError, format_duration, parse_duration, parse_flag_duration
from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.flags import FLAGS, FlagError, Kind, parse_args

SECOND = 1_000_000_000
MS = 1_000_000

# -- flags ------------------------------------------------------------------------------------------------------


def test_defaults_match_spec_table() -> None:
    config = parse_args([]).config
    assert config.listen_addresses == (":9835",)
    assert config.web_config_file == ""
    assert config.systemd_socket is False
    assert config.network == "tcp"
    assert config.read_timeout_ns == 10 * SECOND
    assert config.read_header_timeout_ns == 10 * SECOND
    assert config.write_timeout_ns == 15 * SECOND
    assert config.idle_timeout_ns == 60 * SECOND
    assert config.telemetry_path == "/metrics"
    assert config.max_requests == 40
    assert config.timeout_offset_ns == 500 * MS
    assert config.enable_pprof is False
    assert config.nvidia_smi_command == "nvidia-smi"
    assert config.query_field_names == "AUTO"
    assert config.query_field_names_exclude == ""
    assert config.backend == "exec"
    assert config.collect_interval_ns == 0
    assert config.collect_timeout_ns == 10 * SECOND
    assert (config.compute_apps, config.compute_apps_mig, config.pcie_throughput) == (False, False, False)
    assert config.demo_config == ""
    assert config.shutdown_on_error is False
    assert (config.log_level, config.log_format) == ("info", "logfmt")
    assert parse_args([]).action == "run"


@pytest.mark.parametrize(
    ("argv", "attribute", "value"),
    [
        (["--collect.interval=1m30s"], "collect_interval_ns", 90 * SECOND),
        (["--collect.interval", "500ms"], "collect_interval_ns", 500 * MS),
        (["--web.telemetry-path=/x"], "telemetry_path", "/x"),
        (["--web.telemetry-path", "/y"], "telemetry_path", "/y"),
        (["--web.max-requests=0"], "max_requests", 0),
        (["--web.max-requests=-1"], "max_requests", -1),
        (["--query-field-names=a, b"], "query_field_names", "a, b"),
        (["--nvidia-smi-command=sudo nvidia-smi"], "nvidia_smi_command", "sudo nvidia-smi"),
        (["--collect.backend=demo"], "backend", "demo"),
        (["--log.level", "debug"], "log_level", "debug"),
        (["--log.format=json"], "log_format", "json"),
        (["--web.timeout-offset=0"], "timeout_offset_ns", 0),
        (["--collect.timeout=-1s"], "collect_timeout_ns", -SECOND),
        (["--query-field-names="], "query_field_names", ""),
        (["--web.telemetry-path=a=b"], "telemetry_path", "a=b"),
        (["--web.max-requests", "0" * 5000 + "7"], "max_requests", 7),
        (["--web.max-requests=-" + "0" * 5000 + "7"], "max_requests", -7),
    ],
    ids=[
        "--flag=value duration",
        "--flag value duration",
        "--flag=value string",
        "--flag value string",
        "int zero",
        "negative int parses (validation rejects later)",
        "value kept verbatim",
        "value with spaces",
        "enum backend",
        "enum log level",
        "enum log format",
        "duration 0",
        "negative duration parses (validation rejects later)",
        "empty value",
        "only the first = separates",
        "thousands of leading zeros",
        "thousands of leading zeros, negative",
    ],
)
def test_flag_values(argv: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_args(argv).config, attribute) == value


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--collect.compute-apps"], True),
        (["--no-collect.compute-apps"], False),
    ],
    ids=["--flag", "--no-flag"],
)
def test_bool_flags(argv: list[str], value: bool) -> None:
    assert parse_args(argv).config.compute_apps is value


def test_bool_flag_does_not_consume_next_argument() -> None:
    with pytest.raises(FlagError):
        parse_args(["--collect.compute-apps", "false"])


def test_repeatable_listen_address() -> None:
    config = parse_args(["--web.listen-address=:1", "--web.listen-address", "127.0.0.1:2"]).config
    assert config.listen_addresses == (":1", "127.0.0.1:2")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--bogus"], "bogus"),
        (["--bogus=1"], "bogus"),
        (["--no-web.telemetry-path"], "web.telemetry-path"),
        (["--web.telemetry-path"], "web.telemetry-path"),
        (["--collect.timeout"], "collect.timeout"),
        (["--collect.timeout=10"], "missing unit"),
        (["--collect.interval=abc"], 'invalid duration "abc"'),
        (["--collect.backend=foo"], "foo"),
        (["--log.level=trace"], "trace"),
        (["--log.format=xml"], "xml"),
        (["--web.max-requests=abc"], 'parsing "abc"'),
        (["--web.max-requests=1.5x"], 'parsing "1.5x"'),
        (["--collect.compute-apps=maybe"], "unexpected maybe"),
        (["positional"], "positional"),
        (["-x"], "-x"),
    ],
    ids=[
        "unknown flag",
        "unknown flag with value",
        "--no- only for booleans",
        "missing value (string)",
        "missing value (duration)",
        "bare 10 is not a duration",
        "bad duration",
        "bad backend enum",
        "bad log level",
        "bad log format",
        "bad int",
        "not a float",
        "bad bool",
        "unexpected positional argument",
        "unknown short flag",
    ],
)
def test_flag_errors(argv: list[str], fragment: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_args(argv)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "action"),
    [
        (["-h"], "help"),
        (["--help"], "help"),
        (["--version"], "version"),
        (["--help-long"], "help-long"),
        (["--help-man"], "help-man"),
        (["--completion-script-bash"], "completion-script-bash"),
        (["--completion-script-zsh"], "completion-script-zsh"),
        (["--completion-bash", "--bogus", "--collect.interval=x"], "completion-bash"),
    ],
    ids=[
        "-h",
        "--help",
        "--version",
        "--help-long",
        "--help-man",
        "--completion-script-bash",
        "--completion-script-zsh",
        "--completion-bash completes whatever else is there",
    ],
)
def test_actions(argv: list[str], action: str) -> None:
    assert parse_args(argv).action == action


# In kingpin's order: the command line is read up to a parse error (unknown flag, missing value, a positional
# argument); a generating flag read by then wins; then the parse error; then --help; then the values, in order
# (a bad one, or a flag given twice that does not repeat).
ORDER: list[tuple[list[str], str | None, str, str]] = [
    (["--version", "--bogus"], "version", "", "a generating flag before a parse error wins"),
    (["--bogus", "--version"], None, "unknown long flag '--bogus'", "a parse error stops reading"),
    (["--collect.interval=abc", "--version"], "version", "", "a generating flag wins over a bad value"),
    (["--collect.interval=abc", "--help"], "help", "", "help wins over a bad value"),
    (["--help", "--bogus"], None, "unknown long flag '--bogus'", "a parse error wins over help"),
    (["--help", "positional"], None, "unexpected positional", "a positional argument is a parse error: beats help"),
    (["positional", "--help"], None, "unexpected positional", "a positional argument stops reading"),
    (["--help-man", "--collect.timeout"], "help-man", "", "a generating flag wins over a missing value"),
    (["--help", "--help"], "help", "", "help twice is help"),
    (
        ["--collect.interval=1s", "--collect.interval=2s"],
        None,
        "flag 'collect.interval' cannot be repeated",
        "a flag that does not repeat, twice",
    ),
    (
        ["--collect.compute-apps", "--no-collect.compute-apps"],
        None,
        "flag 'collect.compute-apps' cannot be repeated",
        "a boolean and its negation are one flag twice",
    ),
    (
        ["--collect.interval=x", "--collect.interval=1s"],
        None,
        'time: invalid duration "x"',  # kingpin names no flag
        "values are checked in order",
    ),
    (["--web.listen-address=:1", "--web.listen-address=:2"], "run", "", "the listen address repeats"),
    (["--", "x"], None, "unexpected x", "only positional arguments after --"),
    (["--help", "--", "x"], None, "unexpected x", "so is one after --"),
    (["--"], "run", "", "a bare -- ends the flags"),
    (["-q", "--version"], None, "unknown short flag '-q'", "an unknown short flag stops reading"),
    (["-hh"], "help", "", "short flags combine"),
    (["-hx"], None, "unknown short flag '-x'", "a combined unknown short flag is a parse error"),
    (["--help=false"], None, "unexpected false", "help is a boolean flag: its =value is a positional argument"),
    (["--no-help"], "help", "", "help negated still asks for help"),
    (["--version=false"], "version", "", "version with a value still prints the version"),
    (["--no-help-man"], "help-man", "", "a generating flag negated still generates"),
]


@pytest.mark.parametrize(("argv", "action", "message"), [o[:3] for o in ORDER], ids=[o[3] for o in ORDER])
def test_kingpin_order(argv: list[str], action: str | None, message: str) -> None:
    if action is not None:
        assert parse_args(argv).action == action
        return
    with pytest.raises(FlagError) as caught:
        parse_args(argv)
    assert str(caught.value) == message


_TOKENS = st.one_of(
    st.sampled_from(
        [f"--{flag.name}" for flag in FLAGS]
        + [f"--no-{flag.name}" for flag in FLAGS]
        + ["-h", "--help", "--version", "--help-man", "--", "-", "-x", "--x", "1d", "10", "true", "=", "9" * 5000]
    ),
    st.builds(lambda flag, value: f"--{flag.name}={value}", st.sampled_from(FLAGS), st.text(max_size=8)),
    st.text(max_size=8),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_TOKENS, max_size=8))
def test_any_command_line_parses_or_raises_flag_error(argv: list[str]) -> None:
    try:
        parse_args(argv)
    except FlagError:
        return


# -- validation --------------------------------------------------------------------------------------------------


def problem(**changes: object) -> str | None:
    try:
        validate(dataclasses.replace(Config(), **changes))  # type: ignore[arg-type]
    except ConfigError as error:
        return str(error)
    return None


def test_defaults_are_valid() -> None:
    assert problem() is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"collect_interval_ns": -SECOND}, "collect.interval must not be negative, got -1s"),
        ({"collect_timeout_ns": -SECOND}, "collect.timeout must not be negative, got -1s"),
        ({"collect_timeout_ns": -1500 * MS}, "collect.timeout must not be negative, got -1.5s"),
        ({"collect_interval_ns": -90 * SECOND}, "collect.interval must not be negative, got -1m30s"),
        ({"collect_interval_ns": -1}, "collect.interval must not be negative, got -1ns"),
    ],
    ids=[
        "negative interval, Go duration text",
        "negative timeout, same shape",
        "fractional seconds",
        "minutes",
        "nanoseconds",
    ],
)
def test_negative_durations(changes: dict[str, object], message: str) -> None:
    assert problem(**changes) == message


REJECTED_PATHS: list[tuple[str, str]] = [
    ("/", "TestTelemetryPathValidation /"),
    ("metrics", "TestTelemetryPathValidation metrics"),
    ("/-/healthy", "TestTelemetryPathValidation /-/healthy"),
    ("/debug/pprof/heap", "TestTelemetryPathValidation /debug/pprof/heap"),
    ("/metrics/", "TestTelemetryPathValidation /metrics/"),
    ("/met rics", "TestTelemetryPathValidation /met rics"),
    ("", "must start with /: empty"),
    ("/-/ready", "reserved /-/ready"),
    ("/debug/pprof", "reserved /debug/pprof even with pprof off"),
    ("/debug/pprof/", "under /debug/pprof/ and trailing slash"),
    ("//metrics", "clean: leading //"),
    ("/a//b", "clean: inner //"),
    ("/a/./b", "clean: /./"),
    ("/a/../b", "clean: /../"),
    ("/a/.", "clean: trailing /."),
    ("/a/..", "clean: trailing /.."),
    ("/m{x}", "no {"),
    ("/m}", "no }"),
    ("/m%20", "no %"),
    ("/m?x", "no ?"),
    ("/m#x", "no #"),
    ("/m\tx", "no tab"),
    ("/m\nx", "no newline"),
]


@pytest.mark.parametrize("path", [p for p, _ in REJECTED_PATHS], ids=[f"rejected: {i}" for _, i in REJECTED_PATHS])
def test_telemetry_path_rejected(path: str) -> None:
    message = problem(telemetry_path=path)
    assert message is not None
    assert "web.telemetry-path" in message


ALLOWED_PATHS = [
    "/metrics",
    "/some/nested/path",
    "/-/metrics",
    "/-/healthy-metrics",
    "/debug/pprofile",
    "/custom-metrics",
]


@pytest.mark.parametrize("path", ALLOWED_PATHS, ids=[f"allowed: {p}" for p in ALLOWED_PATHS])
def test_telemetry_path_allowed(path: str) -> None:
    assert problem(telemetry_path=path) is None


def test_max_requests_negative() -> None:
    message = problem(max_requests=-1)
    assert message is not None
    assert "web.max-requests" in message


def test_timeout_offset_negative() -> None:
    message = problem(timeout_offset_ns=-MS)
    assert message is not None
    assert "web.timeout-offset" in message


def test_zero_limits_allowed() -> None:
    """Zeros are allowed: max-requests 0 = unlimited; offset 0; interval 0; timeout 0 = unbounded."""
    assert problem(max_requests=0, timeout_offset_ns=0, collect_interval_ns=0, collect_timeout_ns=0) is None


BACKEND_RULES: list[tuple[dict[str, object], str | None, str]] = [
    (
        {"backend": "nvml", "nvidia_smi_command": "sudo nvidia-smi"},
        "--nvidia-smi-command cannot be combined with --collect.backend=nvml",
        "nvml + custom command",
    ),
    (
        {"backend": "demo", "nvidia_smi_command": "/usr/bin/nvidia-smi"},
        "--nvidia-smi-command cannot be combined with --collect.backend=demo",
        "demo + custom command",
    ),
    ({"backend": "nvml", "nvidia_smi_command": "nvidia-smi"}, None, "explicit literal nvidia-smi allowed"),
    (
        {"pcie_throughput": True},
        "--collect.pcie-throughput requires --collect.backend=nvml",
        "exec + pcie throughput",
    ),
    ({"backend": "nvml", "pcie_throughput": True}, None, "nvml + pcie throughput allowed"),
    ({"backend": "demo", "pcie_throughput": True}, None, "demo + pcie throughput accepted no-op"),
    (
        {"compute_apps": True, "compute_apps_mig": True},
        "--collect.compute-apps-mig requires --collect.backend=nvml or demo",
        "exec + compute-apps-mig",
    ),
    (
        {"backend": "nvml", "compute_apps_mig": True},
        "--collect.compute-apps-mig requires --collect.compute-apps",
        "mig without compute-apps",
    ),
    ({"backend": "demo", "compute_apps": True, "compute_apps_mig": True}, None, "demo + mig allowed"),
    ({"demo_config": "x.yaml"}, "--demo-config requires --collect.backend=demo", "demo-config with exec"),
    ({"process_usage": True}, None, "exec + process usage"),
    ({"process_usage": True, "process_usage_max_processes": 0}, None, "process usage, sums only"),
    (
        {"process_usage": True, "process_usage_max_processes": -1},
        "--collect.process-usage-max-processes must not be negative, got -1",
        "negative process cap",
    ),
    (
        {"backend": "nvml", "demo_config": "x.yaml"},
        "--demo-config requires --collect.backend=demo",
        "demo-config with nvml",
    ),
    ({"backend": "demo", "demo_config": "x.yaml"}, None, "demo-config with demo"),
    # order of the five rules
    (
        {"backend": "nvml", "nvidia_smi_command": "x", "compute_apps_mig": True, "demo_config": "y"},
        "--nvidia-smi-command cannot be combined with --collect.backend=nvml",
        "order: custom command first",
    ),
    (
        {"pcie_throughput": True, "compute_apps_mig": True, "demo_config": "y"},
        "--collect.pcie-throughput requires --collect.backend=nvml",
        "order: pcie before mig",
    ),
    (
        {"compute_apps_mig": True},
        "--collect.compute-apps-mig requires --collect.backend=nvml or demo",
        "order: exec mig rule before compute-apps rule",
    ),
    (
        {"backend": "nvml", "compute_apps_mig": True, "demo_config": "y"},
        "--collect.compute-apps-mig requires --collect.compute-apps",
        "order: compute-apps rule before demo-config",
    ),
]


@pytest.mark.parametrize(("changes", "message"), [r[:2] for r in BACKEND_RULES], ids=[r[2] for r in BACKEND_RULES])
def test_backend_combinations(changes: dict[str, object], message: str | None) -> None:
    assert problem(**changes) == message


VALIDATION_ORDER: list[tuple[dict[str, object], str, str]] = [
    ({"collect_interval_ns": -1, "collect_timeout_ns": -1}, "collect.interval", "interval before timeout"),
    ({"collect_timeout_ns": -1, "telemetry_path": "/"}, "collect.timeout", "durations before telemetry path"),
    ({"telemetry_path": "/", "max_requests": -1}, "web.telemetry-path", "telemetry path before max-requests"),
    ({"max_requests": -1, "timeout_offset_ns": -1}, "web.max-requests", "max-requests before timeout-offset"),
    (
        {"timeout_offset_ns": -1, "backend": "nvml", "nvidia_smi_command": "x"},
        "web.timeout-offset",
        "timeout-offset before backend rules",
    ),
]


@pytest.mark.parametrize(
    ("changes", "prefix"), [r[:2] for r in VALIDATION_ORDER], ids=[f"order: {r[2]}" for r in VALIDATION_ORDER]
)
def test_validation_order(changes: dict[str, object], prefix: str) -> None:
    message = problem(**changes)
    assert message is not None
    assert message.startswith(prefix)


def test_parse_then_validate_negative_interval() -> None:
    config = parse_args(["--collect.interval=-1s"]).config
    with pytest.raises(ConfigError, match=r"^collect\.interval must not be negative, got -1s$"):
        validate(config)


# -- durations ----------------------------------------------------------------------------------------------------

PARSE: list[tuple[str, int]] = [
    ("1m30s", 90 * SECOND),
    ("500ms", 500 * MS),
    ("1.5h", 5400 * SECOND),
    ("0", 0),
    ("-0", 0),
    ("+5s", 5 * SECOND),
    ("-1s", -SECOND),
    (".5s", 500 * MS),
    ("1.s", SECOND),
    ("1h2m3s4ms5us6ns", 3723 * SECOND + 4 * MS + 5000 + 6),
    ("1µs", 1000),
    ("1μs", 1000),
    ("10s", 10 * SECOND),
    ("0s", 0),
    ("2562047h47m16.854775807s", (1 << 63) - 1),
    ("-9223372036854775808ns", -(1 << 63)),
    ("1.0000000001s", SECOND),
]


@pytest.mark.parametrize(("text", "ns"), PARSE, ids=[f"go duration {t!r}" for t, _ in PARSE])
def test_parse_duration(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


BAD: list[tuple[str, str]] = [
    ("10", 'time: missing unit in duration "10"'),
    ("", 'time: invalid duration ""'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("s", 'time: invalid duration "s"'),
    ("-", 'time: invalid duration "-"'),
    (".s", 'time: invalid duration ".s"'),
    ("1.5", 'time: missing unit in duration "1.5"'),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[f"bad go duration {t!r}" for t, _ in BAD])
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    assert str(caught.value) == message


FORMAT: list[tuple[int, str]] = [
    (0, "0s"),
    (1, "1ns"),
    (1500, "1.5µs"),
    (1_500_000, "1.5ms"),
    (500 * MS, "500ms"),
    (90 * SECOND, "1m30s"),
    (5400 * SECOND, "1h30m0s"),
    (3600 * SECOND, "1h0m0s"),
    (-SECOND, "-1s"),
    (10 * SECOND + 1, "10.000000001s"),
    (60 * SECOND, "1m0s"),
]


@pytest.mark.parametrize(("ns", "text"), FORMAT, ids=[f"go duration string {t}" for _, t in FORMAT])
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


# Duration flags read Go syntax and, for what Go refuses, Prometheus' integer units up to `y` in order.
DAY = 24 * 3600 * SECOND
FLAG_DURATIONS: list[tuple[str, int, str]] = [
    ("1d", DAY, "day is 24h"),
    ("1w", 7 * DAY, "week is 7d"),
    ("1y", 365 * DAY, "year is 365d"),
    ("1d12h", DAY + 12 * 3600 * SECOND, "units combine largest first"),
    ("1y2w3d4h5m6s7ms", (365 + 14 + 3) * DAY + 4 * 3600 * SECOND + 306 * SECOND + 7 * MS, "every unit once"),
    ("0d", 0, "zero days"),
    ("0" * 30 + "1s", SECOND, "leading zeros do not overflow"),
    ("0" * 30 + "2d", 2 * DAY, "leading zeros of days do not overflow"),
    ("1h30m", 5400 * SECOND, "go syntax first"),
    ("1.5h", 5400 * SECOND, "go fraction"),
    ("300ms", 300 * MS, "go milliseconds"),
    ("10us", 10_000, "go microseconds"),
    ("0", 0, "bare zero"),
    ("-1s", -SECOND, "go negative parses (validation refuses it)"),
    ("1h1h", 7200 * SECOND, "go repeats a unit"),
]


@pytest.mark.parametrize(("text", "ns"), [r[:2] for r in FLAG_DURATIONS], ids=[r[2] for r in FLAG_DURATIONS])
def test_flag_durations(text: str, ns: int) -> None:
    assert parse_flag_duration(text) == ns
    assert parse_args([f"--collect.interval={text}"]).config.collect_interval_ns == ns


BAD_FLAG_DURATIONS: list[tuple[str, str, str]] = [
    ("1.5d", 'time: unknown unit "d" in duration "1.5d"', "no fraction with day"),
    ("-1d", 'time: unknown unit "d" in duration "-1d"', "no sign with day"),
    ("+1d", 'time: unknown unit "d" in duration "+1d"', "no plus sign with day"),
    ("12h1d", 'time: unknown unit "d" in duration "12h1d"', "units out of order"),
    ("1d1d", 'time: unknown unit "d" in duration "1d1d"', "unit repeated with day"),
    ("1d500us", 'time: unknown unit "d" in duration "1d500us"', "no microseconds with day"),
    ("1D", 'time: unknown unit "D" in duration "1D"', "units are lower case"),
    ("300y", 'time: unknown unit "y" in duration "300y"', "beyond int64 nanoseconds"),
    ("10", 'time: missing unit in duration "10"', "bare number"),
    ("", 'time: invalid duration ""', "empty"),
    ("1 d", 'time: unknown unit " d" in duration "1 d"', "a space starts the unit"),
    ("1%", 'time: unknown unit "%" in duration "1%"', "any non-digit run is the unit"),
    ("1.5.3s", 'time: missing unit in duration "1.5.3s"', "second point ends the number"),
    ("1é", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"', "non-ascii quoted as bytes"),
    ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"', "below int64"),
    ("9" * 5000 + "s", f'time: invalid duration "{"9" * 5000}s"', "thousands of digits overflow"),
    ("9" * 5000 + "d", f'time: invalid duration "{"9" * 5000}d"', "thousands of digits of days"),
]


@pytest.mark.parametrize(
    ("text", "message"), [r[:2] for r in BAD_FLAG_DURATIONS], ids=[r[2] for r in BAD_FLAG_DURATIONS]
)
def test_bad_flag_durations(text: str, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_flag_duration(text)
    assert str(caught.value) == message
    with pytest.raises(FlagError) as flag_error:
        parse_args(["--collect.timeout=" + text])
    assert str(flag_error.value) == message


@pytest.mark.parametrize("flag", [f.name for f in FLAGS if f.kind is Kind.DURATION])
def test_every_duration_flag_takes_days(flag: str) -> None:
    attribute = next(f.attribute for f in FLAGS if f.name == flag)
    assert getattr(parse_args([f"--{flag}=2d"]).config, attribute) == 2 * DAY


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789.+-nsuµμmhdwy x")), max_size=40))
def test_flag_durations_only_raise_duration_error(text: str) -> None:
    try:
        value = parse_flag_duration(text)
    except DurationError:
        return
    assert -(1 << 63) <= value <= (1 << 63) - 1


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-((1 << 63) - 1), max_value=(1 << 63) - 1))
def test_duration_round_trip(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


# -- readiness (--web.ready.*; docs/compatibility.md, "Readiness") ----------------------------------------------


@pytest.mark.parametrize(
    ("argv", "attribute", "value"),
    [
        (["--web.ready.require-collection"], "ready_require_collection", True),
        (["--web.ready.max-staleness=2m"], "ready_max_staleness_ns", 120 * SECOND),
        (["--web.ready.min-gpus", "8"], "ready_min_gpus", "8"),
        (["--web.ready.min-gpus=pci"], "ready_min_gpus", "pci"),
    ],
)
def test_readiness_flags(argv: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_args(argv).config, attribute) == value


def test_readiness_is_off_by_default() -> None:
    config = parse_args([]).config
    assert (config.ready_require_collection, config.ready_max_staleness_ns, config.ready_min_gpus) == (False, 0, "0")


READY = {"ready_require_collection": True}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({**READY, "ready_max_staleness_ns": 60 * SECOND, "ready_min_gpus": "8"}, None),
        ({**READY, "ready_min_gpus": "pci"}, None),
        ({**READY, "ready_min_gpus": "0"}, None),
        ({**READY, "ready_max_staleness_ns": 30 * SECOND, "collect_interval_ns": 15 * SECOND}, None),
        (
            {"ready_max_staleness_ns": 60 * SECOND},
            "--web.ready.max-staleness requires --web.ready.require-collection",
        ),
        ({"ready_min_gpus": "pci"}, "--web.ready.min-gpus requires --web.ready.require-collection"),
        ({"ready_min_gpus": "2"}, "--web.ready.min-gpus requires --web.ready.require-collection"),
        ({**READY, "ready_max_staleness_ns": -SECOND}, "--web.ready.max-staleness must not be negative, got -1s"),
        (
            {**READY, "ready_min_gpus": "-1"},
            "--web.ready.min-gpus must be a number of GPUs (0 or more) or pci, got '-1'",
        ),
        (
            {**READY, "ready_min_gpus": "PCI"},
            "--web.ready.min-gpus must be a number of GPUs (0 or more) or pci, got 'PCI'",
        ),
        (
            {**READY, "ready_max_staleness_ns": 15 * SECOND, "collect_interval_ns": 15 * SECOND},
            "--web.ready.max-staleness (15s) must be longer than --collect.interval (15s): every collection would "
            "be stale before the next one",
        ),
    ],
    ids=[
        "bound and count",
        "pci",
        "count 0",
        "bound longer than the interval",
        "bound without require-collection",
        "pci without require-collection",
        "count without require-collection",
        "negative bound",
        "negative count",
        "not a count nor pci",
        "bound no longer than the interval",
    ],
)
def test_readiness_validation(changes: dict[str, object], message: str | None) -> None:
    assert problem(**changes) == message


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("exec", "--web.ready.min-gpus=pci needs the PCI bus from sysfs (Linux) or the demo backend"),
        ("demo", None),  # the demo simulates its bus
    ],
)
def test_readiness_by_the_pci_bus_needs_sysfs(
    monkeypatch: pytest.MonkeyPatch, backend: str, message: str | None
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    assert problem(**READY, ready_min_gpus="pci", backend=backend) == message
    assert problem(**READY, ready_min_gpus="2", backend=backend) is None


# -- --collect.stream-interval (docs/collection-modes.md) --------------------------------------------------


def test_stream_interval_parses_and_is_off_by_default() -> None:
    assert parse_args([]).config.collect_stream_interval_ns == 0
    assert parse_args(["--collect.stream-interval=250ms"]).config.collect_stream_interval_ns == 250 * MS


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"collect_stream_interval_ns": SECOND}, None),
        ({"collect_stream_interval_ns": MS}, None),
        ({"collect_stream_interval_ns": -SECOND}, "collect.stream-interval must not be negative, got -1s"),
        (
            {"collect_stream_interval_ns": 500_000},
            "--collect.stream-interval must be at least 1ms (nvidia-smi -lms counts milliseconds), got 500µs",
        ),
        (
            {"collect_stream_interval_ns": SECOND, "backend": "nvml"},
            "--collect.stream-interval requires --collect.backend=exec",
        ),
        (
            {"collect_stream_interval_ns": SECOND, "backend": "demo"},
            "--collect.stream-interval requires --collect.backend=exec",
        ),
    ],
    ids=["1s", "1ms", "negative", "under a millisecond", "nvml", "demo"],
)
def test_stream_interval_validation(changes: dict[str, object], message: str | None) -> None:
    assert problem(**changes) == message


@pytest.mark.parametrize(
    ("argv", "usage", "cap"),
    [
        ([], False, 16),
        (["--collect.process-usage"], True, 16),
        (["--collect.process-usage", "--collect.process-usage-max-processes=3"], True, 3),
    ],
)
def test_process_usage_flags(argv: list[str], usage: bool, cap: int) -> None:
    config = parse_args(argv).config
    assert (config.process_usage, config.process_usage_max_processes) == (usage, cap)
