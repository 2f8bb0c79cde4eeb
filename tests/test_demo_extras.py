"""The demo's NVML surface (docs/demo.md, "The extras block"): ``extras:`` validation, and the synthesis
driven through the real :class:`DemoBackend` with a controlled clock: determinism per seed, energy
integrating power, hot busy MIG instances, windowed activity, growing XID counters, MIG attribution, and
the per-cycle config re-read."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from nvidia_gpu_exporter.backends import BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.demo.backend import POWER_QUERY_ARGS, DemoBackend, build_scene, parse_demo_config
from nvidia_gpu_exporter.backends.demo.extras import (
    DEFAULT_PCIE_RX,
    DEFAULT_PCIE_TX,
    DEFAULT_SCENARIO,
    DEFAULT_XID_CODES,
    GIB,
    GPU_SCENARIOS,
    MAX_XIDS_PER_CYCLE,
    SCENARIOS,
    Bounds,
    ExtrasError,
    ExtrasSpec,
    MigInstanceSpec,
    XidEventSpec,
)
from nvidia_gpu_exporter.backends.exec.output import parse_gpu_csv
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    MigInstanceReading,
    NvmlExtras,
    Readings,
    Snapshot,
    StuckChildren,
    XidRecord,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
STEP = 10.0
T0 = 1_700_000_000.0


@dataclass
class Clock:
    """A wall clock the test moves by hand."""

    now: float = T0

    def __call__(self) -> float:
        return self.now


def start(
    tmp_path: Path | None = None,
    config: str | None = None,
    *,
    clock: Clock | None = None,
    names: str = "AUTO",
    compute_apps: bool = False,
    mig_labels: bool = False,
) -> DemoBackend:
    """A started demo backend; ``config`` is written to ``tmp_path/demo.yaml`` when given."""
    path = ""
    if config is not None:
        assert tmp_path is not None
        file = tmp_path / "demo.yaml"
        file.write_text(config, encoding="utf-8")
        path = str(file)
    started = DemoBackend.start(
        FieldRequest(names),
        config_path=path,
        compute_apps=compute_apps or mig_labels,
        mig_process_labels=mig_labels,
        clock=clock or Clock(),
    )
    return asyncio.run(started)


def collect(backend: DemoBackend) -> Readings:
    return asyncio.run(backend.collect())


def extras_of(readings: Readings) -> NvmlExtras:
    assert readings.extras is not None
    return readings.extras


def cycles(backend: DemoBackend, clock: Clock, count: int, step: float = STEP) -> list[NvmlExtras]:
    """``count`` collections, the clock moving ``step`` seconds before each one after the first."""
    out: list[NvmlExtras] = []
    for number in range(count):
        if number:
            clock.now += step
        out.append(extras_of(collect(backend)))
    return out


def column(backend: DemoBackend, readings: Readings, qfield: str) -> list[str]:
    index = [field.qfield for field in backend.fields].index(qfield)
    return [row[index] for row in readings.gpus.rows]


def watts(cell: str) -> float:
    return float(cell.removesuffix(" W"))


def instance(extras: NvmlExtras, gi: int) -> MigInstanceReading:
    return next(reading for reading in extras.mig_instances if reading.gpu_instance_id == gi)


def render(backend: DemoBackend, readings: Readings) -> str:
    expo = Exposition(backend.fields, backend.status_family)
    return expo.render(Snapshot(Attempt(readings, 0, 0.0, T0), 0, T0, 1, backend.xid_records()))


SEEDED = """\
extras:
  seed: 7
  mig:
    - gpu: 0
      instances:
        - {gi: 2, profile: 3g.71gb, cis: 2, busy: true}
        - {gi: 7, profile: 1g.18gb}
  xids:
    initial:
      - {gpu: 1, xid: 79, count: 2}
