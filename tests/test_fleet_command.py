"""The remote command lines a fleet target's runs send over SSH, per remote shell (backends/fleet/command.py).

What sshd does with them on Windows (``cmd.exe /c "<line>"``, ``powershell.exe -c <line>``) cannot run here;
docs/fleet.md, "Windows targets", says what that leaves unverified.
"""

from __future__ import annotations

import shlex
import subprocess

import pytest

from nvidia_gpu_exporter.backends.fleet.command import RemoteShell, remote_command

NVSMI = r"C:\Program Files\NVIDIA Corporation\NVSMI\nvidia-smi.exe"
QUERY = ["--query-gpu=uuid,temperature.gpu", "--format=csv,noheader,nounits"]


@pytest.mark.parametrize(
    ("shell", "command", "args", "line"),
    [
        pytest.param(RemoteShell.POSIX, "nvidia-smi", QUERY, "nvidia-smi " + " ".join(QUERY), id="posix-appends"),
        pytest.param(
            RemoteShell.POSIX, "sudo -n /opt/nv/nvidia-smi", ["--version"], "sudo -n /opt/nv/nvidia-smi --version",
            id="posix-command-is-a-shell-line",
        ),
        pytest.param(
            RemoteShell.CMD, NVSMI, QUERY, f'"{NVSMI}" ' + " ".join(QUERY), id="cmd-path-with-spaces-quoted"
        ),
        pytest.param(
            RemoteShell.CMD, r"C:\Program Files (x86)\nv\nvidia-smi.exe", ["-L"],
            r'"C:\Program Files (x86)\nv\nvidia-smi.exe" -L', id="cmd-parentheses-inside-the-quotes",
        ),
        pytest.param(RemoteShell.CMD, "nvidia-smi.exe", ["--version"], '"nvidia-smi.exe" --version', id="cmd-on-path"),
        pytest.param(
            RemoteShell.POWERSHELL, NVSMI, QUERY,
            f"$global:LASTEXITCODE = 127; & '{NVSMI}' '{QUERY[0]}' '{QUERY[1]}'; exit $LASTEXITCODE",
            id="powershell-call-operator-single-quotes-exit-status",
        ),
        pytest.param(
            RemoteShell.POWERSHELL, r"C:\Users\O'Neil\nvidia-smi.exe", ["-L"],
            r"$global:LASTEXITCODE = 127; & 'C:\Users\O''Neil\nvidia-smi.exe' '-L'; exit $LASTEXITCODE",
            id="powershell-single-quote-doubled",
        ),
    ],
)  # fmt: skip
def test_the_remote_command_line_for_each_shell(shell: RemoteShell, command: str, args: list[str], line: str) -> None:
    assert remote_command(shell, command, args) == line


@pytest.mark.parametrize("shell", [RemoteShell.CMD, RemoteShell.POWERSHELL], ids=lambda shell: shell.value)
@pytest.mark.parametrize(
    "construct",
    [
        pytest.param("exec ", id="no-exec"),
        pytest.param("2>&1", id="no-stderr-redirect"),
        pytest.param("kill", id="no-kill"),
        pytest.param('"$@"', id="no-posix-arguments"),
    ],
)
def test_windows_lines_use_no_posix_construct(shell: RemoteShell, construct: str) -> None:
    assert construct not in remote_command(shell, NVSMI, [*QUERY, "--help-query-gpu", "--version", "-L"])


@pytest.mark.parametrize("shell", list(RemoteShell), ids=lambda shell: shell.value)
@pytest.mark.parametrize(
    "argument",
    [
        pytest.param("--query-gpu=a b", id="space"),
        pytest.param("--query-gpu=a;b", id="semicolon"),
        pytest.param("--query-gpu=a&b", id="ampersand"),
        pytest.param("--query-gpu=%PATH%", id="percent"),
        pytest.param("--query-gpu=$x", id="dollar"),
        pytest.param("--query-gpu='a'", id="quote"),
        pytest.param("", id="empty"),
    ],
)
def test_an_argument_a_shell_would_read_is_refused(shell: RemoteShell, argument: str) -> None:
    with pytest.raises(ValueError, match="refusing to send argument"):
        remote_command(shell, "nvidia-smi", [argument])


def test_a_cmd_program_with_a_double_quote_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot contain a double quote"):
        remote_command(RemoteShell.CMD, '"C:\\nv\\nvidia-smi.exe"', ["-L"])


def test_the_posix_line_runs_the_program_with_the_arguments_as_words() -> None:
    """sh -c, as sshd runs it on Linux: the arguments arrive as separate words, unchanged."""
    line = remote_command(RemoteShell.POSIX, "printf '%s\\n'", QUERY)
    assert shlex.split(line)[2:] == QUERY
    result = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == QUERY
