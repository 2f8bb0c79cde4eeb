"""Field resolution at startup and the CUDA version read (docs/compatibility.md, "Field resolution", "CUDA
version"), against an in-memory nvidia-smi."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nvidia_gpu_exporter.backends.exec.backend import cuda_version_of, resolve_fields, run_bounded
from nvidia_gpu_exporter.backends.fields import (
    BUILTIN_FIELDS,
    FieldRequest,
    FieldResolutionError,
    apply_exclusions,
)
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import QueryField
from unit_helpers import BLOCK, Answer, FakeRunner, exited, header_answer, help_query_gpu, ok

IDENTITY = list(IDENTITY_FIELDS)
TIMEOUT = 5.0


def resolve(runner: FakeRunner, names: str = "AUTO", exclude: str = "", timeout: float = TIMEOUT) -> list[QueryField]:
    return list(asyncio.run(resolve_fields(runner, FieldRequest(names, exclude), timeout)))


def qfields(fields: list[QueryField]) -> list[str]:
    return [field.qfield for field in fields]


def mapping_calls(runner: FakeRunner) -> list[tuple[str, ...]]:
    return [call for call in runner.calls if call[0].startswith("--query-gpu=")]


def test_identity_fields_order() -> None:
    """The identity fields, in their fixed order."""
    assert IDENTITY == [
        "uuid",
        "name",
        "driver_model.current",
        "driver_model.pending",
        "vbios_version",
        "driver_version",
        "pci.bus_id",
        "serial",
        "compute_cap",
        "pci.sub_device_id",
        "index",
    ]


def test_builtin_list_has_116_fields() -> None:
    """The built-in list has 116 fields; unit-bearing ones carry their unit."""
    assert len(BUILTIN_FIELDS) == 116
    assert BUILTIN_FIELDS["fan.speed"] == "fan.speed [%]"
    assert BUILTIN_FIELDS["memory.used"] == "memory.used [MiB]"
    assert BUILTIN_FIELDS["power.draw"] == "power.draw [W]"
    assert BUILTIN_FIELDS["clocks.max.sm"] == "clocks.max.sm [MHz]"
    assert BUILTIN_FIELDS["clocks_throttle_reasons.sync_boost"] == "clocks_throttle_reasons.sync_boost"
    assert set(IDENTITY) <= set(BUILTIN_FIELDS)


@pytest.mark.parametrize(
    ("names", "auto"),
    [("AUTO", True), ("auto", False), (" AUTO", False), ("AUTO,", False), ("AUTO,AUTO", False), ("Auto", False)],
    ids=[
        "exactly AUTO",
        "case-sensitive",
        "no trimming",
        "trailing comma makes two elements",
        "two AUTOs are explicit",
        "mixed case is explicit",
    ],
)
def test_auto_mode_detection(names: str, auto: bool) -> None:
    assert FieldRequest(names).auto is auto


def test_auto_worked_example_query() -> None:
    """AUTO discovers 4 fields, appends the identity fields; the mapping header names the RFields."""
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(help_query_gpu("temperature.gpu", "fan.speed", "memory.used", "pstate")),
            "--query-gpu=": header_answer({"fan.speed": "fan.speed [%]", "memory.used": "memory.used [MiB]"}),
        }
    )
    fields = resolve(runner)
    assert mapping_calls(runner) == [
        (
            "--query-gpu=temperature.gpu,fan.speed,memory.used,pstate,uuid,name,driver_model.current,"
            "driver_model.pending,vbios_version,driver_version,pci.bus_id,serial,compute_cap,pci.sub_device_id,index",
            "--format=csv",
        )
    ]
    assert fields[:4] == [
        QueryField("temperature.gpu", "temperature.gpu"),
        QueryField("fan.speed", "fan.speed [%]"),
        QueryField("memory.used", "memory.used [MiB]"),
        QueryField("pstate", "pstate"),
    ]
    assert qfields(fields)[4:] == IDENTITY
    assert runner.calls[0] == ("--help-query-gpu",)


def test_rfields_matched_by_position_and_trimmed() -> None:
    """Header cells after trimming are the RFields, matched to QFields by position."""
    runner = FakeRunner(
        {"--query-gpu=": lambda args: ok(", ".join([" first ", "second [W] ", *(f" {q} " for q in IDENTITY)]))}
    )
    fields = resolve(runner, "a,b")
    assert fields[0] == QueryField("a", "first")
    assert fields[1] == QueryField("b", "second [W]")
    assert fields[2] == QueryField("uuid", "uuid")


def test_explicit_names_not_trimmed() -> None:
    """No trimming: `a, b` queries ` b`."""
    runner = FakeRunner({"--query-gpu=": header_answer()})
    fields = resolve(runner, "a, b")
    assert qfields(fields)[:2] == ["a", " b"]
    assert mapping_calls(runner)[0][0].startswith("--query-gpu=a, b,uuid,name,")
    assert not [call for call in runner.calls if call[0] == "--help-query-gpu"]


def test_explicit_identity_appended_and_deduplicated() -> None:
    """Elements + identity fields, de-duplicated keeping the first occurrence."""
    runner = FakeRunner({"--query-gpu=": header_answer()})
    fields = resolve(runner, "index,fan.speed,uuid,fan.speed")
    assert qfields(fields) == ["index", "fan.speed", "uuid", *[q for q in IDENTITY if q not in ("index", "uuid")]]


def test_auto_discovered_list_deduplicated_with_identity() -> None:
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(help_query_gpu("name", "fan.speed", "uuid", "fan.speed")),
            "--query-gpu=": header_answer(),
        }
    )
    fields = resolve(runner)
    assert qfields(fields) == ["name", "fan.speed", "uuid", *[q for q in IDENTITY if q not in ("name", "uuid")]]


EXCLUSIONS: list[tuple[str, list[str], str]] = [
    ("temperature.*", ["utilization.gpu", "fan.speed"], "glob star"),
    (" fan.speed , ,", ["temperature.gpu", "temperature.memory", "utilization.gpu"], "trimmed, empties ignored"),
    ("fan", ["temperature.gpu", "temperature.memory", "utilization.gpu", "fan.speed"], "anchored"),
    ("fan?speed", ["temperature.gpu", "temperature.memory", "utilization.gpu", "fan.speed"], "? literal"),
    ("fanXspeed", ["temperature.gpu", "temperature.memory", "utilization.gpu", "fan.speed"], "dot literal"),
    ("*.gpu", ["temperature.memory", "fan.speed"], "leading star"),
    ("*", [], "star excludes every non-identity field"),
    ("t*e*y,f*", ["temperature.gpu", "utilization.gpu"], "several stars, several patterns"),
    ("", ["temperature.gpu", "temperature.memory", "utilization.gpu", "fan.speed"], "empty excludes nothing"),
]

EXCLUSION_FIELDS = ["temperature.gpu", "temperature.memory", "utilization.gpu", "fan.speed"]


@pytest.mark.parametrize(("exclude", "kept"), [e[:2] for e in EXCLUSIONS], ids=[e[2] for e in EXCLUSIONS])
def test_exclusions(exclude: str, kept: list[str]) -> None:
    assert apply_exclusions([*EXCLUSION_FIELDS, *IDENTITY], exclude) == [*kept, *IDENTITY]


def test_exclusion_keeps_identity_fields(caplog: pytest.LogCaptureFixture) -> None:
    """Identity fields are never excluded (warning `ignoring exclusion of required query field`)."""
    runner = FakeRunner({"--query-gpu=": header_answer()})
    with caplog.at_level(logging.INFO):
        fields = resolve(runner, "fan.speed,temperature.gpu", exclude="uuid,name,temperature.*")
    assert qfields(fields) == ["fan.speed", *IDENTITY]
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count("ignoring exclusion of required query field") == 2
    assert messages.count("excluding query fields") == 1


def test_exclusion_applies_before_mapping_query() -> None:
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(help_query_gpu("temperature.gpu", "utilization.gpu")),
            "--query-gpu=": header_answer(),
        }
    )
    fields = resolve(runner, exclude="temperature.*")
    assert "temperature.gpu" not in mapping_calls(runner)[0][0]
    assert qfields(fields) == ["utilization.gpu", *IDENTITY]


def test_mapping_failure_uses_builtin_rfields(caplog: pytest.LogCaptureFixture) -> None:
    """Mapping query fails, every QField known -> list survives with built-in RFields."""
    runner = FakeRunner({"--query-gpu=": exited(1)})
    with caplog.at_level(logging.WARNING):
        fields = resolve(runner, "fan.speed,memory.used")
    assert fields[:2] == [QueryField("fan.speed", "fan.speed [%]"), QueryField("memory.used", "memory.used [MiB]")]
    assert fields[2:] == [QueryField(q, q) for q in IDENTITY]
    assert "failed to run the initial query, using the built-in list for field mapping" in caplog.messages


def test_mapping_csv_shape_mismatch_uses_builtin_rfields() -> None:
    """Any error incl. a CSV shape mismatch (exit 0) triggers the built-in mapping."""
    runner = FakeRunner({"--query-gpu=": ok("only, three, cells\n")})
    fields = resolve(runner, "fan.speed")
    assert fields[0] == QueryField("fan.speed", "fan.speed [%]")
    assert len(fields) == 1 + len(IDENTITY)


def test_mapping_failure_explicit_unknown_is_an_error() -> None:
    """Explicit mode with an unknown field fails startup naming it."""
    runner = FakeRunner({"--query-gpu=": exited(6)})
    with pytest.raises(FieldResolutionError, match='unexpected query field: "bogus_field"'):
        resolve(runner, "temperature.gpu,bogus_field")


def test_mapping_failure_explicit_unknown_quoted_go_style() -> None:
    runner = FakeRunner({"--query-gpu=": exited(6)})
    with pytest.raises(FieldResolutionError, match='unexpected query field: " b"'):
        resolve(runner, "fan.speed, b")


def test_mapping_failure_auto_unknown_falls_back_to_builtin_list(caplog: pytest.LogCaptureFixture) -> None:
    """AUTO with an unknown discovered field -> built-in list wholesale, minus exclusions."""
    runner = FakeRunner(
        {
            "--help-query-gpu": ok(help_query_gpu("fan.speed", "brand_new.field")),
            "--query-gpu=": exited(1),
        }
    )
    with caplog.at_level(logging.WARNING):
        fields = resolve(runner, exclude="ecc.*,uuid")
    names = qfields(fields)
    assert "brand_new.field" not in names
    assert set(names) == {q for q in BUILTIN_FIELDS if not q.startswith("ecc.")}
    assert len(names) == 116 - 38  # 36 ecc.errors.* + ecc.mode.current/pending
    assert {field.qfield: field.rfield for field in fields}["fan.speed"] == "fan.speed [%]"
    assert "uuid" in names


@pytest.mark.parametrize(
    "help_answer",
    [exited(1), ok("no quoted fields here\n"), ok(""), BLOCK],
    ids=["discovery command fails", "no fields in output", "empty output", "discovery timed out"],
)
def test_discovery_failure_uses_builtin_list(help_answer: Answer, caplog: pytest.LogCaptureFixture) -> None:
    """Discovery failure -> warning, and the built-in list (116 fields) with the built-in headers, as the Go
    exporter does: no mapping query, so a driver that would head a field otherwise changes no metric name."""
    runner = FakeRunner({"--help-query-gpu": help_answer, "--query-gpu=": header_answer({"fan.speed": "fan [RPM]"})})
    with caplog.at_level(logging.WARNING):
        fields = resolve(runner, timeout=0.05 if help_answer is BLOCK else TIMEOUT)
    assert len(fields) == 116
    assert {field.qfield: field.rfield for field in fields} == BUILTIN_FIELDS
    assert mapping_calls(runner) == []
    assert "failed to auto-determine query field names, falling back to the built-in list" in caplog.messages


def test_discovery_failure_still_applies_exclusions() -> None:
    runner = FakeRunner({"--help-query-gpu": exited(1), "--query-gpu=": header_answer()})
    fields = resolve(runner, exclude="ecc.*,uuid")
    assert not [name for name in qfields(fields) if name.startswith("ecc.")]
    assert "uuid" in qfields(fields)  # identity fields are never excluded
    assert mapping_calls(runner) == []


def test_mapping_query_timeout_is_bounded() -> None:
    """Each startup run is bounded by collect.timeout; a hung mapping query -> built-in mapping."""
    runner = FakeRunner({"--query-gpu=": BLOCK})
    fields = resolve(runner, "fan.speed", timeout=0.05)
    assert fields[0] == QueryField("fan.speed", "fan.speed [%]")


def test_unbounded_timeout_none_still_answers() -> None:
    """collect.timeout=0 means no bound (None): a prompt runner still resolves."""
    runner = FakeRunner({"--query-gpu=": header_answer()})
    fields = list(asyncio.run(resolve_fields(runner, FieldRequest("fan.speed"), None)))
    assert qfields(fields) == ["fan.speed", *IDENTITY]


# -- CUDA version -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ok("NVIDIA-SMI version : 535.54.03\nCUDA Version : 12.2\n"), "12.2"),
        (ok('CUDA version : Deprecated, see "CUDA UMD version" instead\nCUDA UMD version : 13.3\n'), "13.3"),
        (ok("NVIDIA-SMI version : 535.54.03\n"), ""),
        (exited(9), ""),
        (BLOCK, ""),
    ],
    ids=[
        "CUDA Version",
        "610 driver UMD version",
        "no version line -> empty label",
        "failure -> empty label",
        "timed out -> empty label",
    ],
)
def test_read_cuda_version(answer: Answer, expected: str) -> None:
    runner = FakeRunner({"--version": answer})
    result = asyncio.run(run_bounded(runner, ["--version"], 0.05 if answer is BLOCK else TIMEOUT))
    assert cuda_version_of(result) == expected
    assert runner.calls == [("--version",)]