"""


# -- validation -------------------------------------------------------------------------------------------


def extras(block: str) -> ExtrasSpec:
    """The validated ``extras:`` of a demo config whose ``extras:`` value is ``block`` (YAML)."""
    return parse_demo_config(f"extras: {block}\n".encode(), "demo.yaml")[1]


INSTANCE = "extras:\n  mig:\n    - gpu: 0\n      instances:\n        - "
"""A config up to its first MIG instance (line 5), which each case completes."""


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(
            "extras: not a mapping", 'line 1: extras: must be a mapping, got "not a mapping"', id="not-mapping"
        ),
        pytest.param(
            "extras:\n  bogus: 1",
            'line 2: extras: unknown key "bogus", want one of seed, energy-fallback-power-watts, pcie, mig, xids, '
            "lost-gpus, scenarios",
            id="unknown-top-key",
        ),
        pytest.param(
            "extras:\n  seed: 1\n  seed: 2",
            'line 3: extras: duplicate key "seed" (first at line 2)',
            id="duplicate-key",
        ),
        pytest.param(
            "extras:\n  pcie:\n    tx-bytes-per-second: {min: 1, min: 2, max: 3}",
            'line 3: extras.pcie.tx-bytes-per-second: duplicate key "min" (first at line 3)',
            id="duplicate-nested-key",
        ),
        pytest.param(
            "extras:\n  seed: forty-two", 'line 2: extras.seed: must be an integer, got "forty-two"', id="seed-text"
        ),
        pytest.param("extras:\n  seed: true", 'line 2: extras.seed: must be an integer, got "true"', id="seed-bool"),
        pytest.param("extras:\n  seed: '42'", 'line 2: extras.seed: must be an integer, got "42"', id="seed-quoted"),
        pytest.param(
            "extras:\n  seed: 9223372036854775808",
            "line 2: extras.seed: integer 9223372036854775808 is out of the int64 range",
            id="seed-big",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: -1",
            "line 2: extras.energy-fallback-power-watts: must not be negative, got -1",
            id="fallback-negative",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: .nan",
            'line 2: extras.energy-fallback-power-watts: must be a finite number, got ".nan"',
            id="fallback-nan",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: -Infinity",
            'line 2: extras.energy-fallback-power-watts: must be a finite number, got "-Infinity"',
            id="fallback-go-infinity",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: +nan",
            'line 2: extras.energy-fallback-power-watts: must be a number, got "+nan"',
            id="fallback-signed-nan-is-not-a-go-number",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: lots",
            'line 2: extras.energy-fallback-power-watts: must be a number, got "lots"',
            id="fallback-text",
        ),
        pytest.param(
            "extras:\n  energy-fallback-power-watts: '120'",
            'line 2: extras.energy-fallback-power-watts: must be a number, got "120"',
            id="fallback-quoted-number",
        ),
        pytest.param(
            "extras:\n  pcie:\n    tx: 1",
            'line 3: extras.pcie: unknown key "tx", want one of tx-bytes-per-second, rx-bytes-per-second',
            id="pcie-unknown-key",
        ),
        pytest.param(
            "extras:\n  pcie:\n    tx-bytes-per-second: {min: 3, max: 2}",
            "line 3: extras.pcie.tx-bytes-per-second: min 3 is greater than max 2",
            id="pcie-min-above-max",
        ),
        pytest.param(
            "extras:\n  pcie:\n    rx-bytes-per-second: {min: -1, max: 2}",
            "line 3: extras.pcie.rx-bytes-per-second.min: must not be negative, got -1",
            id="pcie-negative",
        ),
        pytest.param(
            "extras:\n  pcie:\n    tx-bytes-per-second: {min: 1}",
            "line 3: extras.pcie.tx-bytes-per-second.max: required",
            id="pcie-missing-max",
        ),
        pytest.param(
            "extras:\n  pcie:\n    rx-bytes-per-second:\n      min: 0\n      max: .inf",
            'line 5: extras.pcie.rx-bytes-per-second.max: must be a finite number, got ".inf"',
            id="pcie-infinite",
        ),
        pytest.param(
            "extras:\n  pcie:\n    rx-bytes-per-second: {min: 0, max: 1, avg: 1}",
            'line 3: extras.pcie.rx-bytes-per-second: unknown key "avg", want one of min, max',
            id="pcie-bounds-unknown-key",
        ),
        pytest.param(
            "extras:\n  pcie:\n    rx-bytes-per-second: 5",
            'line 3: extras.pcie.rx-bytes-per-second: must be a mapping, got "5"',
            id="pcie-bounds-not-mapping",
        ),
        pytest.param(
            "extras:\n  mig: {gpu: 0}", "line 2: extras.mig: must be a list, got a mapping", id="mig-not-list"
        ),
        pytest.param(
            "extras:\n  mig:\n    - gpu: 0", "line 3: extras.mig[0].instances: required", id="mig-no-instances"
        ),
        pytest.param(
            "extras:\n  mig:\n    - {gpu: 0, instances: []}",
            "line 3: extras.mig[0].instances: needs at least one GPU instance",
            id="mig-empty-instances",
        ),
        pytest.param(
            "extras:\n  mig:\n    - instances: [{gi: 1, profile: 1g.10gb}]",
            "line 3: extras.mig[0].gpu: required",
            id="mig-without-gpu",
        ),
        pytest.param(
            "extras:\n  mig:\n    - {gpu: -1, instances: [{gi: 1, profile: 1g.10gb}]}",
            "line 3: extras.mig[0].gpu: must be at least 0, got -1",
            id="mig-negative-gpu",
        ),
        pytest.param(
            "extras:\n  mig:\n    - {gpu: 0, instances: [{gi: 1, profile: 1g.10gb}]}\n"
            "    - {gpu: 0, instances: [{gi: 2, profile: 1g.10gb}]}",
            "line 4: extras.mig[1].gpu: GPU 0 already has a MIG topology",
            id="mig-duplicate-gpu",
        ),
        pytest.param("extras:\n  mig: [7]", 'line 2: extras.mig[0]: must be a mapping, got "7"', id="mig-entry-scalar"),
        pytest.param(
            INSTANCE + "{gi: 1, profile: 1g.10gb, slices: 2}",
            'line 5: extras.mig[0].instances[0]: unknown key "slices", want one of gi, profile, cis, '
            "memory-total-bytes, busy",
            id="instance-unknown-key",
        ),
        pytest.param(
            INSTANCE + "{profile: 1g.10gb}", "line 5: extras.mig[0].instances[0].gi: required", id="instance-without-gi"
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: 1g.10gb}\n        - {gi: 1, profile: 2g.20gb}",
            "line 6: extras.mig[0].instances[1].gi: GPU instance 1 is listed twice",
            id="instance-duplicate-gi",
        ),
        pytest.param(
            INSTANCE + "{gi: 1}", "line 5: extras.mig[0].instances[0].profile: required", id="instance-without-profile"
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: ' '}",
            'line 5: extras.mig[0].instances[0].profile: must be a non-empty string, got " "',
            id="instance-blank-profile",
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: custom}",
            'line 5: extras.mig[0].instances[0].memory-total-bytes: required, the profile "custom" has no .<N>gb '
            "size to derive it",
            id="profile-without-size-needs-memory",
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: 1g.10gb, cis: -1}",
            "line 5: extras.mig[0].instances[0].cis: must be at least 0, got -1",
            id="instance-negative-cis",
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: 1g.10gb, busy: yes please}",
            'line 5: extras.mig[0].instances[0].busy: must be true or false, got "yes please"',
            id="instance-busy-not-bool",
        ),
        pytest.param(
            INSTANCE + "{gi: 1, profile: 1g.10gb, memory-total-bytes: 0}",
            "line 5: extras.mig[0].instances[0].memory-total-bytes: must be at least 1, got 0",
            id="instance-zero-memory",
        ),
        pytest.param(
            "extras:\n  xids:\n    history: []",
            'line 3: extras.xids: unknown key "history", want one of initial, interval, codes',
            id="xids-unknown-key",
        ),
        pytest.param(
            "extras:\n  xids:\n    initial: {gpu: 0}",
            "line 3: extras.xids.initial: must be a list, got a mapping",
            id="xids-initial-not-list",
        ),
        pytest.param(
            "extras:\n  xids:\n    initial: [{gpu: 0}]",
            "line 3: extras.xids.initial[0].xid: required",
            id="xid-without-code",
        ),
        pytest.param(
            "extras:\n  xids:\n    initial: [{gpu: -2, xid: 79}]",
            "line 3: extras.xids.initial[0].gpu: must be at least 0, got -2",
            id="xid-negative-gpu",
        ),
        pytest.param(
            "extras:\n  xids:\n    initial: [{gpu: 0, xid: 79, when: 1}]",
            'line 3: extras.xids.initial[0]: unknown key "when", want one of gpu, xid, count',
            id="xid-unknown-key",
        ),
        pytest.param(
            "extras:\n  xids:\n    interval: 0s",
            'line 3: extras.xids.interval: must be greater than 0, got "0s"',
            id="interval-zero",
        ),
        pytest.param(
            "extras:\n  xids:\n    interval: soon",
            'line 3: extras.xids.interval: time: invalid duration "soon"',
            id="interval-not-duration",
        ),
        pytest.param(
            "extras:\n  xids:\n    interval: 10",
            'line 3: extras.xids.interval: time: missing unit in duration "10"',
            id="interval-without-unit",
        ),
        pytest.param(
            "extras:\n  xids:\n    interval: [10m]",
            "line 3: extras.xids.interval: must be a string, got a list",
            id="interval-list",
        ),
        pytest.param(
            "extras:\n  xids:\n    codes: []",
            "line 3: extras.xids.codes: needs at least one XID code",
            id="codes-empty",
        ),
        pytest.param(
            "extras:\n  xids:\n    codes:\n      - 13\n      - x",
            'line 5: extras.xids.codes[1]: must be an integer, got "x"',
            id="codes-text",
        ),
        pytest.param(
            "extras:\n  lost-gpus: [nvidia, amdgpu]",
            'line 2: extras.lost-gpus[1]: must be one of nvidia, vfio-pci, none, got "amdgpu"',
            id="lost-gpu-unknown-driver",
        ),
        pytest.param(
            "extras:\n  lost-gpus: [" + ", ".join(["none"] * 9) + "]",
            "line 2: extras.lost-gpus: at most 8 lost GPUs, got 9",
            id="lost-gpus-bounded",
        ),
        pytest.param(
            "extras:\n  scenarios: [lost-gpu, healthy]",
            f'line 2: extras.scenarios[1]: must be one of {", ".join(SCENARIOS)}, got "healthy"',
            id="scenario-unknown",
        ),
        pytest.param(
            "extras:\n  scenarios:\n    - {name: remapped-rows-failure, gpu: 0}\n    - {name: lost-gpu, gpu: 1}",
            'line 4: extras.scenarios[1].gpu: the scenario "lost-gpu" is not one GPU\'s: it takes no gpu',
            id="node-scenario-on-a-gpu",
        ),
        pytest.param(
            "extras:\n  scenarios: [{gpu: 0}]",
            "line 2: extras.scenarios[0].name: required",
            id="scenario-without-a-name",
        ),
        pytest.param(
            "extras:\n  scenarios: [{name: xid-nvlink, gpus: 0}]",
            'line 2: extras.scenarios[0]: unknown key "gpus", want one of name, gpu',
            id="scenario-unknown-key",
        ),
        pytest.param(
            "extras:\n  scenarios: [xid-79, xid-79]",
            'line 2: extras.scenarios[1]: the scenario "xid-79" is listed twice',
            id="scenario-twice",
        ),
        pytest.param(
            "extras:\n  lost-gpus: [" + ", ".join(["none"] * 8) + "]\n  scenarios: [lost-gpu]",
            "line 3: extras.scenarios: lost-gpu would lose more than 8 GPUs with extras.lost-gpus",
            id="scenario-lost-gpus-bounded",
        ),
        pytest.param(
            "extras:\n  scenarios: lost-gpu",
            'line 2: extras.scenarios: must be a list, got "lost-gpu"',
            id="scenarios-not-list",
        ),
    ],
)
def test_invalid_extras_name_the_key_path_and_line(config: str, message: str) -> None:
    with pytest.raises(BackendSetupError) as caught:
        parse_demo_config(config.encode(), "demo.yaml")
    assert str(caught.value) == f'config "demo.yaml": {message}'


@pytest.mark.parametrize(
    ("block", "count", "message"),
    [
        pytest.param(
            "{mig: [{gpu: 2, instances: [{gi: 1, profile: 1g.10gb}]}]}",
            2,
            "extras.mig[0].gpu: GPU 2 does not exist (2 GPUs)",
            id="mig-gpu-beyond-count",
        ),
        pytest.param(
            "{xids: {initial: [{gpu: 1, xid: 79}]}}",
            1,
            "extras.xids.initial[0].gpu: GPU 1 does not exist (1 GPUs)",
            id="xid-gpu-beyond-count",
        ),
        pytest.param(
            "{scenarios: [lost-gpu, {name: xid-nvlink, gpu: 2}]}",
            2,
            "extras.scenarios[1].gpu: GPU 2 does not exist (2 GPUs)",
            id="scenario-gpu-beyond-count",
        ),
    ],
)
def test_gpu_indices_are_checked_against_the_simulated_gpus(block: str, count: int, message: str) -> None:
    with pytest.raises(ExtrasError) as caught:
        extras(block).check_gpu_count(count)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        pytest.param("", ExtrasSpec(), id="null-block-defaults"),
        pytest.param("{}", ExtrasSpec(), id="empty-block-defaults"),
        pytest.param("{energy-fallback-power-watts: 0}", ExtrasSpec(fallback_watts=120.0), id="zero-fallback-default"),
        pytest.param("{energy-fallback-power-watts: 7.5}", ExtrasSpec(fallback_watts=7.5), id="fallback"),
        pytest.param(
            "{pcie: {tx-bytes-per-second: {min: 1e6, max: 2.5e6}}}",
            ExtrasSpec(pcie_tx=Bounds(1e6, 2.5e6)),
            id="exponent-text-is-a-number",
        ),
        pytest.param(
            "{pcie: {rx-bytes-per-second: {min: 0x1p20, max: 0x10p20}}}",
            ExtrasSpec(pcie_rx=Bounds(2.0**20, 2.0**24)),
            id="go-hex-float-is-a-number",
        ),
        pytest.param("{seed: -5, xids: ~, mig: ~, pcie: ~}", ExtrasSpec(seed=-5), id="nulls-mean-unset"),
        pytest.param(
            "{lost-gpus: [nvidia, vfio-pci, none]}",
            ExtrasSpec(lost_gpus=("nvidia", "vfio-pci", "none")),
            id="lost-gpus-by-the-driver-sysfs-shows",
        ),
    ],
)
def test_valid_extras_parse_to_defaults_and_values(block: str, expected: ExtrasSpec) -> None:
    assert extras(block) == expected


@pytest.mark.parametrize(
    ("names", "gpus", "expected"),
    [
        pytest.param("[]", 2, ExtrasSpec(), id="none"),
        pytest.param("[lost-gpu]", 2, ExtrasSpec(lost_gpus=("nvidia",)), id="lost-gpu"),
        pytest.param("[xid-79]", 2, ExtrasSpec(xid_initial=(XidEventSpec(1, 79, 2),)), id="xid-79-on-the-second-gpu"),
        pytest.param("[xid-79]", 1, ExtrasSpec(xid_initial=(XidEventSpec(0, 79, 2),)), id="xid-79-on-the-only-gpu"),
        pytest.param("[random-xids]", 2, ExtrasSpec(xid_interval_seconds=600.0), id="random-xids"),
    ],
)
def test_each_scenario_adds_its_fault(names: str, gpus: int, expected: ExtrasSpec) -> None:
    spec = extras(f"{{scenarios: {names}}}")
    assert replace(spec.with_scenarios(gpus), scenarios=()) == expected


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        pytest.param("[xid-nvlink]", ExtrasSpec(xid_initial=(XidEventSpec(1, 74, 1),)), id="an-xid-on-the-second-gpu"),
        pytest.param("[{name: xid-nvlink, gpu: 2}]", ExtrasSpec(xid_initial=(XidEventSpec(2, 74, 1),)), id="on-gpu-2"),
        pytest.param(
            "[{name: remapped-rows-failure, gpu: 0}]",
            ExtrasSpec(gpu_faults=((0, GPU_SCENARIOS["remapped-rows-failure"]),)),
            id="cells-on-gpu-0",
        ),
        pytest.param("[missing-from-driver]", ExtrasSpec(lost_gpus=("none",)), id="missing-from-driver"),
    ],
)
def test_a_gpu_scenario_acts_on_the_gpu_it_names(names: str, expected: ExtrasSpec) -> None:
    spec = extras(f"{{scenarios: {names}}}")
    assert replace(spec.with_scenarios(4), scenarios=(), scenario_gpus=()) == expected


def test_a_gpu_scenarios_cells_are_what_its_gpu_prints(tmp_path: Path) -> None:
    config = (
        "gpus: 3\nextras:\n  scenarios: [{name: remapped-rows-failure, gpu: 2}, uncorrectable-ecc-aggregate-rose]\n"
    )
    backend = start(tmp_path, config)
    columns = {field.qfield: position for position, field in enumerate(backend.fields)}
    rows = [collect(backend).gpus.rows for _ in range(2)]
    assert [row[columns["remapped_rows.failure"]] for row in rows[0]] == ["No", "No", "Yes"]
    counts = [[int(row[columns["ecc.errors.uncorrected.aggregate.total"]]) for row in table] for table in rows]
    assert (counts[0][0], counts[1][0], counts[0][2], counts[1][2]) == (0, 0, 0, 0)
    assert counts[1][1] == counts[0][1] + 1  # one more at every collection, on the second GPU alone


def test_a_sustained_reasons_cells_have_held_since_before_the_demo_started(tmp_path: Path) -> None:
    backend = start(tmp_path, "extras:\n  scenarios: [sustained-power-cap]\n", clock=Clock())
    readings = collect(backend)
    uuid = readings.gpus.rows[1][[field.qfield for field in backend.fields].index("uuid")]
    assert readings.held_since == {(uuid, "clocks_event_reasons.sw_power_cap"): T0 - 1800.0}


def test_the_stuck_nvidia_smi_scenario_simulates_a_stuck_child(tmp_path: Path) -> None:
    assert start().stuck_children() is None
    assert start(tmp_path, "extras:\n  scenarios: [stuck-nvidia-smi]\n").stuck_children() == StuckChildren(1, 1)


def test_gpu_scenarios_need_the_simulated_gpus() -> None:
    capture = Path(__file__).resolve().parent / "fixtures" / "captures" / "fixture-linux-2gpu-mig.txt"
    settings, spec = parse_demo_config(
        f"capture: {capture}\nextras:\n  scenarios: [hw-power-brake]\n".encode(), "d.yaml"
    )
    with pytest.raises(BackendSetupError, match="hw-power-brake change the simulated GPUs' readings"):
        asyncio.run(build_scene(settings, spec, "d.yaml"))


def test_scenarios_add_to_what_the_config_sets() -> None:
    spec = extras("{scenarios: [lost-gpu, xid-79, random-xids], lost-gpus: [vfio-pci], xids: {interval: 1m}}")
    applied = spec.with_scenarios(4)
    assert applied.lost_gpus == ("vfio-pci", "nvidia")
    assert applied.xid_initial == (XidEventSpec(1, 79, 2),)
    assert applied.xid_interval_seconds == 60.0  # the config's interval wins


def test_every_scenario_is_documented() -> None:
    """docs/demo.md's table of faults lists each scenario the code knows, with nothing else."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "demo.md").read_text(encoding="utf-8")
    section = text.split("## Faults on request", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.MULTILINE) == list(SCENARIOS)


