"""Cross-backend parity: for one simulated GPU state, exec and nvml serve byte-identical shared families.

The state lives in the fake libnvidia-ml (read by the nvml backend through the real bindings). The exec
backend reads the same state as the text nvidia-smi prints for it, written by hand in the tables of
``nvml_fixtures`` (so the nvml cell rendering is checked against them, not derived from itself) and
served by the project's fake nvidia-smi from a capture this test writes. Every family exec serves must be
served by nvml too, with the same bytes; only the status family differs by design, and nvml adds its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import comparable, family_of
from harness import fake_smi_command
from nvidia_gpu_exporter.backends.nvml.catalog import CATALOG, RFIELDS
from nvml_fixtures import (
    H200_EXPECTED,
    H200_PROCESSES,
    RTX_EXPECTED,
    RTX_PROCESSES,
    FakeNvmlLibrary,
    InProcessFake,
    h200_uuid,
)

FENCE = "#" * 80
STATUS_FAMILIES = {"nvidia_smi_command_exit_code", "nvidia_smi_nvml_return_code"}
NVML_ONLY_PREFIXES = ("nvidia_smi_energy_", "nvidia_smi_pcie_throughput_", "nvidia_smi_mig_", "nvidia_smi_xid_")


def mig_state(uuids: list[str]) -> tuple[list[dict[str, str]], list[tuple[str, str, str, str]]]:
    """The fake's ``mig`` scenario: GPU 0 in MIG mode (no utilization there), GPU 1 a plain H200."""
    gpu0 = {**H200_EXPECTED, "count": "2", "mig.mode.current": "Enabled", "mig.mode.pending": "Enabled"}
    gpu0 |= {"utilization.gpu": "[N/A]", "utilization.memory": "[N/A]"}
    gpu1 = {**H200_EXPECTED, "count": "2", "index": "1", "serial": "1650124000002", "temperature.gpu": "29"}
    gpu1 |= {"pci.bus_id": "00000000:84:00.0", "pci.bus": "0x84", "platform.module_id": "2"}
    processes = [
        (uuids[0], "1001", "python3", "1024 MiB"),
        (uuids[0], "1002", "python3", "2048 MiB"),
        (uuids[1], "2001", "trainer", "3072 MiB"),
    ]
    return [gpu0, gpu1], processes


def state(scenario: str, uuids: list[str]) -> tuple[list[dict[str, str]], list[tuple[str, str, str, str]]]:
    if scenario == "h200":
        return [H200_EXPECTED], [(uuids[0], *row) for row in H200_PROCESSES]
    if scenario == "rtx":
        return [RTX_EXPECTED], [(uuids[0], *row) for row in RTX_PROCESSES]
    return mig_state(uuids)


def section(state_name: str, label: str, command: str, body: str) -> str:
    return f"{FENCE}\n# {state_name} :: {label}\n# $ {command}\n{FENCE}\n{body}\n\n"


def write_capture(
    path: Path, rows: list[dict[str, str]], uuids: list[str], processes: Sequence[tuple[str, ...]]
) -> None:
    """What nvidia-smi would print for this state, in the capture format the fake nvidia-smi replays."""
    driver = rows[0]["driver_version"]
    cuda = "13.2" if driver.startswith("595") else "13.1"
    version = f"NVIDIA-SMI version  : {driver}\nDRIVER version      : {driver}\nCUDA Version        : {cuda}"
    help_text = 'List of valid properties to query for the switch "--query-gpu":\n' + "".join(
        f'\n"{field}"\nA field.\n' for field in CATALOG
    )
    header = ", ".join(RFIELDS[field] for field in CATALOG)
    lines = [header]
    for row, uuid in zip(rows, uuids, strict=True):
        cells = {**row, "uuid": uuid, "timestamp": "2026/07/03 22:10:46.109"}
        lines.append(", ".join(cells[field] for field in CATALOG))
    apps = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]", *(", ".join(row) for row in processes)]
    path.write_text(
        f"{FENCE}\n# nvidia_gpu_exporter GPU capture\n# written by the nvml parity test\n{FENCE}\nmasked: no\n\n"
        + section("capabilities", "version", "nvidia-smi --version", version)
        + section("capabilities", "help-query-gpu", "nvidia-smi --help-query-gpu", help_text)
        + section(
            "idle",
            "query-gpu (csv, what the exporter parses)",
            f"nvidia-smi --query-gpu={','.join(CATALOG)} --format=csv",
            "\n".join(lines),
        )
        + section(
            "idle",
            "query-compute-apps (per-process)",
            "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv",
            "\n".join(apps),
        ),
        encoding="utf-8",
    )


def shared(scrape: str) -> str:
    kept = [
        line
        for line in comparable(scrape).split("\n")
        if line and family_of(line) not in STATUS_FAMILIES and not family_of(line).startswith(NVML_ONLY_PREFIXES)
    ]
    return "\n".join(kept) + "\n"


@pytest.mark.parametrize("scenario", ["h200", "rtx", "mig"])
def test_exec_and_nvml_serve_identical_bytes_for_the_same_state(
    exporter: StartExporter,
    fake_nvml_library: FakeNvmlLibrary,
    fake_nvml: InProcessFake,
    tmp_path: Path,
    scenario: str,
) -> None:
    fake_nvml.command(f"reset {scenario}")
    uuids = [h200_uuid(fake_nvml, index) for index in range(2 if scenario == "mig" else 1)]
    rows, processes = state(scenario, uuids)
    capture = tmp_path / "parity.txt"
    write_capture(capture, rows, uuids, processes)

    nvml = exporter("--collect.backend=nvml", "--collect.compute-apps", env=fake_nvml_library.env(scenario)).scrape()
    exec_ = exporter(
        f"--nvidia-smi-command={fake_smi_command(capture, '--state', 'idle')}", "--collect.compute-apps"
    ).scrape()

    assert "nvidia_smi_command_exit_code 0\n" in exec_
    assert "nvidia_smi_nvml_return_code 0\n" in nvml
    exec_families = {family_of(line) for line in shared(exec_).split("\n") if line}
    nvml_families = {family_of(line) for line in shared(nvml).split("\n") if line}
    assert exec_families == nvml_families
    assert len(exec_families) > 80  # a floor: the comparison must cover most of the catalog
    assert shared(nvml) == shared(exec_)
