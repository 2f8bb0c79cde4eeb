"""XIDs from the kernel log on every backend (docs/health.md): the ledger, the source, and the real exporter."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import series
from harness import FIXTURE_CAPTURES, Exporter, fake_smi_command
from nvidia_gpu_exporter.app import choose_xid_source
from nvidia_gpu_exporter.config import Backend as BackendName
from nvidia_gpu_exporter.config import Config, XidSource
from nvidia_gpu_exporter.health.kernellog import FallenOffBus, GpuIdentity, SxidEvent, XidEvent
from nvidia_gpu_exporter.health.ledger import MAX_CODES_PER_GPU, MAX_GPUS, OCCURRENCES_PER_GPU, XidLedger
from nvidia_gpu_exporter.health.source import KernelXidSource, gpu_addresses
from nvidia_gpu_exporter.model.pci import PciAddress
from nvidia_gpu_exporter.model.snapshot import FallenGpu, GpuTable, QueryField, SxidRecord, XidOccurrence, XidRecord
from nvidia_gpu_exporter.model.xids import XID_CODES
from nvidia_gpu_exporter.preflight import StartupError, checked
from polling import wait_until

BOOT = 1_700_000_000.0
GPU = PciAddress(0, 0x3B, 0)
UUID = "GPU-2f8e4c1a-5b6d-7e8f-9a0b-1c2d3e4f5a6b"
MIG_FIXTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
MIG_GPU0 = "3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"  # at 00000000:07:00.0 in the fixture


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample of ``name`` whose labels include these; None when there is none."""
    for sample in series(text, name):
        if labels.items() <= sample.labels.items():
            return float(sample.value)
    return None


def _xid(code: int, pid: int | None = None, name: str = "", pci: PciAddress = GPU) -> XidEvent:
    return XidEvent(pci, code, pid, name)


# -- the ledger -------------------------------------------------------------------------------------------


def test_xids_are_counted_per_gpu_and_code_with_the_kernels_time() -> None:
    ledger = XidLedger(BOOT)
    ledger.add(GpuIdentity(GPU, UUID), None)
    for usec in (1_000_000, 3_000_000):
        ledger.add(_xid(13), ledger.wall_time(usec, None))
    ledger.add(_xid(79), ledger.wall_time(2_000_000, None))
    assert ledger.records() == (XidRecord(UUID, 13, 2, BOOT + 3), XidRecord(UUID, 79, 1, BOOT + 2))


@pytest.mark.parametrize(
    ("identity", "learned", "expected"),
    [
        pytest.param(None, None, "unknown", id="unnamed-address-is-unknown"),
        pytest.param(None, "GPU-from-readings", "GPU-from-readings", id="named-by-the-backends-readings"),
        pytest.param(UUID, None, UUID, id="named-by-the-drivers-own-line"),
        pytest.param(UUID, "GPU-from-readings", UUID, id="the-drivers-line-wins"),
    ],
)
def test_a_gpu_is_named_by_the_driver_or_the_readings(identity: str | None, learned: str | None, expected: str) -> None:
    ledger = XidLedger(BOOT)
    if identity:
        ledger.add(GpuIdentity(GPU, identity), None)
    ledger.add(_xid(48), BOOT + 1)
    if learned:
        ledger.learn_uuids({GPU: learned})
    assert [record.gpu_uuid for record in ledger.records()] == [expected]


def test_an_untimed_replayed_line_is_counted_without_a_time() -> None:
    ledger = XidLedger(BOOT)
    ledger.add(_xid(31), ledger.wall_time(None, None))
    assert ledger.records() == (XidRecord("unknown", 31, 1, None),)


def test_recent_occurrences_keep_the_process_one_series_each_and_only_the_last_few() -> None:
    ledger = XidLedger(BOOT)
    ledger.add(_xid(13, 7, "train"), BOOT + 1)
    ledger.add(_xid(13, 7, "train"), BOOT + 2)  # the same process again: one series, its latest time
    for pid in range(100, 100 + OCCURRENCES_PER_GPU):
        ledger.add(_xid(43, pid, "job"), BOOT + pid)
    rows = ledger.occurrences()
    assert len(rows) == OCCURRENCES_PER_GPU
    assert XidOccurrence("unknown", "00000000:3B:00.0", 13, "7", "train", BOOT + 2) not in rows  # the oldest went
    assert rows[-1] == XidOccurrence(
        "unknown", "00000000:3B:00.0", 43, str(99 + OCCURRENCES_PER_GPU), "job", BOOT + 99 + OCCURRENCES_PER_GPU
    )


