"""Start the real exporter as a user would (a child process on 127.0.0.1, port 0) and scrape it over HTTP."""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from nvidia_gpu_exporter.backends.exec.command import quote_word
from polling import wait_until

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_CAPTURES = FIXTURES / "captures"
SHARED = REPO.parent / "shared"
CONFORMANCE = SHARED / "conformance"
STARTUP_SECONDS = 30.0
READER_JOIN_SECONDS = 5.0  # for the stderr pump after the exit (a child that inherited stderr may hold it open)
# The "Listening on" line in logfmt or in JSON (--log.format=json).
_LISTENING = re.compile(r'msg="Listening on" address=(\S+)|"msg": "Listening on", "address": "([^"]+)"')


def load_script(path: Path) -> ModuleType:
    """A script of the repository that is no package (packaging/, deploy/) imported as the module named after it,
    registered in ``sys.modules`` (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fake_smi_command(capture: str | os.PathLike[str] | None, *fake_args: str) -> str:
    """An ``--nvidia-smi-command`` value running the project's fake nvidia-smi, quoted like the Go tests."""
    words = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi"]
    if capture is not None:
        words += ["--capture", os.fspath(capture)]
    words += fake_args
    return " ".join(quote_word(word) for word in words)


@dataclass(slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def http_get(url: str, headers: Mapping[str, str] | None = None, timeout: float = 30.0) -> Response:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return Response(reply.status, dict(reply.headers), reply.read())
    except urllib.error.HTTPError as error:
        return Response(error.code, dict(error.headers), error.read())


@dataclass
class Exporter:
    """A running exporter child process."""

    process: subprocess.Popen[bytes]
    address: str
    stderr_lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None  # pumps stderr into stderr_lines until the process closes it

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def get(self, path: str = "/metrics", headers: Mapping[str, str] | None = None, timeout: float = 30.0) -> Response:
        return http_get(self.url + path, headers, timeout)

    def scrape(self, path: str = "/metrics", headers: Mapping[str, str] | None = None) -> str:
        response = self.get(path, headers)
        assert response.status == 200, (response.status, response.body[:500])
        body = response.body
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body.decode("utf-8")

    @property
    def log(self) -> str:
        return "\n".join(self.stderr_lines)

    def logged(self, text: str) -> list[str]:
        """The log lines holding ``text``, once there is one (the log is read by a thread: a line written just
        before an answer may be read just after it)."""
        return wait_until(lambda: [line for line in self.stderr_lines if text in line], f"a log line with {text!r}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """SIGTERM and wait (generously: teardown under a loaded CI machine is not what tests measure)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        if self.reader is not None:  # its last lines may still be in the pipe: stderr_lines is whole after stop
            self.reader.join(READER_JOIN_SECONDS)
        return code


class StartupFailed(RuntimeError):
    """The exporter exited before listening; carries its exit code and log."""

    def __init__(self, returncode: int, log: str) -> None:
        super().__init__(f"exporter exited with {returncode} before listening:\n{log}")
        self.returncode = returncode
        self.log = log


def exporter_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "nvidia_gpu_exporter", "--web.listen-address=127.0.0.1:0", *args]


def start_exporter(args: Sequence[str], env: Mapping[str, str] | None = None) -> Exporter:
    """Start the exporter and wait for its ``Listening on`` log line (its port; keep the log level at info)."""
    return start_listening(exporter_argv(*args), env)


def start_listening(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Exporter:
    """Start ``argv`` (ours, or the Go exporter with the same flags) and wait for its ``Listening on`` line."""
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    assert process.stderr is not None
    lines: list[str] = []
    found = threading.Event()
    address: list[str] = []

    def pump() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            match = _LISTENING.search(line)
            if match and not address:
                address.append(match.group(1) or match.group(2))
                found.set()
        found.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    found.wait(STARTUP_SECONDS)
    if not address:
        try:
            code = process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        reader.join(READER_JOIN_SECONDS)
        raise StartupFailed(code, "\n".join(lines))
    return Exporter(process, address[0], lines, reader)


def run_exporter_to_exit(args: Sequence[str], timeout: float = 60.0) -> tuple[int, str]:
    """Run the exporter expecting it to exit by itself (startup errors); returns (code, stderr)."""
    completed = subprocess.run(exporter_argv(*args), capture_output=True, timeout=timeout, cwd=REPO, check=False)
    return completed.returncode, completed.stderr.decode("utf-8", "replace")


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie waiting for an init that does not reap counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


# Set to 1, golden-output tests rewrite their file from what the exporter serves now instead of comparing; review
# the diff before committing it (tests/fixtures/README.md).
UPDATE_GOLDEN = "NVIDIA_GPU_EXPORTER_UPDATE_GOLDEN"


def assert_golden(path: Path, text: str) -> None:
    """``text`` is byte for byte the golden file at ``path`` (or becomes it, under UPDATE_GOLDEN=1)."""
    if os.environ.get(UPDATE_GOLDEN) == "1":
        path.write_bytes(text.encode("utf-8"))
    assert path.is_file(), f"{path} is missing: run the test once with {UPDATE_GOLDEN}=1 and review it"
    assert text.encode("utf-8") == path.read_bytes(), f"{path.name} differs ({UPDATE_GOLDEN}=1 rewrites it)"


WRAPPER_SCRIPT = FIXTURES / "scripts" / "fake-smi-wrapper.sh"
MIG_FIXTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"


@dataclass
class Wrapper:
    """The control directory of ``fake-smi-wrapper.sh`` (see the script for the files it obeys)."""

    control: Path

    @classmethod
    def create(cls, tmp_path: Path) -> Wrapper:
        control = tmp_path / "control"
        control.mkdir()
        (control / "invocations").touch()
        return cls(control)

    def command(self, capture: Path = MIG_FIXTURE, *fake_args: str) -> str:
        """An ``--nvidia-smi-command`` value running the fake through the wrapper."""
        words = ["/bin/sh", str(WRAPPER_SCRIPT), str(self.control), sys.executable, "--capture", str(capture)]
        return " ".join(quote_word(word) for word in [*words, *fake_args])

    def args(self, capture: Path = MIG_FIXTURE, *fake_args: str) -> tuple[str, str]:
        """The flag and its value, ready to pass to the exporter."""
        return ("--nvidia-smi-command", self.command(capture, *fake_args))

    def set(self, name: str, content: str) -> None:
        (self.control / name).write_text(content, encoding="utf-8")

    def pid(self, name: str) -> int:
        path = self.control / name
        wait_until(path.is_file, f"{name} to be written")
        wait_until(lambda: path.read_text(encoding="ascii").strip() != "", f"{name} to be filled")
        return int(path.read_text(encoding="ascii"))

    def gpu_queries(self) -> list[int]:
        """Pids of the ``--query-gpu`` invocations so far, in order."""
        lines = (self.control / "invocations").read_text(encoding="utf-8").splitlines()
        return [int(line.split(" ", 1)[0]) for line in lines if " --query-gpu=" in line]
