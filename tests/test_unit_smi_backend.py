"""The exec pipeline per collection and its startup sequence (docs/compatibility.md, "Startup sequence"), in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import ProcessList, Readings, StatusFamily
from unit_helpers import FakeRunner, exited, header_answer, help_query_gpu, ok, query_fields

FIELDS = query_fields([("fan.speed", "fan.speed [%]")])
QUERY = "--query-gpu=" + ",".join(field.qfield for field in FIELDS)
HEADER = ", ".join(field.rfield for field in FIELDS)
ROW = "38 %, GPU-A, NVIDIA X, [N/A], [N/A], 1.0, 535.54.03, 00000000:07:00.0, 1, 8.0, 0x1, 0"
APPS_ARGS = ("--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory", "--format=csv")


def backend(runner: FakeRunner, *, compute_apps: bool = False, nvml: bool = False) -> SmiBackend:
    return SmiBackend(
        runner,
        FIELDS,
        cuda_version="12.2",
        compute_apps=compute_apps,
        status_family=StatusFamily.NVML_RETURN_CODE if nvml else StatusFamily.COMMAND_EXIT_CODE,
    )


def collect(smi: SmiBackend) -> Readings:
    return asyncio.run(smi.collect())


def test_gpu_query_command_line() -> None:
    """Two argv entries `--query-gpu=<fields joined by ,>` and `--format=csv`."""
    runner = FakeRunner({"--query-gpu=": ok(f"{HEADER}\n{ROW}\n")})
    readings = collect(backend(runner))
    assert runner.calls == [(QUERY, "--format=csv")]
    assert readings.gpus.rows[0][0] == "38 %"
    assert readings.cuda_version == "12.2"
    assert readings.processes is None


def test_compute_apps_query_after_gpu_query() -> None:
    """The fixed per-process query runs after the GPU query."""
    runner = FakeRunner(
        {
            "--query-gpu=": ok(f"{HEADER}\n{ROW}\n"),
            "--query-compute-apps=": ok("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-A, 1, p, 2 MiB\n"),
        }
    )
    readings = collect(backend(runner, compute_apps=True))
    assert runner.calls == [(QUERY, "--format=csv"), APPS_ARGS]
    assert readings.processes is not None
    assert readings.processes.succeeded
    assert [row.pid for row in readings.processes.rows] == ["1"]


def test_non_zero_exit_fails_with_exit_code_and_is_fatal() -> None:
    """A real non-zero exit -> command_exit_code = the status; fatal for --shutdown-on-error."""
    runner = FakeRunner({"--query-gpu=": exited(7)})
    with pytest.raises(CollectionError) as caught:
        collect(backend(runner))
    assert caught.value.status_code == 7
    assert caught.value.fatal is True
    assert caught.value.exit_code == 7


def test_start_failure_reports_minus_one_not_fatal() -> None:
    """Could not start -> -1, not fatal."""
    runner = FakeRunner({"--query-gpu=": RunResult("", "", -1, start_error="no such file")})
    with pytest.raises(CollectionError) as caught:
        collect(backend(runner))
    assert caught.value.status_code == -1
    assert caught.value.fatal is False


def test_killed_by_signal_reports_minus_one_not_fatal() -> None:
    runner = FakeRunner({"--query-gpu=": RunResult("", "", -1)})
    with pytest.raises(CollectionError) as caught:
        collect(backend(runner))
    assert caught.value.status_code == -1
    assert caught.value.fatal is False


@pytest.mark.parametrize(
    "stdout",
    ["a, b\n1, 2\n", f"{HEADER}\n{ROW}, extra\n", f"{HEADER}\n{ROW}\n\n{ROW}\n"],
    ids=["header count mismatch", "ragged row", "blank middle line"],
)
def test_csv_shape_error_reports_minus_one_not_fatal(stdout: str) -> None:
    """CSV-shape failure -> exit code -1 although nvidia-smi exited 0; never fatal."""
    runner = FakeRunner({"--query-gpu=": ok(stdout)})
    with pytest.raises(CollectionError) as caught:
        collect(backend(runner))
    assert caught.value.status_code == -1
    assert caught.value.fatal is False


def test_csv_shape_error_skips_compute_apps() -> None:
    runner = FakeRunner({"--query-gpu=": ok("a\n"), "--query-compute-apps=": ok("")})
    with pytest.raises(CollectionError):
        collect(backend(runner, compute_apps=True))
    assert [call[0] for call in runner.calls] == [QUERY]


def test_header_only_is_success_with_zero_gpus() -> None:
    runner = FakeRunner({"--query-gpu=": ok(f"{HEADER}\n")})
    assert collect(backend(runner)).gpus.rows == ()


def test_nvml_status_family_reports_minus_one() -> None:
    """nvml_return_code is -1 on any demo failure."""
    runner = FakeRunner({"--query-gpu=": exited(7)})
    with pytest.raises(CollectionError) as caught:
        collect(backend(runner, nvml=True))
    assert caught.value.status_code == -1


@pytest.mark.parametrize(
    "answer",
    [exited(3), RunResult("", "", -1, start_error="gone"), ok("only, three, cells\nGPU-A, 1, p\n")],
    ids=["non-zero exit is a soft failure", "start failure is soft", "bad header is soft"],
)
def test_compute_apps_failure_is_soft(answer: RunResult) -> None:
    """Per-process failure never fails the collection."""
    runner = FakeRunner({"--query-gpu=": ok(f"{HEADER}\n{ROW}\n"), "--query-compute-apps=": answer})
    readings = collect(backend(runner, compute_apps=True))
    assert readings.processes == ProcessList(succeeded=False)
    assert len(readings.gpus.rows) == 1


def test_compute_apps_empty_output_is_success() -> None:
    runner = FakeRunner({"--query-gpu=": ok(f"{HEADER}\n{ROW}\n"), "--query-compute-apps=": ok("")})
    readings = collect(backend(runner, compute_apps=True))
    assert readings.processes == ProcessList(succeeded=True, rows=())


def test_startup_sequence() -> None:
    """--help-query-gpu, then the mapping query; --version beside them; each answer read where Go reads it."""
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(help_query_gpu("fan.speed")),
            "--query-gpu=": header_answer({"fan.speed": "fan.speed [%]"}),
            "--version": ok("CUDA Version : 12.4\n"),
        }
    )
    smi = asyncio.run(SmiBackend.start(runner, FieldRequest(), timeout_seconds=5.0, compute_apps=False))
    assert sorted(call[0] for call in runner.calls) == [
        "--help-query-gpu",
        "--query-gpu=fan.speed," + ",".join(IDENTITY_FIELDS),
        "--version",
    ]
    assert runner.calls.index(("--help-query-gpu",)) < runner.calls.index(
        ("--query-gpu=fan.speed," + ",".join(IDENTITY_FIELDS), "--format=csv")
    )
    assert smi.cuda_version == "12.4"
    assert smi.fields[0].rfield == "fan.speed [%]"
    assert smi.status_family is StatusFamily.COMMAND_EXIT_CODE


class _VersionFirst(FakeRunner):
    """Answers ``--help-query-gpu`` only once ``--version`` has started: a start that runs them one after the
    other never gets there."""

    def __init__(self) -> None:
        super().__init__(
            {"--query-gpu=": header_answer({"fan.speed": "fan.speed [%]"}), "--version": ok("CUDA Version : 12.4\n")}
        )
        self.version_started = asyncio.Event()

    async def run(self, args: Sequence[str]) -> RunResult:
        if args[0] == "--version":
            self.version_started.set()
        elif args[0] == "--help-query-gpu":
            self.calls.append(tuple(args))
            await self.version_started.wait()
            return ok(help_query_gpu("fan.speed"))
        return await super().run(args)


def test_version_runs_beside_field_discovery() -> None:
    """On a driver that is not kept initialised every nvidia-smi run pays seconds: ``--version`` does not
    wait for the field discovery it does not depend on (docs/compatibility.md, "Startup sequence")."""
    runner = _VersionFirst()

    async def start() -> SmiBackend:
        return await asyncio.wait_for(
            SmiBackend.start(runner, FieldRequest(), timeout_seconds=None, compute_apps=False), timeout=10
        )

    smi = asyncio.run(start())
    assert smi.cuda_version == "12.4"
    assert smi.fields[0].rfield == "fan.speed [%]"


def test_version_warning_after_discovery_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """The warnings keep the Go exporter's order: field discovery's first, then the CUDA version's."""
    runner = FakeRunner({"--query-gpu=": header_answer()})
    with caplog.at_level("WARNING"):
        asyncio.run(SmiBackend.start(runner, FieldRequest(), timeout_seconds=5.0, compute_apps=False))
    messages = [record.getMessage() for record in caplog.records]
    assert messages.index("failed to auto-determine query field names, falling back to the built-in list") < (
        messages.index("failed to read the CUDA version")
    )


def test_a_failed_start_leaves_no_version_run_behind() -> None:
    """An explicit field list nvidia-smi does not know stops the start; the ``--version`` run beside it is
    cancelled, not left running."""
    runner = FakeRunner({"--query-gpu=": exited(6), "--version": None})
    request = FieldRequest(names="bogus_field")

    async def start() -> set[asyncio.Task[object]]:
        with pytest.raises(FieldResolutionError):
            await asyncio.wait_for(
                SmiBackend.start(runner, request, timeout_seconds=None, compute_apps=False), timeout=10
            )
        return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}

    assert asyncio.run(start()) == set()
