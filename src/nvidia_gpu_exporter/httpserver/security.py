"""Applies ``--web.config.file`` to every route: basic auth, client-certificate SANs, rate limit, headers.

The file is re-checked every few seconds; users, headers, the rate limit, the certificate files (rotated
certificates) and the TLS policy (client_auth_type, client CA, versions, cipher suites) apply to new
connections and requests without a restart, as exporter-toolkit reads the file for each handshake. A broken
edit is logged and the previous settings stay in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from nvidia_gpu_exporter.httpserver.auth import BasicAuthenticator, Verdict, parse_basic_authorization
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
from nvidia_gpu_exporter.httpserver.responses import plain_text

if TYPE_CHECKING:
    import ssl  # imported by TLS only (support/sslgate.py)

log = logging.getLogger(__name__)

RELOAD_INTERVAL_SECONDS = 5.0
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
        self.authenticator = (
            BasicAuthenticator(config.basic_auth_users, previous=previous) if config.basic_auth_users else None
        )
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
            return plain_text("Forbidden\n", 403)
        client = request.remote or ""
        if self.authenticator is not None:
            credentials = parse_basic_authorization(request.headers.get("Authorization"))
            verdict = await self.authenticator.check(*credentials, client) if credentials else Verdict.DENIED
            if verdict is Verdict.BUSY:
                return plain_text("Too Many Requests\n", 429, {"Retry-After": "1"})
            if verdict is not Verdict.ALLOWED:
                return plain_text("Unauthorized\n", 401, {"WWW-Authenticate": "Basic"})
            assert credentials is not None
            client = "user:" + credentials[0]  # after auth, the user is the client: its own bucket
        if self.buckets is not None and not self.buckets.take(client):
            return plain_text("Too Many Requests\n", 429)
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
        """Re-read the file when it or a referenced file changed; returns whether new settings apply."""
        if not self.path:
            return False
        current = fingerprint(self.path, self.config)
        if current == self._fingerprint:
            return False
        self._fingerprint = current
        try:
            config = load_web_config(self.path)
        except WebConfigError as error:
            log.error("web config reload failed, keeping the previous settings", extra={"err": str(error)})
            return False
        if self.config.basic_auth_users and not config.basic_auth_users:
            log.warning("web config reloaded: basic auth is now off, every client gets in")
        if (config.tls is None) != (self.ssl_context is None):
            log.warning("web config: turning TLS on or off applies after a restart")
            config = replace(config, tls=self.config.tls)  # TLS and its client checks stay as they are served
        elif config.tls is not None and self.ssl_context is not None:
            try:
                self._live_context = self._next_context(config)
            except WebConfigError as error:
                log.error("web config reload failed, keeping the previous settings", extra={"err": str(error)})
                return False
        self._apply(config)
        self._fingerprint = fingerprint(self.path, config)
        log.info("web config reloaded", extra={"file": self.path})
        return True

    def _next_context(self, config: WebConfig) -> ssl.SSLContext:
        """The context the next handshakes switch to, with ``config``'s policy set on the listening context."""
        assert self.ssl_context is not None
        assert config.tls is not None
        context = build_ssl_context(config)
        set_policy(self.ssl_context, config)
        old = self.config.tls
        if old is not None and old.curve_preferences and not config.tls.curve_preferences:
            log.warning("web config: the curve pinned by curve_preferences stays until a restart (ssl cannot unpin)")
        return context

    def _select_context(self, connection: ssl.SSLObject, _server_name: str | None, current: ssl.SSLContext) -> None:
        """Hand a new handshake the latest context (called by OpenSSL once the client's hello arrived)."""
        if self._live_context is not None and self._live_context is not current:
            connection.context = self._live_context

    async def watch(self, interval: float = RELOAD_INTERVAL_SECONDS) -> None:
        """Poll for changes until cancelled."""
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(OSError):  # ssl.SSLError is an OSError
                self.reload_if_changed()
