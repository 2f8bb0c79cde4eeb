"""The fake nvidia-smi's answering engine (docs/fake-nvidia-smi.md, "Answering"): projection, replay,
replication, overrides, ranges and fluctuation, driven in-process through :func:`engine.answer`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.capture import engine
from nvidia_gpu_exporter.capture.engine import (
    Answer,
    Fixed,
    Generator,
    GpuEntry,
    Range,
    Scenario,
    ScenarioError,
    answer,
    generated_uuid,
)
from nvidia_gpu_exporter.capture.format import Capture, Section, load_capture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"
LINUX = load_capture(FIXTURES / "fixture-linux-2gpu-mig.txt")
WINDOWS = load_capture(FIXTURES / "fixture-windows-1gpu.txt")
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
LINUX_U0 = "GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37"
LINUX_U1 = "GPU-8d42e1b5-0c9f-4a73-b2e6-5f17c3d9a804"
WINDOWS_UUID = "GPU-5b0d7e19-a4c3-4f26-8e91-3c7a2f6d0e48"


def query(scenario: Scenario, fields: str) -> Answer:
    return answer(scenario, [f"--query-gpu={fields}", "--format=csv"])


def rows(result: Answer) -> list[list[str]]:
    """Data rows of a successful CSV answer, split into cells (header dropped)."""
    assert result.exit_code == 0, result
    assert result.stdout.endswith("\n")
    return [line.split(", ") for line in result.stdout[:-1].split("\n")[1:]]


def column(result: Answer, index: int = 0) -> list[str]:
    return [row[index] for row in rows(result)]


def csv_capture(columns: Sequence[tuple[str, str, str]], state: str = "idle") -> Capture:
    """A one-GPU capture whose query-gpu section records ``(field, header cell, data cell)`` columns."""
    command = "nvidia-smi --query-gpu=" + ",".join(c[0] for c in columns) + " --format=csv"
    body = ", ".join(c[1] for c in columns) + "\n" + ", ".join(c[2] for c in columns)
    return Capture("inline", "", (Section(state, "query-gpu (csv, test)", command, body),))


def section_capture(*sections: Section) -> Capture:
    return Capture("inline", "", sections)


# ----------------------------------------------------------------------------------------------
# CSV projection


def test_projection_returns_requested_columns_in_requested_order() -> None:
    result = query(Scenario(LINUX), "temperature.gpu,uuid,memory.used")
    assert result == Answer(
        "temperature.gpu, uuid, memory.used [MiB]\n31, " + LINUX_U0 + ", 37 MiB\n29, " + LINUX_U1 + ", 4 MiB\n",
        "",
        0,
    )


@pytest.mark.parametrize(
    ("fields", "expected_header"),
    [
        (" uuid , index ", "uuid, index"),
        ("index,index", "index, index"),
        ("fan.speed", "fan.speed [%]"),
    ],
    ids=["requested-names-are-trimmed", "repeated-field-repeats-column", "header-keeps-unit"],
)
def test_projection_header(fields: str, expected_header: str) -> None:
    result = query(Scenario(LINUX), fields)
    assert result.exit_code == 0
    assert result.stdout.split("\n")[0] == expected_header


def test_projection_uses_the_selected_state() -> None:
    assert column(query(Scenario(LINUX, state="load"), "memory.used")) == ["30412 MiB", "4 MiB"]


def test_projection_trims_recorded_cells() -> None:
    capture = csv_capture([("name", "  name ", "  Padded GPU\t"), ("index", "index", " 0 ")])
    assert query(Scenario(capture), "name,index").stdout == "name, index\nPadded GPU, 0\n"


@pytest.mark.parametrize(
    ("capture", "state", "expected"),
    [
        (
            LINUX,
            "load",
            ["41872, python3 train.py --layers=4,8, [N/A]", "41903, /opt/serving/bin/infer-server, [N/A]"],
        ),
        (
            WINDOWS,
            "idle",
            ["1432, C:\\Windows\\System32\\dwm.exe, [N/A]", "6120, C:\\Windows\\explorer.exe, [N/A]"],
        ),
    ],
    ids=["comma-in-process-name-stays-one-cell", "windows-backslash-names-and-na-memory"],
)
def test_compute_apps_projection(capture: Capture, state: str, expected: list[str]) -> None:
    result = answer(
        Scenario(capture, state=state),
        ["--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv"],
    )
    lines = result.stdout.split("\n")
    assert lines[0] == "pid, process_name, used_gpu_memory [MiB]"
    assert lines[1:3] == expected


def test_compute_apps_header_only_section_answers_header_only() -> None:
    capture = section_capture(
        Section(
            "idle",
            "query-compute-apps (per-process)",
            "nvidia-smi --query-compute-apps=gpu_uuid,pid --format=csv",
            "gpu_uuid, pid",
        )
    )
    assert answer(Scenario(capture), ["--query-compute-apps=pid", "--format=csv"]) == Answer("pid\n", "", 0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("bogus", 'Field "bogus" is not a valid field to query.'),
        ("uuid, bogus ", 'Field " bogus " is not a valid field to query.'),
        ('a"b\\c', 'Field "a\\"b\\\\c" is not a valid field to query.'),
        ("tab\there", 'Field "tab\\there" is not a valid field to query.'),
        ("", 'Field "" is not a valid field to query.'),
        ("uuid,,name", 'Field "" is not a valid field to query.'),
        ("uuid,nope,name", 'Field "nope" is not a valid field to query.'),
        ("clocks.gr", 'Field "clocks.gr" is not a valid field to query.'),
    ],
    ids=[
        "unknown",
        "untrimmed-name-quoted",
        "go-quote-escapes",
        "go-quote-tab",
        "empty",
        "empty-middle",
        "first-unknown-reported",
        "alias-not-recorded",
    ],
)
def test_unknown_field_is_rejected_on_stdout_with_exit_1(fields: str, message: str) -> None:
    assert query(Scenario(LINUX), fields) == Answer(message + "\n", "", 1)


@pytest.mark.parametrize(
    "args",
    [
        ["--query-gpu=uuid", "--format=csv,noheader"],
        ["--query-gpu=uuid", "--format=csv", "-i", "0"],
        ["--query-gpu=uuid"],
        ["--format=csv", "--query-gpu=uuid"],
    ],
    ids=["other-format", "extra-args", "no-format", "swapped-order"],
)
def test_only_the_exact_two_arg_form_is_a_csv_query(args: list[str]) -> None:
    result = answer(Scenario(LINUX), args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "capture has no section recorded for" in result.stderr


@pytest.mark.parametrize(
    ("command", "body", "message"),
    [
        (
            "nvidia-smi --query-gpu=uuid,,name --format=csv",
            "uuid, , name\na, b, c",
            "has an empty field name",
        ),
        ("nvidia-smi --format=csv", "uuid\na", "no field list found in recorded command"),
        (
            "nvidia-smi --query-gpu=uuid,name --format=csv",
            "uuid, name\nonly-one",
            "row 2: expected 2 cells, got 1",
        ),
        (
            "nvidia-smi --query-gpu=uuid,name --format=csv",
            "uuid, name\na, b, c",
            "row 2: expected 2 cells, got 3",
        ),
        ("nvidia-smi --query-gpu=uuid,name --format=csv", "uuid\na, b", "row 1: expected 2 cells, got 1"),
        ("nvidia-smi --query-gpu=uuid --format=csv", "", "section body has no header row"),
    ],
    ids=[
        "empty-recorded-field",
        "no-recorded-field-list",
        "row-too-short",
        "row-too-long-without-free-text",
        "header-mismatch",
        "empty-body",
    ],
)
def test_unprojectable_section_is_rejected_with_exit_1(command: str, body: str, message: str) -> None:
    capture = section_capture(Section("idle", "query-gpu (csv)", command, body))
    result = query(Scenario(capture), "uuid")
    assert result.exit_code == 1
    assert result.stderr == ""
    assert message in result.stdout


def test_free_text_column_absorbs_only_data_row_commas() -> None:
    capture = section_capture(
        Section(
            "idle",
            "query-compute-apps (per-process)",
            "nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory --format=csv",
            "pid, process_name, used_gpu_memory [MiB]\n7, a, b ,c, 5 MiB",
        )
    )
    result = answer(Scenario(capture), ["--query-compute-apps=process_name,used_gpu_memory", "--format=csv"])
    assert result.stdout.split("\n")[1] == "a, b ,c, 5 MiB"


@pytest.mark.parametrize(
    ("state", "args", "message"),
    [
        (
            "bogus",
            ["--query-gpu=uuid", "--format=csv"],
            'capture has no "query-gpu (csv" section for state "bogus"',
        ),
        (
            "bogus",
            [APPS_QUERY, "--format=csv"],
            'capture has no "query-compute-apps" section for state "bogus"',
        ),
    ],
    ids=["gpu-query", "compute-apps-query"],
)
def test_missing_query_section_is_a_fake_level_error(state: str, args: list[str], message: str) -> None:
    assert answer(Scenario(LINUX, state=state), args) == Answer("", f"fake-nvidia-smi: {message}\n", 2)


# ----------------------------------------------------------------------------------------------
# Verbatim replay


@pytest.mark.parametrize(
    ("capture", "state", "args", "label"),
    [
        (LINUX, "idle", ["--version"], "version"),
        (LINUX, "load", ["--help-query-gpu"], "help-query-gpu"),
        (LINUX, "idle", ["-L"], "list (-L)"),
        (LINUX, "idle", [], "nvidia-smi (default table)"),
        (WINDOWS, "load", ["--version"], "version"),
    ],
    ids=["version", "capabilities-from-any-state", "list", "bare-command-default-table", "crlf-capture"],
)
def test_verbatim_replay_serves_the_recorded_body(capture: Capture, state: str, args: list[str], label: str) -> None:
    section = capture.find(state, label) or capture.find("capabilities", label)
    assert section is not None
    assert answer(Scenario(capture, state=state), args) == Answer(section.body + "\n", "", 0)


def test_verbatim_replay_picks_the_selected_state() -> None:
    idle = answer(Scenario(LINUX, state="idle"), []).stdout
    load = answer(Scenario(LINUX, state="load"), []).stdout
    assert "09:26:55" in idle
    assert "09:27:41" in load


def test_verbatim_replay_collapses_recorded_whitespace() -> None:
    capture = section_capture(Section("capabilities", "topo -m", "nvidia-smi   topo \t -m", "matrix"))
    assert answer(Scenario(capture), ["topo", "-m"]) == Answer("matrix\n", "", 0)


@pytest.mark.parametrize(
    ("capture", "args", "state"),
    [
        (LINUX, ["topo", "-m"], "idle"),
        (section_capture(Section("capabilities", "derived list", "", "a\nb")), [], "idle"),
        (section_capture(Section("load", "query (-q)", "nvidia-smi -q", "q")), ["-q"], "idle"),
        (
            section_capture(Section("capabilities", "topo -m", "nvidia-smi topo -m", "m")),
            ["topo  -m"],
            "idle",
        ),
    ],
    ids=["not-recorded", "derived-section-without-command", "other-state", "args-are-not-collapsed"],
)
def test_verbatim_no_match_is_exit_2(capture: Capture, args: list[str], state: str) -> None:
    result = answer(Scenario(capture, state=state), args)
    recorded = go_quote(" ".join(args))
    expected = f'fake-nvidia-smi: capture has no section recorded for {recorded} in state "{state}"\n'
    assert result == Answer("", expected, 2)


# ----------------------------------------------------------------------------------------------
# Replication and identity


@pytest.mark.parametrize(
    ("index", "uuid"),
    [(0, "GPU-1c67088e-9ecb-4564-bb97-6151ecc2ef64"), (1, "GPU-ef427e4f-1970-42f2-ab0c-ecf0e56a33b9")],
    ids=["gpu0", "gpu1"],
)
def test_generated_uuid_matches_the_go_recipe(index: int, uuid: str) -> None:
    assert generated_uuid(index) == uuid


def test_replication_writes_identity_columns() -> None:
    result = query(Scenario(WINDOWS, gpus=3, seed=1), "uuid,serial,index,pci.bus_id,name")
    assert rows(result) == [
        [generated_uuid(0), "[N/A]", "0", "00000000:01:00.0", "NVIDIA GeForce RTX 3060"],
        [generated_uuid(1), "[N/A]", "1", "00000000:02:00.0", "NVIDIA GeForce RTX 3060"],
        [generated_uuid(2), "[N/A]", "2", "00000000:03:00.0", "NVIDIA GeForce RTX 3060"],
    ]


def test_replication_is_independent_of_the_seed() -> None:
    first = query(Scenario(WINDOWS, gpus=2, seed=1), "uuid")
    second = query(Scenario(WINDOWS, gpus=2, seed=99), "uuid")
    assert first == second


def test_replication_entries_give_explicit_identity() -> None:
    gpus = (GpuEntry(uuid="GPU-custom-0", serial="SER0"), GpuEntry())
    assert rows(query(Scenario(WINDOWS, gpus=gpus), "uuid,serial")) == [
        ["GPU-custom-0", "SER0"],
        [generated_uuid(1), "[N/A]"],
    ]


def test_replication_rewrites_count_pci_bus_and_unrecognized_bus_id() -> None:
    capture = csv_capture(
        [
            ("count", "count", "1"),
            ("pci.bus", "pci.bus", "0x2B"),
            ("pci.bus_id", "pci.bus_id", "weird"),
            ("uuid", "uuid", "GPU-x"),
        ]
    )
    assert rows(query(Scenario(capture, gpus=2), "count,pci.bus,pci.bus_id")) == [
        ["2", "0x01", "00000000:01:00.0"],
        ["2", "0x02", "00000000:02:00.0"],
    ]


def test_replication_keeps_bus_id_domain_device_and_function() -> None:
    capture = csv_capture([("pci.bus_id", "pci.bus_id", "00000001:2B:1F.3")])
    assert column(query(Scenario(capture, gpus=2), "pci.bus_id")) == ["00000001:01:1F.3", "00000001:02:1F.3"]


def test_replication_repeats_compute_apps_per_gpu() -> None:
    result = answer(Scenario(WINDOWS, gpus=2), ["--query-compute-apps=gpu_uuid,pid", "--format=csv"])
    pids = ["1432", "6120", "9904"]
    assert rows(result) == [[generated_uuid(0), pid] for pid in pids] + [[generated_uuid(1), pid] for pid in pids]


@pytest.mark.parametrize(
    "args", [["--query-gpu=uuid", "--format=csv"], [APPS_QUERY, "--format=csv"]], ids=["gpu", "apps"]
)
def test_replication_refuses_a_multi_gpu_capture(args: list[str]) -> None:
    result = answer(Scenario(LINUX, gpus=2), args)
    assert result == Answer(
        "",
        "fake-nvidia-smi: gpus needs a single-GPU capture, "
        'but the query-gpu section for state "idle" has 2 data rows\n',
        2,
    )


def test_replication_does_not_touch_verbatim_replay() -> None:
    assert answer(Scenario(LINUX, gpus=2), ["-L"]).exit_code == 0


@pytest.mark.parametrize(
    ("overrides", "gpus", "message"),
    [
        ({}, 0, "gpu count must be between 1 and 255, got 0"),
        ({}, 256, "gpu count must be between 1 and 255, got 256"),
        ({}, (), "gpu count must be between 1 and 255, got 0"),
        ({"uuid": Fixed("x")}, 2, 'field "uuid" is a per-GPU identity'),
        ({"pci.bus_id": Range(1, 2)}, 1, 'field "pci.bus_id" is a per-GPU identity'),
        ({}, (GpuEntry(overrides={"gpu_serial": Fixed("s")}),), 'field "gpu_serial" is a per-GPU identity'),
        ({}, (GpuEntry(uuid="GPU-ABC"), GpuEntry(uuid=" abc")), 'gpus 0 and 1 share uuid " abc"'),
        ({}, (GpuEntry(), GpuEntry(uuid=generated_uuid(0).lower())), "gpus 0 and 1 share uuid"),
        ({}, (GpuEntry(uuid="a,b"),), 'value for "uuid" must not contain a comma or newline'),
        ({}, (GpuEntry(serial="x\ny"),), 'value for "serial" must not contain a comma or newline'),
        ({"t": Fixed("1,2")}, None, 'value for "t" must not contain a comma or newline'),
        ({"t": Fixed("1\r")}, None, 'value for "t" must not contain a comma or newline'),
        ({"t": Range(5, 1)}, None, 'range for "t" has min 5 greater than max 1'),
        ({"t": Range(float("nan"), 1)}, None, 'range for "t" must have finite bounds'),
        ({"t": Range(0, float("inf"))}, None, 'range for "t" must have finite bounds'),
        ({"": Fixed("1")}, None, "override field name must be a non-empty string"),
    ],
    ids=[
        "zero-gpus",
        "too-many-gpus",
        "empty-entry-list",
        "identity-override",
        "identity-range",
        "identity-in-entry",
        "duplicate-uuid-after-normalization",
        "explicit-equals-generated",
        "uuid-with-comma",
        "serial-with-newline",
        "value-with-comma",
        "value-with-cr",
        "range-min-above-max",
        "range-nan",
        "range-inf",
        "empty-field-name",
    ],
)
def test_invalid_scenario_is_refused(overrides: dict[str, Generator], gpus: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        Scenario(WINDOWS, overrides=overrides, gpus=gpus)  # type: ignore[arg-type]


def test_identity_fields_are_overridable_without_replication() -> None:
    assert column(query(Scenario(WINDOWS, overrides={"uuid": Fixed("GPU-set")}), "uuid")) == ["GPU-set"]


# ----------------------------------------------------------------------------------------------
# Overrides


def test_fixed_override_replaces_data_cells_but_not_the_header() -> None:
    result = query(Scenario(LINUX, overrides={"temperature.gpu": Fixed("95")}), "temperature.gpu,index")
    assert result.stdout == "temperature.gpu, index\n95, 0\n95, 1\n"


def test_override_of_unrecorded_field_is_ignored() -> None:
    plain = query(Scenario(LINUX), "uuid,temperature.gpu")
    assert query(Scenario(LINUX, overrides={"not.recorded": Fixed("1")}), "uuid,temperature.gpu") == plain


def test_empty_override_value_is_served() -> None:
    assert column(query(Scenario(WINDOWS, overrides={"pstate": Fixed("")}), "pstate")) == [""]


def test_override_applies_to_compute_apps_rows() -> None:
    scenario = Scenario(WINDOWS, overrides={"used_gpu_memory": Fixed("64 MiB")})
    result = answer(scenario, [APPS_QUERY, "--format=csv"])
    assert column(result, 3) == ["64 MiB"] * 3


def test_per_gpu_entry_beats_top_level_override() -> None:
    scenario = Scenario(
        WINDOWS,
        overrides={"temperature.gpu": Fixed("50"), "pstate": Fixed("P5")},
        gpus=(GpuEntry(), GpuEntry(overrides={"temperature.gpu": Fixed("60")})),
    )
    assert rows(query(scenario, "temperature.gpu,pstate")) == [["50", "P5"], ["60", "P5"]]


def test_range_values_stay_within_bounds_and_are_integral_for_integral_bounds() -> None:
    scenario = Scenario(WINDOWS, overrides={"temperature.gpu": Range(90, 95)}, gpus=50, seed=7)
    values = column(query(scenario, "temperature.gpu"))
    assert all(re.fullmatch(r"9[0-5]", value) for value in values), values
    assert len(set(values)) > 1


def test_range_with_fractional_bounds_prints_plain_decimals() -> None:
    scenario = Scenario(WINDOWS, overrides={"power.draw": Range(0.5, 0.50001)}, gpus=20, seed=3)
    for value in column(query(scenario, "power.draw")):
        assert re.fullmatch(r"0\.5[0-9]*", value), value
        assert 0.5 <= float(value) <= 0.50001


def test_tiny_range_never_uses_exponent_form() -> None:
    scenario = Scenario(WINDOWS, overrides={"power.draw": Range(1e-9, 2e-9)}, seed=1)
    (value,) = column(query(scenario, "power.draw"))
    assert "e" not in value.lower()
    assert value.startswith("0.00000000")
    assert 1e-9 <= float(value) <= 2e-9


def test_ranges_are_deterministic_for_a_seed_and_differ_between_seeds() -> None:
    def draw(seed: int) -> list[str]:
        return column(
            query(Scenario(WINDOWS, overrides={"power.draw": Range(0, 1000)}, gpus=5, seed=seed), "power.draw")
        )

    assert draw(42) == draw(42)
    assert draw(42) != draw(43)


def test_range_without_seed_differs_between_calls() -> None:
    scenario = Scenario(WINDOWS, overrides={"power.draw": Range(0, 1e12)})
    assert query(scenario, "power.draw") != query(scenario, "power.draw")


def test_per_gpu_range_is_seeded_in_its_own_scope() -> None:
    spec = Range(0, 1e9)
    top = Scenario(WINDOWS, overrides={"power.draw": spec}, gpus=1, seed=5)
    entry = Scenario(WINDOWS, gpus=(GpuEntry(overrides={"power.draw": spec}),), seed=5)
    assert query(top, "power.draw") != query(entry, "power.draw")


def test_range_seed_depends_on_the_field_not_on_other_fields() -> None:
    alone = Scenario(WINDOWS, overrides={"power.draw": Range(0, 1e9)}, seed=11)
    together = Scenario(WINDOWS, overrides={"temperature.gpu": Range(0, 1e9), "power.draw": Range(0, 1e9)}, seed=11)
    assert column(query(alone, "power.draw")) == column(query(together, "power.draw"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, 1), (1.5, 2), (2.5, 3), (-0.5, -1), (-2.5, -3), (0.49999999999999994, 0), (-0.2, 0), (7.0, 7)],
    ids=[
        "half",
        "one-and-half",
        "two-and-half-not-even",
        "negative-half",
        "negative-two-and-half",
        "just-below-half",
        "small-negative",
        "whole",
    ],
)
def test_integral_rounding_is_half_away_from_zero(value: float, expected: int) -> None:
    assert engine._round_half_away(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.5, "1.5"),
        (2.0, "2"),
        (1e-7, "0.0000001"),
        (1e16, "10000000000000000"),
        (0.1, "0.1"),
        (123456.789, "123456.789"),
        (-0.0, "-0"),
    ],
    ids=["fraction", "whole-drops-point", "tiny", "huge", "shortest-repr", "plain", "negative-zero"],
)
def test_plain_decimal_is_shortest_without_exponent(value: float, expected: str) -> None:
    assert engine._plain_decimal(value) == expected


# ----------------------------------------------------------------------------------------------
# Fluctuation

MOVING = [
    ("utilization.gpu", "utilization.gpu [%]", "50 %"),
    ("temperature.gpu", "temperature.gpu", "60"),
    ("power.draw", "power.draw [W]", "100.00 W"),
    ("clocks.current.graphics", "clocks.current.graphics [MHz]", "1500 MHz"),
    ("fan.speed", "fan.speed [%]", "40 %"),
]
STILL = [
    ("power.limit", "power.limit [W]", "250.00 W"),
    ("clocks.max.graphics", "clocks.max.graphics [MHz]", "2000 MHz"),
    ("timestamp", "timestamp", "2026/01/01 00:00:00.000"),
    ("pci.device_id", "pci.device_id", "0x20B210DE"),
    ("temperature.gpu.tlimit", "temperature.gpu.tlimit", "30"),
]


def fluctuated(
    capture: Capture, fields: str, seeds: range = range(30), overrides: Mapping[str, Generator] | None = None
) -> list[list[str]]:
    """Data rows of ``fields`` with fluctuation on, one query per seed."""
    out: list[list[str]] = []
    for seed in seeds:
        scenario = Scenario(capture, seed=seed, fluctuate=True, overrides=overrides or {})
        out.extend(rows(query(scenario, fields)))
    return out


def test_fluctuation_moves_only_the_listed_fields() -> None:
    capture = csv_capture(MOVING + STILL)
    names = ",".join(c[0] for c in MOVING + STILL)
    results = fluctuated(capture, names)
    for position, (name, _, recorded) in enumerate(MOVING + STILL):
        seen = {row[position] for row in results}
        if (name, _, recorded) in MOVING:
            assert len(seen) > 1, name
        else:
            assert seen == {recorded}, name


@pytest.mark.parametrize(
    ("cell", "pattern"),
    [("39.32 W", r"\d+\.\d\d W"), ("40", r"\d+"), ("1500 MHz", r"\d+ MHz"), ("7.5%", r"\d+\.\d%")],
    ids=["two-decimals-and-unit", "bare-integer", "integer-and-unit", "unit-without-space"],
)
def test_fluctuation_keeps_decimal_places_and_tail(cell: str, pattern: str) -> None:
    capture = csv_capture([("power.draw", "power.draw", cell)])
    for (value,) in fluctuated(capture, "power.draw"):
        assert re.fullmatch(pattern, value), value


def test_fluctuation_caps_percent_at_100() -> None:
    capture = csv_capture([("utilization.gpu", "utilization.gpu [%]", "99 %")])
    values = [int(value.split()[0]) for (value,) in fluctuated(capture, "utilization.gpu", range(60))]
    assert max(values) == 100
    assert min(values) < 99


def test_fluctuation_does_not_cap_other_tails() -> None:
    capture = csv_capture([("temperature.gpu", "temperature.gpu", "99")])
    values = [int(value) for (value,) in fluctuated(capture, "temperature.gpu", range(60))]
    assert max(values) > 100


def test_fluctuation_never_goes_negative_and_moves_zero() -> None:
    capture = csv_capture([("power.draw", "power.draw [W]", "0.00 W")])
    values = [float(value.split()[0]) for (value,) in fluctuated(capture, "power.draw", range(60))]
    assert min(values) == 0.0
    assert max(values) > 0.0
    assert max(values) <= 1.0


@pytest.mark.parametrize(
    "cell",
    ["[N/A]", "0x1F", "0X1F", "12.5.3", "1e5 %", "N/A", "", "[Not Supported]", "12 34", "-", "5x"],
    ids=[
        "na",
        "hex",
        "hex-upper",
        "two-dots",
        "exponent",
        "bare-na",
        "empty",
        "not-supported",
        "two-numbers",
        "dash",
        "x-tail",
    ],
)
def test_fluctuation_leaves_non_numeric_shapes_untouched(cell: str) -> None:
    capture = csv_capture([("utilization.gpu", "utilization.gpu [%]", cell)])
    assert {value for (value,) in fluctuated(capture, "utilization.gpu", range(5))} == {cell}


def test_fluctuation_skips_overridden_fields() -> None:
    capture = csv_capture(MOVING)
    results = fluctuated(capture, "power.draw", overrides={"power.draw": Fixed("1.00 W")})
    assert {value for (value,) in results} == {"1.00 W"}


def test_fluctuation_is_deterministic_for_a_seed() -> None:
    capture = csv_capture(MOVING)
    names = ",".join(c[0] for c in MOVING)
    assert fluctuated(capture, names, range(3)) == fluctuated(capture, names, range(3))
    assert fluctuated(capture, names, range(1)) != fluctuated(capture, names, range(1, 2))


def test_fluctuation_draws_independently_per_replicated_gpu() -> None:
    scenario = Scenario(WINDOWS, state="load", gpus=4, seed=1, fluctuate=True)
    assert len(set(column(query(scenario, "power.draw")))) > 1


def test_fluctuation_applies_to_compute_apps_used_memory() -> None:
    capture = section_capture(
        Section(
            "idle",
            "query-compute-apps",
            "nvidia-smi --query-compute-apps=pid,used_gpu_memory --format=csv",
            "pid, used_gpu_memory [MiB]\n1, 512 MiB\n2, [N/A]",
        )
    )
    values = set()
    for seed in range(10):
        result = answer(
            Scenario(capture, seed=seed, fluctuate=True),
            ["--query-compute-apps=pid,used_gpu_memory", "--format=csv"],
        )
        first, second = rows(result)
        values.add(first[1])
        assert second == ["2", "[N/A]"]
        assert first[0] == "1"
    assert len(values) > 1


MEMORY = [
    ("memory.total", "memory.total [MiB]", "1000 MiB"),
    ("memory.reserved", "memory.reserved [MiB]", "100 MiB"),
    ("memory.used", "memory.used [MiB]", "895 MiB"),
    ("memory.free", "memory.free [MiB]", "5 MiB"),
]


def mib(cell: str) -> int:
    assert cell.endswith(" MiB"), cell
    return int(cell[:-4])


def test_fluctuation_reconciles_used_and_free_with_total_minus_reserved() -> None:
    results = fluctuated(csv_capture(MEMORY), "memory.total,memory.reserved,memory.used,memory.free", range(40))
    capped = 0
    for total, reserved, used, free in results:
        assert mib(total) == 1000
        assert mib(reserved) == 100
        assert mib(used) <= 900
        assert mib(used) + mib(free) == 900
        capped += mib(used) == 900
    assert capped > 0


def test_fluctuation_reconciles_without_reserved_column() -> None:
    capture = csv_capture([MEMORY[0], MEMORY[2], MEMORY[3]])
    for used, free in fluctuated(capture, "memory.used,memory.free", range(20)):
        assert mib(used) + mib(free) == 1000


def test_reconciliation_leaves_overridden_used_alone() -> None:
    results = fluctuated(
        csv_capture(MEMORY), "memory.used,memory.free", range(5), overrides={"memory.used": Fixed("5000 MiB")}
    )
    assert results == [["5000 MiB", "5 MiB"]] * 5


def test_reconciliation_caps_used_but_keeps_overridden_free() -> None:
    results = fluctuated(
        csv_capture(MEMORY), "memory.used,memory.free", range(40), overrides={"memory.free": Fixed("7 MiB")}
    )
    assert {free for _, free in results} == {"7 MiB"}
    assert max(mib(used) for used, _ in results) == 900


def test_reconciliation_runs_even_when_used_does_not_move() -> None:
    capture = csv_capture(
        [
            ("memory.total", "memory.total", "10 MiB"),
            ("memory.used", "memory.used", "50 MiB"),
            ("memory.free", "memory.free", "0 MiB"),
        ]
    )
    scenario = Scenario(capture, seed=1, fluctuate=True, overrides={"temperature.gpu": Fixed("1")})
    assert rows(query(scenario, "memory.used,memory.free")) == [["10 MiB", "0 MiB"]]


# ----------------------------------------------------------------------------------------------
# Helpers with Go-defined behaviour


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("abc", '"abc"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("\n\r\t\a\b\f\v", '"\\n\\r\\t\\a\\b\\f\\v"'),
        ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),
        ("é ü", '"é ü"'),
        ("\u00a0", '"\\u00a0"'),
        ("\u200b", '"\\u200b"'),
        ("\U0001f600", '"\U0001f600"'),
        ("\U000e0001", '"\\U000e0001"'),
        ("\udcff", '"\\xff"'),
    ],
    ids=[
        "plain",
        "quote",
        "backslash",
        "named-escapes",
        "control-hex",
        "printable-unicode",
        "nbsp",
        "format-char",
        "emoji",
        "astral-format-char",
        "surrogate-escaped-byte",
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)],
    ids=["empty", "a", "foobar"],
)
def test_fnv1a64_reference_vectors(data: bytes, expected: int) -> None:
    assert engine.fnv1a64(data) == expected


def test_scenario_and_answer_are_frozen() -> None:
    scenario = Scenario(WINDOWS, overrides={"a": Fixed("1")})
    with pytest.raises(AttributeError):
        scenario.state = "load"  # type: ignore[misc]
    with pytest.raises(TypeError):
        scenario.overrides["b"] = Fixed("2")  # type: ignore[index]
