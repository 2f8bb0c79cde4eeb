"""Issue 27: DCGM's per-link NVLink fields (``DCGM_FI_DEV_NVLINK_<kind>_L<n>``, links 0-17), written once as a table,
served for the links a GPU has when a counters file lists them (docs/dcgm.md, "NVLink per link")."""

from __future__ import annotations

import asyncio

import pytest

from nvidia_gpu_exporter.app import lists_nvlink_links
from nvidia_gpu_exporter.backends.demo.extras import ExtrasSynthesizer, parse_extras
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml import open_backend
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, open_supplement
from nvidia_gpu_exporter.exposition.dcgm import NVLINK_LINK_KINDS, DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import parse_counters
from nvidia_gpu_exporter.model.snapshot import (
    NVLINK_MAX_LINKS,
    Attempt,
    GpuExtras,
    GpuTable,
    NvLinkReading,
    NvmlExtras,
    Readings,
    Snapshot,
)
from nvml_fixtures import InProcessFake
from test_dcgm_listed_fields import FIELDS, GPU
from test_exec_nvml_supplement import SAME_GPUS, exec_backend
from test_unit_dcgm import IDENTITY, UUID, samples
from test_unit_dcgm_nvml_fields import docs_table
from unit_helpers import gpu_row

# What each kind reads in a GPU's 4 links below: link n has n * 10 + the kind's offset.
OFFSETS = {"mib_per_second": 1, "crc_flit_errors": 2, "crc_data_errors": 3, "replay_errors": 4, "recovery_errors": 5}
FOUR_LINKS = tuple(
    NvLinkReading(link, **{name: float(link * 10 + offset) for name, offset in OFFSETS.items()}) for link in range(4)
)
# The fake's per-link error counters: the all-links field value's plus the link (h200: replay 5, recovery 0, ...).
FAKE_ERRORS = {"replay_errors": 5, "recovery_errors": 0, "crc_flit_errors": 2, "crc_data_errors": 1}


def render(counters_text: str, links: tuple[NvLinkReading, ...] = FOUR_LINKS) -> str:
    row = gpu_row(FIELDS, **{**IDENTITY, "driver_version": "550.54.15"})
    extras = NvmlExtras(gpus=(GpuExtras(UUID, nvlink_links=links),))
    counters = parse_counters(counters_text, "c.csv")
    exposition = DcgmExposition(FIELDS, "node-1", counters=counters, extras=True)
    return exposition.render(Snapshot(Attempt(Readings(GpuTable((row,)), None, "12.4", extras), 0, 0.1, 1.0), 0, 1.0))


@pytest.mark.parametrize("link", range(4))
@pytest.mark.parametrize(("stem", "metric_type", "attribute"), [(k[0], k[1], k[3]) for k in NVLINK_LINK_KINDS])
def test_each_kind_of_each_link_is_served_from_its_reading(
    stem: str, metric_type: str, attribute: str, link: int
) -> None:
    name = f"{stem}_L{link}"
    text = render(f"{name}, {metric_type}, h\n")
    assert f"# TYPE {name} {metric_type}\n" in text
    assert samples(text) == [f"{name}{{{GPU}}} {link * 10 + OFFSETS[attribute]}"]


@pytest.mark.parametrize("link", [0, 3, 17])
def test_the_bandwidth_is_served_under_dcgm_4s_throughput_name_too(link: int) -> None:
    """dcgm_fields.h's alias block (v4.6.0) names field 440 and its siblings DCGM_FI_DEV_NVLINK_THROUGHPUT_L<n>."""
    links = tuple(NvLinkReading(number, mib_per_second=float(number)) for number in range(NVLINK_MAX_LINKS))
    name = f"DCGM_FI_DEV_NVLINK_THROUGHPUT_L{link}"
    assert samples(render(f"{name}, gauge, h\n", links)) == [f"{name}{{{GPU}}} {link}"]


