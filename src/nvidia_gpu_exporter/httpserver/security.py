"""Applies ``--web.config.file`` to every route: basic auth, client-certificate SANs, rate limit, headers.

The file is re-checked every few seconds; users, headers, the rate limit, the certificate files (rotated
certificates) and the TLS policy (client_auth_type, client CA, versions, cipher suites) apply to new
connections and requests without a restart, as exporter-toolkit reads the file for each handshake. A broken
edit is logged and the previous settings stay in force. Each check reads on a thread of its own, bounded by a
timeout, so no file (a FIFO, a hung file system) ever holds the event loop, and no error ends the watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from nvidia_gpu_exporter.httpserver.config import (
    RateLimit,
    WebConfig,
    WebConfigError,
    build_ssl_context,
    config_warnings,
    fingerprint,
    load_web_config,
    set_policy,
)
from nvidia_gpu_exporter.httpserver.http import App, Handler, Request, Response
from nvidia_gpu_exporter.httpserver.responses import go_error
from nvidia_gpu_exporter.httpserver.stats import ReloadStats

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

    from nvidia_gpu_exporter.httpserver.auth import BasicAuthenticator  # imported with basic_auth_users only

log = logging.getLogger(__name__)
T = TypeVar("T")

RELOAD_INTERVAL_SECONDS = 5.0
# How long the event loop waits for one check's thread before calling the check failed. The thread itself
# cannot be stopped: no new check starts until it returns (one thread at most, whatever hangs).
RELOAD_TIMEOUT_SECONDS = 30.0
RELOAD_FAILED = "web config reload failed, keeping the previous settings"
MAX_RATE_LIMITED_CLIENTS = 4096  # buckets kept; the least recently seen client's goes first (it restarts full)


class TokenBucket:
    """exporter-toolkit's ``rate_limit``: one token per interval, at most ``burst`` saved up."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.tokens = float(limit.burst)
        self.updated = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.limit.burst), self.tokens + (now - self.updated) / self.limit.interval_seconds)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class ClientBuckets:
    """One :class:`TokenBucket` per client, so one client's requests never spend another's tokens."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, client: str) -> bool:
        bucket = self._buckets.pop(client, None) or TokenBucket(self.limit, self.clock)
        self._buckets[client] = bucket
        while len(self._buckets) > MAX_RATE_LIMITED_CLIENTS:
            self._buckets.popitem(last=False)
        return bucket.take()


@dataclass(frozen=True, slots=True)
class _Staged:
    """A check's finding, made off the event loop and applied on it: the fingerprint it saw, and the settings
    to apply (with the TLS context new handshakes switch to, if it changes) or why there are none."""

    fingerprint: str
    config: WebConfig | None = None
    context: ssl.SSLContext | None = None
    error: str = ""


def _in_daemon_thread(function: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``function``'s outcome, computed on a thread of its own. Not the loop's executor: a call that never
    returns would hold one of its workers for good, and ``asyncio.run`` joins them at exit; a daemon thread
    holds neither."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: Exception | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]  # None only with an error

    def run() -> None:
        result: T | None = None
        error: Exception | None = None
        try:
            result = function()
        except Exception as raised:  # handed to the awaiting side, which logs it
            error = raised
        except BaseException as raised:  # SystemExit in a thread ends nothing: said as an error
            error = RuntimeError(f"{type(raised).__name__}: {raised}")
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits for the answer
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _describe(error: BaseException) -> str:
    """An unexpected exception as a log line says it: its type, then its message when it has one."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _peer_sans(request: Request) -> set[str]:
    certificate = request.peercert
    if not certificate:
        return set()
    names = certificate.get("subjectAltName", ())
    return {str(entry[1]) for entry in names if isinstance(entry, tuple) and len(entry) == 2}