@pytest.mark.parametrize(
    "event",
    [pytest.param(FallenOffBus(GPU), id="the-drivers-line"), pytest.param(_xid(79), id="xid-79")],
)
def test_a_gpu_that_fell_off_the_bus_is_reported(event: FallenOffBus | XidEvent) -> None:
    ledger = XidLedger(BOOT)
    ledger.add(_xid(13), BOOT)
    assert ledger.fallen_off() == ()
    ledger.add(event, BOOT + 5)
    assert ledger.fallen_off() == (FallenGpu("unknown", "00000000:3B:00.0"),)


def test_nvswitch_errors_are_counted_apart_by_switch_code_and_severity() -> None:
    ledger = XidLedger(BOOT)
    switch = PciAddress(0, 5, 0)
    for fatal, at in ((False, BOOT + 1), (False, BOOT + 3), (True, BOOT + 2), (None, BOOT + 4)):
        ledger.add(SxidEvent(switch, 12028, "nvidia-nvswitch3", fatal), at)
    assert ledger.sxid_records() == (
        SxidRecord("00000000:05:00.0", 12028, "", 1, BOOT + 4),
        SxidRecord("00000000:05:00.0", 12028, "fatal", 1, BOOT + 2),
        SxidRecord("00000000:05:00.0", 12028, "non_fatal", 2, BOOT + 3),
    )
    assert ledger.records() == ()  # a switch is not a GPU


@pytest.mark.parametrize(
    ("events", "kept_keys"),
    [
        pytest.param(
            [_xid(13, pci=PciAddress(0, bus, 0)) for bus in range(MAX_GPUS + 10)], MAX_GPUS, id="too-many-gpus"
        ),
        pytest.param([_xid(code) for code in range(MAX_CODES_PER_GPU + 10)], MAX_CODES_PER_GPU, id="too-many-codes"),
    ],
)
def test_a_flooded_log_is_bounded_and_the_excess_counted(events: list[XidEvent], kept_keys: int) -> None:
    ledger = XidLedger(BOOT)
    for event in events:
        ledger.add(event, BOOT)
    assert len(ledger.records()) == kept_keys
    assert ledger.dropped == len(events) - kept_keys


@pytest.mark.parametrize(
    ("fields", "rows", "expected"),
    [
        pytest.param(
            ("uuid", "pci.bus_id"),
            (("GPU-a", "00000000:3B:00.0"), ("GPU-b", "00000000:86:00.0")),
            {GPU: "GPU-a", PciAddress(0, 0x86, 0): "GPU-b"},
            id="both-columns",
        ),
        pytest.param(("uuid", "name"), (("GPU-a", "x"),), {}, id="no-pci-column"),
        pytest.param(("uuid", "pci.bus_id"), (("GPU-a", "[N/A]"),), {}, id="unreadable-address"),
    ],
)
def test_the_readings_name_gpus_by_address(
    fields: tuple[str, ...], rows: tuple[tuple[str, ...], ...], expected: dict[PciAddress, str]
) -> None:
    query = tuple(QueryField(name, name) for name in fields)
    assert gpu_addresses(query, GpuTable(rows)) == expected


def test_the_source_reads_a_log_file_end_to_end(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        "6,1,500000,-;NVRM: GPU at PCI:0000:3b:00: " + UUID + "\n"
        "4,2,1500000,-;NVRM: Xid (PCI:0000:3b:00): 94, pid=55, name=python3, Contained ECC error\n"
    )
    source = KernelXidSource(str(log), booted_at=BOOT, file_poll_seconds=0.02)
    source.start()
    try:
        wait_until(source.reader.replayed.is_set, "the replay to end")
        assert source.records() == (XidRecord(UUID, 94, 1, BOOT + 1.5),)
        assert source.occurrences() == (XidOccurrence(UUID, "00000000:3B:00.0", 94, "55", "python3", BOOT + 1.5),)
        assert source.status().records == 2
    finally:
        source.stop()


