"""The exact cell text nvidia-smi prints for a reading: units, words, enum names and the tokens of failed reads.

The nvml backend renders its readings to nvidia-smi's text and hands them to the same transform and render
pipeline as exec, so a field's metric is identical whichever backend read it. This module only formats;
:mod:`.sources` makes the NVML calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from nvidia_gpu_exporter.backends.nvml.api import DEPRECATED, FUNCTION_NOT_FOUND, NO_PERMISSION, NOT_SUPPORTED, Failure

Cell: TypeAlias = str | Failure

MIB = 1_048_576

NA = "[N/A]"
NO_PERMISSION_TOKEN = "[Insufficient Permissions]"
DEPRECATED_TOKEN = "[Requested functionality has been deprecated]"
FUNCTION_NOT_FOUND_TOKEN = "[Function Not Found]"
UNKNOWN_ERROR_TOKEN = "[Unknown Error]"
BARE_NA = "N/A"

# Fields nvidia-smi prints as a bare "N/A" (no brackets) when it has no reading.
BARE_NA_FIELDS = frozenset(
    {"fabric.state", "fabric.status", "fabric.cliqueId", "fabric.clusterUuid", "temperature.memory"}
)
# Fields nvidia-smi no longer reads at all: always the deprecation token, no NVML call.
DEPRECATED_FIELDS = frozenset(
    {
        "display_mode",
        "power.management",
        "clocks.applications.graphics",
        "clocks.applications.memory",
        "clocks.default_applications.graphics",
        "clocks.default_applications.memory",
    }
)


_TOKENS = {
    NOT_SUPPORTED: NA,
    NO_PERMISSION: NO_PERMISSION_TOKEN,
    DEPRECATED: DEPRECATED_TOKEN,
    FUNCTION_NOT_FOUND: FUNCTION_NOT_FOUND_TOKEN,
}


def token(code: int, field: str = "") -> str:
    """The text nvidia-smi prints for a reading that failed with ``code``."""
    if field in BARE_NA_FIELDS:
        return BARE_NA
    return _TOKENS.get(code, UNKNOWN_ERROR_TOKEN)


# -- formatting: one function per shape of cell ------------------------------------------------------------


def enabled(value: int) -> str:
    return "Enabled" if value else "Disabled"


def yes_no(value: int) -> str:
    return "Yes" if value else "No"


def active(value: int) -> str:
    return "Active" if value else "Not Active"


def percent(value: int) -> str:
    return f"{value} %"


def mhz(value: int) -> str:
    return f"{value} MHz"


def watts(milliwatts: float) -> str:
    return f"{milliwatts / 1000:.2f} W"


def mib(size_bytes: int) -> str:
    """Bytes as nvidia-smi prints memory: MiB rounded **up**, each cell on its own."""
    return f"{-(-size_bytes // MIB)} MiB"


def hex64(value: int) -> str:
    return f"0x{value:016X}"


def enum_text(names: Mapping[int, str], value: int) -> str:
    return names.get(value, f"Unknown({value})")


def uuid_text(raw: bytes) -> str:
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


ADDRESSING_MODES = {0: "None", 1: "HMM", 2: "ATS"}
DRIVER_MODELS = {0: "WDDM", 1: "TCC", 2: "MCDM"}
GPU_OPERATION_MODES = {0: "All On", 1: "Compute", 2: "Low Double Precision"}
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
RECOVERY_ACTIONS = {0: "None", 1: "GPU Reset", 2: "Node Reboot", 3: "Drain P2P", 4: "Drain and Reset"}
FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}
PEER_TYPES = {0: "Direct Connected"}
