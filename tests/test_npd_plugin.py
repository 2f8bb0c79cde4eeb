"""``nvidia_gpu_exporter npd-plugin`` (deploy/node-problem-detector/): node-problem-detector's plugin protocol on the
exporter's ``/-/health``: exit 0 OK, 1 a problem, 2 unknown, one bounded line on stdout."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import bcrypt
import pytest
import trustme

from conftest import StartExporter
from harness import MIG_FIXTURE, REPO, fake_smi_command, start_exporter
from nvidia_gpu_exporter.doctor import npd
from test_verdict_server import SICK, start

MONITOR = REPO / "deploy" / "node-problem-detector" / "nvidia-gpu-exporter-monitor.json"


def gpu(pci: str, state: str, *reasons: tuple[str, str, str]) -> dict[str, Any]:
    """A GPU of a /-/health report with ``(reason, state, action)`` findings in one subsystem."""
    found = [{"reason": name, "state": given, "action": action} for name, given, action in reasons]
    return {"uuid": "", "pci_bus_id": pci, "state": state, "subsystems": [{"subsystem": "memory", "reasons": found}]}


FAILING = gpu("00000000:3B:00.0", "failing", ("remapped_rows_failure", "failing", "replace_gpu"))
DEGRADED = gpu("00000000:5E:00.0", "degraded", ("hw_thermal_slowdown", "degraded", "check_cooling"))
OK_GPU = gpu("00000000:86:00.0", "ok")


@pytest.mark.parametrize(
    ("gpus", "threshold", "expected"),
    [
        pytest.param([OK_GPU, OK_GPU], "failing", (0, "2 GPUs, none failing"), id="healthy"),
        pytest.param([OK_GPU, DEGRADED], "failing", (0, "2 GPUs, none failing (worst: degraded)"), id="degraded-ok"),
        pytest.param(
            [OK_GPU, DEGRADED],
            "degraded",
            (1, "GPU 00000000:5E:00.0 degraded: hw_thermal_slowdown (check_cooling)"),
            id="degraded-asked-for",
        ),
        pytest.param(
            [DEGRADED, FAILING],
            "degraded",
            (1, "GPU 00000000:3B:00.0 failing: remapped_rows_failure (replace_gpu); 1 more"),
            id="the-worst-first",
        ),
        pytest.param([], "failing", (0, "0 GPUs, none failing"), id="no-gpu"),
    ],
)
def test_the_verdict_gives_the_exit_status_and_message(
    gpus: list[dict[str, Any]], threshold: str, expected: tuple[int, str]
) -> None:
    assert npd.judge({"state": "x", "gpus": gpus}, threshold) == expected


class Answer(http.server.BaseHTTPRequestHandler):
    """Serves the class's status and body to any GET."""

    status = 200
    body = b""

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: Any) -> None:
        """Quiet."""