# -- through the real exporter ------------------------------------------------------------------------------

KMSG_XID_79 = "3,812,2000000,-;NVRM: Xid (PCI:0000:07:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n"


def _exec_with_log(exporter: StartExporter, log: Path, *extra: str) -> Exporter:
    return exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), "--collect.kernel-log", str(log), *extra)


def test_with_the_default_exec_backend_a_kernel_log_xid_is_served_with_its_process(
    exporter: StartExporter, tmp_path: Path
) -> None:
    log = tmp_path / "kmsg"
    sxid = "4,2,1500,-;nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout\n"
    log.write_text("6,1,1000,-;Linux version 6.1.0\n" + sxid + KMSG_XID_79)
    handle = _exec_with_log(exporter, log)
    text = handle.scrape()
    switch = {"pci_bus_id": "00000000:C3:00.0", "sxid": "24007", "severity": "fatal"}
    assert sample_value(text, "nvidia_smi_nvswitch_sxid_errors_total", **switch) == 1
    assert sample_value(text, "nvidia_smi_xid_errors_total", uuid=MIG_GPU0, xid="79") == 1
    occurrence = {"uuid": MIG_GPU0, "pci_bus_id": "00000000:07:00.0", "xid": "79", "pid": "4242"}
    assert sample_value(text, "nvidia_smi_xid_occurrence_timestamp_seconds", process_name="python3", **occurrence)
    assert sample_value(text, "nvidia_smi_gpu_fallen_off_bus", uuid=MIG_GPU0, pci_bus_id="00000000:07:00.0") == 1
    assert sample_value(text, "nvidia_gpu_exporter_xid_source_info", source="kmsg") == 1
    assert sample_value(text, "nvidia_gpu_exporter_kernel_log_up", reason="") == 1
    with log.open("a") as handle_file:  # a new one while the exporter runs: counted by a later collection
        handle_file.write(KMSG_XID_79.replace("3,812,2000000", "3,813,9000000"))
    wait_until(
        lambda: sample_value(handle.scrape(), "nvidia_smi_xid_errors_total", uuid=MIG_GPU0, xid="79"),
        "the followed XID to be counted",
        until=lambda count: count == 2,
    )
    assert handle.logged('msg="XID error in the kernel log"')  # a live one is logged, with what it means
    assert handle.logged('meaning="GPU has fallen off the bus" severity=critical')


@pytest.mark.parametrize(
    ("flags", "source"),
    [
        pytest.param(("--collect.xid-source", "off"), "off", id="off-serves-no-xids"),
    ],
)
def test_a_source_other_than_the_kernel_log_leaves_it_unread(
    exporter: StartExporter, tmp_path: Path, flags: tuple[str, ...], source: str
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(KMSG_XID_79)
    text = _exec_with_log(exporter, log, *flags).scrape()
    assert "nvidia_smi_xid_errors_total{" not in text
    assert "nvidia_gpu_exporter_kernel_log_up" not in text
    assert sample_value(text, "nvidia_gpu_exporter_xid_source_info", source=source) == 1


def test_an_unreadable_kernel_log_says_why_and_the_exporter_serves_on(exporter: StartExporter, tmp_path: Path) -> None:
    text = _exec_with_log(exporter, tmp_path / "no-such-kmsg").scrape()
    assert sample_value(text, "nvidia_gpu_exporter_kernel_log_up", reason="absent") == 0
    assert sample_value(text, "nvidia_smi_gpu_info", uuid=MIG_GPU0) == 1


# -- choosing the source ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "source", "log_exists", "expected"),
    [
        pytest.param("exec", "auto", True, ("kmsg", True, False), id="exec-auto-reads-the-log"),
        pytest.param("exec", "auto", False, ("kmsg", True, False), id="exec-auto-reports-an-unreadable-log"),
        pytest.param("nvml", "auto", True, ("kmsg", True, False), id="nvml-auto-prefers-the-log"),
        pytest.param("nvml", "auto", False, ("nvml", False, True), id="nvml-auto-falls-back-to-events"),
        pytest.param("nvml", "kmsg", False, ("kmsg", True, False), id="nvml-kmsg-never-counts-events-too"),
        pytest.param("nvml", "nvml", True, ("nvml", False, True), id="nvml-events-only"),
        pytest.param("demo", "auto", False, ("demo", True, False), id="demo-auto-simulates-a-kernel-log"),
        pytest.param("demo", "nvml", True, ("demo", False, True), id="demo-nvml-serves-its-simulated-events"),
        pytest.param("demo", "kmsg", True, ("kmsg", True, False), id="demo-kmsg-reads-the-log"),
        pytest.param("exec", "off", True, ("off", False, False), id="off-is-off"),
    ],
)
def test_exactly_one_xid_source_is_chosen(
    tmp_path: Path, backend: str, source: str, log_exists: bool, expected: tuple[str, bool, bool]
) -> None:
    log = tmp_path / "kmsg"
    if log_exists:
        log.write_text("")
    config = Config(backend=BackendName(backend), xid_source=XidSource(source), kernel_log=str(log))
    choice = choose_xid_source(config)
    try:
        assert (choice.name, choice.kernel_log is not None, choice.backend_xids) == expected
    finally:
        choice.close()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(
            {"xid_source": XidSource.NVML},
            "--collect.xid-source=nvml requires --collect.backend=nvml or demo",
            id="nvml-source-needs-an-nvml-backend",
        ),
        pytest.param({"kernel_log": ""}, "--collect.kernel-log must not be empty", id="empty-log-path"),
    ],
)
def test_a_source_that_cannot_work_is_refused_at_startup(flags: dict[str, object], message: str) -> None:
    with pytest.raises(StartupError, match=re.escape(message)):
        checked(Config(**flags))  # type: ignore[arg-type]


