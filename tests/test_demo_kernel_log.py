"""The demo's simulated kernel log (docs/demo.md, "What it simulates"): the driver's records for its XIDs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import series
from nvidia_gpu_exporter.backends.demo.kernellog import DemoKernelLog
from nvidia_gpu_exporter.health.kernellog import FallenOffBus, GpuIdentity, XidEvent, parse_line, parse_message
from nvidia_gpu_exporter.model.pci import PciAddress
from nvidia_gpu_exporter.model.snapshot import ProcessRow

UUID = "GPU-85707248-098a-42f9-a362-9137dfb00c8b"
BUS_IDS = {"85707248-098a-42f9-a362-9137dfb00c8b": "00000000:28:00.0"}
AT = 1_800_000_000.0


def _events(records: Sequence[str]) -> list[object]:
    return [parse_message(parse_line(record.rstrip("\n")).message) for record in records]


def test_a_gpus_first_xid_is_preceded_by_the_drivers_uuid_line_once() -> None:
    log = DemoKernelLog(lambda records: None)
    first = log.lines([(UUID, 79, AT), (UUID, 13, AT)], BUS_IDS, ())
    later = log.lines([(UUID, 48, AT)], BUS_IDS, ())
    address = PciAddress(0, 0x28, 0)
    assert _events(first) == [
        GpuIdentity(address, UUID),
        XidEvent(address, 79, None, "", text="GPU has fallen off the bus"),
        XidEvent(address, 13, None, "", text="Graphics engine exception"),
    ]
    assert _events(later) == [XidEvent(address, 48, None, "", text="Double-bit ECC error")]


@pytest.mark.parametrize(
    ("processes", "pid", "name"),
    [
        pytest.param(
            (ProcessRow(UUID, "4242", "python3", "100 MiB"),), 4242, "python3", id="blames-a-process-on-the-gpu"
        ),
        pytest.param((ProcessRow("GPU-other", "7", "x", "1 MiB"),), None, "", id="not-a-process-on-another-gpu"),
        pytest.param((), None, "", id="unknown-without-processes"),
    ],
)
def test_an_xid_blames_a_process_on_its_gpu(processes: tuple[ProcessRow, ...], pid: int | None, name: str) -> None:
    (_, record) = DemoKernelLog(lambda records: None).lines([(UUID, 43, AT)], BUS_IDS, processes)
    event = parse_message(parse_line(record.rstrip("\n")).message)
    assert isinstance(event, XidEvent)
    assert (event.pid, event.process_name) == (pid, name)


def test_a_lost_gpu_falls_off_the_bus_once() -> None:
    log = DemoKernelLog(lambda records: None)
    first = log.fallen_off(["00000000:2A:00.0", "not an address"])
    assert _events(first) == [FallenOffBus(PciAddress(0, 0x2A, 0))]
    assert log.fallen_off(["00000000:2A:00.0"]) == []


def test_a_gpu_without_a_bus_id_writes_nothing() -> None:
    assert DemoKernelLog(lambda records: None).lines([(UUID, 79, AT)], {}, ()) == []


def test_records_are_kmsg_records_in_sequence() -> None:
    records = DemoKernelLog(lambda records: None).lines([(UUID, 79, AT), (UUID, 79, AT)], BUS_IDS, ())
    sequences = [int(re.match(r"3,(\d+),\d+,-;", record).group(1)) for record in records]  # type: ignore[union-attr]
    assert sequences == [1, 2, 3]


def test_the_demo_serves_the_kernel_logs_families_with_its_processes(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("extras:\n  scenarios: [lost-gpu, xid-79]\n", encoding="utf-8")
    handle = exporter("--collect.backend=demo", f"--demo-config={config}", "--collect.compute-apps")
    text = handle.scrape()
    # The GPU its XID 79s name, and the one the lost-gpu scenario lost from the bus (no uuid: never named).
    fallen, lost = sorted(series(text, "nvidia_smi_gpu_fallen_off_bus"), key=lambda sample: sample.labels["uuid"])
    assert lost.labels["uuid"] == "unknown"
    occurrences = series(text, "nvidia_smi_xid_occurrence_timestamp_seconds")
    assert {sample.labels["xid"] for sample in occurrences} == {"79"}
    assert all(sample.labels["pid"] and sample.labels["process_name"] for sample in occurrences)
    assert {sample.labels["uuid"] for sample in occurrences} == {fallen.labels["uuid"]}
    (source,) = series(text, "nvidia_gpu_exporter_xid_source_info")
    assert source.labels == {"source": "demo"}
    assert [float(sample.value) for sample in series(text, "nvidia_smi_xid_errors_total")] == [2.0]
    # Each fault says that it is simulated: the scenarios when they start, the kernel log's lines as they are read.
    assert handle.logged('msg="demo scenarios on: simulating faults" scenarios="lost-gpu, xid-79 on GPU 1"')
    assert handle.logged('msg="XID error in the kernel log (simulated by the demo)"')
    (fallen_line,) = handle.logged('msg="a GPU fell off the bus (simulated by the demo)"')
    assert "level=warn" in fallen_line


def test_the_default_demo_is_healthy(exporter: StartExporter) -> None:
    """The README promises two simulated GPUs: no XID, no GPU lost, no fault logged (docs/demo.md)."""
    handle = exporter("--collect.backend=demo", "--collect.compute-apps")
    text = handle.scrape()
    assert len(series(text, "nvidia_smi_gpu_info")) == 2
    assert [float(sample.value) for sample in series(text, "nvidia_smi_gpus_expected")] == [2.0]
    for family in (
        "nvidia_smi_xid_errors_total",
        "nvidia_smi_gpu_fallen_off_bus",
        "nvidia_smi_xid_occurrence_timestamp_seconds",
    ):
        assert not series(text, family), family
    handle.scrape()
    handle.stop()
    assert "level=error" not in handle.log
    assert "simulating a fault" not in handle.log
