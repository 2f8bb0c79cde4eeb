"""The nvidia-smi pipeline: resolve fields at startup, then query the GPUs (and processes) per collection.

It talks to an :class:`~.runner.SmiRunner`, so the same code serves the ``exec`` backend (a real child
process) and the ``demo`` backend (an in-process simulation answering the same command lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.exec.output import (
    COMPUTE_APPS_ARGS,
    CsvShapeError,
    parse_compute_apps,
    parse_cuda_version,
    parse_gpu_csv,
    parse_help_query_gpu,
)
from nvidia_gpu_exporter.backends.exec.pmon import PMON_ARGS, PmonShapeError, parse_pmon
from nvidia_gpu_exporter.backends.exec.runner import RunResult, SmiRunner, SubprocessRunner
from nvidia_gpu_exporter.backends.fields import (
    BUILTIN_FIELDS,
    FieldRequest,
    FieldResolutionError,
    apply_exclusions,
    builtin_mapping,
    first_unknown,
    with_identity,
)
from nvidia_gpu_exporter.model.snapshot import (
    GpuTable,
    ProcessList,
    ProcessUsage,
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
    column_of,
)
from nvidia_gpu_exporter.support.asynctimeout import within_timeout

log = logging.getLogger(__name__)

T = TypeVar("T")
# Every real answer is far smaller (8 GPUs with every field: about 40 KB). A larger one, up to the output cap,
# is parsed in a thread so that the event loop, and /-/healthy with it, keeps answering meanwhile.
OFF_LOOP_PARSE_BYTES = 256 * 1024


async def parse_output(parse: Callable[[str], T], stdout: str) -> T:
    """``parse(stdout)``: on the loop for an answer of a normal size, in a thread for a large one."""
    if len(stdout) <= OFF_LOOP_PARSE_BYTES:
        return parse(stdout)
    return await asyncio.to_thread(parse, stdout)


def gpu_query_args(fields: Sequence[str]) -> list[str]:
    return ["--query-gpu=" + ",".join(fields), "--format=csv"]


async def run_bounded(runner: SmiRunner, args: Sequence[str], timeout_seconds: float | None) -> RunResult:
    """One startup run bounded by ``--collect.timeout``; a timeout is a failed result, not an exception."""
    try:
        return await within_timeout(runner.run(args), timeout_seconds)
    except asyncio.TimeoutError:
        return RunResult("", "", -1, start_error=f"timed out after {timeout_seconds}s")


async def resolve_fields(
    runner: SmiRunner, request: FieldRequest, timeout_seconds: float | None
) -> tuple[QueryField, ...]:
    """Decide the query fields and their returned header names (docs/compatibility.md, "Field resolution")."""
    if request.auto:
        result = await run_bounded(runner, ["--help-query-gpu"], timeout_seconds)
        discovered = parse_help_query_gpu(result.stdout) if result.ok else []
        if not discovered:
            reason = result.describe_failure() if not result.ok else "no fields in the output"
            log.warning(
                "failed to auto-determine query field names, falling back to the built-in list",
                extra={"reason": reason},
            )
            # As the Go exporter: the built-in headers too, with no mapping query to ask a driver that just
            # failed (and no second timeout before the exporter is ready when it hangs).
            return _builtin_fallback(request)
        fields = with_identity(discovered)
    else:
        fields = with_identity(request.names.split(","))
    fields = apply_exclusions(fields, request.exclude)

    result = await run_bounded(runner, gpu_query_args(fields), timeout_seconds)
    failure = None if result.ok else result.describe_failure()
    if failure is None:
        try:
            csv = parse_gpu_csv(result.stdout, len(fields))
        except CsvShapeError as error:
            failure = str(error)
        else:
            return tuple(QueryField(field, rfield) for field, rfield in zip(fields, csv.header, strict=True))
    log.warning(
        "failed to run the initial query, using the built-in list for field mapping",
        extra={"reason": failure},
    )
    mapped = builtin_mapping(fields)
    if mapped is not None:
        return tuple(mapped)
    if not request.auto:
        raise FieldResolutionError(f"unexpected query field: {go_quote(first_unknown(fields))}")
    log.warning("unknown query fields in the discovered list, falling back to the built-in list")
    return _builtin_fallback(request)


def _builtin_fallback(request: FieldRequest) -> tuple[QueryField, ...]:
    """The built-in list, less the exclusions, with its built-in headers."""
    mapped = builtin_mapping(apply_exclusions(list(BUILTIN_FIELDS), request.exclude))
    assert mapped is not None  # the built-in list maps onto itself
    return tuple(mapped)


def cuda_version_of(result: RunResult) -> str:
    """Best effort: the CUDA version for the ``gpu_info`` label from a ``--version`` run, or ``""`` with a
    warning."""
    if not result.ok:
        log.warning("failed to read the CUDA version", extra={"reason": result.describe_failure()})
        return ""
    version = parse_cuda_version(result.stdout)
    if not version:
        log.warning("no CUDA version in the nvidia-smi --version output")
    return version


class SmiBackend:
    """Collects by running the resolved GPU query, then (optionally) the per-process query."""

    def __init__(
        self,
        runner: SmiRunner,
        fields: Sequence[QueryField],
        *,
        cuda_version: str,
        compute_apps: bool,
        process_usage: bool = False,
        status_family: StatusFamily = StatusFamily.COMMAND_EXIT_CODE,
        exit_errors_are_fatal: bool = True,
    ) -> None:
        self.runner = runner
        self._fields = tuple(fields)
        self.cuda_version = cuda_version
        self.compute_apps = compute_apps
        self.process_usage = process_usage  # --collect.process-usage: one nvidia-smi pmon run per collection
        self._status_family = status_family
        self.exit_errors_are_fatal = exit_errors_are_fatal
        self._gpu_args = gpu_query_args([field.qfield for field in self._fields])

    @classmethod
    async def start(
        cls,
        runner: SmiRunner,
        request: FieldRequest,
        *,
        timeout_seconds: float | None,
        compute_apps: bool,
        process_usage: bool = False,
        status_family: StatusFamily = StatusFamily.COMMAND_EXIT_CODE,
        exit_errors_are_fatal: bool = True,
    ) -> SmiBackend:
        """The startup sequence: discover and map fields, and read the CUDA version beside them.

        ``--version`` depends on neither run, and on a driver that is not kept initialised each run costs
        seconds, so it runs at once; its outcome is read (and warned about) after the fields', the order in
        which the Go exporter runs and logs them.
        """
        version_run = asyncio.ensure_future(run_bounded(runner, ["--version"], timeout_seconds))
        try:
            fields = await resolve_fields(runner, request, timeout_seconds)
        except BaseException:
            version_run.cancel()
            await asyncio.gather(version_run, return_exceptions=True)  # its child killed before the error goes on
            raise
        cuda_version = cuda_version_of(await version_run)
        return cls(
            runner,
            fields,
            cuda_version=cuda_version,
            compute_apps=compute_apps,
            process_usage=process_usage,
            status_family=status_family,
            exit_errors_are_fatal=exit_errors_are_fatal,
        )

    @property
    def status_family(self) -> StatusFamily:
        return self._status_family

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._fields

    async def collect(self) -> Readings:
        result = await self.runner.run(self._gpu_args)
        if not result.ok:
            fatal = self.exit_errors_are_fatal and result.exited_with_error
            # NVML-style status (the demo): there is no child exit status to report, only "failed".
            reported = result.exit_code if self._status_family is StatusFamily.COMMAND_EXIT_CODE else -1
            raise CollectionError(
                f"nvidia-smi failed: {result.describe_failure()}",
                reported,
                fatal=fatal,
                exit_code=result.exit_code,
            )
        field_count = len(self._fields)
        try:
            csv = await parse_output(lambda stdout: parse_gpu_csv(stdout, field_count), result.stdout)
        except CsvShapeError as error:
            raise CollectionError(f"unexpected nvidia-smi output: {error}") from error
        return await self._with_processes(GpuTable(csv.rows))

    async def _with_processes(self, table: GpuTable) -> Readings:
        """The GPU table's readings with the per-process runs the flags ask for, one after the other."""
        processes = await self._collect_processes() if self.compute_apps else None
        usage = await self._collect_usage(table) if self.process_usage else None
        return Readings(table, processes, self.cuda_version, process_usage=usage)

    async def _collect_processes(self) -> ProcessList:
        result = await self.runner.run(COMPUTE_APPS_ARGS)
        if not result.ok:
            log.warning("failed to collect per-process data", extra={"reason": result.describe_failure()})
            return ProcessList(succeeded=False)
        try:
            rows = await parse_output(parse_compute_apps, result.stdout)
        except CsvShapeError as error:
            log.warning("failed to collect per-process data", extra={"reason": str(error)})
            return ProcessList(succeeded=False)
        return ProcessList(succeeded=True, rows=rows)

    async def _collect_usage(self, table: GpuTable) -> ProcessUsage:
        """``nvidia-smi pmon``'s rows, each on the GPU of the table whose ``index`` it names.

        A failure (a driver or GPU without pmon says "Not supported") never fails the collection."""
        result = await self.runner.run(PMON_ARGS)
        if not result.ok:
            log.warning("failed to collect per-process usage", extra={"reason": result.describe_failure()})
            return ProcessUsage(succeeded=False)
        index, uuid = column_of(self._fields, "index"), column_of(self._fields, "uuid")
        uuid_by_index = {} if index is None or uuid is None else {row[index]: row[uuid] for row in table.rows}
        try:
            rows = await parse_output(lambda stdout: parse_pmon(stdout, uuid_by_index), result.stdout)
        except PmonShapeError as error:
            log.warning("failed to collect per-process usage", extra={"reason": str(error)})
            return ProcessUsage(succeeded=False)
        return ProcessUsage(succeeded=True, rows=rows)

    def xid_records(self) -> tuple[XidRecord, ...]:
        """nvidia-smi has no XID event stream: none."""
        return ()

    def stuck_children(self) -> StuckChildren:
        """The runner's children that SIGKILL has not ended; none for a runner that starts no process."""
        return self.runner.stuck_children() if isinstance(self.runner, SubprocessRunner) else StuckChildren()

    def supplement_failures(self) -> SupplementFailures | None:
        """No NVML supplement: ``None``."""
        return None

    async def aclose(self) -> None:
        """Nothing to release: a finished run's process is gone, and a stuck one cannot be ended from here."""
