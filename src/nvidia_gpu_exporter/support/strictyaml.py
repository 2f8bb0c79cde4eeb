"""The one strict YAML loader of the web config, the demo config and the fake nvidia-smi's config.

PyYAML's ``safe_load`` keeps the last of two equal keys, turns ``88.50`` into ``88.5`` and forgets where a
value was written, so a typo becomes a setting that silently does nothing. Here a document is composed
once into immutable nodes that know their key path and line: duplicate keys and tags other than the plain
YAML types are errors at any depth, and the readers (:meth:`YamlNode.mapping`, :meth:`~YamlNode.text`,
:meth:`~YamlNode.integer`...) report unknown keys and wrong types as ``line N: key.path: problem``.
A scalar keeps its text as written next to its YAML 1.1 value, for readers that need ``88.50`` as is.

Aliases are expanded (each use gets its own key path), so the number of nodes and the nesting depth are
bounded. PyYAML is imported only when a document is read: the fake nvidia-smi starts per call.
"""

from __future__ import annotations

import abc
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvidia_gpu_exporter._go.strconv import INT64_MAX, INT64_MIN, parse_float
from nvidia_gpu_exporter._go.text import go_quote

if TYPE_CHECKING:
    from types import ModuleType

    from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_NODES = 100_000
"""Values in one document, every use of an alias counted: a bound on what a few lines of aliases can build."""
MAX_DEPTH = 32
"""Nesting levels below the document root; every config here needs fewer than ten."""

ROOT = "top level"
"""How errors name the document root."""

_STANDARD = "tag:yaml.org,2002:"
_SCALAR_TAGS = frozenset(("str", "int", "float", "bool", "null", "timestamp"))
_MERGE_TAG = _STANDARD + "merge"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHOWN_CHARACTERS = 80

ScalarValue = str | int | float | bool | None


class StrictYamlError(ValueError):
    """A document that is not YAML or breaks its schema; the message reads ``line N: key.path: problem``."""


def shorten(text: str) -> str:
    """``text`` as an error shows it: a very long value cut short, so the message stays readable."""
    return text if len(text) <= _SHOWN_CHARACTERS else f"{text[: _SHOWN_CHARACTERS - 3]}..."


