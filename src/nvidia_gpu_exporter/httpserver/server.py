"""The server: listening sockets, the HTTP/1.1 connections (protocol.py) with their deadlines and cap
(timeouts.py, connections.py), TLS and the web config's watcher (security.py), Go-style error pages, and the graceful
shutdown. It knows nothing of what it serves: the application is an :class:`~.http.App`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.httpserver.connections import Connections, fit_to_fd_limit, open_file_limit
from nvidia_gpu_exporter.httpserver.http import App, Handler, MethodNotAllowed, NotFound, Redirect, Request, Response
from nvidia_gpu_exporter.httpserver.listener import Listening
from nvidia_gpu_exporter.httpserver.protocol import HttpProtocol, OpenConnections
from nvidia_gpu_exporter.httpserver.responses import go_error, go_redirect
from nvidia_gpu_exporter.httpserver.security import Security
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats
from nvidia_gpu_exporter.httpserver.timeouts import serve_with_deadlines

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The bounds every connection is held to; seconds, 0 meaning "no bound"."""

    idle_timeout_seconds: float  # keep-alive connections without a request are closed after this
    header_timeout_seconds: float  # request headers (and a TLS handshake) must arrive within this
    write_timeout_seconds: float  # a response the client reads none of for this long is cut
    max_connections: int = 0  # open connections across every listener; 0 = no cap


async def go_style_errors(request: Request, handler: Handler) -> Response:
    """Unknown paths, wrong methods and unclean paths answer like Go's ServeMux (``http.Error``, and a 307 to the
    clean path)."""
    try:
        return await handler(request)
    except NotFound:
        return go_error("404 page not found", 404)
    except MethodNotAllowed as error:
        return go_error("Method Not Allowed", 405, {"Allow": ", ".join(error.allowed)})
    except Redirect as redirect:
        return go_redirect(request.method, redirect.location)


class ListenError(OSError):
    """A listen address cannot be parsed or bound."""


