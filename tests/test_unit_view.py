"""The live view's document (``web/view.py``) and page (``web/landing.py``), in-process.

The document must match the JSON Schema shipped beside the module (docs/view.md), stay bounded whatever a
GPU or process reports, and every reported text must reach the page HTML-escaped.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import jsonschema
import pytest

from nvidia_gpu_exporter.history import POINTS_PER_GPU, History
from nvidia_gpu_exporter.model.kubernetes import GpuPod, KubernetesAttribution, ProcessPod
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    MigDevice,
    NvmlExtras,
    ProcessList,
    ProcessRow,
    QueryField,
    Readings,
    Snapshot,
    XidRecord,
)
from nvidia_gpu_exporter.model.verdicts import REASONS, REASONS_BY_NAME, Finding, GpuVerdict, State, SubsystemVerdict
from nvidia_gpu_exporter.web.landing import landing_page, sparkline
from nvidia_gpu_exporter.web.settings import WebSettings
from nvidia_gpu_exporter.web.view import MAX_GPUS, MAX_ROWS, MAX_TEXT, build_document

SCHEMA: dict[str, Any] = json.loads(
    (resources.files("nvidia_gpu_exporter.web") / "view.schema.json").read_text(encoding="utf-8")
)
SETTINGS = WebSettings("/metrics", 0, 0.5, 60.0, 5.0, 0.0, False)
HOSTILE = "<script>alert(1)</script>&\"'"
FIELDS = tuple(
    QueryField(name, name)
    for name in (
        "index",
        "uuid",
        "name",
        "pci.bus_id",
        "utilization.gpu",
        "memory.used",
        "memory.total",
        "temperature.gpu",
        "power.draw",
        "clocks_event_reasons.sw_power_cap",
        "clocks_event_reasons.hw_thermal_slowdown",
    )
)


def _row(index: int, name: str = "NVIDIA H200", temperature: str = "45") -> tuple[str, ...]:
    return (str(index), f"GPU-{index:04d}", name, f"00000000:{index:02X}:00.0", "50 %", "100 MiB", "1000 MiB",
            temperature, "300.00 W", "Active", "Not Active")  # fmt: skip


def _snapshot(rows: tuple[tuple[str, ...], ...], processes: tuple[ProcessRow, ...] = (), **extra: Any) -> Snapshot:
    readings = Readings(GpuTable(rows), ProcessList(True, processes), extras=extra.pop("extras", None))
    return Snapshot(Attempt(readings, 0, 0.1, 1000.0), 0, 1000.0, 1, **extra)


def _document(snapshot: Snapshot, history: History | None = None) -> dict[str, Any]:
    series = (history or History()).series()
    return build_document(snapshot, FIELDS, series, poll_seconds=5.0, points_per_gpu=POINTS_PER_GPU, now=1001.0)


def _valid(document: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(json.dumps(document)))


# -- the schema -------------------------------------------------------------------------------------------


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_the_schema_states_the_modules_bounds() -> None:
    gpu = SCHEMA["properties"]["gpus"]["items"]["properties"]
    assert SCHEMA["properties"]["gpus"]["maxItems"] == MAX_GPUS
    assert gpu["processes"]["maxItems"] == gpu["xids"]["maxItems"] == gpu["pods"]["maxItems"] == MAX_ROWS
    assert gpu["name"]["maxLength"] == gpu["processes"]["items"]["properties"]["name"]["maxLength"] == MAX_TEXT
    assert gpu["history"]["properties"]["t"]["maxItems"] == POINTS_PER_GPU


@pytest.mark.parametrize(
    "snapshot",
    [
        pytest.param(Snapshot(None, 0, None), id="no-collection-yet"),
        pytest.param(Snapshot(Attempt(None, 9, 0.2, 5.0, error="boom"), 1, None, 2), id="failed-collection"),
        pytest.param(_snapshot((_row(0), _row(1))), id="two-gpus"),
        pytest.param(
            _snapshot(
                (_row(0, HOSTILE),),
                (ProcessRow("GPU-0000", "17", HOSTILE, "[N/A]"), ProcessRow("GPU-0000", "18", "python", "20 MiB")),
                xids=(XidRecord("GPU-0000", 79, 2, 900.0), XidRecord("GPU-0000", 9999, 1, None)),
                extras=NvmlExtras(mig_devices=(MigDevice("GPU-0000", "MIG-abc", 2, 0, "3g.71gb"),)),
            ),
            id="processes-xids-mig",
        ),
    ],
)
def test_the_document_matches_the_schema(snapshot: Snapshot) -> None:
    _valid(_document(snapshot))


def test_the_document_with_a_full_history_matches_the_schema() -> None:
    history = History()
    snapshot = _snapshot((_row(0),))
    assert snapshot.attempt is not None
    assert snapshot.attempt.readings is not None
    for step in range(POINTS_PER_GPU + 5):
        history.append(FIELDS, snapshot.attempt.readings, float(step))
    document = _document(snapshot, history)
    _valid(document)
    assert len(document["gpus"][0]["history"]["temperature_celsius"]) == POINTS_PER_GPU


def test_a_schema_violation_is_caught() -> None:
    document = _document(_snapshot((_row(0),)))
    document["gpus"][0]["temperature_celsius"] = "hot"
    with pytest.raises(jsonschema.ValidationError):
        _valid(document)


# -- what the document says -------------------------------------------------------------------------------


def test_readings_become_numbers_and_active_reasons_a_list() -> None:
    gpu = _document(_snapshot((_row(0),)))["gpus"][0]
    assert (gpu["utilization_percent"], gpu["memory_used_mib"], gpu["power_draw_watts"]) == (50.0, 100.0, 300.0)
    assert gpu["clock_event_reasons"] == ["sw_power_cap"]
    assert gpu["fan_percent"] is None  # not queried


def test_processes_are_listed_under_their_gpu() -> None:
    processes = (ProcessRow("GPU-0001", "7", "a", "1 MiB"), ProcessRow("gpu-0000", "8", "b", "[N/A]"))
    gpus = _document(_snapshot((_row(0), _row(1)), processes))["gpus"]
    assert [process["pid"] for process in gpus[0]["processes"]] == ["8"]
    assert [process["pid"] for process in gpus[1]["processes"]] == ["7"]
    assert gpus[0]["processes"][0]["used_memory_mib"] is None


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        pytest.param((MAX_GPUS + 3, 0), (MAX_GPUS, 3, 0, 0), id="gpus-past-the-bound-are-counted"),
        pytest.param((1, MAX_ROWS + 5), (1, 0, MAX_ROWS, 5), id="processes-past-the-bound-are-counted"),
    ],
)
def test_lists_are_bounded(given: tuple[int, int], shown: tuple[int, int, int, int]) -> None:
    """given: (GPUs, processes on GPU 0); shown: (GPUs listed, omitted, GPU 0's processes listed, omitted)."""
    rows, processes = given
    process_rows = tuple(ProcessRow("GPU-0000", str(pid), "p", "1 MiB") for pid in range(processes))
    document = _document(_snapshot(tuple(_row(index) for index in range(rows)), process_rows))
    first = document["gpus"][0]
    assert (
        len(document["gpus"]),
        document["gpus_omitted"],
        len(first["processes"]),
        first["processes_omitted"],
    ) == shown
    _valid(document)


MAX_JSON_BYTES = 2 * 1024 * 1024  # docs/view.md, "Bounds"
MAX_PAGE_BYTES = 4 * 1024 * 1024


def test_the_worst_case_document_and_page_stay_within_their_stated_size() -> None:
    """Every list past its bound, every text past its length and made of ``<`` (escaping makes it 4 bytes)."""
    worst = "<" * (MAX_TEXT * 2)
    gpus = range(MAX_GPUS + 1)
    rows = tuple(
        (str(i), f"GPU-{i:04d}", worst, worst, "100 %", "1 MiB", "1 MiB", "100", "700.00 W", "Active", "Active")
        for i in gpus
    )
    many = range(MAX_ROWS + 1)
    processes = tuple(ProcessRow(f"GPU-{i:04d}", worst, worst, "1 MiB", worst, worst) for i in gpus for _ in many)
    xids = tuple(XidRecord(f"GPU-{i:04d}", xid, 10**9, 1.7e9) for i in gpus for xid in many)
    mig = tuple(MigDevice(f"GPU-{i:04d}", "MIG-" + worst, 10**6, 10**6, worst) for i in gpus for _ in many)
    findings = [Finding(reason, worst, 1.7e9, 1.7e9) for reason in REASONS]
    verdicts = tuple(verdict(f"GPU-{i:04d}", *findings) for i in gpus)
    snapshot = _snapshot(rows, processes, xids=xids, extras=NvmlExtras(mig_devices=mig), verdicts=verdicts)
    assert snapshot.attempt is not None
    assert snapshot.attempt.readings is not None
    history = History()
    for step in range(POINTS_PER_GPU):
        history.append(FIELDS, snapshot.attempt.readings, 1.7e9 + step + 0.123456)
    document = _document(snapshot, history)
    assert len(json.dumps(document, separators=(",", ":"))) <= MAX_JSON_BYTES
    assert len(landing_page(SETTINGS, document).encode("utf-8")) <= MAX_PAGE_BYTES


def verdict(uuid: str, *findings: Finding) -> GpuVerdict:
    """A GPU's verdict with these findings, each in its own subsystem."""
    parts = {reason.subsystem: SubsystemVerdict(reason.subsystem, State.OK) for reason in REASONS}
    for finding in findings:
        old = parts[finding.reason.subsystem]
        state = max(old.state, finding.reason.state)
        parts[finding.reason.subsystem] = SubsystemVerdict(old.subsystem, state, (*old.findings, finding))
    return GpuVerdict(uuid, "", tuple(parts.values()))


def test_each_gpu_shows_its_verdict_first_with_its_action_and_reasons() -> None:
    failure = Finding(REASONS_BY_NAME["remapped_rows_failure"], "remapped_rows.failure = Yes", 1000.0, 1000.0)
    snapshot = _snapshot((_row(0), _row(1)), verdicts=(verdict("GPU-0000", failure), verdict("GPU-0001")))
    document = _document(snapshot)
    _valid(document)
    sick, healthy = (gpu["health"] for gpu in document["gpus"])
    assert (sick["state"], sick["action"], healthy["state"], healthy["reasons"]) == ("failing", "replace_gpu", "ok", [])
    assert sick["reasons"][0]["evidence"] == "remapped_rows.failure = Yes"
    page = landing_page(SETTINGS, document)
    card = page[page.index('aria-label="GPU 0"') : page.index('aria-label="GPU 1"')]
    assert card.index("Health: FAILING: Drain the GPU and replace the card (RMA)") < card.index("Readings")
    assert "memory: remapped_rows_failure (failing), remapped_rows.failure = Yes" in card


def test_a_long_text_is_cut() -> None:
    long = "x" * (MAX_TEXT * 4)
    gpu = _document(_snapshot((_row(0, long),), (ProcessRow("GPU-0000", "1", long, "1 MiB"),)))["gpus"][0]
    assert len(gpu["name"]) == len(gpu["processes"][0]["name"]) == MAX_TEXT


def test_with_attribution_the_pods_and_process_pods_are_listed() -> None:
    attribution = KubernetesAttribution(
        None,
        gpu_pods=(GpuPod("0000", "", "ml", "trainer-0", "main", "nvidia.com/gpu", "GPU-0000"),),
        processes=(ProcessPod("0000", "17", pod_uid="uid-1", container_id="c-1"),),
    )
    document = _document(
        _snapshot((_row(0), _row(1)), (ProcessRow("GPU-0000", "17", "python", "1 MiB"),), kubernetes=attribution)
    )
    _valid(document)
    first, second = document["gpus"]
    assert document["attribution"] is True
    assert first["pods"] == [{"namespace": "ml", "pod": "trainer-0", "container": "main", "mig_uuid": ""}]
    assert (first["processes"][0]["pod_uid"], first["processes"][0]["container_id"]) == ("uid-1", "c-1")
    assert second["pods"] == []
    page = landing_page(SETTINGS, document)
    assert "<td>trainer-0</td>" in page
    assert "<td>uid-1</td>" in page


# -- the page -----------------------------------------------------------------------------------------------


def _page(snapshot: Snapshot) -> str:
    return landing_page(SETTINGS, _document(snapshot))


def test_hostile_names_reach_the_page_escaped() -> None:
    page = _page(_snapshot((_row(0, HOSTILE),), (ProcessRow("GPU-0000", "1", HOSTILE, "1 MiB"),)))
    assert HOSTILE not in page
    assert "<script>alert" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#x27;") == 2


@pytest.mark.parametrize(
    ("temperature", "hot"),
    [
        pytest.param("95", True, id="hot-at-95"),
        pytest.param("85", True, id="hot-at-85"),
        pytest.param("84", False, id="not-hot"),
    ],
)
def test_a_hot_gpu_is_marked(temperature: str, hot: bool) -> None:
    page = _page(_snapshot((_row(0, temperature=temperature),)))
    assert ("HOT</td>" in page) is hot


def test_the_page_has_a_table_per_gpu_with_row_headers_and_no_external_assets() -> None:
    page = _page(_snapshot((_row(0, "GPU Zero"), _row(1, "GPU One"))))
    assert "GPU 0: GPU Zero" in page
    assert "GPU 1: GPU One" in page
    assert '<th scope="row">Temperature</th>' in page
    assert '<meta name="viewport"' in page
    assert " src=" not in page  # no external script, image or frame
    assert "<link" not in page  # no external stylesheet
    assert "url(" not in page  # no CSS fetch


def test_without_a_document_the_page_keeps_the_links() -> None:
    page = landing_page(SETTINGS)
    assert 'href="/metrics"' in page
    assert 'id="view"' not in page


@pytest.mark.parametrize(
    ("points", "drawn"),
    [
        pytest.param([], 0, id="no-points-no-line"),
        pytest.param([None, None], 0, id="only-gaps-no-line"),
        pytest.param([1.0], 1, id="one-point"),
        pytest.param([1.0, None, 3.0], 2, id="gaps-are-skipped"),
    ],
)
def test_sparkline_draws_one_vertex_per_point(points: list[float | None], drawn: int) -> None:
    svg = sparkline(points, "Utilization")
    if drawn == 0:
        assert "polyline" not in svg
        assert "no points" in svg
    else:
        vertices = svg.split('points="')[1].split('"')[0].split()
        assert len(vertices) == drawn


# -- accessibility: the colours the stylesheet promises (docs/view.md) ---------------------------------------


def _luminance(colour: str) -> float:
    channels = [int(colour[index : index + 2], 16) / 255 for index in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(one: str, other: str) -> float:
    high, low = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _schemes() -> list[dict[str, str]]:
    style = (resources.files("nvidia_gpu_exporter.web") / "assets" / "view.css").read_text(encoding="utf-8")
    blocks = re.findall(r":root\s*\{([^}]*)\}", style)
    return [dict(re.findall(r"--([a-z]+):\s*(#[0-9a-fA-F]{6})", block)) for block in blocks]


@pytest.mark.parametrize("scheme", [pytest.param(0, id="light"), pytest.param(1, id="dark")])
@pytest.mark.parametrize("colour", ["fg", "mute", "hot", "warn", "ok", "accent"])
def test_text_colours_meet_wcag_aa_contrast(scheme: int, colour: str) -> None:
    schemes = _schemes()
    assert len(schemes) == 2
    palette = schemes[scheme]
    assert _contrast(palette[colour], palette["bg"]) >= 4.5
