"""Each catalog field's NVML source: which call (or family of calls) answers it, formatted by :mod:`.text`.

Sources are grouped by NVML call: a device's cycle calls only the sources its requested fields need, each once.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import pynvml

from nvidia_gpu_exporter.backends.nvml.api import (
    FUNCTION_NOT_FOUND,
    NOT_SUPPORTED,
    SUCCESS,
    Failure,
    call,
    read_string,
    struct_getter,
)
from nvidia_gpu_exporter.backends.nvml.text import (
    ADDRESSING_MODES,
    COMPUTE_MODES,
    DRIVER_MODELS,
    FABRIC_STATES,
    GPU_OPERATION_MODES,
    PEER_TYPES,
    RECOVERY_ACTIONS,
    Cell,
    active,
    enabled,
    enum_text,
    hex64,
    mhz,
    mib,
    percent,
    uuid_text,
    watts,
    yes_no,
)
from nvidia_gpu_exporter.model.fields import (
    ECC_TOTAL,
    EVENT_REASONS_PREFIX,
    REASON_BITS,
    ecc_error_fields,
    fields_under,
)

SourceResult: TypeAlias = Mapping[str, Cell] | Failure

# Fields read once per cycle, not per device.
CYCLE_FIELDS = frozenset({"timestamp", "driver_version", "count"})

NS_PER_US = 1000


def microseconds(nanoseconds: float) -> str:
    """A clock event reason counter as nvidia-smi prints it: NVML counts nanoseconds (DCGM reads field 74 unscaled
    as DCGM_FI_DEV_POWER_VIOLATION, documented in ns), nvidia-smi prints whole microseconds."""
    return f"{int(nanoseconds) // NS_PER_US} us"


# nvmlDeviceGetFieldValues ids: field -> (id, formatter of the decoded value).
FIELD_VALUE_IDS: dict[str, tuple[int, Callable[[float], str]]] = {
    "clocks_event_reasons_counters.sw_power_cap": (74, microseconds),
    "clocks_event_reasons_counters.sync_boost": (76, microseconds),
    "clocks_event_reasons_counters.sw_thermal_slowdown": (269, microseconds),
    "clocks_event_reasons_counters.hw_thermal_slowdown": (270, microseconds),
    "clocks_event_reasons_counters.hw_power_brake_slowdown": (271, microseconds),
    "power.draw.average": (185, watts),
    "power.draw.instant": (186, watts),
    "temperature.memory": (82, lambda v: str(int(v))),
    "gpu_recovery_action": (230, lambda v: enum_text(RECOVERY_ACTIONS, int(v))),
    "edpp_multiplier": (274, lambda v: f"{v:.2f} %"),
}

# NVML's ids for the ECC vocabulary of model.fields (nvmlMemoryErrorType_t, nvmlEccCounterType_t,
# nvmlMemoryLocation_t; nvidia-smi reads "device_memory" and "dram" from the same location).
_ECC_TYPES = {"corrected": 0, "uncorrected": 1}
_ECC_COUNTERS = {"volatile": 0, "aggregate": 1}
_MEMORY_LOCATIONS = {
    "l1_cache": 0,
    "l2_cache": 1,
    "device_memory": 2,
    "dram": 2,
    "register_file": 3,
    "texture_memory": 4,
    "cbu": 6,
    "sram": 7,
}
CLOCK_TYPES = {"graphics": 0, "sm": 1, "memory": 2, "video": 3}


def field_value(entry: Any) -> float | Failure:
    """One ``nvmlFieldValue_t``: its value by type, or its own return code."""
    code = int(entry.nvmlReturn)
    if code != SUCCESS:
        return Failure(code)
    kind = int(entry.valueType)
    value = entry.value
    decoded: float
    if kind == 0:
        decoded = float(value.dVal)
    elif kind == 1:
        decoded = int(value.uiVal)
    elif kind in (2, 3):
        decoded = int(value.ullVal)
    elif kind == 4:
        decoded = int(value.sllVal)
    elif kind == 5:
        decoded = int(value.siVal)
    elif kind == 6:
        decoded = int(value.usVal)
    else:
        return Failure(NOT_SUPPORTED)
    if isinstance(decoded, float) and not math.isfinite(decoded):
        return Failure(NOT_SUPPORTED)
    return decoded


def _decode(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _raw_member(struct: ctypes.Structure, member: str, size: int) -> bytes:
    """A char-array member's bytes (ctypes cuts ``.member`` at the first NUL, which loses binary ids)."""
    offset = getattr(type(struct), member).offset
    return ctypes.string_at(ctypes.addressof(struct) + offset, size)


