"""Strict YAML config for the fake ``nvidia-smi``: the settings of its flags, plus the demo's ``extras``.

Strict on purpose: an unknown or misspelt key, a duplicate key or a value of the wrong shape is an error that
names the key path and line, rather than a setting that silently does nothing. The document is read by the
project's one strict loader (:mod:`~nvidia_gpu_exporter.support.strictyaml`); override values are its
scalars' text as written, so ``temperature.gpu: 88.50`` serves ``88.50`` (PyYAML's ``safe_load`` would
turn it into the float ``88.5``). ``extras`` is kept as its node for the demo backend, which validates it
itself. PyYAML is imported only when a config is read, so the fake's per-call start stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
from nvidia_gpu_exporter._go.strconv import DECIMAL_INT, parse_int
from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.capture.engine import (
    DEFAULT_STATE,
    MAX_GPUS,
    Fixed,
    Generator,
    GpuEntry,
    Range,
    Scenario,
    ScenarioError,
    check_generator,
    validate_settings,
)
from nvidia_gpu_exporter.support.strictyaml import (
    StrictYamlError,
    YamlMapping,
    YamlNode,
    YamlScalar,
    YamlSequence,
    child_path,
    load_yaml,
    shorten,
)

if TYPE_CHECKING:
    from nvidia_gpu_exporter.capture.format import Capture

TOP_LEVEL_KEYS = (
    "capture",
    "state",
    "seed",
    "overrides",
    "gpus",
    "fluctuate",
    "exit",
    "delay",
    "stderr-msg",
    "fail-arg",
    "extras",
)
GPU_ENTRY_KEYS = ("uuid", "serial", "overrides")
OVERRIDE_KEYS = ("value", "min", "max")


class ConfigError(ValueError):
    """The config file cannot be read or does not follow the schema; the message names the key path."""


@dataclass(frozen=True, slots=True)
class FakeSmiConfig:
    """A parsed config. ``None`` (or ``False``) means "not set": a flag or the built-in default applies.

    ``delay_ns`` is the parsed ``delay``. ``extras`` is the ``extras`` block's node (ignored by the fake).
    """

    capture: str | None = None
    state: str | None = None
    seed: int | None = None
    overrides: Mapping[str, Generator] = field(default_factory=dict)
    gpus: int | tuple[GpuEntry, ...] | None = None
    fluctuate: bool = False
    exit: int | None = None
    delay_ns: int | None = None
    stderr_msg: str | None = None
    fail_arg: str | None = None
    extras: YamlMapping | None = None
    # The line of each top-level key and override field, by key path: a check made after parsing (the demo's)
    # names the line as the parser's own errors do.
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))
        object.__setattr__(self, "lines", MappingProxyType(dict(self.lines)))

    def where(self, path: str) -> str:
        """``line N: path`` for a key path of the document (``path`` alone for one it does not have)."""
        line = self.lines.get(path)
        return f"line {line}: {path}" if line else path

    def scenario(self, capture: Capture) -> Scenario:
        """The answering settings of this config applied to a capture (failure injection left out)."""
        return Scenario(
            capture=capture,
            state=self.state or DEFAULT_STATE,
            seed=self.seed,
            overrides=self.overrides,
            gpus=self.gpus,
            fluctuate=self.fluctuate,
        )


def load_config(path: str | os.PathLike[str]) -> FakeSmiConfig:
    """Read and strictly parse a config file."""
    shown = go_quote(os.fspath(path))
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError(f"failed to read config {shown}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"failed to read config {shown}: not UTF-8 text ({exc.reason})") from exc
    return parse_config(text, os.fspath(path))


def parse_config(text: str, source: str = "<config>") -> FakeSmiConfig:
    """Strictly parse a config document; ``source`` names it in error messages."""
    try:
        root = load_yaml(text)
        if root is None:
            raise StrictYamlError("the config is empty; expected a mapping of settings")
        config = _document(root)
        validate_settings(config.overrides, config.gpus)
    except (StrictYamlError, ScenarioError) as exc:
        raise ConfigError(f"config {go_quote(source)}: {exc}") from exc
    return config


def _document(root: YamlNode) -> FakeSmiConfig:
    """The settings that are set; the others keep :class:`FakeSmiConfig`'s defaults."""
    entries = root.mapping(TOP_LEVEL_KEYS, "a mapping of settings")
    lines = {key.written: key.line for key, _ in root.pairs()}
    values: dict[str, Any] = {"lines": lines}
    for key in ("capture", "state", "stderr-msg", "fail-arg"):
        if key in entries and (text := entries[key].text()):
            values[key.replace("-", "_")] = text
    for key in ("seed", "exit"):
        if key in entries:
            values[key] = entries[key].integer()
    if "fluctuate" in entries:
        values["fluctuate"] = entries["fluctuate"].boolean()
    if "delay" in entries and (delay := _delay(entries["delay"])) is not None:
        values["delay_ns"] = delay
    if "overrides" in entries:
        values["overrides"] = _overrides(entries["overrides"], lines)
    if "gpus" in entries:
        values["gpus"] = _gpus(entries["gpus"], lines)
    if "extras" in entries:
        values["extras"] = entries["extras"].as_mapping()
    return FakeSmiConfig(**values)


