"""The fake ``libnvidia-ml.so.1`` for the nvml tests: compiled once per session, driven in-process or by file.

``conftest.py`` loads this module as a plugin, so test modules request its fixtures by name:
``fake_nvml_library`` compiles ``fakenvml/fake_nvml.c`` with the system C compiler into a temporary
directory (skipping with a clear reason where there is none), and ``fake_nvml`` loads it into this
process as the library the real nvidia-ml-py bindings call, reset to a scenario for each test.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest

FAKE_SOURCE = Path(__file__).resolve().parent / "fakenvml" / "fake_nvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"
MIB = 1_048_576


def find_compiler() -> str | None:
    """``$CC``, else ``cc``, else ``gcc``."""
    configured = os.environ.get("CC")
    if configured and shutil.which(configured):
        return configured
    return shutil.which("cc") or shutil.which("gcc")


def compile_fake(directory: Path, *defines: str) -> Path:
    """Build the fake as ``directory/libnvidia-ml.so.1`` (the soname the bindings dlopen)."""
    compiler = find_compiler()
    if compiler is None:
        pytest.skip("no C compiler (cc/gcc, or $CC) on this machine: the fake libnvidia-ml cannot be built")
    directory.mkdir(parents=True, exist_ok=True)
    output = directory / LIBRARY_NAME
    command = [
        compiler,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        *(f"-D{define}" for define in defines),
        f"-Wl,-soname,{LIBRARY_NAME}",
        "-o",
        str(output),
        str(FAKE_SOURCE),
        "-lpthread",
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, f"compiling the fake NVML failed:\n{completed.stderr}"
    return output


@dataclass(frozen=True)
class FakeNvmlLibrary:
    """A compiled fake and the environment that makes an exporter child process load it."""

    path: Path

    @property
    def directory(self) -> Path:
        return self.path.parent

    def env(self, scenario: str = "h200", *, control: Path | None = None, gpus: int | None = None) -> dict[str, str]:
        env = {"LD_LIBRARY_PATH": str(self.directory), "FAKE_NVML_SCENARIO": scenario}
        if control is not None:
            env["FAKE_NVML_CONTROL"] = str(control)
        if gpus is not None:
            env["FAKE_NVML_GPUS"] = str(gpus)
        return env


class ControlFile:
    """Run-time control of a fake loaded by another process: commands appended as lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def send(self, *commands: str) -> None:
        with self.path.open("a") as handle:
            handle.write("".join(command + "\n" for command in commands))


@pytest.fixture(name="fake_nvml_library", scope="session")
def _fake_nvml_library_fixture(tmp_path_factory: pytest.TempPathFactory) -> FakeNvmlLibrary:
    return FakeNvmlLibrary(compile_fake(tmp_path_factory.mktemp("fakenvml")))


@pytest.fixture(name="fake_nvml_library_without_uuid", scope="session")
def _fake_nvml_library_without_uuid_fixture(tmp_path_factory: pytest.TempPathFactory) -> FakeNvmlLibrary:
    """A variant that does not export ``nvmlDeviceGetUUID`` (startup must refuse it)."""
    return FakeNvmlLibrary(compile_fake(tmp_path_factory.mktemp("fakenvml-no-uuid"), "FAKE_NVML_OMIT_UUID"))