def child_path(parent: str, key: str) -> str:
    """``parent.key``, or ``parent["key"]`` for a key that is not a plain word (``overrides["power.draw"]``)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{go_quote(key)}]"


@dataclass(frozen=True, slots=True)
class YamlNode(abc.ABC):
    """One value of a document, where it was written (``path``, 1-based ``line``) and its readers."""

    path: str
    line: int

    @abc.abstractmethod
    def describe(self) -> str:
        """The node as errors show it after "got": ``a mapping``, ``a list``, ``null`` or its quoted text."""

    def fail(self, problem: str) -> StrictYamlError:
        """An error about this node, for the caller to raise."""
        return StrictYamlError(f"line {self.line}: {self.path or ROOT}: {problem}")

    @property
    def is_null(self) -> bool:
        return isinstance(self, YamlScalar) and self.tag == "null"

    def as_mapping(self, expected: str = "a mapping") -> YamlMapping:
        if not isinstance(self, YamlMapping):
            raise self.fail(f"must be {expected}, got {self.describe()}")
        return self

    def mapping(self, allowed: tuple[str, ...], expected: str = "a mapping") -> Entries:
        """The entries of a mapping with a fixed set of keys; any other key is an error."""
        node = self.as_mapping(expected)
        for key, _ in node.entries:
            if key.written not in allowed:
                raise key.fail(f"unknown key {go_quote(key.written)}, want one of {', '.join(allowed)}")
        return Entries(node)

    def pairs(self, expected: str = "a mapping") -> tuple[tuple[YamlScalar, YamlNode], ...]:
        """Key and value nodes of a mapping whose keys are data (user names, field names), in file order."""
        return self.as_mapping(expected).entries

    def items(self) -> tuple[YamlNode, ...]:
        if not isinstance(self, YamlSequence):
            raise self.fail(f"must be a list, got {self.describe()}")
        return self.elements

    def text(self) -> str:
        """A scalar's text as written, whatever YAML type it resolves to: Go's yaml reads a string so."""
        if not isinstance(self, YamlScalar) or self.tag == "null":
            raise self.fail(f"must be a string, got {self.describe()}")
        return self.written

    def integer(self, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
        """A YAML integer (``42``, ``0x2a``, ``+7``; not ``'42'``, ``4.0`` or ``true``) within int64 and the bounds."""
        value = self.value if isinstance(self, YamlScalar) else None
        if not isinstance(self, YamlScalar) or not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"must be an integer, got {self.describe()}")
        if not INT64_MIN <= value <= INT64_MAX:  # shown as written: str() of a huge int can fail
            raise self.fail(f"integer {shorten(self.written)} is out of the int64 range")
        if value < low:
            raise self.fail(f"must be at least {low}, got {value}")
        if value > high:
            raise self.fail(f"must be at most {high}, got {value}")
        return value

    def number(self) -> float:
        """A YAML number, or plain text Go's ``ParseFloat`` reads (``1e6``, ``0x1p-2``, ``inf``); may be infinite.

        YAML 1.1 reads ``1e6`` (no dot) as a string; Go's yaml reads it as a number, and so does this. Quoted
        text stays text. An integer beyond the float range is infinite, as Go's ``ParseFloat`` makes it.
        """
        if isinstance(self, YamlScalar):
            value = self.value
            if isinstance(value, float):
                return value
            if isinstance(value, int) and not isinstance(value, bool):
                try:
                    return float(value)
                except OverflowError:
                    return math.inf if value > 0 else -math.inf
            if self.tag == "str" and self.plain:
                parsed = parse_float(self.written)
                if parsed is not None:
                    return parsed
        raise self.fail(f"must be a number, got {self.describe()}")

    def boolean(self) -> bool:
        value = self.value if isinstance(self, YamlScalar) else None
        if not isinstance(value, bool):
            raise self.fail(f"must be true or false, got {self.describe()}")
        return value


@dataclass(frozen=True, slots=True)
class YamlScalar(YamlNode):
    """A scalar: its text as ``written`` and its ``value`` as YAML 1.1 reads it (the text, for strings and dates).

    ``plain`` is false for quoted and block scalars, which never read as numbers.
    """

    written: str
    value: ScalarValue
    tag: str
    plain: bool

    def describe(self) -> str:
        return "null" if self.tag == "null" else go_quote(shorten(self.written))


@dataclass(frozen=True, slots=True)
class YamlMapping(YamlNode):
    """Key and value nodes in file order; keys are scalars and distinct. A key node's path is the mapping's."""

    entries: tuple[tuple[YamlScalar, YamlNode], ...]

    def describe(self) -> str:
        return "a mapping"


@dataclass(frozen=True, slots=True)
class YamlSequence(YamlNode):
    elements: tuple[YamlNode, ...]

    def describe(self) -> str:
        return "a list"


class Entries(Mapping[str, YamlNode]):
    """A schema mapping's values by key, null values left out: null means "not set", so the default applies."""

    __slots__ = ("_node", "_values")

    def __init__(self, node: YamlMapping) -> None:
        self._node = node
        self._values = {key.written: value for key, value in node.entries if not value.is_null}

    def __getitem__(self, key: str) -> YamlNode:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def missing(self, key: str, problem: str) -> StrictYamlError:
        """An error about an absent key, at the mapping's line."""
        return StrictYamlError(f"line {self._node.line}: {child_path(self._node.path, key)}: {problem}")

    def required(self, key: str) -> YamlNode:
        if key not in self._values:
            raise self.missing(key, "required")
        return self._values[key]


def _import_yaml() -> ModuleType:
    """PyYAML without libyaml's binding: composing goes through the pure-Python ``SafeLoader`` here, yet
    ``import yaml`` loads the binding and Cython's runtime whenever they are installed, about 0.2 MiB of
    resident memory in every process that reads a config (issue 35). A ``None`` in ``sys.modules`` makes
    that import fail, which PyYAML takes for "no libyaml"."""
    blocked = "yaml" not in sys.modules and "yaml._yaml" not in sys.modules
    if blocked:
        sys.modules["yaml._yaml"] = None  # type: ignore[assignment]
    try:
        import yaml  # noqa: PLC0415 - only a config being read needs PyYAML
    finally:
        if blocked:
            del sys.modules["yaml._yaml"]
    return yaml


def load_yaml(text: str) -> YamlNode | None:
    """Compose one YAML document strictly; ``None`` when it has no content (empty, or comments only)."""
    yaml = _import_yaml()

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise StrictYamlError(_syntax_error(error, text)) from error
    except RecursionError as error:
        raise StrictYamlError("invalid YAML: nested too deeply") from error
    if root is None:
        return None
    return _Composer(yaml).node(root, "", 0)


def _at(line: int, column: int) -> str:
    return f"line {line + 1}, column {column + 1}"


def _syntax_error(error: Exception, text: str) -> str:
    """PyYAML's error on one line, where it was found first: its own text spans several lines, quotes the
    document and calls it ``"<unicode string>"``, where the caller's message puts the file's name."""
    import yaml  # noqa: PLC0415 - loaded by the caller already

    if isinstance(error, yaml.reader.ReaderError):  # a character YAML does not allow: said by offset
        before = text[: error.position]
        where = _at(before.count("\n"), len(before) - before.rfind("\n") - 1)
        return f"{where}: invalid YAML: unacceptable character #x{error.character:04x}: {error.reason}"
    if isinstance(error, yaml.MarkedYAMLError):
        problem, mark = error.problem or error.context, error.problem_mark or error.context_mark
        context = ""
        if error.problem and error.context:
            shown = error.context_mark
            context = f" ({error.context} at {_at(shown.line, shown.column)})" if shown else f" ({error.context})"
        if mark is not None:
            return f"{_at(mark.line, mark.column)}: invalid YAML: {problem}{context}"
        return f"invalid YAML: {problem}{context}"
    return "invalid YAML: " + " ".join(str(error).split())


