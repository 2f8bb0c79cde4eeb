"""A synthetic fleet of H200-class GPUs whose readings move like real ones.

Each GPU runs a workload (steady training, bursty inference, or nothing) that sets its utilization;
power follows utilization up to the power limit, temperature chases a power-dependent target with
thermal lag, clocks drop when the GPU is power- or thermally capped (and the matching clock-event
reasons and their time counters advance), and memory used is the sum of its processes' memory.
One :meth:`DemoFleet.step` is one collection, so a fixed seed replays the same sequence of readings
whatever the wall clock does. The output is the text nvidia-smi would print for each field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nvidia_gpu_exporter.backends.demo.prng import SplitMix64
from nvidia_gpu_exporter.model.fields import (
    ECC_KINDS,
    ECC_LOCATIONS,
    ECC_SCOPES,
    ECC_TOTAL,
    EVENT_REASONS_PREFIX,
    REASON_BITS,
    REASON_COUNTER_SUFFIXES,
    REASON_COUNTERS_PREFIX,
    header,
)
from nvidia_gpu_exporter.support.sha256 import sha256

DRIVER_VERSION = "575.57.08"
CUDA_VERSION = "12.9"
GPU_NAME = "NVIDIA H200"
MEMORY_TOTAL_MIB = 143771
MEMORY_RESERVED_MIB = 614
POWER_LIMIT_W = 700.0
POWER_MIN_W = 200.0
IDLE_POWER_W = 74.0
MAX_SM_MHZ = 1980
IDLE_SM_MHZ = 345
MEMORY_MHZ = 3201
VIDEO_MAX_MHZ = 1545
SLOWDOWN_TEMP_C = 87
AMBIENT_C = 28.0
MAX_GPUS = 64
BUSES_PER_DOMAIN = 15  # buses 0x18, 0x28, ... 0xF8
WORKLOADS = ("training", "inference", "idle")
STEP_SECONDS = 15.0  # the time one step stands for in the clock-event counters (a typical scrape interval)

DEPRECATED = "[Requested functionality has been deprecated]"
NOT_AVAILABLE = "[N/A]"

GPU_IDLE = REASON_BITS["gpu_idle"]
SW_POWER_CAP = REASON_BITS["sw_power_cap"]
SW_THERMAL_SLOWDOWN = REASON_BITS["sw_thermal_slowdown"]
HW_THERMAL_SLOWDOWN = REASON_BITS["hw_thermal_slowdown"]
SUPPORTED_REASONS = 0x1FF  # what an H200 reports supporting (display clock setting included)

_ECC_SUPPORTED = frozenset({"device_memory", "dram", "sram", "total"})


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """A field the demo GPUs report: query name and the one-line help of the demo's ``--help-query-gpu``."""

    name: str
    description: str

    @property
    def header(self) -> str:
        return header(self.name)


def _spec(name: str, description: str) -> FieldSpec:
    return FieldSpec(name, description)