@pytest.fixture
def served() -> Iterator[tuple[str, type[Answer]]]:
    """A local server whose answer the test sets: its URL and handler class."""
    handler = type("Handler", (Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/-/health", handler
    finally:
        server.shutdown()
        server.server_close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = npd.main(args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return status, out.rstrip("\n")


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        pytest.param(401, b"Unauthorized", "the exporter answered HTTP 401", id="http-error"),
        pytest.param(200, b"<html>", "is not JSON", id="not-json"),
        pytest.param(200, b'{"xids": []}', "is not a /-/health report", id="not-a-report"),
        pytest.param(200, b'{"gpus": [{"state": "broken"}]}', "a GPU's state is 'broken'", id="bad-state"),
    ],
)
def test_an_answer_that_cannot_be_judged_is_unknown(
    served: tuple[str, type[Answer]], capsys: pytest.CaptureFixture[str], status: int, body: bytes, words: str
) -> None:
    url, handler = served
    handler.status, handler.body = status, body
    code, message = run(capsys, f"--url={url}", "--max-length=200")
    assert code == 2
    assert words in message


def test_an_answer_larger_than_the_bound_is_unknown(
    served: tuple[str, type[Answer]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = served
    monkeypatch.setattr(npd, "MAX_BODY_BYTES", 64)
    handler.body = json.dumps({"gpus": [OK_GPU] * 10}).encode()
    assert run(capsys, f"--url={url}", "--max-length=200") == (
        2,
        f"the exporter's answer at {url} is larger than 64 bytes",
    )


def test_an_exporter_that_does_not_answer_is_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    code, message = run(capsys, "--url=http://127.0.0.1:9/-/health", "--timeout=2", "--max-length=200")
    assert code == 2
    assert message.startswith("cannot reach the exporter at http://127.0.0.1:9/-/health")


def test_a_bad_argument_is_unknown_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, message = run(capsys, "--state=sick")
    assert code == 2
    assert message.startswith("npd-plugin: argument --state: invalid choice: 'sick'")


@pytest.mark.parametrize("limit", [20, 80])
def test_the_message_is_one_line_within_its_bound(
    served: tuple[str, type[Answer]], capsys: pytest.CaptureFixture[str], limit: int
) -> None:
    url, handler = served
    long = gpu("00000000:3B:00.0", "failing", ("x" * 500, "failing", "replace_gpu\nsecond line"))
    handler.body = json.dumps({"gpus": [long]}).encode()
    code, message = run(capsys, f"--url={url}", f"--max-length={limit}")
    assert (code, len(message) <= limit, message.endswith("...")) == (1, True, True)


# -- against the real exporter, through the command node-problem-detector runs ---------------------------------


def plugin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "nvidia_gpu_exporter", "npd-plugin", f"--url={url}/-/health", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_failing_gpu_of_the_real_exporter_is_a_problem(exporter: StartExporter, tmp_path: Path) -> None:
    handle = start(exporter, tmp_path)
    handle.scrape()
    completed = plugin(handle.url, "--max-length=200")
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert completed.stdout.startswith(f"GPU {SICK} failing: ")
    assert completed.stdout.endswith("; 3 more\n")


def test_the_real_exporters_healthy_gpus_are_ok(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE))
    handle.scrape()
    for state in ("failing", "degraded"):
        completed = plugin(handle.url, f"--state={state}")
        assert (completed.returncode, completed.stdout) == (0, f"2 GPUs, none {state}\n")


# -- the monitor config ------------------------------------------------------------------------------------------


def test_the_monitor_config_runs_the_plugin_as_shipped() -> None:
    monitor = json.loads(MONITOR.read_text(encoding="utf-8"))
    assert monitor["plugin"] == "custom"
    rules = monitor["rules"]
    assert [(rule["type"], rule.get("condition")) for rule in rules] == [
        ("permanent", monitor["conditions"][0]["type"]),
        ("temporary", None),
    ]
    for rule, state in zip(rules, ("failing", "degraded"), strict=True):
        assert rule["path"] == "/usr/local/bin/nvidia_gpu_exporter"  # the exporter image's command
        assert rule["args"][0] == "npd-plugin"
        options = npd._parser().parse_args(rule["args"][1:])
        assert (options.state, options.max_length) == (state, monitor["pluginConfig"]["max_output_length"])
        assert options.timeout < int(rule["timeout"].rstrip("s"))


# -- an exporter behind its web config's TLS and basic auth ----------------------------------------------------

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real exporter with TLS and basic auth (healthy GPUs), its https /-/health URL, and its files' directory."""
    try:
        socket.getaddrinfo("localhost", None)
    except socket.gaierror:
        pytest.skip("localhost does not resolve here (no /etc/hosts, as in a bare debootstrap image)")
    directory = tmp_path_factory.mktemp("guarded")
    ca = trustme.CA()
    server = ca.issue_cert("localhost")  # not 127.0.0.1: what --insecure-skip-verify is for
    server.private_key_pem.write_to_path(str(directory / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    config = directory / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: {hashed}\n"
    )
    (directory / "password").write_text(PASSWORD + "\n")
    (directory / "wrong").write_text("wrong\n")
    handle = start_exporter(["--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), f"--web.config.file={config}"])
    try:
        context = ssl.create_default_context(cafile=str(directory / "ca.pem"))
        token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        scrape = urllib.request.Request(
            f"https://localhost:{handle.address.rsplit(':', 1)[1]}/metrics", headers={"Authorization": f"Basic {token}"}
        )
        with urllib.request.urlopen(scrape, context=context, timeout=30) as reply:  # a collection judges the verdict
            assert reply.status == 200
        yield f"https://{handle.address}/-/health", directory
    finally:
        handle.stop()


SKIP_VERIFY = "--insecure-skip-verify"
CA_FILE = "--ca-file={dir}/ca.pem"
UNVERIFIED = "cannot reach the exporter at {url}: [SSL: CERTIFICATE_VERIFY_FAILED]"
UNAUTHORIZED = "the exporter answered HTTP 401 at {url}"


class TlsCase(NamedTuple):
    """What the plugin is given against the guarded exporter ("" leaves an option out), and what it says."""

    id: str
    username: str
    password_file: str  # in the fixture's directory
    tls: str
    status: int
    words: str  # the start of its message


TLS_CASES = (
    TlsCase("the-ca-verifies-but-the-certificate-names-localhost", "prometheus", "password", CA_FILE,
            2, f"{UNVERIFIED} certificate verify failed: IP"),
    TlsCase("credentials-and-loopback-skip-verify", "prometheus", "password", SKIP_VERIFY, 0, "2 GPUs, none failing"),
    TlsCase("wrong-password", "prometheus", "wrong", SKIP_VERIFY, 2, UNAUTHORIZED),
    TlsCase("no-credentials", "", "", SKIP_VERIFY, 2, UNAUTHORIZED),
    TlsCase("an-unknown-ca", "prometheus", "password", "", 2, UNVERIFIED),
    TlsCase("password-file-absent", "prometheus", "absent", SKIP_VERIFY,
            2, "cannot read --password-file {dir}/absent: No such file or directory"),
    TlsCase("password-without-user", "", "password", SKIP_VERIFY, 2, "--password-file needs --username"),
)  # fmt: skip


def plugin_args(directory: Path, username: str, password_file: str, tls: str) -> list[str]:
    """The plugin's credentials and TLS options ("" leaves one out), files named in ``directory``."""
    return [
        *([f"--username={username}"] if username else []),
        *([f"--password-file={directory}/{password_file}"] if password_file else []),
        *([tls.format(dir=directory)] if tls else []),
    ]


@pytest.mark.parametrize("case", TLS_CASES, ids=[case.id for case in TLS_CASES])
def test_the_plugin_asks_an_exporter_behind_tls_and_basic_auth(
    guarded: tuple[str, Path], capsys: pytest.CaptureFixture[str], case: TlsCase
) -> None:
    url, directory = guarded
    args = plugin_args(directory, case.username, case.password_file, case.tls)
    status, message = run(capsys, f"--url={url}", "--max-length=300", *args)
    words = case.words.format(url=url, dir=directory)
    assert (status, message[: len(words)]) == (case.status, words), message


def test_the_ca_file_verifies_a_certificate_naming_the_host(
    guarded: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, directory = guarded
    named = url.replace("127.0.0.1", "localhost")
    args = plugin_args(directory, "prometheus", "password", CA_FILE)
    assert run(capsys, f"--url={named}", *args) == (0, "2 GPUs, none failing")


@pytest.mark.parametrize(
    ("url", "args", "words"),
    [
        pytest.param(
            "https://gpu-node-7:9835/-/health",
            ["--insecure-skip-verify"],
            "--insecure-skip-verify is for a loopback --url only, not https://gpu-node-7:9835/-/health",
            id="skip-verify-off-loopback",
        ),
        pytest.param(
            "http://127.0.0.1:9835/-/health",
            ["--ca-file=/etc/ssl/ca.pem"],
            "--ca-file and --insecure-skip-verify are for an https --url, not http://127.0.0.1:9835/-/health",
            id="tls-options-on-http",
        ),
        pytest.param(
            "file:///etc/passwd", [], "--url must be an http or https URL, not file:///etc/passwd", id="not-http"
        ),
    ],
)
def test_credentials_options_that_cannot_apply_are_unknown(
    capsys: pytest.CaptureFixture[str], url: str, args: list[str], words: str
) -> None:
    assert run(capsys, f"--url={url}", "--max-length=300", *args) == (2, words)
