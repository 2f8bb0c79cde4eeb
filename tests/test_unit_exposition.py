"""The `nvidia_smi_*` exposition of a snapshot (docs/metrics.md; docs/compatibility.md, "Exposition format")."""

from __future__ import annotations

import asyncio

import pytest

from exposition_reader import family_block, family_names, parse_openmetrics, sample_lines, without_families
from nvidia_gpu_exporter._go.floats import format_go_float
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.output import (
    parse_compute_apps,
    parse_cuda_version,
    parse_gpu_csv,
)
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.exposition.metrics import CELL_CACHE_LIMIT, Exposition
from nvidia_gpu_exporter.exposition.openmetrics import OPENMETRICS_EOF, to_openmetrics
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    ProcessList,
    ProcessRow,
    QueryField,
    Readings,
    Snapshot,
    StatusFamily,
)
from unit_helpers import FakeRunner, exposition, gpu_row, help_query_gpu, ok, processes, success_snapshot

WALL_CLOCK = ("nvidia_smi_last_collect_duration_seconds", "nvidia_smi_last_collect_success_timestamp_seconds")

# -- a worked example: AUTO with four discovered fields, two GPUs, two processes on one of them ----------

WORKED_HELP = help_query_gpu("temperature.gpu", "fan.speed", "memory.used", "pstate")
WORKED_QUERY = ["temperature.gpu", "fan.speed", "memory.used", "pstate", *IDENTITY_FIELDS]
WORKED_CSV = (
    "temperature.gpu, fan.speed [%], memory.used [MiB], pstate, uuid, name, driver_model.current, "
    "driver_model.pending, vbios_version, driver_version, pci.bus_id, serial, compute_cap, pci.sub_device_id, index\n"
    "45, 57 %, 40960 MiB, P0, GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA, NVIDIA A100-SXM4-40GB, [N/A], [N/A], "
    "92.00.25.00.08, 535.54.03, 00000000:07:00.0, 1322120000000, 8.0, 0x134F10DE, 0\n"
    "[N/A], [N/A], 0 MiB, P8, GPU-0B1C2D3E-0000-1111-2222-333344445555, NVIDIA A100-SXM4-40GB, [N/A], [N/A], "
    "92.00.25.00.08, 535.54.03, 00000000:0F:00.0, 1322120000001, 8.0, 0x134F10DE, 1\n"
)
WORKED_VERSION = "CUDA Version : 12.2\n"
WORKED_APPS = (
    "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA, 4242, python3, 40950 MiB\n"
    "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA, 977, /usr/bin/a, b, [N/A]\n"
)
WORKED_EXAMPLE_EXPECTED = (
    "# HELP nvidia_smi_command_exit_code Exit code of the most recent nvidia-smi run\n"
    "# TYPE nvidia_smi_command_exit_code gauge\n"
    "nvidia_smi_command_exit_code 0\n"
    "# HELP nvidia_smi_compute_app_info A metric with a constant '1' value labeled by the "
    "identity of a process with a compute context on a GPU.\n"
    "# TYPE nvidia_smi_compute_app_info gauge\n"
    'nvidia_smi_compute_app_info{pid="4242",process_name="python3",'
    'uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 1\n'
    'nvidia_smi_compute_app_info{pid="977",process_name="/usr/bin/a, b",'
    'uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 1\n'
    "# HELP nvidia_smi_compute_app_used_memory_bytes GPU memory used by the process. Absent "
    "when the driver cannot report it (e.g. Windows WDDM).\n"
    "# TYPE nvidia_smi_compute_app_used_memory_bytes gauge\n"
    'nvidia_smi_compute_app_used_memory_bytes{pid="4242",process_name="python3",'
    'uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 4.29391872e+10\n'
    "# HELP nvidia_smi_compute_apps Number of processes with a compute context on the GPU.\n"
    "# TYPE nvidia_smi_compute_apps gauge\n"
    'nvidia_smi_compute_apps{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 0\n'
    'nvidia_smi_compute_apps{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 2\n'
    "# HELP nvidia_smi_compute_apps_last_collect_success Whether the most recent per-process "
    "collection succeeded (1) or not (0)\n"
    "# TYPE nvidia_smi_compute_apps_last_collect_success gauge\n"
    "nvidia_smi_compute_apps_last_collect_success 1\n"
    "# HELP nvidia_smi_compute_cap compute_cap\n"
    "# TYPE nvidia_smi_compute_cap gauge\n"
    'nvidia_smi_compute_cap{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 8\n'
    'nvidia_smi_compute_cap{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 8\n'
    "# HELP nvidia_smi_failed_scrapes_total Number of failed collections\n"
    "# TYPE nvidia_smi_failed_scrapes_total counter\n"
    "nvidia_smi_failed_scrapes_total 0\n"
    "# HELP nvidia_smi_fan_speed_ratio fan.speed [%]\n"
    "# TYPE nvidia_smi_fan_speed_ratio gauge\n"
    'nvidia_smi_fan_speed_ratio{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} '
    "0.5700000000000001\n"
    "# HELP nvidia_smi_gpu_info A metric with a constant '1' value labeled by gpu uuid, name, "
    "driver_model_current, driver_model_pending, vbios_version, driver_version, pci_bus_id, "
    "serial, compute_cap, pci_sub_device_id, index, cuda_version.\n"
    "# TYPE nvidia_smi_gpu_info gauge\n"
    'nvidia_smi_gpu_info{compute_cap="8.0",cuda_version="12.2",driver_model_current="[N/A]",'
    'driver_model_pending="[N/A]",driver_version="535.54.03",index="0",name="NVIDIA '
    'A100-SXM4-40GB",pci_bus_id="00000000:07:00.0",pci_sub_device_id="0x134F10DE",'
    'serial="1322120000000",uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",'
    'vbios_version="92.00.25.00.08"} 1\n'
    'nvidia_smi_gpu_info{compute_cap="8.0",cuda_version="12.2",driver_model_current="[N/A]",'
    'driver_model_pending="[N/A]",driver_version="535.54.03",index="1",name="NVIDIA '
    'A100-SXM4-40GB",pci_bus_id="00000000:0F:00.0",pci_sub_device_id="0x134F10DE",'
    'serial="1322120000001",uuid="0b1c2d3e-0000-1111-2222-333344445555",'
    'vbios_version="92.00.25.00.08"} 1\n'
    "# HELP nvidia_smi_index index\n"
    "# TYPE nvidia_smi_index gauge\n"
    'nvidia_smi_index{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 1\n'
    'nvidia_smi_index{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 0\n'
    "# HELP nvidia_smi_last_collect_success Whether the most recent collection succeeded (1) "
    "or not (0)\n"
    "# TYPE nvidia_smi_last_collect_success gauge\n"
    "nvidia_smi_last_collect_success 1\n"
    "# HELP nvidia_smi_memory_used_bytes memory.used [MiB]\n"
    "# TYPE nvidia_smi_memory_used_bytes gauge\n"
    'nvidia_smi_memory_used_bytes{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 0\n'
    'nvidia_smi_memory_used_bytes{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 4.294967296e+10\n'
    "# HELP nvidia_smi_pci_sub_device_id pci.sub_device_id\n"
    "# TYPE nvidia_smi_pci_sub_device_id gauge\n"
    'nvidia_smi_pci_sub_device_id{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 3.23948766e+08\n'
    'nvidia_smi_pci_sub_device_id{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 3.23948766e+08\n'
    "# HELP nvidia_smi_pstate pstate\n"
    "# TYPE nvidia_smi_pstate gauge\n"
    'nvidia_smi_pstate{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 8\n'
    'nvidia_smi_pstate{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 0\n'
    "# HELP nvidia_smi_serial serial\n"
    "# TYPE nvidia_smi_serial gauge\n"
    'nvidia_smi_serial{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 1.322120000001e+12\n'
    'nvidia_smi_serial{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 1.32212e+12\n'
    "# HELP nvidia_smi_temperature_gpu temperature.gpu\n"
    "# TYPE nvidia_smi_temperature_gpu gauge\n"
    'nvidia_smi_temperature_gpu{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 45\n'
)