class Security:
    """The live web config and the hooks that enforce it."""

    def __init__(self, path: str = "", config: WebConfig | None = None) -> None:
        self.path = path
        self.config = config or WebConfig()
        self.ssl_context: ssl.SSLContext | None = build_ssl_context(self.config) if self.config.tls else None
        # The listening socket keeps its first context; each handshake switches to the latest one built at a
        # reload, so a rotated certificate and a removed client CA both apply (a context's trust store can
        # only grow, so a new context is the only way to take a CA out). What a connection copies from the
        # listening context when accepted (versions, client-certificate mode, suites) a reload sets on it.
        self._live_context = self.ssl_context
        if self.ssl_context is not None:
            self.ssl_context.sni_callback = self._select_context
        self._apply(self.config)
        self._fingerprint = fingerprint(path, self.config) if path else ""
        # Whether the last check that found a change applied it (``None`` without a file: nothing to reload).
        self.reloads = ReloadStats(time.time()) if path else None
        self._checking: asyncio.Future[_Staged | None] | None = None
        for warning in config_warnings(self.config):
            log.warning(warning)

    @classmethod
    def from_file(cls, path: str) -> Security:
        if not path:
            return cls()
        return cls(path, load_web_config(path))

    def _apply(self, config: WebConfig) -> None:
        self.config = config
        previous = getattr(self, "authenticator", None)
        self.authenticator: BasicAuthenticator | None = None
        if config.basic_auth_users:  # a start without users never loads the authenticator (issue 31, item 2)
            from nvidia_gpu_exporter.httpserver import auth  # noqa: PLC0415

            self.authenticator = auth.BasicAuthenticator(config.basic_auth_users, previous=previous)
        self.buckets = ClientBuckets(config.rate_limit) if config.rate_limit else None
        self.headers = dict(config.headers)

    @property
    def authenticates(self) -> bool:
        """Whether every request must prove who sent it (a password, or a client certificate from the client CA:
        one any public CA issued, checked against the system's roots, says nothing about who sent it)."""
        tls = self.config.tls
        verified = (
            tls is not None
            and tls.client_auth_type == "RequireAndVerifyClientCert"
            and bool(tls.client_ca_file or tls.client_ca)
        )
        return bool(self.config.basic_auth_users) or verified

    @property
    def tls_enabled(self) -> bool:
        return self.ssl_context is not None

    # -- request path -----------------------------------------------------------------------------------

    async def middleware(self, request: Request, handler: Handler) -> Response:
        tls = self.config.tls
        if tls is not None and tls.client_allowed_sans and not (_peer_sans(request) & set(tls.client_allowed_sans)):
            log.warning("refused a client certificate: no allowed SAN", extra={"remote": request.remote})
            return go_error("Forbidden", 403)
        client = request.remote or ""
        if self.authenticator is not None:
            from nvidia_gpu_exporter.httpserver import auth  # noqa: PLC0415 - loaded with the users (_apply)

            credentials = auth.parse_basic_authorization(request.headers.get("Authorization"))
            verdict = await self.authenticator.check(*credentials, client) if credentials else auth.Verdict.DENIED
            if verdict is auth.Verdict.BUSY:
                return go_error("Too Many Requests", 429, {"Retry-After": "1"})
            if verdict is not auth.Verdict.ALLOWED:
                return go_error("Unauthorized", 401, {"WWW-Authenticate": "Basic"})
            assert credentials is not None
            client = "user:" + credentials[0]  # after auth, the user is the client: its own bucket
        if self.buckets is not None and not self.buckets.take(client):
            return go_error("Too Many Requests", 429)
        return await handler(request)

    def on_response_prepare(self, _: Request, response: Response) -> None:
        for name, value in self.headers.items():
            response.headers[name] = value

    def install(self, app: App) -> None:
        """Put the checks in front of every route (outermost middleware) and the headers on every reply.

        Without a web config file there is nothing to check, now or after a reload: no hook at all.
        """
        if not self.path:
            return
        app.middlewares.insert(0, self.middleware)
        app.on_response_prepare.append(self.on_response_prepare)

    # -- reloading --------------------------------------------------------------------------------------

    def reload_if_changed(self) -> bool:
        """Check now on the calling thread, blocking it; returns whether new settings apply. The server checks
        with :meth:`check`, off its event loop."""
        if not self.path:
            return False
        staged = self._stage()
        return staged is not None and self._commit(staged)

    def _stage(self) -> _Staged | None:
        """What a check finds, ``None`` when nothing changed. It reads files and changes nothing, so it may
        run on another thread than the event loop's (:meth:`check`); :meth:`_commit` applies it there."""
        current = fingerprint(self.path, self.config)
        if current == self._fingerprint:
            return None
        try:
            config = load_web_config(self.path)
        except WebConfigError as error:
            return _Staged(current, error=str(error))
        if self.config.basic_auth_users and not config.basic_auth_users:
            log.warning("web config reloaded: basic auth is now off, every client gets in")
        context = None
        if (config.tls is None) != (self.ssl_context is None):
            log.warning("web config: turning TLS on or off applies after a restart")
            config = replace(config, tls=self.config.tls)  # TLS and its client checks stay as they are served
        elif config.tls is not None and self.ssl_context is not None:
            try:
                context = build_ssl_context(config)
            except WebConfigError as error:
                return _Staged(current, error=str(error))
        return _Staged(fingerprint(self.path, config), config, context)

    def _commit(self, staged: _Staged) -> bool:
        """Apply what :meth:`_stage` found, on the event loop; returns whether new settings apply."""
        self._fingerprint = staged.fingerprint  # a broken edit is said once, not at every check
        if staged.config is None:
            self._failed(staged.error)
            return False
        if staged.context is not None:
            self._set_policy(staged.config)
            self._live_context = staged.context
        self._apply(staged.config)
        if self.reloads is not None:
            self.reloads.succeeded(time.time())
        log.info("web config reloaded", extra={"file": self.path})
        return True

    def _failed(self, why: str) -> None:
        if self.reloads is not None:
            self.reloads.failed()
        log.error(RELOAD_FAILED, extra={"file": self.path, "err": why})

    @property
    def checking(self) -> bool:
        """Whether a check's thread is still running (one that timed out included)."""
        return self._checking is not None and not self._checking.done()

    async def check(self, timeout: float = RELOAD_TIMEOUT_SECONDS) -> bool | None:
        """Check the files on a thread of their own, waiting at most ``timeout`` seconds: ``True`` when new
        settings apply, ``False`` when nothing changed, ``None`` when the check failed (logged at error, the
        previous settings stay) or could not start because the previous one has not returned.

        Raises nothing but a cancellation: whatever a check raises (``MemoryError``, a bug) is logged. At most
        one check runs at a time, so a read that hangs holds one thread, not one per attempt.
        """
        if not self.path:
            return False
        if self.checking:
            return None
        try:
            self._checking = pending = _in_daemon_thread(self._stage, "web-config-check")
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if not done:
                pending.add_done_callback(_retrieve)
                self._failed(
                    f"reading {self.path} and the files it names took over {timeout:g} s (a hung file system? a file "
                    "swapped for a FIFO?); the next check starts once that read returns"
                )
                return None
            staged = pending.result()
            if staged is None:
                return False
            return True if self._commit(staged) else None
        except Exception as error:  # no error ends the watcher: it is said, and the settings stay
            self._failed(_describe(error))
            return None

    def _set_policy(self, config: WebConfig) -> None:
        """``config``'s TLS policy set on the listening context (OpenSSL copies it into each connection it accepts),
        on the event loop: never while a handshake reads it."""
        assert self.ssl_context is not None
        assert config.tls is not None
        set_policy(self.ssl_context, config)
        old = self.config.tls
        if old is not None and old.curve_preferences and not config.tls.curve_preferences:
            log.warning("web config: the curve pinned by curve_preferences stays until a restart (ssl cannot unpin)")

    def _select_context(self, connection: ssl.SSLObject, _server_name: str | None, current: ssl.SSLContext) -> None:
        """Hand a new handshake the latest context (called by OpenSSL once the client's hello arrived)."""
        if self._live_context is not None and self._live_context is not current:
            connection.context = self._live_context

    async def watch(self, interval: float = RELOAD_INTERVAL_SECONDS, timeout: float = RELOAD_TIMEOUT_SECONDS) -> None:
        """Check for changes every ``interval`` seconds until cancelled (:meth:`check`: no error ends it)."""
        while True:
            await asyncio.sleep(interval)
            await self.check(timeout)


def _retrieve(future: asyncio.Future[_Staged | None]) -> None:
    """Take the outcome of a check that was given up on, so that asyncio does not report it as never retrieved."""
    if not future.cancelled():
        future.exception()
