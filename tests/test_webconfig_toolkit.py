"""exporter-toolkit's own web tests, rebuilt against this server (docs/compatibility.md, "Deliberate differences").

Every Go exporter reads ``--web.config.file`` through prometheus/exporter-toolkit, whose tests
(``web/tls_config_test.go``, ``web/handler_test.go``) are the working definition of that file. Each case here
is named after the toolkit case it mirrors (``TestServerBehaviour/<name>``) and expects the toolkit's
outcome, on certificates, keys and configs made here. Where Python's ``ssl`` cannot give Go's verdict, the
case pins the limit docs/compatibility.md states instead.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from async_helpers import WAIT_SECONDS, run
from hostile.web_hostile import serving_hello
from nvidia_gpu_exporter.httpserver.config import WebConfigError, config_warnings
from nvidia_gpu_exporter.httpserver.security import Security

Outcome = int | str  # an HTTP status, or "refused" when the TLS handshake or the connection failed


@dataclass(frozen=True)
class Pki:
    directory: Path
    server_ca: trustme.CA  # signs the server's certificate; the clients trust it
    client_ca: trustme.CA  # signs the clients' certificates; never in the system trust store
    client: trustme.LeafCert  # SAN client.example, from client_ca


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("toolkit")
    server_ca, client_ca = trustme.CA(), trustme.CA()
    server = server_ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)  # for ECDHE-RSA suites
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    server.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    client_ca.cert_pem.write_to_path(str(directory / "client_ca.pem"))
    return Pki(
        directory,
        server_ca,
        client_ca,
        client=client_ca.issue_cert("client.example"),
    )


TLS = 'tls_server_config:\n  cert_file: "server.crt"\n  key_file: "server.key"\n'
NO_AUTH_GOOD = TLS + '  client_auth_type: "VerifyClientCertIfGiven"\n'  # the toolkit's web_config_noAuth.good.yml


@dataclass(frozen=True)
class Client:
    """What a toolkit case's client does: TLS or not, its certificate, versions, suites and credentials."""

    tls: bool = True
    certificate: str = ""  # a Pki attribute: "client"
    max_version: ssl.TLSVersion | None = None
    ciphers: tuple[str, ...] = ()  # OpenSSL names, in the client's order of preference
    credentials: tuple[str, str] | None = None
    requests: int = 1
    curve: str = ""  # the one curve the client offers (OpenSSL name)

    def context(self, pki: Pki) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context()
        pki.server_ca.configure_trust(context)
        if self.certificate:
            getattr(pki, self.certificate).configure_cert(context)
        if self.max_version is not None:
            with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is what the case tries
                warnings.simplefilter("ignore", DeprecationWarning)
                context.maximum_version = self.max_version
        if self.ciphers:
            context.maximum_version = ssl.TLSVersion.TLSv1_2  # TLS 1.3 suites are not the client's to pick
            context.set_ciphers(":".join(self.ciphers))
        if self.curve:
            context.set_ecdh_curve(self.curve)
        return context


@dataclass
class Answer:
    outcomes: list[Outcome] = field(default_factory=list)
    ciphers: list[str] = field(default_factory=list)


async def ask(url: str, client: Client, pki: Pki) -> tuple[Outcome, str]:
    """One ``GET /`` on a new connection: its status (or "refused") and the negotiated cipher."""
    host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    headers = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
    if client.credentials is not None:
        token = base64.b64encode(":".join(client.credentials).encode()).decode()
        headers += f"Authorization: Basic {token}\r\n"
    context = client.context(pki)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=context, server_hostname=host if context else None),
            WAIT_SECONDS,
        )
    except (ssl.SSLError, ConnectionError, asyncio.TimeoutError):
        return "refused", ""
    try:
        cipher = writer.get_extra_info("cipher")
        writer.write((headers + "\r\n").encode())
        status_line = await asyncio.wait_for(reader.readline(), WAIT_SECONDS)
    except (ssl.SSLError, ConnectionError, asyncio.TimeoutError):
        return "refused", ""
    finally:
        writer.close()
    if not status_line:
        return "refused", ""  # a TLS 1.3 server refuses a client certificate after the client's handshake ended
    return int(status_line.split()[1]), cipher[0] if cipher else ""