def test_worked_example_from_parsed_text() -> None:
    """The worked example reproduced exactly: rows via parse_gpu_csv/parse_compute_apps, RFields from the header."""
    csv = parse_gpu_csv(WORKED_CSV, len(WORKED_QUERY))
    fields = [QueryField(qfield, rfield) for qfield, rfield in zip(WORKED_QUERY, csv.header, strict=True)]
    readings = Readings(
        GpuTable(csv.rows), ProcessList(True, parse_compute_apps(WORKED_APPS)), parse_cuda_version(WORKED_VERSION)
    )
    snapshot = Snapshot(Attempt(readings, 0, 0.042, 1751475457.25), 0, 1751475457.25)
    text = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).render(snapshot)
    assert without_families(text, WALL_CLOCK) == WORKED_EXAMPLE_EXPECTED


def test_worked_example_through_the_exec_pipeline() -> None:
    """The worked example end to end: AUTO discovery, mapping query, --version, GPU and per-process queries."""
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(WORKED_HELP),
            "--query-gpu=": ok(WORKED_CSV),
            "--version": ok(WORKED_VERSION),
            "--query-compute-apps=": ok(WORKED_APPS),
        }
    )

    async def scenario() -> tuple[SmiBackend, Readings]:
        smi = await SmiBackend.start(runner, FieldRequest(), timeout_seconds=5.0, compute_apps=True)
        return smi, await smi.collect()

    smi, readings = asyncio.run(scenario())
    mapping_query = next(call for call in runner.calls if call[0].startswith("--query-gpu="))  # --version runs beside
    assert mapping_query[0] == "--query-gpu=" + ",".join(WORKED_QUERY)
    snapshot = Snapshot(Attempt(readings, 0, 0.5, 1751475457.0), 0, 1751475457.0)
    text = Exposition(smi.fields, smi.status_family).render(snapshot)
    assert without_families(text, WALL_CLOCK) == WORKED_EXAMPLE_EXPECTED


