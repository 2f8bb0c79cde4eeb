"""nvidia-smi over SSH: one pooled asyncssh connection per host, every run a channel on it.

Why asyncssh rather than OpenSSH's ControlMaster (docs/fleet.md, "Transport"): a run is a channel on a
connection this process holds, so a timed-out run is ended *remotely* (a ``KILL`` signal request, which
sshd delivers to the command's whole process group, then the channel is closed), where killing a local
``ssh`` client leaves the remote nvidia-smi running; no ``ssh`` process is forked per collection; and the
connection's state (up, connecting, backing off after a failure) is known here, not inferred from a
control socket.

Bounds: one connection per :class:`ConnectionKey` (host, port, user, key, known hosts, jump host), opened
within ``connect_timeout``; at most ``max_concurrent`` runs on it at once and at most the pool's global
limit in all; a host that failed to connect is not tried again before its backoff (1 s doubling to 60 s)
has passed, so a dead host costs nothing per probe; stdout and stderr counted against the output cap as
they arrive, as the exec backend's runner does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import asyncssh

from nvidia_gpu_exporter.backends.exec.defaults import DEFAULT_MAX_OUTPUT_BYTES
from nvidia_gpu_exporter.backends.exec.runner import (
    NO_EXIT_STATUS,
    STDERR_KEPT_BYTES,
    RunResult,
)
from nvidia_gpu_exporter.backends.fleet.command import remote_command
from nvidia_gpu_exporter.backends.fleet.defaults import DEFAULT_GLOBAL_CONCURRENCY
from nvidia_gpu_exporter.backends.fleet.targets import HostKeyPolicy, Target

log = logging.getLogger(__name__)

BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
KEEPALIVE_SECONDS = 30.0  # a silently dead host is noticed within a few keepalives
KILL_WAIT_SECONDS = 1.0  # after the KILL signal request, for the channel to close
READ_CHUNK = 64 * 1024


class SshUnavailable(Exception):
    """The host cannot be reached now: a failed connection, or its backoff has not passed yet."""


@dataclass(frozen=True, slots=True)
class ConnectionKey:
    """What makes two targets share one SSH connection."""

    host: str
    port: int
    user: str
    identity_file: str
    known_hosts: str
    host_key_policy: HostKeyPolicy
    jump_host: str
    connect_timeout_seconds: float

    @classmethod
    def of(cls, target: Target) -> ConnectionKey:
        s = target.settings
        return cls(
            target.host, s.port, s.user, s.identity_file, s.known_hosts, s.host_key_policy, s.jump_host,
            s.connect_timeout_seconds,
        )  # fmt: skip

    def describe(self) -> str:
        user = f"{self.user}@" if self.user else ""
        via = f" via {self.jump_host}" if self.jump_host else ""
        return f"{user}{self.host}:{self.port}{via}"


def _options(key: ConnectionKey) -> dict[str, object]:
    """asyncssh's connect options for a key: nothing from ~/.ssh/config or an agent, only what the file says."""
    options: dict[str, object] = {
        "config": [],
        "connect_timeout": key.connect_timeout_seconds,
        "login_timeout": key.connect_timeout_seconds,
        "keepalive_interval": KEEPALIVE_SECONDS,
        "known_hosts": None
        if key.host_key_policy is HostKeyPolicy.INSECURE_ACCEPT_ANY
        else os.path.expanduser(key.known_hosts),
    }
    if key.user:
        options["username"] = key.user
    if key.identity_file:
        options["client_keys"] = [os.path.expanduser(key.identity_file)]
        options["agent_path"] = None
    return options


def _split_jump(jump: str, default_user: str) -> tuple[str, int, str]:
    user, _, hostport = jump.rpartition("@")
    host, _, port = hostport.partition(":") if hostport.count(":") == 1 else (hostport, "", "")
    return host, int(port) if port.isdigit() else 22, user or default_user