def _struct(type_name: str, version_name: str | None = None) -> Any:
    """A pynvml struct with its version set, or a Failure when these bindings lack it."""
    struct_type = getattr(pynvml, type_name, None)
    if struct_type is None:
        return Failure(FUNCTION_NOT_FOUND)
    struct = struct_type()
    if version_name is not None:
        version = getattr(pynvml, version_name, None)
        if version is None:
            return Failure(FUNCTION_NOT_FOUND)
        struct.version = version
    return struct


def _filled(type_name: str, version_name: str | None, function: str, handle: Any) -> Any:
    """A versioned struct filled by ``function(handle, &struct)``, or the Failure of either step."""
    struct = _struct(type_name, version_name)
    if isinstance(struct, Failure):
        return struct
    result = call(function, handle, ctypes.byref(struct))
    return result if isinstance(result, Failure) else struct


# -- sources ------------------------------------------------------------------------------------------------

Reader = Callable[[Any, frozenset[str]], SourceResult]


@dataclass(frozen=True, slots=True)
class Source:
    """One NVML call (or family of calls) and the fields it answers."""

    name: str
    fields: tuple[str, ...]
    read: Reader


SOURCES: dict[str, Source] = {}  # field -> its source


def source(name: str, *fields: str) -> Callable[[Reader], Reader]:
    def register(read: Reader) -> Reader:
        entry = Source(name, fields, read)
        for field in fields:
            SOURCES[field] = entry
        return read

    return register


def _each(fields: Iterable[str], value: Any, formatter: Callable[[Any], str]) -> SourceResult:
    """The same formatted reading for every field, or the call's Failure for all of them."""
    if isinstance(value, Failure):
        return value
    text = formatter(value)
    return dict.fromkeys(fields, text)


def _map(value: Any, formatted: Callable[[Any], Mapping[str, Cell]]) -> SourceResult:
    return value if isinstance(value, Failure) else formatted(value)


def _string_source(name: str, field: str, symbol: str, size: int) -> None:
    source(name, field)(lambda handle, _: _each((field,), read_string(symbol, size, handle), str))


_string_source("name", "name", "nvmlDeviceGetName", 96)
_string_source("serial", "serial", "nvmlDeviceGetSerial", 30)
_string_source("uuid", "uuid", "nvmlDeviceGetUUID", 96)
_string_source("vbios", "vbios_version", "nvmlDeviceGetVbiosVersion", 32)
_string_source("inforom_image", "inforom.img", "nvmlDeviceGetInforomImageVersion", 16)


def _uint_source(name: str, field: str, function: str, formatter: Callable[[Any], str]) -> None:
    source(name, field)(lambda handle, _: _each((field,), call(function, handle), formatter))