def test_worked_example_wall_clock_families() -> None:
    """Duration present with an attempt; success timestamp in whole seconds."""
    csv = parse_gpu_csv(WORKED_CSV, len(WORKED_QUERY))
    fields = [QueryField(qfield, rfield) for qfield, rfield in zip(WORKED_QUERY, csv.header, strict=True)]
    snapshot = Snapshot(Attempt(Readings(GpuTable(csv.rows), None, "12.2"), 0, 0.042, 1751475457.9), 0, 1751475457.9)
    text = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).render(snapshot)
    assert family_block(text, "nvidia_smi_last_collect_duration_seconds") == (
        "# HELP nvidia_smi_last_collect_duration_seconds Duration of the most recent collection\n"
        "# TYPE nvidia_smi_last_collect_duration_seconds gauge\n"
        "nvidia_smi_last_collect_duration_seconds 0.042\n"
    )
    assert family_block(text, "nvidia_smi_last_collect_success_timestamp_seconds") == (
        "# HELP nvidia_smi_last_collect_success_timestamp_seconds Unix timestamp of the most recent successful "
        "collection\n"
        "# TYPE nvidia_smi_last_collect_success_timestamp_seconds gauge\n"
        "nvidia_smi_last_collect_success_timestamp_seconds 1.751475457e+09\n"
    )
    assert "nvidia_smi_compute_app" not in text  # compute apps off -> no per-process families


# -- health families per snapshot state -----------------------------------------------------------------------

FAILED_0 = (
    "# HELP nvidia_smi_failed_scrapes_total Number of failed collections\n"
    "# TYPE nvidia_smi_failed_scrapes_total counter\n"
)
SUCCESS_HELP = (
    "# HELP nvidia_smi_last_collect_success Whether the most recent collection succeeded (1) or not (0)\n"
    "# TYPE nvidia_smi_last_collect_success gauge\n"
)
TIMESTAMP_HELP = (
    "# HELP nvidia_smi_last_collect_success_timestamp_seconds Unix timestamp of the most recent successful "
    "collection\n"
    "# TYPE nvidia_smi_last_collect_success_timestamp_seconds gauge\n"
)


def test_no_attempt_before_first_collection() -> None:
    """Before any collection: exactly failed_scrapes_total and last_collect_success 0; no exit code, no duration."""
    expo, _ = exposition()
    assert expo.render(Snapshot(None, 0, None)) == (
        FAILED_0 + "nvidia_smi_failed_scrapes_total 0\n" + SUCCESS_HELP + "nvidia_smi_last_collect_success 0\n"
    )


def test_no_attempt_after_an_earlier_success_keeps_timestamp() -> None:
    """A scrape that gave up waiting: + the sticky success timestamp (whole seconds), still no exit code/duration."""
    expo, _ = exposition()
    assert expo.render(Snapshot(None, 3, 1751475457.999)) == (
        FAILED_0
        + "nvidia_smi_failed_scrapes_total 3\n"
        + SUCCESS_HELP
        + "nvidia_smi_last_collect_success 0\n"
        + TIMESTAMP_HELP
        + "nvidia_smi_last_collect_success_timestamp_seconds 1.751475457e+09\n"
    )


def test_failed_attempt_renders_health_only() -> None:
    """A failed collection (fake --exit 7): exit code 7, failed 1, success 0, duration present, no GPU series."""
    expo, _ = exposition()
    snapshot = Snapshot(Attempt(None, 7, 0.25, 1751475460.0, error="exit status 7"), 1, None)
    assert expo.render(snapshot) == (
        "# HELP nvidia_smi_command_exit_code Exit code of the most recent nvidia-smi run\n"
        "# TYPE nvidia_smi_command_exit_code gauge\n"
        "nvidia_smi_command_exit_code 7\n"
        + FAILED_0
        + "nvidia_smi_failed_scrapes_total 1\n"
        + "# HELP nvidia_smi_last_collect_duration_seconds Duration of the most recent collection\n"
        "# TYPE nvidia_smi_last_collect_duration_seconds gauge\n"
        "nvidia_smi_last_collect_duration_seconds 0.25\n" + SUCCESS_HELP + "nvidia_smi_last_collect_success 0\n"
    )


def test_failed_attempt_after_success_keeps_timestamp_and_no_gpu_info() -> None:
    expo, _ = exposition()
    snapshot = Snapshot(Attempt(None, -1, 10.0, 1751475470.0, error="timeout"), 2, 1751475457.0)
    text = expo.render(snapshot)
    assert family_names(text) == [
        "nvidia_smi_command_exit_code",
        "nvidia_smi_failed_scrapes_total",
        "nvidia_smi_last_collect_duration_seconds",
        "nvidia_smi_last_collect_success",
        "nvidia_smi_last_collect_success_timestamp_seconds",
    ]
    assert "nvidia_smi_command_exit_code -1\n" in text
    assert "nvidia_smi_last_collect_duration_seconds 10\n" in text


def test_nvml_status_family_instead_of_exit_code() -> None:
    """Exactly one of command_exit_code / nvml_return_code exists."""
    expo, _ = exposition(status_family=StatusFamily.NVML_RETURN_CODE)
    text = expo.render(Snapshot(Attempt(None, 15, 0.1, 0.0, error="gpu lost"), 1, None))
    assert family_block(text, "nvidia_smi_nvml_return_code") == (
        "# HELP nvidia_smi_nvml_return_code NVML return code of the most recent collection (0 = success)\n"
        "# TYPE nvidia_smi_nvml_return_code gauge\n"
        "nvidia_smi_nvml_return_code 15\n"
    )
    assert "nvidia_smi_command_exit_code" not in text


