"""--dcgm.compatibility (docs/dcgm.md, "Generations"): each dcgm-exporter generation's label and field names and
units, a counters file served as written whatever the generation, and the docs table of the facts."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from harness import FIXTURES, REPO, assert_golden
from nvidia_gpu_exporter.app import dcgm_counters, dcgm_exposition
from nvidia_gpu_exporter.backends.demo.backend import DemoBackend
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import Counter, parse_counters
from nvidia_gpu_exporter.exposition.dcgm_defaults import DEFAULT_GENERATION, GENERATION_ORDER, Generation
from nvidia_gpu_exporter.exposition.dcgm_generations import (
    GENERATIONS,
    IMAGE_FILES,
    RENAMES,
    resolve_generation,
    spellings,
)
from nvidia_gpu_exporter.flags import FlagError, parse_args
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuExtras,
    GpuTable,
    NvmlExtras,
    QueryField,
    Readings,
    Snapshot,
    XidRecord,
)
from test_unit_dcgm import samples
from unit_helpers import gpu_row, query_fields

UUID = "GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
IDENTITY = {"uuid": UUID, "name": "NVIDIA A100-SXM4-80GB", "pci.bus_id": "00000000:07:00.0", "index": "0"}
GPU = 'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0"'
CELLS = {
    "clocks.current.sm": ("clocks.current.sm [MHz]", "1410 MHz"),
    "temperature.gpu": ("temperature.gpu", "31"),
    "utilization.gpu": ("utilization.gpu [%]", "45 %"),
    "memory.total": ("memory.total [MiB]", "81920 MiB"),
    "memory.reserved": ("memory.reserved [MiB]", "525 MiB"),
    "utilization.encoder": ("utilization.encoder [%]", "7 %"),
    "driver_version": ("driver_version", "550.54.15"),
}


def snapshot(*, xids: tuple[XidRecord, ...] = ()) -> tuple[list[QueryField], Snapshot]:
    fields = query_fields([(qfield, rfield) for qfield, (rfield, _) in CELLS.items()])
    row = gpu_row(fields, **IDENTITY, **{qfield.replace(".", "_"): cell for qfield, (_, cell) in CELLS.items()})
    nvlink: dict[str, Any] = {"nvlink_mib_per_second": 2.0, "nvlink_bytes_per_second": 2049.0 * 1024}  # 2049 KiB/s
    extras = NvmlExtras(gpus=(GpuExtras(UUID, energy_joules=123456.789, pcie_tx_bytes_per_second=1000.0, **nvlink),))
    readings = Readings(GpuTable((row,)), None, "12.4", extras)
    return fields, Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0, xids=xids)


def render(generation: Generation, counters: str | None = None) -> str:
    fields, snap = snapshot(xids=(XidRecord(UUID, 79, 1, 5.0),))
    parsed = parse_counters(counters, "counters.csv") if counters is not None else None
    return DcgmExposition(fields, "node-1", counters=parsed, generation=generation).render(snap)


def sample_of(text: str, name: str) -> str:
    """The one sample of family ``name``: its labels after the GPU's, and its value."""
    (line,) = [line for line in samples(text) if line.startswith(name + "{")]
    return line.removeprefix(f"{name}{{{GPU},").split(",", 1)[1]


# -- the flag --------------------------------------------------------------------------------------------------


def test_the_flag_defaults_to_auto_which_without_a_counters_file_is_the_newest_generation() -> None:
    assert parse_args([]).config.dcgm_compatibility is None
    assert parse_args(["--dcgm.compatibility=auto"]).config.dcgm_compatibility is None
    assert resolve_generation(None, None) == (DEFAULT_GENERATION, "no counters file") == (Generation.V4_10, ANY)
    assert DEFAULT_GENERATION is GENERATION_ORDER[-1]


