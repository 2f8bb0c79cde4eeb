"""Value transformation of one cell (docs/compatibility.md, "Value transformation"), hex quirks, uuid
normalization, Go whitespace."""

from __future__ import annotations

import logging

import pytest

from nvidia_gpu_exporter._go.floats import format_go_float
from nvidia_gpu_exporter.exposition.naming import derive_name
from nvidia_gpu_exporter.model.fields import ValueKind, value_kind
from nvidia_gpu_exporter.model.uuids import normalize_mig_uuid, normalize_uuid
from nvidia_gpu_exporter.model.values import transform_generic, transform_value


def render(qfield: str, rfield: str, raw: str) -> str | None:
    """The sample text a cell renders to, with the field's own kind and multiplier; None = skipped."""
    value = transform_value(raw, value_kind(qfield), derive_name(rfield).multiplier, qfield)
    return None if value is None else format_go_float(value)


# What cells become (field, RField, raw cell, expected text or None = skipped); docs/compatibility.md,
# "Value transformation" shows a selection.
CONSEQUENCES: list[tuple[str, str, str, str | None]] = [
    ("fan.speed", "fan.speed [%]", "38 %", "0.38"),
    ("fan.speed", "fan.speed [%]", "57 %", "0.5700000000000001"),
    ("edpp_multiplier", "edpp_multiplier [%]", "100.00 %", "1"),
    ("memory.total", "memory.total [MiB]", "8192 MiB", "8.589934592e+09"),
    ("clocks.current.graphics", "clocks.current.graphics [MHz]", "765 MHz", "7.65e+08"),
    (
        "clocks_event_reasons_counters.sw_power_cap",
        "clocks_event_reasons_counters.sw_power_cap [us]",
        "212553937 us",
        "212.553937",
    ),
    ("power.draw", "power.draw [W]", "39.32 W", "39.32"),
    ("clocks_event_reasons.supported", "clocks_event_reasons.supported", "0x00000000000001FF", "511"),
    ("pci.device_id", "pci.device_id", "0x1E8110DE", "5.11774942e+08"),
    ("pci.bus", "pci.bus", "0x0C", "12"),
    ("pstate", "pstate", "P8", "8"),
    ("compute_mode", "compute_mode", "Default", "0"),
    ("compute_mode", "compute_mode", "Exclusive_Process", "3"),
    ("persistence_mode", "persistence_mode", "Disabled", "0"),
    ("display_attached", "display_attached", "Yes", "1"),
    ("clocks_event_reasons.gpu_idle", "clocks_event_reasons.gpu_idle", "Not Active", "0"),
    ("name", "name", "NVIDIA GeForce RTX 2080 SUPER", "2080"),
    ("name", "name", "NVIDIA H200", "200"),
    ("name", "name", "NVIDIA L40S", "40"),
    ("name", "name", "NVIDIA H100 80GB HBM3", None),
    ("driver_version", "driver_version", "595.71.05", None),
    ("driver_version", "driver_version", "595.80", "595.8"),
    ("driver_version", "driver_version", "591.86", "591.86"),
    ("serial", "serial", "0000000000000", "0"),
    ("serial", "serial", "1322120000000", "1.32212e+12"),
    ("inforom.oem", "inforom.oem", "1.1", "1.1"),
    ("compute_cap", "compute_cap", "8.0", "8"),
    ("timestamp", "timestamp", "2026/06/24 10:26:34.977", None),
    ("pci.bus_id", "pci.bus_id", "00000000:07:00.0", None),
    ("vbios_version", "vbios_version", "92.00.25.00.08", None),
    ("uuid", "uuid", "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA", None),
    ("uuid", "uuid", "GPU-00000000-0000-0000-0000-000000000000", None),
    ("display_mode", "display_mode", "[Requested functionality has been deprecated]", None),
    ("display_mode", "display_mode", "[N/A]", None),
    ("display_mode", "display_mode", "N/A", None),
    ("display_mode", "display_mode", "[Not Supported]", None),
    ("display_mode", "display_mode", "HMM", None),
    ("display_mode", "display_mode", "valid", None),
    ("display_mode", "display_mode", "WDDM", None),
    ("display_mode", "display_mode", "Direct Connected", None),
    ("gom.current", "gom.current", "Unknown(5)", "5"),
    ("any", "any", "1e5", None),
    ("any", "any", "+5", "5"),
    ("any", "any", ".5", "0.5"),
    ("any", "any", "5.", "5"),
    ("clocks.max.memory", "clocks.max.memory [MHz]", "7751 MHz", "7.751e+09"),
]


@pytest.mark.parametrize(
    ("qfield", "rfield", "raw", "expected"),
    CONSEQUENCES,
    ids=[f"consequences: {row[0]} {row[2]!r}" for row in CONSEQUENCES],
)
def test_consequences_table(qfield: str, rfield: str, raw: str, expected: str | None) -> None:
    assert render(qfield, rfield, raw) == expected


