"""Lost GPUs: the sysfs reader on fake trees (docs/metrics.md, "PCI devices") and its scanner, which reads off the
event loop, one thread at a time, bounded by a timeout, logging once per change of state."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from pathlib import Path

import pytest

from async_helpers import bounded, run
from nvidia_gpu_exporter.health.sysfs import (
    MAX_ATTRIBUTE_BYTES,
    MAX_FUNCTIONS,
    SysfsError,
    SysfsScan,
    SysfsScanner,
    scan,
    scan_in_thread,
)
from nvidia_gpu_exporter.model.pci import smi_bus_id
from nvidia_gpu_exporter.model.pcibus import NO_DRIVER, PciFunction, PciInventory, PciKind
from spies import record_calls
from sysfs_fakes import (
    CLASS_AUDIO,
    CLASS_VGA,
    FakeFunction,
    add_function,
    device_dir,
    gpu,
    make_sysfs,
    nvswitch,
    other,
)

GPU_A = PciFunction("00000000:3B:00.0", PciKind.GPU, "0x2335", "nvidia")
GPU_B = PciFunction("00000000:5E:00.0", PciKind.GPU, "0x2335", "vfio-pci")
SWITCH = PciFunction("00000000:C4:00.0", PciKind.NVSWITCH, "0x22a3", "nvidia-nvswitch")


# -- bus ids -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("0000:3b:00.0", "00000000:3B:00.0"),
        ("0000:07:1f.7", "00000000:07:1F.7"),
        ("00000000:3B:00.0", "00000000:3B:00.0"),
        ("10000:e1:00.0", "00010000:E1:00.0"),
        ("0000:3b:00", None),
        ("0000:3b:00.8", None),
        ("000:3b:00.0", None),
        ("000000000:3b:00.0", None),
        ("0000:3g:00.0", None),
        ("0000:3b:00.0\n", None),
        ("", None),
    ],
    ids=[
        "sysfs form to nvidia-smi's",
        "device and function digits upper-cased",
        "nvidia-smi's own form unchanged",
        "a VMD domain of five digits",
        "no function",
        "function above 7",
        "domain too short",
        "domain too long",
        "not hex",
        "trailing newline",
        "empty",
    ],
)
def test_bus_ids_take_nvidia_smis_form(address: str, expected: str | None) -> None:
    assert smi_bus_id(address) == expected


# -- the reader on fake trees --------------------------------------------------------------------------------

READER_CASES: dict[str, tuple[list[FakeFunction], list[PciFunction]]] = {
    "GPU bound to nvidia": ([gpu("0000:3b:00.0")], [GPU_A]),
    "GPU bound to vfio-pci": (
        [gpu("0000:5e:00.0", driver="vfio-pci")],
        [PciFunction("00000000:5E:00.0", PciKind.GPU, "0x2335", "vfio-pci")],
    ),
    "GPU without a driver": (
        [gpu("0000:5e:00.0", driver=None)],
        [PciFunction("00000000:5E:00.0", PciKind.GPU, "0x2335", NO_DRIVER)],
    ),
    "VGA-class GPU": (
        [FakeFunction("0000:01:00.0", device="0x2684", pci_class=CLASS_VGA)],
        [PciFunction("00000000:01:00.0", PciKind.GPU, "0x2684", "nvidia")],
    ),
    "NVSwitch counted apart": ([nvswitch("0000:c4:00.0")], [SWITCH]),
    "non-NVIDIA devices ignored": ([other("0000:00:01.0"), other("0000:00:02.0", vendor="0x1002")], []),
    "NVIDIA audio function ignored": ([FakeFunction("0000:01:00.1", pci_class=CLASS_AUDIO)], []),
    "no GPU at all (an empty bus)": ([], []),
    "sorted by address": (
        [gpu("0000:5e:00.0", driver="vfio-pci"), nvswitch("0000:c4:00.0"), gpu("0000:3b:00.0"), other("0000:00:01.0")],
        [GPU_A, GPU_B, SWITCH],
    ),
}


@pytest.mark.parametrize(("tree", "functions"), READER_CASES.values(), ids=READER_CASES.keys())
def test_the_reader_lists_nvidia_gpus_and_nvswitches(
    tmp_path: Path, tree: list[FakeFunction], functions: list[PciFunction]
) -> None:
    result = scan(str(make_sysfs(tmp_path, tree)))
    assert result.inventory.functions == tuple(functions)
    assert result.skipped == ()
    assert not result.truncated


def test_gpus_expected_counts_gpus_only(tmp_path: Path) -> None:
    tree = make_sysfs(tmp_path, [gpu("0000:3b:00.0"), gpu("0000:5e:00.0", driver="vfio-pci"), nvswitch("0000:c4:00.0")])
    inventory = scan(str(tree)).inventory
    assert [function.bus_id for function in inventory.gpus] == ["00000000:3B:00.0", "00000000:5E:00.0"]
    assert [function.bus_id for function in inventory.nvswitches] == ["00000000:C4:00.0"]


def _garbage_class(root: Path) -> None:
    (device_dir(root, "0000:5e:00.0") / "class").write_text("3D controller\n", encoding="ascii")


def _unreadable_vendor(root: Path) -> None:
    vendor = device_dir(root, "0000:5e:00.0") / "vendor"
    vendor.unlink()
    vendor.mkdir()  # reading it fails with EISDIR, whoever runs the tests (root reads any mode)


def _oversized_device(root: Path) -> None:
    (device_dir(root, "0000:5e:00.0") / "device").write_text("0x" + "0" * MAX_ATTRIBUTE_BYTES, encoding="ascii")


def _binary_vendor(root: Path) -> None:
    (device_dir(root, "0000:5e:00.0") / "vendor").write_bytes(b"\xff\xfe\x00\x01")


def _missing_class(root: Path) -> None:
    (device_dir(root, "0000:5e:00.0") / "class").unlink()


def _stray_entry(root: Path) -> None:
    (root / "bus" / "pci" / "devices" / "not-a-pci-address").mkdir()


def _repeated_address(root: Path) -> None:
    add_function(root, gpu("00000000:3b:00.0"))  # the same function as 0000:3b:00.0 in another spelling


def _driver_link_to_garbage(root: Path) -> None:
    link = device_dir(root, "0000:5e:00.0") / "driver"
    link.unlink()
    link.symlink_to("../drivers/nv\tidia")


BROKEN: dict[str, tuple[object, str, str]] = {
    "garbage class file": (_garbage_class, "0000:5e:00.0", "class"),
    "unreadable vendor file": (_unreadable_vendor, "0000:5e:00.0", "vendor"),
    "oversized device file": (_oversized_device, "0000:5e:00.0", f"longer than {MAX_ATTRIBUTE_BYTES} bytes"),
    "binary vendor file": (_binary_vendor, "0000:5e:00.0", "vendor"),
    "missing class file": (_missing_class, "0000:5e:00.0", "class"),
    "entry that is no PCI address": (_stray_entry, "not-a-pci-address", "not a PCI address"),
    "one function under two spellings": (_repeated_address, "00000000:3b:00.0", "a second entry for 00000000:3B:00.0"),
}


@pytest.mark.parametrize(("breakage", "name", "reason"), BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_entry_is_skipped_and_reported_never_raised(
    tmp_path: Path, breakage: object, name: str, reason: str
) -> None:
    root = make_sysfs(tmp_path, [gpu("0000:3b:00.0"), gpu("0000:5e:00.0", driver="vfio-pci")])
    assert callable(breakage)
    breakage(root)
    result = scan(str(root))
    assert GPU_A in result.inventory.functions  # the healthy function is still read
    assert [skipped.name for skipped in result.skipped] == [name]
    assert reason in result.skipped[0].reason


def test_a_driver_name_unfit_for_a_label_reads_as_unknown(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path, [gpu("0000:5e:00.0", driver="vfio-pci")])
    _driver_link_to_garbage(root)
    assert [function.driver for function in scan(str(root)).inventory.functions] == ["unknown"]


def test_at_most_limit_entries_are_read(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path, [gpu(f"0000:{bus:02x}:00.0") for bus in range(1, 6)])
    result = scan(str(root), limit=3)
    assert result.truncated
    assert len(result.inventory.functions) == 3


def _unreadable_vendor_and_stray_entry(root: Path) -> None:
    _unreadable_vendor(root)
    _stray_entry(root)


INTERNING_TREES: dict[str, tuple[list[FakeFunction], object]] = {
    "NVIDIA GPUs, an NVSwitch and another vendor's device": (
        [gpu("0000:3b:00.0"), gpu("0000:5e:00.0", driver=None), nvswitch("0000:c4:00.0"), other("0000:00:01.0")],
        None,
    ),
    "entries skipped as unreadable or no PCI address": (
        [gpu("0000:3b:00.0"), gpu("0000:5e:00.0", driver="vfio-pci")],
        _unreadable_vendor_and_stray_entry,
    ),
}


@pytest.mark.parametrize(("tree", "breakage"), INTERNING_TREES.values(), ids=INTERNING_TREES.keys())
def test_a_scan_interns_no_string(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tree: list[FakeFunction], breakage: object
) -> None:
    """Every collection scans: a part interned per scan (pathlib interns every path part) dies with the scan, and
    that churn of the interpreter's interned-string table once doubled the table, ~1 MiB kept (BENCHMARKS.md,
    "A timed soak")."""
    root = make_sysfs(tmp_path, tree)
    if callable(breakage):
        breakage(root)
    interned = record_calls(monkeypatch, sys, "intern")
    scan(str(root))
    assert interned == []


def test_the_default_limit_bounds_a_huge_tree(tmp_path: Path) -> None:
    devices = make_sysfs(tmp_path) / "bus" / "pci" / "devices"
    for index in range(MAX_FUNCTIONS + 1):  # empty entries: cheap to make, each one skipped without a read
        (devices / f"0000:{index >> 8:02x}:{(index >> 3) & 0x1F:02x}.{index & 7}x").mkdir()
    result = scan(str(tmp_path))
    assert result.truncated
    assert len(result.skipped) == MAX_FUNCTIONS
    assert result.inventory.functions == ()


def test_a_tree_that_cannot_be_listed_raises_sysfs_error(tmp_path: Path) -> None:
    with pytest.raises(SysfsError, match="bus/pci/devices"):
        scan(str(tmp_path / "absent"))


def test_scan_in_thread_gives_up_on_a_hung_scan(tmp_path: Path) -> None:
    release = threading.Event()

    def hung(root: str, limit: int) -> SysfsScan:
        release.wait(30)
        return SysfsScan(PciInventory())

    try:
        with pytest.raises(SysfsError, match="did not return within"):
            scan_in_thread(str(tmp_path), 0.05, scan_function=hung)
    finally:
        release.set()
    assert scan_in_thread(str(make_sysfs(tmp_path, [gpu("0000:3b:00.0")])), 5.0).inventory.functions == (GPU_A,)


# -- the scanner: a thread at a time, bounded, one log line per change ------------------------------------------


class HangingScan:
    """A scan function that blocks its thread until released, counting its calls."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, root: str, limit: int) -> SysfsScan:
        self.calls += 1
        self.release.wait(30)
        return SysfsScan(PciInventory((GPU_A,)))


