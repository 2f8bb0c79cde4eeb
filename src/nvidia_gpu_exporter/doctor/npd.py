"""``nvidia_gpu_exporter npd-plugin``: node-problem-detector's custom plugin protocol on the exporter's verdict.

node-problem-detector runs the plugin every ``invoke_interval`` and turns its exit status into a node condition (exit
0 OK, 1 a problem, 2 unknown) with its standard output as the condition's message. The plugin asks the local
exporter's ``GET /-/health`` (docs/health.md, "Verdicts") and answers 1 when a GPU is at least ``--state``
(``failing`` by default, or ``degraded``), naming the worst GPU, its reason and action; 2 when the exporter cannot
be asked or answers something else. It writes one line of at most ``--max-length`` characters (node-problem-detector
cuts at its own ``max_output_length`` too) and reads at most :data:`MAX_BODY_BYTES` of the answer. An exporter behind
its web config's basic auth or TLS is asked with ``--username``/``--password-file`` and ``--ca-file`` (or
``--insecure-skip-verify``, for a loopback address only: the certificate's names rarely include 127.0.0.1).
deploy/node-problem-detector/ holds the monitor config; KUBERNETES.md says how a condition becomes a taint.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, NoReturn

from nvidia_gpu_exporter.config import DEFAULT_PORT
from nvidia_gpu_exporter.web.routes import VERDICTS_PATH

OK, PROBLEM, UNKNOWN = 0, 1, 2
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}{VERDICTS_PATH}"
DEFAULT_MAX_LENGTH = 80  # node-problem-detector's own default max_output_length
MAX_BODY_BYTES = 4 * 1024 * 1024  # a 256-GPU verdict is well under 1 MiB
MAX_SECRET_BYTES = 4096  # a password file's bound
STATES = ("ok", "degraded", "failing")


class _Unknown(Exception):
    """The exporter's answer cannot be judged: exit 2 with this message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad argument is an unknown state (2), said on stdout where node-problem-detector reads it."""
        raise _Unknown(f"npd-plugin: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nvidia_gpu_exporter npd-plugin", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the exporter's /-/health (default {DEFAULT_URL})")
    parser.add_argument(
        "--state", choices=STATES[1:], default="failing", help="the state that is a problem (and any worse)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the exporter")
    parser.add_argument("--max-length", type=int, default=DEFAULT_MAX_LENGTH, help="the message's length bound")
    parser.add_argument("--gpu", default="", help="judge this GPU alone (its PCI bus id or uuid)")
    parser.add_argument("--username", default="", help="basic auth user (the web config's basic_auth_users)")
    parser.add_argument("--password-file", default="", help="a file holding the basic auth password")
    parser.add_argument("--ca-file", default="", help="CA certificates to verify the exporter's TLS certificate with")
    parser.add_argument(
        "--insecure-skip-verify",
        action="store_true",
        help="do not verify the exporter's TLS certificate (a loopback --url only)",
    )
    return parser


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(MAX_SECRET_BYTES + 1)
    except (OSError, UnicodeDecodeError) as error:
        raise _Unknown(f"cannot read --password-file {path}: {getattr(error, 'strerror', None) or error}") from error
    if len(text) > MAX_SECRET_BYTES:
        raise _Unknown(f"--password-file {path} is larger than {MAX_SECRET_BYTES} bytes")
    return text.rstrip("\r\n")


def _request(options: argparse.Namespace) -> tuple[urllib.request.Request, ssl.SSLContext | None]:
    """The request for ``/-/health`` with the credentials asked for, and the TLS context for an https URL."""
    url: str = options.url
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
        raise _Unknown(f"--url must be an http or https URL, not {url}")
    headers = {}
    if options.password_file and not options.username:
        raise _Unknown("--password-file needs --username")
    if options.username:
        password = _password(options.password_file) if options.password_file else ""
        token = base64.b64encode(f"{options.username}:{password}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    context = None
    if urllib.parse.urlsplit(url).scheme.lower() == "https":
        if options.insecure_skip_verify and not _loopback(url):
            raise _Unknown(f"--insecure-skip-verify is for a loopback --url only, not {url}")
        try:
            context = ssl.create_default_context(cafile=options.ca_file or None)
        except (OSError, ssl.SSLError) as error:
            raise _Unknown(f"cannot load --ca-file {options.ca_file}: {error}") from error
        if options.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    elif options.ca_file or options.insecure_skip_verify:
        raise _Unknown(f"--ca-file and --insecure-skip-verify are for an https --url, not {url}")
    return urllib.request.Request(url, headers=headers), context  # noqa: S310 - http(s) only, checked above


def _fetch(options: argparse.Namespace) -> dict[str, Any]:
    url: str = options.url
    request, context = _request(options)
    try:
        with urllib.request.urlopen(request, timeout=options.timeout, context=context) as reply:  # noqa: S310
            body = reply.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise _Unknown(f"the exporter answered HTTP {error.code} at {url}") from error
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise _Unknown(f"cannot reach the exporter at {url}: {reason}") from error
    if len(body) > MAX_BODY_BYTES:
        raise _Unknown(f"the exporter's answer at {url} is larger than {MAX_BODY_BYTES} bytes")
    try:
        report = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _Unknown(f"the answer at {url} is not JSON: {error}") from error
    if not isinstance(report, dict) or not isinstance(report.get("gpus"), list):
        raise _Unknown(f"the answer at {url} is not a /-/health report")
    return report


def _rank(gpu: Any) -> int:
    state = gpu.get("state") if isinstance(gpu, dict) else None
    if state not in STATES:
        raise _Unknown(f"a GPU's state is {state!r}, not one of {', '.join(STATES)}")
    return STATES.index(state)


def _name(gpu: dict[str, Any]) -> str:
    return str(gpu.get("pci_bus_id") or gpu.get("uuid") or "?")


def _first_reason(gpu: dict[str, Any]) -> str:
    """The first reason giving the GPU's state, as ``reason (action)``."""
    for part in gpu.get("subsystems") or ():
        for reason in (part.get("reasons") or ()) if isinstance(part, dict) else ():
            if isinstance(reason, dict) and reason.get("state") == gpu.get("state"):
                return f"{reason.get('reason')} ({reason.get('action')})"
    return str(gpu.get("action") or "")


def judge(report: dict[str, Any], threshold: str, only: str = "") -> tuple[int, str]:
    """The exit status and message for a ``/-/health`` report (``only``: one GPU's, by PCI bus id or uuid)."""
    gpus = report["gpus"]
    if only:
        wanted = only.lower().removeprefix("gpu-")
        gpus = [
            gpu
            for gpu in gpus
            if isinstance(gpu, dict) and wanted in (str(gpu.get("pci_bus_id", "")).lower(), str(gpu.get("uuid", "")))
        ]
        if not gpus:
            raise _Unknown(f"the exporter's report has no GPU {only}")
    ranks = [_rank(gpu) for gpu in gpus]
    bad = [gpu for gpu, rank in zip(gpus, ranks, strict=True) if rank >= STATES.index(threshold)]
    if not bad:
        worst = STATES[max(ranks, default=0)]
        return OK, f"{len(gpus)} GPUs, none {threshold}" + (f" (worst: {worst})" if worst != "ok" else "")
    bad.sort(key=_rank, reverse=True)
    first = bad[0]
    more = f"; {len(bad) - 1} more" if len(bad) > 1 else ""
    return PROBLEM, f"GPU {_name(first)} {first['state']}: {_first_reason(first)}{more}"


def _bounded(message: str, limit: int) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: max(limit - 3, 0)] + "..."


def main(argv: Sequence[str]) -> int:
    limit = DEFAULT_MAX_LENGTH
    try:
        options = _parser().parse_args(list(argv))
        limit = max(options.max_length, 8)
        status, message = judge(_fetch(options), options.state, options.gpu)
    except _Unknown as error:
        status, message = UNKNOWN, str(error)
    print(_bounded(message, limit))
    sys.stdout.flush()
    return status
