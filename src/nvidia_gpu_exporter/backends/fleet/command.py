"""The remote command line of one nvidia-smi run, written for the shell the target's sshd runs it with.

sshd hands a session's command to the login's shell: ``sh -c`` on Linux; on Windows (Win32-OpenSSH) the
``DefaultShell`` of the registry, ``cmd.exe /c "<command>"`` by default or ``powershell.exe -c <command>``. A
target's ``shell`` setting (docs/fleet.md, "Windows targets") says which, and so how ``command`` is read:

* ``posix``: ``command`` is a POSIX shell command line, the arguments appended (as ``--nvidia-smi-command``);
* ``cmd``: ``command`` is the program (a path, spaces allowed), written ``"<program>" <arguments>``; cmd.exe
  strips the outer quotes sshd adds (``/c "..."`` with more than two quotes), leaving the quoted path, so spaces
  and parentheses (``C:\\Program Files (x86)\\...``) stay part of it; ``%VAR%`` is expanded, as cmd.exe does;
* ``powershell``: ``command`` is the program, called as ``& '<program>' '<argument>' ...`` (single quotes:
  nothing inside is expanded, and no double quote is needed, which Windows' argument passing would have to
  escape), after ``$global:LASTEXITCODE = 127`` and followed by ``; exit $LASTEXITCODE``, so the run's exit status
  is nvidia-smi's (PowerShell's own is 0 or 1), or 127 when the program cannot be started.

The arguments (``--query-gpu=a,b``, ``--format=csv``, ``--help-query-gpu``, ``--version``, ``-L``) are checked
against :data:`SAFE_ARGUMENT` before any of this: words no shell reads specially. Nothing here relies on a POSIX
construct (``exec``, ``2>&1``, ``kill``): stderr is its own channel stream, and a timed-out run is ended by a
signal request on the channel, not by a command.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum

# The only arguments the exporter appends: words no shell (sh, cmd.exe, PowerShell) reads specially.
SAFE_ARGUMENT = re.compile(r"[A-Za-z0-9_.,=:/+-]+")
POWERSHELL_NOT_STARTED = 127  # the exit status when the program cannot be started, as POSIX shells say it


class RemoteShell(str, Enum):
    """``shell``: the login shell sshd runs the command with on the target."""

    POSIX = "posix"  # sh, bash, ...: Linux and other Unix hosts
    CMD = "cmd"  # cmd.exe, Win32-OpenSSH's default
    POWERSHELL = "powershell"  # powershell.exe or pwsh.exe as Win32-OpenSSH's DefaultShell


def program_problem(shell: RemoteShell, command: str) -> str | None:
    """Why ``command`` cannot be the program for ``shell``; ``None`` when it can."""
    if shell is RemoteShell.CMD and '"' in command:
        return 'with shell: cmd, command is the program and cannot contain a double quote (")'
    return None


def _powershell_quoted(word: str) -> str:
    return "'" + word.replace("'", "''") + "'"


def remote_command(shell: RemoteShell, command: str, args: Sequence[str]) -> str:
    """The command line sent over SSH: ``command`` run with ``args`` (each matching :data:`SAFE_ARGUMENT`)."""
    bad = next((arg for arg in args if not SAFE_ARGUMENT.fullmatch(arg)), None)
    if bad is not None:
        raise ValueError(f"refusing to send argument {bad!r} over ssh")
    problem = program_problem(shell, command)
    if problem is not None:
        raise ValueError(problem)
    if shell is RemoteShell.CMD:
        return " ".join([f'"{command}"', *args])
    if shell is RemoteShell.POWERSHELL:
        call = " ".join(["&", *(_powershell_quoted(word) for word in (command, *args))])
        return f"$global:LASTEXITCODE = {POWERSHELL_NOT_STARTED}; {call}; exit $LASTEXITCODE"
    return " ".join([command, *args])