def _split_host_port(address: str, network: str = "tcp") -> tuple[str, int]:
    """Go's ``net.SplitHostPort`` and port lookup, erring in Go's words (``listen tcp: address localhost: missing
    port in address``)."""
    host, separator, port_text = address.rpartition(":")
    if not separator:
        raise ListenError(f"listen {network}: address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ListenError(f"listen {network}: address {address}: too many colons in address")
    try:
        port = int(port_text) if port_text.isdigit() else socket.getservbyname(port_text, "tcp")
    except OSError as error:
        raise ListenError(f"listen {network}: lookup {network}/{port_text}: unknown port") from error
    if not 0 <= port <= 65535:
        raise ListenError(f"listen {network}: address {port_text}: invalid port")
    return host, port


def _bind_failed(network: str, address: str, error: OSError) -> ListenError:
    """Go's message for a socket that cannot be bound (``listen tcp :9835: bind: address already in use``), the
    same for every address form; Python's says ``error while attempting to bind on address ('::', 9835)``."""
    reason = os.strerror(error.errno) if error.errno else str(error)
    return ListenError(f"listen {network} {address}: bind: {reason[:1].lower()}{reason[1:]}")


_SUN_PATH_BYTES = 108  # sockaddr_un's sun_path on Linux


class _UnlinkingSocket(socket.socket):
    """A Unix socket this exporter bound: closing it removes its file, as Go's ``UnixListener.Close`` does (a socket
    from systemd is not one: its file is systemd's)."""

    def close(self) -> None:
        path = self.getsockname() if self.fileno() != -1 else None
        super().close()
        if isinstance(path, str) and path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _bind_unix(address: str) -> socket.socket:
    """Go's ``net.Listen("unix", address)``: the address is a path, ``@name`` an abstract socket, an empty one
    an abstract name the kernel picks; an existing file (a stale socket too) is left alone and refused."""
    name = os.fsencode(address)
    abstract = name.startswith(b"@")
    if len(name) > _SUN_PATH_BYTES or (len(name) == _SUN_PATH_BYTES and not abstract):
        raise _bind_failed("unix", address, OSError(errno.EINVAL, os.strerror(errno.EINVAL)))
    if not abstract:
        sock: socket.socket = _UnlinkingSocket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = b"\0" + name[1:]
    try:
        sock.bind(name)
    except OSError as error:
        sock.close()  # unbound: its name is empty, so the existing file is not removed
        raise _bind_failed("unix", address, error) from error
    return sock


def bind_socket(address: str, network: str = "tcp") -> socket.socket:
    """A listening socket for a Go-style ``host:port`` address (an empty host means every interface), or a Unix
    socket's path with ``unix``."""
    if network in ("udp", "udp4", "udp6"):  # networks Go knows, but not for a stream listener
        raise ListenError(f"listen {network} {address}: address {address}: unexpected address type")
    if network == "unix":
        return _bind_unix(address)
    if network == "unixpacket":  # Go serves it; asyncio's transports read a stream, and would cut a long message
        raise ListenError(
            f"listen {network} {address}: not supported: HTTP is read here as a byte stream; use --web.network=unix"
        )
    if network not in ("tcp", "tcp4", "tcp6"):
        raise ListenError(f"listen {network}: unknown network {network}")
    host, port = _split_host_port(address, network)
    families = {"tcp": socket.AF_UNSPEC, "tcp4": socket.AF_INET, "tcp6": socket.AF_INET6}
    if not host:
        try:
            if network == "tcp4" or (network == "tcp" and not socket.has_dualstack_ipv6()):
                return socket.create_server(("0.0.0.0", port), family=socket.AF_INET, reuse_port=False)  # noqa: S104
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, dualstack_ipv6=network == "tcp", reuse_port=False
            )
        except OSError as error:
            raise _bind_failed(network, address, error) from error
    try:
        # An ASCII host goes as bytes: a str would be encoded with the idna codec, which loads unicodedata.
        name = host.encode("ascii") if host.isascii() else host
        infos = socket.getaddrinfo(name, port, families[network], socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as error:
        reason = "no such host" if error.errno == socket.EAI_NONAME else str(error.strerror).lower()
        raise ListenError(f"listen {network}: lookup {host}: {reason}") from error
    except OSError as error:
        raise ListenError(f"listen {network} {address}: {error}") from error
    last_error: OSError | None = None
    for family, _, _, _, sockaddr in infos:
        try:
            return socket.create_server(sockaddr[:2], family=family)
        except OSError as error:
            last_error = error
    assert last_error is not None  # getaddrinfo answers at least one address or raises
    raise _bind_failed(network, address, last_error)


def bound_address(sock: socket.socket) -> str:
    """The address as Go's ``Listener.Addr()`` writes it: ``host:port``, a Unix socket's path, ``@name`` for an
    abstract one."""
    name = sock.getsockname()
    if isinstance(name, bytes):  # an abstract Unix socket: a NUL, then its name
        return "@" + name[1:].decode("utf-8", "surrogateescape")
    if isinstance(name, str):
        return name
    host, port = name[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HttpServer:
    """The listening servers, their connections (protocol.py, each wrapped in timeouts.py's deadlines) and
    the web-config watcher. :meth:`stop` stops listening, closes idle keep-alive connections and lets requests in
    flight finish within :data:`SHUTDOWN_GRACE_SECONDS`.
    """

    def __init__(
        self,
        app: App,
        limits: ServerLimits,
        security: Security | None = None,
        connection_stats: ConnectionStats | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.security = security or Security()
        self._watcher: asyncio.Task[None] | None = None
        limit = fit_to_fd_limit(limits.max_connections, open_file_limit())
        self.connections = Connections(limit, connection_stats or ConnectionStats())
        self.open = OpenConnections()
        self.addresses: list[str] = []
        self._listeners: list[Listening] = []

    def _protocol(self, finished: Callable[[int], None]) -> HttpProtocol:
        return HttpProtocol(
            self.app, idle_timeout=self.limits.idle_timeout_seconds, connections=self.open, finished=finished
        )

    async def start(self, sockets: Sequence[socket.socket]) -> None:
        for sock in sockets:
            listener = await serve_with_deadlines(
                self._protocol,
                sock,
                header_timeout=self.limits.header_timeout_seconds,
                write_timeout=self.limits.write_timeout_seconds,
                ssl_context=self.security.ssl_context,
                connections=self.connections,
            )
            self._listeners.append(listener)
            address = bound_address(sock)
            self.addresses.append(address)
            log.info("Listening on", extra={"address": address, "tls": self.security.tls_enabled})
        if self.security.path:
            self._watcher = asyncio.create_task(self.security.watch(), name="web-config-watcher")

    async def stop(self) -> None:
        """Stop listening at once, then shut down gracefully (in-flight requests get the grace period)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.wait({self._watcher})
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        await self.open.shutdown(SHUTDOWN_GRACE_SECONDS)