class _Composer:
    """Turns PyYAML's nodes into :class:`YamlNode`, checking tags, keys, the size and the depth on the way."""

    def __init__(self, yaml: ModuleType) -> None:
        self._scalar_node: type[ScalarNode] = yaml.ScalarNode
        self._sequence_node: type[SequenceNode] = yaml.SequenceNode
        self._mapping_node: type[MappingNode] = yaml.MappingNode
        constructor = yaml.constructor.SafeConstructor()
        self._construct = {
            "int": constructor.construct_yaml_int,
            "float": constructor.construct_yaml_float,
            "bool": constructor.construct_yaml_bool,
            "null": constructor.construct_yaml_null,
        }
        self._left = MAX_NODES

    def _describe(self, raw: Node) -> str:
        if isinstance(raw, self._mapping_node):
            return "a mapping"
        return "a list" if isinstance(raw, self._sequence_node) else go_quote(shorten(str(raw.value)))

    def _fail(self, raw: Node, path: str, problem: str) -> StrictYamlError:
        return StrictYamlError(f"line {raw.start_mark.line + 1}: {path or ROOT}: {problem}")

    def node(self, raw: Node, path: str, depth: int) -> YamlNode:
        self._left -= 1
        if self._left < 0:
            raise StrictYamlError(f"the document has more than {MAX_NODES} values (every use of an alias counts)")
        if depth > MAX_DEPTH:
            raise self._fail(raw, path, f"nested deeper than {MAX_DEPTH} levels")
        line = raw.start_mark.line + 1
        if isinstance(raw, self._scalar_node):
            return self._scalar(raw, path)
        if raw.tag != _STANDARD + ("seq" if isinstance(raw, self._sequence_node) else "map"):
            raise self._fail(raw, path, f"unsupported tag {go_quote(raw.tag)}")
        if isinstance(raw, self._sequence_node):
            items = tuple(self.node(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(raw.value))
            return YamlSequence(path, line, items)
        assert isinstance(raw, self._mapping_node)  # composed nodes are scalars, sequences or mappings
        entries = tuple(
            (key, self.node(value, child_path(path, key.written), depth + 1))
            for key, value in self._entries(raw, path, depth)
        )
        return YamlMapping(path, line, entries)

    def _scalar(self, raw: ScalarNode, path: str) -> YamlScalar:
        tag = raw.tag.removeprefix(_STANDARD) if raw.tag.startswith(_STANDARD) else raw.tag
        if tag not in _SCALAR_TAGS:
            raise self._fail(raw, path, f"unsupported tag {go_quote(raw.tag)}")
        text = str(raw.value)
        value: ScalarValue = text
        if tag in self._construct:
            try:
                value = self._construct[tag](raw)
            except (ValueError, KeyError, IndexError) as error:
                raise self._fail(raw, path, f"{go_quote(shorten(text))} is not a valid !!{tag}") from error
        return YamlScalar(path, raw.start_mark.line + 1, text, value, tag, raw.style is None)

    def _entries(self, raw: MappingNode, path: str, depth: int) -> list[tuple[YamlScalar, Node]]:
        """Keys and value nodes of a mapping, ``<<`` merges resolved: explicit keys win, then earlier merges."""
        explicit: list[tuple[YamlScalar, Node]] = []
        seen: dict[str, int] = {}
        merges: list[Node] = []
        for key_raw, value_raw in raw.value:
            if key_raw.tag == _MERGE_TAG:
                line = key_raw.start_mark.line + 1
                if "<<" in seen:
                    raise self._fail(key_raw, path, f'duplicate key "<<" (first at line {seen["<<"]})')
                seen["<<"] = line
                merges = value_raw.value if isinstance(value_raw, self._sequence_node) else [value_raw]
                continue
            if not isinstance(key_raw, self._scalar_node):
                raise self._fail(key_raw, path, f"keys must be scalars, got {self._describe(key_raw)}")
            key = self._scalar(key_raw, path)
            if key.written in seen:
                raise key.fail(f"duplicate key {go_quote(key.written)} (first at line {seen[key.written]})")
            seen[key.written] = key.line
            explicit.append((key, value_raw))
        merged: list[tuple[YamlScalar, Node]] = []
        for source in merges:
            if not isinstance(source, self._mapping_node):
                raise self._fail(
                    source, path, f"a merge (<<) takes a mapping or a list of mappings, got {self._describe(source)}"
                )
            if depth + 1 > MAX_DEPTH:
                raise self._fail(source, path, f"nested deeper than {MAX_DEPTH} levels")
            for key, value in self._entries(source, path, depth + 1):
                if key.written not in seen:
                    seen[key.written] = key.line
                    merged.append((key, value))
        return merged + explicit
