"""The GPUs the node should have: the NVIDIA functions under ``<sysfs>/bus/pci/devices``, whatever holds them.

A GPU the driver lost still sits on the bus: bound to vfio-pci or to no driver after a reboot, or bound to
nvidia but fallen off the bus. Comparing this list with the backend's GPUs is what makes such a loss visible.

Everything is bounded: at most ``limit`` entries are listed, each attribute read is capped at
:data:`MAX_ATTRIBUTE_BYTES`, and an unreadable or malformed entry is skipped and reported, never raised. A
read of a dying device can hang in the kernel, so :class:`SysfsScanner` scans in a daemon thread (exiting the
exporter never waits for it), never starts a second one while the first still hangs, and bounds the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from nvidia_gpu_exporter.model.pci import smi_bus_id
from nvidia_gpu_exporter.model.pcibus import NO_DRIVER, PciFunction, PciInventory, PciKind
from nvidia_gpu_exporter.support.asynctimeout import within_timeout

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_FUNCTIONS = 4096  # entries listed per scan; a real node has a few hundred PCI functions
MAX_ATTRIBUTE_BYTES = 64  # vendor, device and class are one short hex number each
NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = frozenset({0x0300, 0x0302})  # VGA compatible controller, 3D controller
NVSWITCH_CLASS = 0x0680  # "other bridge", which is how NVSwitches present themselves
UNKNOWN_DRIVER = "unknown"  # a driver link that cannot be read, or names no plausible driver
SHOWN_SKIPPED = 5  # skipped entries named in one log line
_HEX = re.compile(r"0x[0-9a-fA-F]{1,8}")
_DRIVER_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


class SysfsError(Exception):
    """The devices directory cannot be listed (or the scan hung): no reading at all."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry left out of the reading, and why."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class SysfsScan:
    """One scan: the NVIDIA functions found, the entries skipped, and whether more entries were left unread."""

    inventory: PciInventory
    skipped: tuple[Skipped, ...] = ()
    truncated: bool = False


# Paths are plain strings joined with os.path.join, never pathlib: pathlib interns every part of every path it
# parses, and a scan's parts (the bus addresses) die with the scan, so each collection removed and re-added
# entries of the interpreter's interned-string table until that table doubled, ~1 MiB of RSS kept for good
# (BENCHMARKS.md, "A timed soak").
def devices_directory(root: str) -> str:
    return os.path.join(root, "bus", "pci", "devices")


def read_attribute(path: str) -> str:
    """A small ASCII attribute file, stripped; ValueError when it is too long or not ASCII."""
    name = os.path.basename(path)
    with open(path, "rb") as attribute:
        data = attribute.read(MAX_ATTRIBUTE_BYTES + 1)
    if len(data) > MAX_ATTRIBUTE_BYTES:
        raise ValueError(f"{name}: longer than {MAX_ATTRIBUTE_BYTES} bytes")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not ASCII text") from None


def read_hex(path: str) -> int:
    text = read_attribute(path)
    if not _HEX.fullmatch(text):
        raise ValueError(f"{os.path.basename(path)}: not a hex number: {text[:20]!r}")
    return int(text, 16)


def bound_driver(entry: str) -> str:
    """The name of the driver bound to the function (its ``driver`` link's last part), or ``none``."""
    try:
        target = os.readlink(os.path.join(entry, "driver"))
    except FileNotFoundError:
        return NO_DRIVER
    except OSError:
        return UNKNOWN_DRIVER
    name = target.rstrip("/").rpartition("/")[2]
    return name if _DRIVER_NAME.fullmatch(name) else UNKNOWN_DRIVER


def read_function(entry: str, bus_id: str) -> PciFunction | None:
    """The function if it is an NVIDIA GPU or NVSwitch, else ``None``; OSError or ValueError when unreadable.

    Only the vendor is read for every function: another vendor's costs one read."""
    if read_hex(os.path.join(entry, "vendor")) != NVIDIA_VENDOR:
        return None
    subclass = read_hex(os.path.join(entry, "class")) >> 8
    if subclass in GPU_CLASSES:
        kind = PciKind.GPU
    elif subclass == NVSWITCH_CLASS:
        kind = PciKind.NVSWITCH
    else:
        return None  # the audio, USB and UCSI functions of consumer boards
    device = read_hex(os.path.join(entry, "device"))
    return PciFunction(bus_id, kind, f"0x{device:04x}", bound_driver(entry))


def _reason(error: OSError | ValueError) -> str:
    if isinstance(error, OSError):
        name = os.path.basename(error.filename) if isinstance(error.filename, str) else ""
        return f"{name}: {error.strerror or error}" if name else str(error.strerror or error)
    return str(error)


def scan(root: str, limit: int = MAX_FUNCTIONS) -> SysfsScan:
    """Read the NVIDIA functions of the sysfs mounted at ``root``; :class:`SysfsError` if it cannot be listed."""
    directory = devices_directory(root)
    names: list[str] = []
    truncated = False
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if len(names) == limit:
                    truncated = True
                    break
                names.append(entry.name)
    except OSError as error:
        raise SysfsError(f"cannot list {directory}: {error.strerror or error}") from error
    functions: list[PciFunction] = []
    skipped = [Skipped(name, "not a PCI address") for name in sorted(names) if smi_bus_id(name) is None]
    addressed = [(bus_id, name) for name in names if (bus_id := smi_bus_id(name)) is not None]
    seen: set[str] = set()
    # Bus order; of two spellings of one address (garbage, but possible in a copied tree) the kernel's shorter wins.
    for bus_id, name in sorted(addressed, key=lambda pair: (pair[0], len(pair[1]), pair[1])):
        try:
            function = read_function(os.path.join(directory, name), bus_id)
        except (OSError, ValueError) as error:
            skipped.append(Skipped(name, _reason(error)))
            continue
        if function is None:
            continue
        if bus_id in seen:
            skipped.append(Skipped(name, f"a second entry for {bus_id}"))
            continue
        seen.add(bus_id)
        functions.append(function)
    return SysfsScan(PciInventory(tuple(functions)), tuple(skipped), truncated)