@pytest.mark.parametrize(
    ("absent", "generation", "why"),
    [
        (  # the GPU Operator's DCGM_EXPORTER_COLLECTORS: every release pins a generation 4.8 image at newest
            "/etc/dcgm-exporter/dcp-metrics-included.csv",
            Generation.V4_8,
            "/etc/dcgm-exporter/dcp-metrics-included.csv, absent here, is the GPU Operator's counters file, "
            "whose releases run generation 4.8",
        ),
        (  # dcgm-exporter's own default path, unmounted: nothing says an older release
            "/etc/dcgm-exporter/default-counters.csv",
            Generation.V4_10,
            "no counters file",
        ),
        ("", Generation.V4_10, "no counters file"),
    ],
    ids=["gpu-operator", "default-counters", "none"],
)
def test_auto_without_a_counters_file_serves_the_generation_of_the_releases_that_name_the_absent_path(
    absent: str, generation: Generation, why: str
) -> None:
    assert resolve_generation(None, None, absent=absent) == (generation, why)


def test_the_flag_wins_over_an_absent_image_path() -> None:
    chosen = resolve_generation(Generation.V4_10, None, absent="/etc/dcgm-exporter/dcp-metrics-included.csv")
    assert chosen == (Generation.V4_10, "--dcgm.compatibility")


@pytest.mark.parametrize("value", ["3", "4.5", "4.8", "4.9", "4.10"])
def test_the_flag_takes_each_generation(value: str) -> None:
    assert parse_args([f"--dcgm.compatibility={value}"]).config.dcgm_compatibility is Generation(value)


def test_the_flag_refuses_a_release_that_is_not_a_generation() -> None:
    with pytest.raises(FlagError, match=re.escape("enum value must be one of auto,3,4.5,4.8,4.9,4.10, got '4.6'")):
        parse_args(["--dcgm.compatibility=4.6"])


def counters_of(*names: str) -> tuple[Counter, ...]:
    return parse_counters("".join(f"{name}, gauge, help\n" for name in names), "counters.csv")


@pytest.mark.parametrize(
    ("names", "generation", "why"),
    [
        (  # dcgm-exporter 4.10's default file: its PCIe names are 4.10's
            ("DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"),
            Generation.V4_10,
            "counters.csv:2 names DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, a name of generation 4.10 on",
        ),
        (  # 4.9's: 4.9's names beside the PCIe names 4.10 renamed
            ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_PROF_PCIE_TX_BYTES"),
            Generation.V4_9,
            "counters.csv:1 names DCGM_FI_DEV_GPU_TEMP_CELSIUS, a name of generation 4.9 on",
        ),
        (  # the field 4.9 added is a name of 4.9 on too
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES"),
            Generation.V4_9,
            "counters.csv:2 names DCGM_FI_DEV_FB_CAPACITY_BYTES, a name of generation 4.9 on",
        ),
        (  # 4.8's: names that 4.9 renamed
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_TEMP"),
            Generation.V4_8,
            "counters.csv:2 names DCGM_FI_DEV_GPU_TEMP, a name generation 4.9 renamed",
        ),
        (  # a newer name wins over an old one (4.10 still reads the old names in a custom file)
            ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL_RATIO"),
            Generation.V4_9,
            "counters.csv:2 names DCGM_FI_DEV_GPU_UTIL_RATIO, a name of generation 4.9 on",
        ),
        (  # nothing any generation renamed: no evidence
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "dcgm_gpu_temp"),
            DEFAULT_GENERATION,
            "counters.csv names no field that a generation renamed",
        ),
    ],
    ids=["4.10-file", "4.9-file", "4.9-added-field", "4.8-file", "mixed", "no-evidence"],
)
def test_auto_infers_the_generation_from_the_counters_files_names(
    names: tuple[str, ...], generation: Generation, why: str
) -> None:
    assert resolve_generation(None, counters_of(*names)) == (generation, why)