def _delay(node: YamlNode) -> int | None:
    text = node.text()
    if not text:
        return None
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise node.fail(str(exc)) from exc


def _overrides(node: YamlNode, lines: dict[str, int]) -> dict[str, Generator]:
    result: dict[str, Generator] = {}
    for key, value in node.pairs("a mapping of field to value"):
        if not key.written:
            raise key.fail("field name must not be empty")
        lines[child_path(key.path, key.written)] = key.line
        generator = _override(value)
        problem = check_generator(key.written, generator)
        if problem:
            raise value.fail(problem)
        result[key.written] = generator
    return result


def _override(node: YamlNode) -> Generator:
    if isinstance(node, YamlScalar) and not node.is_null:
        return Fixed(node.written)
    if not isinstance(node, YamlMapping):
        raise node.fail(
            f"must be a value, or a mapping with value or min/max, got {node.describe()} (write '' for an empty value)"
        )
    entries = node.mapping(OVERRIDE_KEYS)
    value = entries["value"].text() if "value" in entries else None
    low = entries["min"].number() if "min" in entries else None
    high = entries["max"].number() if "max" in entries else None
    if value is not None and (low is not None or high is not None):
        raise node.fail("override cannot set both value and min/max")
    if value is not None:
        return Fixed(value)
    if low is None or high is None:
        raise node.fail("override needs a value, or both min and max")
    return Range(low, high)


def _gpus(node: YamlNode, lines: dict[str, int]) -> int | tuple[GpuEntry, ...]:
    """A count (``3``, ``'3'``), or one entry per simulated GPU."""
    if isinstance(node, YamlSequence):
        entries = tuple(_gpu_entry(item, lines) for item in node.items())
        if not 1 <= len(entries) <= MAX_GPUS:
            raise node.fail(f"gpu count must be between 1 and {MAX_GPUS}, got {len(entries)}")
        return entries
    if not isinstance(node, YamlScalar) or not DECIMAL_INT.fullmatch(node.written):
        raise node.fail(f"must be a count or a list of GPU entries, got {node.describe()}")
    count = parse_int(node.written, 1, MAX_GPUS)
    if count is None:
        raise node.fail(f"gpu count must be between 1 and {MAX_GPUS}, got {shorten(node.written)}")
    return count


def _gpu_entry(node: YamlNode, lines: dict[str, int]) -> GpuEntry:
    entries = node.mapping(GPU_ENTRY_KEYS, "a mapping with uuid, serial or overrides")
    values: dict[str, Any] = {key: entries[key].text() for key in ("uuid", "serial") if key in entries}
    if "overrides" in entries:
        values["overrides"] = _overrides(entries["overrides"], lines)
    return GpuEntry(**values)
