"""The ``demo`` backend: the exec pipeline answered in-process by simulated GPUs, no GPU needed.

The simulated machine is :class:`~.model.DemoFleet` (two H200-class GPUs by default). Its readings are
laid out as a capture and answered by the fake nvidia-smi's engine, so ``--demo-config`` overrides
(``overrides:``, ``fluctuate:``) work exactly as with the fake, and every byte then goes through the
same parse → transform → render path as real nvidia-smi output. A config may instead name a
``capture:`` file to replay, e.g. one recorded on the operator's own machine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...config import Config
from ...fakesmi.capture import Capture, CaptureError, Section, load_capture
from ...fakesmi.config import ConfigError, FakeSmiConfig, load_config
from ...fakesmi.engine import Scenario, ScenarioError, answer
from ...snapshot import StatusFamily
from .. import BackendSetupError
from ..fields import FieldRequest
from ..runner import RunResult
from ..smi import SmiBackend, gpu_query_args
from ..smi_output import COMPUTE_APPS_ARGS, COMPUTE_APPS_FIELDS
from .model import FIELD_NAMES, FIELDS, DemoFleet, help_query_gpu_text, version_text

log = logging.getLogger(__name__)

DEMO_STATE = "demo"
DEFAULT_GPU_COUNT = 2
COMMAND_PLACEHOLDER = "demo-nvidia-smi"
SUPPORTED_EXTRAS = ("seed",)
WORKLOAD_PRESETS = {"idle": "idle", "load": "training"}


def fleet_capture(fleet: DemoFleet) -> Capture:
    """The fleet's current readings laid out as a capture the fake engine can answer from."""
    header = ", ".join(spec.header for spec in FIELDS)
    rows = [", ".join(cells[name] for name in FIELD_NAMES) for cells in fleet.gpu_rows()]
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
    """Answers nvidia-smi command lines from the simulated fleet; each GPU query is one simulation step."""

    def __init__(self, fleet: DemoFleet, settings: FakeSmiConfig) -> None:
        self.fleet = fleet
        self.settings = settings

    @property
    def description(self) -> str:
        return COMMAND_PLACEHOLDER

    async def run(self, args: Sequence[str]) -> RunResult:
        if args and args[0].startswith("--query-gpu="):
            self.fleet.step()
        scenario = Scenario(
            capture=fleet_capture(self.fleet),
            state=DEMO_STATE,
            seed=None if self.settings.seed is None else self.settings.seed + self.fleet.steps,
            overrides=self.settings.overrides,
            fluctuate=self.settings.fluctuate,
        )
        result = answer(scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)


class CaptureResponder:
    """Answers from a capture file named in the demo config (the Go demo's way, with the operator's data)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    @property
    def description(self) -> str:
        return COMMAND_PLACEHOLDER

    async def run(self, args: Sequence[str]) -> RunResult:
        result = answer(self.scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)


def _extras_seed(extras: Mapping[Any, Any] | None) -> int | None:
    if not extras:
        return None
    if not isinstance(extras, Mapping):
        raise BackendSetupError("extras: must be a mapping")
    for key in extras:
        if key not in SUPPORTED_EXTRAS:
            raise BackendSetupError(f"extras.{key}: unknown key (supported: {', '.join(SUPPORTED_EXTRAS)})")
    seed = extras.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise BackendSetupError(f"extras.seed: must be an integer, got {seed!r}")
    return seed


def build_responder(settings: FakeSmiConfig) -> FleetResponder | CaptureResponder:
    """The in-process nvidia-smi for a demo config (the built-in fleet when the config names no capture)."""
    seed = _extras_seed(settings.extras)
    if settings.capture:
        try:
            return CaptureResponder(settings.scenario(load_capture(settings.capture)))
        except (OSError, CaptureError, ScenarioError) as error:
            raise BackendSetupError(f"capture {settings.capture!r}: {error}") from error
    if isinstance(settings.gpus, tuple):
        raise BackendSetupError("gpus: per-GPU entries need a capture: to replicate; give a count instead")
    if settings.state is not None and settings.state not in WORKLOAD_PRESETS:
        raise BackendSetupError(
            f"state: the simulated fleet knows {', '.join(WORKLOAD_PRESETS)}, got {settings.state!r}"
        )
    try:
        fleet = DemoFleet(
            settings.gpus or DEFAULT_GPU_COUNT,
            seed if seed is not None else settings.seed,
            workload=WORKLOAD_PRESETS.get(settings.state or ""),
        )
    except ValueError as error:
        raise BackendSetupError(str(error)) from error
    return FleetResponder(fleet, settings)


async def start_demo_backend(config: Config, request: FieldRequest) -> SmiBackend:
    """Load and check the scenario, preflight it, then run the exec startup sequence against it."""
    try:
        settings = load_config(config.demo_config) if config.demo_config else FakeSmiConfig()
    except ConfigError as error:
        raise BackendSetupError(str(error)) from error
    responder = build_responder(settings)
    preflight = await responder.run(["--query-gpu=uuid", "--format=csv"])
    if not preflight.ok:
        raise BackendSetupError(f"the simulated nvidia-smi does not answer: {preflight.describe_failure()}")
    log.warning("demo mode: serving synthetic data, not a real GPU")
    return await SmiBackend.start(
        responder,
        request,
        timeout_seconds=None,
        compute_apps=config.compute_apps,
        status_family=StatusFamily.NVML_RETURN_CODE,
        exit_errors_are_fatal=False,
    )
