"""A read-only Kubernetes API client for the doctor: plain HTTPS and JSON with the standard library.

Three GETs do not justify the kubernetes client library (tens of megabytes). Credentials come from the
pod's service account (in-cluster) or a kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``)
with a bearer token, a token file or a client certificate. Exec credential plugins (cloud CLIs) are not
run: the doctor says so and names the alternative.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiConfigError(Exception):
    """Credentials exist but cannot be used (a broken or unsupported kubeconfig)."""


class ApiError(Exception):
    """A request failed: ``status`` is the HTTP status, or 0 when no answer came."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ApiAccess:
    """Where the API server is and how to authenticate; ``source`` says where that came from."""

    server: str
    source: str
    token: str = ""
    ca_file: str = ""
    ca_data: bytes = b""
    client_cert_data: bytes = b""
    client_key_data: bytes = b""
    insecure: bool = False


def in_cluster(service_account_dir: str, environ: Mapping[str, str]) -> ApiAccess | None:
    """The pod's own service account, when this runs in a pod that mounts one."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    directory = Path(service_account_dir)
    token_path = directory / "token"
    if not host or not port or not token_path.is_file():
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ca = directory / "ca.crt"
    return ApiAccess(
        server=f"https://{host}:{port}",
        source=f"in-cluster service account ({directory})",
        token=token_path.read_text(encoding="utf-8").strip(),
        ca_file=str(ca) if ca.is_file() else "",
    )


def _named(items: Any, name: str, kind: str, path: Path) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(kind), dict):
            return dict(item[kind])
    raise ApiConfigError(f"{path}: no {kind} named {name!r}")


def _file_or_data(section: Mapping[str, Any], key: str, base: Path) -> bytes:
    """``key-data`` (base64) or ``key`` (a path, relative to the kubeconfig's directory)."""
    data = section.get(f"{key}-data")
    if data:
        return base64.b64decode(str(data))
    path = section.get(key)
    if path:
        return (base / str(path)).read_bytes()
    return b""


def from_kubeconfig(path: str | Path, context: str = "") -> ApiAccess:
    """The access a kubeconfig's current (or named) context describes."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ApiConfigError(f"{path}: {error}") from error
    if not isinstance(document, dict):
        raise ApiConfigError(f"{path}: not a kubeconfig")
    name = context or str(document.get("current-context") or "")
    if not name:
        raise ApiConfigError(f"{path}: no current-context")
    ctx = _named(document.get("contexts"), name, "context", path)
    cluster = _named(document.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
    user = _named(document.get("users"), str(ctx.get("user", "")), "user", path) if ctx.get("user") else {}
    base = path.parent
    if "exec" in user or "auth-provider" in user:
        raise ApiConfigError(
            f"{path}: user {ctx.get('user')!r} authenticates with a credential plugin, which the doctor does not "
            "run; use a kubeconfig with a token or client certificate, or run the doctor in the exporter's pod"
        )
    token = str(user.get("token") or "")
    if not token and user.get("tokenFile"):
        token = (base / str(user["tokenFile"])).read_text(encoding="utf-8").strip()
    server = str(cluster.get("server") or "")
    if not server:
        raise ApiConfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    try:
        return ApiAccess(
            server=server.rstrip("/"),
            source=f"kubeconfig {path} (context {name})",
            token=token,
            ca_data=_file_or_data(cluster, "certificate-authority", base),
            client_cert_data=_file_or_data(user, "client-certificate", base),
            client_key_data=_file_or_data(user, "client-key", base),
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        )
    except (OSError, ValueError) as error:
        raise ApiConfigError(f"{path}: {error}") from error


def discover(
    kubeconfig: str, service_account_dir: str, environ: Mapping[str, str], home: str | None = None
) -> ApiAccess | None:
    """An explicit kubeconfig, else the service account, else ``$KUBECONFIG`` or ``~/.kube/config``."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    access = in_cluster(service_account_dir, environ)
    if access is not None:
        return access
    candidates = [part for part in environ.get("KUBECONFIG", "").split(os.pathsep) if part]
    home = home if home is not None else environ.get("HOME", "")
    if home:
        candidates.append(str(Path(home) / ".kube" / "config"))
    for candidate in candidates:
        if Path(candidate).is_file():
            return from_kubeconfig(candidate)
    return None


@contextlib.contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """``ssl`` loads client certificates from files only: write them to private temporary ones."""
    with tempfile.TemporaryDirectory(prefix="nvge-doctor-") as directory:
        cert_path, key_path = Path(directory) / "client.crt", Path(directory) / "client.key"
        for target, data in ((cert_path, cert), (key_path, key)):
            target.write_bytes(data)
            target.chmod(0o600)
        yield str(cert_path), str(key_path)


class ApiClient:
    """GETs JSON from the API server with the discovered access."""

    def __init__(self, access: ApiAccess) -> None:
        self.access = access
        self.context: ssl.SSLContext | None = None  # None for a plain http:// server
        if access.server.startswith("https://"):
            self.context = self._ssl_context(access)

    @staticmethod
    def _ssl_context(access: ApiAccess) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=access.ca_file or None,
            cadata=access.ca_data.decode("ascii") if access.ca_data else None,
        )
        if access.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if access.client_cert_data and access.client_key_data:
            with _pem_files(access.client_cert_data, access.client_key_data) as (cert, key):
                context.load_cert_chain(cert, key)
        return context

    def get(self, path: str, query: Mapping[str, str] | None = None, timeout: float = 5.0) -> Any:
        """The decoded JSON of ``GET path``; raises :class:`ApiError`."""
        return self.request("GET", path, query=query, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        timeout: float = 5.0,
    ) -> Any:
        """The decoded JSON answer of ``method path`` with ``body`` as JSON (the doctor's test pod is created and
        deleted, everything else only read); raises :class:`ApiError`."""
        url = self.access.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(  # noqa: S310 - http(s) only
            url, data=data, method=method, headers={"Accept": "application/json"}
        )
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.access.token:
            request.add_header("Authorization", f"Bearer {self.access.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as reply:  # noqa: S310
                return json.loads(reply.read().decode("utf-8"))
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, _status_message(error)) from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise ApiError(0, f"{self.access.server}: {reason}") from None


def _status_message(error: urllib.error.HTTPError) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, or the HTTP reason."""
    try:
        body = json.loads(error.read().decode("utf-8"))
    except (ValueError, OSError):
        return str(error.reason)
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason)
