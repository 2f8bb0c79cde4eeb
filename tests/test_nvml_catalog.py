"""The nvml catalog, field resolution and cell formatting, without any library loaded.

Table-driven against the exact texts nvidia-smi prints; the shared real captures (when present beside the
checkout) pin the catalog's headers to what real nvidia-smi returned for the same fields.
"""

from __future__ import annotations

import re

import pytest

from conftest import conformance_dir_or_skip
from nvidia_gpu_exporter.backends.fields import FieldRequest, FieldResolutionError
from nvidia_gpu_exporter.backends.nvml import api
from nvidia_gpu_exporter.backends.nvml.backend import cuda_version_text, timestamp_text
from nvidia_gpu_exporter.backends.nvml.catalog import (
    ALIASES,
    CATALOG,
    LEGACY_REASONS,
    NOT_SERVED_FIELDS,
    NOT_SERVED_PREFIXES,
    RFIELDS,
    driver_major,
    resolve_fields,
    uses_legacy_reasons,
)
from nvidia_gpu_exporter.backends.nvml.sources import CYCLE_FIELDS, SOURCES, field_value
from nvidia_gpu_exporter.backends.nvml.text import DEPRECATED_FIELDS, enum_text, hex64, mib, token, uuid_text, watts
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS


def test_catalog_has_179_distinct_fields_each_with_a_source() -> None:
    assert len(CATALOG) == 179
    assert len(set(CATALOG)) == 179
    unread = [field for field in CATALOG if field not in SOURCES and field not in DEPRECATED_FIELDS | CYCLE_FIELDS]
    assert unread == []
    assert set(IDENTITY_FIELDS) <= set(CATALOG)


def test_deliberately_unserved_fields_are_not_in_the_catalog() -> None:
    assert not NOT_SERVED_FIELDS & set(CATALOG)
    assert not [field for field in CATALOG if field.startswith(NOT_SERVED_PREFIXES)]


@pytest.mark.parametrize(
    ("field", "header"),
    [
        ("fan.speed", "fan.speed [%]"),
        ("memory.reserved", "memory.reserved [MiB]"),
        ("protected_memory.free", "protected_memory.free [MiB]"),
        ("utilization.ofa", "utilization.ofa [%]"),
        ("power.draw.instant", "power.draw.instant [W]"),
        ("enforced.power.limit", "enforced.power.limit [W]"),
        ("power.management", "power.management"),
        ("clocks.default_applications.memory", "clocks.default_applications.memory [MHz]"),
        ("clocks_event_reasons_counters.sw_power_cap", "clocks_event_reasons_counters.sw_power_cap [us]"),
        ("clocks_event_reasons.sw_power_cap", "clocks_event_reasons.sw_power_cap"),
        ("edpp_multiplier", "edpp_multiplier [%]"),
        ("temperature.memory", "temperature.memory"),
        (
            "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
            "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
        ),
    ],
)
def test_headers_carry_nvidia_smi_units(field: str, header: str) -> None:
    assert RFIELDS[field] == header


def test_headers_match_every_real_capture() -> None:
    """Every catalog field a real nvidia-smi returned has exactly the header it returned."""
    captures = sorted((conformance_dir_or_skip() / "captures").glob("*.txt"))
    compared = 0
    for capture in captures:
        text = capture.read_text(encoding="utf-8").replace("\r\n", "\n")
        for match in re.finditer(
            r"^# \S+ :: query-gpu \(csv.*\n# \$ nvidia-smi --query-gpu=(\S+) .*\n#{80}\n(.*)\n", text, re.M
        ):
            fields, header = match.group(1).split(","), [cell.strip() for cell in match.group(2).split(",")]
            for field, returned in zip(fields, header, strict=True):
                if field in RFIELDS:
                    assert RFIELDS[field] == returned, (capture.name, field)
                    compared += 1
                else:
                    assert field in NOT_SERVED_FIELDS or field.startswith(NOT_SERVED_PREFIXES), (capture.name, field)
    assert compared > 1000


