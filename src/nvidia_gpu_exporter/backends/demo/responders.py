"""The ``demo`` backend: the exec pipeline answered in-process by simulated GPUs, no GPU needed.

The simulated machine is :class:`~.model.DemoFleet` (two H200-class GPUs by default). Its readings are
laid out as a capture and answered by the fake nvidia-smi's engine, so ``--demo-config`` overrides
(``overrides:``, ``fluctuate:``) work exactly as with the fake, and every byte then goes through the
same parse → transform → render path as real nvidia-smi output. A config may instead name a
``capture:`` file to replay, e.g. one recorded on the operator's own machine.

On top of that pipeline the demo synthesizes the NVML-only families (energy, PCIe, MIG, XIDs; see
:mod:`.extras`), and :mod:`.backend` ties both together per collection. The responders here answer from a
state frozen between :meth:`~FleetResponder.advance` calls, so every query of one collection (GPU table,
processes, the demo's private power query) reads the same simulated instant.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends import BackendSetupError
from nvidia_gpu_exporter.backends.demo.extras import GpuFault
from nvidia_gpu_exporter.backends.demo.model import FIELD_NAMES, FIELDS, DemoFleet, help_query_gpu_text, version_text
from nvidia_gpu_exporter.backends.exec.backend import gpu_query_args
from nvidia_gpu_exporter.backends.exec.output import COMPUTE_APPS_ARGS, COMPUTE_APPS_FIELDS
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.capture.config import FakeSmiConfig
from nvidia_gpu_exporter.capture.engine import Fixed, GpuEntry, Scenario, ScenarioError, answer, overridable_fields
from nvidia_gpu_exporter.capture.format import GPU_CSV_LABEL_PREFIX, Capture, CaptureError, Section, load_capture
from nvidia_gpu_exporter.support.strictyaml import child_path

DEMO_STATE = "demo"
DEFAULT_GPU_COUNT = 2
COMMAND_PLACEHOLDER = "demo-nvidia-smi"
WORKLOAD_PRESETS = {"idle": "idle", "load": "training"}
MIG_MODE_FIELDS = ("mig.mode.current", "mig.mode.pending")
MIG_ENABLED = "Enabled"


def fleet_capture(
    fleet: DemoFleet, mig_gpus: frozenset[int] = frozenset(), faults: Sequence[tuple[int, GpuFault]] = ()
) -> Capture:
    """The fleet's current readings laid out as a capture the fake engine can answer from.

    GPUs in ``mig_gpus`` have a simulated MIG topology, so they report MIG mode ``Enabled`` (a config
    override of those fields still wins: the engine applies overrides on top of this layout). Each GPU scenario's
    cells replace its GPU's; its rising counter counts the simulation's steps, one more at every collection.
    """
    header = ", ".join(spec.header for spec in FIELDS)
    gpu_rows = fleet.gpu_rows()
    for index in mig_gpus:
        if index < len(gpu_rows):
            gpu_rows[index].update(dict.fromkeys(MIG_MODE_FIELDS, MIG_ENABLED))
    for index, fault in faults:
        if index < len(gpu_rows):
            gpu_rows[index].update(fault.cells)
            if fault.rising:
                gpu_rows[index][fault.rising] = str(max(fleet.steps - 1, 0))
    rows = [", ".join(cells[name] for name in FIELD_NAMES) for cells in gpu_rows]
    processes = [", ".join(row) for row in fleet.process_rows()]
    apps_header = ", ".join((*COMPUTE_APPS_FIELDS[:-1], "used_gpu_memory [MiB]"))
    return Capture(
        name="demo",
        metadata="",
        sections=(
            Section("capabilities", "version", "nvidia-smi --version", version_text().rstrip("\n")),
            Section(
                "capabilities",
                "help-query-gpu",
                "nvidia-smi --help-query-gpu",
                help_query_gpu_text().rstrip("\n"),
            ),
            Section(
                DEMO_STATE,
                "query-gpu (csv, simulated)",
                "nvidia-smi " + " ".join(gpu_query_args(FIELD_NAMES)),
                "\n".join([header, *rows]),
            ),
            Section(
                DEMO_STATE,
                "query-compute-apps (per-process)",
                "nvidia-smi " + " ".join(COMPUTE_APPS_ARGS),
                "\n".join([apps_header, *processes]),
            ),
        ),
    )


class FleetResponder:
    """Answers nvidia-smi command lines from the simulated fleet, one simulation step per :meth:`advance`.

    Between two steps every answer comes from the same readings and the same fluctuation seed
    (``fleet seed + step``), so the GPU table, the process list and the demo's private power query agree.
    """

    def __init__(self, fleet: DemoFleet, settings: FakeSmiConfig, mig_gpus: frozenset[int] = frozenset()) -> None:
        self.fleet = fleet
        self.settings = settings
        self.mig_gpus = mig_gpus
        self.faults: tuple[tuple[int, GpuFault], ...] = ()
        self.scenario = self._current_scenario()

    def set_faults(self, faults: tuple[tuple[int, GpuFault], ...]) -> None:
        """The GPU scenarios' cells from now on (known once the fleet said how many GPUs it has)."""
        self.faults = faults
        self.scenario = self._current_scenario()

    @property
    def description(self) -> str:
        return COMMAND_PLACEHOLDER

    def _current_scenario(self) -> Scenario:
        return Scenario(
            capture=fleet_capture(self.fleet, self.mig_gpus, self.faults),
            state=DEMO_STATE,
            seed=self.fleet.seed + self.fleet.steps,
            overrides=self.settings.overrides,
            fluctuate=self.settings.fluctuate,
        )

    def advance(self) -> None:
        """Step the simulation: the readings of the next collection."""
        self.fleet.step()
        self.scenario = self._current_scenario()

    async def run(self, args: Sequence[str]) -> RunResult:
        result = answer(self.scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)