# dcgm-exporter's own files type the NVLink bandwidth `counter` in every release to 4.8.2 and `gauge` from 4.8.3 on
# (tag 4.5.3-4.8.2 and commit 7ad5832: etc/default-counters.csv, etc/dcp-metrics-included.csv and the chart's
# deployment/templates/metrics-configmap.yaml): a file typing it `counter` was written for a `Hostname` release.
@pytest.mark.parametrize(
    ("records", "generation", "why"),
    [
        (  # the ConfigMap of dcgm-exporter's chart 4.5.3-4.8.2 (and of every chart from 3.x on)
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, n\n",
            Generation.V4_5,
            "counters.csv:2 types DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter, a type generation 4.8 changed",
        ),
        (  # the ConfigMap of its chart 4.6.0-4.8.3: the old names, the new type
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge, n\n",
            Generation.V4_8,
            "counters.csv:1 names DCGM_FI_DEV_GPU_TEMP, a name generation 4.9 renamed",
        ),
        (  # a name of a later generation still wins: its file is of that generation or later
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, n\nDCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t\n",
            Generation.V4_9,
            "counters.csv:2 names DCGM_FI_DEV_GPU_TEMP_CELSIUS, a name of generation 4.9 on",
        ),
    ],
    ids=["4.8.2-chart", "4.8.3-chart", "4.9-name-wins"],
)
def test_auto_infers_a_hostname_generation_from_a_type_dcgm_exporter_changed(
    records: str, generation: Generation, why: str
) -> None:
    assert resolve_generation(None, parse_counters(records, "counters.csv")) == (generation, why)


@pytest.mark.parametrize(
    ("generation", "metric_type"),
    [(Generation.V3, "counter"), (Generation.V4_5, "counter"), (Generation.V4_8, "gauge")],
)
def test_each_generation_types_the_nvlink_bandwidth_as_its_default_file_does(
    generation: Generation, metric_type: str
) -> None:
    assert f"# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL {metric_type}\n" in render(generation)


def test_an_explicit_generation_is_taken_whatever_the_counters_file_names() -> None:
    chosen = resolve_generation(Generation.V4_5, counters_of("DCGM_FI_DEV_GPU_TEMP_CELSIUS"))
    assert chosen == (Generation.V4_5, "--dcgm.compatibility")


def test_the_chosen_generation_is_logged_once_at_startup(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, help\n", encoding="utf-8")
    config = parse_args(["--metrics.profile=dcgm", f"--dcgm.collectors={counters}"]).config
    fields, _ = snapshot()

    class Backend:
        pass

    backend = Backend()
    backend.fields = fields  # type: ignore[attr-defined]
    with caplog.at_level(logging.INFO):
        exposition = dcgm_exposition(config, backend, dcgm_counters(config))  # type: ignore[arg-type]
    assert exposition is not None
    assert exposition.generation is Generation.V4_9
    (record,) = [record for record in caplog.records if record.getMessage() == "serving a dcgm-exporter generation"]
    assert record.__dict__["generation"] == "4.9"
    assert record.__dict__["why"] == f"{counters}:1 names DCGM_FI_DEV_GPU_TEMP_CELSIUS, a name of generation 4.9 on"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")),
        ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND")),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",)),
    ],
)
def test_a_fields_spellings_are_its_every_generations_names_oldest_first(name: str, expected: tuple[str, ...]) -> None:
    assert spellings(name) == expected


# -- labels ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "node", "driver"),
    [
        (Generation.V3, "Hostname", "DCGM_FI_DRIVER_VERSION"),
        (Generation.V4_5, "Hostname", "DCGM_FI_DRIVER_VERSION"),
        (Generation.V4_8, "hostname", "DCGM_FI_DRIVER_VERSION"),
        (Generation.V4_9, "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"),
        (Generation.V4_10, "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION"),
    ],
)
def test_each_generation_spells_the_node_and_driver_labels_its_way(
    generation: Generation, node: str, driver: str
) -> None:
    text = render(generation)
    temperature = next(line for line in samples(text) if "_GPU_TEMP" in line)
    assert f'modelName="NVIDIA A100-SXM4-80GB",{node}="node-1",{driver}="550.54.15"}} 31' in temperature