FIELDS: tuple[FieldSpec, ...] = (
    _spec("timestamp", "The timestamp of when the query was made in format YYYY/MM/DD HH:MM:SS.msec."),
    _spec("driver_version", "The version of the installed NVIDIA display driver."),
    _spec("count", "The number of NVIDIA GPUs in the system."),
    _spec("name", "The official product name of the GPU."),
    _spec("serial", "The serial number printed on the board."),
    _spec("uuid", "The globally unique immutable identifier of the GPU."),
    _spec("pci.bus_id", "PCI bus id as domain:bus:device.function, in hex."),
    _spec("pci.domain", "PCI domain number, in hex."),
    _spec("pci.bus", "PCI bus number, in hex."),
    _spec("pci.device", "PCI device number, in hex."),
    _spec("pci.device_id", "PCI vendor device id, in hex."),
    _spec("pci.sub_device_id", "PCI Sub System id, in hex."),
    _spec("pcie.link.gen.current", "The current PCI-E link generation."),
    _spec("pcie.link.gen.max", "The maximum PCI-E link generation possible with this GPU and system."),
    _spec("pcie.link.width.current", "The current PCI-E link width."),
    _spec("pcie.link.width.max", "The maximum PCI-E link width possible with this GPU and system."),
    _spec("index", "Zero based index of the GPU. Can change at each boot."),
    _spec("display_attached", "Whether a physical display is connected to any of the GPU's connectors."),
    _spec("display_active", "Whether a display is initialized on the GPU."),
    _spec("persistence_mode", "Whether persistence mode is enabled for the GPU."),
    _spec("accounting.mode", "Whether accounting is enabled for the GPU."),
    _spec("accounting.buffer_size", "The size of the circular buffer that holds the accounted processes."),
    _spec("driver_model.current", "The driver model currently in use. Always N/A on Linux."),
    _spec("driver_model.pending", "The driver model that will be used on the next reboot. Always N/A on Linux."),
    _spec("vbios_version", "The BIOS of the GPU board."),
    _spec("inforom.img", "Global version of the infoROM image."),
    _spec("inforom.oem", "Version for the OEM configuration data."),
    _spec("inforom.ecc", "Version for the ECC recording data."),
    _spec("gpu_recovery_action", "The recovery action the driver asks for (None, GPU Reset, Node Reboot, ...)."),
    _spec("fan.speed", "The fan speed value is the percent of the product's maximum noise tolerance."),
    _spec("pstate", "The current performance state for the GPU, from P0 (maximum) to P12 (minimum)."),
    _spec("clocks_event_reasons.supported", "Bitmask of supported clock event reasons."),
    _spec("clocks_event_reasons.active", "Bitmask of active clock event reasons."),
    *(
        _spec(f"clocks_event_reasons.{reason}", f"Whether the {reason} clock event reason is active.")
        for reason in REASON_BITS
    ),
    *(
        _spec(f"{REASON_COUNTERS_PREFIX}.{reason}", f"Time the {reason} clock event reason has been active.")
        for reason in REASON_COUNTER_SUFFIXES
    ),
    _spec("memory.total", "Total installed GPU memory."),
    _spec("memory.reserved", "Total memory reserved by the NVIDIA driver and firmware."),
    _spec("memory.used", "Total memory allocated by active contexts."),
    _spec("memory.free", "Total free memory."),
    _spec(
        "compute_mode",
        "The compute mode flag indicates whether individual or multiple compute applications may run on the GPU.",
    ),
    _spec("compute_cap", "The CUDA Compute Capability, represented as Major DOT Minor."),
    _spec(
        "utilization.gpu",
        "Percent of time over the past sample period during which one or more kernels was executing.",
    ),
    _spec(
        "utilization.memory",
        "Percent of time over the past sample period during which device memory was being read or written.",
    ),
    _spec(
        "utilization.encoder",
        "Percent of time over the past sample period during which the video encoder was busy.",
    ),
    _spec(
        "utilization.decoder",
        "Percent of time over the past sample period during which the video decoder was busy.",
    ),
    _spec("encoder.stats.sessionCount", "Number of encoder sessions running on the GPU."),
    _spec("encoder.stats.averageFps", "Average FPS of all sessions running on the GPU."),
    _spec("encoder.stats.averageLatency", "Average latency in microseconds of all sessions running on the GPU."),
    _spec("ecc.mode.current", "The ECC mode that the GPU is currently operating under."),
    _spec("ecc.mode.pending", "The ECC mode that the GPU will operate under after the next reboot."),
    *(
        _spec(f"ecc.errors.{kind}.{scope}.{location}", f"{kind.capitalize()} {scope} ECC errors in {location}.")
        for kind in ECC_KINDS
        for scope in ECC_SCOPES
        for location in (*ECC_LOCATIONS, ECC_TOTAL)
    ),
    _spec("remapped_rows.correctable", "Number of rows remapped because of correctable errors."),
    _spec("remapped_rows.uncorrectable", "Number of rows remapped because of uncorrectable errors."),
    _spec("remapped_rows.pending", "Whether a row remapping is pending (needs a GPU reset)."),
    _spec("remapped_rows.failure", "Whether a row remapping has failed."),
    _spec("retired_pages.pending", "Whether a page retirement is pending (needs a GPU reset)."),
    _spec("temperature.gpu", "Core GPU temperature, in degrees C."),
    _spec("temperature.memory", "HBM memory temperature, in degrees C."),
    _spec("temperature.gpu.tlimit", "Degrees C below the slowdown temperature."),
    _spec("fabric.state", "The NVLink fabric's state (Not Started, In Progress, Completed)."),
    _spec("fabric.status", "The NVLink fabric registration's error status, valid once its state is Completed."),
    _spec("power.management", "A flag that indicates whether power management is enabled."),
    _spec("power.draw", "The last measured power draw for the entire board, in watts."),
    _spec("power.draw.average", "The average power draw over the last second, in watts."),
    _spec("power.draw.instant", "The instantaneous power draw, in watts."),
    _spec("power.limit", "The software power limit in watts."),
    _spec("enforced.power.limit", "The power limit the power management algorithm enforces, in watts."),
    _spec("power.default_limit", "The default power management algorithm's power ceiling, in watts."),
    _spec("power.min_limit", "The minimum value in watts that the power limit can be set to."),
    _spec("power.max_limit", "The maximum value in watts that the power limit can be set to."),
    _spec("clocks.current.graphics", "Current frequency of the graphics (shader) clock."),
    _spec("clocks.current.sm", "Current frequency of the SM (Streaming Multiprocessor) clock."),
    _spec("clocks.current.memory", "Current frequency of the memory clock."),
    _spec("clocks.current.video", "Current frequency of the video encoder/decoder clock."),
    _spec("clocks.applications.graphics", "User specified frequency of the graphics clock."),
    _spec("clocks.applications.memory", "User specified frequency of the memory clock."),
    _spec("clocks.max.graphics", "Maximum frequency of the graphics clock."),
    _spec("clocks.max.sm", "Maximum frequency of the SM clock."),
    _spec("clocks.max.memory", "Maximum frequency of the memory clock."),
    _spec("mig.mode.current", "The MIG mode that the GPU is currently operating under."),
    _spec("mig.mode.pending", "The MIG mode that the GPU will operate under after reset."),
)
FIELD_NAMES = tuple(spec.name for spec in FIELDS)


