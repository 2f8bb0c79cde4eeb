"""``--web.config.file``: TLS, basic auth, response headers and rate limiting, in exporter-toolkit's format.

The file is the one every Prometheus exporter reads (``web-config.yml``), so an operator can reuse it
as is. Parsing is strict: an unknown key, an unreadable file or a value Python's ``ssl`` cannot honour
stops the exporter at startup with a message naming the key, rather than serving with less protection
than was asked for. Settings that only tune TLS (a curve list longer than Python can pin, HTTP/2) are
reported as warnings.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration

log = logging.getLogger(__name__)

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

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


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Token bucket: one request per ``interval_seconds``, bursts of ``burst``."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    tls: TlsSettings | None = None
    http2: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    basic_auth_users: Mapping[str, str] = field(default_factory=dict)
    rate_limit: RateLimit | None = None
    source: str = ""
    base_dir: str = "."


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise WebConfigError(f"{path}: must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise WebConfigError(f"{path}: keys must be strings, got {key!r}")
    return value


def _unknown(keys: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in keys:
        if key not in allowed:
            prefix = f"{path}." if path else ""
            raise WebConfigError(f"{prefix}{key}: unknown key (allowed: {', '.join(allowed)})")


def _string(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WebConfigError(f"{path}: must be a string, got {value!r}")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WebConfigError(f"{path}: must be a list of strings")
    return tuple(value)


def _bool(value: Any, path: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise WebConfigError(f"{path}: must be true or false, got {value!r}")
    return value


def _parse_tls(raw: Mapping[str, Any]) -> TlsSettings:
    _unknown(raw, _TLS_KEYS, "tls_server_config")
    path = "tls_server_config"
    settings = TlsSettings(
        cert=_string(raw.get("cert"), f"{path}.cert"),
        key=_string(raw.get("key"), f"{path}.key"),
        client_ca=_string(raw.get("client_ca"), f"{path}.client_ca"),
        cert_file=_string(raw.get("cert_file"), f"{path}.cert_file"),
        key_file=_string(raw.get("key_file"), f"{path}.key_file"),
        client_auth_type=_string(raw.get("client_auth_type"), f"{path}.client_auth_type") or "NoClientCert",
        client_ca_file=_string(raw.get("client_ca_file"), f"{path}.client_ca_file"),
        client_allowed_sans=_strings(raw.get("client_allowed_sans"), f"{path}.client_allowed_sans"),
        min_version=_string(raw.get("min_version"), f"{path}.min_version") or "TLS12",
        max_version=_string(raw.get("max_version"), f"{path}.max_version") or "TLS13",
        cipher_suites=_strings(raw.get("cipher_suites"), f"{path}.cipher_suites"),
        prefer_server_cipher_suites=_bool(
            raw.get("prefer_server_cipher_suites"), f"{path}.prefer_server_cipher_suites", True
        ),
        curve_preferences=_strings(raw.get("curve_preferences"), f"{path}.curve_preferences"),
    )
    if bool(settings.cert) == bool(settings.cert_file):
        raise WebConfigError(f"{path}: exactly one of cert and cert_file is required")
    if bool(settings.key) == bool(settings.key_file):
        raise WebConfigError(f"{path}: exactly one of key and key_file is required")
    if settings.client_ca and settings.client_ca_file:
        raise WebConfigError(f"{path}: client_ca and client_ca_file are mutually exclusive")
    if settings.client_auth_type not in CLIENT_AUTH_TYPES:
        raise WebConfigError(
            f"{path}.client_auth_type: unknown {settings.client_auth_type!r} (one of {', '.join(CLIENT_AUTH_TYPES)})"
        )
    if settings.client_auth_type in ("RequestClientCert", "RequireAnyClientCert"):
        raise WebConfigError(
            f"{path}.client_auth_type: {settings.client_auth_type} cannot be honoured: Python's ssl module always "
            "verifies the client certificates it accepts; use VerifyClientCertIfGiven or "
            "RequireAndVerifyClientCert with client_ca_file"
        )
    verifying = settings.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if verifying and not (settings.client_ca or settings.client_ca_file):
        raise WebConfigError(f"{path}: client_auth_type {settings.client_auth_type} needs client_ca_file")
    if (settings.client_ca or settings.client_ca_file) and not verifying:
        raise WebConfigError(
            f"{path}: client CA given, but client_auth_type {settings.client_auth_type} does not verify clients"
        )
    if settings.client_allowed_sans and settings.client_auth_type != "RequireAndVerifyClientCert":
        raise WebConfigError(f"{path}.client_allowed_sans: needs client_auth_type RequireAndVerifyClientCert")
    for name in ("min_version", "max_version"):
        value = getattr(settings, name)
        if value not in TLS_VERSIONS:
            raise WebConfigError(f"{path}.{name}: unknown TLS version {value!r} (one of {', '.join(TLS_VERSIONS)})")
    if TLS_VERSIONS[settings.min_version] > TLS_VERSIONS[settings.max_version]:
        raise WebConfigError(f"{path}: min_version {settings.min_version} is above max_version {settings.max_version}")
    for suite in settings.cipher_suites:
        if suite not in GO_CIPHER_SUITES and suite not in GO_TLS13_SUITES:
            raise WebConfigError(f"{path}.cipher_suites: unknown or insecure cipher suite {suite!r}")
    for curve in settings.curve_preferences:
        if curve not in GO_CURVES:
            raise WebConfigError(f"{path}.curve_preferences: unknown curve {curve!r} (one of {', '.join(GO_CURVES)})")
    return settings


def _parse_headers(raw: Mapping[str, Any]) -> dict[str, str]:
    _unknown(raw, ALLOWED_HEADERS, "http_server_config.headers")
    headers: dict[str, str] = {}
    for name, value in raw.items():
        text = _string(value, f"http_server_config.headers.{name}")
        if not text:
            continue  # blank means unset
        allowed = _HEADER_VALUES.get(name)
        if allowed and text.lower() not in allowed:
            raise WebConfigError(
                f"http_server_config.headers.{name}: invalid value {text!r} (one of {', '.join(allowed)})"
            )
        if "\n" in text or "\r" in text:
            raise WebConfigError(f"http_server_config.headers.{name}: must be one line")
        headers[name] = text
    return headers


def _parse_users(raw: Mapping[str, Any]) -> dict[str, str]:
    users: dict[str, str] = {}
    for user, hashed in raw.items():
        text = _string(hashed, f"basic_auth_users.{user}")
        if not text.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash (expected $2a$/$2b$/$2y$...)")
        users[user] = text
    return users


def _parse_rate_limit(raw: Mapping[str, Any]) -> RateLimit | None:
    _unknown(raw, ("interval", "burst"), "rate_limit")
    if not raw:
        return None
    interval_text = raw.get("interval", "0")
    try:
        interval = parse_duration(str(interval_text))
    except DurationError as error:
        raise WebConfigError(f"rate_limit.interval: {error}") from error
    burst = raw.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise WebConfigError(f"rate_limit.burst: must be a non-negative integer, got {burst!r}")
    if interval < 0:
        raise WebConfigError("rate_limit.interval: must not be negative")
    if interval == 0:
        return None
    return RateLimit(interval / 1e9, max(burst, 1))


def parse_web_config(text: str, source: str = "<web config>", base_dir: str = ".") -> WebConfig:
    """Strictly parse web-config YAML; file names in it are relative to ``base_dir``."""
    import yaml  # noqa: PLC0415 - only needed with --web.config.file

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise WebConfigError(f"{source}: invalid YAML: {error}") from error
    try:
        root = _mapping(document, "web config")
        _unknown(root, ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"), "")
        tls_raw = _mapping(root.get("tls_server_config"), "tls_server_config")
        http_raw = _mapping(root.get("http_server_config"), "http_server_config")
        _unknown(http_raw, ("http2", "headers"), "http_server_config")
        http2 = http_raw.get("http2")
        if http2 is not None and not isinstance(http2, bool):
            raise WebConfigError(f"http_server_config.http2: must be true or false, got {http2!r}")
        return WebConfig(
            tls=_parse_tls(tls_raw) if tls_raw else None,
            http2=http2,
            headers=_parse_headers(_mapping(http_raw.get("headers"), "http_server_config.headers")),
            basic_auth_users=_parse_users(_mapping(root.get("basic_auth_users"), "basic_auth_users")),
            rate_limit=_parse_rate_limit(_mapping(root.get("rate_limit"), "rate_limit")),
            source=source,
            base_dir=base_dir,
        )
    except WebConfigError as error:
        raise WebConfigError(f"{source}: {error}") from None


def load_web_config(path: str) -> WebConfig:
    """Read and parse the file; unreadable files are a startup error."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise WebConfigError(f"cannot read web config file {path!r}: {error}") from error
    config = parse_web_config(text, path, os.path.dirname(os.path.abspath(path)))
    if config.tls is not None:
        build_ssl_context(config)  # certificates and keys must load now, not at the first handshake
    return config


