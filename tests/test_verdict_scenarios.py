"""Every verdict reason through the real exporter, from the demo's scenario for it (docs/demo.md, "Faults on
request"): its state, evidence and action in ``/metrics`` and ``GET /-/health``, and the npd-plugin's exit status and
message for its GPU.

One demo exporter serves them all: each GPU scenario on a GPU of its own, so each GPU shows one reason, the lost GPU
its own, and a last GPU stays healthy; then the config gains ``stuck-nvidia-smi`` (a node's fault: every GPU shows
it), which the demo reads at the next collection.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client.samples import Sample

from exposition_reader import series
from harness import Exporter, start_exporter
from nvidia_gpu_exporter.backends.demo.extras import (
    GPU_SCENARIOS,
    MISSING_FROM_DRIVER,
    REASON_SCENARIOS,
    STUCK_NVIDIA_SMI,
    GpuFault,
)
from nvidia_gpu_exporter.doctor import npd
from nvidia_gpu_exporter.model.fabric import FABRIC_FIELDS
from nvidia_gpu_exporter.model.verdicts import (
    REASONS,
    REASONS_BY_NAME,
    Cell,
    FabricManager,
    FallenOffBus,
    MissingFromDriver,
    Reason,
)

# The GPU scenarios in table order, one GPU each (index = position); then one healthy GPU.
PLACED = [REASON_SCENARIOS[r.name] for r in REASONS if REASON_SCENARIOS.get(r.name) in GPU_SCENARIOS]
HEALTHY_INDEX = len(PLACED)
MISSING = "00000000:F9:00.0"  # the spare bus after the simulated GPUs' (0x18 .. 0xF8 in domain 0)


def bus_id(index: int) -> str:
    """The demo's PCI address of GPU ``index`` (15 buses per domain)."""
    domain, slot = divmod(index, 15)
    return f"{domain:08X}:{0x18 + 0x10 * slot:02X}:00.0"


def config(*node_scenarios: str) -> str:
    lines = [f"gpus: {HEALTHY_INDEX + 1}", "state: idle", "extras:", "  seed: 7", "  scenarios:"]
    lines += [f"    - {{name: {name}, gpu: {index}}}" for index, name in enumerate(PLACED)]
    lines += [f"    - {name}" for name in node_scenarios]
    return "\n".join(lines) + "\n"


def where(reason: Reason) -> str:
    """The PCI address of the GPU the reason's scenario shows it on."""
    scenario = REASON_SCENARIOS[reason.name]
    return MISSING if scenario == MISSING_FROM_DRIVER else bus_id(PLACED.index(scenario))


def evidence_words(reason: Reason) -> str:
    """What the reason's evidence must say, from what its scenario simulates."""
    if isinstance(reason.check, FallenOffBus):
        return "fell off the bus"
    if isinstance(reason.check, MissingFromDriver):
        return f"the PCI bus lists {MISSING}, the driver does not"
    if REASON_SCENARIOS[reason.name] == STUCK_NVIDIA_SMI:
        return "1 nvidia-smi children SIGKILL did not end"
    fault: GpuFault = GPU_SCENARIOS[REASON_SCENARIOS[reason.name]]
    if fault.rising:
        return f"{fault.rising} rose from "
    if fault.xid:
        return f"XID {fault.xid} x{fault.xid_count}"
    cells = dict(fault.cells)
    if isinstance(reason.check, FabricManager):
        return ", ".join(f"{name} = {cells[name]}" for name in FABRIC_FIELDS)
    assert isinstance(reason.check, Cell)
    (name,) = [spelling for spelling in reason.check.fields if spelling in cells]
    return f"{name} = {cells[name]}"


@dataclass
class Seen:
    """What one phase of the exporter served: the verdict's families (parsed once), /-/health, the plugin's answers."""

    infos: list[Sample]
    states: list[Sample]
    report: dict[str, Any]
    plugin: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (pci, state asked) -> answer