WORDS: list[tuple[str, float]] = [
    ("enabled", 1),
    ("yes", 1),
    ("active", 1),
    ("disabled", 0),
    ("no", 0),
    ("not active", 0),
    ("default", 0),
    ("exclusive_thread", 1),
    ("prohibited", 2),
    ("exclusive_process", 3),
    ("ENABLED", 1),
    ("  Prohibited\t", 2),
    ("Exclusive_Thread", 1),
]


@pytest.mark.parametrize(("raw", "expected"), WORDS, ids=[f"word {w!r}" for w, _ in WORDS])
def test_words_ignore_multiplier(raw: str, expected: float) -> None:
    """Exact lowercase matches; the multiplier is not applied."""
    assert transform_generic(raw, 0.01) == expected
    assert transform_generic(raw, 1048576.0) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("notactive", None), ("enabled!", None), ("enable", None), ("not  active", None)],
    ids=["word needs exact match: notactive", "enabled!", "enable", "inner spaces not collapsed"],
)
def test_words_exact_only(raw: str, expected: float | None) -> None:
    assert transform_generic(raw, 1.0) is expected


HEX: list[tuple[str, float, float | None, str]] = [
    ("0x10", 1048576.0, 16, "multiplier not applied to hex"),
    ("0x10", 0.01, 16, "multiplier not applied to hex (ratio)"),
    ("  0x0C  ", 1.0, 12, "hex after trimming"),
    ("0X1F", 1.0, None, "uppercase 0X prefix is not hex: 0 and 1 are two numbers"),
    ("0x", 1.0, None, "empty hex is skipped"),
    ("0xZZ", 1.0, None, "non-hex chars are skipped"),
    ("0x1 2", 1.0, None, "spaces inside hex are skipped"),
    ("0x-5", 1.0, None, "signs are not hex"),
    ("0xFFFFFFFFFFFFFFFF", 1.0, 18446744073709551615.0, "uint64 max parses"),
    ("0x10000000000000000", 1.0, None, "uint64 overflow is skipped"),
    ("0x0x0C", 1.0, 12, "every 0x occurrence is removed"),
    ("0x0X0C", 1.0, 12, "every 0X occurrence is removed"),
    ("0xabcdef", 1.0, 0xABCDEF, "lowercase hex digits"),
    ("0x1E8110DE", 1.0, 511774942, "pci.device_id"),
    # Go: strings.ReplaceAll(s, "0x", "") then strings.ReplaceAll(s, "0X", ""): removing "0x" first can join
    # a new "0X" which the second pass then removes: "0x00xX1" -> "0X1" -> "1".
    ("0x00xX1", 1.0, 1, "delete every 0x, then every 0X (two passes, Go ReplaceAll order)"),
]


@pytest.mark.parametrize(("raw", "multiplier", "expected"), [h[:3] for h in HEX], ids=[h[3] for h in HEX])
def test_hex_quirks(raw: str, multiplier: float, expected: float | None) -> None:
    assert transform_generic(raw, multiplier) == expected


NUMBERS: list[tuple[str, float, float | None, str]] = [
    ("-5", 1.0, -5, "sign is part of the match"),
    ("-0", 1.0, -0.0, "negative zero parses"),
    ("1.2.3", 1.0, None, "1.2 and .3 are two matches"),
    ("1-2", 1.0, None, "1 and -2 are two matches"),
    ("abc", 1.0, None, "no number is skipped"),
    ("", 1.0, None, "empty is skipped"),
    ("9" * 400, 1.0, None, "Inf product is skipped"),
    ("1" + "0" * 308 + " MiB", 1048576.0, None, "finite number times multiplier overflowing is skipped"),
    ("\u0665", 1.0, None, "ASCII digits only (Arabic-Indic five)"),
    ("\uff15", 1.0, None, "ASCII digits only (full-width five)"),
    ("38 %", 0.01, 38 * 0.01, "one IEEE multiply"),
    ("P8", 1.0, 8, "letters around the number are ignored"),
    ("  42  ", 1.0, 42, "surrounding spaces"),
]


@pytest.mark.parametrize(("raw", "multiplier", "expected"), [n[:3] for n in NUMBERS], ids=[n[3] for n in NUMBERS])
def test_number_rule(raw: str, multiplier: float, expected: float | None) -> None:
    assert transform_generic(raw, multiplier) == expected


RECOVERY: list[tuple[str, float]] = [
    ("none", 0),
    ("None", 0),
    ("GPU Reset", 1),
    ("reset", 1),
    ("Node Reboot", 2),
    ("reboot", 2),
    ("Drain P2P", 3),
    ("Drain and Reset", 4),
    ("  DRAIN AND RESET  ", 4),
]


@pytest.mark.parametrize(("raw", "expected"), RECOVERY, ids=[f"gpu_recovery_action {r!r}" for r, _ in RECOVERY])
def test_recovery_action_enum(raw: str, expected: float) -> None:
    assert transform_value(raw, ValueKind.RECOVERY_ACTION, 0.01, "gpu_recovery_action") == expected