# -- what an XID means ------------------------------------------------------------------------------------


def test_the_xid_table_in_the_docs_is_the_one_the_code_uses() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "health.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+?) \| `(\w+)` \| (.+?) \|$", text, flags=re.MULTILINE)
    documented = {int(code): (name, severity, action) for code, name, severity, action in rows}
    assert documented == {code: (e.name, e.severity.value, e.action) for code, e in XID_CODES.items()}


def test_the_xids_report_explains_each_xid_and_names_its_process(exporter: StartExporter, tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        KMSG_XID_79 + "4,813,3000000,-;NVRM: Xid (PCI:0000:07:00): 999, pid='<unknown>', name=<unknown>, ?\n"
    )
    handle = _exec_with_log(exporter, log)
    handle.scrape()  # the first collection names the GPU at 00000000:07:00.0
    report = json.loads(handle.get("/-/xids").text)
    assert report["source"] == "kmsg"
    assert report["kernel_log"]["state"] == "up"
    by_code = {entry["xid"]: entry for entry in report["xids"]}
    assert by_code[79]["uuid"] == MIG_GPU0
    assert (by_code[79]["name"], by_code[79]["severity"]) == ("GPU has fallen off the bus", "critical")
    assert (by_code[999]["count"], by_code[999]["severity"]) == (1, "unknown")  # unknown codes still counted
    assert {(row["xid"], row["pid"], row["process_name"]) for row in report["recent"]} == {
        (79, "4242", "python3"),
        (999, "", ""),
    }
    assert report["fallen_off_bus"] == [{"uuid": MIG_GPU0, "pci_bus_id": "00000000:07:00.0"}]


def test_a_telemetry_path_on_the_xids_report_is_refused() -> None:
    with pytest.raises(
        StartupError, match=re.escape('web.telemetry-path "/-/xids" collides with the exporter\'s own routes')
    ):
        checked(Config(telemetry_path="/-/xids"))


# -- who caused it: the pod -------------------------------------------------------------------------------

POD_UID = "0d6b3b4e-8a7f-4c55-9d1e-2f3a4b5c6d7e"
CONTAINER_ID = "ab" * 32
POD_XID = "4,2,1500000,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=55, name=python3, Graphics Exception\n"


def read_pod_xid(source: KernelXidSource, log: Path, *, replayed: bool) -> XidOccurrence:
    """The one occurrence ``source`` reads of POD_XID: already in ``log`` when ``replayed`` (the caller wrote it),
    else written once the replay has ended."""
    source.start()
    try:
        wait_until(source.reader.replayed.is_set, "the replay to end")
        if not replayed:
            with log.open("a") as handle:
                handle.write(POD_XID)
        (row,) = wait_until(source.occurrences, "the XID", until=lambda rows: len(rows) == 1)
        return row
    finally:
        source.stop()


