"""A wedged driver for the exec runner: real children that SIGKILL does not end until the test lets them go.

An nvidia-smi stuck in the kernel (D state) outlives SIGKILL, and no process can do that without root. So the
runner's kill is held back, as the kernel holds a SIGKILL it cannot act on yet, and the child (a real
``sleep``) stays until :meth:`WedgedDriver.release` sends the signal for real: asyncio's child watcher then
reaps it exactly as it reaps an nvidia-smi the driver finally lets go. Every spawn is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from async_helpers import WAIT_SECONDS
from nvidia_gpu_exporter.backends.exec.runner import Child, SubprocessRunner, kill_process_group, spawn_child


@dataclass
class WedgedDriver:
    """The fake ``nvidia-smi`` of one test: it hangs while ``hang`` exists, else prints ``answer``."""

    directory: Path
    held: list[int] = field(default_factory=list)  # pids whose SIGKILL the "kernel" has not acted on
    spawned: list[int] = field(default_factory=list)
    processes: list[Child] = field(default_factory=list)
    delivering: bool = False  # kills take effect at once (a healthy driver)

    @classmethod
    def create(cls, directory: Path, answer: str = "ok\n") -> WedgedDriver:
        directory.mkdir(parents=True, exist_ok=True)
        driver = cls(directory)
        (directory / "answer").write_text(answer, encoding="utf-8")
        hang, reply = shlex.quote(str(directory / "hang")), shlex.quote(str(directory / "answer"))
        driver.script.write_text(f"#!/bin/sh\nif [ -e {hang} ]; then exec sleep 60; fi\nexec cat {reply}\n")
        driver.script.chmod(0o755)
        return driver

    @property
    def script(self) -> Path:
        return self.directory / "nvidia-smi"

    def hang(self) -> None:
        """From now on every run hangs (until it is killed, which a held kill is not)."""
        (self.directory / "hang").touch()

    def runner(self, reap_seconds: float) -> SubprocessRunner:
        return SubprocessRunner([str(self.script)], spawn=self.spawn, kill=self.kill, reap_seconds=reap_seconds)

    async def spawn(self, argv: Sequence[str], max_output_bytes: int) -> Child:
        process = await spawn_child(argv, max_output_bytes)
        self.spawned.append(process.pid)
        self.processes.append(process)
        return process

    def kill(self, process: Child) -> None:
        if self.delivering:
            kill_process_group(process)
        else:
            self.held.append(process.pid)

    def release(self) -> None:
        """The driver lets go: runs answer again, and the held kills take effect."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "hang").unlink()
        self.delivering = True
        for pid in self.held:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    async def let_go(self) -> None:
        """Release, end every child and wait (bounded) until asyncio has reaped them all, before its loop closes."""
        self.release()
        self.kill_all()
        await asyncio.wait_for(asyncio.gather(*(process.wait() for process in self.processes)), WAIT_SECONDS)

    def kill_all(self) -> None:
        """Never leave a sleeper behind a failed test."""
        for pid in self.spawned:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
