"""Collection through the real exporter process: failures, timeouts, shutdown, field selection, startup
validation, the fake nvidia-smi's value controls, cached mode and our two fixture captures end to end.

Where a collection must misbehave only after startup (slow, hung, odd output), the exporter runs
``tests/fixtures/scripts/fake-smi-wrapper.sh`` in front of the fake; see that script for its control files.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import comparable, label_values, parse, sample_value, samples, values_of
from harness import FIXTURE_CAPTURES, Wrapper, fake_smi_command, process_gone, run_exporter_to_exit
from nvidia_gpu_exporter.backends.exec.command import quote_word
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.collector import SHUTDOWN_ON_ERROR_DOES_NOT_APPLY
from polling import wait_until

MIG_FIXTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
WINDOWS_FIXTURE = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"
MIG_GPU0 = "3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
MIG_GPU1 = "8d42e1b5-0c9f-4a73-b2e6-5f17c3d9a804"
WINDOWS_GPU = "5b0d7e19-a4c3-4f26-8e91-3c7a2f6d0e48"
# The fake's uuids of replicated GPUs 0 and 1 (docs/fake-nvidia-smi.md, "Replication, overrides and fluctuation").
REPLICA_UUIDS = ("1c67088e-9ecb-4564-bb97-6151ecc2ef64", "ef427e4f-1970-42f2-ab0c-ecf0e56a33b9")
MOVING_FAMILIES = (
    "nvidia_smi_power_draw_watts",
    "nvidia_smi_temperature_gpu",
    "nvidia_smi_utilization_gpu_ratio",
    "nvidia_smi_clocks_current_graphics_clock_hz",
    "nvidia_smi_memory_used_bytes",
    "nvidia_smi_fan_speed_ratio",
)
NO_RESULT_ABSENT = (
    "nvidia_smi_gpu_info",
    "nvidia_smi_command_exit_code",
    "nvidia_smi_last_collect_duration_seconds",
    "nvidia_smi_last_collect_success_timestamp_seconds",
)

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="needs /bin/sh, signals and /proc")


# -- helpers ----------------------------------------------------------------------------------------------


def fixture_command(capture: Path = MIG_FIXTURE, *fake_args: str) -> tuple[str, str]:
    return ("--nvidia-smi-command", fake_smi_command(capture, *fake_args))


def mig_csv_lines(state: str = "idle") -> list[str]:
    section = load_capture(MIG_FIXTURE).find(state, "query-gpu (csv")
    assert section is not None
    return section.body.split("\n")


def assert_failed_collection(scrape: str, exit_code: int, failures: int = 1) -> None:
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_command_exit_code") == exit_code
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 0
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == failures
    assert samples(scrape, "nvidia_smi_last_collect_duration_seconds") != []
    assert "nvidia_smi_gpu_info" not in scrape
    assert "nvidia_smi_temperature_gpu" not in scrape
    assert "nvidia_smi_compute_apps_last_collect_success" not in scrape


# -- success basics -----------------------------------------------------------------------------------


def test_successful_collection_has_exit_code_zero_and_wall_clock_families(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command())
    before = time.time()
    scrape = handle.scrape()
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_command_exit_code") == 0
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == 0
    duration = sample_value(scrape, "nvidia_smi_last_collect_duration_seconds")
    assert duration is not None
    assert 0 < duration < 30
    timestamp = sample_value(scrape, "nvidia_smi_last_collect_success_timestamp_seconds")
    assert timestamp is not None
    assert timestamp == int(timestamp)  # whole seconds
    assert int(before) - 1 <= timestamp <= time.time() + 1
    assert "nvidia_smi_nvml_return_code" not in scrape


# -- failing nvidia-smi -----------------------------------------------------------------------------------


def test_failing_query_keeps_serving(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--exit", "7", "--stderr-msg", "GPU is lost"))
    first = handle.get("/metrics")
    assert first.status == 200
    assert_failed_collection(first.text, 7, failures=1)
    assert_failed_collection(handle.scrape(), 7, failures=2)  # one failure per collection, not sticky
    assert handle.get("/-/healthy").status == 200
    assert handle.get("/-/ready").status == 200
    wait_until(lambda: "failed to collect metrics" in handle.log, "the failure to be logged")
    assert handle.process.poll() is None


@posix_only
def test_shutdown_on_error_exits_with_nvidia_smis_exit_code(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--exit", "7"), "--shutdown-on-error")
    response = handle.get("/metrics")
    assert response.status == 200  # the triggering scrape is still answered
    assert sample_value(response.text, "nvidia_smi_command_exit_code") == 7
    assert handle.process.wait(timeout=15) == 7


@posix_only
@pytest.mark.parametrize(
    ("setup", "flags", "exit_code"),
    [
        pytest.param("", ("--nvidia-smi-command=/nonexistent/nvidia-smi",), -1, id="nvidia-smi-cannot-start"),
        pytest.param("", ("--nvidia-smi-command={not_executable}",), -1, id="nvidia-smi-not-executable"),
        pytest.param("stdout", (), -1, id="unparsable-output-of-a-successful-run"),
        pytest.param("hang", ("--collect.timeout=1s",), -1, id="collection-timeout"),
    ],
)
def test_shutdown_on_error_ignores_failures_that_are_not_a_non_zero_exit(
    exporter: StartExporter, tmp_path: Path, setup: str, flags: tuple[str, ...], exit_code: int
) -> None:
    wrapper = Wrapper.create(tmp_path)
    not_executable = tmp_path / "nvidia-smi"
    not_executable.write_text("#!/bin/sh\n")  # mode 0644: exists, but cannot be run
    flags = tuple(flag.format(not_executable=not_executable) for flag in flags)
    command = () if flags and flags[0].startswith("--nvidia-smi-command") else wrapper.args()
    handle = exporter(*command, *flags, "--shutdown-on-error")
    if setup == "stdout":
        wrapper.set("stdout", "not csv at all\n")
    elif setup == "hang":
        wrapper.set("hang", "")
    assert_failed_collection(handle.scrape(), exit_code, failures=1)
    for name in ("hang", "stdout"):
        (wrapper.control / name).unlink(missing_ok=True)
    time.sleep(0.3)  # a shutdown would have begun by now
    assert handle.process.poll() is None
    assert handle.get("/-/healthy").status == 200
    wait_until(lambda: SHUTDOWN_ON_ERROR_DOES_NOT_APPLY in handle.log, "the exporter to say it keeps running")
    (said,) = [line for line in handle.log.splitlines() if SHUTDOWN_ON_ERROR_DOES_NOT_APPLY in line]
    if flags and flags[0].startswith("--nvidia-smi-command="):  # the command that could not start, and why, once
        command_path = flags[0].partition("=")[2]
        assert f"failed to start '{command_path}': " in said
        assert said.count(command_path) == 1


@posix_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_signal_stops_the_exporter_with_exit_code_zero(exporter: StartExporter, sig: signal.Signals) -> None:
    handle = exporter(*fixture_command())
    handle.scrape()
    started = time.monotonic()
    assert handle.stop(sig, timeout=15) == 0
    assert time.monotonic() - started < 5.0


@posix_only
def test_sigterm_during_an_in_flight_scrape_exits_promptly_and_kills_nvidia_smi(
    exporter: StartExporter, tmp_path: Path
) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args(), "--collect.timeout=60s")
    wrapper.set("delay", "30s")
    before = len(wrapper.gpu_queries())
    with ThreadPoolExecutor(1) as pool:
        scrape = pool.submit(handle.get, "/metrics")
        wait_until(lambda: len(wrapper.gpu_queries()) > before, "the scrape's collection to start")
        fake_pid = wrapper.gpu_queries()[-1]
        started = time.monotonic()
        code = handle.stop(signal.SIGTERM, timeout=15)
        elapsed = time.monotonic() - started
        scrape.exception(timeout=15)  # it ends one way or another; the answer does not matter
    assert code == 0
    assert elapsed < 10.0  # not waiting for the 30 s collection
    wait_until(lambda: process_gone(fake_pid), "the in-flight fake nvidia-smi to be killed", timeout=5)


@posix_only
def test_collect_timeout_kills_the_whole_process_group(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args(), "--collect.timeout=1s")
    wrapper.set("hang", "")
    started = time.monotonic()
    scrape = handle.scrape()
    elapsed = time.monotonic() - started
    assert_failed_collection(scrape, -1)
    assert elapsed < 8.0  # the 1 s bound plus at most the 2 s pipe drain, with room to spare
    wrapper_pid = wrapper.pid("wrapper.pid")
    grandchild_pid = wrapper.pid("grandchild.pid")
    wait_until(lambda: process_gone(wrapper_pid), "the wrapper to be killed", timeout=5)
    wait_until(lambda: process_gone(grandchild_pid), "the wrapper's sleeping child to be killed", timeout=5)


# -- nvidia-smi missing or unusable -----------------------------------------------------------------------


@posix_only
def test_startup_runs_are_bounded_by_the_collect_timeout(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    wrapper.set("hang", "")  # every --query-gpu run hangs, the startup mapping query included
    handle = exporter(*wrapper.args(), "--collect.timeout=1s")
    assert handle.logged("using the built-in list for field mapping")
    startup_wrapper = wrapper.pid("wrapper.pid")
    startup_grandchild = wrapper.pid("grandchild.pid")
    wait_until(lambda: process_gone(startup_wrapper), "the hung startup query to be killed", timeout=5)
    wait_until(lambda: process_gone(startup_grandchild), "its sleeping child to be killed", timeout=5)
    assert handle.get("/-/healthy").status == 200


def test_command_with_spaces_and_quotes_in_paths_is_split_correctly(exporter: StartExporter, tmp_path: Path) -> None:
    odd_dir = tmp_path / "o'connor's captures" / "with  two spaces"
    odd_dir.mkdir(parents=True)
    capture = odd_dir / "fixture.txt"
    capture.write_bytes(MIG_FIXTURE.read_bytes())
    handle = exporter(*fixture_command(capture))
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_command_exit_code") == 0
    assert len(samples(scrape, "nvidia_smi_gpu_info")) == 2


def test_missing_binary_still_starts_with_the_built_in_fields(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command=/nonexistent/nvidia-smi")
    assert handle.logged("falling back to the built-in list")
    assert "using the built-in list for field mapping" not in handle.log  # no mapping query after that, as in Go
    assert_failed_collection(handle.scrape(), -1)
    assert handle.get("/-/healthy").status == 200


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("'unterminated", id="unterminated-quote"),
        pytest.param("''", id="empty-first-word"),
    ],
)
def test_unsplittable_command_still_starts_and_reports_exit_code_minus_one(
    exporter: StartExporter, command: str
) -> None:
    # Spec (exec backend, command splitting): a command string that fails to split makes every run fail
    # with exit code -1; startup discovery falls back to the built-in list like any failed run.
    handle = exporter(f"--nvidia-smi-command={command}")
    assert_failed_collection(handle.scrape(), -1)


# -- malformed output -------------------------------------------------------------------------------------


def _ragged() -> str:
    header, row0, _ = mig_csv_lines()
    return f"{header}\n{row0.rsplit(',', 1)[0]}\n"


def _blank_line_between_rows() -> str:
    header, row0, row1 = mig_csv_lines()
    return f"{header}\n{row0}\n\n{row1}\n"


def _short_header() -> str:
    header, row0, _ = mig_csv_lines()
    return f"{header.rsplit(',', 1)[0]}\n{row0}\n"


@posix_only
@pytest.mark.parametrize(
    "make_output",
    [
        pytest.param(lambda: "this is not CSV at all\n", id="garbage"),
        pytest.param(lambda: "", id="empty-output"),
        pytest.param(_ragged, id="ragged-row"),
        pytest.param(_blank_line_between_rows, id="blank-line-between-rows"),
        pytest.param(_short_header, id="header-with-a-missing-column"),
    ],
)
def test_malformed_output_fails_the_collection_although_nvidia_smi_exited_zero(
    exporter: StartExporter, tmp_path: Path, make_output: Callable[[], str]
) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args())
    wrapper.set("stdout", make_output())
    assert_failed_collection(handle.scrape(), -1)


@posix_only
def test_header_only_output_is_a_successful_collection_without_gpus(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args())
    wrapper.set("stdout", mig_csv_lines()[0] + "\n")
    scrape = handle.scrape()
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
    assert sample_value(scrape, "nvidia_smi_command_exit_code") == 0
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == 0
    assert "nvidia_smi_gpu_info" not in scrape
    assert 'uuid="' not in comparable(scrape)


@posix_only
def test_trailing_whitespace_and_crlf_rows_still_parse(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args())
    baseline = comparable(handle.scrape())
    header, row0, row1 = mig_csv_lines()
    wrapper.set("stdout", f"\n{header}\r\n{row0}\r\n{row1}\r\n\n\n")
    assert comparable(handle.scrape()) == baseline


def test_duplicate_gpu_uuids_fail_the_whole_scrape_with_500(exporter: StartExporter, tmp_path: Path) -> None:
    text = MIG_FIXTURE.read_text(encoding="utf-8").replace(f"GPU-{MIG_GPU1}", f"GPU-{MIG_GPU0}")
    capture = tmp_path / "duplicate-uuids.txt"
    capture.write_text(text, encoding="utf-8")
    handle = exporter(*fixture_command(capture))
    response = handle.get("/metrics")
    assert response.status == 500
    assert response.text.startswith("An error has occurred while serving metrics:\n\n")
    assert MIG_GPU0 in response.text
    assert "nvidia_smi_gpu_info{" not in response.text  # no partial page
    assert handle.get("/-/healthy").status == 200


# -- per-process collection -------------------------------------------------------------------------------


def test_compute_apps_failure_is_soft(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--fail-arg", "--query-compute-apps"), "--collect.compute-apps")
    scrape = handle.scrape()
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_compute_apps_last_collect_success") == 0
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == 0
    assert len(samples(scrape, "nvidia_smi_gpu_info")) == 2
    for family in ("nvidia_smi_compute_app_info", "nvidia_smi_compute_apps", "nvidia_smi_compute_app_used"):
        assert f"{family}{{" not in scrape  # failed is not the same as idle: no zero counts either
    wait_until(lambda: "failed to collect per-process data" in handle.log, "the per-process warning")


def test_compute_apps_disabled_exports_no_per_process_text(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--state", "load"))
    scrape = handle.scrape()
    assert "nvidia_smi_compute_app" not in scrape
    assert "nvidia_smi_gpu_info{" in scrape


# -- field selection --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "present", "absent", "log_line"),
    [
        pytest.param(
            ("--query-field-names=temperature.gpu,uuid",),
            ("nvidia_smi_temperature_gpu{", "nvidia_smi_gpu_info{", "nvidia_smi_index{"),
            ("nvidia_smi_utilization_gpu_ratio", "nvidia_smi_power_draw_watts"),
            None,
            id="explicit-fields-plus-identity",
        ),
        pytest.param(
            ("--query-field-names-exclude=temperature.*",),
            ("nvidia_smi_utilization_gpu_ratio{", "nvidia_smi_power_draw_watts{"),
            ("nvidia_smi_temperature_gpu",),
            "excluding query fields",
            id="exclusion-glob",
        ),
        pytest.param(
            ("--query-field-names-exclude=uuid, power.*,memory.*",),
            ("nvidia_smi_gpu_info{", "nvidia_smi_temperature_gpu{"),
            ("nvidia_smi_power_draw_watts", "nvidia_smi_memory_used_bytes", "nvidia_smi_memory_total_bytes"),
            "ignoring exclusion of required query field",
            id="identity-fields-cannot-be-excluded",
        ),
        pytest.param(
            ("--query-field-names=temperature.gpu,power.draw", "--query-field-names-exclude=power.draw"),
            ("nvidia_smi_temperature_gpu{",),
            ("nvidia_smi_power_draw_watts", "nvidia_smi_utilization_gpu_ratio"),
            None,
            id="exclusion-applies-to-explicit-fields",
        ),
    ],
)
def test_field_selection(
    exporter: StartExporter,
    flags: tuple[str, ...],
    present: tuple[str, ...],
    absent: tuple[str, ...],
    log_line: str | None,
) -> None:
    handle = exporter(*fixture_command(), *flags)
    scrape = handle.scrape()
    parse(scrape)
    for text in present:
        assert text in scrape
    for text in absent:
        assert text not in scrape
    if log_line is not None:
        assert handle.logged(log_line)


def test_explicit_unknown_field_fails_startup() -> None:
    code, log = run_exporter_to_exit(
        [*fixture_command(), "--query-field-names=temperature.gpu,bogus_field"], timeout=60
    )
    assert code == 1
    assert "failed to run" in log
    assert "failed to resolve query fields" in log
    assert "bogus_field" in log


# -- startup validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(("--collect.interval=-1s",), "collect.interval must not be negative, got -1s", id="interval"),
        pytest.param(("--collect.timeout=-2s",), "collect.timeout must not be negative, got -2s", id="timeout"),
        pytest.param(
            ("--collect.interval=-1s", "--web.telemetry-path=/"),
            "collect.interval must not be negative",
            id="interval-checked-before-telemetry-path",
        ),
        pytest.param(("--web.telemetry-path=/",), "web.telemetry-path", id="path-root"),
        pytest.param(("--web.telemetry-path=metrics",), "web.telemetry-path", id="path-relative"),
        pytest.param(("--web.telemetry-path=/-/healthy",), "web.telemetry-path", id="path-health"),
        pytest.param(("--web.telemetry-path=/debug/pprof/heap",), "web.telemetry-path", id="path-pprof"),
        pytest.param(("--web.telemetry-path=/metrics/",), "web.telemetry-path", id="path-trailing-slash"),
        pytest.param(("--web.telemetry-path=/met rics",), "web.telemetry-path", id="path-space"),
        pytest.param(("--web.telemetry-path=/a//b",), "web.telemetry-path", id="path-not-clean"),
        pytest.param(("--web.telemetry-path=/m?x",), "web.telemetry-path", id="path-query-char"),
        pytest.param(
            ("--web.telemetry-path=/", "--web.max-requests=-1"),
            "web.telemetry-path",
            id="telemetry-path-checked-before-max-requests",
        ),
        pytest.param(("--web.max-requests=-1",), "web.max-requests", id="max-requests"),
        pytest.param(("--web.timeout-offset=-5ms",), "web.timeout-offset", id="timeout-offset"),
        pytest.param(
            ("--collect.backend=nvml", "--nvidia-smi-command=/usr/bin/nvidia-smi"),
            "--nvidia-smi-command cannot be combined with --collect.backend=nvml",
            id="nvml-with-custom-command",
        ),
        pytest.param(
            ("--collect.pcie-throughput",),
            "--collect.pcie-throughput requires --collect.backend=nvml",
            id="exec-with-pcie-throughput",
        ),
        pytest.param(
            ("--collect.compute-apps", "--collect.compute-apps-mig"),
            "--collect.compute-apps-mig requires --collect.backend=nvml or demo",
            id="exec-with-compute-apps-mig",
        ),
        pytest.param(
            ("--collect.backend=bogus",), "failed to parse the command line:", id="unknown-backend-parse-error"
        ),
        pytest.param(("--collect.timeout=10",), "failed to parse the command line:", id="duration-without-unit"),
        pytest.param(("--no-such-flag",), "failed to parse the command line:", id="unknown-flag"),
        pytest.param(("--web.listen-address=127.0.0.1:notaport",), "127.0.0.1:notaport", id="unusable-listen-address"),
    ],
)
def test_startup_validation_errors_exit_1(flags: tuple[str, ...], message: str) -> None:
    own_command = any(flag.startswith("--nvidia-smi-command") for flag in flags)  # a flag is given once
    code, log = run_exporter_to_exit([*(() if own_command else fixture_command()), *flags], timeout=60)
    assert code == 1, log
    assert "failed to run" in log
    assert message in log


# -- the fake's value controls over the wire --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fake_args", "family", "expected"),
    [
        pytest.param(("--set", "temperature.gpu=95"), "nvidia_smi_temperature_gpu", [95.0, 95.0], id="set"),
        pytest.param(
            ("--set", "gpu_recovery_action=Reset"),
            "nvidia_smi_gpu_recovery_action",
            [1.0, 1.0],
            id="recovery-action-enum",
        ),
        pytest.param(
            ("--set", "gpu_recovery_action=Drain and Reset"),
            "nvidia_smi_gpu_recovery_action",
            [4.0, 4.0],
            id="recovery-action-with-spaces",
        ),
        pytest.param(
            ("--set", "temperature.gpu=81", "--set", "temperature.gpu=82"),
            "nvidia_smi_temperature_gpu",
            [82.0, 82.0],
            id="later-set-wins",
        ),
    ],
)
def test_fake_value_override(
    exporter: StartExporter, fake_args: tuple[str, ...], family: str, expected: list[float]
) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, *fake_args))
    scrape = handle.scrape()
    assert values_of(scrape, family) == expected


def test_quoted_name_with_spaces_survives_command_splitting(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--set", "name=Fake RTX 3090"))
    scrape = handle.scrape()
    assert label_values(scrape, "nvidia_smi_gpu_info", "name") == ["Fake RTX 3090", "Fake RTX 3090"]
    assert values_of(scrape, "nvidia_smi_name") == [3090.0, 3090.0]  # exactly one number in the text


def test_fake_value_range(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--seed", "1", "--set-range", "temperature.gpu=90:95"))
    values = values_of(handle.scrape(), "nvidia_smi_temperature_gpu")
    assert len(values) == 2
    for value in values:
        assert 90 <= value <= 95
        assert value == int(value)  # integral bounds give integers


def test_fake_config_file(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "fake.yaml"
    config.write_text(
        f"capture: {quote_word(str(WINDOWS_FIXTURE))}\noverrides:\n  temperature.gpu: 88\n", encoding="utf-8"
    )
    handle = exporter("--nvidia-smi-command", fake_smi_command(None, "--config", str(config)))
    scrape = handle.scrape()
    assert samples(scrape, "nvidia_smi_temperature_gpu") == [f'nvidia_smi_temperature_gpu{{uuid="{WINDOWS_GPU}"}} 88']


def test_fake_replicated_gpus_have_distinct_stable_uuids(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(WINDOWS_FIXTURE, "--gpus", "2"))
    first, second = handle.scrape(), handle.scrape()
    uuids = label_values(first, "nvidia_smi_temperature_gpu", "uuid")
    assert uuids == sorted(REPLICA_UUIDS)
    assert label_values(second, "nvidia_smi_temperature_gpu", "uuid") == uuids
    assert sorted(label_values(first, "nvidia_smi_gpu_info", "index")) == ["0", "1"]


def test_fake_fluctuation_moves_values_but_not_identity(exporter: StartExporter) -> None:
    handle = exporter(*fixture_command(WINDOWS_FIXTURE, "--state", "load", "--fluctuate"))
    scrapes = [handle.scrape() for _ in range(2)]
    moving = [[line for family in MOVING_FAMILIES for line in samples(scrape, family)] for scrape in scrapes]
    assert moving[0] != moving[1]
    assert all(len(lines) == len(MOVING_FAMILIES) for lines in moving)
    assert samples(scrapes[0], "nvidia_smi_gpu_info") == samples(scrapes[1], "nvidia_smi_gpu_info")
    assert label_values(scrapes[0], "nvidia_smi_gpu_info", "uuid") == [WINDOWS_GPU]


# -- cached (background) mode -----------------------------------------------------------------------------


def test_cached_mode_eventually_serves_what_synchronous_mode_serves(exporter: StartExporter) -> None:
    flags = (*fixture_command(MIG_FIXTURE, "--state", "load"), "--collect.compute-apps")
    expected = comparable(exporter(*flags).scrape())
    cached = exporter(*flags, "--collect.interval=100ms")
    latest = wait_until(
        lambda: comparable(cached.scrape()),
        "the cached exporter to serve the synchronous output",
        until=lambda text: text == expected,
    )
    assert sample_value(latest, "nvidia_smi_failed_scrapes_total") == 0


@posix_only
def test_cached_mode_first_scrape_does_not_wait_for_the_first_collection(
    exporter: StartExporter, tmp_path: Path
) -> None:
    wrapper = Wrapper.create(tmp_path)
    wrapper.set("from", "2")  # the startup mapping query is number 1; the first background run is 2
    wrapper.set("delay", "30s")
    handle = exporter(*wrapper.args(), "--collect.interval=1s", "--collect.timeout=60s")
    wait_until(lambda: len(wrapper.gpu_queries()) == 2, "the first background collection to start")
    started = time.monotonic()
    response = handle.get("/metrics")
    elapsed = time.monotonic() - started
    assert response.status == 200
    assert elapsed < 10.0  # served at once from the (still empty) cache, not after the 30 s collection
    scrape = response.text
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 0
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == 0
    for family in NO_RESULT_ABSENT:
        assert family not in scrape


@posix_only
def test_cached_mode_ignores_the_scrape_timeout_header(exporter: StartExporter, tmp_path: Path) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args(), "--collect.interval=100ms")
    wait_until(lambda: "nvidia_smi_gpu_info{" in handle.scrape(), "the first background collection")
    wrapper.set("delay", "3s")
    time.sleep(0.3)  # a slow background run is now in flight
    started = time.monotonic()
    scrape = handle.scrape(headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
    assert time.monotonic() - started < 2.0
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1


@posix_only
def test_cached_mode_failed_tick_drops_gpu_series_but_keeps_the_timestamp(
    exporter: StartExporter, tmp_path: Path
) -> None:
    wrapper = Wrapper.create(tmp_path)
    handle = exporter(*wrapper.args(), "--collect.interval=100ms")
    wait_until(lambda: "nvidia_smi_gpu_info{" in handle.scrape(), "the first background collection")
    timestamp = sample_value(handle.scrape(), "nvidia_smi_last_collect_success_timestamp_seconds")
    wrapper.set("stdout", "garbage\n")
    scrape = wait_until(
        handle.scrape,
        "a failed background tick",
        until=lambda text: sample_value(text, "nvidia_smi_last_collect_success") == 0,
    )
    assert "nvidia_smi_gpu_info" not in scrape
    assert sample_value(scrape, "nvidia_smi_command_exit_code") == -1
    kept = sample_value(scrape, "nvidia_smi_last_collect_success_timestamp_seconds")
    assert kept is not None
    assert timestamp is not None
    assert kept >= timestamp


# -- our fixture captures end to end ----------------------------------------------------------------------


@dataclass(frozen=True)
class WindowsState:
    """What the Windows fixture's state must produce (process names as parsed back from the exposition)."""

    state: str
    processes: frozenset[str]
    fan_speed: tuple[float, ...]
    utilization: float


