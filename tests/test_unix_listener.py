"""``--web.network=unix``: the exporter listens on a Unix socket named by the listen address, as the Go exporter
v1.14.0 does (its behaviour seen from the binary: a path, ``@name`` for an abstract socket, an existing file
refused and left alone, the file removed when the exporter stops, TLS over it with a web config); in-process."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme

from async_helpers import bounded, run
from nvidia_gpu_exporter.app import listen_sockets
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.httpserver.http import App, Request, Response
from nvidia_gpu_exporter.httpserver.server import ListenError, bind_socket, bound_address
from nvidia_gpu_exporter.web.server import WebServer
from nvidia_gpu_exporter.web.settings import WebSettings

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets on this platform")


def _app() -> App:
    async def healthy(_: Request) -> Response:
        return Response(text="healthy\n")

    app = App()
    app.add_get("/-/healthy", healthy)
    return app


def _settings() -> WebSettings:
    return WebSettings(
        telemetry_path="/metrics",
        max_requests=0,
        timeout_offset_seconds=0.5,
        idle_timeout_seconds=60.0,
        header_timeout_seconds=5.0,
        write_timeout_seconds=0.0,
        enable_pprof=False,
    )


async def _get(address: str, tls: ssl.SSLContext | None = None) -> bytes:
    """One ``GET /-/healthy`` over the Unix socket ``address`` (``@name``: abstract), read to the close."""
    path = "\0" + address[1:] if address.startswith("@") else address
    reader, writer = await asyncio.open_unix_connection(path, ssl=tls, server_hostname="exporter" if tls else None)
    writer.write(b"GET /-/healthy HTTP/1.1\r\nHost: exporter\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer


async def _serve_once(address: str, tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None) -> tuple[str, bytes]:
    server = WebServer(_app(), _settings())
    server.security.ssl_context = tls[0] if tls else None
    await server.start([bind_socket(address, "unix")])
    try:
        return server.addresses[0], await bounded(_get(server.addresses[0], tls[1] if tls else None))
    finally:
        await bounded(server.stop())


def test_a_scrape_is_served_over_a_unix_socket_and_its_file_removed_at_the_stop(tmp_path: Path) -> None:
    path = tmp_path / "exporter.sock"
    address, answer = run(lambda: _serve_once(str(path)))
    assert address == str(path)  # the "Listening on" line's address, as Go's
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"healthy\n")
    assert not path.exists()


def test_a_relative_path_is_one_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    address, answer = run(lambda: _serve_once("relative.sock"))
    assert address == "relative.sock"
    assert answer.endswith(b"healthy\n")
    assert not (tmp_path / "relative.sock").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="abstract Unix sockets are Linux's")
@pytest.mark.parametrize(
    ("given", "logged"),
    [
        pytest.param("@nvidia-gpu-exporter-test-{pid}", "@nvidia-gpu-exporter-test-{pid}", id="named"),
        pytest.param("", "@", id="empty-the-kernel-names-it"),
    ],
)
def test_an_abstract_socket_is_served_as_go_names_it(given: str, logged: str) -> None:
    address, answer = run(lambda: _serve_once(given.format(pid=os.getpid())))
    assert address.startswith(logged.format(pid=os.getpid()))
    assert len(address) > 1
    assert answer.endswith(b"healthy\n")


def test_the_socket_file_takes_its_mode_from_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "exporter.sock"
    previous = os.umask(0o077)
    try:
        sock = bind_socket(str(path), "unix")
    finally:
        os.umask(previous)
    try:
        assert path.is_socket()
        assert path.stat().st_mode & 0o777 == 0o700
    finally:
        sock.close()


def test_tls_is_served_over_a_unix_socket(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("exporter").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    _, answer = run(lambda: _serve_once(str(tmp_path / "tls.sock"), (server_context, client_context)))
    assert answer.endswith(b"healthy\n")


def _stale_socket(path: Path) -> None:
    """A socket file left by an exporter that was killed: nobody listens on it."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


# (how the address is made in tmp_path, the Go binary's error with {address} for it); each existing file stays
UNIX_LISTEN_ERRORS = [
    pytest.param(Path.touch, "file", "listen unix {address}: bind: address already in use", id="a-file"),
    pytest.param(
        _stale_socket, "stale.sock", "listen unix {address}: bind: address already in use", id="a-stale-socket"
    ),
    pytest.param(None, "missing/x.sock", "listen unix {address}: bind: no such file or directory", id="no-directory"),
    pytest.param(None, "a" * 120, "listen unix {address}: bind: invalid argument", id="longer-than-sun-path"),
]


@pytest.mark.parametrize(("make", "name", "message"), UNIX_LISTEN_ERRORS)
def test_a_unix_address_that_cannot_be_bound_is_said_as_go_says_it(
    tmp_path: Path, make: Callable[[Path], None] | None, name: str, message: str
) -> None:
    path = tmp_path / name
    if make is not None:
        make(path)
    with pytest.raises(ListenError) as caught:
        bind_socket(str(path), "unix").close()
    assert str(caught.value) == message.format(address=path)
    if make is not None:
        assert path.exists()  # Go leaves an existing file alone, a stale socket too


def test_a_path_of_exactly_sun_path_bytes_is_refused_as_go_refuses_it(tmp_path: Path) -> None:
    """Go keeps a byte for the NUL that ends a path: 108 bytes is EINVAL there, 107 is bound."""
    base = str(tmp_path) + "/"
    with pytest.raises(ListenError, match=r"bind: invalid argument$"):
        bind_socket(base + "b" * (108 - len(base)), "unix")
    if len(base) < 107:
        bind_socket(base + "c" * (107 - len(base)), "unix").close()


def test_unixpacket_is_refused_with_the_reason(tmp_path: Path) -> None:
    address = str(tmp_path / "p.sock")
    with pytest.raises(ListenError) as caught:
        bind_socket(address, "unixpacket")
    assert str(caught.value) == (
        f"listen unixpacket {address}: not supported: HTTP is read here as a byte stream; use --web.network=unix"
    )
    assert not Path(address).exists()


def test_bound_address_of_a_systemd_unix_socket_is_its_path(tmp_path: Path) -> None:
    """A socket systemd passes (``ListenStream=/run/x.sock``) is logged by its path; closing it leaves the file."""
    path = tmp_path / "activated.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    assert bound_address(sock) == str(path)
    sock.close()
    assert path.exists()


def test_the_network_flag_reaches_the_listener(tmp_path: Path) -> None:
    path = tmp_path / "flag.sock"
    (sock,) = listen_sockets(Config(listen_addresses=(str(path),), network="unix"))
    try:
        assert sock.family == socket.AF_UNIX
        assert path.is_socket()
    finally:
        sock.close()
    assert not path.exists()