@pytest.mark.parametrize(
    ("replayed", "expected"),
    [
        pytest.param(False, (POD_UID, CONTAINER_ID), id="a-live-xid-gets-its-processs-pod"),
        pytest.param(True, ("", ""), id="a-replayed-xids-pid-may-be-another-process-by-now"),
    ],
)
def test_an_xids_process_is_placed_in_its_pod_when_the_line_is_read(
    tmp_path: Path, replayed: bool, expected: tuple[str, str]
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(POD_XID if replayed else "")
    asked: list[int] = []

    def process_pod(pid: int) -> tuple[str, str]:
        asked.append(pid)
        return POD_UID, CONTAINER_ID

    source = KernelXidSource(str(log), booted_at=BOOT, file_poll_seconds=0.02, process_pod=process_pod)
    row = read_pod_xid(source, log, replayed=replayed)
    assert (row.pod.pod_uid, row.pod.container_id) == expected
    assert asked == ([] if replayed else [55])


HOLDER = ("trainer", "ml", "bert-0")  # (container, namespace, pod), as KubernetesAttribution.sole_holders() has it


@pytest.mark.parametrize(
    ("replayed", "holders", "expected"),
    [
        pytest.param(False, {UUID[4:]: HOLDER}, ("ml", "bert-0", "trainer"), id="a-live-xid-names-the-gpus-holder"),
        pytest.param(False, {}, ("", "", ""), id="no-one-container-holds-the-gpu-shared-or-mig"),
        pytest.param(True, {UUID[4:]: HOLDER}, ("", "", ""), id="a-replayed-xid-predates-the-holder-seen-now"),
    ],
)
def test_an_xid_names_the_pod_holding_its_gpu_when_the_line_is_read(
    tmp_path: Path, replayed: bool, holders: dict[str, tuple[str, str, str]], expected: tuple[str, str, str]
) -> None:
    log = tmp_path / "kmsg"
    identity = f"6,1,1000000,-;NVRM: GPU at PCI:0000:3b:00: {UUID}\n"
    log.write_text(identity + (POD_XID if replayed else ""))
    source = KernelXidSource(str(log), booted_at=BOOT, file_poll_seconds=0.02)
    source.learn((), GpuTable(()), holders)
    row = read_pod_xid(source, log, replayed=replayed)
    assert (row.pod.namespace, row.pod.pod, row.pod.container) == expected


def test_with_process_pods_the_served_occurrence_names_the_pod(exporter: StartExporter, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cgroup").write_text(f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n")
    log = tmp_path / "kmsg"
    log.write_text("")
    handle = _exec_with_log(
        exporter, log, "--collect.compute-apps", "--kubernetes.process-pods", "--kubernetes.proc-root", str(proc)
    )
    with log.open("a") as handle_file:
        handle_file.write(KMSG_XID_79)
    text = wait_until(
        handle.scrape,
        "the XID with its pod",
        until=lambda scrape: sample_value(scrape, "nvidia_smi_xid_occurrence_timestamp_seconds", pod_uid=POD_UID),
    )
    assert sample_value(
        text, "nvidia_smi_xid_occurrence_timestamp_seconds", uuid=MIG_GPU0, pid="4242", container_id=CONTAINER_ID
    )


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        pytest.param("exec", ("off", False, False), id="windows-exec-has-no-kernel-log"),
        pytest.param("nvml", ("nvml", False, True), id="windows-nvml-uses-events"),
    ],
)
def test_on_windows_auto_never_opens_a_kernel_log(
    monkeypatch: pytest.MonkeyPatch, backend: str, expected: tuple[str, bool, bool]
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    choice = choose_xid_source(Config(backend=BackendName(backend)))
    assert (choice.name, choice.kernel_log is not None, choice.backend_xids) == expected


def test_on_windows_the_kernel_log_source_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(StartupError, match="needs a Linux kernel log"):
        checked(Config(xid_source=XidSource.KMSG))