class CaptureResponder:
    """Answers from a capture file named in the demo config (the Go demo's way, with the operator's data).

    Each :meth:`advance` moves the fluctuation seed on (``seed + cycle``), so values move from one
    collection to the next yet every query within one collection agrees, and a fixed seed replays.
    """

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.base = scenario
        self.seed = scenario.seed if scenario.seed is not None else seed
        self.cycles = 0
        self.scenario = replace(scenario, seed=self.seed)

    @property
    def description(self) -> str:
        return COMMAND_PLACEHOLDER

    def advance(self) -> None:
        """The next collection's fluctuation and range draws."""
        self.cycles += 1
        self.scenario = replace(self.base, seed=self.seed + self.cycles)

    async def run(self, args: Sequence[str]) -> RunResult:
        result = answer(self.scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)


def _enable_mig_rows(capture: Capture, state: str, indices: frozenset[int]) -> Capture:
    """The capture with MIG mode ``Enabled`` in the GPU rows ``indices`` of the state's query-gpu section."""
    section = capture.find(state, GPU_CSV_LABEL_PREFIX)
    if section is None or not indices:
        return capture
    token = next((word for word in section.command.split() if word.startswith("--query-gpu=")), "")
    recorded = [name.strip() for name in token.removeprefix("--query-gpu=").split(",")]
    columns = [recorded.index(name) for name in MIG_MODE_FIELDS if name in recorded]
    lines = section.body.split("\n")
    for index in indices:
        if columns and index + 1 < len(lines):
            cells = lines[index + 1].split(",")
            if len(cells) == len(recorded):
                for column in columns:
                    cells[column] = MIG_ENABLED  # the engine trims cells
                lines[index + 1] = ",".join(cells)
    patched = replace(section, body="\n".join(lines))
    return replace(capture, sections=tuple(patched if item is section else item for item in capture.sections))


