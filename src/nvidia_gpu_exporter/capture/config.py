"""Strict YAML config for the fake ``nvidia-smi``: the settings of its flags, plus the demo's ``extras``.

Strict on purpose: an unknown or misspelt key, a duplicate key or a value of the wrong shape is an error that
names the key path and line, rather than a setting that silently does nothing. Scalars are read from the
YAML node text, so an override ``temperature.gpu: 88.50`` serves ``88.50`` exactly as written (PyYAML's
``safe_load`` would turn it into the float ``88.5``); ``extras`` is kept as the plain ``safe_load``-style
mapping for the demo backend, which validates it itself. PyYAML is imported only when a config is read, so
the fake's per-call start stays fast.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
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

if TYPE_CHECKING:
    from yaml.nodes import Node

    from nvidia_gpu_exporter.capture.format import Capture

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_STANDARD_TAG = "tag:yaml.org,2002:"
_NULL_TAG = _STANDARD_TAG + "null"
_SCALAR_TAGS = frozenset(_STANDARD_TAG + name for name in ("str", "int", "float", "bool", "timestamp"))
_GO_INT = re.compile(r"[+-]?[0-9]+")

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

    ``delay_ns`` is the parsed ``delay``. ``extras`` is the raw ``extras`` block (ignored by the fake).
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
    extras: Mapping[Any, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

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
    import yaml  # noqa: PLC0415 - only configs need PyYAML; keeps the fake's per-call start fast

    prefix = f"config {go_quote(source)}"
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{prefix}: invalid YAML: {exc}") from exc
    try:
        return _Reader().document(root)
    except _KeyError as exc:
        raise ConfigError(f"{prefix}: {exc}") from exc


class _KeyError(Exception):
    """A schema problem at one node; the message already carries line and key path."""


def _fail(node: Node, path: str, problem: str) -> _KeyError:
    return _KeyError(f"line {node.start_mark.line + 1}: {path}: {problem}")


class _Reader:
    """Walks the composed YAML nodes, checking every key against the schema."""

    def __init__(self) -> None:
        import yaml  # noqa: PLC0415 - see parse_config

        self._yaml = yaml
        self._constructor = yaml.constructor.SafeConstructor()

    def _kind(self, node: Node) -> str:
        if isinstance(node, self._yaml.MappingNode):
            return "a mapping"
        if isinstance(node, self._yaml.SequenceNode):
            return "a list"
        return "null" if node.tag == _NULL_TAG else go_quote(str(node.value))

    def _is_null(self, node: Node) -> bool:
        return isinstance(node, self._yaml.ScalarNode) and node.tag == _NULL_TAG

    def _mapping(self, node: Node, path: str, allowed: tuple[str, ...]) -> dict[str, Node]:
        """The mapping's entries by key, rejecting unknown and duplicate keys."""
        if not isinstance(node, self._yaml.MappingNode):
            raise _fail(node, path, f"must be a mapping, got {self._kind(node)}")
        entries: dict[str, Node] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node, path)
            if key not in allowed:
                raise _fail(key_node, path, f"unknown key {go_quote(key)}, want one of {', '.join(allowed)}")
            if key in entries:
                raise _fail(key_node, path, f"duplicate key {go_quote(key)}")
            entries[key] = value_node
        return entries

    def _key(self, node: Node, path: str) -> str:
        if not isinstance(node, self._yaml.ScalarNode):
            raise _fail(node, path, f"keys must be scalars, got {self._kind(node)}")
        return str(node.value)

    def _text(self, node: Node, path: str) -> str | None:
        """A scalar's text as written (``None`` for null), as Go's yaml decodes a scalar into a string."""
        if self._is_null(node):
            return None
        if not isinstance(node, self._yaml.ScalarNode):
            raise _fail(node, path, f"must be a scalar, got {self._kind(node)}")
        if node.tag not in _SCALAR_TAGS:
            raise _fail(node, path, f"unsupported tag {go_quote(node.tag)}")
        return str(node.value)

    def _construct(self, node: Node, path: str) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except self._yaml.YAMLError as exc:
            raise _fail(node, path, f"invalid value: {exc}") from exc

    def _int(self, node: Node, path: str) -> int | None:
        if self._is_null(node):
            return None
        value = self._construct(node, path) if isinstance(node, self._yaml.ScalarNode) else None
        if not isinstance(value, int) or isinstance(value, bool):
            raise _fail(node, path, f"must be an integer, got {self._kind(node)}")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise _fail(node, path, f"integer {value} is out of the int64 range")
        return value

    def _float(self, node: Node, path: str) -> float | None:
        if self._is_null(node):
            return None
        value = self._construct(node, path) if isinstance(node, self._yaml.ScalarNode) else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _fail(node, path, f"must be a number, got {self._kind(node)}")
        try:
            return float(value)
        except OverflowError as exc:
            raise _fail(node, path, f"number {value} is too large") from exc

    def _bool(self, node: Node, path: str) -> bool | None:
        if self._is_null(node):
            return None
        value = self._construct(node, path) if isinstance(node, self._yaml.ScalarNode) else None
        if not isinstance(value, bool):
            raise _fail(node, path, f"must be true or false, got {self._kind(node)}")
        return value

    def _check_duplicates(self, node: Node, path: str, seen: set[int]) -> None:
        """Reject duplicate keys anywhere below ``node`` (PyYAML would silently keep the last one)."""
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, self._yaml.MappingNode):
            keys: set[tuple[str, str]] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, self._yaml.ScalarNode):
                    key = (key_node.tag, str(key_node.value))
                    if key in keys:
                        raise _fail(key_node, path, f"duplicate key {go_quote(key[1])}")
                    keys.add(key)
                self._check_duplicates(value_node, f"{path}.{key_node.value}", seen)
        elif isinstance(node, self._yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._check_duplicates(item, f"{path}[{index}]", seen)

    def document(self, root: Node | None) -> FakeSmiConfig:
        if root is None:
            raise _KeyError("the config is empty; expected a mapping of settings")
        if not isinstance(root, self._yaml.MappingNode):
            raise _fail(root, "top level", f"must be a mapping of settings, got {self._kind(root)}")
        entries = self._mapping(root, "top level", TOP_LEVEL_KEYS)
        values: dict[str, Any] = {}
        for key in ("capture", "state", "stderr-msg", "fail-arg"):
            if key in entries:
                values[key.replace("-", "_")] = self._text(entries[key], key) or None
        for key in ("seed", "exit"):
            if key in entries:
                values[key] = self._int(entries[key], key)
        if "fluctuate" in entries:
            values["fluctuate"] = bool(self._bool(entries["fluctuate"], "fluctuate"))
        if "delay" in entries:
            values["delay_ns"] = self._delay(entries["delay"])
        if "overrides" in entries:
            values["overrides"] = self._overrides(entries["overrides"], "overrides")
        if "gpus" in entries:
            values["gpus"] = self._gpus(entries["gpus"])
        if "extras" in entries:
            values["extras"] = self._extras(entries["extras"])
        config = FakeSmiConfig(**values)
        try:
            validate_settings(config.overrides, config.gpus)
        except ScenarioError as exc:
            raise _KeyError(str(exc)) from exc
        return config

    def _delay(self, node: Node) -> int | None:
        text = self._text(node, "delay")
        if not text:
            return None
        try:
            return parse_duration(text)
        except DurationError as exc:
            raise _fail(node, "delay", str(exc)) from exc

    def _overrides(self, node: Node, path: str) -> dict[str, Generator]:
        if self._is_null(node):
            return {}
        if not isinstance(node, self._yaml.MappingNode):
            raise _fail(node, path, f"must be a mapping of field to value, got {self._kind(node)}")
        result: dict[str, Generator] = {}
        for key_node, value_node in node.value:
            name = self._key(key_node, path)
            where = f"{path}[{go_quote(name)}]"
            if name in result:
                raise _fail(key_node, path, f"duplicate key {go_quote(name)}")
            if not name:
                raise _fail(key_node, path, "field name must not be empty")
            generator = self._override(value_node, name, where)
            problem = check_generator(name, generator)
            if problem:
                raise _fail(value_node, where, problem)
            result[name] = generator
        return result

    def _override(self, node: Node, name: str, where: str) -> Generator:
        if isinstance(node, self._yaml.ScalarNode) and not self._is_null(node):
            return Fixed(self._text(node, where) or "")
        if not isinstance(node, self._yaml.MappingNode):
            raise _fail(
                node,
                where,
                f"must be a value, or a mapping with value or min/max, got {self._kind(node)} "
                "(write '' for an empty value)",
            )
        entries = self._mapping(node, where, OVERRIDE_KEYS)
        value = self._text(entries["value"], f"{where}.value") if "value" in entries else None
        low = self._float(entries["min"], f"{where}.min") if "min" in entries else None
        high = self._float(entries["max"], f"{where}.max") if "max" in entries else None
        if value is not None and (low is not None or high is not None):
            raise _fail(node, where, "override cannot set both value and min/max")
        if value is not None:
            return Fixed(value)
        if low is None or high is None:
            raise _fail(node, where, "override needs a value, or both min and max")
        return Range(low, high)

    def _gpus(self, node: Node) -> int | tuple[GpuEntry, ...] | None:
        if self._is_null(node):
            return None
        if isinstance(node, self._yaml.ScalarNode):
            text = str(node.value)
            if not _GO_INT.fullmatch(text):
                raise _fail(node, "gpus", f"must be a count or a list of GPU entries, got {go_quote(text)}")
            count = int(text)
            if not 1 <= count <= MAX_GPUS:
                raise _fail(node, "gpus", f"gpu count must be between 1 and {MAX_GPUS}, got {count}")
            return count
        if not isinstance(node, self._yaml.SequenceNode):
            raise _fail(node, "gpus", f"must be a count or a list of GPU entries, got {self._kind(node)}")
        entries = tuple(self._gpu_entry(item, f"gpus[{index}]") for index, item in enumerate(node.value))
        if not 1 <= len(entries) <= MAX_GPUS:
            raise _fail(node, "gpus", f"gpu count must be between 1 and {MAX_GPUS}, got {len(entries)}")
        return entries

    def _gpu_entry(self, node: Node, path: str) -> GpuEntry:
        if not isinstance(node, self._yaml.MappingNode):
            raise _fail(node, path, f"must be a mapping with uuid, serial or overrides, got {self._kind(node)}")
        entries = self._mapping(node, path, GPU_ENTRY_KEYS)
        uuid = self._text(entries["uuid"], f"{path}.uuid") if "uuid" in entries else None
        serial = self._text(entries["serial"], f"{path}.serial") if "serial" in entries else None
        overrides = self._overrides(entries["overrides"], f"{path}.overrides") if "overrides" in entries else {}
        return GpuEntry(uuid=uuid or "", serial=serial or "", overrides=overrides)

    def _extras(self, node: Node) -> Mapping[Any, Any] | None:
        if self._is_null(node):
            return None
        if not isinstance(node, self._yaml.MappingNode):
            raise _fail(node, "extras", f"must be a mapping, got {self._kind(node)}")
        self._check_duplicates(node, "extras", set())
        value = self._construct(node, "extras")
        if not isinstance(value, Mapping):
            raise _fail(node, "extras", "must be a mapping")
        return value