def test_the_scanner_reads_the_tree_off_the_event_loop(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path, [gpu("0000:3b:00.0"), nvswitch("0000:c4:00.0")])
    seen: list[str] = []

    def spy(path: str, limit: int) -> SysfsScan:
        seen.append(threading.current_thread().name)
        return scan(path, limit=limit)

    async def main() -> PciInventory | None:
        return await bounded(SysfsScanner(str(root), timeout_seconds=5.0, scan_function=spy).pci_inventory())

    assert run(main) == PciInventory((GPU_A, SWITCH))
    assert seen == ["sysfs-scan"]


def test_a_hung_scan_times_out_and_is_never_doubled() -> None:
    hanging = HangingScan()

    async def main() -> list[PciInventory | None]:
        scanner = SysfsScanner("/unused", timeout_seconds=0.05, scan_function=hanging)
        first = await bounded(scanner.pci_inventory())
        second = await bounded(scanner.pci_inventory())  # the first thread still hangs: no second one
        calls_while_hung = hanging.calls
        hanging.release.set()
        await asyncio.sleep(0)
        for _ in range(200):  # bounded: the released thread hands its result back to the loop
            if scanner.idle:
                break
            await asyncio.sleep(0.01)
        third = await bounded(scanner.pci_inventory())
        assert calls_while_hung == 1
        return [first, second, third]

    try:
        assert run(main) == [None, None, PciInventory((GPU_A,))]
    finally:
        hanging.release.set()
    assert hanging.calls == 2


