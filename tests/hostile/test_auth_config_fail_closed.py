"""Security settings that cannot silently fall open (docs/security.md): hostile or careless web configs.

Each case once opened the endpoint or answered 500: an empty file turned TLS and auth off, an unusable hash
started silently, bytes outside ASCII in ``Authorization`` raised, a reload dropped the client-SAN check.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import bcrypt
import pytest

from conftest import StartExporter
from harness import run_exporter_to_exit
from nvidia_gpu_exporter.httpserver.auth import parse_basic_authorization
from nvidia_gpu_exporter.httpserver.config import WebConfigError, load_web_config
from nvidia_gpu_exporter.httpserver.security import Security

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
USERS = f"basic_auth_users:\n  alice: {HASH}\n"


def touch_later(path: Path) -> None:
    """Make the reload see a change even within the file system's timestamp granularity."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("Basic é", id="non-ascii-in-the-base64"),
        pytest.param("Basic \udcff\udcfe", id="undecodable-bytes-as-aiohttp-hands-them-over"),
        pytest.param("Basic /w==", id="base64-of-a-byte-that-is-not-utf8"),
        pytest.param("Basic\u00a0YWxpY2U6c2VjcmV0", id="a-non-breaking-space-after-the-scheme"),
        pytest.param("Basic " + "A" * 10_000, id="very-long"),
    ],
)
def test_any_authorization_header_is_a_credential_or_none_never_an_error(header: str) -> None:
    assert parse_basic_authorization(header) is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("\n  \n", id="blank"),
        pytest.param("# only a comment\n", id="comment"),
    ],
)
def test_an_explicitly_given_web_config_that_says_nothing_is_a_startup_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError, match="is empty"):
        load_web_config(str(path))


@pytest.mark.parametrize(
    "hashed",
    [
        pytest.param("$2b$04$not-a-real-hash", id="salt-too-short"),
        pytest.param("$2b$99$" + HASH[7:], id="cost-out-of-range"),
        pytest.param(HASH[:-1], id="one-character-short"),
    ],
)
def test_an_unusable_hash_is_refused_at_startup(tmp_path: Path, hashed: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    with pytest.raises(WebConfigError, match=r"basic_auth_users\.alice: not a usable bcrypt hash"):
        load_web_config(str(path))


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param("", id="truncated-to-empty-as-config-management-writes-it"),
        pytest.param("basic_auth_users: [\n", id="half-written"),
        pytest.param("basic_auth_users:\n  alice: '$2b$04$short'\n", id="an-unusable-hash"),
    ],
)
def test_a_reload_that_would_open_the_endpoint_keeps_the_previous_settings(
    tmp_path: Path, edit: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "web.yml"
    path.write_text(USERS)
    security = Security.from_file(str(path))
    path.write_text(edit)
    touch_later(path)
    with caplog.at_level(logging.WARNING, logger="nvidia_gpu_exporter.httpserver.security"):
        assert not security.reload_if_changed()
    assert security.authenticator is not None
    assert asyncio.run(security.authenticator.verify("alice", "secret"))
    assert any(record.levelno >= logging.WARNING and "keeping" in record.getMessage() for record in caplog.records)


def test_a_reload_that_turns_basic_auth_off_applies_and_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "web.yml"
    path.write_text(USERS)
    security = Security.from_file(str(path))
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    touch_later(path)
    with caplog.at_level(logging.WARNING, logger="nvidia_gpu_exporter.httpserver.security"):
        assert security.reload_if_changed()
    assert security.authenticator is None
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [
        "web config reloaded: basic auth is now off, every client gets in"
    ]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import trustme

    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_pem.write_to_path(str(directory / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return directory


def test_a_reload_that_drops_tls_keeps_every_tls_check_until_a_restart(pki: Path) -> None:
    """TLS stays on until a restart, and so must the client-certificate SAN check that comes with it."""
    path = pki / "web.yml"
    path.write_text(
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: ca.pem\n"
        "  client_auth_type: RequireAndVerifyClientCert\n  client_allowed_sans: [prometheus]\n"
    )
    security = Security.from_file(str(path))
    path.write_text(USERS)
    touch_later(path)
    assert security.reload_if_changed()
    assert security.tls_enabled
    assert security.config.tls is not None
    assert security.config.tls.client_allowed_sans == ("prometheus",)
    assert security.authenticator is not None  # the rest of the edit applies


@pytest.mark.parametrize(
    ("web_config", "extra", "starts"),
    [
        pytest.param(None, (), False, id="no-web-config-refused"),
        pytest.param("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", (), False, id="no-auth-refused"),
        pytest.param(USERS, (), True, id="basic-auth-serves-it"),
        pytest.param(None, ("--web.enable-pprof-unauthenticated",), True, id="said-explicitly"),
    ],
)
def test_pprof_needs_authentication_or_an_explicit_flag(
    tmp_path: Path, exporter: StartExporter, web_config: str | None, extra: tuple[str, ...], starts: bool
) -> None:
    """The profiler shows the full command line (--nvidia-smi-command included) and runs for minutes."""
    args = ["--collect.backend=demo", "--web.enable-pprof", *extra]
    if web_config is not None:
        path = tmp_path / "web.yml"
        path.write_text(web_config)
        args.append(f"--web.config.file={path}")
    if starts:
        exporter(*args).stop()
        return
    code, log = run_exporter_to_exit(args)
    assert code == 1
    assert "--web.enable-pprof needs basic_auth_users or client certificates" in log


@pytest.mark.parametrize("version", ["TLS10", "TLS11"])
def test_a_tls_version_openssl_will_refuse_is_said_at_startup(pki: Path, version: str) -> None:
    import ssl

    from nvidia_gpu_exporter.httpserver.config import config_warnings, parse_web_config

    if ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).security_level < 1:
        pytest.skip("this OpenSSL's security level allows TLS 1.0 and 1.1")
    config = parse_web_config(
        f"tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  min_version: {version}\n",
        "web.yml",
        str(pki),
    )
    assert any(
        f"min_version {version}" in warning and "clients need TLS 1.2 or newer" in warning
        for warning in config_warnings(config)
    )


def test_inline_pem_loads_without_a_writable_temp_dir(pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only root file system (the chart's) has no writable /tmp; inline PEM must still load."""
    import sys
    import tempfile

    from nvidia_gpu_exporter.httpserver.config import build_ssl_context, parse_web_config

    if not hasattr(os, "memfd_create") or not sys.platform.startswith("linux"):
        pytest.skip("needs memfd_create (Linux)")

    def no_temp_dir(*_: object, **__: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_temp_dir)
    cert = (pki / "cert.pem").read_text().replace("\n", "\n    ")
    key = (pki / "key.pem").read_text().replace("\n", "\n    ")
    config = parse_web_config(f"tls_server_config:\n  cert: |\n    {cert}\n  key: |\n    {key}\n", "web.yml", str(pki))
    assert build_ssl_context(config).cert_store_stats() is not None