WINDOWS_STATES = (
    WindowsState(
        "idle",
        frozenset(
            {
                "C:\\Windows\\System32\\dwm.exe",
                "C:\\Windows\\explorer.exe",
                "C:\\Program Files\\Mozilla Firefox\\firefox.exe",
            }
        ),
        (),  # [N/A] fan speed: no sample
        0.02,
    ),
    WindowsState(
        "load",
        frozenset(
            {
                "C:\\Windows\\System32\\dwm.exe",
                "C:\\Windows\\explorer.exe",
                "C:\\Program Files\\Mozilla Firefox\\firefox.exe",
                "C:\\Tools\\ffmpeg\\bin\\ffmpeg.exe",
            }
        ),
        (0.54,),
        0.97,
    ),
)


@pytest.mark.parametrize("case", WINDOWS_STATES, ids=[case.state for case in WINDOWS_STATES])
def test_windows_fixture_end_to_end(exporter: StartExporter, case: WindowsState) -> None:
    state = case.state
    handle = exporter(*fixture_command(WINDOWS_FIXTURE, "--state", state), "--collect.compute-apps")
    scrape = handle.scrape()
    parse(scrape)
    info = samples(scrape, "nvidia_smi_gpu_info")
    assert len(info) == 1
    for label in (
        'cuda_version="13.3"',  # the CUDA UMD version wins over the deprecated CUDA version line
        'driver_model_current="WDDM"',
        'driver_model_pending="WDDM"',
        'serial="[N/A]"',
        'name="NVIDIA GeForce RTX 3060"',
        f'uuid="{WINDOWS_GPU}"',
    ):
        assert label in info[0]
    assert set(label_values(scrape, "nvidia_smi_compute_app_info", "process_name")) == case.processes
    assert 'process_name="C:\\\\Windows\\\\explorer.exe"' in scrape
    assert "nvidia_smi_compute_app_used_memory_bytes" not in scrape  # WDDM reports no per-process memory
    assert values_of(scrape, "nvidia_smi_compute_apps") == [len(case.processes)]
    assert values_of(scrape, "nvidia_smi_utilization_gpu_ratio") == [case.utilization]
    assert values_of(scrape, "nvidia_smi_fan_speed_ratio") == list(case.fan_speed)
    for never in ("nvidia_smi_timestamp", "nvidia_smi_serial", "nvidia_smi_driver_model_current"):
        assert f"{never}{{" not in scrape  # text that is not exactly one number is no sample