class InProcessFake:
    """The fake as loaded in this process: its control functions, called through the same handle as pynvml."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        library.fakeNvmlCommand.argtypes = [ctypes.c_char_p]
        library.fakeNvmlCommand.restype = ctypes.c_int
        library.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
        library.fakeNvmlCallCount.restype = ctypes.c_ulong
        library.fakeNvmlSizeof.argtypes = [ctypes.c_char_p]
        library.fakeNvmlSizeof.restype = ctypes.c_size_t

    def command(self, *lines: str | bytes) -> None:
        for line in lines:
            raw = line.encode() if isinstance(line, str) else line
            assert self.library.fakeNvmlCommand(raw) == 0, f"the fake rejected {line!r}"

    def calls(self, function: str) -> int:
        return int(self.library.fakeNvmlCallCount(function.encode()))

    def reset_calls(self) -> None:
        self.library.fakeNvmlResetCallCounts()

    def refcount(self) -> int:
        return int(self.library.fakeNvmlRefcount())

    def pending_events(self) -> int:
        return int(self.library.fakeNvmlPendingEvents())

    def sizeof(self, struct: str) -> int:
        return int(self.library.fakeNvmlSizeof(struct.encode()))


_LOADED: dict[Path, ctypes.CDLL] = {}


@pytest.fixture(name="fake_nvml")
def _fake_nvml_fixture(fake_nvml_library: FakeNvmlLibrary, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessFake]:
    """The fake in this process, reset to the ``h200`` scenario, uninitialized; shut down again afterwards."""
    library = _LOADED.get(fake_nvml_library.path)
    if library is None:
        library = _LOADED[fake_nvml_library.path] = ctypes.CDLL(str(fake_nvml_library.path))
    monkeypatch.setattr(pynvml, "nvmlLib", library)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    fake = InProcessFake(library)
    while fake.refcount() > 0:
        pynvml.nvmlShutdown()
    fake.command("reset h200")
    fake.reset_calls()
    yield fake
    while fake.refcount() > 0:
        pynvml.nvmlShutdown()


def h200_uuid(fake: InProcessFake, index: int = 0) -> str:
    """A GPU's uuid as the fake reports it (read through the bindings)."""
    started = fake.refcount() == 0
    if started:
        pynvml.nvmlInit()
    try:
        uuid: str = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
        return uuid
    finally:
        if started:
            pynvml.nvmlShutdown()


DEPRECATED = "[Requested functionality has been deprecated]"
# The ECC error counters nvidia-smi lists for each kind and scope, in its order (the SRAM details aside).
ECC_COUNTERS = tuple(
    f"ecc.errors.{kind}.{scope}.{location}"
    for kind in ("corrected", "uncorrected")
    for scope in ("volatile", "aggregate")
    for location in (
        "device_memory",
        "dram",
        "register_file",
        "l1_cache",
        "l2_cache",
        "texture_memory",
        "cbu",
        "sram",
        "total",
    )
)

