"""The health verdict through the real exporter (docs/health.md, "Verdicts"): capture cells, kernel-log lines and a
sysfs tree give each reason's state, evidence and action in ``/metrics`` and ``GET /-/health``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import StartExporter
from exposition_reader import series
from harness import MIG_FIXTURE, Exporter, fake_smi_command
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS, header
from nvidia_gpu_exporter.model.verdicts import REASONS_BY_NAME
from sysfs_fakes import gpu, make_sysfs

FENCE = "#" * 80
SICK, WARN, LOST, RESET = "00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0", "00000000:AF:00.0"
UUIDS = {
    SICK: "GPU-11111111-2222-3333-4444-555555555555",
    WARN: "GPU-66666666-7777-8888-9999-000000000000",
    RESET: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
}
HEALTHY = {
    "ecc.errors.uncorrected.volatile.total": "0",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "retired_pages.pending": "No",
    "clocks_event_reasons.hw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.hw_power_brake_slowdown": "Not Active",
    "gpu_recovery_action": "None",
}
FAULTY_CELLS = {
    SICK: {
        "ecc.errors.uncorrected.volatile.total": "2",
        "remapped_rows.pending": "Yes",
        "remapped_rows.failure": "Yes",
        "retired_pages.pending": "Yes",
        "clocks_event_reasons.hw_thermal_slowdown": "Active",
        "clocks_event_reasons.hw_power_brake_slowdown": "Active",
        "gpu_recovery_action": "Node Reboot",
    },
    WARN: {"gpu_recovery_action": "Drain P2P"},
    RESET: {"gpu_recovery_action": "GPU Reset"},
}
XID_LINES = {WARN: (48, 63, 64, 74, 94, 119, 121, 143, 61)}
# Every reason the server test shows, with the GPU it fires on and the words of its evidence.
EXPECTED: dict[str, tuple[str, str]] = {
    "uncorrectable_ecc_volatile": (SICK, "ecc.errors.uncorrected.volatile.total = 2"),
    "remapped_rows_pending": (SICK, "remapped_rows.pending = Yes"),
    "remapped_rows_failure": (SICK, "remapped_rows.failure = Yes"),
    "retired_pages_pending": (SICK, "retired_pages.pending = Yes"),
    "hw_thermal_slowdown": (SICK, "clocks_event_reasons.hw_thermal_slowdown = Active"),
    "hw_power_brake": (SICK, "clocks_event_reasons.hw_power_brake_slowdown = Active"),
    "recovery_action_reboot": (SICK, "gpu_recovery_action = Node Reboot"),
    "recovery_action_drain_p2p": (WARN, "gpu_recovery_action = Drain P2P"),
    "recovery_action_reset": (RESET, "gpu_recovery_action = GPU Reset"),
    "xid_uncorrectable_memory": (WARN, "XID 48 x1"),
    "xid_memory_repair_failed": (WARN, "XID 64 x1"),
    "xid_memory_repair_pending": (WARN, "XID 63 x1"),
    "xid_contained_memory": (WARN, "XID 94 x1"),
    "xid_nvlink": (WARN, "XID 74 x1"),
    "xid_c2c_link": (WARN, "XID 121 x1"),
    "xid_gpu_halted": (WARN, "XID 119 x1"),
    "xid_init_failure": (WARN, "XID 143 x1"),
    "xid_driver_warning": (WARN, "XID 61 x1"),
    "fallen_off_bus": (LOST, "fell off the bus"),
    "missing_from_driver": (LOST, f"the PCI bus lists {LOST}, the driver does not"),
}


def capture_text() -> str:
    """A capture of the three GPUs the driver still has, each with its cells."""
    fields = [*IDENTITY_FIELDS, *HEALTHY]
    rows = []
    for index, pci in enumerate((SICK, WARN, RESET)):
        identity = {"uuid": UUIDS[pci], "name": "NVIDIA H200", "pci.bus_id": pci, "index": str(index)}
        cells = {**HEALTHY, **identity, **FAULTY_CELLS.get(pci, {})}
        rows.append(", ".join(cells.get(field, "[N/A]") for field in fields))
    help_text = 'List of valid properties to query for the switch "--query-gpu":\n' + "".join(
        f'\n"{field}"\nThe {field}.\n' for field in fields
    )

    def block(heading: str, command: str, body: str) -> str:
        return f"{FENCE}\n# {heading}\n# $ {command}\n{FENCE}\n{body}\n\n"

    return (
        f"{FENCE}\n# nvidia_gpu_exporter GPU capture\n{FENCE}\nhand-written for the verdict tests\n\n"
        + block("capabilities :: help-query-gpu", "nvidia-smi --help-query-gpu", help_text)
        + block(
            "idle :: query-gpu (csv, what the exporter parses)",
            f"nvidia-smi --query-gpu={','.join(fields)} --format=csv",
            ", ".join(header(field) for field in fields) + "\n" + "\n".join(rows),
        )
    )


def kernel_log() -> str:
    """Syslog lines (no kernel time: each XID holds from when the exporter saw its count move)."""
    lines = [
        f"Dec  3 12:00:00 node kernel: NVRM: Xid (PCI:0000:5e:00): {code}, pid=77, name=python3, simulated"
        for code in XID_LINES[WARN]
    ]
    lines.append("Dec  3 12:00:01 node kernel: NVRM: GPU 0000:86:00.0: GPU has fallen off the bus.")
    return "\n".join(lines) + "\n"


def start(exporter: StartExporter, tmp_path: Path, *extra: str) -> Exporter:
    capture, log = tmp_path / "verdicts.txt", tmp_path / "kern.log"
    capture.write_text(capture_text())
    log.write_text(kernel_log())
    bus = [gpu("0000:3b:00.0"), gpu("0000:5e:00.0"), gpu("0000:86:00.0", driver=None), gpu("0000:af:00.0")]
    sysfs = make_sysfs(tmp_path / "sys", bus)
    return exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture),
        "--collect.kernel-log",
        str(log),
        "--collect.sysfs-path",
        str(sysfs),
        *extra,
    )


def health(handle: Exporter) -> dict[str, Any]:
    handle.scrape()  # a collection judges the verdict; /-/health only reads it
    report = json.loads(handle.get("/-/health").text)
    assert isinstance(report, dict)
    return report


def findings(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (gpu["pci_bus_id"], reason["reason"]): reason
        for gpu in report["gpus"]
        for part in gpu["subsystems"]
        for reason in part["reasons"]
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """One exporter's /metrics and /-/health, shared by the table-driven tests below."""
    from harness import start_exporter

    tmp_path = tmp_path_factory.mktemp("verdicts")
    started: list[Exporter] = []

    def exporter(*args: str) -> Exporter:
        started.append(start_exporter(args))
        return started[-1]

    try:
        handle = start(exporter, tmp_path)
        report = health(handle)
        return handle.scrape(), report
    finally:
        for handle in started:
            handle.stop()


