"""The one door to NVML: every pynvml call goes through :func:`call`, which turns any failure into a code.

NVML must never take the exporter down, whatever the driver (or a binding newer than the driver) does.
``NVMLError`` becomes its return code; a binding/driver version mismatch and a getter the installed
bindings lack become FUNCTION_NOT_FOUND; anything else a call raises (a bad struct, undecodable bytes)
becomes UNKNOWN. Callers branch on :class:`Failure` values instead of catching exceptions.

Strings are read through :func:`string_getter` rather than the bindings' wrappers, which decode strictly
and would turn one bad byte into an exception: undecodable bytes are kept as surrogate escapes, and the
exposition then drops the GPU exactly as it does for invalid UTF-8 printed by nvidia-smi. That takes two
private helpers of the bindings (:data:`PRIVATE_HELPERS`); this module is the only code that uses them,
pyproject pins the nvidia-ml-py range they were verified on (:data:`SUPPORTED_BINDINGS`), and
:func:`bindings_problem` turns their absence into a startup error naming that range.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from nvidia_gpu_exporter._go.strconv import UINT64_MAX

log = logging.getLogger(__name__)

SUCCESS = 0
UNINITIALIZED = 1
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
DEPRECATED = 26
GPU_NOT_FOUND = 28
UNKNOWN = 999

# Failures that mean the NVML session itself is gone: the cycle is fatal and NVML is re-initialized.
LIFECYCLE_CODES = frozenset({UNINITIALIZED, DRIVER_NOT_LOADED, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH, GPU_NOT_FOUND})

# The nvidia-ml-py releases this module was verified with (pyproject.toml pins the same range).
SUPPORTED_BINDINGS = "nvidia-ml-py>=12.575.51,<14"
# The bindings' private helpers: a C function's pointer (FUNCTION_NOT_FOUND when the library lacks it) and
# the return-code check that raises NVMLError.
PRIVATE_HELPERS = ("_nvmlGetFunctionPointer", "_nvmlCheckReturn")

NA_UINT64 = UINT64_MAX  # NVML's "not available" for 64-bit readings
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed NVML call: its return code."""

    code: int

    @property
    def lifecycle(self) -> bool:
        return self.code in LIFECYCLE_CODES


def _return_names() -> dict[int, str]:
    names = {SUCCESS: "SUCCESS"}
    for attribute in dir(pynvml):
        value = getattr(pynvml, attribute)
        if attribute.startswith("NVML_ERROR_") and isinstance(value, int):
            names.setdefault(value, attribute.removeprefix("NVML_"))
    return names


_RETURN_NAMES = _return_names()


def return_name(code: int) -> str:
    """The symbolic name of a return code, as go-nvml prints it (``ERROR_GPU_IS_LOST``)."""
    return _RETURN_NAMES.get(code, f"ERROR_UNKNOWN_CODE_{code}")


def call(function: str | Callable[..., Any], *args: Any) -> Any:
    """Call a pynvml function (by name, so bindings that lack it degrade) and return its result or a Failure."""
    if isinstance(function, str):
        target = getattr(pynvml, function, None)
        if target is None:
            return Failure(FUNCTION_NOT_FOUND)
    else:
        target = function
    try:
        return target(*args)
    except pynvml.NVMLError as error:
        value = getattr(error, "value", UNKNOWN)
        return Failure(value if isinstance(value, int) else UNKNOWN)
    except pynvml.NVMLLibraryMismatchError:
        return Failure(FUNCTION_NOT_FOUND)
    except Exception as error:  # whatever the library does, the exporter keeps running
        log.debug("NVML call raised", extra={"function": str(function), "err": repr(error)})
        return Failure(UNKNOWN)


def bindings_version() -> str:
    """The installed nvidia-ml-py's version, or ``unknown`` where its metadata is not installed."""
    # Only a refusal names it: importlib.metadata loads zipfile, email and csv (issue 16: memory at rest).
    import importlib.metadata  # noqa: PLC0415

    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def bindings_problem() -> str | None:
    """Why the installed bindings cannot serve the nvml backend (naming the supported range), or ``None``."""
    missing = [name for name in PRIVATE_HELPERS if not callable(getattr(pynvml, name, None))]
    if not missing:
        return None
    return (
        f"the installed nvidia-ml-py {bindings_version()} lacks pynvml.{', pynvml.'.join(missing)}, "
        f"which the nvml backend reads strings and structs through; install {SUPPORTED_BINDINGS}"
    )


def exports(symbol: str) -> bool:
    """Whether the loaded libnvidia-ml exports ``symbol`` (NVML must be initialized)."""
    return not isinstance(call(pynvml._nvmlGetFunctionPointer, symbol), Failure)


def string_getter(symbol: str, size: int, *leading: Any) -> str:
    """Call a C string getter ``symbol(*leading, buffer, length)``; raises NVMLError like the bindings."""
    target = pynvml._nvmlGetFunctionPointer(symbol)
    buffer = ctypes.create_string_buffer(size)
    pynvml._nvmlCheckReturn(target(*leading, buffer, ctypes.c_uint(size)))
    value: bytes = buffer.value
    return value.decode("utf-8", "surrogateescape")


def struct_getter(symbol: str, struct: ctypes.Structure, *leading: Any) -> None:
    """Call ``symbol(*leading, &struct)``; the caller reads the struct's bytes itself."""
    target = pynvml._nvmlGetFunctionPointer(symbol)
    pynvml._nvmlCheckReturn(target(*leading, ctypes.byref(struct)))


def read_string(symbol: str, size: int, *leading: Any) -> Any:
    """:func:`string_getter` through :func:`call`: the string, or a Failure."""
    return call(string_getter, symbol, size, *leading)


def handle_key(handle: Any) -> int:
    """A stable key for a device handle: handles are ctypes pointers that neither hash nor compare by value."""
    address = ctypes.cast(handle, ctypes.c_void_p).value
    return int(address or 0)
