"""``--web.config.file``: TLS, basic auth, response headers and rate limiting, in exporter-toolkit's format.

The file is the one every Prometheus exporter reads (``web-config.yml``), so an operator can reuse it
as is. Parsing is strict, as exporter-toolkit's is: an unknown or duplicate key, a value of the wrong
type, an unreadable file or a value Python's ``ssl`` cannot honour stops the exporter at startup with a
message naming the line and key path, rather than serving with less protection than was asked for. A
string setting is its text as written (``X-XSS-Protection: 0`` is the header ``0``), as Go's yaml reads
it. Settings that only tune TLS (a curve list longer than Python can pin, HTTP/2) are reported as warnings.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
from nvidia_gpu_exporter.httpserver.bcrypthash import go_refusal, well_formed
from nvidia_gpu_exporter.support.files import read_regular_file, refuse_special_file
from nvidia_gpu_exporter.support.sslgate import ssl_kept_out

if TYPE_CHECKING:
    import ssl

    from nvidia_gpu_exporter.support.strictyaml import YamlNode

log = logging.getLogger(__name__)

# Go's names for the ``ssl.TLSVersion`` members, oldest first (looked up when TLS is served: ``ssl`` is imported
# only then).
TLS_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}

# Go's secure suites (crypto/tls.CipherSuites) by their Go name, as OpenSSL names them.
GO_CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# Without cipher_suites, TLS 1.2 offers what Go offers: crypto/tls's defaultCipherSuites (Go 1.22 and later),
# in its preference order. Go leaves out the CBC-SHA256 suites, RSA key exchange and 3DES; it keeps the
# ECDHE CBC-SHA ones, which Python's own default list drops.
GO_DEFAULT_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
)
# TLS 1.3 suites are not configurable, in Go as in OpenSSL's cipher string: accepted and ignored.
GO_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
ALLOWED_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)
_HEADER_VALUES = {"X-Frame-Options": ("deny", "sameorigin"), "X-Content-Type-Options": ("nosniff",)}
_TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)


# The largest web config file read (at startup and at each reload): far above any real one (a thousand users
# take about 70 KiB), and small enough that reading and parsing it stays well within a reload's timeout.
MAX_WEB_CONFIG_BYTES = 1024 * 1024


class WebConfigError(ValueError):
    """The web config file cannot be used; the message names the file and key."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert: str = ""
    key: str = ""
    client_ca: str = ""
    cert_file: str = ""
    key_file: str = ""
    client_auth_type: str = "NoClientCert"
    client_ca_file: str = ""
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()
    # Where each setting was written (its line), so that a file that fails to load is named with its key and line.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Token bucket: one request per ``interval_seconds``, bursts of ``burst``; a burst of 0 lets nothing through,
    as in Go's ``golang.org/x/time/rate`` that exporter-toolkit uses."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    tls: TlsSettings | None = None
    http2: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth_users: Mapping[str, str] = field(default_factory=dict)
    rate_limit: RateLimit | None = None
    tls_tuning_only: tuple[str, ...] = ()  # tls_server_config's keys when none of them turns TLS on
    source: str = ""
    base_dir: str = "."


TOP_LEVEL_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")


def _strings(node: YamlNode) -> tuple[str, ...]:
    return tuple(item.text() for item in node.items())


# The settings that turn TLS on, as exporter-toolkit's TLSConfig.IsEnabled says; the others only tune it.
_TLS_ENABLING_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type")