_uint_source("index", "index", "nvmlDeviceGetIndex", str)
_uint_source("pcie_gen_max", "pcie.link.gen.max", "nvmlDeviceGetMaxPcieLinkGeneration", str)
_uint_source("pcie_gen_gpumax", "pcie.link.gen.gpumax", "nvmlDeviceGetGpuMaxPcieLinkGeneration", str)
_uint_source("pcie_width_current", "pcie.link.width.current", "nvmlDeviceGetCurrPcieLinkWidth", str)
_uint_source("pcie_width_max", "pcie.link.width.max", "nvmlDeviceGetMaxPcieLinkWidth", str)
_uint_source("display_mode", "display_attached", "nvmlDeviceGetDisplayMode", yes_no)
_uint_source("display_active", "display_active", "nvmlDeviceGetDisplayActive", enabled)
_uint_source("persistence", "persistence_mode", "nvmlDeviceGetPersistenceMode", enabled)
_uint_source("accounting", "accounting.mode", "nvmlDeviceGetAccountingMode", enabled)
_uint_source("accounting_buffer", "accounting.buffer_size", "nvmlDeviceGetAccountingBufferSize", str)
_uint_source("addressing", "addressing_mode", "nvmlDeviceGetAddressingMode", lambda v: enum_text(ADDRESSING_MODES, v))
_uint_source("fan", "fan.speed", "nvmlDeviceGetFanSpeed", percent)
_uint_source("pstate", "pstate", "nvmlDeviceGetPerformanceState", lambda v: f"P{v}")
_uint_source("reasons_supported", "clocks_event_reasons.supported", "nvmlDeviceGetSupportedClocksEventReasons", hex64)
_uint_source("compute_mode", "compute_mode", "nvmlDeviceGetComputeMode", lambda v: enum_text(COMPUTE_MODES, v))
_uint_source("margin", "temperature.gpu.tlimit", "nvmlDeviceGetMarginTemperature", str)
_uint_source("power_usage", "power.draw", "nvmlDeviceGetPowerUsage", watts)
_uint_source("power_limit", "power.limit", "nvmlDeviceGetPowerManagementLimit", watts)
_uint_source("enforced_limit", "enforced.power.limit", "nvmlDeviceGetEnforcedPowerLimit", watts)
_uint_source("default_limit", "power.default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", watts)
_uint_source("retired_pending", "retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", yes_no)
_uint_source("inforom_valid", "inforom.checksum_validation", "nvmlDeviceValidateInforom", lambda _: "valid")


def _pair_source(name: str, fields: tuple[str, str], function: str, formatter: Callable[[Any], str]) -> None:
    def read(handle: Any, _: frozenset[str]) -> SourceResult:
        return _map(call(function, handle), lambda pair: {fields[0]: formatter(pair[0]), fields[1]: formatter(pair[1])})

    source(name, *fields)(read)


_pair_source("ecc_mode", ("ecc.mode.current", "ecc.mode.pending"), "nvmlDeviceGetEccMode", enabled)
_pair_source(
    "driver_model",
    ("driver_model.current", "driver_model.pending"),
    "nvmlDeviceGetDriverModel",
    lambda v: enum_text(DRIVER_MODELS, v),
)
_pair_source(
    "gom", ("gom.current", "gom.pending"), "nvmlDeviceGetGpuOperationMode", lambda v: enum_text(GPU_OPERATION_MODES, v)
)
_pair_source("mig_mode", ("mig.mode.current", "mig.mode.pending"), "nvmlDeviceGetMigMode", enabled)
_pair_source(
    "dram_encryption",
    ("dramEncryption.mode.current", "dramEncryption.mode.pending"),
    "nvmlDeviceGetDramEncryptionMode",
    enabled,
)
_pair_source(
    "limit_constraints", ("power.min_limit", "power.max_limit"), "nvmlDeviceGetPowerManagementLimitConstraints", watts
)


def _engine_utilization(name: str, field: str, function: str) -> None:
    source(name, field)(lambda handle, _: _each((field,), call(function, handle), lambda pair: percent(pair[0])))


_engine_utilization("util_encoder", "utilization.encoder", "nvmlDeviceGetEncoderUtilization")
_engine_utilization("util_decoder", "utilization.decoder", "nvmlDeviceGetDecoderUtilization")
_engine_utilization("util_jpeg", "utilization.jpeg", "nvmlDeviceGetJpgUtilization")
_engine_utilization("util_ofa", "utilization.ofa", "nvmlDeviceGetOfaUtilization")


@source("inforom_versions", "inforom.oem", "inforom.ecc", "inforom.pwr")
def _inforom_versions(handle: Any, wanted: frozenset[str]) -> SourceResult:
    objects = {"inforom.oem": 0, "inforom.ecc": 1, "inforom.pwr": 2}
    cells: dict[str, Cell] = {}
    for field, inforom_object in objects.items():
        if field in wanted:
            value = read_string("nvmlDeviceGetInforomVersion", 16, handle, ctypes.c_uint(inforom_object))
            cells[field] = value if isinstance(value, Failure) else str(value)
    return cells


