"""The private APIs the exporter relies on and the dependency ranges pinned for them.

Each private use lives in one module (the NVML bindings' helpers in ``backends/nvml/api.py``, asyncio's TLS
protocol in ``httpserver/tlsbuffer.py``); h11, the HTTP/1.1 parser, is used through its public API only, from
``httpserver/protocol.py`` alone, and the behaviour the zero-copy body writing relies on is pinned below (aiohttp,
which served HTTP before it, is a test dependency only). These tests fail loudly, naming the
supported range, when an installed version is outside what pyproject.toml pins or an upgrade removed what
that module uses, so an upgrade is verified before it ships rather than discovered in production.
"""

from __future__ import annotations

import ast
import asyncio
import asyncio.sslproto
import importlib.metadata
import re
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest
import trustme
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from nvidia_gpu_exporter.backends import BackendSetupError
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.api import PRIVATE_HELPERS, SUPPORTED_BINDINGS, bindings_problem, exports
from nvidia_gpu_exporter.httpserver import tlsbuffer
from nvml_fixtures import (
    InProcessFake,
    _fake_nvml_fixture,  # noqa: F401
    _fake_nvml_library_fixture,  # noqa: F401
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "nvidia_gpu_exporter"


def pinned() -> dict[str, SpecifierSet]:
    """``[project].dependencies`` of pyproject.toml by name (read without tomllib, which Python 3.10 lacks)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    lines = re.findall(r'^\s*"([^"]+)",?\s*(?:#.*)?$', block, flags=re.MULTILINE)
    return {Requirement(line).name.lower(): Requirement(line).specifier for line in lines}


# -- pinned ranges --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "distribution",
    [
        pytest.param("h11", id="h11-http-parser"),
        pytest.param("bcrypt", id="bcrypt-72-byte-rule"),
        pytest.param("nvidia-ml-py", id="nvml-private-helpers"),
    ],
)
def test_the_installed_version_is_inside_the_pinned_range_and_the_range_is_closed(distribution: str) -> None:
    specifier = pinned()[distribution]
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in specifier), (
        f"{distribution}{specifier}: pin an upper bound at the first release not verified"
    )
    installed = importlib.metadata.version(distribution)
    assert Version(installed) in specifier, (
        f"{distribution} {installed} is installed, outside the supported range {distribution}{specifier} "
        "pinned in pyproject.toml: install a supported version, or verify this one and widen the pin"
    )


def test_the_nvml_api_names_the_range_pyproject_pins() -> None:
    requirement = Requirement(SUPPORTED_BINDINGS)
    assert requirement.specifier == pinned()[requirement.name], (
        f"backends/nvml/api.py says {SUPPORTED_BINDINGS}, pyproject.toml pins nvidia-ml-py{pinned()[requirement.name]}"
    )


# -- one module per private API -------------------------------------------------------------------------------


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "proto" not in path.relative_to(PACKAGE).parts:  # generated gRPC modules
            yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _private_pynvml_uses(tree: ast.Module) -> list[str]:
    return [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "pynvml"
        and node.attr.startswith("_")
    ]


def _sslproto_uses(tree: ast.Module) -> list[str]:
    uses = [
        f"import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "asyncio.sslproto"
    ]
    uses += [
        "from asyncio import sslproto"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (
            node.module == "asyncio.sslproto"
            or (node.module == "asyncio" and "sslproto" in {a.name for a in node.names})
        )
    ]
    return uses


def _imports_of(tree: ast.Module, package: str) -> list[str]:
    """Every ``import package...`` / ``from package... import`` in ``tree``."""
    uses = [
        f"import {alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == package or alias.name.startswith(package + ".")
    ]
    uses += [
        f"from {node.module} import"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and (node.module == package or node.module.startswith(package + "."))
    ]
    return uses


def _h11_imports(tree: ast.Module) -> list[str]:
    return _imports_of(tree, "h11")


def _h11_private_uses(tree: ast.Module) -> list[str]:
    """``h11._x`` attributes and ``h11._x`` modules: h11's internals, which no release promises to keep."""
    uses = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "h11"
        and node.attr.startswith("_")
    ]
    return uses + [use for use in _h11_imports(tree) if "h11._" in use]


