"""--web.config.file parsing: exporter-toolkit's format, strict, with clear messages naming the key."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import bcrypt
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter.httpserver.auth import BasicAuthenticator, parse_basic_authorization
from nvidia_gpu_exporter.httpserver.config import (
    GO_CIPHER_SUITES,
    WebConfigError,
    build_ssl_context,
    config_warnings,
    load_web_config,
    parse_web_config,
)
from nvidia_gpu_exporter.httpserver.http import Request, Response, make_request
from nvidia_gpu_exporter.httpserver.security import Security, TokenBucket


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(directory / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return directory


TLS = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus: 1\n", 'line 1: top level: unknown key "bogus"'),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  colour: red\n",
            'line 4: tls_server_config: unknown key "colour"',
        ),
        ("tls_server_config:\n  key_file: b\n", "missing one of cert or cert_file"),
        ("tls_server_config:\n  cert_file: a\n", "missing one of key or key_file"),
        (TLS + "  client_auth_type: Sometimes\n", "client_auth_type: invalid ClientAuth: Sometimes"),
        (TLS + "  client_auth_type: RequireAnyClientCert\n", "cannot be honoured"),
        (TLS + "  client_auth_type: RequestClientCert\n", "cannot be honoured"),
        (TLS + "  client_ca_file: ca.pem\n", "does not verify clients"),
        (TLS + "  client_allowed_sans: [a]\n", "needs client_auth_type RequireAndVerifyClientCert"),
        (TLS + "  min_version: SSL3\n", "min_version: unknown TLS version: SSL3"),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version TLS13 is above max_version TLS12"),
        (TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher: TLS_RSA_WITH_RC4_128_SHA"),
        (TLS + "  curve_preferences: [P-256]\n", "unknown curve: P-256"),
        (TLS + "  prefer_server_cipher_suites: yes please\n", "must be true or false"),
        ("http_server_config:\n  headers:\n    X-Powered-By: me\n", 'HTTP header "X-Powered-By" can not be configured'),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "invalid value for X-Frame-Options: 'allow'"),
        ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", "for X-Content-Type-Options"),
        ("http_server_config:\n  http2: maybe\n", "http2: must be true or false"),
        ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice: not a bcrypt hash"),
        ("rate_limit:\n  interval: 10\n", "rate_limit.interval: time: missing unit"),
        ("rate_limit:\n  interval: 1s\n  burst: -1\n", "rate_limit.burst: must be a non-negative integer"),
        ("- a list\n", "must be a mapping"),
        ("tls_server_config: [\n", "invalid YAML"),
    ],
    ids=lambda value: value if len(value) < 60 else value[:60],
)
def test_invalid_config_is_refused_with_the_key_named(text: str, message: str) -> None:
    with pytest.raises(WebConfigError, match=None) as raised:
        parse_web_config(text, "web.yml")
    assert message in str(raised.value)
    assert str(raised.value).startswith("web.yml")


HASH = "$2y$04$" + "a" * 53


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            f"basic_auth_users:\n  alice: {HASH}\nbasic_auth_users:\n  bob: {HASH}\n",
            'line 3: top level: duplicate key "basic_auth_users" (first at line 1)',
            id="duplicate-top-level-key",
        ),
        pytest.param(
            f"basic_auth_users:\n  alice: {HASH}\n  alice: {HASH}\n",
            'line 3: basic_auth_users: duplicate key "alice" (first at line 2)',
            id="duplicate-user",
        ),
        pytest.param(
            TLS + "  cert_file: other.pem\n",
            'line 4: tls_server_config: duplicate key "cert_file" (first at line 2)',
            id="duplicate-nested-key",
        ),
        pytest.param(
            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Frame-Options: sameorigin\n",
            'line 4: http_server_config.headers: duplicate key "X-Frame-Options" (first at line 3)',
            id="duplicate-header",
        ),
        pytest.param(
            "rate_limit: {interval: 1s, interval: 2s}\n",
            'line 1: rate_limit: duplicate key "interval" (first at line 1)',
            id="duplicate-key-in-flow-mapping",
        ),
    ],
)
def test_duplicate_keys_are_refused_at_any_depth(text: str, message: str) -> None:
    with pytest.raises(WebConfigError) as raised:
        parse_web_config(text, "web.yml")
    assert str(raised.value) == f"web.yml: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "basic_auth_user:\n  alice: x\n",
            'line 1: top level: unknown key "basic_auth_user", want one of tls_server_config, http_server_config, '
            "basic_auth_users, rate_limit",
            id="unknown-top-level-key",
        ),
        pytest.param(
            TLS + "  colour: red\n",
            'line 4: tls_server_config: unknown key "colour", want one of cert, key, client_ca',
            id="unknown-tls-key",
        ),
        pytest.param(
            "rate_limit:\n  interval: 1s\n  brust: 2\n",
            'line 3: rate_limit: unknown key "brust", want one of interval, burst',
            id="unknown-rate-limit-key",
        ),
        pytest.param(
            "tls_server_config:\n  cert_file:\n  key_file:\n",
            "line 2: tls_server_config: missing one of cert or cert_file",
            id="null-tls-settings-still-ask-for-tls",
        ),
        pytest.param(
            "tls_server_config: [cert.pem]\n",
            "line 1: tls_server_config: must be a mapping, got a list",
            id="tls-not-a-mapping",
        ),
        pytest.param(
            TLS + "  cipher_suites: TLS_AES_128_GCM_SHA256\n",
            'line 4: tls_server_config.cipher_suites: must be a list, got "TLS_AES_128_GCM_SHA256"',
            id="suites-not-a-list",
        ),
        pytest.param(
            TLS + "  curve_preferences: [X25519, [CurveP256]]\n",
            "line 4: tls_server_config.curve_preferences[1]: must be a string, got a list",
            id="list-item-not-a-string",
        ),
        pytest.param(
            TLS + "  prefer_server_cipher_suites: 1\n",
            'line 4: tls_server_config.prefer_server_cipher_suites: must be true or false, got "1"',
            id="bool-not-a-bool",
        ),
        pytest.param(
            "basic_auth_users: [alice]\n",
            "line 1: basic_auth_users: must be a mapping, got a list",
            id="users-not-a-mapping",
        ),
        pytest.param(
            "basic_auth_users:\n  alice:\n",
            "line 2: basic_auth_users.alice: must be a string, got null",
            id="user-without-hash",
        ),
        pytest.param(
            "http_server_config:\n  headers:\n    X-Frame-Options: [deny]\n",
            "line 3: http_server_config.headers.X-Frame-Options: must be a string, got a list",
            id="header-not-a-string",
        ),
        pytest.param(
            "http_server_config:\n  http2: maybe\n",
            'line 2: http_server_config.http2: must be true or false, got "maybe"',
            id="http2-not-a-bool",
        ),
        pytest.param(
            "rate_limit:\n  interval: 1s\n  burst: many\n",
            'line 3: rate_limit.burst: must be an integer, got "many"',
            id="burst-not-an-integer",
        ),
        pytest.param(
            "rate_limit:\n  interval: [1s]\n",
            "line 2: rate_limit.interval: must be a string, got a list",
            id="interval-not-a-string",
        ),
    ],
)
def test_unknown_keys_and_wrong_types_name_the_key_path_and_line(text: str, message: str) -> None:
    with pytest.raises(WebConfigError) as raised:
        parse_web_config(text, "web.yml")
    assert str(raised.value).startswith(f"web.yml: {message}")


@pytest.mark.parametrize(
    ("text", "users", "headers"),
    [
        pytest.param(
            "http_server_config:\n  headers:\n    X-XSS-Protection: 0\n",
            {},
            {"X-XSS-Protection": "0"},
            id="number-header-read-as-written",
        ),
        pytest.param(f"basic_auth_users:\n  1234: {HASH}\n", {"1234": HASH}, {}, id="number-user-name"),
        pytest.param(
            f"basic_auth_users:\n  ? !!str alice\n  : {HASH}\n", {"alice": HASH}, {}, id="explicit-string-tag"
        ),
        pytest.param(
            f"http_server_config:\n  headers: &h\n    X-Frame-Options: deny\nbasic_auth_users: {{bob: {HASH}}}\n",
            {"bob": HASH},
            {"X-Frame-Options": "deny"},
            id="anchor",
        ),
    ],
)
def test_scalars_are_read_as_written(text: str, users: dict[str, str], headers: dict[str, str]) -> None:
    config = parse_web_config(text, "web.yml")
    assert (dict(config.basic_auth_users), dict(config.headers)) == (users, headers)


def test_empty_file_means_plain_http_without_auth() -> None:
    config = parse_web_config("", "web.yml")
    assert config.tls is None
    assert config.basic_auth_users == {}
    assert config.headers == {}


def test_blank_header_value_means_unset() -> None:
    config = parse_web_config("http_server_config:\n  headers:\n    X-XSS-Protection: ''\n    X-Frame-Options: DENY\n")
    assert dict(config.headers) == {"X-Frame-Options": "DENY"}


def test_unreadable_file_is_a_startup_error(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read web config file"):
        load_web_config(str(tmp_path / "absent.yml"))


def test_missing_certificate_fails_at_load_not_at_first_handshake(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text(TLS)
    with pytest.raises(WebConfigError, match=r"tls_server_config\.cert_file: cannot read"):
        load_web_config(str(tmp_path / "web.yml"))


@pytest.fixture(scope="module")
def bad_pki(pki: Path) -> Path:
    """Next to the good pair: a key of another certificate, an encrypted key and a file that is not PEM."""
    other = trustme.CA().issue_cert("localhost")
    other.private_key_pem.write_to_path(str(pki / "other-key.pem"))
    key = serialization.load_pem_private_key((pki / "key.pem").read_bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (pki / "encrypted-key.pem").write_bytes(encrypted)
    (pki / "junk.pem").write_text("not a certificate\n")
    return pki


CLIENT_CA = "  client_auth_type: RequireAndVerifyClientCert\n"


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        pytest.param(
            "  cert_file: absent.pem\n  key_file: key.pem\n",
            "line 2: tls_server_config.cert_file: cannot read {pki}/absent.pem: No such file or directory",
            id="missing-cert",
        ),
        pytest.param(
            "  cert_file: cert.pem\n  key_file: absent.pem\n",
            "line 3: tls_server_config.key_file: cannot read {pki}/absent.pem: No such file or directory",
            id="missing-key",
        ),
        pytest.param(
            "  cert_file: key.pem\n  key_file: cert.pem\n",
            "line 2: tls_server_config.cert_file: {pki}/key.pem holds a private key, not a certificate "
            "(are cert_file and key_file swapped?)",
            id="swapped",
        ),
        pytest.param(
            "  cert_file: cert.pem\n  key_file: cert.pem\n",
            "line 3: tls_server_config.key_file: {pki}/cert.pem holds a certificate, not a private key",
            id="certificate-as-key",
        ),
        pytest.param(
            "  cert_file: junk.pem\n  key_file: key.pem\n",
            "line 2: tls_server_config.cert_file: {pki}/junk.pem holds no PEM certificate",
            id="cert-not-pem",
        ),
        pytest.param(
            "  cert_file: cert.pem\n  key_file: junk.pem\n",
            "line 3: tls_server_config.key_file: {pki}/junk.pem holds no PEM private key",
            id="key-not-pem",
        ),
        pytest.param(
            "  cert_file: cert.pem\n  key_file: other-key.pem\n",
            "line 3: tls_server_config.key_file: the key in {pki}/other-key.pem does not match the certificate "
            "in {pki}/cert.pem",
            id="key-of-another-certificate",
        ),
        pytest.param(
            "  cert_file: cert.pem\n  key_file: encrypted-key.pem\n",
            "line 3: tls_server_config.key_file: {pki}/encrypted-key.pem is encrypted, and the web config has no "
            "passphrase: give the key unencrypted",
            id="encrypted-key",
        ),
        pytest.param(
            "  cert: not a certificate\n  key_file: key.pem\n",
            "line 2: tls_server_config.cert: holds no PEM certificate",
            id="inline-cert-not-pem",
        ),
        pytest.param(
            TLS.removeprefix("tls_server_config:\n") + CLIENT_CA + "  client_ca_file: absent.pem\n",
            "line 5: tls_server_config.client_ca_file: cannot read {pki}/absent.pem: No such file or directory",
            id="missing-client-ca",
        ),
        pytest.param(
            TLS.removeprefix("tls_server_config:\n") + CLIENT_CA + "  client_ca_file: junk.pem\n",
            "line 5: tls_server_config.client_ca_file: {pki}/junk.pem holds no PEM certificate",
            id="client-ca-not-pem",
        ),
        pytest.param(
            TLS.removeprefix("tls_server_config:\n") + CLIENT_CA + "  client_ca: junk\n",
            "line 5: tls_server_config.client_ca: holds no PEM certificate",
            id="inline-client-ca-not-pem",
        ),
    ],
)
def test_a_tls_file_that_cannot_load_is_named_with_its_key_and_line(bad_pki: Path, tls: str, message: str) -> None:
    """Which file, and what is wrong with it: not ssl's ``[SSL] PEM lib (_ssl.c:3905)`` or a bare ``[Errno 2]``."""
    path = bad_pki / "web.yml"
    path.write_text("tls_server_config:\n" + tls)
    with pytest.raises(WebConfigError) as raised:
        load_web_config(str(path))
    assert str(raised.value) == f"{path}: " + message.format(pki=bad_pki)