@pytest.mark.parametrize(
    ("version", "major", "legacy"),
    [
        ("590.48.01", 590, False),
        ("555.42.02", 555, False),
        ("550.54.15", 550, True),
        ("535.104", 535, True),
        ("", None, False),
        ("r5xx", None, False),
    ],
)
def test_driver_era(version: str, major: int | None, legacy: bool) -> None:
    assert driver_major(version) == major
    assert uses_legacy_reasons(version) is legacy


def queried(request: FieldRequest, driver: str = "590.48.01") -> list[tuple[str, str]]:
    return [(field.query.qfield, field.query.rfield) for field in resolve_fields(request, driver)]


def test_auto_is_the_whole_catalog_in_order() -> None:
    assert [qfield for qfield, _ in queried(FieldRequest())] == list(CATALOG)


def test_auto_on_an_old_driver_spells_the_reasons_the_old_way() -> None:
    fields = dict(queried(FieldRequest(), "550.54.15"))
    for legacy in LEGACY_REASONS:
        assert fields[legacy] == legacy
    assert not [field for field in fields if field.startswith("clocks_event_reasons.")]
    assert fields["clocks_event_reasons_counters.sw_power_cap"] == "clocks_event_reasons_counters.sw_power_cap [us]"


def test_explicit_list_gets_identity_appended_and_deduplicated() -> None:
    fields = queried(FieldRequest("fan.speed,uuid,fan.speed"))
    assert [qfield for qfield, _ in fields] == ["fan.speed", *IDENTITY_FIELDS]
    assert fields[0] == ("fan.speed", "fan.speed [%]")


@pytest.mark.parametrize(
    ("alias", "driver", "header"),
    [
        ("gpu_name", "590.48.01", "name"),
        ("clocks.gr", "590.48.01", "clocks.current.graphics [MHz]"),
        ("clocks_throttle_reasons.gpu_idle", "590.48.01", "clocks_event_reasons.gpu_idle"),
        ("clocks_event_reasons.gpu_idle", "550.54.15", "clocks_throttle_reasons.gpu_idle"),
        ("clocks_throttle_reasons.gpu_idle", "550.54.15", "clocks_throttle_reasons.gpu_idle"),
    ],
)
def test_aliases_answer_under_the_header_nvidia_smi_prints(alias: str, driver: str, header: str) -> None:
    assert queried(FieldRequest(alias), driver)[0] == (alias, header)
    assert alias in ALIASES or alias in RFIELDS


@pytest.mark.parametrize(
    "field", ["kmd_version", "pcie.link.gen.hostmax", "power_smoothing.enabled", "bogus_field", " fan.speed"]
)
def test_explicit_fields_this_backend_cannot_read_fail_startup(field: str) -> None:
    with pytest.raises(FieldResolutionError) as raised:
        resolve_fields(FieldRequest(f"fan.speed,{field}"), "590.48.01")
    assert str(raised.value) == f'query field "{field}" is not supported by this backend'


def test_exclusions_apply_before_validation_and_keep_identity() -> None:
    fields = [qfield for qfield, _ in queried(FieldRequest("AUTO", "temperature.*,uuid,ecc.*"))]
    assert "temperature.gpu" not in fields
    assert "ecc.mode.current" not in fields
    assert "uuid" in fields
    assert next(qfield for qfield, _ in queried(FieldRequest("fan.speed,kmd_version", "kmd_*"))) == "fan.speed"


# -- cell texts -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("milliwatts", "text"),
    [
        (77710, "77.71 W"),
        (700000, "700.00 W"),
        (0, "0.00 W"),
        (84240, "84.24 W"),
        (5, "0.01 W"),
        (123456789, "123456.79 W"),
    ],
)
def test_watts(milliwatts: int, text: str) -> None:
    assert watts(milliwatts) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 MiB"),
        (1, "1 MiB"),
        (1_048_576, "1 MiB"),
        (1_048_577, "2 MiB"),
        (143770 * 1_048_576 + 943718, "143771 MiB"),
    ],
)
def test_memory_rounds_up_to_whole_mib(size: int, text: str) -> None:
    assert mib(size) == text