# What nvidia-smi prints for every catalog field of the fake's ``h200`` GPU 0, written by hand in the shape
# of a real H200's answer (uuid and timestamp excepted: they vary). The tests compare the nvml backend's
# cells with it, and the parity test feeds it to the exec backend through the fake nvidia-smi.
H200_EXPECTED: dict[str, str] = {
    "driver_version": "590.48.01",
    "count": "1",
    "name": "NVIDIA H200",
    "serial": "1650124000001",
    "pci.bus_id": "00000000:83:00.0",
    "pci.domain": "0x0000",
    "pci.bus": "0x83",
    "pci.device": "0x00",
    "pci.baseClass": "0x3",
    "pci.subClass": "0x2",
    "pci.device_id": "0x233510DE",
    "pci.sub_device_id": "0x18BE10DE",
    "pcie.link.gen.current": "5",
    "pcie.link.gen.gpucurrent": "5",
    "pcie.link.gen.max": "5",
    "pcie.link.gen.gpumax": "5",
    "pcie.link.width.current": "16",
    "pcie.link.width.max": "16",
    "index": "0",
    "display_mode": DEPRECATED,
    "display_attached": "Yes",
    "display_active": "Disabled",
    "persistence_mode": "Enabled",
    "addressing_mode": "None",
    "accounting.mode": "Disabled",
    "accounting.buffer_size": "4000",
    "driver_model.current": "[N/A]",
    "driver_model.pending": "[N/A]",
    "vbios_version": "96.00.A5.00.03",
    "inforom.img": "G520.0280.02.02",
    "inforom.oem": "2.1",
    "inforom.ecc": "7.16",
    "inforom.pwr": "[N/A]",
    "inforom.checksum_validation": "valid",
    "gpu_recovery_action": "None",
    "gom.current": "[N/A]",
    "gom.pending": "[N/A]",
    "fan.speed": "[N/A]",
    "pstate": "P0",
    "clocks_event_reasons.supported": "0x00000000000001FF",
    "clocks_event_reasons.active": "0x0000000000000001",
    "clocks_event_reasons.gpu_idle": "Active",
    "clocks_event_reasons.applications_clocks_setting": "Not Active",
    "clocks_event_reasons.sw_power_cap": "Not Active",
    "clocks_event_reasons.hw_slowdown": "Not Active",
    "clocks_event_reasons.hw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.hw_power_brake_slowdown": "Not Active",
    "clocks_event_reasons.sw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.sync_boost": "Not Active",
    "clocks_event_reasons_counters.sw_power_cap": "0 us",
    "clocks_event_reasons_counters.sync_boost": "0 us",
    "clocks_event_reasons_counters.sw_thermal_slowdown": "0 us",
    "clocks_event_reasons_counters.hw_thermal_slowdown": "0 us",
    "clocks_event_reasons_counters.hw_power_brake_slowdown": "0 us",
    "memory.total": "143771 MiB",
    "memory.reserved": "614 MiB",
    "memory.used": "0 MiB",
    "memory.free": "143158 MiB",
    "compute_mode": "Default",
    "compute_cap": "9.0",
    "utilization.gpu": "0 %",
    "utilization.memory": "0 %",
    "utilization.encoder": "0 %",
    "utilization.decoder": "0 %",
    "utilization.jpeg": "0 %",
    "utilization.ofa": "0 %",
    "encoder.stats.sessionCount": "0",
    "encoder.stats.averageFps": "0",
    "encoder.stats.averageLatency": "0",
    "dramEncryption.mode.current": "[N/A]",
    "dramEncryption.mode.pending": "[N/A]",
    "ecc.mode.current": "Enabled",
    "ecc.mode.pending": "Enabled",
    **{
        name: "0" if name.rsplit(".", 1)[1] in ("device_memory", "dram", "sram", "total") else "[N/A]"
        for name in ECC_COUNTERS
    },
    "ecc.errors.uncorrected.volatile.sram.parity": "0",
    "ecc.errors.uncorrected.volatile.sram.secded": "0",
    "ecc.errors.uncorrected.aggregate.sram.parity": "0",
    "ecc.errors.uncorrected.aggregate.sram.secded": "0",
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded": "No",
    "ecc.errors.uncorrected.aggregate.sram.l2": "0",
    "ecc.errors.uncorrected.aggregate.sram.sm": "0",
    "ecc.errors.uncorrected.aggregate.sram.mcu": "0",
    "ecc.errors.uncorrected.aggregate.sram.pcie": "0",
    "ecc.errors.uncorrected.aggregate.sram.other": "0",
    "retired_pages.single_bit_ecc.count": "[N/A]",
    "retired_pages.double_bit.count": "[N/A]",
    "retired_pages.pending": "[N/A]",
    "remapped_rows.correctable": "0",
    "remapped_rows.correctable_inactive": "[N/A]",
    "remapped_rows.uncorrectable": "0",
    "remapped_rows.uncorrectable_inactive": "[N/A]",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "remapped_rows.histogram.max": "3072",
    "remapped_rows.histogram.high": "0",
    "remapped_rows.histogram.partial": "0",
    "remapped_rows.histogram.low": "0",
    "remapped_rows.histogram.none": "0",
    "temperature.gpu": "28",
    "temperature.gpu.tlimit": "59",
    "temperature.memory": "32",
    "power.management": DEPRECATED,
    "power.draw": "77.71 W",
    "power.draw.average": "77.71 W",
    "power.draw.instant": "78.21 W",
    "power.limit": "700.00 W",
    "enforced.power.limit": "700.00 W",
    "power.default_limit": "700.00 W",
    "power.min_limit": "200.00 W",
    "power.max_limit": "700.00 W",
    "edpp_multiplier": "100.00 %",
    "clocks.current.graphics": "345 MHz",
    "clocks.current.sm": "345 MHz",
    "clocks.current.memory": "3201 MHz",
    "clocks.current.video": "765 MHz",
    "clocks.applications.graphics": DEPRECATED,
    "clocks.applications.memory": DEPRECATED,
    "clocks.default_applications.graphics": DEPRECATED,
    "clocks.default_applications.memory": DEPRECATED,
    "clocks.max.graphics": "1980 MHz",
    "clocks.max.sm": "1980 MHz",
    "clocks.max.memory": "3201 MHz",
    "mig.mode.current": "Disabled",
    "mig.mode.pending": "Disabled",
    "gsp.mode.current": "Enabled",
    "gsp.mode.default": "Enabled",
    "c2c.mode": "Disabled",
    "protected_memory.total": "0 MiB",
    "protected_memory.used": "0 MiB",
    "protected_memory.free": "0 MiB",
    "fabric.state": "Completed",
    "fabric.status": "Success",
    "fabric.cliqueId": "0",
    "fabric.clusterUuid": "00000000-0000-0000-0000-000000000000",
    "platform.chassis_serial_number": "",
    "platform.slot_number": "0",
    "platform.tray_index": "0",
    "platform.host_id": "1",
    "platform.peer_type": "Direct Connected",
    "platform.module_id": "1",
    "platform.gpu_fabric_guid": "0x0000000000000000",
    "hostname": "[N/A]",
}