def test_file_names_are_relative_to_the_config_file(pki: Path) -> None:
    (pki / "web.yml").write_text(TLS)
    config = load_web_config(str(pki / "web.yml"))
    context = build_ssl_context(config)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(
    ("auth_type", "mode"),
    [("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL), ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED)],
    ids=["verify-if-given-is-optional", "require-and-verify-is-required"],
)
def test_client_auth_types_map_to_verify_modes(pki: Path, auth_type: str, mode: ssl.VerifyMode) -> None:
    (pki / "web.yml").write_text(TLS + f"  client_auth_type: {auth_type}\n  client_ca_file: ca.pem\n")
    assert build_ssl_context(load_web_config(str(pki / "web.yml"))).verify_mode == mode


def test_inline_certificate_and_key_load(pki: Path) -> None:
    cert = (pki / "cert.pem").read_text()
    key = (pki / "key.pem").read_text()

    def indent(pem: str) -> str:
        return "\n".join("    " + line for line in pem.strip().splitlines())

    text = f"tls_server_config:\n  cert: |\n{indent(cert)}\n  key: |\n{indent(key)}\n"
    assert build_ssl_context(parse_web_config(text)).minimum_version == ssl.TLSVersion.TLSv1_2


def test_go_cipher_suite_names_map_to_openssl_names(pki: Path) -> None:
    (pki / "web.yml").write_text(
        TLS + "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
    )
    context = build_ssl_context(load_web_config(str(pki / "web.yml")))
    names = {cipher["name"] for cipher in context.get_ciphers() if cipher["protocol"] == "TLSv1.2"}
    assert names == {GO_CIPHER_SUITES["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}


def test_http2_request_is_reported_as_not_supported() -> None:
    assert config_warnings(parse_web_config("http_server_config:\n  http2: true\n")) == [
        "http_server_config.http2: HTTP/2 is not supported; serving HTTP/1.1"
    ]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Basic YWxpY2U6c2VjcmV0", ("alice", "secret")),
        ("basic YWxpY2U6c2VjOnJldA==", ("alice", "sec:ret")),
        ("Bearer abc", None),
        ("Basic !!!", None),
        ("Basic YWxpY2U=", None),
        (None, None),
    ],
    ids=["basic", "password-with-colon", "other-scheme", "bad-base64", "no-colon", "absent"],
)
def test_parse_basic_authorization(header: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_basic_authorization(header) == expected


def test_bcrypt_runs_once_per_working_credentials_then_the_cache_answers() -> None:
    import asyncio

    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    authenticator = BasicAuthenticator({"alice": hashed})

    async def checks() -> list[bool]:
        results = [await authenticator.verify("alice", "secret") for _ in range(5)]
        results += [await authenticator.verify("alice", "wrong") for _ in range(3)]
        results.append(await authenticator.verify("mallory", "secret"))
        return results

    assert asyncio.run(checks()) == [True] * 5 + [False] * 3 + [False]
    # right once, then cached; wrong passwords are checked every time (never cached: a flood of them could
    # evict a working credential); the unknown user against the fixed fake hash.
    assert authenticator.bcrypt_checks == 1 + 3 + 1


def test_rate_limit_bucket_allows_bursts_then_one_per_interval() -> None:
    now = [0.0]
    config = parse_web_config("rate_limit:\n  interval: 1s\n  burst: 2\n")
    assert config.rate_limit is not None
    bucket = TokenBucket(config.rate_limit, clock=lambda: now[0])
    assert [bucket.take(), bucket.take(), bucket.take()] == [True, True, False]
    now[0] = 1.0
    assert [bucket.take(), bucket.take()] == [True, False]


@pytest.mark.parametrize("text", ["rate_limit:\n  interval: 1s\n  burst: 0\n", "rate_limit:\n  interval: 1s\n"])
def test_a_burst_of_zero_refuses_every_request_and_says_so_at_start(text: str) -> None:
    now = [0.0]
    config = parse_web_config(text)
    assert config.rate_limit is not None
    bucket = TokenBucket(config.rate_limit, clock=lambda: now[0])
    taken = []
    for second in range(3):
        now[0] = float(second * 10)
        taken.append(bucket.take())
    assert taken == [False, False, False]
    assert any("rate_limit.burst is 0: every request is refused" in warning for warning in config_warnings(config))


def test_zero_rate_limit_interval_disables_it() -> None:
    assert parse_web_config("rate_limit:\n  interval: 0s\n  burst: 5\n").rate_limit is None


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
_keys = st.sampled_from(
    [
        "tls_server_config",
        "http_server_config",
        "basic_auth_users",
        "rate_limit",
        "cert_file",
        "key_file",
        "client_auth_type",
        "min_version",
        "cipher_suites",
        "headers",
        "http2",
        "X-Frame-Options",
        "interval",
        "burst",
        "alice",
    ]
)
_documents = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4)
)


@settings(max_examples=300, deadline=None)
@given(document=_documents)
def test_web_config_loader_raises_only_its_own_error_on_any_structure(document: object) -> None:
    import yaml

    with contextlib.suppress(WebConfigError):
        parse_web_config(yaml.safe_dump(document), "fuzz.yml")


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_web_config_loader_raises_only_its_own_error_on_any_text(text: str) -> None:
    with contextlib.suppress(WebConfigError):
        parse_web_config(text, "fuzz.yml")


def test_changed_users_apply_after_a_reload_without_a_restart(tmp_path: Path) -> None:
    import asyncio
    import os

    from nvidia_gpu_exporter.httpserver.security import Security

    path = tmp_path / "web.yml"
    old = bcrypt.hashpw(b"old-password", bcrypt.gensalt(4)).decode()
    path.write_text(f"basic_auth_users:\n  alice: {old}\n")
    security = Security.from_file(str(path))
    assert security.authenticator is not None
    assert asyncio.run(security.authenticator.verify("alice", "old-password"))
    assert not security.reload_if_changed()  # nothing changed yet

    new = bcrypt.hashpw(b"new-password", bcrypt.gensalt(4)).decode()
    path.write_text(f"basic_auth_users:\n  alice: {new}\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert security.reload_if_changed()
    assert security.authenticator is not None
    assert asyncio.run(security.authenticator.verify("alice", "new-password"))
    assert not asyncio.run(security.authenticator.verify("alice", "old-password"))


def test_a_broken_edit_keeps_the_previous_settings(tmp_path: Path) -> None:
    import os

    from nvidia_gpu_exporter.httpserver.security import Security

    path = tmp_path / "web.yml"
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    security = Security.from_file(str(path))
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: allow-everything\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert not security.reload_if_changed()
    assert security.headers == {"X-Frame-Options": "deny"}


@pytest.mark.parametrize(
    ("config", "status", "body"),
    [
        ("rate_limit:\n  interval: 1h\n  burst: 0\n", 429, b"Too Many Requests\n"),
        (f"basic_auth_users:\n  prometheus: {HASH}\n", 401, b"Unauthorized\n"),
    ],
    ids=["rate-limited", "no-credentials"],
)
def test_refusals_are_answered_as_exporter_toolkit_answers_them(config: str, status: int, body: bytes) -> None:
    """exporter-toolkit refuses with ``http.Error``: its text and a newline, plain text, ``nosniff``."""

    async def served(_: Request) -> Response:
        return Response(200)

    response = asyncio.run(Security(config=parse_web_config(config)).middleware(make_request("GET", "/"), served))
    assert (response.status, response.joined()) == (status, body)
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
