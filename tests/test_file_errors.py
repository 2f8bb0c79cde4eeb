"""Errors about a file name the file, and the line where it has one (issue 30): one table per kind of file a user
hands the exporter, each through the loader the exporter itself calls."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvidia_gpu_exporter.backends import BackendSetupError
from nvidia_gpu_exporter.backends.demo.backend import build_scene, parse_demo_config, read_config_file
from nvidia_gpu_exporter.backends.fleet.targets import TargetsError, load_targets
from nvidia_gpu_exporter.capture.config import ConfigError, load_config
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import read_counters_file
from nvidia_gpu_exporter.health.reader import KernelLogReader
from nvidia_gpu_exporter.httpserver.config import WebConfigError, load_web_config
from nvidia_gpu_exporter.model.snapshot import KernelLogState
from unit_helpers import query_fields


def demo_setup(path: str) -> None:
    """What ``--demo-config`` does at startup, up to the simulated machine answering."""
    settings, spec = parse_demo_config(read_config_file(path), path)
    asyncio.run(build_scene(settings, spec, path))


def error_of(load: Callable[[str], object], path: Path, errors: type[Exception]) -> str:
    with pytest.raises(errors) as raised:
        load(str(path))
    return str(raised.value)


# (loader, the error it raises, a document whose line 3 breaks YAML at column 8)
YAML_LOADERS: list[tuple[Callable[[str], object], type[Exception], str]] = [
    (load_web_config, WebConfigError, "basic_auth_users:\n  a: b\nrate_limit: [1\n"),
    (demo_setup, BackendSetupError, "gpus: 2\nseed: 1\nstate: [load\n"),
    (load_targets, TargetsError, "targets:\n  a:\nx: [1\n"),
    (load_config, ConfigError, "gpus: 2\nseed: 1\nstate: [load\n"),
]


@pytest.mark.parametrize(
    ("load", "errors", "text"), YAML_LOADERS, ids=["web-config", "demo-config", "targets-file", "fake-smi-config"]
)
def test_a_yaml_syntax_error_names_the_file_line_and_column(
    tmp_path: Path, load: Callable[[str], object], errors: type[Exception], text: str
) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(text)
    message = error_of(load, path, errors)
    assert str(path) in message
    assert "line 4, column 1: invalid YAML: expected ',' or ']'" in message
    assert "(while parsing a flow sequence at line 3, column " in message
    assert "\n" not in message
    assert "<unicode string>" not in message


def demo_error(tmp_path: Path, text: str) -> tuple[Path, str]:
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    return path, error_of(demo_setup, path, BackendSetupError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "seed: 1\nstate: lod\n", "line 2: state: the simulated fleet knows idle, load, got 'lod'", id="state"
        ),
        pytest.param("seed: 1\ngpus: 100\n", "line 2: gpus: the demo simulates 1 to 64 GPUs, got 100", id="gpus"),
        pytest.param(
            "seed: 1\ngpus:\n  - serial: '1'\n",
            "line 2: gpus: per-GPU entries need a capture: to replicate; give a count instead",
            id="gpu-entries",
        ),
        pytest.param(
            "seed: 1\ncapture: absent.txt\n",
            "line 2: capture: cannot read absent.txt: No such file or directory",
            id="capture",
        ),
    ],
)
def test_a_demo_config_value_the_simulation_refuses_names_the_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    """Checked when the simulated machine is built, after parsing, yet said as the parser says its errors."""
    path, error = demo_error(tmp_path, text)
    assert error == f'config "{path}": {message}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "seed: 1\noverrides:\n  temprature.gpu: 95\n",
            'line 3: overrides["temprature.gpu"]: the demo serves no field "temprature.gpu" '
            '(did you mean "temperature.gpu"?)',
            id="top-level-typo",
        ),
        pytest.param(
            "seed: 1\noverrides:\n  utilization.gpu: 5\n  watts: {min: 1, max: 2}\n",
            'line 4: overrides.watts: the demo serves no field "watts"',
            id="nothing-close",
        ),
    ],
)
def test_a_demo_override_of_a_field_the_demo_lacks_is_refused_with_the_nearest_field(
    tmp_path: Path, text: str, message: str
) -> None:
    """An override the simulation never applies would leave the alert being rehearsed silent."""
    path, error = demo_error(tmp_path, text)
    assert error == f'config "{path}": {message}'


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        pytest.param(lambda path: None, "No such file or directory", id="missing"),
        pytest.param(lambda path: path.mkdir(), "not a regular file (a directory)", id="directory"),
        pytest.param(lambda path: path.write_bytes(b"targets:\n  \xff: {}\n"), "not UTF-8 text", id="not-utf-8"),
    ],
)
def test_a_targets_file_that_cannot_be_read_is_named_once_with_the_reason(
    tmp_path: Path, make: Callable[[Path], object], problem: str
) -> None:
    """Not ``[Errno 2] No such file or directory: 'targets.yml'``, which names the file a second time."""
    path = tmp_path / "targets.yml"
    make(path)
    message = error_of(load_targets, path, TargetsError)
    assert message.startswith(f"cannot read targets file {str(path)!r}: {problem}")
    assert message.count(str(path)) == 1
    assert "Errno" not in message


@pytest.mark.parametrize(
    ("record", "said"),
    [
        pytest.param(
            "DCGM_FI_DEV_GPU_TEMPP, gauge, t",
            "DCGM_FI_DEV_GPU_TEMPP (line 2: not offered by this exporter)",
            id="unknown",
        ),
        pytest.param(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, s",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE (line 2: needs the nvml backend: NVML GPM)",
            id="other-backend",
        ),
    ],
)
def test_a_counters_file_field_not_served_is_warned_about_with_the_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, record: str, said: str
) -> None:
    path = tmp_path / "counters.csv"
    path.write_text(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{record}\n")
    fields = query_fields([("temperature.gpu", "temperature.gpu")])
    with caplog.at_level(logging.WARNING):
        DcgmExposition(fields, None, counters=read_counters_file(str(path)), energy=False, gpm=False, extras=False)
    (warning,) = [record for record in caplog.records if record.getMessage() == "not serving DCGM fields"]
    assert warning.__dict__["file"] == str(path)
    assert warning.__dict__["fields"] == said


@pytest.mark.parametrize(
    ("make", "state", "problem"),
    [
        pytest.param(lambda path: None, KernelLogState.ABSENT, "No such file or directory", id="missing"),
        pytest.param(lambda path: path.mkdir(), KernelLogState.ERROR, os.strerror(21), id="directory"),
    ],
)
def test_a_kernel_log_that_cannot_be_read_is_said_once_with_its_path(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make: Callable[[Path], object],
    state: KernelLogState,
    problem: str,
) -> None:
    """A directory opens, then fails each read: refused at the open, with the path, not retried with a traceback."""
    path = tmp_path / "kmsg"
    make(path)
    reader = KernelLogReader(str(path), lambda line, live: None)
    with caplog.at_level(logging.WARNING):
        assert reader.open_now() is None
    (warning,) = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert warning.getMessage() == "cannot read the kernel log for XIDs"
    assert (warning.__dict__["path"], warning.__dict__["err"]) == (str(path), problem)
    assert reader.state is state