# -- names and units -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "name", "value"),
    [
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_SM_CLOCK", "1410", id="4.8-clock-in-MHz"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_SM_CLOCK_HERTZ", "1410000000", id="4.9-clock-in-Hz"),
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_GPU_UTIL", "45", id="4.8-utilization-in-percent"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_GPU_UTIL_RATIO", "0.45", id="4.9-utilization-as-a-ratio"),
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "123456789", id="4.8-energy-in-mJ"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "123456.789", id="4.9-energy-in-J"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "31", id="4.9-renamed-same-unit"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_FB_CAPACITY_BYTES", "85899345920", id="4.9-capacity-in-bytes"),
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_FB_RESERVED", "525", id="4.8-framebuffer-in-MiB"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_FB_RESERVED_BYTES", "550502400", id="4.9-framebuffer-in-bytes"),
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_ENC_UTIL", "7", id="4.8-encoder-in-percent"),
        pytest.param(Generation.V4_9, "DCGM_FI_DEV_ENC_UTIL_RATIO", "0.07", id="4.9-encoder-as-a-ratio"),
        pytest.param(Generation.V4_9, "DCGM_FI_PROF_PCIE_TX_BYTES", "1000", id="4.9-pcie-old-name"),
        pytest.param(Generation.V4_10, "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "1000", id="4.10-pcie-renamed"),
        pytest.param(Generation.V4_8, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "2", id="4.8-nvlink-in-MiB-per-second"),
        pytest.param(
            Generation.V4_9, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "2098176", id="4.9-nvlink-in-bytes-per-s"
        ),
    ],
)
def test_each_generation_serves_its_names_in_its_units(generation: Generation, name: str, value: str) -> None:
    assert sample_of(render(generation), name).endswith(f"}} {value}")


@pytest.mark.parametrize("generation", [Generation.V4_9, Generation.V4_10])
def test_the_nvlink_throughput_is_a_gauge_under_its_4_9_name(generation: Generation) -> None:
    """A rate, as DCGM 4.7 computes it; 4.8's file typed its MiB/s predecessor `counter`."""
    text = render(generation)
    assert "# TYPE DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND gauge\n" in text
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in text


@pytest.mark.parametrize("generation", [Generation.V3, Generation.V4_5, Generation.V4_8])
def test_no_generation_before_4_9_serves_a_4_9_name_by_default(generation: Generation) -> None:
    names = {line.split("{")[0] for line in samples(render(generation))}
    assert names.isdisjoint({rename.new for rename in RENAMES} | {"DCGM_FI_DEV_FB_CAPACITY_BYTES"})


def test_the_xid_family_keeps_its_labels_under_its_4_9_name() -> None:
    xid = sample_of(render(Generation.V4_9), "DCGM_FI_DEV_XID_ERROR")
    assert xid.endswith(',err_code="79",err_msg="GPU has fallen off the bus"} 79')


@pytest.mark.parametrize(
    ("name", "declaration"),
    [
        ("DCGM_FI_DEV_FB_RESERVED", None),  # 3.x's default file has no such line
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", None),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "counter Total number of bytes transmitted through PCIe TX via NVML."),
    ],
)
def test_generation_3_serves_its_own_default_file(name: str, declaration: str | None) -> None:
    text = render(Generation.V3)
    helps = {line.split(" ")[2]: line.split(" ", 3)[3] for line in text.splitlines() if line.startswith("# HELP")}
    types = {line.split(" ")[2]: line.split(" ")[3] for line in text.splitlines() if line.startswith("# TYPE")}
    assert (f"{types[name]} {helps[name]}" if name in helps else None) == declaration


# -- a counters file is served as written ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "line", "expected"),
    [
        pytest.param(
            Generation.V4_5, "DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock (in Hz).", "1410000000", id="new-name-in-4.5"
        ),
        pytest.param(Generation.V4_10, "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock.", "1410", id="old-name-in-4.10"),
        pytest.param(
            Generation.V4_8,
            "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, Energy (in J).",
            "123456.789",
            id="joules-in-4.8",
        ),
        pytest.param(
            Generation.V4_10, "DCGM_FI_PROF_PCIE_TX_BYTES, gauge, PCIe TX.", "1000", id="pre-4.10-pcie-in-4.10"
        ),
        pytest.param(Generation.V3, "DCGM_FI_DEV_FB_CAPACITY_BYTES, gauge, Memory.", "85899345920", id="capacity-in-3"),
    ],
)
def test_a_counters_file_field_is_served_under_its_name_in_that_names_unit(
    generation: Generation, line: str, expected: str
) -> None:
    name = line.split(",", maxsplit=1)[0]
    assert sample_of(render(generation, line + "\n"), name).endswith(f"}} {expected}")


