"""One demo collection: re-read the config, step the simulation, read it through the exec pipeline, then
add the synthesized NVML families.

The GPU table and process list go through the same parse → transform path as real nvidia-smi output; the
NVML-only families come from :class:`~.extras.ExtrasSynthesizer`, fed with the GPU uuids and power
draws of that very table, so the energy counter integrates the power the scrape shows.

With ``--demo-config FILE`` the file is re-read every collection, so a demo can be steered live: a
broken edit fails that one collection (status ``-1``, the error logged by the collector), and a changed
file (a different SHA-256 of its bytes) rebuilds the simulation and resets all synthesized state. The
field plan and the ``cuda_version`` label stay as resolved at startup.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends import BackendSetupError, CollectionError
from nvidia_gpu_exporter.backends.demo.extras import (
    DEFAULT_SCENARIO,
    GPU_SCENARIOS,
    STUCK_NVIDIA_SMI,
    ExtrasError,
    ExtrasSpec,
    ExtrasSynthesizer,
    parse_extras,
)
from nvidia_gpu_exporter.backends.demo.kernellog import DemoKernelLog, KernelLogSink
from nvidia_gpu_exporter.backends.demo.responders import (
    COMMAND_PLACEHOLDER,
    CaptureResponder,
    FleetResponder,
    build_responder,
)
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.output import CsvShapeError, parse_gpu_csv
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.capture.config import ConfigError, FakeSmiConfig, parse_config
from nvidia_gpu_exporter.model.pci import smi_bus_id
from nvidia_gpu_exporter.model.pcibus import PciFunction, PciInventory, PciKind
from nvidia_gpu_exporter.model.snapshot import (
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.values import transform_generic
from nvidia_gpu_exporter.support.files import read_regular_file
from nvidia_gpu_exporter.support.sha256 import sha256

if TYPE_CHECKING:
    from nvidia_gpu_exporter.backends.demo.pods import DemoKubelet

log = logging.getLogger(__name__)

PREFLIGHT_ARGS = ("--query-gpu=uuid", "--format=csv")
POWER_QUERY_ARGS = ("--query-gpu=uuid,power.draw", "--format=csv")
PCI_QUERY_ARGS = ("--query-gpu=pci.bus_id,pci.device_id", "--format=csv")
BUS_ID_QUERY_ARGS = ("--query-gpu=uuid,pci.bus_id", "--format=csv")


@dataclass(frozen=True, slots=True)
class Scene:
    """Everything one demo config builds; replaced as a whole when the config file changes."""

    settings: FakeSmiConfig
    spec: ExtrasSpec
    responder: FleetResponder | CaptureResponder
    synthesizer: ExtrasSynthesizer
    gpu_count: int
    pci: PciInventory | None = None  # the simulated sysfs view: every simulated GPU, and the lost ones
    fallen: tuple[str, ...] = ()  # bus ids of the lost GPUs still bound to nvidia: they fell off the bus
    started: float = 0.0  # Unix time the scene began: its GPU scenarios' cells have said so since before it


# A scenario is a few KB (captures are referenced by path, not inlined): 1 MiB is generous, and bounds what one
# collection reads and hashes.
MAX_CONFIG_BYTES = 1024 * 1024


def read_config_file(path: str) -> bytes:
    """The config file's bytes (hashed to notice edits), or a setup error naming the file.

    Refused unless it is a regular file of at most :data:`MAX_CONFIG_BYTES` (``support.files``): it is read
    every collection in asyncio's default executor, which bcrypt shares, and a FIFO put in its place would
    block a thread of it for ever per collection.
    """
    try:
        return read_regular_file(path, MAX_CONFIG_BYTES)
    except OSError as error:
        raise BackendSetupError(f"failed to read config {go_quote(path)}: {error.strerror or error}") from error


def parse_demo_config(data: bytes | None, path: str = "") -> tuple[FakeSmiConfig, ExtrasSpec]:
    """The fake-nvidia-smi settings and the validated ``extras:`` of a config (the default scenario when
    there is no config at all)."""
    if data is None:
        return FakeSmiConfig(), DEFAULT_SCENARIO
    try:
        settings = parse_config(data.decode("utf-8"), path)
    except UnicodeDecodeError as error:
        raise BackendSetupError(f"failed to read config {go_quote(path)}: not UTF-8 text ({error.reason})") from error
    except ConfigError as error:
        raise BackendSetupError(str(error)) from error
    try:
        return settings, parse_extras(settings.extras)
    except ExtrasError as error:
        raise BackendSetupError(f"config {go_quote(path)}: {error}") from error


async def build_scene(settings: FakeSmiConfig, spec: ExtrasSpec, path: str = "", now: float = 0.0) -> Scene:
    """Build the simulated machine, ask it which GPUs it has, and check ``extras`` against them (``now``: when)."""
    if spec.seed is not None:
        seed = spec.seed
    elif settings.seed is not None:
        seed = settings.seed
    else:
        seed = time.time_ns()
    try:
        responder = build_responder(settings, seed, spec.mig_gpus)
    except BackendSetupError as error:  # said after the file's name, as the parser's errors are
        raise BackendSetupError(f"config {go_quote(path)}: {error}" if path else str(error)) from error
    preflight = await responder.run(PREFLIGHT_ARGS)
    if not preflight.ok:
        raise BackendSetupError(f"the simulated nvidia-smi does not answer: {preflight.describe_failure()}")
    try:
        gpu_count = len(parse_gpu_csv(preflight.stdout, 1).rows)
    except CsvShapeError as error:
        raise BackendSetupError(f"the simulated nvidia-smi answers oddly: {error}") from error
    spec = spec.with_scenarios(gpu_count)
    try:
        spec.check_gpu_count(gpu_count)
    except ExtrasError as error:
        raise BackendSetupError(f"config {go_quote(path)}: {error}" if path else str(error)) from error
    if spec.gpu_faults:
        if not isinstance(responder, FleetResponder):
            names = ", ".join(name for name in spec.scenarios if name in GPU_SCENARIOS)
            raise BackendSetupError(
                f"config {go_quote(path)}: extras.scenarios: {names} change the simulated GPUs' readings, "
                "which a replayed capture: does not have"
            )
        responder.set_faults(spec.gpu_faults)
    bus = await simulated_bus(responder, spec.lost_gpus)
    visible = len(bus.gpus) - len(spec.lost_gpus) if bus is not None else 0
    fallen = tuple(gpu.bus_id for gpu in bus.gpus[visible:] if gpu.driver == "nvidia") if bus is not None else ()
    if spec.scenarios:  # a fault an operator could take for a real one says that it is not: one line for them all
        log.warning("demo scenarios on: simulating faults", extra={"scenarios": spec.placed(gpu_count)})
    return Scene(settings, spec, responder, ExtrasSynthesizer(spec, seed), gpu_count, bus, fallen, now)


async def ask_pairs(
    responder: FleetResponder | CaptureResponder, args: Sequence[str]
) -> tuple[tuple[str, ...], ...] | None:
    """The rows of a private two-field query of the simulation, or ``None`` when it fails or answers oddly."""
    result = await responder.run(args)
    if not result.ok:
        return None
    try:
        return parse_gpu_csv(result.stdout, 2).rows
    except CsvShapeError:
        return None


def free_bus_ids(taken: Sequence[str], count: int) -> list[str]:
    """``count`` bus ids in the first taken one's domain, on the buses after the highest taken (wrapping)."""
    domain, buses = taken[0][:8], {int(bus_id[9:11], 16) for bus_id in taken}
    free = [(max(buses) + step) % 256 for step in range(1, 257)]
    return [f"{domain}:{bus:02X}:00.0" for bus in free if bus not in buses][:count]