def _failure(error: BaseException) -> str:
    """One line naming what failed: auth, host key, refused, timed out."""
    if isinstance(error, asyncssh.PermissionDenied):
        return f"authentication refused: {error.reason}"
    if isinstance(error, asyncssh.HostKeyNotVerifiable):
        return f"host key not verifiable (unknown or changed; see known_hosts): {error.reason}"
    if isinstance(error, asyncssh.DisconnectError):
        return f"disconnected: {error.reason}"
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return "connect timed out"
    return str(error) or type(error).__name__


class HostConnection:
    """The pooled connection to one host: opened on demand, reused, reopened after it drops; with backoff."""

    def __init__(self, key: ConnectionKey, max_concurrent: int) -> None:
        self.key = key
        self.slots = asyncio.Semaphore(max_concurrent)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0  # loop time before which no new attempt is made
        self._last_error = ""
        self.connects = 0  # successful connections made, for tests and benchmarks

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def connection(self) -> asyncssh.SSHClientConnection:
        conn = self._conn
        if conn is not None:
            return conn
        async with self._lock:
            if self._conn is not None:
                return self._conn
            loop = asyncio.get_running_loop()
            wait = self._retry_at - loop.time()
            if wait > 0:
                raise SshUnavailable(
                    f"ssh {self.key.describe()}: not retrying for {wait:.1f}s after {self._failures} failed "
                    f"connection(s): {self._last_error}"
                )
            try:
                self._conn = await self._open()
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as error:
                self._failures += 1
                self._last_error = _failure(error)
                backoff = min(BACKOFF_FIRST_SECONDS * 2 ** (self._failures - 1), BACKOFF_MAX_SECONDS)
                self._retry_at = loop.time() + backoff
                log.warning(
                    "fleet: ssh connection failed",
                    extra={"host": self.key.describe(), "err": self._last_error, "retry_in_seconds": backoff},
                )
                raise SshUnavailable(f"ssh {self.key.describe()}: {self._last_error}") from error
            self._failures = 0
            self.connects += 1
            return self._conn

    async def _open(self) -> asyncssh.SSHClientConnection:
        options = _options(self.key)
        tunnel: asyncssh.SSHClientConnection | None = None
        if self.key.jump_host:
            host, port, user = _split_jump(self.key.jump_host, self.key.user)
            jump_options = {**options, "username": user} if user else options
            tunnel = await asyncssh.connect(host, port, **jump_options)
            options["tunnel"] = tunnel
        try:
            conn = await asyncssh.connect(self.key.host, self.key.port, **options)
        except BaseException:
            if tunnel is not None:
                tunnel.close()
            raise
        self._jump = tunnel
        watcher = asyncio.ensure_future(conn.wait_closed())
        watcher.add_done_callback(lambda _: self._dropped(conn))
        return conn

    def _dropped(self, conn: asyncssh.SSHClientConnection) -> None:
        if self._conn is conn:
            log.info("fleet: ssh connection closed, reopened on the next run", extra={"host": self.key.describe()})
            self._conn = None
            if self._jump is not None:
                self._jump.close()
                self._jump = None

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        for closing in (conn, self._jump):
            if closing is not None:
                closing.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closing.wait_closed(), KILL_WAIT_SECONDS)
        self._jump = None


class SshPool:
    """Every host's connection, and the global limit on runs in flight."""

    def __init__(self, max_concurrent: int = DEFAULT_GLOBAL_CONCURRENCY) -> None:
        self.slots = asyncio.Semaphore(max_concurrent)
        self.hosts: dict[ConnectionKey, HostConnection] = {}

    def host(self, target: Target) -> HostConnection:
        key = ConnectionKey.of(target)
        host = self.hosts.get(key)
        if host is None:
            host = self.hosts[key] = HostConnection(key, target.settings.max_concurrent)
        return host

    async def retain(self, targets: Sequence[Target]) -> None:
        """Close the connections no target in ``targets`` uses any more (after a reload)."""
        keep = {ConnectionKey.of(target) for target in targets}
        for key in [key for key in self.hosts if key not in keep]:
            await self.hosts.pop(key).aclose()

    async def aclose(self) -> None:
        hosts, self.hosts = list(self.hosts.values()), {}
        for host in hosts:
            await host.aclose()