def _capture_scenario(settings: FakeSmiConfig, capture: Capture, mig_gpus: frozenset[int]) -> Scenario:
    """The config's scenario with MIG mode ``Enabled`` on the MIG GPUs, unless the config sets those fields.

    With replication the mode goes into each MIG GPU's own entry (a per-GPU override); without it the
    captured rows themselves are patched. Top-level overrides win either way.
    """
    scenario = settings.scenario(capture)
    if not mig_gpus:
        return scenario
    if settings.gpus is None:
        return replace(scenario, capture=_enable_mig_rows(capture, scenario.state, mig_gpus))
    entries = list(settings.gpus) if isinstance(settings.gpus, tuple) else [GpuEntry()] * settings.gpus
    for index in mig_gpus:
        if index < len(entries):
            entry = entries[index]
            mode = {
                name: Fixed(MIG_ENABLED)
                for name in MIG_MODE_FIELDS
                if name not in settings.overrides and name not in entry.overrides
            }
            entries[index] = replace(entry, overrides={**mode, **entry.overrides})
    return replace(scenario, gpus=tuple(entries))


def _overridden(settings: FakeSmiConfig) -> Iterator[tuple[str, str]]:
    """(key path, field) of every override the config writes, top-level first, in file order."""
    for name in settings.overrides:
        yield child_path("overrides", name), name
    if isinstance(settings.gpus, tuple):
        for index, entry in enumerate(settings.gpus):
            for name in entry.overrides:
                yield child_path(f"gpus[{index}].overrides", name), name


def check_overrides(settings: FakeSmiConfig, known: frozenset[str], serves: str) -> None:
    """Refuse an override of a field the simulated nvidia-smi never prints: the fake ignores one (a capture need
    not record every field), but in the demo it is a typo whose value, and the alert it was meant to fire, never
    shows. The nearest known field is suggested."""
    for path, name in _overridden(settings):
        if name not in known:
            import difflib  # noqa: PLC0415 - only to word this error

            nearest = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {go_quote(nearest[0])}?)" if nearest else ""
            raise BackendSetupError(f"{settings.where(path)}: {serves} no field {go_quote(name)}{hint}")


def build_responder(
    settings: FakeSmiConfig, seed: int | None = None, mig_gpus: frozenset[int] = frozenset()
) -> FleetResponder | CaptureResponder:
    """The in-process nvidia-smi for a demo config (the built-in fleet when the config names no capture).

    ``seed`` (``extras.seed``, or the wall clock) drives the simulation unless the config has its own
    top-level ``seed``, which then drives the capture replay's draws.
    """
    if settings.capture:
        where = settings.where("capture")
        try:
            capture = load_capture(settings.capture)
        except OSError as error:
            raise BackendSetupError(f"{where}: cannot read {settings.capture}: {error.strerror or error}") from error
        except CaptureError as error:
            raise BackendSetupError(f"{where}: {settings.capture}: {error}") from error
        check_overrides(settings, overridable_fields(capture), f"the capture {settings.capture} records")
        try:
            scenario = _capture_scenario(settings, capture, mig_gpus)
        except ScenarioError as error:
            raise BackendSetupError(f"{where}: {settings.capture}: {error}") from error
        return CaptureResponder(scenario, seed if seed is not None else time.time_ns())
    if isinstance(settings.gpus, tuple):
        raise BackendSetupError(
            f"{settings.where('gpus')}: per-GPU entries need a capture: to replicate; give a count instead"
        )
    if settings.state is not None and settings.state not in WORKLOAD_PRESETS:
        raise BackendSetupError(
            f"{settings.where('state')}: the simulated fleet knows {', '.join(WORKLOAD_PRESETS)}, "
            f"got {settings.state!r}"
        )
    try:
        fleet = DemoFleet(
            settings.gpus or DEFAULT_GPU_COUNT,
            seed if seed is not None else settings.seed,
            workload=WORKLOAD_PRESETS.get(settings.state or ""),
        )
    except ValueError as error:
        raise BackendSetupError(f"{settings.where('gpus')}: {error}") from error
    responder = FleetResponder(fleet, settings, mig_gpus)
    check_overrides(settings, overridable_fields(responder.scenario.capture), "the demo serves")
    return responder