def test_success_renders_everything() -> None:
    expo, fields = exposition([("fan.speed", "fan.speed [%]")])
    text = expo.render(success_snapshot([gpu_row(fields, fan_speed="38 %")], processes=processes()))
    assert family_names(text) == [
        "nvidia_smi_command_exit_code",
        "nvidia_smi_compute_apps",
        "nvidia_smi_compute_apps_last_collect_success",
        "nvidia_smi_failed_scrapes_total",
        "nvidia_smi_fan_speed_ratio",
        "nvidia_smi_gpu_info",
        "nvidia_smi_index",
        "nvidia_smi_last_collect_duration_seconds",
        "nvidia_smi_last_collect_success",
        "nvidia_smi_last_collect_success_timestamp_seconds",
    ]
    assert "nvidia_smi_last_collect_success 1\n" in text
    assert "nvidia_smi_command_exit_code 0\n" in text
    assert 'nvidia_smi_fan_speed_ratio{uuid="00000000-0000-0000-0000-000000000000"} 0.38\n' in text
    assert "nvidia_smi_compute_apps_last_collect_success 1\n" in text


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(1751475457.0, "1.751475457e+09"), (1751475457.999999, "1.751475457e+09"), (59.9, "59")],
    ids=["whole seconds", "truncated, not rounded", "small timestamp truncated"],
)
def test_success_timestamp_whole_seconds(seconds: float, expected: str) -> None:
    expo, _ = exposition()
    text = expo.render(Snapshot(None, 0, seconds))
    assert f"nvidia_smi_last_collect_success_timestamp_seconds {expected}\n" in text


def test_zero_gpus_success() -> None:
    """Header-only output: success with zero GPUs; empty families are omitted."""
    expo, _ = exposition([("fan.speed", "fan.speed [%]")])
    text = expo.render(success_snapshot([]))
    assert "nvidia_smi_last_collect_success 1\n" in text
    assert "gpu_info" not in text
    assert "fan_speed" not in text


# -- ordering and escaping -----------------------------------------------------------------------------------

UUID_A = "GPU-0B1C2D3E-0000-1111-2222-333344445555"
UUID_B = "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA"


def test_sample_order_is_bytewise_on_label_values() -> None:
    """pid "12332" < "2056"; uuid 0b1c... < df6e..."""
    expo, fields = exposition()
    snapshot = success_snapshot(
        [gpu_row(fields, uuid=UUID_B, index="0"), gpu_row(fields, uuid=UUID_A, index="1")],
        processes=processes((UUID_B, "2056", "b", "1 MiB"), (UUID_B, "12332", "a", "1 MiB"), (UUID_A, "9", "z", "")),
    )
    info = [line for line in sample_lines(expo.render(snapshot)) if line.startswith("nvidia_smi_compute_app_info")]
    assert info == [
        'nvidia_smi_compute_app_info{pid="12332",process_name="a",uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 1',
        'nvidia_smi_compute_app_info{pid="2056",process_name="b",uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 1',
        'nvidia_smi_compute_app_info{pid="9",process_name="z",uuid="0b1c2d3e-0000-1111-2222-333344445555"} 1',
    ]
    index = [line for line in sample_lines(expo.render(snapshot)) if line.startswith("nvidia_smi_index")]
    assert index == [
        'nvidia_smi_index{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 1',
        'nvidia_smi_index{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 0',
    ]


def test_family_order_across_collectors() -> None:
    """compute_app_info < compute_app_used_memory_bytes < compute_apps < ..._success < compute_cap."""
    expo, fields = exposition()
    snapshot = success_snapshot(
        [gpu_row(fields, compute_cap="8.0")],
        processes=processes(("GPU-00000000-0000-0000-0000-000000000000", "1", "p", "1 MiB")),
    )
    names = family_names(expo.render(snapshot))
    assert names == sorted(names)
    assert [name for name in names if name.startswith("nvidia_smi_compute_")] == [
        "nvidia_smi_compute_app_info",
        "nvidia_smi_compute_app_used_memory_bytes",
        "nvidia_smi_compute_apps",
        "nvidia_smi_compute_apps_last_collect_success",
        "nvidia_smi_compute_cap",
    ]


LABEL_ESCAPES: list[tuple[str, str, str]] = [
    ("C:\\Windows\\explorer.exe", "C:\\\\Windows\\\\explorer.exe", "backslash doubled"),
    ('say "hi"', 'say \\"hi\\"', "double quote escaped"),
    ("a\nb", "a\\nb", "newline escaped"),
    ("tab\there\r", "tab\there\r", "other control characters kept raw"),
    ("naïve ✓", "naïve ✓", "non-ASCII kept raw"),
]


@pytest.mark.parametrize(("name", "label"), [e[:2] for e in LABEL_ESCAPES], ids=[e[2] for e in LABEL_ESCAPES])
def test_process_name_label_escaping(name: str, label: str) -> None:
    expo, fields = exposition()
    snapshot = success_snapshot([gpu_row(fields)], processes=processes(("GPU-X", "1", name, "[N/A]")))
    assert f'nvidia_smi_compute_app_info{{pid="1",process_name="{label}",uuid="x"}} 1\n' in expo.render(snapshot)


def test_gpu_info_label_escaping() -> None:
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields, name='A "B" \\ C', serial="x\ny")]))
    assert 'name="A \\"B\\" \\\\ C"' in family_block(text, "nvidia_smi_gpu_info")
    assert 'serial="x\\ny"' in family_block(text, "nvidia_smi_gpu_info")