def test_the_default_scenario_simulates_no_fault() -> None:
    assert (DEFAULT_SCENARIO.xid_initial, DEFAULT_SCENARIO.xid_interval_seconds) == ((), None)
    assert (DEFAULT_SCENARIO.lost_gpus, DEFAULT_SCENARIO.scenarios) == ((), ())


def test_a_config_without_extras_gets_the_plain_defaults() -> None:
    assert parse_demo_config(b"gpus: 1\n", "demo.yaml")[1] == ExtrasSpec()


@pytest.mark.parametrize(
    ("instance", "expected"),
    [
        pytest.param("{gi: 3, profile: 2g.35gb}", MigInstanceSpec(3, "2g.35gb", 1, 35 * GIB, False), id="derived"),
        pytest.param(
            "{gi: 3, profile: custom, memory-total-bytes: 1000, cis: 0, busy: true}",
            MigInstanceSpec(3, "custom", 0, 1000, True),
            id="explicit",
        ),
        pytest.param(
            "{gi: 3, profile: 2g.35gb, cis: ~, busy: ~, memory-total-bytes: ~}",
            MigInstanceSpec(3, "2g.35gb", 1, 35 * GIB, False),
            id="nulls-mean-defaults",
        ),
    ],
)
def test_mig_instance_defaults(instance: str, expected: MigInstanceSpec) -> None:
    spec = extras(f"{{mig: [{{gpu: 0, instances: [{instance}]}}]}}")
    assert spec.mig[0].instances == (expected,)


