"""Property tests: parsers never raise outside their documented errors; every rendering is valid exposition, and
the metrics route answers 200 with it whatever bytes a backend returns."""

from __future__ import annotations

import asyncio
import math
import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from exposition_reader import parse, parse_openmetrics
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.backends.exec.command import CommandSplitError, split_command
from nvidia_gpu_exporter.backends.exec.output import (
    CsvShapeError,
    parse_compute_apps,
    parse_cuda_version,
    parse_gpu_csv,
    parse_help_query_gpu,
)
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.naming import derive_name
from nvidia_gpu_exporter.exposition.text import DuplicateSeriesError, encode
from nvidia_gpu_exporter.httpserver.http import make_request
from nvidia_gpu_exporter.model.fields import ValueKind
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
from nvidia_gpu_exporter.model.values import transform_value
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from unit_helpers import query_fields

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text biased towards the characters that matter to these parsers.
_SPECIAL = st.sampled_from([*",\"'\\\n\r\t :.[]{}-+0x0X1e5%", "GPU-", "MiB", "[N/A]", "\x1c", "\xa0", "é", "✓"])
tricky_text = st.lists(st.one_of(_SPECIAL, st.text(max_size=4)), max_size=25).map("".join)


@FAST
@given(tricky_text, st.integers(min_value=0, max_value=6))
def test_parse_gpu_csv_only_raises_csv_shape_error(text: str, field_count: int) -> None:
    try:
        csv = parse_gpu_csv(text, field_count)
    except CsvShapeError:
        return
    assert len(csv.header) == field_count
    assert all(len(row) == field_count for row in csv.rows)


@FAST
@given(tricky_text)
def test_parse_compute_apps_only_raises_csv_shape_error(text: str) -> None:
    try:
        rows = parse_compute_apps(text)
    except CsvShapeError:
        return
    for row in rows:
        assert row.pid.isascii()
        assert row.pid.isdigit()
        assert row.gpu_uuid


@FAST
@given(st.lists(st.one_of(tricky_text, st.sampled_from(['\n\n"', '"\n', '" or "'])), max_size=10).map("".join))
def test_parse_help_query_gpu_never_raises(text: str) -> None:
    for name in parse_help_query_gpu(text):
        assert name
        assert not set(name) & {",", "\r", "\n", '"'}


@FAST
@given(
    st.lists(
        st.one_of(tricky_text, st.sampled_from(["CUDA Version", "CUDA UMD version", " : ", "12.2"])), max_size=8
    ).map("".join)
)
def test_parse_cuda_version_never_raises(text: str) -> None:
    version = parse_cuda_version(text)
    assert version == "" or re.fullmatch(r"[0-9]+\.[0-9]+", version)


@FAST
@given(
    tricky_text,
    st.sampled_from(list(ValueKind)),
    st.sampled_from([1.0, 0.01, 1e6, 1048576.0, 1e-6, 0.001]),
)
def test_transform_value_never_raises(raw: str, kind: ValueKind, multiplier: float) -> None:
    value = transform_value(raw, kind, multiplier, kind.value)
    assert value is None or math.isfinite(value)


@FAST
@given(tricky_text)
def test_derive_name_never_raises(rfield: str) -> None:
    derived = derive_name(rfield)
    assert derived.name == "" or re.fullmatch(r"nvidia_smi_[a-zA-Z0-9_:]+", derived.name)


@FAST
@given(tricky_text)
def test_split_command_only_raises_command_split_error(command: str) -> None:
    try:
        words = split_command(command)
    except CommandSplitError:
        return
    assert words
    assert words[0]


# -- rendering arbitrary tables ----------------------------------------------------------------------------------