FABRIC: list[tuple[str, float]] = [
    ("Not Supported", 0),
    ("Not Started", 1),
    ("In Progress", 2),
    ("Completed", 3),
    ("completed", 3),
]


@pytest.mark.parametrize(("raw", "expected"), FABRIC, ids=[f"fabric.state {r!r}" for r, _ in FABRIC])
def test_fabric_state_enum(raw: str, expected: float) -> None:
    assert transform_value(raw, ValueKind.FABRIC_STATE, 1048576.0, "fabric.state") == expected


ABSENT = ["", "  ", "N/A", "n/a", "[N/A]", "[Not Supported]", "[Insufficient Permissions]"]


@pytest.mark.parametrize("kind", [ValueKind.RECOVERY_ACTION, ValueKind.FABRIC_STATE], ids=lambda k: k.value)
@pytest.mark.parametrize("raw", ABSENT, ids=[f"absent token {a!r} skipped silently" for a in ABSENT])
def test_enum_absent_tokens_silent(raw: str, kind: ValueKind, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert transform_value(raw, kind, 1.0, kind.value) is None
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


UNKNOWN = ["[Unknown Error]", "bogus", "5", "0x1", "enabled", "not supported yet"]


@pytest.mark.parametrize("kind", [ValueKind.RECOVERY_ACTION, ValueKind.FABRIC_STATE], ids=lambda k: k.value)
@pytest.mark.parametrize("raw", UNKNOWN, ids=[f"unknown enum value {u!r} warns" for u in UNKNOWN])
def test_enum_unknown_value_warns(raw: str, kind: ValueKind, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert transform_value(raw, kind, 1.0, kind.value) is None
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert [record.getMessage() for record in warnings] == ["skipping metric: unrecognized enum value"]


def test_enum_words_are_not_generic_words() -> None:
    """The enum tables apply only to the two enum fields: `completed` is not a generic word."""
    assert transform_value("Completed", ValueKind.GENERIC, 1.0, "other") is None
    assert transform_value("reboot", ValueKind.GENERIC, 1.0, "other") is None


def test_fabric_not_supported_word_differs_from_bracket_token() -> None:
    """`Not Supported` is state 0, `[Not Supported]` is an absent token."""
    assert transform_value("Not Supported", ValueKind.FABRIC_STATE, 1.0, "fabric.state") == 0
    assert transform_value("[Not Supported]", ValueKind.FABRIC_STATE, 1.0, "fabric.state") is None


GO_SPACE: list[tuple[str, float | None, str]] = [
    ("enabled\x1f", None, "Go TrimSpace keeps \\x1f, so the word does not match"),
    ("\x1cenabled", None, "Go TrimSpace keeps \\x1c, so the word does not match"),
    ("\x1c0x10", None, "Go TrimSpace keeps \\x1c, so the hex prefix is not at the start (0 and 10)"),
    ("\xa0enabled\u3000", 1, "Go trims NBSP and ideographic space"),
    ("\x85Yes\u2028", 1, "Go trims NEL and line separator"),
    ("\u200a0x0C\u2009", 12, "Go trims hair/thin spaces before the hex check"),
]


@pytest.mark.parametrize(("raw", "expected"), [g[:2] for g in GO_SPACE], ids=[g[2] for g in GO_SPACE])
def test_go_whitespace_rules(raw: str, expected: float | None) -> None:
    assert transform_generic(raw, 1.0) == expected


UUIDS: list[tuple[str, str, str]] = [
    (
        "GPU-DF6E7A7C-7314-46F8-ABC4-B88B36DCF3AA",
        "df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",
        "trim, lowercase, strip gpu-",
    ),
    ("  gpu-abc  ", "abc", "trimmed before the prefix check"),
    ("GPU-GPU-x", "gpu-x", "only one gpu- is stripped"),
    ("MIG-abc", "mig-abc", "GPU uuids strip gpu- only"),
    ("abc-GPU-x", "abc-gpu-x", "only a leading gpu- is stripped"),
    ("\x1cGPU-X", "\x1cgpu-x", "Go TrimSpace keeps \\x1c so the prefix is not leading"),
    ("GPU-ÄBC", "äbc", "Unicode lowercase"),
    ("", "", "empty stays empty"),
]


@pytest.mark.parametrize(("raw", "expected"), [u[:2] for u in UUIDS], ids=[u[2] for u in UUIDS])
def test_normalize_uuid(raw: str, expected: str) -> None:
    assert normalize_uuid(raw) == expected


def test_normalize_mig_uuid() -> None:
    """MIG device uuids strip mig- instead."""
    assert normalize_mig_uuid(" MIG-ABC-1 ") == "abc-1"
    assert normalize_mig_uuid("GPU-ABC") == "gpu-abc"