def ask_plugin(url: str, pci: str, state: str) -> tuple[int, str]:
    """The npd-plugin as node-problem-detector runs it, for one GPU."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = npd.main([f"--url={url}/-/health", f"--gpu={pci}", f"--state={state}", "--max-length=200"])
    return status, out.getvalue().rstrip("\n")


def look(handle: Exporter, gpus: list[str]) -> Seen:
    metrics = handle.scrape()
    infos = series(metrics, "nvidia_gpu_exporter_gpu_health_reason_info")
    states = series(metrics, "nvidia_gpu_exporter_gpu_health_state")
    seen = Seen(infos, states, json.loads(handle.get("/-/health").text))
    for pci in gpus:
        for state in ("degraded", "failing"):
            seen.plugin[(pci, state)] = ask_plugin(handle.url, pci, state)
    return seen


@pytest.fixture(scope="module")
def phases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Seen, Seen]]:
    path = tmp_path_factory.mktemp("scenarios") / "demo.yaml"
    path.write_text(config(MISSING_FROM_DRIVER), encoding="utf-8")
    handle = start_exporter(["--collect.backend=demo", f"--demo-config={path}"])
    try:
        everyone = [*(bus_id(index) for index in range(HEALTHY_INDEX + 1)), MISSING]
        handle.scrape()  # a rising counter needs a collection before the one that sees it rise
        first = look(handle, everyone)
        path.write_text(config(MISSING_FROM_DRIVER, STUCK_NVIDIA_SMI), encoding="utf-8")
        second = look(handle, [bus_id(HEALTHY_INDEX)])
        yield first, second
        (said,) = handle.logged(f'{MISSING_FROM_DRIVER}, {STUCK_NVIDIA_SMI}"')  # the scene's line, once
        assert f'msg="demo scenarios on: simulating faults" scenarios="{PLACED[0]} on GPU 0, ' in said
    finally:
        handle.stop()


def seen_for(phases: tuple[Seen, Seen], reason: Reason) -> tuple[Seen, str]:
    """The phase that shows the reason and the GPU it shows it on."""
    if REASON_SCENARIOS[reason.name] == STUCK_NVIDIA_SMI:
        return phases[1], bus_id(HEALTHY_INDEX)
    return phases[0], where(reason)


def reasons_of(report: dict[str, Any], pci: str) -> dict[str, dict[str, Any]]:
    (gpu,) = [gpu for gpu in report["gpus"] if gpu["pci_bus_id"] == pci]
    return {found["reason"]: found for part in gpu["subsystems"] for found in part["reasons"]}


def test_every_reason_has_a_scenario() -> None:
    """A reason added to the table without a demo scenario fails here (and so is in no test below)."""
    assert sorted(REASON_SCENARIOS) == sorted(reason.name for reason in REASONS)


@pytest.mark.parametrize("reason", REASONS, ids=[reason.name for reason in REASONS])
def test_the_json_route_gives_the_reasons_state_evidence_and_action(phases: tuple[Seen, Seen], reason: Reason) -> None:
    seen, pci = seen_for(phases, reason)
    found = reasons_of(seen.report, pci)
    assert list(found) == [reason.name]  # one reason per GPU: its scenario's
    shown = found[reason.name]
    assert (shown["state"], shown["action"], shown["action_text"]) == (
        reason.state.label,
        reason.action.value,
        reason.action.text,
    )
    assert evidence_words(reason) in shown["evidence"]


@pytest.mark.parametrize("reason", REASONS, ids=[reason.name for reason in REASONS])
def test_the_metrics_give_the_reasons_state_and_action(phases: tuple[Seen, Seen], reason: Reason) -> None:
    seen, pci = seen_for(phases, reason)
    infos = [sample.labels for sample in seen.infos if sample.labels["pci_bus_id"] == pci]
    assert [(info["reason"], info["subsystem"], info["state"], info["action"]) for info in infos] == [
        (reason.name, reason.subsystem.value, reason.state.label, reason.action.value)
    ]
    states = {
        sample.labels["subsystem"]: float(sample.value) for sample in seen.states if sample.labels["pci_bus_id"] == pci
    }
    assert states[reason.subsystem.value] == reason.state
    assert sum(states.values()) == reason.state  # the other subsystems are ok


@pytest.mark.parametrize("reason", REASONS, ids=[reason.name for reason in REASONS])
def test_the_npd_plugin_names_the_reason_and_action(phases: tuple[Seen, Seen], reason: Reason) -> None:
    seen, pci = seen_for(phases, reason)
    problem = (1, f"GPU {pci} {reason.state.label}: {reason.name} ({reason.action.value})")
    assert seen.plugin[(pci, "degraded")] == problem
    if reason.state.label == "degraded":
        assert seen.plugin[(pci, "failing")] == (0, "1 GPUs, none failing (worst: degraded)")
    else:
        assert seen.plugin[(pci, "failing")] == problem


def test_the_gpu_without_a_scenario_stays_healthy(phases: tuple[Seen, Seen]) -> None:
    pci = bus_id(HEALTHY_INDEX)
    assert reasons_of(phases[0].report, pci) == {}
    assert phases[0].plugin[(pci, "degraded")] == (0, "1 GPUs, none degraded")


def test_a_node_fault_shows_on_every_gpu(phases: tuple[Seen, Seen]) -> None:
    stuck = REASONS_BY_NAME["stuck_nvidia_smi"]
    gpus = [gpu for gpu in phases[1].report["gpus"] if gpu["pci_bus_id"] != MISSING]
    assert len(gpus) == HEALTHY_INDEX + 1
    assert all(stuck.name in reasons_of(phases[1].report, gpu["pci_bus_id"]) for gpu in gpus)