def _aiohttp_imports(tree: ast.Module) -> list[str]:
    return _imports_of(tree, "aiohttp")


@pytest.mark.parametrize(
    ("finder", "allowed"),
    [
        pytest.param(_private_pynvml_uses, {"backends/nvml/api.py"}, id="pynvml-private-helpers-only-in-nvml-api"),
        pytest.param(_sslproto_uses, {"httpserver/tlsbuffer.py"}, id="asyncio-sslproto-only-in-tlsbuffer"),
        pytest.param(_h11_imports, {"httpserver/protocol.py"}, id="h11-only-in-the-http-protocol"),
        pytest.param(_h11_private_uses, set(), id="h11-public-api-only"),
        pytest.param(_aiohttp_imports, set(), id="aiohttp-is-a-test-dependency-only"),
    ],
)
def test_each_private_api_is_used_in_one_module_only(
    finder: Callable[[ast.Module], list[str]], allowed: set[str]
) -> None:
    offenders = {name: uses for name, tree in _modules() if (uses := finder(tree)) and name not in allowed}
    assert offenders == {}


# -- h11 ------------------------------------------------------------------------------------------------------


def test_h11_hands_a_bodys_view_to_the_transport_without_copying_it() -> None:
    """httpserver/protocol.py writes a large body as views of its shared parts (body.py): h11 must pass a ``Data``
    event's object through ``send_with_data_passthrough`` untouched, or every connection would copy the body."""
    import h11

    connection = h11.Connection(h11.SERVER)
    connection.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert isinstance(connection.next_event(), h11.Request)
    connection.send(h11.Response(status_code=200, headers=[(b"Content-Length", b"4")]))
    view = memoryview(b"body")
    pieces = connection.send_with_data_passthrough(h11.Data(data=view))  # type: ignore[arg-type]
    assert pieces is not None
    assert [piece is view for piece in pieces] == [True]


# -- the NVML bindings' private helpers -----------------------------------------------------------------------


def test_the_bindings_have_the_private_helpers_the_nvml_api_uses() -> None:
    assert bindings_problem() is None
    assert pynvml._nvmlCheckReturn(0) == 0
    with pytest.raises(pynvml.NVMLError) as raised:
        pynvml._nvmlCheckReturn(3)
    assert raised.value.value == 3
    # What the tests' fake library fixture swaps (tests/nvml_fixtures.py), checked here so an upgrade says so.
    assert isinstance(pynvml._nvmlGetFunctionPointer_cache, dict), "nvml_fixtures relies on this cache"
    assert hasattr(pynvml, "nvmlLib"), "nvml_fixtures loads the fake library through pynvml.nvmlLib"


def test_exports_reads_the_loaded_library(fake_nvml: InProcessFake) -> None:
    pynvml.nvmlInit()
    try:
        assert exports("nvmlDeviceGetUUID")
        assert not exports("nvmlDeviceGetNoSuchThing")
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.parametrize("helper", PRIVATE_HELPERS)
def test_startup_names_the_supported_range_when_a_private_helper_is_gone(
    fake_nvml: InProcessFake, monkeypatch: pytest.MonkeyPatch, helper: str
) -> None:
    with monkeypatch.context() as patch:  # restored before the fixture's teardown shuts NVML down
        patch.delattr(pynvml, helper)
        with pytest.raises(BackendSetupError) as raised:
            open_backend(FieldRequest(), watch_xids=False)
    message = str(raised.value)
    assert f"pynvml.{helper}" in message
    assert SUPPORTED_BINDINGS in message
    assert importlib.metadata.version("nvidia-ml-py") in message
    assert fake_nvml.refcount() == 0  # refused before NVML was initialized


# -- asyncio's TLS protocol -----------------------------------------------------------------------------------


def test_this_python_serves_tls_the_way_it_was_verified_to() -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if sys.version_info < (3, 11):
        assert not tlsbuffer.compact_tls_available()  # 3.10's TLS protocol has no buffer to shrink
        return
    first, last = (".".join(map(str, pair)) for pair in tlsbuffer.VERIFIED_PYTHONS)
    assert tlsbuffer.python_verified(), (
        f"httpserver/tlsbuffer.py subclasses asyncio.sslproto.SSLProtocol, verified on CPython {first} to {last} only; "
        f"this is {sys.implementation.name} {version}: check that max_size still sizes the receive buffer and "
        "that the constructor takes the same parameters, then widen VERIFIED_PYTHONS"
    )
    assert tlsbuffer.sslproto_mismatches() == []
    assert tlsbuffer.compact_tls_available()