@source("hostname", "hostname")
def _hostname(handle: Any, _: frozenset[str]) -> SourceResult:
    hostname = _struct("c_nvmlHostname_v1_t")
    if isinstance(hostname, Failure):
        return hostname
    result = call(struct_getter, "nvmlDeviceGetHostname_v1", hostname, handle)
    return _each(("hostname",), result, lambda _: _decode(_raw_member(hostname, "value", 64)))


@source("pci", *fields_under("pci."))
def _pci(handle: Any, _: frozenset[str]) -> SourceResult:
    info = _filled("nvmlPciInfoExt_v1_t", "nvmlPciInfoExt_v1", "nvmlDeviceGetPciInfoExt", handle)
    if isinstance(info, Failure):
        return info
    return {
        "pci.bus_id": _decode(_raw_member(info, "busId", 32)),
        "pci.domain": f"0x{info.domain:04X}",
        "pci.bus": f"0x{info.bus:02X}",
        "pci.device": f"0x{info.device:02X}",
        "pci.baseClass": f"0x{info.baseClass:X}",
        "pci.subClass": f"0x{info.subClass:X}",
        "pci.device_id": f"0x{info.pciDeviceId:08X}",
        "pci.sub_device_id": f"0x{info.pciSubSystemId:08X}",
    }


@source("pcie_gen_current", "pcie.link.gen.current", "pcie.link.gen.gpucurrent")
def _pcie_gen_current(handle: Any, _: frozenset[str]) -> SourceResult:
    value = call("nvmlDeviceGetCurrPcieLinkGeneration", handle)
    return _each(("pcie.link.gen.current", "pcie.link.gen.gpucurrent"), value, str)


@source("utilization", "utilization.gpu", "utilization.memory")
def _utilization(handle: Any, _: frozenset[str]) -> SourceResult:
    value = call("nvmlDeviceGetUtilizationRates", handle)
    return _map(value, lambda u: {"utilization.gpu": percent(u.gpu), "utilization.memory": percent(u.memory)})


REASON_FIELDS = tuple(f"{EVENT_REASONS_PREFIX}.{flag}" for flag in ("active", *REASON_BITS))


@source("reasons_active", *REASON_FIELDS)
def _reasons_active(handle: Any, _: frozenset[str]) -> SourceResult:
    def cells(mask: int) -> Mapping[str, Cell]:
        result: dict[str, Cell] = {f"{EVENT_REASONS_PREFIX}.active": hex64(mask)}
        for flag, bit in REASON_BITS.items():
            result[f"{EVENT_REASONS_PREFIX}.{flag}"] = active(mask & bit)
        return result

    return _map(call("nvmlDeviceGetCurrentClocksEventReasons", handle), cells)


@source("field_values", *FIELD_VALUE_IDS)
def _field_values(handle: Any, wanted: frozenset[str]) -> SourceResult:
    fields = [field for field in FIELD_VALUE_IDS if field in wanted]
    values = call("nvmlDeviceGetFieldValues", handle, [FIELD_VALUE_IDS[field][0] for field in fields])
    if isinstance(values, Failure):
        return values
    cells: dict[str, Cell] = {}
    for position, field in enumerate(fields):
        value = field_value(values[position])
        cells[field] = value if isinstance(value, Failure) else FIELD_VALUE_IDS[field][1](value)
    return cells


