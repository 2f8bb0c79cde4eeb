"""The fake's strict YAML config (docs/fake-nvidia-smi.md, "Config file"): what it accepts, and a clear error
for everything else."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from nvidia_gpu_exporter.capture.config import ConfigError, FakeSmiConfig, load_config, parse_config
from nvidia_gpu_exporter.capture.engine import Fixed, GpuEntry, Range, Scenario, answer
from nvidia_gpu_exporter.capture.format import load_capture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"

FULL = """\
capture: fixture-windows-1gpu
state: load
seed: 42
fluctuate: true
exit: 7
delay: 1m30s
stderr-msg: boom
fail-arg: --query-compute-apps
overrides:
  temperature.gpu: 88.50
  pstate: {value: P3}
  power.draw: {min: 10, max: 20.5}
  fan.speed: ''
gpus:
  - uuid: GPU-aaaa
    serial: S-1
    overrides:
      clocks.current.graphics: 1000 MHz
  - {}
extras:
  seed: 1
  mig:
    - gpu: 0
      instances: [{gi: 2, profile: 3g.71gb}]
"""


def test_full_config_is_parsed() -> None:
    config = parse_config(FULL)
    assert replace(config, extras=None) == FakeSmiConfig(
        capture="fixture-windows-1gpu",
        state="load",
        seed=42,
        fluctuate=True,
        exit=7,
        delay_ns=90_000_000_000,
        stderr_msg="boom",
        fail_arg="--query-compute-apps",
        overrides={
            "temperature.gpu": Fixed("88.50"),
            "pstate": Fixed("P3"),
            "power.draw": Range(10.0, 20.5),
            "fan.speed": Fixed(""),
        },
        gpus=(
            GpuEntry(uuid="GPU-aaaa", serial="S-1", overrides={"clocks.current.graphics": Fixed("1000 MHz")}),
            GpuEntry(),
        ),
    )
    assert config.extras is not None
    assert (config.extras.path, config.extras.line) == ("extras", 21)
    assert [key.written for key, _ in config.extras.pairs()] == ["seed", "mig"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("temperature.gpu: 88.50", "88.50"),
        ("temperature.gpu: 0x1F", "0x1F"),
        ("temperature.gpu: yes", "yes"),
        ("temperature.gpu: '007'", "007"),
        ("temperature.gpu: 1e3", "1e3"),
        ("name: Fake RTX 3090", "Fake RTX 3090"),
    ],
    ids=["decimal-places-kept", "hex-kept", "yaml11-bool-word-kept", "quoted", "exponent-kept", "spaces"],
)
def test_override_scalars_are_served_as_written(text: str, expected: str) -> None:
    config = parse_config("overrides:\n  " + text)
    (generator,) = config.overrides.values()
    assert generator == Fixed(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("gpus: 3", 3), ("gpus: '2'", 2), ("gpus: +4", 4), ("gpus:", None)],
    ids=["count", "quoted-count", "plus-sign", "null-is-unset"],
)
def test_gpus_count(text: str, expected: int | None) -> None:
    assert parse_config(text).gpus == expected


def test_empty_strings_and_nulls_mean_unset() -> None:
    config = parse_config("capture: ''\nstate:\nstderr-msg: ''\nfail-arg:\ndelay: ''\nseed:\nexit:\nextras:\n")
    assert config == FakeSmiConfig()


def test_scenario_from_config_answers_with_its_settings() -> None:
    capture = load_capture(FIXTURES / "fixture-windows-1gpu.txt")
    config = parse_config("overrides: {temperature.gpu: 88}\ngpus: 2\nseed: 1\n")
    scenario = config.scenario(capture)
    assert scenario == Scenario(capture, "idle", 1, {"temperature.gpu": Fixed("88")}, 2, False)
    assert answer(scenario, ["--query-gpu=temperature.gpu", "--format=csv"]).stdout == "temperature.gpu\n88\n88\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stat: idle", 'line 1: top level: unknown key "stat", want one of capture, state, seed'),
        ("state: idle\nstate: load", 'line 2: top level: duplicate key "state" (first at line 1)'),
        ("- capture: x", "line 1: top level: must be a mapping of settings, got a list"),
        ("just text", 'top level: must be a mapping of settings, got "just text"'),
        ("", "the config is empty"),
        ("# only a comment\n", "the config is empty"),
        ("state: [idle]", "line 1: state: must be a string, got a list"),
        ("seed: abc", 'line 1: seed: must be an integer, got "abc"'),
        ("seed: 1.5", 'line 1: seed: must be an integer, got "1.5"'),
        ("seed: true", 'line 1: seed: must be an integer, got "true"'),
        ("seed: '42'", 'line 1: seed: must be an integer, got "42"'),
        ("seed: 9223372036854775808", "seed: integer 9223372036854775808 is out of the int64 range"),
        ("exit: x", 'line 1: exit: must be an integer, got "x"'),
        ("fluctuate: maybe", 'line 1: fluctuate: must be true or false, got "maybe"'),
        ("fluctuate: 1", 'line 1: fluctuate: must be true or false, got "1"'),
        ("delay: 5", 'line 1: delay: time: missing unit in duration "5"'),
        ("delay: soon", 'line 1: delay: time: invalid duration "soon"'),
        ("overrides: [a, b]", "line 1: overrides: must be a mapping of field to value, got a list"),
        (
            "overrides:\n  t: {value: 1, min: 0, max: 2}",
            "line 2: overrides.t: override cannot set both value and min/max",
        ),
        ("overrides:\n  t: {min: 1}", "line 2: overrides.t: override needs a value, or both min and max"),
        ("overrides:\n  t: {}", "line 2: overrides.t: override needs a value, or both min and max"),
        ("overrides:\n  t: {min: 3, max: 1}", 'line 2: overrides.t: range for "t" has min 3 greater than max 1'),
        ("overrides:\n  t: {min: .nan, max: 1}", 'line 2: overrides.t: range for "t" must have finite bounds'),
        ("overrides:\n  t: {min: x, max: 1}", 'line 2: overrides.t.min: must be a number, got "x"'),
        ("overrides:\n  t: {min: '1', max: 2}", 'line 2: overrides.t.min: must be a number, got "1"'),
        ("overrides:\n  t: {value: [1]}", "line 2: overrides.t.value: must be a string, got a list"),
        ("overrides:\n  t: {vaule: 1}", 'line 2: overrides.t: unknown key "vaule", want one of value, min, max'),
        ("overrides:\n  t: {value: 1, value: 2}", 'line 2: overrides.t: duplicate key "value"'),
        ("overrides:\n  t: 1\n  t: 2", 'line 3: overrides: duplicate key "t"'),
        ("overrides:\n  t: 1,2", 'line 2: overrides.t: value for "t" must not contain a comma or newline'),
        ("overrides:\n  t: |\n    a\n    b", 'overrides.t: value for "t" must not contain a comma or newline'),
        ("overrides:\n  t:", "line 2: overrides.t: must be a value, or a mapping with value or min/max, got null"),
        (
            "overrides:\n  t: [1]",
            "line 2: overrides.t: must be a value, or a mapping with value or min/max, got a list",
        ),
        ("overrides:\n  '': 1", "line 2: overrides: field name must not be empty"),
        ("overrides:\n  [a]: 1", "line 2: overrides: keys must be scalars, got a list"),
        ("gpus: two", 'line 1: gpus: must be a count or a list of GPU entries, got "two"'),
        ("gpus: 2.0", 'line 1: gpus: must be a count or a list of GPU entries, got "2.0"'),
        ("gpus: 0", "line 1: gpus: gpu count must be between 1 and 255, got 0"),
        ("gpus: 256", "line 1: gpus: gpu count must be between 1 and 255, got 256"),
        ("gpus: []", "line 1: gpus: gpu count must be between 1 and 255, got 0"),
        ("gpus: {a: 1}", "line 1: gpus: must be a count or a list of GPU entries, got a mapping"),
        (
            "gpus:\n  - uuid: a\n    colour: red",
            'line 3: gpus[0]: unknown key "colour", want one of uuid, serial, overrides',
        ),
        ("gpus:\n  - GPU-1", 'line 2: gpus[0]: must be a mapping with uuid, serial or overrides, got "GPU-1"'),
        (
            "gpus:\n  - overrides: {t: {min: 2, max: 1}}",
            'gpus[0].overrides.t: range for "t" has min 2 greater than max 1',
        ),
        ("gpus:\n  - uuid: GPU-A\n  - uuid: gpu-a", 'gpus 0 and 1 share uuid "gpu-a"'),
        ("gpus:\n  - uuid: a,b", 'gpus[0]: value for "uuid" must not contain a comma or newline'),
        (
            "gpus: 2\noverrides: {uuid: x}",
            'field "uuid" is a per-GPU identity and cannot be overridden while gpus is active',
        ),
        ("gpus:\n  - overrides: {index: 3}", 'field "index" is a per-GPU identity'),
        ("extras: [1, 2]", "line 1: extras: must be a mapping, got a list"),
        ("extras:\n  xids:\n    interval: 1m\n    interval: 2m", 'line 4: extras.xids: duplicate key "interval"'),
        ("state: [unclosed", "invalid YAML"),
        ("a: 1\n---\nb: 2", "invalid YAML"),
        (
            "capture: !!python/object:os.system x",
            'capture: unsupported tag "tag:yaml.org,2002:python/object:os.system"',
        ),
        ("overrides: {t: !custom 1}", 'overrides.t: unsupported tag "!custom"'),
        (
            "extras: {a: !!python/name:os.system x}",
            'line 1: extras.a: unsupported tag "tag:yaml.org,2002:python/name:os.system"',
        ),
    ],
    ids=[
        "unknown-top-key",
        "duplicate-top-key",
        "top-level-list",
        "top-level-scalar",
        "empty",
        "comment-only",
        "string-is-list",
        "seed-word",
        "seed-float",
        "seed-bool",
        "seed-quoted",
        "seed-overflow",
        "exit-word",
        "fluctuate-word",
        "fluctuate-int",
        "delay-missing-unit",
        "delay-word",
        "overrides-list",
        "value-and-range",
        "only-min",
        "empty-override-mapping",
        "min-above-max",
        "nan-bound",
        "min-word",
        "min-quoted",
        "value-list",
        "unknown-override-key",
        "duplicate-value-key",
        "duplicate-override-field",
        "value-comma",
        "value-newline",
        "null-value",
        "list-value",
        "empty-field-name",
        "non-scalar-field-name",
        "gpus-word",
        "gpus-float",
        "gpus-zero",
        "gpus-too-many",
        "gpus-empty-list",
        "gpus-mapping",
        "gpu-entry-unknown-key",
        "gpu-entry-scalar",
        "gpu-entry-bad-range",
        "gpu-duplicate-uuid",
        "gpu-uuid-comma",
        "identity-override-with-count",
        "identity-override-in-entry",
        "extras-list",
        "extras-duplicate-key",
        "yaml-syntax",
        "multiple-documents",
        "unsafe-tag",
        "custom-tag-in-override",
        "unsafe-tag-in-extras",
    ],
)
def test_config_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "test.yaml")
    assert str(raised.value).startswith('config "test.yaml": ')
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("t: {min: 1e3, max: 2.5E3}", Range(1000.0, 2500.0), id="exponent-without-sign-is-a-number"),
        pytest.param("t: {min: 0x1p3, max: 0x1p4}", Range(8.0, 16.0), id="go-hex-float-is-a-number"),
        pytest.param("t: {min: 0x10, max: 1_000}", Range(16.0, 1000.0), id="yaml-integers-are-numbers"),
    ],
)
def test_range_bounds_read_numbers_as_go_does(text: str, expected: Range) -> None:
    assert parse_config("overrides:\n  " + text).overrides == {"t": expected}


def test_merge_keys_fill_in_what_an_entry_does_not_set() -> None:
    config = parse_config("gpus:\n  - &base {serial: S-1, uuid: GPU-a}\n  - <<: *base\n    uuid: GPU-b\n")
    assert config.gpus == (GpuEntry(uuid="GPU-a", serial="S-1"), GpuEntry(uuid="GPU-b", serial="S-1"))


ALIAS_BOMB = "extras:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, "
    f"*{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
    for previous, name in zip("abcdefg", "bcdefgh", strict=True)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "extras:\n  seed: !!binary aGk=",
            'line 2: extras.seed: unsupported tag "tag:yaml.org,2002:binary"',
            id="unsupported-tag-in-extras",
        ),
        pytest.param(
            "extras:\n  mig: !!set {a}", 'line 2: extras.mig: unsupported tag "tag:yaml.org,2002:set"', id="set-tag"
        ),
        pytest.param("seed: !!int abc", 'line 1: seed: "abc" is not a valid !!int', id="explicit-tag-bad-value"),
        pytest.param(
            "extras:\n  mig:\n    - gpu: 0\n      gpu: 1",
            'line 4: extras.mig[0]: duplicate key "gpu" (first at line 3)',
            id="duplicate-key-in-extras-list",
        ),
        pytest.param(
            "gpus:\n  - <<: [{uuid: a}, 1]",
            'line 2: gpus[0]: a merge (<<) takes a mapping or a list of mappings, got "1"',
            id="merge-of-a-scalar",
        ),
        pytest.param(
            "seed: 0x" + "f" * 5000,
            "line 1: seed: integer 0x" + "f" * 75 + "... is out of the int64 range",
            id="huge-integer-shown-short",
        ),
        pytest.param(
            "gpus: " + "9" * 5000,
            'line 1: gpus: "' + "9" * 77 + '..." is not a valid !!int',
            id="integer-of-thousands-of-digits",
        ),
        pytest.param(
            "gpus: " + "9" * 25, "line 1: gpus: gpu count must be between 1 and 255, got 999", id="huge-count"
        ),
        pytest.param(ALIAS_BOMB, "the document has more than 100000 values", id="alias-expansion-is-bounded"),
        pytest.param(
            "extras:\n  a: " + "[" * 40 + "]" * 40,
            "line 2: extras.a" + "[0]" * 31 + ": nested deeper than 32 levels",
            id="nesting-is-bounded",
        ),
        pytest.param("extras:\n  a: " + "[" * 5000 + "]" * 5000, "invalid YAML: nested too deeply", id="deep-yaml"),
        pytest.param("extras:\n  a: &x [*x]", "nested deeper than 32 levels", id="recursive-alias"),
    ],
)
def test_document_level_rules_apply_everywhere(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "test.yaml")
    assert message in str(raised.value)


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "fake.yaml"
    path.write_text(textwrap.dedent(FULL), encoding="utf-8")
    assert load_config(path) == parse_config(FULL)


def test_load_config_names_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'failed to read config ".*missing\.yaml": No such file or directory'):
        load_config(tmp_path / "missing.yaml")


def test_load_config_rejects_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"state: \xe9t\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(path)


def test_config_is_immutable() -> None:
    config = parse_config("overrides: {t: 1}")
    with pytest.raises(AttributeError):
        config.state = "load"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.overrides["u"] = Fixed("2")  # type: ignore[index]
