"""``nvidia-gpu-exporter-capture`` records a machine's nvidia-smi as a capture the fake replays: here the machine is
the fake itself, replaying the project's fixture, so what the new capture answers must be what the fixture does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import MIG_FIXTURE, REPO, fake_smi_command
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.fakesmi import record

QUERY = ["--query-gpu=uuid,name,memory.used,utilization.gpu", "--format=csv"]


def _fake(capture: Path, state: str, *args: str) -> str:
    command = [sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--capture", str(capture), "--state", state]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=True).stdout


def test_a_recorded_capture_answers_as_the_machine_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "my-machine.txt"
    machine_idle = fake_smi_command(MIG_FIXTURE, "--state", "idle")
    machine_load = fake_smi_command(MIG_FIXTURE, "--state", "load")
    assert record.main(["--output", str(output), "--nvidia-smi-command", machine_idle]) == 0
    assert (
        record.main(["--output", str(output), "--append", "--state", "load", "--nvidia-smi-command", machine_load]) == 0
    )
    assert "states: idle, load" in capsys.readouterr().err
    capture = load_capture(output)
    assert capture.states() == ("idle", "load")
    assert "recorded_by:" in capture.metadata
    for state in ("idle", "load"):
        assert _fake(output, state, *QUERY) == _fake(MIG_FIXTURE, state, *QUERY), state
    assert _fake(output, "idle", "--version") == _fake(MIG_FIXTURE, "idle", "--version")


# (arguments after --output, what stderr says, exit status, rule)
REFUSALS: list[tuple[list[str], str, int, str]] = [
    (["--nvidia-smi-command", "/bin/false"], "nvidia-smi --version: exit status 1", 1, "a failing nvidia-smi"),
    (["--state", "capabilities"], "want one word other than 'capabilities'", 2, "the reserved state"),
    (["--state", "under load"], "want one word", 2, "a state with a space"),
    (["--timeout", "0"], "--timeout must be above 0", 2, "no timeout"),
    (["--append"], "No such file", 1, "--append to a capture that does not exist"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[row[3] for row in REFUSALS])
def test_refusals_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: tuple[list[str], str, int, str]
) -> None:
    args, message, status, rule = case
    output = tmp_path / "my-machine.txt"
    assert record.main(["--output", str(output), *args]) == status, rule
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_capture_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "my-machine.txt"
    output.write_text("mine\n")
    assert record.main(["--output", str(output), "--nvidia-smi-command", "/bin/false"]) == 1
    assert "exists: use --append" in capsys.readouterr().err
    assert output.read_text() == "mine\n"


def test_appending_a_state_the_capture_has_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "copy.txt"
    output.write_bytes(MIG_FIXTURE.read_bytes())
    machine = fake_smi_command(MIG_FIXTURE)
    assert record.main(["--output", str(output), "--append", "--state", "load", "--nvidia-smi-command", machine]) == 1
    assert "already has the state 'load'" in capsys.readouterr().err
    assert output.read_bytes() == MIG_FIXTURE.read_bytes()


def test_the_documented_command_is_installed() -> None:
    """README.md and docs/fake-nvidia-smi.md name `nvidia-gpu-exporter-capture`: pyproject.toml must install it."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'nvidia-gpu-exporter-capture = "nvidia_gpu_exporter.fakesmi.record:main"' in pyproject
    for doc in ("README.md", "docs/fake-nvidia-smi.md"):
        assert "nvidia-gpu-exporter-capture --output my-machine.txt --state load --append" in (REPO / doc).read_text()