@source("memory", "memory.total", "memory.reserved", "memory.used", "memory.free")
def _memory(handle: Any, _: frozenset[str]) -> SourceResult:
    version = getattr(pynvml, "nvmlMemory_v2", None)
    memory = call("nvmlDeviceGetMemoryInfo", handle, version) if version is not None else Failure(FUNCTION_NOT_FOUND)
    if isinstance(memory, Failure) and memory.code == FUNCTION_NOT_FOUND:
        # Drivers before the v2 call: no reserved figure (v1 folds it into "used").
        legacy = call("nvmlDeviceGetMemoryInfo", handle)
        return _map(
            legacy,
            lambda m: {
                "memory.total": mib(m.total),
                "memory.reserved": Failure(NOT_SUPPORTED),
                "memory.used": mib(m.used),
                "memory.free": mib(m.free),
            },
        )
    return _map(
        memory,
        lambda m: {
            "memory.total": mib(m.total),
            "memory.reserved": mib(m.reserved),
            "memory.used": mib(m.used),
            "memory.free": mib(m.free),
        },
    )


@source("protected_memory", "protected_memory.total", "protected_memory.used", "protected_memory.free")
def _protected_memory(handle: Any, _: frozenset[str]) -> SourceResult:
    return _map(
        call("nvmlDeviceGetConfComputeProtectedMemoryUsage", handle),
        lambda m: {
            "protected_memory.total": mib(m.total),
            "protected_memory.used": mib(m.used),
            "protected_memory.free": mib(m.free),
        },
    )


@source("compute_cap", "compute_cap")
def _compute_cap(handle: Any, _: frozenset[str]) -> SourceResult:
    return _each(("compute_cap",), call("nvmlDeviceGetCudaComputeCapability", handle), lambda v: f"{v[0]}.{v[1]}")


ENCODER_FIELDS = fields_under("encoder.stats.")


@source("encoder_stats", *ENCODER_FIELDS)
def _encoder_stats(handle: Any, _: frozenset[str]) -> SourceResult:
    return _map(
        call("nvmlDeviceGetEncoderStats", handle),
        lambda stats: {field: str(value) for field, value in zip(ENCODER_FIELDS, stats, strict=True)},
    )


ECC_COUNTER_FIELDS = ecc_error_fields()


@source("ecc_counters", *ECC_COUNTER_FIELDS)
def _ecc_counters(handle: Any, wanted: frozenset[str]) -> SourceResult:
    cells: dict[str, Cell] = {}
    for field in ECC_COUNTER_FIELDS:
        if field not in wanted:
            continue
        _, _, kind, scope, location = field.split(".")
        if location == ECC_TOTAL:
            value = call("nvmlDeviceGetTotalEccErrors", handle, _ECC_TYPES[kind], _ECC_COUNTERS[scope])
        else:
            value = call(
                "nvmlDeviceGetMemoryErrorCounter",
                handle,
                _ECC_TYPES[kind],
                _ECC_COUNTERS[scope],
                _MEMORY_LOCATIONS[location],
            )
        cells[field] = value if isinstance(value, Failure) else str(value)
    return cells


SRAM_FIELDS = {
    "ecc.errors.uncorrected.volatile.sram.parity": "volatileUncParity",
    "ecc.errors.uncorrected.volatile.sram.secded": "volatileUncSecDed",
    "ecc.errors.uncorrected.aggregate.sram.parity": "aggregateUncParity",
    "ecc.errors.uncorrected.aggregate.sram.secded": "aggregateUncSecDed",
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded": "bThresholdExceeded",
    "ecc.errors.uncorrected.aggregate.sram.l2": "aggregateUncBucketL2",
    "ecc.errors.uncorrected.aggregate.sram.sm": "aggregateUncBucketSm",
    "ecc.errors.uncorrected.aggregate.sram.mcu": "aggregateUncBucketMcu",
    "ecc.errors.uncorrected.aggregate.sram.pcie": "aggregateUncBucketPcie",
    "ecc.errors.uncorrected.aggregate.sram.other": "aggregateUncBucketOther",
}


@source("sram", *SRAM_FIELDS)
def _sram(handle: Any, _: frozenset[str]) -> SourceResult:
    status = _filled(
        "c_nvmlEccSramErrorStatus_v1_t", "nvmlEccSramErrorStatus_v1", "nvmlDeviceGetSramEccErrorStatus", handle
    )
    if isinstance(status, Failure):
        return status
    cells: dict[str, Cell] = {}
    for field, member in SRAM_FIELDS.items():
        value = int(getattr(status, member))
        cells[field] = yes_no(value) if member == "bThresholdExceeded" else str(value)
    return cells