def serve_and_ask(
    pki: Pki, text: str, client: Client, between: Callable[[Security], None] | None = None
) -> tuple[Answer, Answer]:
    """Start a server on ``text`` (written next to the certificates), ask as ``client``; if ``between`` is
    given, run it (a reload) and ask again."""
    path = pki.directory / "web.yml"
    path.write_text(text)
    security = Security.from_file(str(path))
    before, after = Answer(), Answer()

    async def main() -> None:
        async with serving_hello(security) as url:
            for answer in (before, after) if between else (before,):
                if answer is after:
                    assert between is not None
                    between(security)
                for _ in range(client.requests):
                    outcome, cipher = await ask(url, client, pki)
                    answer.outcomes.append(outcome)
                    answer.ciphers.append(cipher)

    run(main)
    return before, after


# -- TestServerBehaviour --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "client", "outcome"),
    [
        pytest.param(NO_AUTH_GOOD, Client(), 200, id="valid tls config yml and tls client"),
        pytest.param(
            NO_AUTH_GOOD,
            Client(max_version=ssl.TLSVersion.TLSv1_1),
            "refused",
            id="valid tls config yml with TLS 1.1 client",
        ),
        pytest.param(
            TLS + "  min_version: TLS13\n",
            Client(max_version=ssl.TLSVersion.TLSv1_2),
            "refused",
            id="Incompatible TLS version: a TLS 1.2 client, a TLS 1.3 server (refused with the protocol_version alert)",
        ),
        pytest.param(
            TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
            Client(),
            "refused",
            id="RequireAndVerifyClientCert without client_ca_file and no client certificate (certificate required)",
        ),
        pytest.param(
            NO_AUTH_GOOD,
            Client(certificate="client"),
            "refused",
            id="VerifyClientCertIfGiven without client_ca_file and a certificate the system does not trust",
        ),
        pytest.param(
            TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
            Client(certificate="client"),
            "refused",
            id="RequireAndVerifyClientCert without client_ca_file and a certificate the system does not trust",
        ),
        pytest.param(
            TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client_ca.pem\n",
            Client(certificate="client"),
            200,
            id="valid tls config yml and tls client with RequireAndVerifyClientCert (present certificate)",
        ),
        pytest.param(
            "rate_limit:\n  interval: 0\n  burst: 0\n",
            Client(tls=False, requests=10),
            200,
            id="valid rate limiter (no rate limiter set up) that doesn't block",
        ),
        pytest.param(
            'rate_limit:\n  interval: "1s"\n  burst: 0\n',
            Client(tls=False, requests=10),
            429,
            id="valid rate limiter with an interval of one second (burst 0 refuses every request, as Go's limiter)",
        ),
    ],
)
def test_server_behaviour(pki: Pki, text: str, client: Client, outcome: Outcome) -> None:
    before, _ = serve_and_ask(pki, text, client)
    assert before.outcomes == [outcome] * client.requests


SOME_CIPHERS = (
    NO_AUTH_GOOD
    + "  cipher_suites:\n  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
    + "  min_version: TLS12\n  max_version: TLS12\n"
)
SOME_CIPHERS_NO_ORDER = (
    NO_AUTH_GOOD
    + "  cipher_suites:\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"
    + "  prefer_server_cipher_suites: false\n  min_version: TLS12\n  max_version: TLS12\n"
)
AES128, AES256 = "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"


@pytest.mark.parametrize(
    ("text", "ciphers", "outcome", "cipher"),
    [
        pytest.param(SOME_CIPHERS, (AES128,), 200, AES128, id="valid tls config yml with some ciphers"),
        pytest.param(
            SOME_CIPHERS, ("ECDHE-RSA-AES256-SHA",), "refused", "", id="valid tls config yml with no common cipher"
        ),
        pytest.param(
            SOME_CIPHERS, (AES128, AES256), 200, AES128, id="valid tls config yml with multiple client ciphers"
        ),
        pytest.param(
            SOME_CIPHERS,
            (AES256, AES128),
            200,
            AES128,
            id="valid tls config yml with multiple client ciphers, server's order wins",
        ),
        pytest.param(
            SOME_CIPHERS_NO_ORDER,
            (AES128, AES256),
            200,
            AES128,
            id="valid tls config yml with multiple client ciphers, client chooses cipher",
        ),
    ],
)
def test_server_behaviour_cipher_suites(
    pki: Pki, text: str, ciphers: tuple[str, ...], outcome: Outcome, cipher: str
) -> None:
    before, _ = serve_and_ask(pki, text, Client(ciphers=ciphers))
    assert (before.outcomes, before.ciphers) == ([outcome], [cipher])