def test_xid_event_with_count_zero_is_ignored() -> None:
    spec = extras("{xids: {initial: [{gpu: 0, xid: 13, count: 0}, {gpu: 0, xid: 31}]}}")
    assert spec.xid_initial == (XidEventSpec(0, 31, 1),)


def test_xid_defaults_when_only_an_interval_is_set() -> None:
    spec = extras("{xids: {interval: 1m30s}}")
    assert (spec.xid_interval_seconds, spec.xid_codes) == (90.0, DEFAULT_XID_CODES)


def test_default_pcie_bounds() -> None:
    assert (DEFAULT_PCIE_TX.min, DEFAULT_PCIE_TX.max, DEFAULT_PCIE_RX.min, DEFAULT_PCIE_RX.max) == (
        0.2e9,
        3e9,
        0.5e9,
        8e9,
    )


def test_startup_rejects_a_mig_gpu_the_fleet_lacks(tmp_path: Path) -> None:
    config = "gpus: 1\nextras:\n  mig:\n    - {gpu: 1, instances: [{gi: 1, profile: 1g.10gb}]}\n"
    with pytest.raises(BackendSetupError, match=r"extras\.mig\[0\]\.gpu: GPU 1 does not exist \(1 GPUs\)"):
        start(tmp_path, config)