async def simulated_bus(responder: FleetResponder | CaptureResponder, lost: Sequence[str] = ()) -> PciInventory | None:
    """What sysfs would list: each simulated GPU at its bus id, bound to nvidia, then one GPU per ``lost`` driver
    that the simulated nvidia-smi does not list (``None`` when the scene cannot say, e.g. a capture without
    ``pci.device_id``). The lost ones sit on free buses after the simulated GPUs', with the first GPU's model."""
    rows = await ask_pairs(responder, PCI_QUERY_ARGS)
    if rows is None:
        return None
    functions: dict[str, PciFunction] = {}
    for address, device in rows:
        bus_id = smi_bus_id(address)
        if bus_id is None or not re.fullmatch(r"0x[0-9A-Fa-f]{8}", device):
            return None
        # nvidia-smi's pci.device_id is device << 16 | vendor; sysfs's device file holds the device alone.
        functions.setdefault(bus_id, PciFunction(bus_id, PciKind.GPU, f"0x{int(device, 16) >> 16:04x}", "nvidia"))
    present = [functions[bus_id] for bus_id in sorted(functions)]
    if not present:
        return PciInventory()
    spare = free_bus_ids([gpu.bus_id for gpu in present], len(lost))
    missing = [
        PciFunction(bus_id, PciKind.GPU, present[0].device_id, driver)
        for bus_id, driver in zip(spare, lost, strict=True)
    ]
    return PciInventory((*present, *missing))