@pytest.mark.parametrize(
    ("cipher", "outcome"),
    [
        pytest.param("ECDHE-RSA-AES128-GCM-SHA256", 200, id="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
        pytest.param("ECDHE-RSA-CHACHA20-POLY1305", 200, id="TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
        pytest.param("ECDHE-RSA-AES128-SHA", 200, id="TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
        pytest.param("ECDHE-RSA-AES256-SHA", 200, id="TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
        pytest.param("AES128-SHA256", "refused", id="TLS_RSA_WITH_AES_128_CBC_SHA256 (CBC-SHA256: off in Go)"),
        pytest.param("ECDHE-RSA-AES128-SHA256", "refused", id="TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 (off in Go)"),
        pytest.param("AES128-GCM-SHA256", "refused", id="TLS_RSA_WITH_AES_128_GCM_SHA256 (RSA kex: off in Go)"),
        pytest.param("DHE-RSA-AES128-GCM-SHA256", "refused", id="DHE (not in Go at all)"),
    ],
)
def test_default_tls12_cipher_suites_are_go_s(pki: Pki, cipher: str, outcome: Outcome) -> None:
    """Without ``cipher_suites``, TLS 1.2 offers Go's default suites (crypto/tls ``defaultCipherSuites``)."""
    before, _ = serve_and_ask(pki, NO_AUTH_GOOD, Client(ciphers=(cipher,)))
    assert before.outcomes == [outcome]


@pytest.mark.parametrize(
    "inline", [("cert", "key"), ("key",)], ids=["cert and key inline", "cert from file, key inline"]
)
def test_valid_tls_config_yml_inline_and_tls_client(pki: Pki, inline: tuple[str, ...]) -> None:
    """TestServerBehaviour's inline cases: PEM in the file instead of file names."""

    def setting(name: str, path: str) -> str:
        if name not in inline:
            return f'  {name}_file: "{path}"\n'
        pem = (pki.directory / path).read_text().strip()
        return f"  {name}: |\n" + "".join(f"    {line}\n" for line in pem.splitlines())

    text = "tls_server_config:\n" + setting("cert", "server.crt") + setting("key", "server.key")
    before, _ = serve_and_ask(pki, text + '  client_auth_type: "VerifyClientCertIfGiven"\n', Client())
    assert before.outcomes == [200]


@pytest.mark.parametrize("auth_type", ["VerifyClientCertIfGiven", "RequireAndVerifyClientCert"])
def test_without_client_ca_file_a_client_certificate_is_verified_against_the_system_trust_store(
    pki: Pki, monkeypatch: pytest.MonkeyPatch, auth_type: str
) -> None:
    """Go verifies against the system roots when ``client_ca_file`` is not given; OpenSSL's system store is
    the file ``SSL_CERT_FILE`` names, here the client CA."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.directory / "client_ca.pem"))
    before, _ = serve_and_ask(pki, TLS + f"  client_auth_type: {auth_type}\n", Client(certificate="client"))
    assert before.outcomes == [200]


@pytest.mark.parametrize(
    ("extra", "authenticates"),
    [
        pytest.param("  client_ca_file: client_ca.pem\n", True, id="client-ca-file"),
        pytest.param("", False, id="system-trust-store-says-nothing-about-who-sent-it"),
    ],
)
def test_only_a_client_ca_makes_verified_client_certificates_enough_for_pprof(
    pki: Pki, extra: str, authenticates: bool
) -> None:
    path = pki.directory / "pprof.yml"
    path.write_text(TLS + "  client_auth_type: RequireAndVerifyClientCert\n" + extra)
    assert Security.from_file(str(path)).authenticates is authenticates


ALL_CIPHERS = (
    NO_AUTH_GOOD
    + "  cipher_suites:\n"
    + "".join(
        f"  - {suite}\n"
        for suite in (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_AES_128_GCM_SHA256",
            "TLS_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        )
    )
)
SOME_CURVES = NO_AUTH_GOOD + "  min_version: TLS13\n  curve_preferences:\n  - CurveP521\n"
ALL_CURVES = NO_AUTH_GOOD + "  curve_preferences: [CurveP256, CurveP384, CurveP521, X25519]\n"
NO_HTTP2_CIPHER = NO_AUTH_GOOD + "  cipher_suites:\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n  max_version: TLS12\n"
SANS = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client_ca.pem\n"


@pytest.mark.parametrize(
    ("text", "client", "outcome"),
    [
        pytest.param(ALL_CIPHERS, Client(), 200, id="valid tls config yml with all ciphers"),
        pytest.param(ALL_CURVES, Client(), 200, id="valid tls config yml with all curves"),
        pytest.param(SOME_CURVES, Client(curve="secp521r1"), 200, id="valid tls config yml with some curves"),
        pytest.param(
            SOME_CURVES, Client(curve="secp384r1"), "refused", id="valid tls config yml with no common curves"
        ),
        pytest.param(
            NO_HTTP2_CIPHER + "http_server_config:\n  http2: false\n",
            Client(),
            200,
            id="valid tls config yml with non-http2 ciphers",
        ),
        pytest.param(
            NO_HTTP2_CIPHER,
            Client(),
            200,
            id="non-http2 ciphers but http2 enabled: Go refuses to serve HTTP/2 without its cipher; no HTTP/2 here",
        ),
        pytest.param(
            SANS + "  client_allowed_sans: [one, client.example, two]\n",
            Client(certificate="client"),
            200,
            id="valid tls config yml and tls client with VerifyPeerCertificate (present good SAN DNS entry)",
        ),
        pytest.param(
            SANS + "  client_allowed_sans: [bad]\n",
            Client(certificate="client"),
            403,
            id="present invalid SAN DNS entries: Go fails the handshake; ssl has no verify callback, so 403",
        ),
    ],
)
def test_server_behaviour_where_python_s_ssl_differs(pki: Pki, text: str, client: Client, outcome: Outcome) -> None:
    """The toolkit's cases that touch what Python's ``ssl`` does differently (docs/compatibility.md): a single
    pinned curve (the first), no HTTP/2, and client SANs checked after the handshake."""
    before, _ = serve_and_ask(pki, text, client)
    assert before.outcomes == [outcome]


@pytest.mark.parametrize("auth_type", ["RequireAnyClientCert", "RequestClientCert"])
def test_client_auth_types_that_accept_unverified_certificates_are_refused_at_start(pki: Pki, auth_type: str) -> None:
    """TestServerBehaviour's RequireAnyClientCert cases pass on Go; Python's ``ssl`` verifies every client
    certificate it accepts, so these types cannot be honoured and the start fails, saying why."""
    path = pki.directory / "any.yml"
    path.write_text(TLS + f"  client_auth_type: {auth_type}\n")
    with pytest.raises(WebConfigError, match=f"{auth_type} cannot be honoured"):
        Security.from_file(str(path))


# -- TestUsers and handler_test.go ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def users() -> str:
    """``basic_auth_users`` of the toolkit's users files: alice, bob, carol, dave (cost 4, to be quick)."""
    import bcrypt

    lines = [f"  {name}: {bcrypt.hashpw(f'{name}123'.encode(), bcrypt.gensalt(4)).decode()}\n" for name in USERS]
    return "basic_auth_users:\n" + "".join(lines)


USERS = ("alice", "bob", "carol", "dave")


@pytest.mark.parametrize(
    ("tls", "credentials", "outcome"),
    [
        pytest.param(False, None, 401, id="without basic auth"),
        pytest.param(False, ("dave", "dave123"), 200, id="with correct basic auth"),
        pytest.param(True, None, 401, id="without basic auth and TLS"),
        pytest.param(True, ("dave", "dave123"), 200, id="with correct basic auth and TLS"),
        pytest.param(True, ("carol", "carol123"), 200, id="with another correct basic auth and TLS"),
        pytest.param(True, ("dave", "bob123"), 401, id="with bad password and TLS"),
        pytest.param(True, ("nonexistent", "nonexistent"), 401, id="with bad username and TLS"),
    ],
)
def test_users(pki: Pki, users: str, tls: bool, credentials: tuple[str, str] | None, outcome: Outcome) -> None:
    before, _ = serve_and_ask(pki, (TLS if tls else "") + users, Client(tls=tls, credentials=credentials))
    assert before.outcomes == [outcome]


@pytest.mark.parametrize(
    ("credentials", "outcome"),
    [
        pytest.param(("fakeuser", "fakepassword"), 401, id="TestBasicAuthWithFakepassword"),
        pytest.param(("fakeuser", "fake password: no user has it"), 401, id="the fake hash's own password"),
        pytest.param(("alice$2b$04$" + "a" * 53, "alice123"), 401, id="TestByPassBasicAuthVuln: a hash in the name"),
        pytest.param(("alice", "$2b$10$" + "a" * 53 + "alice123"), 401, id="TestByPassBasicAuthVuln: in the password"),
    ],
)
def test_basic_auth_refusals(pki: Pki, users: str, credentials: tuple[str, str], outcome: Outcome) -> None:
    """Asked twice: the second answer could come from a cache, and must be the same."""
    before, _ = serve_and_ask(pki, users, Client(tls=False, credentials=credentials, requests=2))
    assert before.outcomes == [outcome] * 2


def test_basic_auth_cache(pki: Pki, users: str) -> None:
    """TestBasicAuthCache: a working and a wrong password, then many of each at once from one client. Every
    correct login is let in (from the cache). A wrong one gets 401, or 429 at once when two of that client's
    checks are already waiting (docs/security.md, "Basic auth"), where Go queues it for a 401."""
    path = pki.directory / "web.yml"
    path.write_text(users)
    security = Security.from_file(str(path))
    right = Client(tls=False, credentials=("alice", "alice123"))
    wrong = Client(tls=False, credentials=("alice", "alice1234"))

    async def main() -> tuple[list[Outcome], list[Outcome], list[Outcome]]:
        async with serving_hello(security) as url:
            first = [(await ask(url, right, pki))[0], (await ask(url, wrong, pki))[0]]
            answers = await asyncio.gather(*(ask(url, client, pki) for _ in range(40) for client in (right, wrong)))
            outcomes = [outcome for outcome, _ in answers]
            return first, outcomes[0::2], outcomes[1::2]

    first, rights, wrongs = run(main)
    assert first == [200, 401]
    assert rights == [200] * 40
    assert set(wrongs) <= {401, 429}
    assert 401 in wrongs


def test_http_headers(pki: Pki) -> None:
    """TestHTTPHeaders: the configured headers are on the answer, as written."""
    headers = {
        "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
        "X-Frame-Options": "deny",
        "X-Content-Type-Options": "nosniff",
        "X-XSS-Protection": "1",
    }
    text = "http_server_config:\n  headers:\n" + "".join(f"    {name}: {value}\n" for name, value in headers.items())
    path = pki.directory / "web.yml"
    path.write_text(text)
    security = Security.from_file(str(path))

    async def main() -> dict[str, str]:
        async with serving_hello(security) as url:
            host, port = url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = (await asyncio.wait_for(reader.read(), WAIT_SECONDS)).split(b"\r\n\r\n", 1)[0].decode()
            writer.close()
            return dict(line.split(": ", 1) for line in head.split("\r\n")[1:])

    answered = run(main)
    assert {name: answered.get(name) for name in headers} == headers


# -- TestConfigReloading --------------------------------------------------------------------------------


def reload_to(pki: Pki, text: str) -> Callable[[Security], None]:
    """Between two asks: the file rewritten to ``text`` (a second later, as the watcher sees it) and reloaded."""

    def between(security: Security) -> None:
        path = pki.directory / "web.yml"
        path.write_text(text)
        status = path.stat()
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
        assert security.reload_if_changed()

    return between


REQUIRE = TLS + '  client_auth_type: "RequireAndVerifyClientCert"\n'  # web_config_noAuth.good.blocking.yml
TLS12 = Client(max_version=ssl.TLSVersion.TLSv1_2)


@pytest.mark.parametrize(
    ("first", "second", "client", "outcomes"),
    [
        pytest.param(REQUIRE, NO_AUTH_GOOD, Client(), ("refused", 200), id="TestConfigReloading"),
        pytest.param(NO_AUTH_GOOD, REQUIRE, Client(), (200, "refused"), id="client certificates required at reload"),
        pytest.param(
            TLS,
            REQUIRE + "  client_ca_file: client_ca.pem\n",
            Client(),
            (200, "refused"),
            id="client CA added at reload",
        ),
        pytest.param(
            TLS + "  min_version: TLS13\n", TLS + "  min_version: TLS12\n", TLS12, ("refused", 200), id="min_version"
        ),
        pytest.param(TLS, TLS + "  min_version: TLS13\n", TLS12, (200, "refused"), id="min_version raised"),
        pytest.param(
            TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n",
            TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
            Client(ciphers=(AES128,)),
            ("refused", 200),
            id="cipher_suites",
        ),
        pytest.param(
            TLS + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
            TLS,
            Client(ciphers=("ECDHE-RSA-AES128-SHA",)),
            ("refused", 200),
            id="cipher_suites removed: Go's defaults again",
        ),
    ],
)
def test_config_reloading(pki: Pki, first: str, second: str, client: Client, outcomes: tuple[Outcome, Outcome]) -> None:
    """A TLS policy edit applies to the next connection, as the toolkit reads the file for each handshake."""
    answers = serve_and_ask(pki, first, client, reload_to(pki, second))
    assert (*answers[0].outcomes, *answers[1].outcomes) == outcomes


# -- TestTLSConfigIsEnabled -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "enabled"),
    [
        pytest.param(
            "  min_version: TLS12\n  prefer_server_cipher_suites: true\n", False, id="only non-enabling fields set"
        ),
        pytest.param(
            "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n"
            "  max_version: TLS13\n  client_allowed_sans: [client.example]\n",
            False,
            id="other non-enabling fields",
        ),
        pytest.param('  cert_file: "server.crt"\n  key_file: "server.key"\n', True, id="cert_file and key_file set"),
        pytest.param(
            "  client_ca_file: client_ca.pem\n", "missing one of cert or cert_file", id="only client CA file set"
        ),
        pytest.param(
            "  client_auth_type: RequireAndVerifyClientCert\n",
            "missing one of cert or cert_file",
            id="only client auth type set",
        ),
        pytest.param(
            '  cert_file: ""\n  key_file: "server.key"\n',
            "missing one of cert or cert_file",
            id="invalid config yml (cert path empty)",
        ),
        pytest.param(
            '  cert_file: "server.crt"\n  key_file: ""\n',
            "missing one of key or key_file",
            id="invalid config yml (key path empty)",
        ),
        pytest.param(
            "  cert_file:\n  key_file:\n",
            "missing one of cert or cert_file",
            id="cert_file and key_file written but empty still ask for TLS (where Go serves plain HTTP)",
        ),
    ],
)
def test_tls_config_is_enabled(pki: Pki, settings: str, enabled: bool | str) -> None:
    """Only a certificate, key, client CA or client_auth_type turns TLS on; other settings alone leave the
    endpoint on plain HTTP, said at warn; TLS asked for without a certificate is a start-up error."""
    path = pki.directory / "enabled.yml"
    path.write_text("tls_server_config:\n" + settings)
    if isinstance(enabled, str):
        with pytest.raises(WebConfigError, match=enabled):
            Security.from_file(str(path))
        return
    security = Security.from_file(str(path))
    assert security.tls_enabled is enabled
    warned = any("serving plain HTTP" in warning for warning in config_warnings(security.config))
    assert warned is not enabled
    if not enabled:
        before, _ = serve_and_ask(pki, "tls_server_config:\n" + settings, Client(tls=False))
        assert before.outcomes == [200]


# -- TestYAMLFiles --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cause", "line"),
    [
        pytest.param(
            'tls_server_config:\n  cert_filse: "server.crt"\n',
            'unknown key "cert_filse"',
            2,
            id="invalid config yml (invalid key)",
        ),
        pytest.param("hWkNKCp3fvIx3jKnsaBI\nTuEjdwNS8A2vYdFbiKqr\n", "must be a mapping", 1, id="invalid structure"),
        pytest.param(
            'tls_server_config:\n  cert_file: ""\n  key_file: ""\n  client_auth_type: "x"\n',
            "invalid ClientAuth: x",
            4,
            id="invalid config yml (cert path and key path empty, invalid ClientAuth)",
        ),
        pytest.param(
            TLS.replace("server.crt", "somefile.crt"),
            "No such file",
            0,
            id="invalid config yml (cert path invalid)",
        ),
        pytest.param(
            TLS.replace("server.key", "somefile.key"), "No such file", 0, id="invalid config yml (key path invalid)"
        ),
        pytest.param(
            TLS + '  client_ca_file: "/dev/null"\n',
            "client CA's have been configured without a Client Auth Policy",
            2,
            id="invalid config yml (invalid ClientAuth)",
        ),
        pytest.param(
            TLS + '  client_auth_type: "RequireAndVerifyClientCert"\n  client_ca_file: "somefile"\n',
            "No such file",
            0,
            id="invalid config yml (invalid ClientCAs filepath)",
        ),
        pytest.param(
            TLS + "basic_auth_users:\n  john: doe\n",
            "hashedSecret too short to be a bcrypted password",
            5,
            id="invalid config yml (invalid user list)",
        ),
        pytest.param(
            TLS + "basic_auth_users:\n  john: $2y$99$" + "a" * 53 + "\n",
            "cost 99 is outside allowed range (4,31)",
            5,
            id="a cost bcrypt refuses",
        ),
        pytest.param(
            TLS + "basic_auth_users:\n  john: x2y$10$" + "a" * 53 + "\n",
            "bcrypt hashes must start with '$'",
            5,
            id="a hash without bcrypt's prefix",
        ),
        pytest.param(
            NO_AUTH_GOOD + "  cipher_suites:\n  - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048\n",
            "unknown cipher",
            6,
            id="invalid config yml (bad cipher)",
        ),
        pytest.param(
            NO_AUTH_GOOD + "  cipher_suites:\n  - TLS_RSA_WITH_RC4_128_SHA\n",
            "unknown cipher",
            6,
            id="an insecure cipher Go does not offer",
        ),
        pytest.param(
            NO_AUTH_GOOD + "  curve_preferences:\n  - CurveP257\n",
            "unknown curve",
            6,
            id="invalid config yml (bad curves)",
        ),
        pytest.param(
            NO_AUTH_GOOD + "  min_version: TLS111\n",
            "unknown TLS version",
            5,
            id="invalid config yml (bad TLS version)",
        ),
        pytest.param(
            "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
            "invalid value for X-Content-Type-Options",
            3,
            id="invalid X-Content-Type-Options headers config",
        ),
        pytest.param(
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "invalid value for X-Frame-Options",
            3,
            id="invalid X-Frame-Options headers config",
        ),
        pytest.param(
            "http_server_config:\n  headers:\n    Content-Type: foo\n",
            'HTTP header "Content-Type" can not be configured',
            3,
            id="HTTP header that can not be overridden",
        ),
    ],
)
def test_yaml_files(pki: Pki, text: str, cause: str, line: int) -> None:
    """A start-up error says the toolkit's cause, in its words, with the file, and the line where it has one."""
    path = pki.directory / "bad.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as raised:
        Security.from_file(str(path))
    message = str(raised.value)
    assert cause in message
    assert str(path) in message
    if line:
        assert f"line {line}: " in message


def test_yaml_files_empty_config_is_refused_where_the_toolkit_serves_plain_http(pki: Pki) -> None:
    """TestYAMLFiles' ``empty config yml`` is valid for the toolkit; here it is a start-up error
    (docs/security.md, "The web config file"): empty is more often a half-written file than a wish."""
    path = pki.directory / "empty.yml"
    path.write_text("")
    with pytest.raises(WebConfigError, match="the web config file is empty"):
        Security.from_file(str(path))
