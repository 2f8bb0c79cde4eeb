"""Lost GPUs through the real exporter: ``--collect.sysfs-path`` at a fake tree beside the fake nvidia-smi.

The MIG fixture's two GPUs sit at 00000000:07:00.0 and 00000000:0F:00.0; the tree starts with both bound to
nvidia, and the tests take a GPU off the bus or add one the driver does not see, scrape after scrape.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import label_values, names_in, parse, sample_value, series
from harness import MIG_FIXTURE, fake_smi_command
from polling import wait_until
from sysfs_fakes import add_function, gpu, make_sysfs, nvswitch, other, remove_function

FIXTURE_GPUS = ("0000:07:00.0", "0000:0f:00.0")
FAMILIES = {"nvidia_smi_gpus_expected", "nvidia_smi_pci_device_info"}
UNREADABLE = "cannot read the PCI devices in sysfs"


def exec_args(tree: Path, *fake_args: str) -> tuple[str, ...]:
    return ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, *fake_args), f"--collect.sysfs-path={tree}")


def device_info(scrape: str) -> dict[str, dict[str, str]]:
    """pci_bus_id -> the labels of its nvidia_smi_pci_device_info sample."""
    return {sample.labels["pci_bus_id"]: sample.labels for sample in series(scrape, "nvidia_smi_pci_device_info")}


def test_gpus_expected_follows_the_tree_scrape_by_scrape(tmp_path: Path, exporter: StartExporter) -> None:
    tree = make_sysfs(tmp_path / "sys", [gpu(address) for address in FIXTURE_GPUS])
    handle = exporter(*exec_args(tree))

    scrape = handle.scrape()
    parse(scrape)
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == 2
    # Every GPU function joins the GPU the driver reports at that bus id.
    assert sorted(device_info(scrape)) == sorted(label_values(scrape, "nvidia_smi_gpu_info", "pci_bus_id"))

    add_function(tree, gpu("0000:5e:00.0", driver="vfio-pci"))  # present after a reboot, bound to vfio-pci
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == 3
    assert device_info(scrape)["00000000:5E:00.0"] == {
        "pci_bus_id": "00000000:5E:00.0",
        "kind": "gpu",
        "device_id": "0x2335",
        "driver": "vfio-pci",
    }
    assert len(series(scrape, "nvidia_smi_gpu_info")) == 2

    remove_function(tree, "0000:5e:00.0")
    remove_function(tree, FIXTURE_GPUS[1])
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == 1
    assert sorted(device_info(scrape)) == ["00000000:07:00.0"]


def test_the_families_stay_when_nvidia_smi_fails(tmp_path: Path, exporter: StartExporter) -> None:
    tree = make_sysfs(tmp_path / "sys", [gpu(FIXTURE_GPUS[0]), nvswitch("0000:c4:00.0")])
    handle = exporter(*exec_args(tree, "--fail-arg", "--query-gpu=", "--stderr-msg", "No devices were found"))
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 0
    assert "nvidia_smi_gpu_info" not in names_in(scrape)
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == 1
    assert {labels["kind"] for labels in device_info(scrape).values()} == {"gpu", "nvswitch"}


@pytest.mark.parametrize(
    ("tree_of", "warnings"),
    [
        (lambda root: make_sysfs(root, [other("0000:00:01.0")]), 0),
        (lambda root: root / "absent", 1),
    ],
    ids=["a bus without NVIDIA functions", "no sysfs at that path"],
)
def test_no_nvidia_function_means_no_new_line(
    tmp_path: Path, exporter: StartExporter, tree_of: Callable[[Path], Path], warnings: int
) -> None:
    handle = exporter(*exec_args(tree_of(tmp_path / "sys")))
    for _ in range(2):
        scrape = handle.scrape()
        assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
        assert not FAMILIES & names_in(scrape)
    wait_until(
        lambda: handle.log.count(UNREADABLE), "the warning about the unreadable tree", until=lambda n: n >= warnings
    )
    assert handle.log.count(UNREADABLE) == warnings  # once, not once per scrape


def test_the_demo_shows_its_simulated_gpus_on_the_bus_and_one_that_fell_off(
    tmp_path: Path, exporter: StartExporter
) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("extras:\n  scenarios: [lost-gpu]\n", encoding="utf-8")
    handle = exporter("--collect.backend=demo", f"--demo-config={config}")
    scrape = handle.scrape()
    visible = label_values(scrape, "nvidia_smi_gpu_info", "pci_bus_id")
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == len(visible) + 1 == 3
    (lost,) = set(device_info(scrape)) - set(visible)
    assert device_info(scrape)[lost]["driver"] == "nvidia"
    assert sample_value(scrape, "nvidia_smi_gpu_fallen_off_bus", {"pci_bus_id": lost, "uuid": "unknown"}) == 1


def test_the_demo_simulates_gpus_lost_to_each_driver(tmp_path: Path, exporter: StartExporter) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("gpus: 1\nextras:\n  lost-gpus: [vfio-pci, none]\n")
    scrape = exporter("--collect.backend=demo", f"--demo-config={config}").scrape()
    visible = label_values(scrape, "nvidia_smi_gpu_info", "pci_bus_id")
    lost = {bus_id: labels["driver"] for bus_id, labels in device_info(scrape).items() if bus_id not in visible}
    assert sorted(lost.values()) == ["none", "vfio-pci"]
    assert sample_value(scrape, "nvidia_smi_gpus_expected") == 3
    assert not series(scrape, "nvidia_smi_gpu_fallen_off_bus")  # held by another driver, not fallen off