def resolve_path(config: WebConfig, name: str) -> str:
    return name if os.path.isabs(name) else os.path.join(config.base_dir, name)


def load_chain(context: ssl.SSLContext, config: WebConfig, tls: TlsSettings) -> None:
    """Load the server certificate and key, from files or inline PEM (written to a private temp file)."""
    if tls.cert_file and tls.key_file:
        context.load_cert_chain(resolve_path(config, tls.cert_file), resolve_path(config, tls.key_file))
        return
    with tempfile.TemporaryDirectory(prefix="nvidia-gpu-exporter-tls-") as directory:
        cert_path = resolve_path(config, tls.cert_file) if tls.cert_file else os.path.join(directory, "cert.pem")
        key_path = resolve_path(config, tls.key_file) if tls.key_file else os.path.join(directory, "key.pem")
        for path, pem in ((cert_path, tls.cert), (key_path, tls.key)):
            if pem:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(pem)
        context.load_cert_chain(cert_path, key_path)


def build_ssl_context(config: WebConfig) -> ssl.SSLContext:
    """An ``SSLContext`` honouring ``tls_server_config``; raises :class:`WebConfigError` on what cannot load."""
    tls = config.tls
    assert tls is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    try:
        load_chain(context, config, tls)
    except (OSError, ssl.SSLError) as error:
        raise WebConfigError(f"{config.source}: tls_server_config: cannot load certificate and key: {error}") from error
    if tls.client_auth_type != "NoClientCert":
        try:
            if tls.client_ca_file:
                context.load_verify_locations(cafile=resolve_path(config, tls.client_ca_file))
            else:
                context.load_verify_locations(cadata=tls.client_ca)
        except (OSError, ssl.SSLError) as error:
            raise WebConfigError(f"{config.source}: tls_server_config: cannot load the client CA: {error}") from error
        context.verify_mode = (
            ssl.CERT_REQUIRED if tls.client_auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
        )
    suites = [GO_CIPHER_SUITES[suite] for suite in tls.cipher_suites if suite in GO_CIPHER_SUITES]
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError as error:
            raise WebConfigError(f"{config.source}: tls_server_config.cipher_suites: {error}") from error
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
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
    return context


def config_warnings(config: WebConfig) -> list[str]:
    """What the config asks for that this server cannot do, said once at startup."""
    warnings = []
    if config.http2:
        warnings.append("http_server_config.http2: HTTP/2 is not supported; serving HTTP/1.1")
    return warnings


def fingerprint(path: str, config: WebConfig | None) -> str:
    """Changes whenever the config file or a file it references changes (for reloading)."""
    digest = hashlib.sha256()
    names = [path]
    if config is not None and config.tls is not None:
        names += [
            resolve_path(config, name)
            for name in (config.tls.cert_file, config.tls.key_file, config.tls.client_ca_file)
            if name
        ]
    for name in names:
        try:
            status = os.stat(name)
        except OSError:
            digest.update(f"{name}:missing".encode())
        else:
            digest.update(f"{name}:{status.st_mtime_ns}:{status.st_size}".encode())
    return digest.hexdigest()
