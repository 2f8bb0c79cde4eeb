"""The nvml backend's cells through the real nvidia-ml-py bindings and the fake libnvidia-ml.

Each catalog field of the fake's GPUs must read as the exact text nvidia-smi prints for that state; that
is what makes nvml metrics identical to exec metrics.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import NvmlBackend, open_backend
from nvidia_gpu_exporter.backends.nvml.catalog import CATALOG
from nvidia_gpu_exporter.model.snapshot import Readings
from nvml_fixtures import (
    H200_EXPECTED,
    RTX_EXPECTED,
    InProcessFake,
    h200_uuid,
)


def collect(**options: object) -> tuple[NvmlBackend, Readings]:
    backend = open_backend(FieldRequest(), watch_xids=False, **options)  # type: ignore[arg-type]
    try:
        return backend, backend.collect_blocking()
    finally:
        backend.session.close(5)


def row_of(backend: NvmlBackend, readings: Readings, gpu: int = 0) -> dict[str, str]:
    return {field.qfield: cell for field, cell in zip(backend.fields, readings.gpus.rows[gpu], strict=True)}


@pytest.mark.parametrize(("scenario", "expected"), [("h200", H200_EXPECTED), ("rtx", RTX_EXPECTED)])
def test_every_catalog_cell_is_what_nvidia_smi_prints(
    fake_nvml: InProcessFake, scenario: str, expected: dict[str, str]
) -> None:
    fake_nvml.command(f"reset {scenario}")
    uuid = h200_uuid(fake_nvml)
    backend, readings = collect()
    row = row_of(backend, readings)
    assert set(row) == set(CATALOG)
    assert row["uuid"] == uuid
    assert row["timestamp"].count("/") == 2
    mismatches = {field: (row[field], text) for field, text in expected.items() if row[field] != text}
    assert mismatches == {}


def test_processes_as_nvidia_smi_prints_them(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset rtx")
    uuid = h200_uuid(fake_nvml)
    _, readings = collect(compute_apps=True)
    assert readings.processes is not None
    assert readings.processes.succeeded
    assert [(row.gpu_uuid, row.pid, row.process_name, row.used_memory) for row in readings.processes.rows] == [
        (uuid, "2165", "/usr/bin/kwin_wayland", "25 MiB"),
        (uuid, "5022", "ffmpeg", "503 MiB"),
        (uuid, "5021", "ffmpeg", "360 MiB"),
    ]
    assert {(row.gpu_instance_id, row.compute_instance_id) for row in readings.processes.rows} == {("", "")}


def test_process_memory_unknown_and_name_error_tokens(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset noperm")
    _, readings = collect(compute_apps=True)
    assert readings.processes is not None
    assert readings.processes.succeeded
    row = readings.processes.rows[0]
    assert (row.pid, row.process_name, row.used_memory) == ("4242", "[Insufficient Permissions]", "[N/A]")


def test_mig_processes_carry_their_instance_ids(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset mig")
    _, readings = collect(compute_apps=True)
    assert readings.processes is not None
    ids = {row.pid: (row.gpu_instance_id, row.compute_instance_id) for row in readings.processes.rows}
    assert ids == {"1001": ("2", "0"), "1002": ("2", "1"), "2001": ("", "")}


def test_only_the_getters_of_requested_fields_are_called(fake_nvml: InProcessFake) -> None:
    backend = open_backend(FieldRequest("temperature.gpu"), watch_xids=False)
    try:
        fake_nvml.reset_calls()
        backend.collect_blocking()
    finally:
        backend.session.close(5)
    assert fake_nvml.calls("nvmlDeviceGetTemperatureV") == 1
    for untouched in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues", "nvmlDeviceGetMemoryErrorCounter"):
        assert fake_nvml.calls(untouched) == 0, untouched
    # The identity fields are always read; the vbios getter stands for them.
    assert fake_nvml.calls("nvmlDeviceGetVbiosVersion") == 1


def test_legacy_driver_reads_the_reasons_under_their_old_names(fake_nvml: InProcessFake) -> None:
    fake_nvml.command("reset legacy")
    backend, readings = collect()
    row = row_of(backend, readings)
    assert row["clocks_throttle_reasons.gpu_idle"] == "Active"
    assert row["clocks_throttle_reasons.supported"] == "0x00000000000001FF"
    assert not any(field.startswith("clocks_event_reasons.") for field in row)
    assert readings.cuda_version == "12.4"


def test_invalid_utf8_from_the_driver_is_kept_for_the_exposition_to_drop(fake_nvml: InProcessFake) -> None:
    fake_nvml.command(b"set 0 name NVIDIA \xff\xfe")
    backend, readings = collect()
    name = row_of(backend, readings)["name"]
    assert name.encode("utf-8", "surrogateescape") == b"NVIDIA \xff\xfe"


@pytest.mark.parametrize(
    "struct",
    [
        "nvmlPciInfoExt_v1_t",
        "c_nvmlMemory_t",
        "c_nvmlMemory_v2_t",
        "c_nvmlUtilization_t",
        "c_nvmlTemperature_v1_t",
        "c_nvmlMarginTemperature_v1_t",
        "c_nvmlDeviceAddressingMode_t",
        "c_nvmlDramEncryptionInfo_t",
        "c_nvmlEccSramErrorStatus_v1_t",
        "c_nvmlRemappedRowsInfo_v2_t",
        "c_nvmlRowRemapperHistogramValues",
        "c_nvmlC2cModeInfo_v1_t",
        "c_nvmlGpuFabricInfo_v2_t",
        "c_nvmlPlatformInfo_v2_t",
        "c_nvmlHostname_v1_t",
        "c_nvmlProcessInfo_v3_t",
        "c_nvmlProcessUtilizationSample_t",
        "c_nvmlFieldValue_t",
        "c_nvmlEventData_t",
        "c_nvmlGpmSupport_t",
        "c_nvmlGpmMetricsGet_t",
    ],
)
def test_fake_struct_layouts_match_the_bindings(fake_nvml: InProcessFake, struct: str) -> None:
    """Catches layout drift when nvidia-ml-py is upgraded: the fake must stay ABI-compatible."""
    assert fake_nvml.sizeof(struct) == ctypes.sizeof(getattr(pynvml, struct))
