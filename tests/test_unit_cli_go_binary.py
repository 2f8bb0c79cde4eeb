"""The command line as the real Go exporter (kingpin v2.4.0) reads it, case by case as the differential fuzz
(tests/go_differential_cli.py) found it: each expected outcome here is what the Go v1.14.0 binary did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvidia_gpu_exporter import cli
from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.flags import FlagError, parse_args

SECOND = 1_000_000_000

# (argv, the error's exact text, why)
ERRORS: list[tuple[list[str], str, str]] = [
    (["--collect.interval", "-h"], "expected argument for flag '--collect.interval'", "a flag is not a value"),
    (["--log.level", "--collect.compute-apps"], "expected argument for flag '--log.level'", "a long flag neither"),
    (["--collect.interval", "-"], 'time: invalid duration ""', "a lone - is an empty argument"),
    (["--no-help", "-"], "unexpected ", "a lone - as a positional argument is empty"),
    (["--help=x"], "unexpected x", "a boolean's =value is a positional argument"),
    (["--help", "warn"], "unexpected warn", "a positional argument is a parse error: it beats --help"),
    (["--help", "--", "x"], "unexpected x", "so is one after --"),
    (["--collect.compute-apps=false"], "unexpected false", "a boolean takes no =value"),
    (["--collect.compute-apps=x"], "unexpected x", "whatever the value"),
    (["--no-collect.compute-apps=true"], "unexpected true", "a negated boolean neither"),
    (["--log.level=x"], "unrecognized log level x", "promslog's own message"),
    (["--log.format=x"], "unrecognized log format x", "promslog's own message"),
    (["--log.format=JSON"], "unrecognized log format JSON", "the format is case-sensitive"),
    (["--collect.backend=foo"], "enum value must be one of exec,nvml,demo, got 'foo'", "no flag name appended"),
    (["--collect.interval=10"], 'time: missing unit in duration "10"', "no flag name appended"),
    (["--web.max-requests=x"], 'strconv.ParseFloat: parsing "x": invalid syntax', "an int flag reads a float"),
    (["--web.max-requests=0x10"], 'strconv.ParseFloat: parsing "0x10": invalid syntax', "no hex integer"),
    (["--web.max-requests=1e400"], 'strconv.ParseFloat: parsing "1e400": value out of range', "beyond a float"),
    (
        ["@/nonexistent/args"],
        'failed to open arguments file "/nonexistent/args": open /nonexistent/args: no such file or directory',
        "an @file is read",
    ),
    (["@"], "expected @ file to expand arguments from", "an @ without a name"),
]


@pytest.mark.parametrize(("argv", "message"), [e[:2] for e in ERRORS], ids=[e[2] for e in ERRORS])
def test_parse_errors_as_the_go_binary_words_them(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_args(argv)
    assert str(caught.value) == message


# (argv, attribute, value, why)
VALUES: list[tuple[list[str], str, object, str]] = [
    (["--collect.interval", "--", "5s"], "collect_interval_ns", 5 * SECOND, "-- turns the next word into a value"),
    (["--log.level=DEBUG"], "log_level", "debug", "the level is case-insensitive"),
    (["--log.level=Warn"], "log_level", "warn", "in any case"),
    (["--web.max-requests=1.5"], "max_requests", 1, "a float truncated toward zero"),
    (["--web.max-requests=-1.9"], "max_requests", -1, "toward zero below it too"),
    (["--web.max-requests=1e3"], "max_requests", 1000, "an exponent"),
    (["--web.max-requests=99999999999999999999"], "max_requests", -(1 << 63), "Go's overflowing conversion"),
    (["--web.max-requests=NaN"], "max_requests", -(1 << 63), "NaN converts the same way"),
]


@pytest.mark.parametrize(("argv", "attribute", "value"), [v[:3] for v in VALUES], ids=[v[3] for v in VALUES])
def test_values_as_the_go_binary_reads_them(argv: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_args(argv).config, attribute) == value


def test_an_args_file_is_read_line_by_line(tmp_path: Path) -> None:
    """kingpin expands ``@FILE``: one argument a line, as written; blank lines and ``#`` comments skipped."""
    args = tmp_path / "args"
    args.write_text("# the exporter's flags\n--collect.interval\n\n5s\n--log.level=debug\n", encoding="utf-8")
    config = parse_args([f"@{args}", "--collect.compute-apps"]).config
    assert (config.collect_interval_ns, config.log_level, config.compute_apps) == (5 * SECOND, "debug", True)


def test_an_args_file_naming_itself_is_refused(tmp_path: Path) -> None:
    """Go would expand it forever; here the expansion is bounded and the error names the file."""
    args = tmp_path / "args"
    args.write_text(f"@{args}\n", encoding="utf-8")
    with pytest.raises(FlagError) as caught:
        parse_args([f"@{args}"])
    assert str(args) in str(caught.value)


# (telemetry path, the Go binary's message)
TELEMETRY_PATHS: list[tuple[str, str]] = [
    ("metrics", 'web.telemetry-path must start with a slash, got "metrics"'),
    ("", 'web.telemetry-path must start with a slash, got ""'),
    ("/", 'web.telemetry-path must not be "/", it would collide with the landing page'),
    ("/metrics/", 'web.telemetry-path must not end with a slash, got "/metrics/"'),
    ("/a//b", 'web.telemetry-path must be a clean path without empty or relative segments, got "/a//b"'),
    ("/a%20", 'web.telemetry-path must not contain the characters {}%?#, got "/a%20"'),
    ("/a b", 'web.telemetry-path must not contain whitespace, got "/a b"'),
    ("/-/ready", 'web.telemetry-path "/-/ready" collides with the exporter\'s own routes'),
    ("/debug/pprof/x", 'web.telemetry-path "/debug/pprof/x" collides with the exporter\'s own routes'),
]


@pytest.mark.parametrize(("path", "message"), TELEMETRY_PATHS, ids=[repr(p) for p, _ in TELEMETRY_PATHS])
def test_telemetry_path_errors_as_the_go_binary_words_them(path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(Config(telemetry_path=path))
    assert str(caught.value) == message


def test_a_parse_error_is_logged_as_go_logs_it_before_its_logger_is_set_up(capsys: pytest.CaptureFixture[str]) -> None:
    """The Go exporter reports a parse error through the standard library's default logger (its own is not set
    up yet): ``2006/01/02 15:04:05 ERROR failed to run err="..."``, local time."""
    assert cli.main(["--bogus"]) == 1
    assert re.fullmatch(
        r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR failed to run "
        r"err=\"failed to parse the command line: unknown long flag '--bogus'\"\n",
        capsys.readouterr().err,
    )