def test_a_counters_file_names_the_driver_label_as_it_lists_it() -> None:
    text = render(Generation.V4_5, "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_SYSTEM_DRIVER_VERSION, label, d\n")
    assert samples(text)[0].endswith('Hostname="node-1",DCGM_FI_SYSTEM_DRIVER_VERSION="550.54.15"} 31')


# -- golden output of the demo (MIG included), per generation ---------------------------------------------------

DEMO_CONFIG = """\
seed: 27
extras:
  seed: 27
  mig:
  - gpu: 0
    instances:
    - gi: 2
      profile: 3g.71gb
      cis: 2
      busy: true
    - gi: 7
      profile: 1g.18gb
  scenarios:
  - xid-79
"""


def demo_text(generation: Generation, tmp_path: Path) -> str:
    """Two collections of the seeded demo 30 s apart (a clock the test holds), as the generation serves them."""
    config = tmp_path / "demo.yaml"
    config.write_text(DEMO_CONFIG, encoding="utf-8")
    now = [1_700_000_000.0]

    async def collect() -> str:
        backend = await DemoBackend.start(FieldRequest(), config_path=str(config), clock=lambda: now[0])
        try:
            await backend.collect()
            now[0] += 30.0
            readings = await backend.collect()
            snap = Snapshot(Attempt(readings, 0, 0.1, now[0]), 0, now[0], xids=backend.xid_records())
            return DcgmExposition(backend.fields, "node-1", generation=generation).render(snap)
        finally:
            await backend.aclose()

    return asyncio.run(collect())


@pytest.mark.parametrize("generation", list(Generation), ids=[generation.value for generation in Generation])
def test_golden_dcgm_output_of_the_demo_per_generation(generation: Generation, tmp_path: Path) -> None:
    assert_golden(FIXTURES / "dcgm" / f"demo-mig__{generation.value}.prom", demo_text(generation, tmp_path))


# -- the docs table --------------------------------------------------------------------------------------------


def generations_table() -> str:
    """docs/dcgm.md's tables of the generations and the renames, as this module's facts render them."""
    lines = ["| Generation | dcgm-exporter releases | Node label |", "|---|---|---|"]
    lines += [f"| `{facts.generation.value}` | {facts.releases} | `{facts.hostname_label}` |" for facts in GENERATIONS]
    lines += ["", "| Field until then | Renamed to | From | Unit |", "|---|---|---|---|"]
    for rename in RENAMES:
        unit = rename.unit or "unchanged"
        lines.append(f"| `{rename.old}` | `{rename.new}` | `{rename.since.value}` | {unit} |")
    return "\n".join(lines) + "\n"


def test_the_docs_tables_of_the_generations_are_the_code_s() -> None:
    text = (REPO / "docs" / "dcgm.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- generations table -->\n(.*?)<!-- end generations table -->", text, flags=re.DOTALL)
    assert match, "docs/dcgm.md lost its generations table markers"
    assert match.group(1) == generations_table()


def swap_table_rows() -> list[list[str]]:
    """The cells of docs/dcgm.md's table of which DaemonSet gets which generation."""
    text = (REPO / "docs" / "dcgm.md").read_text(encoding="utf-8")
    section = text.split("### Swapping the image: which release gets which generation", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Who")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_the_docs_name_each_image_path_with_the_generation_the_code_gives_it() -> None:
    rows = swap_table_rows()
    for path, (generation, _) in IMAGE_FILES.items():
        (row,) = [row for row in rows if f"={path}`" in row[1]]
        assert row[2].startswith(f"`{generation.value}`"), row
    assert rows[-1][2] == f"`{DEFAULT_GENERATION.value}`"  # anything else without a counters file: the default