# -- determinism ------------------------------------------------------------------------------------------


def test_same_seed_and_clock_give_identical_scrapes(tmp_path: Path) -> None:
    texts = []
    for run in ("one", "two"):
        folder = tmp_path / run
        folder.mkdir()
        clock = Clock()
        backend = start(folder, SEEDED + "    interval: 15s\n", clock=clock)
        scrapes = []
        for _ in range(4):
            scrapes.append(render(backend, collect(backend)))
            clock.now += STEP
        texts.append(scrapes)
    assert texts[0] == texts[1]
    assert texts[0][1] != texts[0][2]  # seeded, yet moving


def test_same_seed_differs_only_in_wall_clock_values_when_timing_differs(tmp_path: Path) -> None:
    """Energy follows elapsed time; everything else is seed-determined."""
    results = []
    for run, step in (("fast", 1.0), ("slow", 37.0)):
        folder = tmp_path / run
        folder.mkdir()
        clock = Clock()
        backend = start(folder, SEEDED, clock=clock)
        results.append(cycles(backend, clock, 3, step))
    fast, slow = results
    for one, two in zip(fast, slow, strict=True):
        assert one.mig_devices == two.mig_devices
        assert one.mig_instances == two.mig_instances
        assert [(gpu.pcie_tx_bytes_per_second, gpu.pcie_rx_bytes_per_second) for gpu in one.gpus] == [
            (gpu.pcie_tx_bytes_per_second, gpu.pcie_rx_bytes_per_second) for gpu in two.gpus
        ]
    assert [gpu.energy_joules for gpu in fast[-1].gpus] != [gpu.energy_joules for gpu in slow[-1].gpus]


