"""TLS, mutual TLS and basic auth on the real exporter, with throwaway certificates from trustme."""

from __future__ import annotations

import base64
import datetime
import http.client
import socket
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import trustme

from conftest import StartExporter
from harness import FIXTURE_CAPTURES, Exporter, fake_smi_command, http_get, run_exporter_to_exit

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
PASSWORD = "correct horse battery staple"


@dataclass
class Pki:
    directory: Path
    ca: trustme.CA
    other_ca: trustme.CA
    client: trustme.LeafCert
    foreign_client: trustme.LeafCert
    expired_client: trustme.LeafCert
    other_san_client: trustme.LeafCert


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("tls")
    ca, other_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(directory / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2)
    return Pki(
        directory,
        ca,
        other_ca,
        client=ca.issue_cert("scraper.example"),
        foreign_client=other_ca.issue_cert("scraper.example"),
        expired_client=ca.issue_cert("scraper.example", not_before=past - datetime.timedelta(days=1), not_after=past),
        other_san_client=ca.issue_cert("intruder.example"),
    )


def write_config(pki: Pki, name: str, extra: str = "", users: bool = False) -> Path:
    text = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n" + extra
    text += "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    if users:
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
        text += f"basic_auth_users:\n  prometheus: {hashed}\n"
    path = pki.directory / name
    path.write_text(text)
    return path


def client_context(pki: Pki, client: trustme.LeafCert | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    pki.ca.configure_trust(context)
    if client is not None:
        client.configure_cert(context)
    return context


def https_get(
    exporter: Exporter, path: str, context: ssl.SSLContext, auth: tuple[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, port = exporter.address.rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.fixture
def tls_exporter(exporter: StartExporter, pki: Pki) -> Exporter:
    config = write_config(pki, "web-auth.yml", users=True)
    return exporter("--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={config}")


def test_https_scrape_with_the_right_password(tls_exporter: Exporter, pki: Pki) -> None:
    status, headers, body = https_get(tls_exporter, "/metrics", client_context(pki), ("prometheus", PASSWORD))
    assert status == 200
    assert b"nvidia_smi_gpu_info{" in body
    assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "auth",
    [None, ("prometheus", "wrong"), ("mallory", PASSWORD), ("", "")],
    ids=["missing-credentials", "wrong-password", "unknown-user", "empty-credentials"],
)
def test_bad_credentials_get_401_with_a_challenge(
    tls_exporter: Exporter, pki: Pki, auth: tuple[str, str] | None
) -> None:
    status, headers, body = https_get(tls_exporter, "/metrics", client_context(pki), auth)
    assert status == 401
    assert headers["WWW-Authenticate"] == "Basic"
    assert b"nvidia_smi" not in body


@pytest.mark.parametrize("path", ["/", "/-/healthy", "/-/ready", "/no/such/page"])
def test_auth_applies_to_every_route(tls_exporter: Exporter, pki: Pki, path: str) -> None:
    assert https_get(tls_exporter, path, client_context(pki))[0] == 401


def test_plain_http_to_the_tls_port_is_refused_and_the_server_survives(tls_exporter: Exporter, pki: Pki) -> None:
    host, port = tls_exporter.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = raw.recv(4096)
    assert b"200 OK" not in reply
    assert https_get(tls_exporter, "/-/healthy", client_context(pki), ("prometheus", PASSWORD))[0] == 200


def test_secrets_never_reach_the_log(tls_exporter: Exporter, pki: Pki) -> None:
    https_get(tls_exporter, "/metrics", client_context(pki), ("prometheus", "wrong-" + PASSWORD))
    https_get(tls_exporter, "/metrics", client_context(pki), ("prometheus", PASSWORD))
    assert PASSWORD not in tls_exporter.log
    assert "$2b$" not in tls_exporter.log


@pytest.fixture
def mtls_exporter(exporter: StartExporter, pki: Pki) -> Exporter:
    extra = "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
    config = write_config(pki, "web-mtls.yml", extra)
    return exporter("--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={config}")


def test_mutual_tls_accepts_a_client_certificate_from_the_ca(mtls_exporter: Exporter, pki: Pki) -> None:
    assert https_get(mtls_exporter, "/metrics", client_context(pki, pki.client))[0] == 200


@pytest.mark.parametrize(
    "client", ["none", "foreign_client", "expired_client"], ids=["no-client-cert", "wrong-ca", "expired-cert"]
)
def test_mutual_tls_refuses_bad_client_certificates(mtls_exporter: Exporter, pki: Pki, client: str) -> None:
    leaf = None if client == "none" else getattr(pki, client)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        https_get(mtls_exporter, "/metrics", client_context(pki, leaf))
    assert https_get(mtls_exporter, "/-/healthy", client_context(pki, pki.client))[0] == 200


def test_client_allowed_sans_turn_away_other_certificates(exporter: StartExporter, pki: Pki) -> None:
    extra = (
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
        "  client_allowed_sans: [scraper.example]\n"
    )
    config = write_config(pki, "web-sans.yml", extra)
    handle = exporter("--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={config}")
    assert https_get(handle, "/metrics", client_context(pki, pki.client))[0] == 200
    assert https_get(handle, "/metrics", client_context(pki, pki.other_san_client))[0] == 403


def test_client_rejects_an_exporter_whose_certificate_it_does_not_trust(tls_exporter: Exporter, pki: Pki) -> None:
    context = ssl.create_default_context()
    pki.other_ca.configure_trust(context)
    with pytest.raises(ssl.SSLCertVerificationError):
        https_get(tls_exporter, "/-/healthy", context)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.pem\n", "cert_file: cannot read "),
        ("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash"),
        ("unknown_section: {}\n", r"line 1: top level: unknown key \"unknown_section\""),
    ],
    ids=["missing-cert-file", "plaintext-password", "unknown-key"],
)
def test_bad_web_config_stops_startup(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    code, log = run_exporter_to_exit(["--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={path}"])
    assert code == 1
    assert "failed to run" in log
    assert message in log


def test_rate_limit_answers_429_once_the_burst_is_spent(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("rate_limit:\n  interval: 1h\n  burst: 2\n")
    handle = exporter("--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={config}")
    statuses = [http_get(handle.url + "/-/healthy").status for _ in range(4)]
    assert statuses == [200, 200, 429, 429]


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])