class _Relay:
    """The runner the exec pipeline talks to: whichever responder the current config built."""

    def __init__(self, target: FleetResponder | CaptureResponder) -> None:
        self.target = target

    @property
    def description(self) -> str:
        return COMMAND_PLACEHOLDER

    async def run(self, args: Sequence[str]) -> RunResult:
        return await self.target.run(args)


def watts(cell: str) -> float | None:
    """A ``power.draw`` cell as the exposition would transform it, if it is a usable power."""
    value = transform_generic(cell, 1.0)
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


class DemoBackend:
    """The demo: the exec pipeline answered in-process, plus the synthesized NVML-only families."""

    def __init__(
        self,
        smi: SmiBackend,
        relay: _Relay,
        scene: Scene,
        *,
        config_path: str | None = None,
        config_digest: str = "",
        mig_process_labels: bool = False,
        clock: Callable[[], float] = time.time,
        kernel_log: DemoKernelLog | None = None,
    ) -> None:
        self._smi = smi
        self._kernel_log = kernel_log
        self._relay = relay
        self._scene = scene
        self._config_path = config_path
        self._config_digest = config_digest
        self._mig_process_labels = mig_process_labels
        self._clock = clock
        columns = {field.qfield: index for index, field in enumerate(smi.fields)}
        self._uuid_column = columns["uuid"]  # an identity field: always queried
        self._power_column = columns.get("power.draw")
        self._bus_id_column = columns.get("pci.bus_id")

    @classmethod
    async def start(
        cls,
        request: FieldRequest,
        *,
        config_path: str = "",
        compute_apps: bool = False,
        process_usage: bool = False,
        mig_process_labels: bool = False,
        clock: Callable[[], float] = time.time,
        kernel_log: KernelLogSink | None = None,
        kernel_clock: Callable[[], float] = time.monotonic,
    ) -> DemoBackend:
        """Load and check the scenario (``--demo-config``, or the built-in one), preflight it, then run the
        exec startup sequence against it. With ``kernel_log`` its XIDs are also handed to it as the records
        the driver writes to ``/dev/kmsg``, stamped by ``kernel_clock`` (the one the reader decodes with)."""
        path = config_path or None
        data = read_config_file(path) if path else None
        settings, spec = parse_demo_config(data, path or "")
        scene = await build_scene(settings, spec, path or "", clock())
        log.warning("demo mode: serving synthetic data, not a real GPU")
        relay = _Relay(scene.responder)
        smi = await SmiBackend.start(
            relay,
            request,
            timeout_seconds=None,
            compute_apps=compute_apps,
            process_usage=process_usage,
            status_family=StatusFamily.NVML_RETURN_CODE,
            exit_errors_are_fatal=False,
        )
        return cls(
            smi,
            relay,
            scene,
            config_path=path,
            config_digest=sha256(data).hexdigest() if data is not None else "",
            mig_process_labels=mig_process_labels,
            clock=clock,
            kernel_log=DemoKernelLog(kernel_log, kernel_clock) if kernel_log is not None else None,
        )

    @property
    def status_family(self) -> StatusFamily:
        return StatusFamily.NVML_RETURN_CODE

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._smi.fields

    @property
    def scene(self) -> Scene:
        return self._scene

    async def collect(self) -> Readings:
        if self._config_path is not None:
            await self._reload_if_changed(self._config_path)
        scene = self._scene
        now = self._clock()
        scene.responder.advance()
        readings = await self._smi.collect()
        rows = readings.gpus.rows
        uuids = [row[self._uuid_column] for row in rows]
        extras = scene.synthesizer.cycle(now, uuids, await self._powers(scene, rows))
        events = scene.synthesizer.drain_events()  # drained whether or not they are written: memory stays bounded
        if scene.fallen and self._kernel_log is not None:
            self._kernel_log.write_fallen_off(scene.fallen, now)
        if events and self._kernel_log is not None:
            rows_of_processes = readings.processes.rows if readings.processes is not None else ()
            self._kernel_log.write(events, await self._bus_ids(scene, rows), rows_of_processes)
        processes = readings.processes
        if processes is not None and self._mig_process_labels:
            processes = scene.synthesizer.attribute(processes)
        return replace(readings, processes=processes, extras=extras, held_since=self._held_since(scene, uuids))

    @staticmethod
    def _held_since(scene: Scene, uuids: Sequence[str]) -> dict[tuple[str, str], float]:
        """Since when each GPU scenario's cells say so: as long before the scene began as its reason needs."""
        return {
            (uuids[index], name): scene.started - fault.held_for
            for index, fault in scene.spec.gpu_faults
            if fault.held_for and index < len(uuids)
            for name, _ in fault.cells
        }

    async def _reload_if_changed(self, path: str) -> None:
        """Re-read the config; a broken one fails this collection, a changed one starts a new scene."""
        try:
            data = await asyncio.to_thread(read_config_file, path)
            digest = sha256(data).hexdigest()
            if digest == self._config_digest:
                return
            settings, spec = parse_demo_config(data, path)
            scene = await build_scene(settings, spec, path, self._clock())
        except BackendSetupError as error:
            raise CollectionError(f"demo config: {error}") from error
        self._scene = scene
        self._relay.target = scene.responder
        self._config_digest = digest
        log.info("demo config changed: the simulation and its synthesized state start afresh", extra={"path": path})

    async def _bus_ids(self, scene: Scene, rows: Sequence[Sequence[str]]) -> dict[str, str]:
        """Normalized uuid -> pci.bus_id: the served table's column, else a private query of the simulation."""
        if self._bus_id_column is not None:
            column = self._bus_id_column
            return {normalize_uuid(row[self._uuid_column]): row[column] for row in rows}
        answered = await ask_pairs(scene.responder, BUS_ID_QUERY_ARGS)
        return {normalize_uuid(uuid): bus_id for uuid, bus_id in answered or ()}

    async def _powers(self, scene: Scene, rows: Sequence[Sequence[str]]) -> list[float | None]:
        """Each GPU's power draw: the served table's, else a private query of the same instant."""
        column = self._power_column
        powers = [None if column is None else watts(row[column]) for row in rows]
        if all(power is not None for power in powers):
            return powers
        answered = await ask_pairs(scene.responder, POWER_QUERY_ARGS)
        if answered is None:
            return powers
        by_uuid = {normalize_uuid(uuid): watts(cell) for uuid, cell in answered}
        return [
            power if power is not None else by_uuid.get(normalize_uuid(row[self._uuid_column]))
            for power, row in zip(powers, rows, strict=True)
        ]

    def xid_records(self) -> tuple[XidRecord, ...]:
        """The current scene's XID counts; they stay visible while collections fail."""
        return self._scene.synthesizer.xid_records()

    def stuck_children(self) -> StuckChildren | None:
        """The simulation runs in-process: no children, unless the ``stuck-nvidia-smi`` scenario simulates one."""
        return StuckChildren(1, 1) if STUCK_NVIDIA_SMI in self._scene.spec.scenarios else None

    def supplement_failures(self) -> SupplementFailures | None:
        """No NVML supplement: ``None``."""
        return None

    def kubelet(self) -> DemoKubelet:
        """The simulated node's pods (docs/demo.md, "Pods"): the built-in fleet's workloads, or its GPU count's."""
        from nvidia_gpu_exporter.backends.demo.pods import DemoKubelet  # noqa: PLC0415 - only attribution needs pods

        responder = self._scene.responder
        if isinstance(responder, FleetResponder):
            return DemoKubelet([gpu.workload.kind for gpu in responder.fleet.gpus])
        return DemoKubelet.for_gpus(self._scene.gpu_count)

    async def pci_inventory(self) -> PciInventory | None:
        """The current scene's simulated sysfs view (a :class:`~nvidia_gpu_exporter.model.pcibus.PciSource`)."""
        return self._scene.pci

    async def aclose(self) -> None:
        """Nothing to release: the simulation lives in this process."""