def test_different_seeds_draw_differently(tmp_path: Path) -> None:
    draws = []
    for seed in (1, 2):
        folder = tmp_path / str(seed)
        folder.mkdir()
        backend = start(folder, f"extras:\n  seed: {seed}\n")
        draws.append([gpu.pcie_tx_bytes_per_second for gpu in extras_of(collect(backend)).gpus])
    assert draws[0] != draws[1]


# -- energy -----------------------------------------------------------------------------------------------


def test_energy_starts_at_zero_on_first_sight(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)
    assert [gpu.energy_joules for gpu in extras_of(collect(backend)).gpus] == [0.0, 0.0]


def test_energy_integrates_the_served_power_draw(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    previous = collect(backend)
    totals = [0.0, 0.0]
    for _ in range(5):
        clock.now += STEP
        current = collect(backend)
        before = [watts(cell) for cell in column(backend, previous, "power.draw")]
        now = [watts(cell) for cell in column(backend, current, "power.draw")]
        totals = [total + (a + b) / 2 * STEP for total, a, b in zip(totals, before, now, strict=True)]
        assert [gpu.energy_joules for gpu in extras_of(current).gpus] == pytest.approx(totals)
        previous = current
    assert all(total > 0 for total in totals)


def test_energy_grows_every_cycle(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    series = [[gpu.energy_joules for gpu in extras.gpus] for extras in cycles(backend, clock, 6)]
    for earlier, later in itertools.pairwise(series):
        assert all(b is not None and a is not None and b > a for a, b in zip(earlier, later, strict=True))


def test_energy_uses_a_private_power_query_when_power_draw_is_not_served(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock, names="uuid,name")
    assert "power.draw" not in [field.qfield for field in backend.fields]

    def powers() -> list[float]:
        answer = asyncio.run(backend.scene.responder.run(POWER_QUERY_ARGS))
        return [watts(row[1]) for row in parse_gpu_csv(answer.stdout, 2).rows]

    collect(backend)
    first = powers()
    clock.now += STEP
    second_extras = extras_of(collect(backend))
    expected = [(a + b) / 2 * STEP for a, b in zip(first, powers(), strict=True)]
    assert [gpu.energy_joules for gpu in second_extras.gpus] == pytest.approx(expected)


def test_energy_falls_back_to_the_configured_watts(tmp_path: Path) -> None:
    clock = Clock()
    config = "overrides:\n  power.draw: '[N/A]'\nextras:\n  seed: 1\n  energy-fallback-power-watts: 50\n"
    backend = start(tmp_path, config, clock=clock)
    last = cycles(backend, clock, 3)[-1]
    assert [gpu.energy_joules for gpu in last.gpus] == pytest.approx([50 * 2 * STEP, 50 * 2 * STEP])


def test_energy_does_not_grow_when_no_time_passed(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    cycles(backend, clock, 2)
    before = [gpu.energy_joules for gpu in extras_of(collect(backend)).gpus]
    assert [gpu.energy_joules for gpu in extras_of(collect(backend)).gpus] == before


# -- PCIe -------------------------------------------------------------------------------------------------


def test_pcie_draws_stay_within_the_configured_bounds(tmp_path: Path) -> None:
    clock = Clock()
    config = (
        "extras:\n  seed: 3\n  pcie:\n    tx-bytes-per-second: {min: 1e6, max: 2e6}\n"
        "    rx-bytes-per-second: {min: 5, max: 5}\n"
    )
    backend = start(tmp_path, config, clock=clock)
    for extras in cycles(backend, clock, 8):
        for gpu in extras.gpus:
            assert gpu.pcie_tx_bytes_per_second is not None
            assert 1e6 <= gpu.pcie_tx_bytes_per_second <= 2e6
            assert gpu.pcie_rx_bytes_per_second == 5


# -- MIG --------------------------------------------------------------------------------------------------


def test_busy_mig_instance_uses_more_memory_than_an_idle_one(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    for extras in cycles(backend, clock, 6):
        busy, idle = instance(extras, 2), instance(extras, 7)
        assert busy.memory_used_bytes is not None
        assert idle.memory_used_bytes is not None
        busy_fraction = busy.memory_used_bytes / (71 * GIB)
        idle_fraction = idle.memory_used_bytes / (18 * GIB)
        assert busy_fraction >= 0.5
        assert idle_fraction <= 0.1


def test_busy_mig_instance_is_more_active_than_an_idle_one(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    windows = cycles(backend, clock, 6)[1:]
    for extras in windows:  # the activity ranges do not overlap: every window shows it
        busy, idle = instance(extras, 2), instance(extras, 7)
        for field in ("graphics_activity_ratio", "sm_activity_ratio", "sm_occupancy_ratio", "tensor_activity_ratio"):
            assert getattr(busy, field) > getattr(idle, field), field
    for field in ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"):  # PCIe shares overlap at the edges
        busy_total = sum(getattr(instance(extras, 2), field) for extras in windows)
        idle_total = sum(getattr(instance(extras, 7), field) for extras in windows)
        assert busy_total > idle_total, field


def test_mig_memory_adds_up(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)
    reading = instance(extras_of(collect(backend)), 2)
    assert reading.memory_total_bytes == 71 * GIB
    assert reading.memory_reserved_bytes == (71 * GIB) // 200
    assert reading.memory_used_bytes is not None
    assert reading.memory_free_bytes == 71 * GIB - reading.memory_used_bytes - (71 * GIB) // 200


@pytest.mark.parametrize(
    ("cycle", "present"),
    [pytest.param(0, False, id="first-cycle-absent"), pytest.param(1, True, id="second-cycle-present")],
)
def test_mig_activity_needs_a_previous_sighting(tmp_path: Path, cycle: int, present: bool) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    extras = cycles(backend, clock, 2)[cycle]
    activity = [reading.sm_activity_ratio for reading in extras.mig_instances]
    assert all((value is not None) is present for value in activity)
    assert all(reading.memory_used_bytes is not None for reading in extras.mig_instances)


def test_mig_devices_one_per_compute_instance_with_hashed_uuids(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)
    readings = collect(backend)
    parent = column(backend, readings, "uuid")[0]

    def expected_uuid(gi: int, ci: int, profile: str) -> str:
        text = hashlib.sha256(f"{normalize_uuid(parent)}/{gi}/{ci}/{profile}".encode()).hexdigest()
        return f"MIG-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"

    devices = [
        (device.gpu_uuid, device.mig_uuid, device.gpu_instance_id, device.compute_instance_id, device.profile)
        for device in extras_of(readings).mig_devices
    ]
    assert devices == [
        (parent, expected_uuid(2, 0, "3g.71gb"), 2, 0, "1c.3g.71gb"),
        (parent, expected_uuid(2, 1, "3g.71gb"), 2, 1, "1c.3g.71gb"),
        (parent, expected_uuid(7, 0, "1g.18gb"), 7, 0, "1g.18gb"),
    ]


@pytest.mark.parametrize(
    ("config", "modes"),
    [
        pytest.param(SEEDED, [("Enabled", "Enabled"), ("Disabled", "Disabled")], id="mig-gpu-enabled"),
        pytest.param("extras:\n  seed: 1\n", [("Disabled", "Disabled"), ("Disabled", "Disabled")], id="no-mig"),
        pytest.param(
            SEEDED + "overrides:\n  mig.mode.pending: Disabled\n",
            [("Enabled", "Disabled"), ("Disabled", "Disabled")],
            id="config-override-wins",
        ),
    ],
)
def test_mig_mode_follows_the_topology(tmp_path: Path, config: str, modes: list[tuple[str, str]]) -> None:
    backend = start(tmp_path, config)
    readings = collect(backend)
    served = list(
        zip(column(backend, readings, "mig.mode.current"), column(backend, readings, "mig.mode.pending"), strict=True)
    )
    assert served == modes


def test_default_scenario_has_mig_on_gpu_zero_and_no_fault() -> None:
    clock = Clock()
    backend = start(clock=clock)
    readings = collect(backend)
    uuids = column(backend, readings, "uuid")
    extras = extras_of(readings)
    assert {(device.gpu_uuid, device.gpu_instance_id, device.profile) for device in extras.mig_devices} == {
        (uuids[0], 2, "1c.3g.71gb"),
        (uuids[0], 7, "1g.18gb"),
    }
    assert backend.xid_records() == ()
    assert backend.scene.spec.xid_interval_seconds is None


def test_the_xid_79_and_random_xids_scenarios_bring_back_the_old_default_faults(tmp_path: Path) -> None:
    """What the default scenario simulated before it became healthy, now named (docs/demo.md, "Faults on request")."""
    clock = Clock()
    backend = start(tmp_path, "extras:\n  scenarios: [xid-79, random-xids]\n", clock=clock)
    readings = collect(backend)
    uuids = column(backend, readings, "uuid")
    assert backend.xid_records() == (XidRecord(uuids[1], 79, 2, T0),)
    assert backend.scene.spec.xid_interval_seconds == 600.0


def test_processes_on_a_mig_gpu_get_a_slot_from_their_pid(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED, mig_labels=True)
    readings = collect(backend)
    assert readings.processes is not None
    mig_parent = column(backend, readings, "uuid")[0]
    slots = [(2, 0), (2, 1), (7, 0)]
    rows = readings.processes.rows
    assert any(row.gpu_uuid == mig_parent for row in rows)
    assert any(row.gpu_uuid != mig_parent for row in rows)
    for row in rows:
        if row.gpu_uuid == mig_parent:
            gi, ci = slots[hashlib.sha256(row.pid.encode()).digest()[0] % len(slots)]
            assert (row.gpu_instance_id, row.compute_instance_id) == (str(gi), str(ci))
        else:
            assert (row.gpu_instance_id, row.compute_instance_id) == ("", "")


def test_processes_keep_empty_ids_without_the_mig_flag(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED, compute_apps=True)
    processes = collect(backend).processes
    assert processes is not None
    assert processes.rows
    assert {(row.gpu_instance_id, row.compute_instance_id) for row in processes.rows} == {("", "")}


# -- XIDs -------------------------------------------------------------------------------------------------


def test_initial_xids_are_applied_once_at_the_first_cycle(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    cycles(backend, clock, 3)
    records = backend.xid_records()
    assert [(record.xid, record.count, record.last_seen) for record in records] == [(79, 2, T0)]


def test_xid_counters_only_grow(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, "extras:\n  seed: 5\n  xids:\n    interval: 2s\n    codes: [13, 48]\n", clock=clock)
    history: list[dict[tuple[str, int], XidRecord]] = []
    for _ in range(30):
        collect(backend)
        history.append({(record.gpu_uuid, record.xid): record for record in backend.xid_records()})
        clock.now += 3.0
    for earlier, later in itertools.pairwise(history):
        for key, record in earlier.items():
            assert later[key].count >= record.count
            now, then = later[key].last_seen, record.last_seen
            assert now is not None  # the demo stamps every XID it simulates
            assert then is not None
            assert now >= then
    assert sum(record.count for record in history[-1].values()) > sum(record.count for record in history[1].values())
    assert {xid for _, xid in history[-1]} <= {13, 48}


def test_at_most_ten_ongoing_xids_per_cycle(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, "extras:\n  seed: 5\n  xids:\n    interval: 1s\n", clock=clock)
    collect(backend)
    clock.now += 3600.0
    collect(backend)
    assert sum(record.count for record in backend.xid_records()) == MAX_XIDS_PER_CYCLE


def test_xids_stay_visible_when_a_cycle_fails(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)
    collect(backend)
    before = backend.xid_records()
    (tmp_path / "demo.yaml").write_text("extras:\n  bogus: 1\n", encoding="utf-8")
    with pytest.raises(CollectionError):
        collect(backend)
    assert before
    assert backend.xid_records() == before


def test_failed_demo_cycle_snapshot_carries_xids_and_status_minus_one(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)

    async def scrape_twice() -> tuple[Any, Any]:
        collector = Collector(backend, timeout_seconds=None)
        first = await collector.scrape()
        (tmp_path / "demo.yaml").write_text("gpus: [broken\n", encoding="utf-8")
        return first, await collector.scrape()

    good, bad = asyncio.run(scrape_twice())
    assert bad.attempt is not None
    assert (bad.attempt.succeeded, bad.attempt.status_code) == (False, -1)
    assert bad.xids == good.xids != ()
    text = Exposition(backend.fields, backend.status_family).render(bad)
    assert "nvidia_smi_nvml_return_code -1\n" in text
    assert "nvidia_smi_xid_errors_total{" in text
    assert "nvidia_smi_energy_joules_total" not in text


# -- config re-read ---------------------------------------------------------------------------------------


def test_broken_edit_fails_one_cycle_then_recovers_with_state_kept(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    before = cycles(backend, clock, 2)[-1]
    path = tmp_path / "demo.yaml"
    path.write_text(SEEDED + "  bogus: 1\n", encoding="utf-8")
    clock.now += STEP
    with pytest.raises(CollectionError, match='line 11: extras: unknown key "bogus"') as caught:
        collect(backend)
    assert caught.value.status_code == -1
    path.write_text(SEEDED, encoding="utf-8")
    clock.now += STEP
    after = extras_of(collect(backend))
    energy_before = [gpu.energy_joules for gpu in before.gpus]
    energy_after = [gpu.energy_joules for gpu in after.gpus]
    assert all(b is not None and a is not None and b > a for a, b in zip(energy_before, energy_after, strict=True))
    assert all(reading.sm_activity_ratio is not None for reading in after.mig_instances)


def test_changed_file_resets_synthesized_state(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    cycles(backend, clock, 3)
    (tmp_path / "demo.yaml").write_text(SEEDED.replace("seed: 7", "seed: 8"), encoding="utf-8")
    clock.now += STEP
    after = extras_of(collect(backend))
    assert [gpu.energy_joules for gpu in after.gpus] == [0.0, 0.0]
    assert all(reading.sm_activity_ratio is None for reading in after.mig_instances)
    assert [(record.xid, record.count, record.last_seen) for record in backend.xid_records()] == [(79, 2, clock.now)]
    assert backend.scene.spec.seed == 8


def test_changed_file_applies_new_settings(tmp_path: Path) -> None:
    backend = start(tmp_path, SEEDED)
    collect(backend)
    (tmp_path / "demo.yaml").write_text(SEEDED + "overrides:\n  temperature.gpu: 91\n", encoding="utf-8")
    assert column(backend, collect(backend), "temperature.gpu") == ["91", "91"]


def test_unchanged_file_keeps_state(tmp_path: Path) -> None:
    clock = Clock()
    backend = start(tmp_path, SEEDED, clock=clock)
    scene = backend.scene
    (tmp_path / "demo.yaml").write_text(SEEDED, encoding="utf-8")  # rewritten, same bytes
    cycles(backend, clock, 2)
    assert backend.scene is scene


# -- capture replay ---------------------------------------------------------------------------------------


def test_capture_rows_of_mig_gpus_report_mig_enabled(tmp_path: Path) -> None:
    capture = FIXTURES / "fixture-linux-2gpu-mig.txt"
    config = (
        f"capture: '{capture}'\nstate: load\n"
        + "extras:\n  mig:\n    - {gpu: 1, instances: [{gi: 1, profile: 7g.80gb}]}\n"
    )
    backend = start(tmp_path, config)
    assert column(backend, collect(backend), "mig.mode.current") == ["Enabled", "Enabled"]


def test_replicated_capture_enables_mig_per_gpu_entry(tmp_path: Path) -> None:
    fields = "uuid,name,driver_model.current,driver_model.pending,vbios_version,driver_version,pci.bus_id,serial,"
    fields += "compute_cap,pci.sub_device_id,index,power.draw,mig.mode.current"
    fence = "#" * 80
    capture = tmp_path / "one.txt"
    capture.write_text(
        f"{fence}\n# load :: query-gpu (csv, test)\n# $ nvidia-smi --query-gpu={fields} --format=csv\n{fence}\n"
        f"{fields.replace(',power.draw,', ',power.draw [W],').replace(',', ', ')}\n"
        "GPU-00000000-0000-0000-0000-000000000000, Test GPU, [N/A], [N/A], 1.0, 550.00, 00000000:01:00.0, 1, "
        "9.0, 0x000010DE, 0, 100.00 W, Disabled\n",
        encoding="utf-8",
    )
    config = f"capture: '{capture}'\nstate: load\ngpus: 3\n"
    config += "extras:\n  mig:\n    - {gpu: 2, instances: [{gi: 1, profile: 1g.10gb}]}\n"
    backend = start(tmp_path, config, names="uuid,mig.mode.current")
    assert column(backend, collect(backend), "mig.mode.current") == ["Disabled", "Disabled", "Enabled"]