@pytest.mark.parametrize("name", EXPECTED, ids=EXPECTED)
def test_a_reasons_input_gives_its_state_evidence_and_action_in_the_json_route(
    served: tuple[str, dict[str, Any]], name: str
) -> None:
    pci, evidence = EXPECTED[name]
    reason = REASONS_BY_NAME[name]
    found = findings(served[1])[(pci, name)]
    assert (found["state"], found["action"], found["action_text"]) == (
        reason.state.label,
        reason.action.value,
        reason.action.text,
    )
    assert evidence in found["evidence"]
    assert found["since"] <= found["last_evidence"]


@pytest.mark.parametrize("name", EXPECTED, ids=EXPECTED)
def test_a_reasons_input_gives_its_state_and_action_in_the_metrics(
    served: tuple[str, dict[str, Any]], name: str
) -> None:
    pci, _ = EXPECTED[name]
    reason = REASONS_BY_NAME[name]
    labels = {"pci_bus_id": pci, "subsystem": reason.subsystem.value, "reason": name}
    infos = series(served[0], "nvidia_gpu_exporter_gpu_health_reason_info")
    (info,) = [sample for sample in infos if labels.items() <= sample.labels.items()]
    assert (info.labels["state"], info.labels["action"], float(info.value)) == (
        reason.state.label,
        reason.action.value,
        1.0,
    )
    states = [
        float(s.value)
        for s in series(served[0], "nvidia_gpu_exporter_gpu_health_state")
        if s.labels["pci_bus_id"] == pci and s.labels["subsystem"] == reason.subsystem.value
    ]
    assert len(states) == 1
    assert states[0] >= reason.state