def _parse_tls(node: YamlNode) -> TlsSettings | None:
    """``tls_server_config``; None (plain HTTP) when no setting in it turns TLS on. Unset (null or blank)
    settings keep their defaults.

    As in exporter-toolkit, only a certificate, key, client CA or ``client_auth_type`` turns TLS on: a block
    of tuning alone (``min_version``...) leaves plain HTTP (said at warn). Unlike it, one of those keys written
    with an empty value still asks for TLS, and is refused for the missing certificate: better refused than
    served in the clear.
    """
    entries = node.mapping(_TLS_KEYS)
    values: dict[str, Any] = {}
    for name, value in entries.items():
        if name in ("client_allowed_sans", "cipher_suites", "curve_preferences"):
            values[name] = _strings(value)
        elif name == "prefer_server_cipher_suites":
            values[name] = value.boolean()
        elif text := value.text():
            values[name] = text
    settings = TlsSettings(**values, lines={name: value.line for name, value in entries.items()})

    def at(name: str) -> YamlNode:
        return entries.get(name, node)

    auth = settings.client_auth_type
    if auth not in CLIENT_AUTH_TYPES:
        raise at("client_auth_type").fail(f"invalid ClientAuth: {auth} (one of {', '.join(CLIENT_AUTH_TYPES)})")
    for name in ("min_version", "max_version"):
        version = getattr(settings, name)
        if version not in TLS_VERSIONS:
            raise at(name).fail(f"unknown TLS version: {version} (one of {', '.join(TLS_VERSIONS)})")
    for suite in settings.cipher_suites:
        if suite not in GO_CIPHER_SUITES and suite not in GO_TLS13_SUITES:
            raise at("cipher_suites").fail(f"unknown cipher: {suite} (not one of Go's secure suites)")
    for curve in settings.curve_preferences:
        if curve not in GO_CURVES:
            raise at("curve_preferences").fail(f"unknown curve: {curve} (one of {', '.join(GO_CURVES)})")
    if not any(key.written in _TLS_ENABLING_KEYS for key, _ in node.pairs()):  # written, even null or blank
        return None
    if not (settings.cert or settings.cert_file):
        raise node.fail("missing one of cert or cert_file")
    if not (settings.key or settings.key_file):
        raise node.fail("missing one of key or key_file")
    for one, other in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if getattr(settings, one) and getattr(settings, other):
            raise node.fail(f"{one} and {other} are mutually exclusive")
    if auth in ("RequestClientCert", "RequireAnyClientCert"):
        raise at("client_auth_type").fail(
            f"{auth} cannot be honoured: Python's ssl module always verifies the client certificates it accepts; "
            "use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
        )
    verifying = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if (settings.client_ca or settings.client_ca_file) and not verifying:
        raise node.fail(
            f"client CA's have been configured without a Client Auth Policy: client_auth_type {auth} does not "
            "verify clients (VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
        )
    if settings.client_allowed_sans and auth != "RequireAndVerifyClientCert":
        raise at("client_allowed_sans").fail("needs client_auth_type RequireAndVerifyClientCert")
    order = list(TLS_VERSIONS)
    if order.index(settings.min_version) > order.index(settings.max_version):
        raise node.fail(f"min_version {settings.min_version} is above max_version {settings.max_version}")
    return settings


def _parse_headers(node: YamlNode) -> dict[str, str]:
    headers: dict[str, str] = {}
    for key, _ in node.pairs():
        if key.written not in ALLOWED_HEADERS:
            raise key.fail(
                f"HTTP header {json.dumps(key.written)} can not be configured (one of {', '.join(ALLOWED_HEADERS)})"
            )
    for name, value in node.mapping(ALLOWED_HEADERS).items():
        text = value.text()
        if not text:
            continue  # blank means unset
        allowed = _HEADER_VALUES.get(name)
        if allowed and text.lower() not in allowed:
            raise value.fail(f"invalid value for {name}: {text!r} (one of {', '.join(allowed)})")
        if "\n" in text or "\r" in text:
            raise value.fail("must be one line")
        headers[name] = text
    return headers


