"""Lost GPUs past the reader: the two families sysfs feeds, their place in the collector's snapshots whatever the
collection did, the demo's simulated view and the ``--collect.sysfs-path`` flag (docs/metrics.md, "PCI devices")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from async_helpers import bounded, run
from exposition_reader import checked, family_block, label_values, sample_value
from fakes import READINGS, FakeBackend
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.demo.backend import DemoBackend, free_bus_ids
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.exposition.families import GPUS_EXPECTED, PCI_DEVICE_INFO, RESERVED_NAMES
from nvidia_gpu_exporter.exposition.pci import pci_families
from nvidia_gpu_exporter.exposition.text import render_family
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.model.pcibus import PciFunction, PciInventory, PciKind
from nvidia_gpu_exporter.model.snapshot import Attempt, Snapshot
from unit_helpers import exposition, gpu_row, success_snapshot

GPU_A = PciFunction("00000000:3B:00.0", PciKind.GPU, "0x2335", "nvidia")
GPU_B = PciFunction("00000000:5E:00.0", PciKind.GPU, "0x2335", "vfio-pci")
SWITCH = PciFunction("00000000:C4:00.0", PciKind.NVSWITCH, "0x22a3", "nvidia-nvswitch")


# -- the exposition -------------------------------------------------------------------------------------------


def test_the_families_are_reserved() -> None:
    assert {GPUS_EXPECTED.name, PCI_DEVICE_INFO.name} <= RESERVED_NAMES
    assert PCI_DEVICE_INFO.labels == ("pci_bus_id", "kind", "device_id", "driver")


def test_the_families_render_as_documented() -> None:
    text = "".join(render_family(family) for family in pci_families(PciInventory((GPU_A, GPU_B, SWITCH))))
    assert checked(text) == (
        f"# HELP nvidia_smi_gpus_expected {GPUS_EXPECTED.help}\n"
        "# TYPE nvidia_smi_gpus_expected gauge\n"
        "nvidia_smi_gpus_expected 2\n"
        f"# HELP nvidia_smi_pci_device_info {PCI_DEVICE_INFO.help}\n"
        "# TYPE nvidia_smi_pci_device_info gauge\n"
        # Sorted as Go's client sorts: by label values in label-name order, device_id first.
        'nvidia_smi_pci_device_info{device_id="0x22a3",driver="nvidia-nvswitch",kind="nvswitch",'
        'pci_bus_id="00000000:C4:00.0"} 1\n'
        'nvidia_smi_pci_device_info{device_id="0x2335",driver="nvidia",kind="gpu",pci_bus_id="00000000:3B:00.0"} 1\n'
        'nvidia_smi_pci_device_info{device_id="0x2335",driver="vfio-pci",kind="gpu",pci_bus_id="00000000:5E:00.0"} 1\n'
    )


@pytest.mark.parametrize(
    "inventory",
    [None, PciInventory()],
    ids=["sysfs unreadable", "sysfs lists no NVIDIA function (Go byte parity)"],
)
def test_nothing_is_rendered_without_an_nvidia_function(inventory: PciInventory | None) -> None:
    assert [render_family(family) for family in pci_families(inventory)] in ([], ["", ""])


def test_an_nvswitch_alone_reports_zero_gpus_expected() -> None:
    text = "".join(render_family(family) for family in pci_families(PciInventory((SWITCH,))))
    assert "nvidia_smi_gpus_expected 0\n" in text


def test_a_repeated_bus_id_never_fails_the_scrape() -> None:
    text = "".join(render_family(family) for family in pci_families(PciInventory((GPU_A, GPU_A))))
    assert text.count("nvidia_smi_pci_device_info{") == 1
    assert "nvidia_smi_gpus_expected 1\n" in text


_, FIELDS = exposition()
ROW = gpu_row(FIELDS, uuid="GPU-A", pci_bus_id="00000000:3B:00.0")
SNAPSHOTS: dict[str, Snapshot] = {
    "successful collection": Snapshot(success_snapshot([ROW]).attempt, 0, 1.0, pci=PciInventory((GPU_A, GPU_B))),
    "failed collection": Snapshot(
        Attempt(None, 6, 0.1, 2.0, error="No devices were found"), 1, None, pci=PciInventory((GPU_A, GPU_B))
    ),
    "no result yet": Snapshot(None, 0, None, pci=PciInventory((GPU_A, GPU_B))),
}


@pytest.mark.parametrize("snapshot", SNAPSHOTS.values(), ids=SNAPSHOTS.keys())
def test_the_families_are_rendered_whatever_the_collection_did(snapshot: Snapshot) -> None:
    renderer, _ = exposition()
    text = checked(renderer.render(snapshot))
    assert sample_value(text, "nvidia_smi_gpus_expected") == 2
    assert label_values(text, "nvidia_smi_pci_device_info", "driver") == ["nvidia", "vfio-pci"]


def test_a_snapshot_without_a_pci_reading_renders_as_before() -> None:
    renderer, _ = exposition()
    snapshot = success_snapshot([ROW])
    assert snapshot.pci is None
    text = renderer.render(snapshot)
    assert "nvidia_smi_gpus_expected" not in text
    assert "nvidia_smi_pci_device_info" not in text
    assert family_block(text, "nvidia_smi_gpu_info")


# -- the collector carries the reading --------------------------------------------------------------------------


class FakePciSource:
    """A PCI source answering from a list of readings, then repeating the last one."""

    def __init__(self, *readings: PciInventory | None, gate: asyncio.Event | None = None) -> None:
        self.readings = list(readings)
        self.calls = 0
        self.gate = gate
        self.cancelled = False

    async def pci_inventory(self) -> PciInventory | None:
        index = min(self.calls, len(self.readings) - 1)
        self.calls += 1
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return self.readings[index]


def test_every_collection_publishes_the_latest_pci_reading() -> None:
    async def main() -> None:
        first, second = PciInventory((GPU_A, GPU_B)), PciInventory((GPU_A,))
        source = FakePciSource(first, second, None)
        backend = FakeBackend([READINGS, CollectionError("No devices were found", 6), READINGS])
        collector = Collector(backend, timeout_seconds=None, pci=source)
        succeeded = await bounded(collector.scrape())
        failed = await bounded(collector.scrape())
        assert collector.no_result().pci == second  # a scrape that gave up still sees what sysfs listed
        unreadable = await bounded(collector.scrape())
        assert (succeeded.pci, failed.pci, unreadable.pci) == (first, second, None)
        assert failed.attempt is not None
        assert not failed.attempt.succeeded
        assert source.calls == 3

    run(main)


def test_without_a_pci_source_snapshots_carry_none() -> None:
    async def main() -> None:
        collector = Collector(FakeBackend(), timeout_seconds=None)
        assert (await bounded(collector.scrape())).pci is None

    run(main)


def test_an_abandoned_collection_cancels_its_scan() -> None:
    async def main() -> None:
        source = FakePciSource(PciInventory((GPU_A,)), gate=asyncio.Event())
        collector = Collector(FakeBackend(), timeout_seconds=None, pci=source)
        assert (await bounded(collector.scrape(0.05))).attempt is None
        for _ in range(200):
            if source.cancelled:
                break
            await asyncio.sleep(0.01)
        assert source.cancelled

    run(main)


# -- the demo's simulated view -----------------------------------------------------------------------------------


def test_the_demo_simulates_one_gpu_function_per_simulated_gpu_and_its_lost_one(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("extras:\n  scenarios: [lost-gpu]\n", encoding="utf-8")

    async def main() -> tuple[PciInventory | None, list[str]]:
        backend = await DemoBackend.start(FieldRequest("AUTO"), config_path=str(config))
        readings = await backend.collect()
        columns = [field.qfield for field in backend.fields]
        bus_ids = [row[columns.index("pci.bus_id")] for row in readings.gpus.rows]
        return await backend.pci_inventory(), bus_ids

    inventory, bus_ids = run(main)
    assert inventory is not None
    assert [function.bus_id for function in inventory.gpus] == [*sorted(bus_ids), "00000000:29:00.0"]
    assert {(function.kind, function.device_id, function.driver) for function in inventory.functions} == {
        (PciKind.GPU, "0x2335", "nvidia")
    }


def test_the_default_demo_loses_no_gpu() -> None:
    """Without --demo-config the bus lists the simulated GPUs alone: faults are scenarios (docs/demo.md)."""

    async def main() -> tuple[PciInventory | None, int]:
        backend = await DemoBackend.start(FieldRequest("AUTO"))
        readings = await backend.collect()
        return await backend.pci_inventory(), len(readings.gpus.rows)

    inventory, gpus = run(main)
    assert inventory is not None
    assert len(inventory.gpus) == gpus == 2


@pytest.mark.parametrize(
    ("taken", "count", "expected"),
    [
        pytest.param(["00000000:18:00.0", "00000000:28:00.0"], 2, ["00000000:29:00.0", "00000000:2A:00.0"], id="after"),
        pytest.param(["00000001:FE:00.0", "00000001:00:00.0"], 2, ["00000001:FF:00.0", "00000001:01:00.0"], id="wraps"),
        pytest.param(["00000000:07:00.0"], 0, [], id="none-asked"),
    ],
)
def test_the_demos_lost_gpus_sit_on_free_buses_after_the_simulated_ones(
    taken: list[str], count: int, expected: list[str]
) -> None:
    assert free_bus_ids(taken, count) == expected


# -- the flag --------------------------------------------------------------------------------------------------


def test_the_sysfs_path_flag() -> None:
    assert parse_args([]).config.sysfs_path == "/sys"
    assert parse_args(["--collect.sysfs-path=/host/sys"]).config.sysfs_path == "/host/sys"
    with pytest.raises(ConfigError) as refused:
        validate(Config(sysfs_path=""))
    assert str(refused.value) == "--collect.sysfs-path must not be empty"
