"""--web.systemd-socket: serve on the listening socket systemd passes in (LISTEN_PID / LISTEN_FDS, fd 3)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from harness import FIXTURE_CAPTURES, REPO, fake_smi_command, http_get
from nvidia_gpu_exporter.httpserver.systemd import SocketActivationError, activation_sockets
from polling import wait_until

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"


@pytest.mark.skipif(sys.platform != "linux", reason="socket activation is a Linux (systemd) feature")
def test_exporter_serves_on_the_socket_systemd_passed() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    # As systemd does: the socket becomes fd 3, and LISTEN_PID names the process that execs the exporter.
    launcher = (
        "import os, sys; os.dup2(int(sys.argv[1]), 3); "
        "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); os.execv(sys.argv[2], sys.argv[2:])"
    )
    argv = [sys.executable, "-m", "nvidia_gpu_exporter", "--web.systemd-socket"]
    argv += ["--nvidia-smi-command", fake_smi_command(CAPTURE)]
    process = subprocess.Popen(
        [sys.executable, "-c", launcher, str(listener.fileno()), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
        pass_fds=(listener.fileno(),),
    )

    def served() -> str | None:
        assert process.poll() is None, f"the exporter exited with {process.returncode}"
        response = http_get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        return response.text if response.status == 200 else None

    try:
        body = wait_until(served, "the exporter to serve on the passed socket", interval=0.2, ignoring=(OSError,))
        assert body is not None
        assert "nvidia_smi_gpu_info{" in body
    finally:
        process.terminate()
        process.wait(15)
        listener.close()


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"LISTEN_PID": "1", "LISTEN_FDS": "1"},
        {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "0"},
        {"LISTEN_PID": "x"},
    ],
    ids=["no-variables", "other-process", "zero-fds", "garbage"],
)
def test_without_activation_fds_startup_fails_clearly(environ: dict[str, str]) -> None:
    with pytest.raises(SocketActivationError, match="no socket activation file descriptors found"):
        activation_sockets(environ)