@pytest.mark.parametrize(
    ("rfield", "metric", "help_text"),
    [
        ("x\\y", "nvidia_smi_x_y", "x\\\\y"),
        ("a\nb", "nvidia_smi_a_b", "a\\nb"),
        ('q"x', "nvidia_smi_q_x", 'q"x'),
    ],
    ids=["HELP escapes backslash", "HELP escapes newline", "HELP keeps double quotes"],
)
def test_help_escaping(rfield: str, metric: str, help_text: str) -> None:
    expo, fields = exposition([("q", rfield)])
    text = expo.render(success_snapshot([gpu_row(fields, q="5")]))
    assert f"# HELP {metric} {help_text}\n# TYPE {metric} gauge\n{metric}{{uuid=" in text


def test_identity_fields_are_also_series() -> None:
    """No label-only field: `name` renders when it has exactly one number."""
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields, name="NVIDIA GeForce RTX 2080 SUPER", index="3")]))
    assert 'nvidia_smi_name{uuid="00000000-0000-0000-0000-000000000000"} 2080\n' in text
    assert 'nvidia_smi_index{uuid="00000000-0000-0000-0000-000000000000"} 3\n' in text
    assert "nvidia_smi_uuid{" not in text  # the uuid has many numbers


def test_enum_fields_rendered() -> None:
    expo, fields = exposition([("fabric.state", "fabric.state"), ("gpu_recovery_action", "gpu_recovery_action")])
    text = expo.render(
        success_snapshot([gpu_row(fields, fabric_state="Completed", gpu_recovery_action="[Unknown Error]")])
    )
    assert 'nvidia_smi_fabric_state{uuid="00000000-0000-0000-0000-000000000000"} 3\n' in text
    assert "nvidia_smi_gpu_recovery_action" not in text


@pytest.mark.parametrize(
    ("qfield", "reserved"),
    [("compute_apps", "nvidia_smi_compute_apps"), ("gpu_info", "nvidia_smi_gpu_info")],
    ids=["reserved compute_apps field never rendered", "reserved gpu_info field never rendered"],
)
def test_reserved_query_field_not_rendered(qfield: str, reserved: str) -> None:
    expo, fields = exposition([(qfield, qfield)])
    text = expo.render(success_snapshot([gpu_row(fields, **{qfield: "5"})]))
    assert f"{reserved}{{uuid=" not in text
    assert " 5\n" not in text


# -- per-process rendering -------------------------------------------------------------------------------------


def test_process_query_failed_renders_only_success_zero() -> None:
    """Failed -> only compute_apps_last_collect_success 0; no zero counts ("failed" != "idle")."""
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields)], processes=ProcessList(succeeded=False)))
    assert family_block(text, "nvidia_smi_compute_apps_last_collect_success") == (
        "# HELP nvidia_smi_compute_apps_last_collect_success Whether the most recent per-process collection "
        "succeeded (1) or not (0)\n"
        "# TYPE nvidia_smi_compute_apps_last_collect_success gauge\n"
        "nvidia_smi_compute_apps_last_collect_success 0\n"
    )
    assert [name for name in family_names(text) if name.startswith("nvidia_smi_compute_app")] == [
        "nvidia_smi_compute_apps_last_collect_success"
    ]
    assert "nvidia_smi_gpu_info{" in text
    assert "nvidia_smi_last_collect_success 1\n" in text


def test_process_families_absent_when_disabled() -> None:
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields)], processes=None))
    assert "compute_app" not in text


def test_zero_fill_and_unknown_uuid() -> None:
    """Counts zero-filled for every GPU in the table; an unknown uuid still adds a count series."""
    expo, fields = exposition()
    snapshot = success_snapshot(
        [gpu_row(fields, uuid=UUID_A, index="0"), gpu_row(fields, uuid=UUID_B, index="1")],
        processes=processes((UUID_B, "1", "p", "1 MiB"), ("GPU-FFFF", "2", "q", "1 MiB"), (UUID_B, "3", "r", "")),
    )
    assert family_block(expo.render(snapshot), "nvidia_smi_compute_apps") == (
        "# HELP nvidia_smi_compute_apps Number of processes with a compute context on the GPU.\n"
        "# TYPE nvidia_smi_compute_apps gauge\n"
        'nvidia_smi_compute_apps{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 0\n'
        'nvidia_smi_compute_apps{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 2\n'
        'nvidia_smi_compute_apps{uuid="ffff"} 1\n'
    )


def test_idle_gpus_only_zero_counts() -> None:
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields, uuid=UUID_A)], processes=processes()))
    assert 'nvidia_smi_compute_apps{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 0\n' in text
    assert "nvidia_smi_compute_apps_last_collect_success 1\n" in text
    assert "nvidia_smi_compute_app_info" not in text
    assert "nvidia_smi_compute_app_used_memory_bytes" not in text


