"""What DCGM makes of a GPU's NVLink fabric registration (``nvmlDeviceGetGpuFabricInfoV``), from the two cells
nvidia-smi prints of it: ``fabric.state`` and ``fabric.status``.

DCGM's ``DcgmCacheManager::GetFMStatusFromStruct`` (NVIDIA/DCGM) turns NVML's state into its
``dcgmFabricManagerStatus_t`` (``DCGM_FI_DEV_FABRIC_MANAGER_STATUS``): not supported 0, not started 1, in progress
2, and a completed registration 3 (success) or 4 (failure) by its status; the failure's code
(``DCGM_FI_DEV_FABRIC_MANAGER_ERROR``) is DCGM's return code for NVML's (``NvmlReturnToDcgmReturn``), set only once
the state is completed. nvidia-smi prints the status as NVML's error string, so the code is read back from it.
"""

from __future__ import annotations

from enum import IntEnum

from nvidia_gpu_exporter.model.fields import ValueKind
from nvidia_gpu_exporter.model.values import ABSENT_TOKENS, ENUM_VALUES


class FabricManagerStatus(IntEnum):
    """DCGM's ``dcgmFabricManagerStatus_t`` (dcgm_structs.h)."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    SUCCESS = 3
    FAILURE = 4


class FabricHealthSummary(IntEnum):
    """NVML's ``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` (nvmlGpuFabricInfo_v3_t), which DCGM serves unchanged as
    ``DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY`` (dcgm_fields.h, field 175)."""

    NOT_SUPPORTED = 0
    HEALTHY = 1
    UNHEALTHY = 2
    LIMITED_CAPACITY = 3


# NVML's fabric health mask (``DCGM_FI_DEV_FABRIC_HEALTH_MASK``, field 174), two bits per condition at these shifts
# (``NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*``): 0 not supported, 1 true, 2 false; the incorrect-configuration nibble at
# shift 8 says 1 for none. A fabric with no trouble: every condition false, no incorrect configuration.
_FALSE = 2
_NO_INCORRECT_CONFIGURATION = 1
HEALTHY_FABRIC_MASK = (
    _FALSE << 0  # degraded bandwidth
    | _FALSE << 2  # route recovery in progress
    | _FALSE << 4  # route unhealthy
    | _FALSE << 6  # access timeout recovery
    | _NO_INCORRECT_CONFIGURATION << 8
)

FABRIC_FIELDS = ("fabric.state", "fabric.status")  # the query fields that print nvmlDeviceGetGpuFabricInfoV
COMPLETED = 3.0  # NVML_GPU_FABRIC_STATE_COMPLETED, as ENUM_VALUES reads "Completed"
SUCCESS_TEXT = "success"
DCGM_ST_OK = 0
DCGM_ST_NVML_ERROR = -8  # NvmlReturnToDcgmReturn's default
# NvmlReturnToDcgmReturn's own cases (DcgmUtilities.h), by NVML's error string as nvidia-smi prints the status.
DCGM_RETURN_BY_STATUS: dict[str, int] = {
    "not supported": -6,  # DCGM_ST_NOT_SUPPORTED
    "insufficient permissions": -17,  # DCGM_ST_NO_PERMISSION
    "not found": -14,  # DCGM_ST_NO_DATA
    "timeout": -11,  # DCGM_ST_TIMEOUT
    "gpu is lost": -18,  # DCGM_ST_GPU_IS_LOST
    "gpu requires reset": -19,  # DCGM_ST_RESET_REQUIRED
    "invalid argument": -1,  # DCGM_ST_BADPARAM
    "insufficient resources": -49,  # DCGM_ST_INSUFFICIENT_RESOURCES
    "uninitialized": -56,  # DCGM_ST_NVML_NOT_LOADED
}


def _state(state: str) -> float | None:
    key = state.strip().lower()
    return None if key in ABSENT_TOKENS else ENUM_VALUES[ValueKind.FABRIC_STATE].get(key)


def _readable(status: str) -> bool:
    """A status nvidia-smi could read: not N/A, nor one of its bracketed error tokens (``[Unknown Error]``)."""
    key = status.strip().lower()
    return key not in ABSENT_TOKENS and not key.startswith("[")


def _succeeded(status: str) -> bool:
    return status.strip().lower() == SUCCESS_TEXT


def fabric_manager_status(state: str, status: str) -> FabricManagerStatus | None:
    """DCGM_FI_DEV_FABRIC_MANAGER_STATUS of the two cells; ``None`` where NVML had no fabric to tell of (N/A), or a
    completed registration's status cannot be read."""
    value = _state(state)
    if value is None:
        return None
    if value == COMPLETED:
        if not _readable(status):
            return None
        return FabricManagerStatus.SUCCESS if _succeeded(status) else FabricManagerStatus.FAILURE
    return FabricManagerStatus(int(value))


def fabric_manager_error(state: str, status: str) -> int | None:
    """DCGM_FI_DEV_FABRIC_MANAGER_ERROR: the completed registration's DCGM return code; ``None`` (DCGM's blank)
    before it completed or without a fabric."""
    if _state(state) != COMPLETED or not _readable(status):
        return None
    if _succeeded(status):
        return DCGM_ST_OK
    return DCGM_RETURN_BY_STATUS.get(status.strip().lower(), DCGM_ST_NVML_ERROR)