# The fake's ``rtx`` GPU (a GeForce: no ECC, no MIG, no fabric) where it differs from the H200 table.
RTX_EXPECTED: dict[str, str] = {
    **H200_EXPECTED,
    "driver_version": "595.71.05",
    "name": "NVIDIA GeForce RTX 4080 SUPER",
    "serial": "[N/A]",
    "pci.bus_id": "00000000:01:00.0",
    "pci.bus": "0x01",
    "pci.subClass": "0x0",
    "pci.device_id": "0x270210DE",
    "pci.sub_device_id": "0x51101462",
    **dict.fromkeys(
        ["pcie.link.gen.current", "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.gen.gpumax"], "4"
    ),
    "display_active": "Enabled",
    "persistence_mode": "Disabled",
    "addressing_mode": "HMM",
    "vbios_version": "95.03.44.00.B2",
    "inforom.img": "G002.0000.00.03",
    "inforom.oem": "2.0",
    "inforom.ecc": "[N/A]",
    "fan.speed": "37 %",
    "pstate": "P2",
    "clocks_event_reasons.active": "0x0000000000000004",
    "clocks_event_reasons.gpu_idle": "Not Active",
    "clocks_event_reasons.sw_power_cap": "Active",
    "clocks_event_reasons_counters.sw_power_cap": "212553937 us",
    "memory.total": "16376 MiB",
    "memory.reserved": "434 MiB",
    "memory.used": "1474 MiB",
    "memory.free": "14470 MiB",
    "compute_cap": "8.9",
    "utilization.gpu": "7 %",
    "utilization.memory": "2 %",
    "utilization.encoder": "72 %",
    "encoder.stats.sessionCount": "2",
    "encoder.stats.averageFps": "184",
    "encoder.stats.averageLatency": "62844",
    "ecc.mode.current": "[N/A]",
    "ecc.mode.pending": "[N/A]",
    **dict.fromkeys(ECC_COUNTERS, "[N/A]"),
    **dict.fromkeys(
        [
            "remapped_rows.correctable",
            "remapped_rows.uncorrectable",
            "remapped_rows.pending",
            "remapped_rows.failure",
            "remapped_rows.histogram.max",
            "remapped_rows.histogram.high",
            "remapped_rows.histogram.partial",
            "remapped_rows.histogram.low",
            "remapped_rows.histogram.none",
        ],
        "[N/A]",
    ),
    "temperature.gpu": "46",
    "temperature.gpu.tlimit": "[N/A]",
    "temperature.memory": "N/A",
    "power.draw": "84.24 W",
    "power.draw.average": "84.24 W",
    "power.draw.instant": "86.41 W",
    "power.limit": "320.00 W",
    "enforced.power.limit": "320.00 W",
    "power.default_limit": "320.00 W",
    "power.min_limit": "150.00 W",
    "power.max_limit": "400.00 W",
    "edpp_multiplier": "[N/A]",
    "clocks.current.graphics": "2805 MHz",
    "clocks.current.sm": "2805 MHz",
    "clocks.current.memory": "11251 MHz",
    "clocks.current.video": "2145 MHz",
    "clocks.max.graphics": "3165 MHz",
    "clocks.max.sm": "3165 MHz",
    "clocks.max.memory": "11501 MHz",
    "mig.mode.current": "[N/A]",
    "mig.mode.pending": "[N/A]",
    "c2c.mode": "[N/A]",
    "fabric.state": "N/A",
    "fabric.status": "N/A",
    "fabric.cliqueId": "N/A",
    "fabric.clusterUuid": "N/A",
}

# Per-process rows as nvidia-smi prints them (``gpu_uuid`` filled in by the test).
H200_PROCESSES = [("4242", "python3 train.py", "40950 MiB")]
RTX_PROCESSES = [
    ("2165", "/usr/bin/kwin_wayland", "25 MiB"),
    ("5022", "ffmpeg", "503 MiB"),
    ("5021", "ffmpeg", "360 MiB"),
]