def _parse_users(node: YamlNode) -> dict[str, str]:
    users: dict[str, str] = {}
    for user, hashed in node.pairs():
        text = hashed.text()
        cause = go_refusal(text.encode("utf-8"))  # the words exporter-toolkit refuses it with, if it does
        if not text.startswith(_BCRYPT_PREFIXES):
            raise hashed.fail(f"not a bcrypt hash (expected $2a$/$2b$/$2y$...){': ' + cause if cause else ''}")
        if not well_formed(text.encode("utf-8")):  # a user who could never log in is a typo, not a setting
            raise hashed.fail(
                "not a usable bcrypt hash (cost 04 to 31, then 53 characters of salt and digest)"
                + (f": {cause}" if cause else "")
            )
        users[user.written] = text
    return users


def _parse_rate_limit(node: YamlNode) -> RateLimit | None:
    """One request per ``interval``, bursts of ``burst``; no interval (or 0) means no limit, a burst of 0 (or none)
    refuses every request."""
    entries = node.mapping(("interval", "burst"))
    burst = 0
    if "burst" in entries:
        burst = entries["burst"].integer()
        if burst < 0:
            raise entries["burst"].fail(f"must be a non-negative integer, got {burst}")
    if "interval" not in entries:
        return None
    interval_node = entries["interval"]
    try:
        interval = parse_duration(interval_node.text())
    except DurationError as error:
        raise interval_node.fail(str(error)) from error
    if interval < 0:
        raise interval_node.fail("must not be negative")
    if interval == 0:
        return None
    return RateLimit(interval / 1e9, burst)


def parse_web_config(
    text: str, source: str = "<web config>", base_dir: str = ".", *, allow_empty: bool = True
) -> WebConfig:
    """Strictly parse web-config YAML; file names in it are relative to ``base_dir``.

    An empty document means plain HTTP without auth; ``allow_empty=False`` refuses it instead, for a file
    given explicitly, where empty is far more often a half-written file than a wish to open the endpoint.
    """
    # The YAML parser is loaded with the first web config: without --web.config.file it is never needed.
    from nvidia_gpu_exporter.support.strictyaml import StrictYamlError, load_yaml  # noqa: PLC0415

    try:
        root = load_yaml(text)
        if root is None or root.is_null:
            if not allow_empty:
                raise WebConfigError(
                    f"{source}: the web config file is empty; remove --web.config.file to serve without TLS and auth"
                )
            return WebConfig(source=source, base_dir=base_dir)
        entries = root.mapping(TOP_LEVEL_KEYS)
        values: dict[str, Any] = {}
        if "tls_server_config" in entries:
            values["tls"] = _parse_tls(entries["tls_server_config"])
            if values["tls"] is None:
                values["tls_tuning_only"] = tuple(key.written for key, _ in entries["tls_server_config"].pairs())
        if "http_server_config" in entries:
            http = entries["http_server_config"].mapping(("http2", "headers"))
            if "http2" in http:
                values["http2"] = http["http2"].boolean()
            if "headers" in http:
                values["headers"] = _parse_headers(http["headers"])
        if "basic_auth_users" in entries:
            values["basic_auth_users"] = _parse_users(entries["basic_auth_users"])
        if "rate_limit" in entries:
            values["rate_limit"] = _parse_rate_limit(entries["rate_limit"])
    except StrictYamlError as error:
        raise WebConfigError(f"{source}: {error}") from None
    return WebConfig(**values, source=source, base_dir=base_dir)