@source("retired_single_bit", "retired_pages.single_bit_ecc.count")
def _retired_single_bit(handle: Any, _: frozenset[str]) -> SourceResult:
    return _each(
        ("retired_pages.single_bit_ecc.count",), call("nvmlDeviceGetRetiredPages", handle, 0), lambda v: str(len(v))
    )


@source("retired_double_bit", "retired_pages.double_bit.count")
def _retired_double_bit(handle: Any, _: frozenset[str]) -> SourceResult:
    return _each(
        ("retired_pages.double_bit.count",), call("nvmlDeviceGetRetiredPages", handle, 1), lambda v: str(len(v))
    )


@source(
    "remapped_rows",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
def _remapped_rows(handle: Any, _: frozenset[str]) -> SourceResult:
    return _map(
        call("nvmlDeviceGetRemappedRows", handle),
        lambda rows: {
            "remapped_rows.correctable": str(rows[0]),
            "remapped_rows.uncorrectable": str(rows[1]),
            "remapped_rows.pending": yes_no(rows[2]),
            "remapped_rows.failure": yes_no(rows[3]),
        },
    )


@source("remapped_rows_v2", "remapped_rows.correctable_inactive", "remapped_rows.uncorrectable_inactive")
def _remapped_rows_v2(handle: Any, _: frozenset[str]) -> SourceResult:
    info = _filled("c_nvmlRemappedRowsInfo_v2_t", None, "nvmlDeviceGetRemappedRows_v2", handle)
    if isinstance(info, Failure):
        return info
    return {
        "remapped_rows.correctable_inactive": str(info.corrInactiveRemaps),
        "remapped_rows.uncorrectable_inactive": str(info.uncInactiveRemaps),
    }


HISTOGRAM_FIELDS = {f"remapped_rows.histogram.{name}": name for name in ("max", "high", "partial", "low", "none")}


@source("row_histogram", *HISTOGRAM_FIELDS)
def _row_histogram(handle: Any, _: frozenset[str]) -> SourceResult:
    return _map(
        call("nvmlDeviceGetRowRemapperHistogram", handle),
        lambda values: {field: str(getattr(values, member)) for field, member in HISTOGRAM_FIELDS.items()},
    )


@source("temperature", "temperature.gpu")
def _temperature(handle: Any, _: frozenset[str]) -> SourceResult:
    value = call("nvmlDeviceGetTemperatureV", handle, 0)
    if isinstance(value, Failure) and value.code == FUNCTION_NOT_FOUND:
        value = call("nvmlDeviceGetTemperature", handle, 0)
    return _each(("temperature.gpu",), value, str)


def _clock_source(name: str, prefix: str, function: str, kinds: tuple[str, ...]) -> None:
    fields = tuple(f"{prefix}.{kind}" for kind in kinds)

    def read(handle: Any, wanted: frozenset[str]) -> SourceResult:
        cells: dict[str, Cell] = {}
        for field, kind in zip(fields, kinds, strict=True):
            if field in wanted:
                value = call(function, handle, CLOCK_TYPES[kind])
                cells[field] = value if isinstance(value, Failure) else mhz(value)
        return cells

    source(name, *fields)(read)


_clock_source("clocks", "clocks.current", "nvmlDeviceGetClockInfo", ("graphics", "sm", "memory", "video"))
_clock_source("max_clocks", "clocks.max", "nvmlDeviceGetMaxClockInfo", ("graphics", "sm", "memory"))


@source("gsp", "gsp.mode.current", "gsp.mode.default")
def _gsp(handle: Any, _: frozenset[str]) -> SourceResult:
    # Fresh out-parameters: the binding's defaults are shared objects.
    value = call("nvmlDeviceGetGspFirmwareMode", handle, ctypes.c_uint(), ctypes.c_uint())
    return _map(value, lambda pair: {"gsp.mode.current": enabled(pair[0]), "gsp.mode.default": enabled(pair[1])})


@source("c2c", "c2c.mode")
def _c2c(handle: Any, _: frozenset[str]) -> SourceResult:
    return _each(("c2c.mode",), call("nvmlDeviceGetC2cModeInfoV", handle), lambda info: enabled(info.isC2cEnabled))


FABRIC_FIELDS = fields_under("fabric.")


def _status_text(code: int) -> str:
    if code == SUCCESS:
        return "Success"
    text = call("nvmlErrorString", code)
    return text if isinstance(text, str) and text else f"Unknown({code})"


@source("fabric", *FABRIC_FIELDS)
def _fabric(handle: Any, _: frozenset[str]) -> SourceResult:
    info = _filled("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2", "nvmlDeviceGetGpuFabricInfoV", handle)
    if isinstance(info, Failure):
        return info
    if info.state == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        return Failure(NOT_SUPPORTED)
    return {
        "fabric.state": enum_text(FABRIC_STATES, int(info.state)),
        "fabric.status": _status_text(int(info.status)),
        "fabric.cliqueId": str(info.cliqueId),
        "fabric.clusterUuid": uuid_text(bytes(info.clusterUuid)),
    }


ARGUMENT_VERSION_MISMATCH = 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: a driver older than the struct asked for


def fabric_health(handle: Any) -> tuple[float | None, float | None, Failure | None]:
    """NVML's fabric health mask and summary as DCGM reads them (``ReadFabricManagerStatusField``): the v3 struct,
    and the v2 one on a driver without it, which has no summary (DCGM's NOT_SUPPORTED blank); the failure, if any,
    of the last call."""
    info = _filled("c_nvmlGpuFabricInfo_v3_t", "nvmlGpuFabricInfo_v3", "nvmlDeviceGetGpuFabricInfoV", handle)
    if isinstance(info, Failure) and info.code in (ARGUMENT_VERSION_MISMATCH, FUNCTION_NOT_FOUND):
        info = _filled("c_nvmlGpuFabricInfo_v2_t", "nvmlGpuFabricInfo_v2", "nvmlDeviceGetGpuFabricInfoV", handle)
        if not isinstance(info, Failure):
            return float(info.healthMask), None, None
    if isinstance(info, Failure):
        return None, None, info
    return float(info.healthMask), float(info.healthSummary), None


PLATFORM_FIELDS = fields_under("platform.")


def _byte(struct: ctypes.Structure, member: str) -> int:
    """A ``c_char`` member as a number, read raw (the bindings would decode it as UTF-8, and may fail)."""
    return _raw_member(struct, member, 1)[0]


@source("platform", *PLATFORM_FIELDS)
def _platform(handle: Any, _: frozenset[str]) -> SourceResult:
    info = _filled("c_nvmlPlatformInfo_v2_t", "nvmlPlatformInfo_v2", "nvmlDeviceGetPlatformInfo", handle)
    if isinstance(info, Failure):
        return info
    guid = _raw_member(info, "ibGuid", 16)
    return {
        "platform.chassis_serial_number": _decode(_raw_member(info, "chassisSerialNumber", 16)),
        "platform.slot_number": str(_byte(info, "slotNumber")),
        "platform.tray_index": str(_byte(info, "trayIndex")),
        "platform.host_id": str(_byte(info, "hostId")),
        "platform.peer_type": enum_text(PEER_TYPES, _byte(info, "peerType")),
        "platform.module_id": str(_byte(info, "moduleId")),
        "platform.gpu_fabric_guid": hex64(int.from_bytes(guid[:8], "big")),
    }


def sources_for(fields: Iterable[str]) -> list[tuple[Source, frozenset[str]]]:
    """The sources a set of catalog fields needs, each once, with the fields wanted from it."""
    wanted: dict[str, set[str]] = {}
    order: dict[str, Source] = {}
    for field in fields:
        entry = SOURCES.get(field)
        if entry is None:
            continue
        order.setdefault(entry.name, entry)
        wanted.setdefault(entry.name, set()).add(field)
    return [(entry, frozenset(wanted[name])) for name, entry in order.items()]