ScanFunction = Callable[[str, int], SysfsScan]


def scan_in_thread(
    root: str, timeout_seconds: float, *, limit: int = MAX_FUNCTIONS, scan_function: ScanFunction = scan
) -> SysfsScan:
    """:func:`scan` from synchronous code (the doctor), given up after ``timeout_seconds``."""
    outcome: list[SysfsScan | BaseException] = []

    def work() -> None:
        try:
            outcome.append(scan_function(root, limit))
        except Exception as error:  # handed to the caller below
            outcome.append(error)

    thread = threading.Thread(target=work, name="sysfs-scan", daemon=True)
    thread.start()
    thread.join(timeout_seconds)
    if not outcome:
        raise SysfsError(f"the scan of {devices_directory(root)} did not return within {timeout_seconds:g}s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _set_result(future: asyncio.Future[T], result: T) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[T], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


def _in_daemon_thread(function: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``function`` in a new daemon thread; its outcome settles the returned future on this loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            result = function()
        except Exception as error:
            with contextlib.suppress(RuntimeError):  # the loop closed while the thread was stuck
                loop.call_soon_threadsafe(_set_exception, future, error)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_result, future, result)

    threading.Thread(target=work, name="sysfs-scan", daemon=True).start()
    return future


def _settled(future: asyncio.Future[SysfsScan]) -> None:
    """Retrieve the outcome of a scan nobody waited for any more, so asyncio does not log it as lost."""
    if not future.cancelled():
        future.exception()


class SysfsScanner:
    """A :class:`~nvidia_gpu_exporter.model.pcibus.PciSource` on the sysfs mounted at ``root``.

    One scan per call, in a daemon thread, bounded by ``timeout_seconds``; while a scan hangs, calls answer
    ``None`` at once instead of starting another thread. Problems are logged once each time they change.
    """

    def __init__(
        self,
        root: str,
        *,
        timeout_seconds: float,
        limit: int = MAX_FUNCTIONS,
        scan_function: ScanFunction = scan,
    ) -> None:
        self.root = root
        self.timeout_seconds = timeout_seconds
        self.limit = limit
        self._scan_function = scan_function
        self._running: asyncio.Future[SysfsScan] | None = None
        self._state: tuple[object, ...] = ("ok",)

    @property
    def idle(self) -> bool:
        """No scan thread is running."""
        return self._running is None or self._running.done()

    async def pci_inventory(self) -> PciInventory | None:
        directory = devices_directory(self.root)
        if not self.idle:
            self._report(("stuck",), "the sysfs scan did not return: no PCI reading until it does", directory)
            return None
        running = self._running = _in_daemon_thread(lambda: self._scan_function(self.root, self.limit))
        running.add_done_callback(_settled)
        try:
            result = await within_timeout(asyncio.shield(running), self.timeout_seconds)
        except asyncio.TimeoutError:
            self._report(("stuck",), "the sysfs scan did not return: no PCI reading until it does", directory)
            return None
        except SysfsError as error:
            self._report(("unreadable",), "cannot read the PCI devices in sysfs: lost GPUs go unseen", directory, error)
            return None
        except Exception as error:  # a reader bug must never fail a collection
            self._report(("failed", repr(error)), "the sysfs scan failed", directory, error)
            return None
        self._report_scan(result, directory)
        return result.inventory

    def _report_scan(self, result: SysfsScan, directory: str) -> None:
        names = tuple(skipped.name for skipped in result.skipped)
        if not names and not result.truncated:
            self._report(("ok",), "", directory)
            return
        shown = "; ".join(f"{skipped.name} ({skipped.reason})" for skipped in result.skipped[:SHOWN_SKIPPED])
        if len(names) > SHOWN_SKIPPED:
            shown += f"; and {len(names) - SHOWN_SKIPPED} more"
        message = "sysfs lists PCI functions that were skipped" if names else "sysfs lists more PCI functions"
        extra = {"skipped": shown} if names else {}
        if result.truncated:
            extra["limit"] = str(self.limit)
            message += f" (only the first {self.limit} entries are read)" if names else f" than the {self.limit} read"
        self._report(("partial", names, result.truncated), message, directory, extra=extra)

    def _report(
        self,
        state: tuple[object, ...],
        message: str,
        directory: str,
        error: BaseException | None = None,
        *,
        extra: dict[str, str] | None = None,
    ) -> None:
        """Log ``message`` when the state changes: a warning for a problem, one info line on recovery."""
        if state == self._state:
            return
        previous, self._state = self._state, state
        if state == ("ok",):
            log.info("sysfs lists the PCI devices again", extra={"path": directory, "was": str(previous[0])})
            return
        fields = {"path": directory, **(extra or {})}
        if error is not None:
            fields["err"] = str(error)
        log.warning(message, extra=fields)
