"""The process runner against real child processes: cancellation at any point kills the whole group."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from async_helpers import WAIT_SECONDS, run
from nvidia_gpu_exporter.backends.exec.runner import SubprocessRunner
from polling import wait_until

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="needs /bin/sh and /proc")


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _wrapper_with_a_grandchild(directory: Path, marker: str) -> Path:
    """A wrapper (like ``ssh``) whose child inherits its stdout and outlives it unless the group is killed."""
    directory.mkdir()
    script = directory / "wrapper"
    script.write_text(f'#!/bin/sh\n"{sys.executable}" -c "import time; time.sleep(60)" {marker} &\nwait\n')
    script.chmod(0o755)
    return script


@posix_only
@pytest.mark.parametrize("yields_before_cancel", [1, 2, 3, 5, 20], ids=lambda n: f"cancel-after-{n}-loop-turns")
def test_a_run_cancelled_at_any_point_ends_promptly_and_kills_the_group(
    tmp_path: Path, yields_before_cancel: int
) -> None:
    """Cancelled while asyncio is still connecting the child's pipes, the run used to wait on the grandchild.

    asyncio then kills only the direct child and waits for the pipes to close, which the grandchild holds
    open: the run hung as long as the grandchild lived (a minute here).
    """
    marker = str(tmp_path / f"runner-{uuid.uuid4().hex}")  # in the wrapper's command line and its child's
    runner = SubprocessRunner([str(_wrapper_with_a_grandchild(Path(marker), marker))])

    async def main() -> None:
        task = asyncio.ensure_future(runner.run(["--query-gpu=uuid"]))
        for _ in range(yields_before_cancel):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=WAIT_SECONDS)
        assert done, "the cancelled run did not end"
        assert task.cancelled()

    try:
        run(main)
        # The direct child is reaped before the run returns; the grandchild is init's, and a SIGKILLed
        # process on a loaded machine takes a moment to exit. Unkilled, it would live out its minute.
        wait_until(lambda: _processes_with(marker), "the killed group to exit", until=lambda pids: pids == [])
    finally:
        for pid in _processes_with(marker):  # never leave the sleeper behind a failed test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@posix_only
def test_a_run_that_completes_reports_its_output_and_status(tmp_path: Path) -> None:
    script = tmp_path / "smi"
    script.write_text("#!/bin/sh\necho out; echo err >&2; exit 3\n")
    script.chmod(0o755)
    result = run(lambda: SubprocessRunner([str(script)]).run([]))
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