def demo_uuid(index: int) -> str:
    """A stable, version-4-shaped uuid per GPU index (the same on every run, like a real GPU's)."""
    digest = bytearray(sha256(f"nvidia_gpu_exporter/demo/gpu/{index}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x40
    digest[8] = (digest[8] & 0x3F) | 0x80
    text = digest.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@dataclass(slots=True)
class DemoProcess:
    pid: int
    name: str
    memory_mib: int


@dataclass(slots=True)
class Workload:
    """What keeps a GPU busy: ``training`` (steady, checkpoint dips), ``inference`` (bursts) or ``idle``."""

    kind: str
    phase: int = 0

    def utilization(self, rng: SplitMix64) -> float:
        """Target utilization in [0, 1] for the next step."""
        self.phase += 1
        if self.kind == "training":
            if self.phase % 40 in (0, 1):  # checkpointing: compute pauses while weights are written out
                return rng.uniform(0.05, 0.2)
            return rng.uniform(0.9, 1.0)
        if self.kind == "inference":
            return rng.choice((0.0, 0.0, rng.uniform(0.2, 0.5), rng.uniform(0.6, 0.95)))
        return 0.0


@dataclass(slots=True)
class DemoGpu:
    """One simulated GPU's state between steps."""

    index: int
    workload: Workload
    processes: list[DemoProcess]
    uuid: str = ""
    utilization: float = 0.0
    power_w: float = IDLE_POWER_W
    temperature_c: float = 32.0
    reasons: int = GPU_IDLE
    counters_us: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASON_COUNTER_SUFFIXES, 0))
    corrected_volatile: int = 0
    corrected_aggregate: int = 0
    sm_clock_mhz: int = IDLE_SM_MHZ
    instant_power_w: float = IDLE_POWER_W