@pytest.mark.parametrize(
    ("state", "processes"),
    [
        pytest.param("idle", {"/usr/local/bin/jupyter-kernel"}, id="idle"),
        pytest.param(
            "load",
            {"python3 train.py --layers=4,8", "/opt/serving/bin/infer-server", "/usr/bin/python3"},
            id="load-with-a-comma-in-a-process-name",
        ),
    ],
)
def test_mig_fixture_end_to_end(exporter: StartExporter, state: str, processes: set[str]) -> None:
    handle = exporter(*fixture_command(MIG_FIXTURE, "--state", state), "--collect.compute-apps")
    scrape = handle.scrape()
    parse(scrape)
    assert sorted(label_values(scrape, "nvidia_smi_gpu_info", "uuid")) == [MIG_GPU0, MIG_GPU1]
    assert set(label_values(scrape, "nvidia_smi_gpu_info", "cuda_version")) == {"12.4"}
    assert set(label_values(scrape, "nvidia_smi_compute_app_info", "process_name")) == processes
    assert set(label_values(scrape, "nvidia_smi_compute_app_info", "uuid")) == {MIG_GPU0}
    assert "nvidia_smi_compute_app_used_memory_bytes" not in scrape  # [N/A] memory has no series
    assert samples(scrape, "nvidia_smi_compute_apps") == [
        f'nvidia_smi_compute_apps{{uuid="{MIG_GPU0}"}} {len(processes)}',
        f'nvidia_smi_compute_apps{{uuid="{MIG_GPU1}"}} 0',  # the idle GPU is zero-filled
    ]
    assert sample_value(scrape, "nvidia_smi_compute_apps_last_collect_success") == 1
    assert samples(scrape, "nvidia_smi_mig_mode_current") == [
        f'nvidia_smi_mig_mode_current{{uuid="{MIG_GPU0}"}} 1',
        f'nvidia_smi_mig_mode_current{{uuid="{MIG_GPU1}"}} 0',
    ]
    # [N/A] utilization on the MIG GPU: only the other GPU has a sample.
    assert label_values(scrape, "nvidia_smi_utilization_gpu_ratio", "uuid") == [MIG_GPU1]
    assert values_of(scrape, "nvidia_smi_clocks_event_reasons_supported") == [511.0, 511.0]
    assert values_of(scrape, "nvidia_smi_gpu_recovery_action") == [0.0, 0.0]
    assert values_of(scrape, "nvidia_smi_memory_total_bytes") == [8.589934592e10, 8.589934592e10]
