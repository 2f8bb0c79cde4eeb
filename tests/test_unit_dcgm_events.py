"""dcgm-exporter's own event families (docs/dcgm.md, "Event counts"): XIDs and clock events over a window and since
the start, as its xid-errors, clock-events and cumulative-total collectors count them."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from nvidia_gpu_exporter.app import dcgm_counters, dcgm_exposition
from nvidia_gpu_exporter.backends import Backend
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition, node_hostname
from nvidia_gpu_exporter.exposition.dcgm_counters import parse_counters
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.model.snapshot import Attempt, GpuTable, QueryField, Readings, Snapshot, XidRecord
from unit_helpers import gpu_row, query_fields

UUID = "GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
IDENTITY = {"uuid": UUID, "name": "NVIDIA A100-SXM4-80GB", "pci.bus_id": "00000000:07:00.0", "index": "0"}
LABELS = (
    'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",hostname="node-1"'
)
MASK = "clocks_event_reasons.active"
START = 1_773_480_000.0
COUNTERS = {
    "DCGM_EXP_XID_ERRORS_COUNT": "gauge, Count of XID Errors within user-specified time window.",
    "DCGM_EXP_XID_ERRORS_TOTAL": "counter, Total XID errors observed since exporter start.",
    "DCGM_EXP_CLOCK_EVENTS_COUNT": "gauge, Count of clock events within the user-specified time window.",
    "DCGM_EXP_CLOCK_EVENTS_TOTAL": "counter, Total clock events observed since exporter start.",
}


def exposition(
    *names: str, fields: list[QueryField] | None = None, xids: bool = True, window_ms: int = 300_000
) -> DcgmExposition:
    counters = parse_counters("".join(f"{name}, {COUNTERS[name]}\n" for name in names), "counters.csv")
    return DcgmExposition(
        fields or query_fields([(MASK, MASK)]),
        hostname="node-1",
        counters=counters,
        xids=xids,
        xid_window_ms=window_ms,
        clock_events_window_ms=window_ms,
    )


def snapshot(at: float, mask: str = "0x0000000000000000", xids: tuple[XidRecord, ...] = ()) -> Snapshot:
    row = gpu_row(query_fields([(MASK, MASK)]), **IDENTITY, clocks_event_reasons_active=mask)
    return Snapshot(Attempt(Readings(GpuTable((row,)), None, "12.2"), 0, 0.1, at), 0, at, xids=xids)


def samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def xid(code: int, count: int) -> XidRecord:
    return XidRecord(UUID, code, count, START)


def test_xid_count_counts_each_codes_xids_in_the_window_since_the_start() -> None:
    served = exposition("DCGM_EXP_XID_ERRORS_COUNT")
    served.render(snapshot(START, xids=(xid(13, 2),)))  # from before the start: not counted
    text = served.render(snapshot(START + 30, xids=(xid(13, 3), xid(79, 1))))
    window = 'window_size_in_ms="300000"'
    assert samples(text) == [
        f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS},{window},xid="13"}} 1',
        f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS},{window},xid="79"}} 1',
    ]
    assert "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n" in text
    assert "# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window.\n" in text


@pytest.mark.parametrize(
    ("later", "expected"),
    [
        pytest.param(299.0, '{window},xid="79"}} 1', id="still-in-the-window"),
        pytest.param(301.0, "{window}}} 0", id="out-of-the-window"),
    ],
)
def test_an_xid_leaves_the_count_when_the_window_passes(later: float, expected: str) -> None:
    served = exposition("DCGM_EXP_XID_ERRORS_COUNT")
    served.render(snapshot(START))
    served.render(snapshot(START + 10, xids=(xid(79, 1),)))
    text = served.render(snapshot(START + 10 + later, xids=(xid(79, 1),)))
    window = 'window_size_in_ms="300000"'
    assert samples(text) == [f"DCGM_EXP_XID_ERRORS_COUNT{{{LABELS}," + expected.format(window=window)]


def test_a_gpu_without_xids_in_the_window_gets_the_zero_series_without_an_xid_label() -> None:
    text = exposition("DCGM_EXP_XID_ERRORS_COUNT", window_ms=60_000).render(snapshot(START))
    assert samples(text) == [f'DCGM_EXP_XID_ERRORS_COUNT{{{LABELS},window_size_in_ms="60000"}} 0']


def test_xid_total_counts_every_xid_since_the_start_per_code_once_it_happened() -> None:
    served = exposition("DCGM_EXP_XID_ERRORS_TOTAL", window_ms=1)
    assert samples(served.render(snapshot(START, xids=(xid(13, 5),)))) == []  # nothing since the start yet
    served.render(snapshot(START + 30, xids=(xid(13, 6),)))
    text = served.render(snapshot(START + 3600, xids=(xid(13, 8), xid(79, 1))))
    assert samples(text) == [
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{LABELS},xid="13"}} 3',
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{LABELS},xid="79"}} 1',
    ]
    assert "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n" in text


def test_clock_events_count_counts_the_samples_in_the_window_with_each_reason_active() -> None:
    served = exposition("DCGM_EXP_CLOCK_EVENTS_COUNT")
    served.render(snapshot(START, "0x0000000000000004"))
    served.render(snapshot(START + 30, "0x0000000000000044"))
    text = served.render(snapshot(START + 60, "0x0000000000000000"))
    window = 'window_size_in_ms="300000"'
    assert samples(text) == [
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS},clock_event="power_cap",{window}}} 2',
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS},clock_event="hw_thermal",{window}}} 1',
    ]


def test_samples_without_an_active_reason_give_no_clock_events_series() -> None:
    """dcgm-exporter: a GPU with samples in the window but no reason among them has no series at all."""
    served = exposition("DCGM_EXP_CLOCK_EVENTS_COUNT")
    assert samples(served.render(snapshot(START, "0x0000000000000000"))) == []


def test_a_gpu_without_a_clock_sample_in_the_window_gets_the_zero_series() -> None:
    served = exposition("DCGM_EXP_CLOCK_EVENTS_COUNT", window_ms=60_000)
    served.render(snapshot(START, "0x0000000000000004"))
    text = served.render(snapshot(START + 120, "[N/A]"))
    assert samples(text) == [f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS},window_size_in_ms="60000"}} 0']


def test_a_collection_rendered_twice_is_one_sample() -> None:
    served = exposition("DCGM_EXP_CLOCK_EVENTS_COUNT")
    for _ in range(3):
        text = served.render(snapshot(START, "0x0000000000000001"))
    assert samples(text) == [
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{LABELS},clock_event="gpu_idle",window_size_in_ms="300000"}} 1'
    ]


def test_clock_events_total_counts_each_reasons_starts_after_the_first_sample() -> None:
    served = exposition("DCGM_EXP_CLOCK_EVENTS_TOTAL")
    for offset, mask in enumerate((0x4, 0x4, 0x0, 0x4, 0x44, 0x100)):
        text = served.render(snapshot(START + 30 * offset, f"0x{mask:016X}"))
    assert samples(text) == [
        f'DCGM_EXP_CLOCK_EVENTS_TOTAL{{{LABELS},clock_event="power_cap"}} 1',
        f'DCGM_EXP_CLOCK_EVENTS_TOTAL{{{LABELS},clock_event="hw_thermal"}} 1',
        f'DCGM_EXP_CLOCK_EVENTS_TOTAL{{{LABELS},clock_event="display_clocks"}} 1',
    ]
    assert "# TYPE DCGM_EXP_CLOCK_EVENTS_TOTAL counter\n" in text


@pytest.mark.parametrize(
    ("record", "kwargs", "reason"),
    [
        pytest.param(
            "DCGM_EXP_P2P_STATUS, gauge, P2P NvLink status",
            {"extras": False},
            "nvmlDeviceGetP2PStatus",
            id="p2p-status-without-nvml",
        ),
        pytest.param("DCGM_EXP_P2P_STATUS, label, P2P NvLink status", {}, "typed label", id="p2p-status-typed-label"),
        pytest.param("DCGM_EXP_XID_ERRORS_COUNT, label, xids", {}, "typed label", id="a-count-typed-label"),
        pytest.param(
            "DCGM_EXP_XID_ERRORS_TOTAL, counter, xids", {"xids": False}, "--collect.xid-source=off", id="xids-off"
        ),
        pytest.param(
            "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, events",
            {"fields": query_fields()},
            "clocks_event_reasons.active is not queried",
            id="no-bitmask",
        ),
    ],
)
def test_an_event_family_that_cannot_be_served_is_named_in_the_startup_warning(
    record: str, kwargs: dict[str, object], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    counters = parse_counters(record + "\n", "counters.csv")
    fields = kwargs.get("fields", query_fields([(MASK, MASK)]))
    assert isinstance(fields, list)
    with caplog.at_level(logging.WARNING):
        served = DcgmExposition(
            fields,
            hostname="node-1",
            counters=counters,
            xids=bool(kwargs.get("xids", True)),
            extras=bool(kwargs.get("extras", True)),
        )
    warned = [getattr(rec, "fields", "") for rec in caplog.records if rec.getMessage() == "not serving DCGM fields"]
    assert len(warned) == 1
    assert f"{record.split(',', maxsplit=1)[0]} (line 1: " in warned[0]
    assert reason in warned[0]
    assert samples(served.render(snapshot(START))) == []


def test_the_legacy_throttle_reasons_bitmask_is_read_too() -> None:
    legacy = "clocks_throttle_reasons.active"
    fields = query_fields([(legacy, legacy)])
    served = exposition("DCGM_EXP_CLOCK_EVENTS_COUNT", fields=fields)
    row = gpu_row(fields, **IDENTITY, clocks_throttle_reasons_active="0x0000000000000008")
    text = served.render(Snapshot(Attempt(Readings(GpuTable((row,)), None, "12.2"), 0, 0.1, START), 0, START))
    assert 'clock_event="hw_slowdown"' in text


def test_dcgm_exporters_window_options_reach_the_served_families(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(
        "DCGM_EXP_XID_ERRORS_COUNT, gauge, xids\nDCGM_EXP_CLOCK_EVENTS_COUNT, gauge, clock events\n", encoding="utf-8"
    )
    config = parse_args(["-f", str(counters), "-x", "60000", "--clock-events-count-window-size=0x3e8"], {}).config
    backend = cast("Backend", SimpleNamespace(fields=query_fields([(MASK, MASK)])))
    served = dcgm_exposition(config, backend, dcgm_counters(config))
    assert served is not None
    text = served.render(snapshot(START, "0x0000000000000004"))
    hostname = node_hostname(os.environ)
    assert f'{LABELS.replace("node-1", hostname)},window_size_in_ms="60000"}} 0' in text
    assert 'clock_event="power_cap",window_size_in_ms="1000"} 1' in text