def test_the_json_route_says_each_gpus_state_and_action(served: tuple[str, dict[str, Any]]) -> None:
    gpus = {gpu["pci_bus_id"]: (gpu["uuid"], gpu["state"], gpu["action"]) for gpu in served[1]["gpus"]}
    assert gpus == {
        SICK: ("11111111-2222-3333-4444-555555555555", "failing", "replace_gpu"),
        WARN: ("66666666-7777-8888-9999-000000000000", "failing", "replace_gpu"),
        LOST: ("", "failing", "reboot_node"),
        RESET: ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "failing", "reset_gpu"),
    }
    assert served[1]["state"] == "failing"


def test_a_healthy_gpu_is_ok_everywhere(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE))
    report = health(handle)
    assert [(gpu["state"], gpu["action"]) for gpu in report["gpus"]] == [("ok", None), ("ok", None)]
    text = handle.scrape()
    assert {float(s.value) for s in series(text, "nvidia_gpu_exporter_gpu_health_state")} == {0.0}
    assert series(text, "nvidia_gpu_exporter_gpu_health_reason_info") == []


HEALTH_COUNTER = "DCGM_EXP_GPU_HEALTH_STATUS, gauge, Current DCGM-reported GPU health status.\n"


def dcgm_status(text: str, uuid: str) -> dict[str, tuple[str, float]]:
    """``DCGM_EXP_GPU_HEALTH_STATUS`` of one GPU: health_watch -> (health_error_code, value)."""
    return {
        sample.labels["health_watch"]: (sample.labels["health_error_code"], float(sample.value))
        for sample in series(text, "DCGM_EXP_GPU_HEALTH_STATUS")
        if sample.labels["UUID"] == uuid
    }


@pytest.mark.parametrize("profile", ["dcgm", "both"])
def test_the_dcgm_profiles_serve_the_verdict_as_dcgm_exporter_does(
    exporter: StartExporter, tmp_path: Path, profile: str
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n" + HEALTH_COUNTER)
    handle = start(exporter, tmp_path, f"--metrics.profile={profile}", f"--dcgm.collectors={counters}")
    handle.scrape()
    text = handle.scrape()
    assert dcgm_status(text, UUIDS[SICK]) == {
        "PCIE": ("DCGM_FR_OK", 0.0),
        "NVLINK": ("DCGM_FR_OK", 0.0),
        "MEM": ("DCGM_FR_VOLATILE_DBE_DETECTED", 20.0),
        "THERMAL": ("DCGM_FR_CLOCK_THROTTLE_THERMAL", 10.0),
        "POWER": ("DCGM_FR_CLOCK_THROTTLE_POWER", 10.0),
        "DRIVER": ("DCGM_FR_GPU_RECOVERY_REBOOT", 20.0),
        "ALL": ("DCGM_FR_VOLATILE_DBE_DETECTED", 20.0),
    }
    assert "# TYPE DCGM_EXP_GPU_HEALTH_STATUS gauge\n" in text
    assert series(text, "nvidia_gpu_exporter_gpu_health_state")  # the exporter's own families stay


@pytest.mark.parametrize(
    ("listed", "served"),
    [
        pytest.param(HEALTH_COUNTER, True, id="listed-in-the-counters-file"),
        pytest.param("", False, id="left-out-of-the-counters-file"),
    ],
)
def test_a_counters_file_serves_the_dcgm_verdict_only_when_it_lists_it(
    exporter: StartExporter, tmp_path: Path, listed: str, served: bool
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n" + listed)
    handle = start(exporter, tmp_path, "--metrics.profile=dcgm", f"--dcgm.collectors={counters}")
    handle.scrape()
    assert bool(dcgm_status(handle.scrape(), UUIDS[WARN])) is served