@pytest.mark.parametrize("link", [4, 11, 17])
def test_a_link_the_gpu_does_not_have_gives_no_series_and_no_error(link: int) -> None:
    """As DCGM gives blanks for it, which dcgm-exporter skips."""
    text = render(
        f"DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L{link}, counter, h\nDCGM_FI_DEV_NVLINK_BANDWIDTH_L0, gauge, h\n"
    )
    assert samples(text) == [f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L0{{{GPU}}} 1"]


@pytest.mark.parametrize(
    ("listed", "reads"),
    [
        ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L9, counter, h\n", True),
        ("DCGM_FI_DEV_NVLINK_THROUGHPUT_L2, gauge, h\n", True),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, gauge, h\n", False),
        (None, False),
    ],
)
def test_nvml_reads_each_link_only_when_a_per_link_field_is_listed(listed: str | None, reads: bool) -> None:
    counters = None if listed is None else parse_counters(listed, "c.csv")
    assert lists_nvlink_links(counters) is reads


def links_read(fake_nvml: InProcessFake, *commands: str, asked: bool = True, collections: int = 1) -> list[GpuExtras]:
    fake_nvml.command("reset h200", *commands)
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True, nvlink_links=asked)
    read: list[GpuExtras] = []
    try:
        for _ in range(collections):
            extras = backend.collect_blocking().extras
            assert extras is not None
            read.append(extras.gpus[0])
            fake_nvml.command("set 0 nvlink_l0_tx_kib 1000000000", "set 0 nvlink_l0_rx_kib 1000000000")
    finally:
        backend.session.close(5)
    return read


@pytest.mark.parametrize("links", [4, 18])
def test_the_nvml_backend_reads_the_links_the_gpu_has(fake_nvml: InProcessFake, links: int) -> None:
    (gpu,) = links_read(fake_nvml, f"set 0 nvlinks {links}")
    assert [reading.link for reading in gpu.nvlink_links] == list(range(links))
    for reading in gpu.nvlink_links:  # nvmlDeviceGetNvLinkErrorCounter(link, counter)
        assert {name: getattr(reading, name) for name in FAKE_ERRORS} == {
            name: float(base + reading.link) for name, base in FAKE_ERRORS.items()
        }


def test_each_links_bandwidth_is_its_own_data_counters_rate(fake_nvml: InProcessFake) -> None:
    """Fields 138 and 139 with the link as the scope, computed as the all-links one (ReadAndCacheNvLinkBandwidth):
    0 on the first reading; the fake's link n moves n + 1 times link 0's amount."""
    first, second = links_read(fake_nvml, "set 0 nvlinks 4", collections=2)
    assert [reading.mib_per_second for reading in first.nvlink_links] == [0.0] * 4
    rates = [reading.mib_per_second or 0.0 for reading in second.nvlink_links]
    assert 0.0 < rates[0] < rates[1] < rates[2] < rates[3]
    assert second.nvlink_mib_per_second == 0.0  # the all-links counters did not move


@pytest.mark.parametrize(("commands", "asked"), [(("reset rtx",), True), ((), False)])
def test_no_link_is_read_on_a_gpu_without_nvlink_or_when_none_is_listed(
    fake_nvml: InProcessFake, commands: tuple[str, ...], asked: bool
) -> None:
    fake_nvml.command("reset h200", *commands)
    backend = open_backend(FieldRequest(), watch_xids=False, dcgm_readings=True, nvlink_links=asked)
    try:
        fake_nvml.reset_calls()
        extras = backend.collect_blocking().extras
    finally:
        backend.session.close(5)
    assert extras is not None
    assert extras.gpus[0].nvlink_links == ()
    assert fake_nvml.calls("nvmlDeviceGetNvLinkErrorCounter") == 0


def test_the_exec_backend_reads_the_links_through_nvml(fake_nvml: InProcessFake) -> None:
    fake_nvml.command(*SAME_GPUS, "set * nvlinks 4")
    supplemented = NvmlSupplemented(exec_backend(), open_supplement(nvlink_links=True))
    try:
        readings = asyncio.run(supplemented.collect())
    finally:
        asyncio.run(supplemented.aclose())
    assert readings.extras is not None
    assert [[link.link for link in gpu.nvlink_links] for gpu in readings.extras.gpus] == [[0, 1, 2, 3]] * 2


def test_the_demo_serves_healthy_links_of_an_hgx_board() -> None:
    (gpu,) = ExtrasSynthesizer(parse_extras(None), seed=1).cycle(100.0, ["GPU-1"], [50.0]).gpus
    assert [link.link for link in gpu.nvlink_links] == list(range(NVLINK_MAX_LINKS))
    assert {
        (link.crc_flit_errors, link.crc_data_errors, link.replay_errors, link.recovery_errors)
        for link in gpu.nvlink_links
    } == {(0.0, 0.0, 0.0, 0.0)}


def test_the_docs_table_of_per_link_fields_is_the_code_s() -> None:
    rows = docs_table("<!-- nvlink per-link table -->", "<!-- end of nvlink per-link table -->")
    assert [(row[0], row[1], row[2]) for row in rows] == [
        (f"{stem}_L<n>", metric_type, text.replace("{link}", "<n>")) for stem, metric_type, text, _ in NVLINK_LINK_KINDS
    ]