def test_the_compact_protocol_reads_into_16_kib() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10's asyncio TLS has no per-connection buffer")
    loop = asyncio.new_event_loop()
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        protocol = tlsbuffer.CompactTLSProtocol(
            loop, asyncio.Protocol(), context, loop.create_future(), server_side=True
        )
        assert protocol.get_buffer(-1).nbytes == tlsbuffer.TLS_RECEIVE_BUFFER_BYTES == 4 * 1024
    finally:
        loop.close()


def test_every_tls_connection_reads_into_one_shared_buffer() -> None:
    """Each read is copied out at once (into OpenSSL's incoming BIO), so no connection holds a receive buffer of its
    own: a stalled handshake or an idle keep-alive scraper holds 4 KiB less."""
    if sys.version_info < (3, 11):
        pytest.skip("Python 3.10's asyncio TLS has no per-connection buffer")
    loop = asyncio.new_event_loop()
    try:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        first, second = (
            tlsbuffer.CompactTLSProtocol(loop, asyncio.Protocol(), context, loop.create_future(), server_side=True)
            for _ in range(2)
        )
        assert first.get_buffer(-1).obj is second.get_buffer(-1).obj
    finally:
        loop.close()


class _FakeProtocolWithoutHandshakeTimeout(asyncio.BufferedProtocol):
    max_size = 256 * 1024

    def __init__(self, loop: object, app_protocol: object, sslcontext: object, waiter: object) -> None:
        """The shape of a future SSLProtocol that dropped a parameter this module passes."""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10's asyncio TLS has no per-connection buffer")
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            lambda patch: patch.delattr(asyncio.sslproto.SSLProtocol, "max_size"), "max_size", id="buffer-size-gone"
        ),
        pytest.param(
            lambda patch: patch.setattr(asyncio.sslproto, "SSLProtocol", _FakeProtocolWithoutHandshakeTimeout),
            "takes no server_side, ssl_handshake_timeout",
            id="constructor-lost-parameters",
        ),
        pytest.param(
            lambda patch: patch.delattr(asyncio.sslproto, "SSLProtocol"), "SSLProtocol is gone", id="class-gone"
        ),
    ],
)
def test_changed_asyncio_internals_fall_back_to_asyncios_own_buffer(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[pytest.MonkeyPatch], None], expected: str
) -> None:
    tlsbuffer.compact_tls_available.cache_clear()
    change(monkeypatch)
    try:
        assert any(expected in mismatch for mismatch in tlsbuffer.sslproto_mismatches())
        assert not tlsbuffer.compact_tls_available()
    finally:
        tlsbuffer.compact_tls_available.cache_clear()  # recomputed once the monkeypatch is undone


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


@pytest.mark.parametrize(
    "verified", [True, False], ids=["verified-python-compact-buffer", "unverified-python-asyncios"]
)
def test_tls_is_served_whichever_protocol_this_python_gets(monkeypatch: pytest.MonkeyPatch, verified: bool) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    if not verified:
        monkeypatch.setattr(tlsbuffer, "VERIFIED_PYTHONS", ((3, 0), (3, 1)))
    tlsbuffer.compact_tls_available.cache_clear()

    async def main() -> bytes:
        sock = socket.create_server(("127.0.0.1", 0))
        server = await tlsbuffer.create_tls_server(_Echo, sock, server_context, handshake_timeout=5.0, backlog=8)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*sock.getsockname()[:2], ssl=client_context), 5
            )
            writer.write(b"ping")
            echoed = await asyncio.wait_for(reader.readexactly(4), 5)
            writer.close()
            return echoed
        finally:
            server.close()

    try:
        assert asyncio.run(main()) == b"ping"
        if sys.version_info >= (3, 11):
            assert tlsbuffer.compact_tls_available() is verified
    finally:
        tlsbuffer.compact_tls_available.cache_clear()