MEMORY: list[tuple[str, str | None, str]] = [
    ("370 MiB", "3.8797312e+08", "370 MiB in bytes"),
    ("40950 MiB", "4.29391872e+10", "40950 MiB in bytes"),
    ("[N/A]", None, "[N/A] -> no memory series"),
    ("N/A", None, "N/A -> no memory series"),
    ("", None, "empty -> no memory series"),
    ("[Insufficient Permissions]", None, "insufficient permissions -> no memory series"),
    ("[Not Supported]", None, "not supported -> no memory series"),
    ("[Unknown Error]", None, "unknown error -> no memory series"),
    ("Enabled", "1", "words bypass the multiplier as in GPU fields"),
    ("0x10", "16", "hex bypasses the multiplier as in GPU fields"),
    ("garbage", None, "no number -> no memory series"),
    ("0 MiB", "0", "zero MiB"),
]


@pytest.mark.parametrize(("memory", "expected"), [m[:2] for m in MEMORY], ids=[m[2] for m in MEMORY])
def test_process_memory(memory: str, expected: str | None) -> None:
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields)], processes=processes(("GPU-X", "7", "p", memory))))
    assert 'nvidia_smi_compute_app_info{pid="7",process_name="p",uuid="x"} 1\n' in text
    memory_lines = [line for line in sample_lines(text) if line.startswith("nvidia_smi_compute_app_used_memory_bytes")]
    if expected is None:
        assert memory_lines == []
    else:
        assert memory_lines == [
            f'nvidia_smi_compute_app_used_memory_bytes{{pid="7",process_name="p",uuid="x"}} {expected}'
        ]


def test_mig_labels_present_and_empty() -> None:
    """With MIG labels on, non-MIG processes carry gpu_instance_id="" and compute_instance_id=""."""
    expo, fields = exposition(mig=True)
    text = expo.render(success_snapshot([gpu_row(fields)], processes=processes(("GPU-X", "7", "p", "1 MiB"))))
    assert (
        'nvidia_smi_compute_app_info{compute_instance_id="",gpu_instance_id="",pid="7",process_name="p",uuid="x"} 1\n'
        in text
    )
    assert (
        'nvidia_smi_compute_app_used_memory_bytes{compute_instance_id="",gpu_instance_id="",pid="7",'
        'process_name="p",uuid="x"} 1.048576e+06\n' in text
    )
    assert 'nvidia_smi_compute_apps{uuid="x"} 1\n' in text


def test_mig_labels_carry_instance_ids() -> None:
    expo, fields = exposition(mig=True)
    rows = (ProcessRow("GPU-X", "7", "p", "1 MiB", "1", "0"), ProcessRow("GPU-X", "7", "p", "1 MiB", "2", "0"))
    text = expo.render(success_snapshot([gpu_row(fields)], processes=ProcessList(True, rows)))
    assert 'nvidia_smi_compute_app_info{compute_instance_id="0",gpu_instance_id="1",pid="7",' in text
    assert 'nvidia_smi_compute_app_info{compute_instance_id="0",gpu_instance_id="2",pid="7",' in text


# -- whole-scrape failures and invalid UTF-8 ---------------------------------------------------------------------


def test_duplicate_uuid_raises() -> None:
    """Two GPUs with the same normalized uuid -> the whole scrape fails."""
    expo, fields = exposition()
    snapshot = success_snapshot(
        [gpu_row(fields, uuid="GPU-ABC", index="0"), gpu_row(fields, uuid=" gpu-abc", index="1")]
    )
    with pytest.raises(DuplicateSeriesError):
        expo.render(snapshot)


def test_duplicate_uuid_identical_rows_raises() -> None:
    expo, fields = exposition()
    with pytest.raises(DuplicateSeriesError):
        expo.render(success_snapshot([gpu_row(fields, uuid="GPU-ABC"), gpu_row(fields, uuid="GPU-ABC")]))


@pytest.mark.parametrize(
    "rows",
    [
        (("GPU-X", "1", "p", "1 MiB"), ("GPU-X", "1", "p", "1 MiB")),
        (("GPU-X", "1", "p", "1 MiB"), ("gpu-x", "1", "p", "[N/A]")),
    ],
    ids=["identical process rows", "same identity, different memory"],
)
def test_duplicate_process_rows_raise(rows: tuple[tuple[str, str, str, str], ...]) -> None:
    expo, fields = exposition()
    with pytest.raises(DuplicateSeriesError):
        expo.render(success_snapshot([gpu_row(fields)], processes=processes(*rows)))


def test_same_pid_different_name_is_not_a_duplicate() -> None:
    expo, fields = exposition()
    text = expo.render(
        success_snapshot([gpu_row(fields)], processes=processes(("GPU-X", "1", "p", ""), ("GPU-X", "1", "q", "")))
    )
    assert 'nvidia_smi_compute_apps{uuid="x"} 2\n' in text


INVALID = "bad\udcffbyte"  # what surrogateescape makes of an invalid UTF-8 byte


@pytest.mark.parametrize(
    "column",
    ["name", "vbios_version", "serial", "pci.sub_device_id", "index"],
    ids=lambda column: f"invalid UTF-8 in {column} drops the GPU",
)
def test_invalid_utf8_identity_drops_gpu(column: str) -> None:
    """Invalid UTF-8 in a gpu_info label drops that GPU's gpu_info and all its field samples."""
    expo, fields = exposition([("fan.speed", "fan.speed [%]")])
    good = gpu_row(fields, uuid=UUID_A, fan_speed="38 %", index="0")
    cells = {"uuid": UUID_B, "fan_speed": "57 %", "index": "1", column.replace(".", "_"): INVALID + " 5"}
    bad = gpu_row(fields, **cells)
    text = expo.render(success_snapshot([good, bad]))
    assert text.encode("utf-8")
    assert len([line for line in sample_lines(text) if line.startswith("nvidia_smi_gpu_info")]) == 1
    assert [line for line in sample_lines(text) if line.startswith("nvidia_smi_fan_speed_ratio")] == [
        'nvidia_smi_fan_speed_ratio{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 0.38'
    ]
    assert "df6e7a7c" not in text


