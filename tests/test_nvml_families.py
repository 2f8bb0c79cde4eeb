"""Rendering of the NVML-only families (docs/metrics.md, "NVML-only families") through :class:`Exposition`:
exact names, HELP, TYPE and labels, once-per-GPU-instance memory, absent readings, XID families whatever
the collection's outcome."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from exposition_reader import family_block, family_names, parsed_names, sample_lines
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuExtras,
    GpuTable,
    MigDevice,
    MigInstanceReading,
    NvmlExtras,
    ProcessList,
    ProcessRow,
    Readings,
    Snapshot,
    StatusFamily,
    XidRecord,
)
from unit_helpers import exposition, gpu_row

GPU_A = "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA"
GPU_B = "GPU-0b1c0000-0000-4000-8000-000000000001"
A = "df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"
B = "0b1c0000-0000-4000-8000-000000000001"
MIG_1 = "MIG-AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE"
MIG_2 = "MIG-11111111-2222-3333-4444-555555555555"
T0 = 1_751_475_457.0

FULL_EXTRAS = NvmlExtras(
    gpus=(
        GpuExtras(GPU_A, energy_joules=1234.5, pcie_tx_bytes_per_second=2e9, pcie_rx_bytes_per_second=3e9),
        GpuExtras(GPU_B, energy_joules=10.0, pcie_tx_bytes_per_second=1.0, pcie_rx_bytes_per_second=2.0),
    ),
    mig_devices=(
        MigDevice(GPU_A, MIG_1, 2, 0, "1c.3g.71gb"),
        MigDevice(GPU_A, MIG_2, 2, 1, "1c.3g.71gb"),
    ),
    mig_instances=(
        MigInstanceReading(
            GPU_A,
            2,
            memory_total_bytes=76235669504.0,
            memory_used_bytes=5e10,
            memory_free_bytes=2.5854491157e10,
            memory_reserved_bytes=381178347.0,
            graphics_activity_ratio=0.75,
            sm_activity_ratio=0.5,
            sm_occupancy_ratio=0.25,
            tensor_activity_ratio=0.125,
            pcie_tx_bytes_per_second=1048576.0,
            pcie_rx_bytes_per_second=2097152.0,
        ),
    ),
)
XIDS = (XidRecord(GPU_A, 79, 2, T0 + 0.5), XidRecord(GPU_B, 13, 1, T0 + 0.25))

WINDOW = (
    " Computed over the window between the two most recent collections; absent on the first collection that "
    "sees the GPU instance."
)
MEMORY = (
    "). The framebuffer belongs to the GPU instance and is shared by its compute instances (verified live: "
    "sibling compute instances report identical values)."
)


def render(
    extras: NvmlExtras | None = FULL_EXTRAS,
    xids: tuple[XidRecord, ...] = XIDS,
    *,
    processes: ProcessList | None = None,
    mig_labels: bool = False,
) -> str:
    expo, fields = exposition(status_family=StatusFamily.NVML_RETURN_CODE, mig=mig_labels)
    rows = [gpu_row(fields, uuid=GPU_A, index="0"), gpu_row(fields, uuid=GPU_B, index="1")]
    readings = Readings(GpuTable(tuple(rows)), processes, "12.2", extras)
    return expo.render(Snapshot(Attempt(readings, 0, 0.25, T0), 0, T0, 1, xids))


def failed_snapshot(xids: tuple[XidRecord, ...]) -> Snapshot:
    return Snapshot(Attempt(None, -1, 0.1, T0, error="boom"), 1, None, 1, xids)


def no_result_snapshot(xids: tuple[XidRecord, ...]) -> Snapshot:
    return Snapshot(None, 0, None, 0, xids)


@pytest.mark.parametrize(
    ("name", "metric_type", "help_text"),
    [
        pytest.param(
            "nvidia_smi_energy_joules_total",
            "counter",
            "Total energy consumed by the GPU in joules since the driver was last loaded. Resets on a driver "
            "reload; absent on GPUs that cannot report it.",
            id="energy",
        ),
        pytest.param(
            "nvidia_smi_pcie_throughput_tx_bytes_per_second",
            "gauge",
            "PCIe traffic transmitted by the GPU, sampled by the driver over a dedicated 20ms window.",
            id="pcie-tx",
        ),
        pytest.param(
            "nvidia_smi_pcie_throughput_rx_bytes_per_second",
            "gauge",
            "PCIe traffic received by the GPU, sampled by the driver over a dedicated 20ms window.",
            id="pcie-rx",
        ),
        pytest.param(
            "nvidia_smi_mig_info",
            "gauge",
            "A metric with a constant '1' value labeled by the identity of a MIG device: the parent GPU's uuid, "
            "the MIG device's own uuid, its GPU instance and compute instance ids, and its profile.",
            id="mig-info",
        ),
        pytest.param(
            "nvidia_smi_mig_memory_total_bytes", "gauge", "Memory of the GPU instance (total" + MEMORY, id="mig-total"
        ),
        pytest.param(
            "nvidia_smi_mig_memory_used_bytes", "gauge", "Memory of the GPU instance (used" + MEMORY, id="mig-used"
        ),
        pytest.param(
            "nvidia_smi_mig_memory_free_bytes", "gauge", "Memory of the GPU instance (free" + MEMORY, id="mig-free"
        ),
        pytest.param(
            "nvidia_smi_mig_memory_reserved_bytes",
            "gauge",
            "Memory of the GPU instance (reserved" + MEMORY,
            id="mig-reserved",
        ),
        pytest.param(
            "nvidia_smi_mig_graphics_activity_ratio",
            "gauge",
            "Fraction of time the GPU instance's graphics/compute engines were active." + WINDOW,
            id="mig-graphics",
        ),
        pytest.param(
            "nvidia_smi_mig_sm_activity_ratio",
            "gauge",
            "Fraction of time the GPU instance's SMs were active." + WINDOW,
            id="mig-sm",
        ),
        pytest.param(
            "nvidia_smi_mig_sm_occupancy_ratio",
            "gauge",
            "Fraction of the GPU instance's resident warp slots that were occupied." + WINDOW,
            id="mig-occupancy",
        ),
        pytest.param(
            "nvidia_smi_mig_tensor_activity_ratio",
            "gauge",
            "Fraction of time the GPU instance's tensor pipes were active." + WINDOW,
            id="mig-tensor",
        ),
        pytest.param(
            "nvidia_smi_mig_pcie_throughput_tx_bytes_per_second",
            "gauge",
            "PCIe traffic transmitted by the GPU instance." + WINDOW,
            id="mig-pcie-tx",
        ),
        pytest.param(
            "nvidia_smi_mig_pcie_throughput_rx_bytes_per_second",
            "gauge",
            "PCIe traffic received by the GPU instance." + WINDOW,
            id="mig-pcie-rx",
        ),
        pytest.param(
            "nvidia_smi_xid_errors_total",
            "counter",
            "Number of XID errors observed on the GPU: from the kernel log, every one since boot that its ring "
            "buffer still holds; from NVML events, those since the exporter started. A series appears when its "
            "first event arrives.",
            id="xid-errors",
        ),
        pytest.param(
            "nvidia_smi_xid_last_timestamp_seconds",
            "gauge",
            "Unix timestamp of the most recent XID error: the kernel's own time from the kernel log, the time the "
            "exporter received it from NVML events (they carry no timestamp of their own).",
            id="xid-last-timestamp",
        ),
    ],
)
def test_family_header_is_exact(name: str, metric_type: str, help_text: str) -> None:
    assert family_block(render(), name).startswith(f"# HELP {name} {help_text}\n# TYPE {name} {metric_type}\n")


@pytest.mark.parametrize(
    ("name", "samples"),
    [
        pytest.param(
            "nvidia_smi_energy_joules_total",
            [f'{{uuid="{B}"}} 10', f'{{uuid="{A}"}} 1234.5'],
            id="energy-per-gpu",
        ),
        pytest.param(
            "nvidia_smi_pcie_throughput_tx_bytes_per_second",
            [f'{{uuid="{B}"}} 1', f'{{uuid="{A}"}} 2e+09'],
            id="pcie-tx-per-gpu",
        ),
        pytest.param(
            "nvidia_smi_pcie_throughput_rx_bytes_per_second",
            [f'{{uuid="{B}"}} 2', f'{{uuid="{A}"}} 3e+09'],
            id="pcie-rx-per-gpu",
        ),
        pytest.param(
            "nvidia_smi_mig_info",
            [
                f'{{compute_instance_id="0",gpu_instance_id="2",mig_uuid="aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",'
                f'profile="1c.3g.71gb",uuid="{A}"}} 1',
                f'{{compute_instance_id="1",gpu_instance_id="2",mig_uuid="11111111-2222-3333-4444-555555555555",'
                f'profile="1c.3g.71gb",uuid="{A}"}} 1',
            ],
            id="mig-info-per-device",
        ),
        pytest.param(
            "nvidia_smi_mig_memory_total_bytes",
            [f'{{gpu_instance_id="2",uuid="{A}"}} 7.6235669504e+10'],
            id="mig-memory-per-instance",
        ),
        pytest.param(
            "nvidia_smi_mig_sm_occupancy_ratio",
            [f'{{gpu_instance_id="2",uuid="{A}"}} 0.25'],
            id="mig-activity-per-instance",
        ),
        pytest.param(
            "nvidia_smi_mig_pcie_throughput_rx_bytes_per_second",
            [f'{{gpu_instance_id="2",uuid="{A}"}} 2.097152e+06'],
            id="mig-pcie-per-instance",
        ),
        pytest.param(
            "nvidia_smi_xid_errors_total",
            [f'{{uuid="{B}",xid="13"}} 1', f'{{uuid="{A}",xid="79"}} 2'],
            id="xid-count-per-gpu-and-code",
        ),
        pytest.param(
            "nvidia_smi_xid_last_timestamp_seconds",
            [f'{{uuid="{B}",xid="13"}} 1.75147545725e+09', f'{{uuid="{A}",xid="79"}} 1.7514754575e+09'],
            id="xid-timestamp-fractional-seconds",
        ),
    ],
)
def test_family_samples_are_exact(name: str, samples: list[str]) -> None:
    assert sample_lines(family_block(render(), name)) == [name + sample for sample in samples]


def test_families_are_sorted_by_name_across_the_scrape() -> None:
    names = family_names(render())
    assert names == sorted(names)
    assert "nvidia_smi_energy_joules_total" in names
    assert "nvidia_smi_gpu_info" in names


def test_scrape_parses_as_prometheus_text() -> None:
    parsed = set(parsed_names(render()))
    assert {"nvidia_smi_energy_joules", "nvidia_smi_mig_info", "nvidia_smi_xid_errors"} <= parsed


def test_mig_memory_is_rendered_once_per_gpu_instance_first_reading_wins() -> None:
    sibling = MigInstanceReading(GPU_A, 2, memory_total_bytes=1.0, memory_used_bytes=2.0)
    extras = replace(FULL_EXTRAS, mig_instances=(*FULL_EXTRAS.mig_instances, sibling))
    block = family_block(render(extras), "nvidia_smi_mig_memory_used_bytes")
    assert sample_lines(block) == [f'nvidia_smi_mig_memory_used_bytes{{gpu_instance_id="2",uuid="{A}"}} 5e+10']


def test_same_instance_id_on_two_gpus_is_two_series() -> None:
    other = MigInstanceReading(GPU_B, 2, memory_total_bytes=1.0)
    extras = replace(FULL_EXTRAS, mig_instances=(*FULL_EXTRAS.mig_instances, other))
    assert len(sample_lines(family_block(render(extras), "nvidia_smi_mig_memory_total_bytes"))) == 2


@pytest.mark.parametrize(
    ("extras", "name", "expected_samples"),
    [
        pytest.param(
            replace(FULL_EXTRAS, gpus=(GpuExtras(GPU_A, energy_joules=None, pcie_tx_bytes_per_second=1.0),)),
            "nvidia_smi_energy_joules_total",
            0,
            id="energy-none-absent",
        ),
        pytest.param(
            replace(FULL_EXTRAS, gpus=(GpuExtras(GPU_A, energy_joules=5.0), GpuExtras(GPU_B, energy_joules=None))),
            "nvidia_smi_energy_joules_total",
            1,
            id="energy-none-on-one-gpu-only-that-gpu-absent",
        ),
        pytest.param(
            replace(FULL_EXTRAS, gpus=(GpuExtras(GPU_A, energy_joules=5.0),)),
            "nvidia_smi_pcie_throughput_tx_bytes_per_second",
            0,
            id="pcie-none-absent",
        ),
        pytest.param(
            replace(FULL_EXTRAS, mig_instances=(MigInstanceReading(GPU_A, 2, memory_total_bytes=1.0),)),
            "nvidia_smi_mig_sm_activity_ratio",
            0,
            id="activity-none-absent-first-window",
        ),
        pytest.param(
            replace(FULL_EXTRAS, mig_instances=(MigInstanceReading(GPU_A, 2, sm_activity_ratio=0.5),)),
            "nvidia_smi_mig_memory_free_bytes",
            0,
            id="memory-none-absent",
        ),
        pytest.param(replace(FULL_EXTRAS, mig_devices=()), "nvidia_smi_mig_info", 0, id="no-mig-devices-no-info"),
    ],
)
def test_none_reading_renders_no_sample(extras: NvmlExtras, name: str, expected_samples: int) -> None:
    text = render(extras)
    assert len(sample_lines(family_block(text, name))) == expected_samples
    if expected_samples == 0:
        assert f"# HELP {name} " not in text


def test_zero_reading_renders_a_zero_sample() -> None:
    extras = replace(FULL_EXTRAS, gpus=(GpuExtras(GPU_A, energy_joules=0.0),))
    assert sample_lines(family_block(render(extras), "nvidia_smi_energy_joules_total")) == [
        f'nvidia_smi_energy_joules_total{{uuid="{A}"}} 0'
    ]


@pytest.mark.parametrize(
    "snapshot_of",
    [pytest.param(failed_snapshot, id="failed-collection"), pytest.param(no_result_snapshot, id="no-result")],
)
def test_xid_families_render_without_a_successful_collection(
    snapshot_of: Callable[[tuple[XidRecord, ...]], Snapshot],
) -> None:
    expo, _ = exposition(status_family=StatusFamily.NVML_RETURN_CODE)
    text = expo.render(snapshot_of(XIDS))
    assert sample_lines(family_block(text, "nvidia_smi_xid_errors_total")) == [
        f'nvidia_smi_xid_errors_total{{uuid="{B}",xid="13"}} 1',
        f'nvidia_smi_xid_errors_total{{uuid="{A}",xid="79"}} 2',
    ]
    assert "nvidia_smi_xid_last_timestamp_seconds{" in text
    assert "nvidia_smi_gpu_info" not in text
    assert "nvidia_smi_energy_joules_total" not in text


@pytest.mark.parametrize(
    ("extras", "xids"),
    [
        pytest.param(None, (), id="exec-readings-no-extras"),
        pytest.param(NvmlExtras(), (), id="empty-extras"),
    ],
)
def test_no_nvml_readings_add_no_family(extras: NvmlExtras | None, xids: tuple[XidRecord, ...]) -> None:
    names = family_names(render(extras, xids))
    nvml_only = [name for name in names if name.startswith(("nvidia_smi_mig_", "nvidia_smi_xid_", "nvidia_smi_pcie_"))]
    assert nvml_only == []
    assert "nvidia_smi_energy_joules_total" not in names


@pytest.mark.parametrize(
    ("uuid", "label"),
    [
        pytest.param(
            "GPU-ABCDEF01-0000-4000-8000-000000000001", "abcdef01-0000-4000-8000-000000000001", id="prefix-upper"
        ),
        pytest.param(
            " gpu-abcdef01-0000-4000-8000-000000000001 ", "abcdef01-0000-4000-8000-000000000001", id="trimmed"
        ),
        pytest.param("abcdef01-0000-4000-8000-000000000001", "abcdef01-0000-4000-8000-000000000001", id="no-prefix"),
    ],
)
def test_gpu_uuid_label_is_normalized(uuid: str, label: str) -> None:
    extras = NvmlExtras(gpus=(GpuExtras(uuid, energy_joules=1.0),))
    text = render(extras, (XidRecord(uuid, 48, 1, T0),))
    assert f'nvidia_smi_energy_joules_total{{uuid="{label}"}} 1' in text
    assert f'nvidia_smi_xid_errors_total{{uuid="{label}",xid="48"}} 1' in text


@pytest.mark.parametrize(
    ("mig_uuid", "label"),
    [
        pytest.param("MIG-AAAAAAAA-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000", id="prefix"),
        pytest.param("aaaaaaaa-0000-0000-0000-000000000000", "aaaaaaaa-0000-0000-0000-000000000000", id="bare"),
    ],
)
def test_mig_uuid_label_is_normalized(mig_uuid: str, label: str) -> None:
    extras = NvmlExtras(mig_devices=(MigDevice(GPU_A, mig_uuid, 7, 0, "1g.18gb"),))
    assert f'mig_uuid="{label}",profile="1g.18gb",uuid="{A}"}} 1' in render(extras)


def test_duplicate_mig_device_fails_the_scrape() -> None:
    device = FULL_EXTRAS.mig_devices[0]
    with pytest.raises(DuplicateSeriesError):
        render(replace(FULL_EXTRAS, mig_devices=(device, device)))


@pytest.mark.parametrize(
    ("row", "labels"),
    [
        pytest.param(
            ProcessRow(GPU_A, "4242", "python3 train.py", "100 MiB", "2", "1"),
            'compute_instance_id="1",gpu_instance_id="2",pid="4242",process_name="python3 train.py"',
            id="mig-process",
        ),
        pytest.param(
            ProcessRow(GPU_B, "77", "/bin/app", "10 MiB"),
            'compute_instance_id="",gpu_instance_id="",pid="77",process_name="/bin/app"',
            id="non-mig-process-empty-ids",
        ),
    ],
)
def test_compute_apps_mig_labels(row: ProcessRow, labels: str) -> None:
    text = render(processes=ProcessList(True, (row,)), mig_labels=True)
    uuid = A if row.gpu_uuid == GPU_A else B
    assert f'nvidia_smi_compute_app_info{{{labels},uuid="{uuid}"}} 1' in sample_lines(text)


def test_compute_apps_without_mig_flag_have_no_instance_labels() -> None:
    row = ProcessRow(GPU_A, "4242", "python3 train.py", "100 MiB", "2", "1")
    text = render(processes=ProcessList(True, (row,)))
    assert f'nvidia_smi_compute_app_info{{pid="4242",process_name="python3 train.py",uuid="{A}"}} 1' in text
