"""Check results, their exit code, and the two ways they are printed (aligned text, or ``--json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import Enum


class Status(str, Enum):
    """PASS/WARN/FAIL decide the exit code; SKIP marks a check whose prerequisite is missing."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One line of the checklist: what was found, and the one-line fix when it is not PASS."""

    id: str
    title: str
    status: Status
    detail: str
    remedy: str = ""


def exit_code(results: Sequence[CheckResult]) -> int:
    """0 all good, 1 warnings, 2 failures (the runbook's and CI's contract)."""
    statuses = {result.status for result in results}
    if Status.FAIL in statuses:
        return 2
    if Status.WARN in statuses:
        return 1
    return 0


def _summary(results: Sequence[CheckResult]) -> dict[str, int]:
    return {status.value.lower(): sum(result.status is status for result in results) for status in Status}


def render_text(results: Sequence[CheckResult]) -> str:
    """One aligned line per check, the remedy indented below anything that is not PASS."""
    width = max((len(result.id) for result in results), default=0)
    lines = []
    for result in results:
        lines.append(f"{result.status.value:<4}  {result.id:<{width}}  {result.detail}")
        if result.remedy and result.status is not Status.PASS:
            lines.append(f"{'':<4}  {'':<{width}}  remedy: {result.remedy}")
    counts = _summary(results)
    lines.append(
        f"\n{counts['pass']} passed, {counts['warn']} warnings, {counts['fail']} failures, {counts['skip']} skipped"
    )
    return "\n".join(lines) + "\n"


def render_json(results: Sequence[CheckResult]) -> str:
    checks = [{**asdict(result), "status": result.status.value} for result in results]
    document = {"checks": checks, "summary": _summary(results), "exit_code": exit_code(results)}
    return json.dumps(document, indent=2) + "\n"
