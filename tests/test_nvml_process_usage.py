"""--collect.process-usage on the nvml backend, against the fake libnvidia-ml's per-process utilization samples:
the sample window (lastSeen) so values neither repeat nor lag, the junk real drivers return, MIG, and the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import label_values, sample_value, series
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import NvmlBackend, open_backend
from nvidia_gpu_exporter.model.snapshot import ProcessUsageRow
from nvml_fixtures import ControlFile, FakeNvmlLibrary, InProcessFake

MIB = 1_048_576
TRAIN_BYTES = float(40950 * MIB - 100)  # the h200 scenario's process 4242


@pytest.fixture
def backend(fake_nvml: InProcessFake) -> Iterator[NvmlBackend]:
    opened = open_backend(FieldRequest("temperature.gpu"), watch_xids=False, process_usage=True)
    yield opened
    opened.session.close(5)


def usage(backend: NvmlBackend) -> tuple[ProcessUsageRow, ...]:
    readings = backend.collect_blocking()
    assert readings.process_usage is not None
    assert readings.process_usage.succeeded
    return readings.process_usage.rows


def percents(row: ProcessUsageRow) -> tuple[float | None, ...]:
    return (row.sm_percent, row.memory_percent, row.encoder_percent, row.decoder_percent)


def test_each_sample_is_read_once_and_a_process_without_a_new_one_used_nothing(
    fake_nvml: InProcessFake, backend: NvmlBackend
) -> None:
    fake_nvml.command("psample 0 4242 1000 45 12 3 4")
    [row] = usage(backend)
    assert (row.pid, row.process_name, row.used_memory_bytes) == ("4242", "python3 train.py", TRAIN_BYTES)
    assert percents(row) == (45.0, 12.0, 3.0, 4.0)
    [row] = usage(backend)  # the driver has nothing newer than the sample already read
    assert percents(row) == (0.0, 0.0, 0.0, 0.0)
    fake_nvml.command("psample 0 4242 2000 30 5 0 0")
    [row] = usage(backend)
    assert percents(row) == (30.0, 5.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("commands", "sm"),
    [
        (["psample 0 4242 1000 45 12 0 0", "psamplepad 0 5"], 45.0),  # zero-filled entries after the real one
        (["psample 0 999 1000 80 1 0 0"], 0.0),  # a pid that is not running (a zombie's)
        (["psample 0 4242 1000 37100 1 0 0"], 0.0),  # a junk value
        (["psample 0 4242 2000 20 1 0 0", "psample 0 4242 1000 90 1 0 0"], 20.0),  # the newer of two wins
    ],
    ids=["padding", "not-running", "over-100", "newest-wins"],
)
def test_junk_samples_are_dropped(
    fake_nvml: InProcessFake, backend: NvmlBackend, commands: list[str], sm: float
) -> None:
    fake_nvml.command(*commands)
    [row] = usage(backend)
    assert row.sm_percent == sm


def test_a_gpu_that_cannot_sample_processes_serves_their_memory_only(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset mig")
    opened = open_backend(FieldRequest("temperature.gpu"), watch_xids=False, process_usage=True)
    try:
        rows = usage(opened)
    finally:
        opened.session.close(5)
    mig = [row for row in rows if row.pid in ("1001", "1002")]
    assert [percents(row) for row in mig] == [(None, None, None, None)] * 2
    assert [row.used_memory_bytes for row in mig] == [1024.0 * MIB, 2048.0 * MIB]


def test_the_server_serves_samples_and_drops_an_ended_process(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, tmp_path: Path
) -> None:
    control = ControlFile(tmp_path / "control")
    control.send("proc 0 5000 1048576", "pname 5000 infer", "psample 0 4242 1000 45 12 0 0")
    env = fake_nvml_library.env("h200", control=control.path)
    handle = exporter("--collect.backend=nvml", "--collect.process-usage", env=env)
    text = handle.scrape()
    [uuid] = label_values(text, "nvidia_smi_gpu_info", "uuid")
    labels = {"uuid": uuid, "pid": "4242", "process_name": "python3 train.py"}
    assert sample_value(text, "nvidia_smi_process_sm_utilization_ratio", labels) == 0.45
    assert sample_value(text, "nvidia_smi_process_used_memory_bytes", labels) == TRAIN_BYTES
    assert sorted(label_values(text, "nvidia_smi_process_used_memory_bytes", "pid")) == ["4242", "5000"]
    control.send("noprocs 0", "proc 0 4242 1048576")
    text = handle.scrape()
    assert sorted(label_values(text, "nvidia_smi_process_used_memory_bytes", "pid")) == ["4242"]
    assert [sample.value for sample in series(text, "nvidia_smi_process_sm_utilization_ratio")] == [0.0]


def test_mps_clients_are_processes_of_their_own(fake_nvml: InProcessFake, backend: NvmlBackend) -> None:
    fake_nvml.command("mpsproc 0 7001 1048576", "mpsproc 0 7002 na", "psample 0 7001 1000 25 3 0 0")
    rows = {row.pid: row for row in usage(backend)}
    assert sorted(rows) == ["4242", "7001", "7002"]
    assert (rows["7001"].sm_percent, rows["7001"].used_memory_bytes) == (25.0, float(MIB))
    assert (rows["7002"].sm_percent, rows["7002"].used_memory_bytes) == (0.0, None)