def test_invalid_utf8_process_label_never_reaches_output() -> None:
    expo, fields = exposition()
    text = expo.render(success_snapshot([gpu_row(fields)], processes=processes(("GPU-X", "1", INVALID, "1 MiB"))))
    assert text.encode("utf-8")


def test_a_gpu_dropped_for_its_identity_still_gets_its_process_count() -> None:
    """As in the Go exporter: the count family covers every GPU row, rendered or not."""
    expo, fields = exposition()
    bad = gpu_row(fields, uuid=UUID_B, name=INVALID, index="1")
    rows = processes((UUID_A, "7", "train", "1 MiB"))
    text = expo.render(success_snapshot([gpu_row(fields, uuid=UUID_A, index="0"), bad], processes=rows))
    assert 'nvidia_smi_compute_apps{uuid="0b1c2d3e-0000-1111-2222-333344445555"} 1\n' in text
    assert 'nvidia_smi_compute_apps{uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"} 0\n' in text
    info = [line for line in sample_lines(text) if line.startswith("nvidia_smi_gpu_info")]
    assert len(info) == 1
    assert "df6e7a7c" not in info[0]


def test_a_process_dropped_for_its_name_still_counts() -> None:
    """As in the Go exporter: only the process's own series go; the GPU's count includes it."""
    expo, fields = exposition()
    rows = processes(("GPU-X", "1", INVALID, "1 MiB"), ("GPU-X", "2", "ok", "1 MiB"))
    text = expo.render(success_snapshot([gpu_row(fields)], processes=rows))
    assert 'nvidia_smi_compute_apps{uuid="x"} 2\n' in text
    assert [line for line in sample_lines(text) if line.startswith("nvidia_smi_compute_app_info")] == [
        'nvidia_smi_compute_app_info{pid="2",process_name="ok",uuid="x"} 1'
    ]


def test_invalid_utf8_in_a_uuid_becomes_a_replacement_character_and_keeps_the_gpu() -> None:
    """Go's strings.ToLower writes U+FFFD for a byte that is not UTF-8, so the label is valid and nothing drops."""
    expo, fields = exposition([("fan.speed", "fan.speed [%]")])
    row = gpu_row(fields, uuid="GPU-AB\udcffCD", fan_speed="38 %", index="0")
    text = expo.render(success_snapshot([row], processes=processes(("GPU-AB\udcffCD", "3", "p", "1 MiB"))))
    assert 'nvidia_smi_fan_speed_ratio{uuid="ab\ufffdcd"} 0.38\n' in text
    assert 'nvidia_smi_compute_apps{uuid="ab\ufffdcd"} 1\n' in text
    assert sum(line.startswith("nvidia_smi_gpu_info") for line in sample_lines(text)) == 1


def test_gpu_info_samples_sorted_by_values_in_label_name_order() -> None:
    """gpu_info samples sort by compute_cap first (alphabetically first label), not by uuid."""
    expo, fields = exposition()
    snapshot = success_snapshot(
        [
            gpu_row(fields, uuid=UUID_A, compute_cap="9.0", index="0"),
            gpu_row(fields, uuid=UUID_B, compute_cap="8.0", index="1"),
        ]
    )
    info = [line for line in sample_lines(expo.render(snapshot)) if line.startswith("nvidia_smi_gpu_info")]
    assert [line.split("compute_cap=")[1][:5] for line in info] == ['"8.0"', '"9.0"']
    assert info[0].endswith('uuid="df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",vbios_version="[N/A]"} 1')


# -- OpenMetrics (docs/compatibility.md, "Content negotiation") ---------------------------------------------