cell_text = st.one_of(
    st.sampled_from(["38 %", "0x1F", "[N/A]", "Enabled", "P8", "1e5", "8192 MiB", "", "Completed", "reboot"]),
    st.text(alphabet=st.sampled_from(list('"\\\n ab,é✓0123.-x{}=')), max_size=12),
)
rfield_text = st.one_of(
    st.sampled_from(["fan.speed [%]", "memory.used [MiB]", "power.draw [W]", "pstate", "gpu_info", "a.b", "a_b"]),
    st.text(alphabet=st.sampled_from(list('ab.C [%]"\\\n:_-é')), min_size=1, max_size=10),
)
qfield_text = st.one_of(
    st.sampled_from(["fabric.state", "gpu_recovery_action", "x.y", "z"]),
    st.text(alphabet=st.sampled_from(list("abc._")), min_size=1, max_size=6),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[QueryField], Snapshot, bool]:
    extra = draw(st.lists(st.tuples(qfield_text, rfield_text), max_size=4, unique_by=lambda pair: pair[0]))
    fields = query_fields([pair for pair in extra if pair[0] not in ("uuid", "name", "index")])
    gpu_count = draw(st.integers(min_value=0, max_value=3))
    rows = []
    uuids = draw(
        st.lists(
            st.one_of(st.sampled_from(["GPU-A", "gpu-b", "GPU-C"]), st.text(alphabet='GPUabc-"\\\n é', max_size=6)),
            min_size=gpu_count,
            max_size=gpu_count,
        )
    )
    for uuid in uuids:
        row = [draw(cell_text) for _ in fields]
        row[[field.qfield for field in fields].index("uuid")] = uuid
        rows.append(tuple(row))
    process_list: ProcessList | None = None
    mode = draw(st.sampled_from(["off", "failed", "ok"]))
    mig = draw(st.booleans())
    if mode == "failed":
        process_list = ProcessList(False)
    elif mode == "ok":
        process_rows = draw(
            st.lists(
                st.builds(
                    ProcessRow,
                    gpu_uuid=st.one_of(st.sampled_from(uuids or ["GPU-Z"]), st.text(max_size=4)),
                    pid=st.integers(min_value=0, max_value=99999).map(str),
                    process_name=cell_text,
                    used_memory=st.sampled_from(["1 MiB", "[N/A]", "", "0x10", "Enabled", "x"]),
                    gpu_instance_id=st.sampled_from(["", "1"]),
                    compute_instance_id=st.sampled_from(["", "0"]),
                ),
                max_size=4,
            )
        )
        process_list = ProcessList(True, tuple(process_rows))
    cuda = draw(st.sampled_from(["", "12.2"]))
    readings = Readings(GpuTable(tuple(rows)), process_list, cuda)
    attempt = draw(
        st.sampled_from([None, Attempt(None, 7, 0.5, 1.0, error="x"), Attempt(readings, 0, 0.125, 1751475457.5)])
    )
    failed = draw(st.integers(min_value=0, max_value=5))
    last_success = draw(st.sampled_from([None, 1751475457.75]))
    return fields, Snapshot(attempt, failed, last_success), mig


def _sample_key(labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(labels[name] for name in sorted(labels))


@SLOW
@given(scenarios(), st.sampled_from(list(StatusFamily)))
def test_render_is_valid_exposition(scenario: tuple[list[QueryField], Snapshot, bool], status: StatusFamily) -> None:
    fields, snapshot, mig = scenario
    expo = Exposition(fields, status, mig_process_labels=mig)
    try:
        text = expo.render(snapshot)
    except DuplicateSeriesError:
        assume(False)
        return
    assert text.endswith("\n")
    assert "\n\n" not in text
    lines = text.split("\n")[:-1]
    help_names = [line.split(" ")[2] for line in lines if line.startswith("# HELP ")]
    assert help_names == sorted(help_names)
    assert len(set(help_names)) == len(help_names)
    for line in lines:
        assert line.startswith(("# HELP nvidia_smi_", "# TYPE nvidia_smi_", "nvidia_smi_"))
    sample_count = sum(1 for line in lines if not line.startswith("#"))

    parsed = parse(text)
    assert sum(len(family.samples) for family in parsed) == sample_count
    for family in parsed:
        keys = [_sample_key(sample.labels) for sample in family.samples]
        assert keys == sorted(keys)
        assert len(set(keys)) == len(keys)
    # health families are always present
    assert "nvidia_smi_failed_scrapes_total " in text
    assert "nvidia_smi_last_collect_success " in text


@SLOW
@given(st.lists(cell_text, min_size=1, max_size=4, unique=True))
def test_process_names_round_trip_through_the_parser(names: list[str]) -> None:
    fields = query_fields()
    row = tuple("GPU-A" if field.qfield == "uuid" else "0" for field in fields)
    rows = tuple(ProcessRow("GPU-A", str(pid), name, "1 MiB") for pid, name in enumerate(names))
    snapshot = Snapshot(Attempt(Readings(GpuTable((row,)), ProcessList(True, rows)), 0, 0.1, 1.0), 0, 1.0)
    text = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).render(snapshot)
    parsed = {family.name: family for family in parse(text)}
    got = {
        sample.labels["pid"]: sample.labels["process_name"] for sample in parsed["nvidia_smi_compute_app_info"].samples
    }
    assert got == {str(pid): name for pid, name in enumerate(names)}


