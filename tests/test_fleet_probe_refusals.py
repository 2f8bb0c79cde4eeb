"""``/probe`` takes a configured target name and nothing else (docs/fleet.md, "Security model": no SSRF).

Every other form of the ``target`` parameter is refused with 400 before anything is resolved or dialled: the
names' look-alikes (case, whitespace, control characters, a port or user added), the target's address, group
and section names of the file, double percent-encoding. Without sshd: the only target points at a loopback
listener of this module, which must never see a connection.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from harness import Exporter, start_exporter

pytest.importorskip("asyncssh", reason="fleet mode needs asyncssh (the 'fleet' extra): pip install -e '.[fleet]'")

from nvidia_gpu_exporter.web.probe import MAX_QUOTED_TARGET

NAME = "gpu-01"


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    """The target's address: a loopback socket that is listened on but never accepted from here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server


@pytest.fixture(scope="module")
def fleet_exporter(listener: socket.socket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    port = listener.getsockname()[1]
    targets = {
        "defaults": {"connect_timeout": "1s", "timeout": "2s"},
        "groups": {"rack1": {"targets": {NAME: {"host": "127.0.0.1", "port": port}}}},
    }
    targets_file = tmp_path_factory.mktemp("fleet") / "targets.yml"
    targets_file.write_text(json.dumps(targets), encoding="utf-8")  # JSON is YAML
    handle = start_exporter([f"--fleet.targets-file={targets_file}"])
    yield handle
    handle.stop()


def assert_never_dialled(listener: socket.socket) -> None:
    try:
        connection, peer = listener.accept()
    except BlockingIOError:
        return
    connection.close()
    pytest.fail(f"the exporter connected to the target's address from {peer}")


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        pytest.param("?target=GPU-01", 'unknown target "GPU-01"', id="case-differs"),
        pytest.param("?target=%20gpu-01", 'unknown target " gpu-01"', id="leading-space"),
        pytest.param("?target=gpu-01%20", 'unknown target "gpu-01 "', id="trailing-space"),
        pytest.param("?target=gpu-01+", 'unknown target "gpu-01 "', id="plus-is-a-space"),
        pytest.param("?target=%09gpu-01", 'unknown target "\\tgpu-01"', id="leading-tab"),
        pytest.param("?target=gpu-01%0A", 'unknown target "gpu-01\\n"', id="trailing-newline"),
        pytest.param("?target=gpu-01%00", 'unknown target "gpu-01\\x00"', id="trailing-nul"),
        pytest.param("?target=%2567pu-01", 'unknown target "%67pu-01"', id="double-percent-encoding"),
        pytest.param("?target=gpu-01:22", 'unknown target "gpu-01:22"', id="name-with-a-port"),
        pytest.param("?target=root@gpu-01", 'unknown target "root@gpu-01"', id="name-with-a-user"),
        pytest.param("?target=ssh://gpu-01", 'unknown target "ssh://gpu-01"', id="name-as-a-url"),
        pytest.param("?target=127.0.0.1", 'unknown target "127.0.0.1"', id="the-targets-own-address"),
        pytest.param("?target=localhost", 'unknown target "localhost"', id="a-host-name"),
        pytest.param("?target=rack1", 'unknown target "rack1"', id="a-group-name"),
        pytest.param("?target=defaults", 'unknown target "defaults"', id="a-section-name"),
        pytest.param("?target=gpu-01;target=x", 'unknown target "gpu-01;target=x"', id="semicolon-is-no-separator"),
        pytest.param(f"?target={NAME}&target={NAME}", "exactly one target parameter", id="the-name-twice"),
        pytest.param(f"?Target={NAME}", "exactly one target parameter", id="parameter-name-case-differs"),
        pytest.param(f"?target[]={NAME}", "exactly one target parameter", id="array-parameter-syntax"),
        pytest.param(f"?target={NAME}&module=dcgm", "no modules", id="module-of-a-configured-target"),
        pytest.param(f"?module=&target={NAME}", "no modules", id="empty-module"),
        pytest.param("?module=x", "no modules", id="module-without-target"),
    ],
)
def test_probe_refuses_every_form_but_a_configured_name(
    fleet_exporter: Exporter, listener: socket.socket, query: str, answer: str
) -> None:
    response = fleet_exporter.get("/probe" + query)
    assert response.status == 400, response.body[:200]
    assert answer in response.body.decode("utf-8")
    assert_never_dialled(listener)


def test_a_long_unknown_name_is_quoted_cut_short(fleet_exporter: Exporter, listener: socket.socket) -> None:
    response = fleet_exporter.get("/probe?target=" + "a" * 4000)
    assert response.status == 400
    quoted = response.body.decode("utf-8").split('"')[1]
    assert quoted == "a" * MAX_QUOTED_TARGET
    assert_never_dialled(listener)


def test_the_configured_name_percent_encoded_is_that_target_and_is_dialled(
    fleet_exporter: Exporter, listener: socket.socket
) -> None:
    """The check above can fail: the name itself (here percent-encoded, which is the same name) dials the
    listener. It never speaks SSH, so the probe fails within the target's connect_timeout."""
    response = fleet_exporter.get("/probe?target=%67pu-01")
    assert response.status == 200
    assert "probe_success 0\n" in response.body.decode("utf-8")
    listener.setblocking(True)
    listener.settimeout(10)
    try:
        connection, _ = listener.accept()
        connection.close()
    finally:
        listener.setblocking(False)