def test_a_cancelled_read_leaves_the_scan_to_finish_in_its_thread() -> None:
    hanging = HangingScan()

    async def main() -> int:
        scanner = SysfsScanner("/unused", timeout_seconds=10.0, scan_function=hanging)
        task = asyncio.ensure_future(scanner.pci_inventory())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bounded(task)
        assert await bounded(scanner.pci_inventory()) is None  # still that one scan, not a new thread
        return hanging.calls

    try:
        assert run(main) == 1
    finally:
        hanging.release.set()


def test_an_unreadable_tree_logs_one_warning_until_it_is_readable_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "sys"

    async def main() -> list[PciInventory | None]:
        scanner = SysfsScanner(str(root), timeout_seconds=5.0)
        readings = [await bounded(scanner.pci_inventory()) for _ in range(3)]
        make_sysfs(root, [gpu("0000:3b:00.0")])
        readings += [await bounded(scanner.pci_inventory()) for _ in range(2)]
        return readings

    with caplog.at_level(logging.INFO, logger="nvidia_gpu_exporter.health.sysfs"):
        readings = run(main)
    assert readings == [None, None, None, PciInventory((GPU_A,)), PciInventory((GPU_A,))]
    records = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert len(records) == 2, records
    assert records[0][0] == logging.WARNING
    assert "cannot read the PCI devices in sysfs" in records[0][1]
    assert records[1][0] == logging.INFO


def test_skipped_entries_are_logged_once_per_change(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = make_sysfs(tmp_path, [gpu("0000:3b:00.0"), gpu("0000:5e:00.0")])
    _garbage_class(root)

    async def main() -> None:
        scanner = SysfsScanner(str(root), timeout_seconds=5.0)
        for _ in range(3):
            await bounded(scanner.pci_inventory())

    with caplog.at_level(logging.INFO, logger="nvidia_gpu_exporter.health.sysfs"):
        run(main)
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert getattr(warnings[0], "skipped", "").startswith("0000:5e:00.0 (class:")