OPENMETRICS: list[tuple[bytes, bytes, str]] = [
    (
        b"# HELP a_total Help\n# TYPE a_total counter\na_total 1\n",
        b"# HELP a Help\n# TYPE a counter\na_total 1.0\n",
        "a counter family is named without _total, its samples keep it",
    ),
    (
        b'# HELP b Help\n# TYPE b counter\nb{x="1"} 2.5\n',
        b'# HELP b Help\n# TYPE b unknown\nb{x="1"} 2.5\n',
        "a counter without _total is of unknown type, its samples unchanged",
    ),
    (b"# HELP g H\n# TYPE g gauge\ng 42\n", b"# HELP g H\n# TYPE g gauge\ng 42.0\n", "an integer gains .0"),
    (b"# HELP g H\n# TYPE g gauge\ng 0\n", b"# HELP g H\n# TYPE g gauge\ng 0.0\n", "zero is 0.0"),
    (b"# HELP g H\n# TYPE g gauge\ng -1\n", b"# HELP g H\n# TYPE g gauge\ng -1.0\n", "minus one is -1.0"),
    (b"# HELP g H\n# TYPE g gauge\ng 1e+06\n", b"# HELP g H\n# TYPE g gauge\ng 1e+06\n", "exponent form kept"),
    (b"# HELP g H\n# TYPE g gauge\ng 0.25\n", b"# HELP g H\n# TYPE g gauge\ng 0.25\n", "a fraction kept"),
    (b"# HELP g H\n# TYPE g gauge\ng NaN\n", b"# HELP g H\n# TYPE g gauge\ng NaN\n", "NaN kept"),
    (b"# HELP g H\n# TYPE g gauge\ng +Inf\n", b"# HELP g H\n# TYPE g gauge\ng +Inf\n", "+Inf kept"),
    (b"# HELP g H\n# TYPE g gauge\ng -Inf\n", b"# HELP g H\n# TYPE g gauge\ng -Inf\n", "-Inf kept"),
    (
        b'# HELP g say "hi" \\\\ and \\n\n# TYPE g gauge\ng 1\n',
        b'# HELP g say \\"hi\\" \\\\ and \\n\n# TYPE g gauge\ng 1.0\n',
        "HELP escapes double quotes too",
    ),
    (
        b'# HELP g H\n# TYPE g gauge\ng{a="x y} 1",b="\\"q\\""} 3\n',
        b'# HELP g H\n# TYPE g gauge\ng{a="x y} 1",b="\\"q\\""} 3.0\n',
        "label values are kept byte for byte",
    ),
    (
        b"# HELP g_total H\n# TYPE g_total gauge\ng_total 1\n",
        b"# HELP g_total H\n# TYPE g_total gauge\ng_total 1.0\n",
        "a gauge keeps a _total name",
    ),
    (b"# HELP g b\xffd\n# TYPE g gauge\ng 1\n", b"# HELP g b\xffd\n# TYPE g gauge\ng 1.0\n", "raw bytes in HELP kept"),
    (b"", b"", "nothing stays nothing"),
]


@pytest.mark.parametrize(("text", "expected"), [o[:2] for o in OPENMETRICS], ids=[o[2] for o in OPENMETRICS])
def test_openmetrics_from_text(text: bytes, expected: bytes) -> None:
    assert to_openmetrics(text) == expected


def test_openmetrics_of_a_whole_scrape_parses() -> None:
    """Every family the exposition renders, converted and ended with # EOF, is read by the OpenMetrics parser."""
    expo, fields = exposition([("fan.speed", "fan.speed [%]")])
    rows = processes(("GPU-X", "1", "p", "1 MiB"))
    text = expo.render(success_snapshot([gpu_row(fields, uuid="GPU-X", fan_speed="38 %")], processes=rows))
    converted = (to_openmetrics(text.encode("utf-8")) + OPENMETRICS_EOF).decode("utf-8")
    families = {family.name: family for family in parse_openmetrics(converted)}
    assert families["nvidia_smi_failed_scrapes"].type == "counter"
    assert [sample.name for sample in families["nvidia_smi_failed_scrapes"].samples] == [
        "nvidia_smi_failed_scrapes_total"
    ]
    assert families["nvidia_smi_fan_speed_ratio"].samples[0].value == 0.38


# -- the per-field cell cache (docs/architecture.md, "The layers, top to bottom") ------------------------


def test_the_cell_cache_keeps_the_fields_whose_texts_repeat_and_drops_the_others() -> None:
    """Power never repeats a text: dropped at its first check. A clock cycling through 300 texts, each shown
    twice, hits half its lookups: kept, all 300. Memory used, each new text shown twice, hits as often but
    never stops: kept up to CELL_CACHE_LIMIT, then dropped. The identity cells and the pstate stay cached.
    Every sample is right throughout."""
    expo, fields = exposition(
        [
            ("power.draw", "power.draw [W]"),
            ("clocks.current.sm", "clocks.current.sm [MHz]"),
            ("memory.used", "memory.used [MiB]"),
            ("pstate", "pstate"),
        ]
    )

    def cells(step: int) -> tuple[str, int, int]:
        return f"{100 + step / 100:.2f}", 1000 + (step // 2) % 300, 1000 + step // 2

    def render(step: int) -> str:
        power, clock, memory = cells(step)
        row = gpu_row(
            fields,
            power_draw=f"{power} W",
            clocks_current_sm=f"{clock} MHz",
            memory_used=f"{memory} MiB",
            pstate="P0",
        )
        return expo.render(success_snapshot([row]))

    render(0)
    first = expo.cached_texts()  # one text per field, the moving ones included
    uuid = '{uuid="00000000-0000-0000-0000-000000000000"}'
    for step in range(1, 3 * CELL_CACHE_LIMIT):
        text = render(step)
        power, clock, memory = cells(step)
        assert f"nvidia_smi_power_draw_watts{uuid} {format_go_float(float(power))}\n" in text
        assert f"nvidia_smi_clocks_current_sm_clock_hz{uuid} {format_go_float(clock * 1e6)}\n" in text
        assert f"nvidia_smi_memory_used_bytes{uuid} {format_go_float(memory * 1048576.0)}\n" in text
        assert f"nvidia_smi_pstate{uuid} 0\n" in text
        if step == 599:  # power went at its first check; the clock's 300 texts and memory's 300 so far stay
            assert expo.cached_texts() == first - 3 + 300 + 300
    assert expo.cached_texts() == first - 2 + 299  # power and memory out; the clock's 300 in