def load_web_config(path: str) -> WebConfig:
    """Read and parse the file; unreadable files are a startup error.

    Only a regular file of at most :data:`MAX_WEB_CONFIG_BYTES` is read (``support/files.py``): a FIFO put in its
    place would block the reader for ever, a link to /dev/zero would never end.
    """
    try:
        text = read_regular_file(path, MAX_WEB_CONFIG_BYTES).decode("utf-8")
    except OSError as error:
        raise WebConfigError(f"cannot read web config file {path!r}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise WebConfigError(f"cannot read web config file {path!r}: {error}") from error
    config = parse_web_config(text, path, os.path.dirname(os.path.abspath(path)), allow_empty=False)
    # Certificates and keys must load now, not at the first handshake; where ``ssl`` is kept out (a start
    # without TLS, reloading a file that turned it on) they are loaded by the restart that serves TLS.
    if config.tls is not None and not ssl_kept_out():
        for key, name in tls_files(config):  # ssl opens them itself, and would block on a FIFO: refused first
            try:
                refuse_special_file(name)
            except OSError as error:
                raise WebConfigError(f"{_where(config, key)}: {name}: {error.strerror}") from error
        build_ssl_context(config)
    return config


def resolve_path(config: WebConfig, name: str) -> str:
    return name if os.path.isabs(name) else os.path.join(config.base_dir, name)


def tls_files(config: WebConfig) -> list[tuple[str, str]]:
    """The files ``tls_server_config`` names: (its key, the path resolved)."""
    tls = config.tls
    if tls is None:
        return []
    named = (("cert_file", tls.cert_file), ("key_file", tls.key_file), ("client_ca_file", tls.client_ca_file))
    return [(key, resolve_path(config, name)) for key, name in named if name]


# The most of a certificate, key or CA file read to say what is wrong with it (a CA bundle is a few hundred KiB).
MAX_PEM_BYTES = 4 * 1024 * 1024
_PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"
_PEM_PRIVATE_KEY = "PRIVATE KEY-----"
_PEM_ENCRYPTED = ("-----BEGIN ENCRYPTED PRIVATE KEY-----", "Proc-Type: 4,ENCRYPTED")


class _EncryptedKey(Exception):
    """The key asked for a passphrase: the web config has none to give (as in exporter-toolkit)."""


def _no_passphrase() -> str:
    """``ssl``'s password callback: without one OpenSSL would prompt on the terminal, holding startup."""
    raise _EncryptedKey


def _where(config: WebConfig, key: str) -> str:
    """``file: line N: tls_server_config.key``, the shape of every other web config error."""
    assert config.tls is not None
    line = config.tls.lines.get(key)
    return f"{config.source}: {f'line {line}: ' if line else ''}tls_server_config.{key}"


def _pem_text(config: WebConfig, key: str) -> tuple[str, str, str]:
    """A PEM setting's text, how to name it ("" inline, else the resolved path) and why it cannot be read ("")."""
    assert config.tls is not None
    name = getattr(config.tls, key)
    if not key.endswith("_file"):
        return name, "", ""
    path = resolve_path(config, name)
    try:
        return read_regular_file(path, MAX_PEM_BYTES).decode("utf-8", "replace"), path, ""
    except OSError as error:
        return "", path, f"cannot read {path}: {error.strerror or error}"


def _certificate_problem(text: str) -> str:
    if _PEM_CERTIFICATE in text:
        return ""
    if _PEM_PRIVATE_KEY in text:
        return "holds a private key, not a certificate (are cert_file and key_file swapped?)"
    return "holds no PEM certificate"


def _key_problem(text: str) -> str:
    if any(marker in text for marker in _PEM_ENCRYPTED):
        return "is encrypted, and the web config has no passphrase: give the key unencrypted"
    if _PEM_PRIVATE_KEY in text:
        return ""
    return "holds a certificate, not a private key" if _PEM_CERTIFICATE in text else "holds no PEM private key"


def _chain_problem(config: WebConfig, error: BaseException) -> str:
    """Why the certificate and key did not load, naming the setting, its line and the file: what ``ssl`` says
    (``[SSL] PEM lib (_ssl.c:3905)``, ``[Errno 2] No such file or directory``) names neither."""
    tls = config.tls
    assert tls is not None
    keys = ("cert_file" if tls.cert_file else "cert", "key_file" if tls.key_file else "key")
    texts = {key: _pem_text(config, key) for key in keys}
    for key in keys:
        if texts[key][2]:
            return f"{_where(config, key)}: {texts[key][2]}"
    for key, judge in zip(keys, (_certificate_problem, _key_problem), strict=True):
        text, path, _ = texts[key]
        if problem := judge(text):
            return f"{_where(config, key)}: {f'{path} ' if path else ''}{problem}"
    cert_name, key_name = (texts[key][1] or key for key in keys)
    if getattr(error, "reason", None) == "KEY_VALUES_MISMATCH":
        return f"{_where(config, keys[1])}: the key in {key_name} does not match the certificate in {cert_name}"
    return f"{config.source}: tls_server_config: cannot load the certificate {cert_name} and key {key_name}: {error}"


def _client_ca_problem(config: WebConfig, error: BaseException) -> str:
    """Why the client CA did not load, naming the setting, its line and the file."""
    assert config.tls is not None
    key = "client_ca_file" if config.tls.client_ca_file else "client_ca"
    text, path, unreadable = _pem_text(config, key)
    if unreadable:
        return f"{_where(config, key)}: {unreadable}"
    if _PEM_CERTIFICATE not in text:
        return f"{_where(config, key)}: {f'{path} ' if path else ''}holds no PEM certificate"
    return f"{_where(config, key)}: cannot load the client CA{f' {path}' if path else ''}: {error}"


def load_chain(context: ssl.SSLContext, config: WebConfig, tls: TlsSettings) -> None:
    """Load the server certificate and key, from files or inline PEM.

    ``ssl`` loads a chain only from files: inline PEM goes to an anonymous in-memory file (``memfd``, read
    through ``/proc/self/fd``) where Linux has one, so a read-only root file system works; elsewhere to a
    private temporary file, deleted at once.
    """
    if tls.cert_file and tls.key_file:
        context.load_cert_chain(
            resolve_path(config, tls.cert_file), resolve_path(config, tls.key_file), password=_no_passphrase
        )
        return
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        opened: list[int] = []
        try:
            paths = []
            for name, pem in ((tls.cert_file, tls.cert), (tls.key_file, tls.key)):
                if name:
                    paths.append(resolve_path(config, name))
                    continue
                descriptor = os.memfd_create("nvidia-gpu-exporter-tls", os.MFD_CLOEXEC)
                opened.append(descriptor)
                os.write(descriptor, pem.encode("utf-8"))
                paths.append(f"/proc/self/fd/{descriptor}")
            context.load_cert_chain(paths[0], paths[1], password=_no_passphrase)
        finally:
            for descriptor in opened:
                os.close(descriptor)
        return
    import tempfile  # noqa: PLC0415 - where there is no memfd only (0.9 MiB of imports: issue 16)

    with tempfile.TemporaryDirectory(prefix="nvidia-gpu-exporter-tls-") as directory:
        cert_path = resolve_path(config, tls.cert_file) if tls.cert_file else os.path.join(directory, "cert.pem")
        key_path = resolve_path(config, tls.key_file) if tls.key_file else os.path.join(directory, "key.pem")
        for path, pem in ((cert_path, tls.cert), (key_path, tls.key)):
            if pem:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(pem)
        context.load_cert_chain(cert_path, key_path, password=_no_passphrase)


def build_ssl_context(config: WebConfig) -> ssl.SSLContext:
    """An ``SSLContext`` honouring ``tls_server_config``; raises :class:`WebConfigError` on what cannot load."""
    import ssl  # noqa: PLC0415 - only TLS needs it (issue 16: support/sslgate.py)

    tls = config.tls
    assert tls is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        load_chain(context, config, tls)
    except (OSError, _EncryptedKey) as error:  # ssl.SSLError is an OSError
        raise WebConfigError(_chain_problem(config, error)) from error
    if tls.client_auth_type != "NoClientCert":
        try:
            if tls.client_ca_file:
                context.load_verify_locations(cafile=resolve_path(config, tls.client_ca_file))
            elif tls.client_ca:
                context.load_verify_locations(cadata=tls.client_ca)
            else:  # no client CA: Go verifies against the system's roots, and so does OpenSSL's default store
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except OSError as error:
            raise WebConfigError(_client_ca_problem(config, error)) from error
    set_policy(context, config)
    return context


def set_policy(context: ssl.SSLContext, config: WebConfig) -> None:
    """Put ``tls_server_config``'s policy on ``context``: versions, client-certificate mode, suites, their order
    and the curve.

    These are what OpenSSL copies from the listening context into each connection as it is accepted, so a
    reload sets them on the listening context itself for the next connections; the certificate and the
    trust store instead come from the context a handshake switches to (security.py).
    """
    import ssl  # noqa: PLC0415 - only TLS needs it

    tls = config.tls
    assert tls is not None
    context.minimum_version = ssl.TLSVersion[TLS_VERSIONS[tls.min_version]]
    context.maximum_version = ssl.TLSVersion[TLS_VERSIONS[tls.max_version]]
    context.verify_mode = {
        "NoClientCert": ssl.CERT_NONE,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }[tls.client_auth_type]
    suites = [GO_CIPHER_SUITES[suite] for suite in tls.cipher_suites if suite in GO_CIPHER_SUITES]
    try:
        context.set_ciphers(":".join(suites or (GO_CIPHER_SUITES[suite] for suite in GO_DEFAULT_CIPHER_SUITES)))
    except ssl.SSLError as error:
        raise WebConfigError(f"{config.source}: tls_server_config.cipher_suites: {error}") from error
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:  # Python sets it on every server context: false must clear it, so the client's order wins
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        curve = GO_CURVES[tls.curve_preferences[0]]
        try:
            context.set_ecdh_curve(curve)
        except (ValueError, ssl.SSLError):
            log.warning(
                "curve_preferences: this Python cannot pin the curve; OpenSSL's defaults apply",
                extra={"curve": tls.curve_preferences[0]},
            )
        else:
            if len(tls.curve_preferences) > 1:
                log.warning(
                    "curve_preferences: Python's ssl pins a single curve; only the first one is used",
                    extra={"curve": tls.curve_preferences[0]},
                )


def config_warnings(config: WebConfig) -> list[str]:
    """What the config asks for that this server cannot do, said once at startup."""
    warnings = []
    if config.http2:
        warnings.append("http_server_config.http2: HTTP/2 is not supported; serving HTTP/1.1")
    if config.tls_tuning_only:
        warnings.append(
            f"tls_server_config has {', '.join(config.tls_tuning_only)} but no cert, key, client CA or "
            "client_auth_type, so it does not turn TLS on: serving plain HTTP, as exporter-toolkit does"
        )
    if config.rate_limit is not None and config.rate_limit.burst == 0:
        warnings.append(
            "rate_limit.burst is 0: every request is refused with 429 Too Many Requests, as exporter-toolkit's "
            "limiter does; set a burst of 1 or more to let requests through"
        )
    tls = config.tls
    if tls is not None and tls.min_version in ("TLS10", "TLS11"):
        import ssl  # noqa: PLC0415 - only TLS needs it

        level = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).security_level
        if level >= 1:  # OpenSSL 3 allows TLS 1.0 and 1.1 only at security level 0
            warnings.append(
                f"tls_server_config.min_version {tls.min_version}: this OpenSSL (security level {level}) refuses "
                "TLS 1.0 and 1.1 handshakes, so clients need TLS 1.2 or newer"
            )
    return warnings


def fingerprint(path: str, config: WebConfig | None) -> str:
    """Changes whenever the config file or a file it references changes (for reloading)."""
    import hashlib  # noqa: PLC0415 - with a config file only: it maps OpenSSL's libcrypto (3.7 MiB, issue 16)

    digest = hashlib.sha256()
    names = [path]
    if config is not None:
        names += [name for _, name in tls_files(config)]
    for name in names:
        try:
            status = os.stat(name)
        except OSError:
            digest.update(f"{name}:missing".encode())
        else:
            digest.update(f"{name}:{status.st_mtime_ns}:{status.st_size}".encode())
    return digest.hexdigest()