class DemoFleet:
    """The simulated machine: GPUs, their processes, and one random source that drives them all."""

    def __init__(self, gpu_count: int = 2, seed: int | None = None, workload: str | None = None) -> None:
        """``workload`` gives every GPU the same one; by default they cycle training, inference, idle."""
        if not 1 <= gpu_count <= MAX_GPUS:
            raise ValueError(f"the demo simulates 1 to {MAX_GPUS} GPUs, got {gpu_count}")
        if workload is not None and workload not in WORKLOADS:
            raise ValueError(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
        self.seed = time.time_ns() if seed is None else seed
        self.rng = SplitMix64(self.seed)
        self.steps = 0
        kinds = [workload or WORKLOADS[index % len(WORKLOADS)] for index in range(gpu_count)]
        self.gpus = [
            DemoGpu(index, Workload(kind), self._initial_processes(index, kind)) for index, kind in enumerate(kinds)
        ]
        for gpu in self.gpus:
            gpu.uuid = demo_uuid(gpu.index)
        self.step(0.0)

    def _initial_processes(self, index: int, kind: str) -> list[DemoProcess]:
        base_pid = 4242 + 1000 * index
        if kind == "training":
            return [
                DemoProcess(base_pid, "python3 train.py", 112_640),
                DemoProcess(base_pid + 7, "/usr/bin/dcgmproftester12", 1_536),
            ]
        if kind == "inference":
            return [DemoProcess(base_pid, "/opt/tritonserver/bin/tritonserver", 38_912)]
        return []

    # -- dynamics ---------------------------------------------------------------------------------------

    def step(self, now: float | None = None) -> None:
        """Advance the simulation by one collection."""
        self.steps += 1
        self.now = time.time() if now is None else now
        for gpu in self.gpus:
            self._advance(gpu)

    def _advance(self, gpu: DemoGpu) -> None:
        rng = self.rng
        target = gpu.workload.utilization(rng)
        gpu.utilization += (target - gpu.utilization) * 0.7
        if gpu.workload.kind == "inference":
            self._churn_inference_batch(gpu)
        demand = IDLE_POWER_W + (POWER_LIMIT_W + 60.0 - IDLE_POWER_W) * gpu.utilization**1.2
        demand *= rng.uniform(0.97, 1.03)
        reasons = 0
        if demand >= POWER_LIMIT_W:
            reasons |= SW_POWER_CAP
        gpu.power_w = min(demand, POWER_LIMIT_W * rng.uniform(0.985, 1.0))
        target_temp = AMBIENT_C + 0.085 * gpu.power_w
        gpu.temperature_c += (target_temp - gpu.temperature_c) * 0.35 + rng.uniform(-0.6, 0.6)
        if gpu.temperature_c >= SLOWDOWN_TEMP_C:
            reasons |= SW_THERMAL_SLOWDOWN
        if gpu.utilization < 0.02 and not gpu.processes:
            reasons |= GPU_IDLE
        gpu.reasons = reasons
        step_us = int(STEP_SECONDS * 1_000_000)
        if reasons & SW_POWER_CAP:
            gpu.counters_us["sw_power_cap"] += int(step_us * rng.uniform(0.2, 0.9))
        if reasons & SW_THERMAL_SLOWDOWN:
            gpu.counters_us["sw_thermal_slowdown"] += int(step_us * rng.uniform(0.1, 0.5))
        if gpu.utilization > 0.5 and rng.random() < 0.02:  # HBM occasionally corrects a bit flip under load
            gpu.corrected_volatile += 1
            gpu.corrected_aggregate += 1
        gpu.sm_clock_mhz = self._sm_clock(gpu)
        gpu.instant_power_w = gpu.power_w * rng.uniform(0.97, 1.02)

    def _churn_inference_batch(self, gpu: DemoGpu) -> None:
        """Inference GPUs start and finish short batch jobs, so per-process series come and go."""
        batch_pid = 4242 + 1000 * gpu.index + 100
        batch = next((process for process in gpu.processes if process.pid >= batch_pid), None)
        if batch is None and gpu.utilization > 0.6:
            gpu.processes.append(DemoProcess(batch_pid + self.steps % 50, "python3 batch_infer.py", 9_216))
        elif batch is not None and gpu.utilization < 0.1:
            gpu.processes.remove(batch)
        for process in gpu.processes:
            if process.name.endswith("tritonserver"):
                process.memory_mib = max(20_480, min(80_000, process.memory_mib + self.rng.randint(-512, 512)))

    # -- what nvidia-smi would print --------------------------------------------------------------------

    def _sm_clock(self, gpu: DemoGpu) -> int:
        if gpu.utilization < 0.02:
            return IDLE_SM_MHZ
        clock = MAX_SM_MHZ
        if gpu.reasons & SW_POWER_CAP:
            clock -= self.rng.randrange(60, 240, 15)
        if gpu.reasons & SW_THERMAL_SLOWDOWN:
            clock -= self.rng.randrange(150, 400, 15)
        return clock

    def cells(self, gpu: DemoGpu) -> dict[str, str]:
        """Every field's cell text for one GPU, as nvidia-smi prints it (no randomness: reading is pure)."""
        used = min(
            sum(process.memory_mib for process in gpu.processes) + (3 if gpu.processes else 0),
            MEMORY_TOTAL_MIB,
        )
        free = MEMORY_TOTAL_MIB - MEMORY_RESERVED_MIB - used
        sm_clock = gpu.sm_clock_mhz
        domain, slot = divmod(gpu.index, BUSES_PER_DOMAIN)  # past 15 GPUs, the next PCI domain
        bus = 0x18 + 0x10 * slot
        utilization = round(gpu.utilization * 100)
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(self.now)) + f".{int(self.now * 1000) % 1000:03d}"
        cells = {
            "timestamp": stamp,
            "driver_version": DRIVER_VERSION,
            "count": str(len(self.gpus)),
            "name": GPU_NAME,
            "serial": str(1_654_323_000_100 + gpu.index),
            "uuid": gpu.uuid,
            "pci.bus_id": f"{domain:08X}:{bus:02X}:00.0",
            "pci.domain": f"0x{domain:04X}",
            "pci.bus": f"0x{bus:02X}",
            "pci.device": "0x00",
            "pci.device_id": "0x233510DE",
            "pci.sub_device_id": "0x18BE10DE",
            "pcie.link.gen.current": "5" if utilization else "1",
            "pcie.link.gen.max": "5",
            "pcie.link.width.current": "16",
            "pcie.link.width.max": "16",
            "index": str(gpu.index),
            "display_attached": "No",
            "display_active": "Disabled",
            "persistence_mode": "Enabled",
            "accounting.mode": "Disabled",
            "accounting.buffer_size": "4000",
            "driver_model.current": NOT_AVAILABLE,
            "driver_model.pending": NOT_AVAILABLE,
            "vbios_version": "96.00.A5.00.04",
            "inforom.img": "G520.0280.02.02",
            "inforom.oem": "2.1",
            "inforom.ecc": "7.16",
            "gpu_recovery_action": "None",
            "fan.speed": NOT_AVAILABLE,  # passively cooled SXM module
            "pstate": "P0",
            "clocks_event_reasons.supported": f"0x{SUPPORTED_REASONS:016X}",
            "clocks_event_reasons.active": f"0x{gpu.reasons:016X}",
            "memory.total": f"{MEMORY_TOTAL_MIB} MiB",
            "memory.reserved": f"{MEMORY_RESERVED_MIB} MiB",
            "memory.used": f"{used} MiB",
            "memory.free": f"{free} MiB",
            "compute_mode": "Default",
            "compute_cap": "9.0",
            "utilization.gpu": f"{utilization} %",
            "utilization.memory": f"{round(gpu.utilization * 42)} %",
            "utilization.encoder": "0 %",
            "utilization.decoder": "0 %",
            "encoder.stats.sessionCount": "0",
            "encoder.stats.averageFps": "0",
            "encoder.stats.averageLatency": "0",
            "ecc.mode.current": "Enabled",
            "ecc.mode.pending": "Enabled",
            "remapped_rows.correctable": "0",
            "remapped_rows.uncorrectable": "0",
            "remapped_rows.pending": "No",
            "remapped_rows.failure": "No",
            # Not reported by the simulated GPUs (no page retirement, no fabric probe): the scenarios that show a
            # verdict from them set them (docs/demo.md, "Faults on request").
            "retired_pages.pending": NOT_AVAILABLE,
            "temperature.gpu.tlimit": NOT_AVAILABLE,
            "fabric.state": NOT_AVAILABLE,
            "fabric.status": NOT_AVAILABLE,
            "temperature.gpu": str(round(gpu.temperature_c)),
            "temperature.memory": str(round(gpu.temperature_c - 6 + 10 * gpu.utilization)),
            "power.management": DEPRECATED,
            "power.draw": f"{gpu.power_w:.2f} W",
            "power.draw.average": f"{gpu.power_w * 0.995:.2f} W",
            "power.draw.instant": f"{gpu.instant_power_w:.2f} W",
            "power.limit": f"{POWER_LIMIT_W:.2f} W",
            "enforced.power.limit": f"{POWER_LIMIT_W:.2f} W",
            "power.default_limit": f"{POWER_LIMIT_W:.2f} W",
            "power.min_limit": f"{POWER_MIN_W:.2f} W",
            "power.max_limit": f"{POWER_LIMIT_W:.2f} W",
            "clocks.current.graphics": f"{sm_clock} MHz",
            "clocks.current.sm": f"{sm_clock} MHz",
            "clocks.current.memory": f"{MEMORY_MHZ} MHz",
            "clocks.current.video": f"{VIDEO_MAX_MHZ if utilization else 765} MHz",
            "clocks.applications.graphics": DEPRECATED,
            "clocks.applications.memory": DEPRECATED,
            "clocks.max.graphics": f"{MAX_SM_MHZ} MHz",
            "clocks.max.sm": f"{MAX_SM_MHZ} MHz",
            "clocks.max.memory": f"{MEMORY_MHZ} MHz",
            "mig.mode.current": "Disabled",
            "mig.mode.pending": "Disabled",
        }
        for reason, bit in REASON_BITS.items():
            cells[f"{EVENT_REASONS_PREFIX}.{reason}"] = "Active" if gpu.reasons & bit else "Not Active"
        for reason in REASON_COUNTER_SUFFIXES:
            cells[f"{REASON_COUNTERS_PREFIX}.{reason}"] = f"{gpu.counters_us[reason]} us"
        for kind in ECC_KINDS:
            for scope in ECC_SCOPES:
                count = 0
                if kind == "corrected":
                    count = gpu.corrected_volatile if scope == "volatile" else gpu.corrected_aggregate
                for location in (*ECC_LOCATIONS, ECC_TOTAL):
                    value = NOT_AVAILABLE
                    if location in _ECC_SUPPORTED:
                        value = str(count if location in ("device_memory", "dram", "total") else 0)
                    cells[f"ecc.errors.{kind}.{scope}.{location}"] = value
        return cells

    def gpu_rows(self) -> list[dict[str, str]]:
        return [self.cells(gpu) for gpu in self.gpus]

    def process_rows(self) -> list[tuple[str, str, str, str]]:
        """``(gpu_uuid, pid, process_name, used_gpu_memory)`` cells for every process."""
        return [
            (gpu.uuid, str(process.pid), process.name, f"{process.memory_mib} MiB")
            for gpu in self.gpus
            for process in gpu.processes
        ]


def help_query_gpu_text() -> str:
    """``--help-query-gpu`` in nvidia-smi's layout, listing the demo fields."""
    lines = [
        'List of valid properties to query for the switch "--query-gpu=":',
        "",
        "Section about demo properties",
        "Simulated by nvidia_gpu_exporter's demo backend; each property is named as nvidia-smi names it.",
    ]
    for spec in FIELDS:
        lines += ["", f'"{spec.name}"', spec.description]
    return "\n".join(lines) + "\n"


def version_text() -> str:
    return (
        f"NVIDIA-SMI version  : {DRIVER_VERSION}\n"
        f"NVML version        : {DRIVER_VERSION.rsplit('.', 1)[0]}\n"
        f"DRIVER version      : {DRIVER_VERSION}\n"
        f"CUDA Version        : {CUDA_VERSION}\n"
    )