@pytest.mark.parametrize(
    ("code", "field", "text"),
    [
        (api.NOT_SUPPORTED, "fan.speed", "[N/A]"),
        (api.NO_PERMISSION, "fan.speed", "[Insufficient Permissions]"),
        (api.DEPRECATED, "fan.speed", "[Requested functionality has been deprecated]"),
        (api.FUNCTION_NOT_FOUND, "fan.speed", "[Function Not Found]"),
        (api.UNKNOWN, "fan.speed", "[Unknown Error]"),
        (2, "fan.speed", "[Unknown Error]"),
        (api.NOT_SUPPORTED, "temperature.memory", "N/A"),
        (api.NO_PERMISSION, "fabric.state", "N/A"),
        (api.NOT_SUPPORTED, "fabric.clusterUuid", "N/A"),
    ],
)
def test_error_tokens(code: int, field: str, text: str) -> None:
    assert token(code, field) == text


def test_other_shapes() -> None:
    assert hex64(0x1FF) == "0x00000000000001FF"
    assert hex64(0) == "0x0000000000000000"
    assert enum_text({0: "None"}, 0) == "None"
    assert enum_text({0: "None"}, 7) == "Unknown(7)"
    assert uuid_text(bytes(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert cuda_version_text(13010) == "13.1"
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(13020) == "13.2"
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}", timestamp_text(1_700_000_000.25))
    assert timestamp_text(1_700_000_000.25).endswith(".250")


class _Value:
    def __init__(self, **members: float) -> None:
        self.__dict__.update(members)


class _Entry:
    def __init__(self, value_type: int, code: int = 0, **members: float) -> None:
        self.nvmlReturn = code
        self.valueType = value_type
        self.value = _Value(**members)


@pytest.mark.parametrize(
    ("entry", "decoded"),
    [
        (_Entry(0, dVal=1.5), 1.5),
        (_Entry(1, uiVal=32), 32),
        (_Entry(3, ullVal=15814595384), 15814595384),
        (_Entry(4, sllVal=-3), -3),
        (_Entry(5, siVal=-4), -4),
        (_Entry(6, usVal=9), 9),
        (_Entry(0, dVal=float("nan")), api.Failure(api.NOT_SUPPORTED)),
        (_Entry(42), api.Failure(api.NOT_SUPPORTED)),
        (_Entry(1, code=api.NO_PERMISSION, uiVal=1), api.Failure(api.NO_PERMISSION)),
    ],
)
def test_field_values_decode_by_type(entry: _Entry, decoded: object) -> None:
    assert field_value(entry) == decoded


def test_the_wrapper_turns_anything_into_a_code() -> None:
    """NVML must never crash the exporter: every way a call can fail becomes a Failure."""

    def raises(error: BaseException) -> object:
        raise error

    import pynvml

    assert api.call("nvmlThisFunctionDoesNotExist") == api.Failure(api.FUNCTION_NOT_FOUND)
    assert api.call(raises, pynvml.NVMLError(api.GPU_IS_LOST)) == api.Failure(api.GPU_IS_LOST)
    assert api.call(raises, pynvml.NVMLLibraryMismatchError("old driver")) == api.Failure(api.FUNCTION_NOT_FOUND)
    assert api.call(raises, UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")) == api.Failure(api.UNKNOWN)
    assert api.call(raises, ZeroDivisionError()) == api.Failure(api.UNKNOWN)
    assert api.call(lambda: 7) == 7
    assert api.Failure(api.GPU_IS_LOST).lifecycle
    assert not api.Failure(api.NOT_SUPPORTED).lifecycle
    assert api.return_name(api.GPU_IS_LOST) == "ERROR_GPU_IS_LOST"
    assert api.return_name(12) == "ERROR_LIBRARY_NOT_FOUND"
