"""A real OpenSSH server for the fleet tests: ``/usr/sbin/sshd -D -e -f <own config>`` on 127.0.0.1, a free port,
its own host key and authorized_keys in a temporary directory. Tests skip with a clear message when sshd (Debian:
``apt-get install openssh-server``) or asyncssh (the ``fleet`` extra) is absent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvidia_gpu_exporter.backends.exec.command import quote_word

SSHD = os.environ.get("NVIDIA_GPU_EXPORTER_TEST_SSHD", "/usr/sbin/sshd")
# sshd signals a session's command only where a privilege-separated child runs it: a non-root login on an sshd
# started as root. Tests running as root log in as this account for the hung-command case (created if absent).
SIGNAL_USER = "nvge-fleet-test"
START_SECONDS = 15.0


def require_sshd() -> None:
    """Skip unless a real sshd and asyncssh are installed."""
    if not (os.path.isfile(SSHD) and os.access(SSHD, os.X_OK)) and shutil.which("sshd") is None:
        pytest.skip(f"no OpenSSH server at {SSHD} (apt-get install openssh-server): the fleet tests need a real sshd")
    pytest.importorskip("asyncssh", reason="the fleet tests need asyncssh (pip install '.[fleet]')")


SRC = Path(__file__).resolve().parents[1] / "src"
SYSTEM_PYTHON = "/usr/bin/python3"


def write_key(path: Path) -> str:
    """A new ed25519 key at ``path`` (private, mode 600) and ``path.pub``; the public key line."""
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    public = key.export_public_key().decode("ascii").strip()
    path.with_suffix(".pub").write_text(public + "\n", encoding="ascii")
    return public


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def remote_fake_smi() -> tuple[str, str, str | None]:
    """The login the targets use, the fake nvidia-smi command it runs, and ``None`` when sshd can signal that
    login's commands (a non-root login on an sshd started as root), else the reason it cannot.

    As root the targets log in as :data:`SIGNAL_USER` (its shell is /bin/sh, so no login scripts run per
    command) and run the fake from this checkout with the system Python, since the test's own interpreter
    may sit under a home directory that account cannot enter.
    """
    import getpass

    fallback = " ".join(quote_word(word) for word in [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi"])
    if os.geteuid() != 0:
        return getpass.getuser(), fallback, "sshd signals commands only for non-root logins on an sshd run as root"
    user = signal_login()
    probe = "import yaml, nvidia_gpu_exporter.fakesmi"
    check = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={SRC}", SYSTEM_PYTHON, "-c", probe]
    if subprocess.run(check, capture_output=True, check=False, cwd="/").returncode != 0:
        return "root", fallback, f"{user} cannot run the fake with {SYSTEM_PYTHON} and PyYAML from {SRC}"
    words = ["env", f"PYTHONPATH={SRC}", SYSTEM_PYTHON, "-m", "nvidia_gpu_exporter.fakesmi"]
    return user, " ".join(quote_word(word) for word in words), None


def signal_login() -> str:
    """:data:`SIGNAL_USER`, created (a system account with /bin/sh) when absent; needs root."""
    import pwd

    try:
        pwd.getpwnam(SIGNAL_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--shell", "/bin/sh", "--home-dir", "/", "--no-create-home", SIGNAL_USER],
            check=True,
            capture_output=True,
        )
        # '!' (useradd's locked password) makes sshd refuse the account; '*' only refuses passwords.
        subprocess.run(["usermod", "-p", "*", SIGNAL_USER], check=True, capture_output=True)
    return SIGNAL_USER


@dataclass
class Sshd:
    """A running sshd and the files a targets file points at."""

    directory: Path
    port: int
    client_key: Path  # in authorized_keys
    stranger_key: Path  # not in authorized_keys
    known_hosts: Path  # the server's real host key
    wrong_known_hosts: Path  # another key for the same [127.0.0.1]:port, as after a host key change
    process: subprocess.Popen[bytes]
    log: Path
    shared: Path  # a directory every login can read and write (pid files, the fake's config)
    user: str  # the login the targets use
    fake_command: str  # the fake nvidia-smi as that login runs it
    no_signal: str | None  # why sshd cannot signal that login's commands; None when it can

    def fake_smi(self, *args: str) -> str:
        """A remote command line (for the login's POSIX shell) running the project's fake nvidia-smi."""
        return " ".join([self.fake_command, *(quote_word(arg) for arg in args)])


def _config(directory: Path, port: int) -> str:
    return "\n".join((
        f"ListenAddress 127.0.0.1:{port}",
        f"HostKey {directory / 'host_key'}",
        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
        "PidFile none",
        "StrictModes no",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "MaxSessions 200",
        "MaxStartups 200:30:400",
        "LogLevel DEBUG1",  # names direct-tcpip channels: the jump host test looks for them
        "",
    ))  # fmt: skip


@contextlib.contextmanager
def running_sshd() -> Iterator[Sshd]:
    """Start sshd with its own keys in a new directory every login can read; stop it and remove the directory.

    Not under pytest's temporary directory: that one is private to the test's user, and sshd reads
    authorized_keys as the logging-in user.
    """
    require_sshd()
    directory = Path(tempfile.mkdtemp(prefix="fleet-sshd-"))
    try:
        with _sshd_in(directory) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _sshd_in(directory: Path) -> Iterator[Sshd]:
    directory.chmod(0o755)
    shared = directory / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    host_public = write_key(directory / "host_key")
    client_public = write_key(directory / "client_key")
    write_key(directory / "stranger_key")
    other_host_public = write_key(directory / "other_host_key")
    (directory / "authorized_keys").write_text(client_public + "\n", encoding="ascii")
    (directory / "authorized_keys").chmod(0o644)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory (Debian)
    port = free_port()
    (directory / "sshd_config").write_text(_config(directory, port), encoding="ascii")
    log = directory / "sshd.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(directory / "sshd_config")], stdin=subprocess.DEVNULL, stderr=sink
        )
    pattern = f"[127.0.0.1]:{port}"
    (directory / "known_hosts").write_text(f"{pattern} {host_public}\n", encoding="ascii")
    (directory / "wrong_known_hosts").write_text(f"{pattern} {other_host_public}\n", encoding="ascii")
    server = Sshd(
        directory, port, directory / "client_key", directory / "stranger_key", directory / "known_hosts",
        directory / "wrong_known_hosts", process, log, shared, *remote_fake_smi(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_SECONDS
        while b"Server listening on" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not start (exit {process.poll()}):\n{log.read_text(errors='replace')}")
            time.sleep(0.02)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
