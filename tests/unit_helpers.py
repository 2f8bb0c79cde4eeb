"""Small shared helpers for the unit tests: an in-memory nvidia-smi runner and exposition builders."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    ProcessList,
    ProcessRow,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
)

Answer = RunResult | Callable[[Sequence[str]], RunResult] | None


def ok(stdout: str) -> RunResult:
    """A run that exited 0 with this stdout."""
    return RunResult(stdout, "", 0)


def exited(code: int, stderr: str = "boom") -> RunResult:
    """A run that exited with a non-zero status."""
    return RunResult("", stderr, code)


BLOCK = None  # an answer that never returns (the run hangs until cancelled)


@dataclass
class FakeRunner:
    """An ``SmiRunner`` answering by the first argument's prefix (``--help-query-gpu``, ``--query-gpu=``, ...).

    ``answers`` maps a prefix of ``args[0]`` to a result, a callable, or ``BLOCK`` (never answers).
    Unanswered invocations fail like a command that cannot start. Every call is recorded.
    """

    answers: dict[str, Answer] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def description(self) -> str:
        return "fake-nvidia-smi"

    async def run(self, args: Sequence[str]) -> RunResult:
        self.calls.append(tuple(args))
        for prefix, answer in self.answers.items():
            if args and args[0].startswith(prefix):
                if answer is None:
                    await asyncio.Event().wait()  # cancelled by the caller's timeout
                    raise AssertionError("unreachable")
                if callable(answer):
                    return answer(args)
                return answer
        return RunResult("", "", -1, start_error=f"no answer for {list(args)!r}")


def header_answer(rfields_by_qfield: dict[str, str] | None = None) -> Callable[[Sequence[str]], RunResult]:
    """Answers ``--query-gpu=a,b`` with a header-only CSV naming each field (RField = QField unless mapped)."""
    mapping = rfields_by_qfield or {}

    def answer(args: Sequence[str]) -> RunResult:
        qfields = args[0].removeprefix("--query-gpu=").split(",")
        return ok(", ".join(mapping.get(qfield, qfield) for qfield in qfields) + "\n")

    return answer


def help_query_gpu(*names: str) -> str:
    """``--help-query-gpu``-style text listing each name on its own line after a blank line."""
    parts = ['List of valid properties to query for the switch "--query-gpu=":\n']
    for name in names:
        parts.append(f'\n"{name}"\nDescription of {name}.\n')
    return "".join(parts)


def query_fields(extra: Iterable[tuple[str, str]] = ()) -> list[QueryField]:
    """The extra ``(QField, RField)`` pairs followed by the identity fields (RField = QField)."""
    fields = [QueryField(qfield, rfield) for qfield, rfield in extra]
    present = {query_field.qfield for query_field in fields}
    fields += [QueryField(name, name) for name in IDENTITY_FIELDS if name not in present]
    return fields


def gpu_row(fields: Sequence[QueryField], **cells: str) -> tuple[str, ...]:
    """A row of cells for ``fields``; cells are named by QField with ``.`` written as ``_``."""
    defaults = {
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "name": "NVIDIA Test",
        "index": "0",
    }
    by_name = {key.replace(".", "_"): value for key, value in {**defaults, **cells}.items()}
    return tuple(by_name.get(query_field.qfield.replace(".", "_"), "[N/A]") for query_field in fields)


def success_snapshot(
    rows: Sequence[tuple[str, ...]],
    *,
    processes: ProcessList | None = None,
    cuda_version: str = "12.2",
    failed_collections: int = 0,
    last_success_at: float | None = 1_751_475_457.0,
    duration: float = 0.25,
    status_code: int = 0,
) -> Snapshot:
    """A snapshot serving a successful attempt with these GPU rows."""
    readings = Readings(GpuTable(tuple(rows)), processes, cuda_version)
    attempt = Attempt(readings, status_code, duration, last_success_at or 0.0)
    return Snapshot(attempt, failed_collections, last_success_at)


def processes(*rows: tuple[str, str, str, str]) -> ProcessList:
    """A successful process list from ``(gpu_uuid, pid, process_name, used_memory)`` tuples."""
    return ProcessList(True, tuple(ProcessRow(*row) for row in rows))


def exposition(
    extra: Iterable[tuple[str, str]] = (),
    *,
    status_family: StatusFamily = StatusFamily.COMMAND_EXIT_CODE,
    mig: bool = False,
) -> tuple[Exposition, list[QueryField]]:
    fields = query_fields(extra)
    return Exposition(fields, status_family, mig_process_labels=mig), fields
