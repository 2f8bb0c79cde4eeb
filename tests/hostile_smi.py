"""A hostile ``nvidia-smi`` for the tests under ``tests/hostile/``, and what they read of the exporter in /proc.

The script answers as the project's fake nvidia-smi does, except that its GPU queries first source the
shell snippet in ``CONTROL/mode`` when that file exists. Tests write the mode after the exporter has
started, so startup's own queries are answered normally; the snippet floods a pipe, escapes with
``setsid``, or hangs. Floods are streamed by ``head -c`` from ``/dev/zero``, never built in memory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import MIG_FIXTURE

MIB = 1024 * 1024
FLOOD_TIMEOUT = "--collect.timeout=10s"


@dataclass(frozen=True)
class HostileSmi:
    """The script and its control directory."""

    control: Path

    @classmethod
    def create(cls, directory: Path) -> HostileSmi:
        directory.mkdir(parents=True, exist_ok=True)
        smi = cls(directory)
        control = shlex.quote(str(directory))
        fake = shlex.join([sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(MIG_FIXTURE)])
        smi.script.write_text(
            "#!/bin/sh\n"
            f"control={control}\n"
            'case " $* " in\n'
            '*" --query-gpu="*) if [ -f "$control/mode" ]; then . "$control/mode"; fi ;;\n'
            "esac\n"
            f'exec {fake} "$@"\n',
            encoding="utf-8",
        )
        return smi

    @property
    def script(self) -> Path:
        return self.control / "nvidia-smi.sh"

    def args(self, *more: str) -> tuple[str, ...]:
        return ("--nvidia-smi-command", shlex.join(["/bin/sh", str(self.script)]), *more)

    def mode(self, snippet: str) -> None:
        """From now on every GPU query runs ``snippet`` first (it may ``exit`` to answer on its own)."""
        (self.control / "mode").write_text(snippet + "\n", encoding="utf-8")

    def flood_stdout(self, size: int) -> None:
        """One line of ``size`` bytes on stdout, then exit 0."""
        self.mode(f"head -c {size} /dev/zero | tr '\\0' x; exit 0")

    def flood_stderr(self, size: int) -> None:
        """``size`` bytes on stderr, then exit 1."""
        self.mode(f"head -c {size} /dev/zero | tr '\\0' e >&2; exit 1")

    def escape(self, marker: str) -> None:
        """Start a grandchild in a session of its own that holds stdout and stderr for a minute, then answer."""
        sleeper = shlex.join([sys.executable, "-c", "import time; time.sleep(60)", marker])
        self.mode(f"setsid {sleeper} &")


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (``VmHWM``, the peak resident set, or ``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def processes_with(marker: str) -> list[int]:
    """The pids whose command line holds ``marker`` (this process excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def kill_all(marker: str) -> None:
    """Never leave a sleeper behind a failed test."""
    for pid in processes_with(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