# Any bytes a driver (or a wrapper around nvidia-smi) prints, as the exec runner decodes them; cells also take
# values that do parse, so the families those bytes head are rendered.
raw_text = st.binary(max_size=12).map(lambda data: data.decode("utf-8", "surrogateescape"))
raw_cell = st.one_of(raw_text, st.sampled_from(["1", "42 %", "0x1f", "Enabled", "7.5 W"]))


@SLOW
@given(
    st.lists(raw_text, min_size=1, max_size=3),
    st.lists(st.lists(raw_cell, min_size=3, max_size=3), max_size=3),
    st.lists(st.tuples(raw_text, raw_text, raw_cell), max_size=3),
)
def test_no_bytes_in_cells_headers_or_processes_fail_a_scrape(
    headers: list[str], rows: list[list[str]], process_cells: list[tuple[str, str, str]]
) -> None:
    """Whatever bytes nvidia-smi prints in a header, a cell or a process row, the scrape renders and encodes
    (only two series with the same labels fail it, as in the Go exporter), and the text parses."""
    extra = [(f"field.{position}", header) for position, header in enumerate(headers)]
    fields = query_fields(extra)
    table = []
    for cells in rows:
        row = [cells[position % len(cells)] for position in range(len(fields))]
        table.append(tuple(row))
    rows_of_processes = tuple(ProcessRow(uuid, "1", name, memory) for uuid, name, memory in process_cells)
    readings = Readings(GpuTable(tuple(table)), ProcessList(True, rows_of_processes), "12.2")
    snapshot = Snapshot(Attempt(readings, 0, 0.125, 1751475457.5), 0, 1751475457.5)
    try:
        text = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE).render(snapshot)
    except DuplicateSeriesError:
        assume(False)
        return
    body = encode(text)
    assert body.endswith(b"\n")
    parse(body.decode("utf-8", "replace"))


OPENMETRICS_ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"


async def _serve_once(fields: list[QueryField], readings: Readings) -> list[tuple[int, str, bytes]]:
    """One text and one OpenMetrics scrape of ``readings`` through the metrics route's real handler."""
    collector = Collector(FakeBackend(fields=fields, readings=readings), timeout_seconds=None)
    settings = web_settings(Config(enable_openmetrics=True))
    endpoint = MetricsEndpoint(collector, Exposition(fields, StatusFamily.COMMAND_EXIT_CODE), settings)
    answers = []
    try:
        for accept in ("", OPENMETRICS_ACCEPT):
            response = await endpoint.handle(make_request("GET", "/metrics", headers={"Accept": accept}))
            answers.append((response.status, response.content_type, response.joined()))
    finally:
        await collector.aclose()
    return answers


@SLOW
@given(
    st.lists(raw_text, min_size=1, max_size=3),
    st.lists(st.lists(raw_cell, min_size=3, max_size=3), max_size=3),
    st.lists(st.tuples(raw_text, raw_text, raw_text, raw_cell), max_size=3),
)
def test_the_metrics_route_answers_200_whatever_bytes_a_backend_returns(
    headers: list[str], rows: list[list[str]], process_cells: list[tuple[str, str, str, str]]
) -> None:
    """Bytes in any returned header, cell or process field reach the HTTP answer as a 200 with a valid text
    and a valid OpenMetrics body; only the documented duplicate-series rule may answer 500."""
    fields = query_fields([(f"field.{position}", header) for position, header in enumerate(headers)])
    table = tuple(tuple(cells[position % len(cells)] for position in range(len(fields))) for cells in rows)
    processes = tuple(ProcessRow(uuid, pid, name, memory) for uuid, pid, name, memory in process_cells)
    readings = Readings(GpuTable(table), ProcessList(True, processes), "12.2")
    answers = asyncio.run(_serve_once(fields, readings))
    if any(status == 500 for status, _, _ in answers):
        for status, _, body in answers:
            assert status == 500
            assert b"was collected before with the same name and label values" in body
        assume(False)
    (text_status, text_type, text_body), (om_status, om_type, om_body) = answers
    assert (text_status, text_type, om_status, om_type) == (200, "text/plain", 200, "application/openmetrics-text")
    parse(text_body.decode("utf-8", "replace"))
    parse_openmetrics(om_body.decode("utf-8", "replace"))