class SshRunner:
    """An :class:`~nvidia_gpu_exporter.backends.exec.runner.SmiRunner` running the target's command over SSH.

    A cancelled run (the collection's timeout) sends ``KILL`` to the remote command (sshd signals its process
    group) and closes the channel before the cancellation goes on.
    """

    def __init__(self, pool: SshPool, target: Target, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> None:
        self.pool = pool
        self.target = target
        self.max_output_bytes = max_output_bytes

    @property
    def description(self) -> str:
        return f"ssh {ConnectionKey.of(self.target).describe()} {self.target.settings.command}"

    async def run(self, args: Sequence[str]) -> RunResult:
        settings = self.target.settings
        try:
            command = remote_command(settings.shell, settings.command, args)
        except ValueError as error:
            return RunResult("", "", NO_EXIT_STATUS, start_error=str(error))
        host = self.pool.host(self.target)
        async with self.pool.slots, host.slots:
            try:
                conn = await host.connection()
            except SshUnavailable as error:
                return RunResult("", "", NO_EXIT_STATUS, start_error=str(error))
            try:
                process = await conn.create_process(command, stdin=asyncssh.DEVNULL, encoding=None)
            except (OSError, asyncssh.Error) as error:
                return RunResult("", "", NO_EXIT_STATUS, start_error=f"ssh: cannot start {command!r}: {error}")
            try:
                return await self._outcome(process)
            except asyncio.CancelledError:
                await self._kill(process)
                raise
            except (OSError, asyncssh.Error) as error:  # the connection dropped mid-run
                process.close()
                return RunResult("", "", NO_EXIT_STATUS, start_error=f"ssh: {command!r} lost: {_failure(error)}")

    async def _outcome(self, process: asyncssh.SSHClientProcess[bytes]) -> RunResult:
        cap = self.max_output_bytes
        stdout, stderr = bytearray(), bytearray()
        total = [0]

        async def drain(stream: asyncssh.SSHReader[bytes], keep: bytearray, limit: int) -> bool:
            while True:
                chunk = await stream.read(READ_CHUNK)
                if not chunk:
                    return True
                total[0] += len(chunk)
                if total[0] > cap:
                    return False
                if len(keep) < limit:
                    keep += chunk[: limit - len(keep)]

        results = await asyncio.gather(
            drain(process.stdout, stdout, cap), drain(process.stderr, stderr, STDERR_KEPT_BYTES)
        )
        if not all(results):
            await self._kill(process)
            return RunResult(
                "", "", NO_EXIT_STATUS,
                start_error=f"nvidia-smi printed more than {cap} bytes over ssh, the limit of "
                "--collect.max-output-bytes: killed it and dropped its output",
            )  # fmt: skip
        await process.wait_closed()
        code = process.exit_status
        text = stdout.decode("utf-8", errors="surrogateescape")
        errors = stderr.decode("utf-8", errors="surrogateescape")
        if code is None or code < 0:
            return RunResult(text, errors, NO_EXIT_STATUS)
        return RunResult(text, errors, code)

    async def _kill(self, process: asyncssh.SSHClientProcess[bytes]) -> None:
        """Signal the remote command's process group and wait (bounded) for sshd to report its end; then close.

        sshd answers a killed command with its exit signal and closes the channel. When that does not come,
        sshd refused the signal (root logins and forced commands cannot be signalled) and the command may
        still run remotely: said in a warning naming the host, since nothing more can be done from here.
        """
        with contextlib.suppress(OSError, asyncssh.Error):
            process.send_signal("KILL")
        ended = False
        with contextlib.suppress(asyncio.TimeoutError, OSError, asyncssh.Error):
            await asyncio.wait_for(asyncio.shield(process.wait_closed()), KILL_WAIT_SECONDS)
            ended = True
        if not ended:
            log.warning(
                "fleet: the remote command did not end after the KILL signal; sshd refuses to signal root logins "
                "and forced commands, so it may still run on the host",
                extra={"target": self.target.name, "host": ConnectionKey.of(self.target).describe()},
            )
        process.close()