def _open_tls_connection(exporter: Exporter, context: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection that has been answered once and is held open (keep-alive)."""
    host, port = exporter.address.rsplit(":", 1)
    connection = context.wrap_socket(socket.create_connection((host, int(port)), timeout=30), server_hostname=host)
    connection.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: exporter\r\n\r\n")
    assert connection.recv(4096).startswith(b"HTTP/1.1 200")
    return connection


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc (Linux)")
@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10's asyncio TLS has no per-connection buffer")
def test_an_open_tls_connection_costs_well_under_asyncios_256_kib_receive_buffer(
    exporter: StartExporter, pki: Pki
) -> None:
    """50 held TLS connections: asyncio's own protocol would add 50 x 256 KiB (12.5 MiB) for its buffers."""
    config = write_config(pki, "web-tls.yml")
    handle = exporter("--nvidia-smi-command", fake_smi_command(CAPTURE), f"--web.config.file={config}")
    context = client_context(pki)
    connections = [_open_tls_connection(handle, context) for _ in range(5)]  # warm up OpenSSL and the allocator
    before = _rss_kib(handle.process.pid)
    try:
        connections += [_open_tls_connection(handle, context) for _ in range(50)]
        growth_mib = (_rss_kib(handle.process.pid) - before) / 1024
    finally:
        for connection in connections:
            connection.close()
    assert growth_mib < 8, f"50 open TLS connections grew RSS by {growth_mib:.1f} MiB"
