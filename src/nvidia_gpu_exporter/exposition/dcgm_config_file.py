"""dcgm-exporter's YAML ``--config-file`` (``DCGM_EXPORTER_CONFIG_FILE``), schema versions 1 and 2 (docs/dcgm.md,
"The YAML config file").

Read once at startup, under the environment and the flags (flags > environment > file > defaults, as dcgm-exporter
reads it). What maps onto this exporter becomes ``Config`` values: the metric source (a counters file or inline
fields), the collection interval, the scrape limit and the exporter's own metrics. What has no counterpart here (DCGM
field-watch retention, per-field cadences, bind/unbind detection) is reported back to be warned about once, as is a
key outside the schema as documented. What dcgm-exporter itself refuses is refused with the file and line: a file
that is not one YAML mapping, a repeated key, a wrong version, a metric source with both or neither of ``file`` and
``fields``, a non-positive or sub-millisecond interval, the two versions' collection blocks mixed. Anchors and aliases
are refused too, and the file is bounded in bytes, so a hostile file cannot grow startup's memory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
from nvidia_gpu_exporter._go.strconv import parse_int
from nvidia_gpu_exporter.exposition.dcgm_counters import Counter, CountersError, counter_of

MAX_BYTES = 64 * 1024  # dcgm-exporter's own examples are a few hundred bytes
VERSIONS = (1, 2)
_MILLISECOND_NS = 1_000_000
_ALL_FIELDS = "*"  # a version 2 collection including every field supplies the default cadence
_NO_WATCHES = "there are no DCGM field watches here: each collection reads the GPUs afresh and keeps no samples"
_ONE_CADENCE = "every field is read at each collection interval here: there are no per-field cadences"
_NO_BIND_WATCH = "GPU bind/unbind events are not watched"

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"


class DcgmConfigError(ValueError):
    """The file cannot be read, or dcgm-exporter would refuse it; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class DcgmConfigSettings:
    """The file's ``Config`` values, and each setting accepted without effect as ``(key, line, why)``."""

    fields: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[tuple[str, int, str], ...] = ()


class _Reader:
    """Walks the composed YAML tree, keeping the path for every message."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fields: dict[str, Any] = {}
        self.ignored: list[tuple[str, int, str]] = []

    def error(self, node: yaml.Node, text: str) -> DcgmConfigError:
        return DcgmConfigError(f"{self.path}:{node.start_mark.line + 1}: {text}")

    def ignore(self, key: str, node: yaml.Node, why: str) -> None:
        self.ignored.append((key, node.start_mark.line + 1, why))

    def mapping(self, node: yaml.Node, key: str, known: tuple[str, ...]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """A mapping's entries by key; a repeated key is refused, one outside ``known`` is reported and dropped."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{key or 'the file'} must be a mapping")
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(key_node, "mapping keys must be scalars")
            name = key_node.value
            where = f"{key}.{name}" if key else name
            if name in entries:
                first = entries[name][0].start_mark.line + 1
                raise self.error(key_node, f"duplicate key {where!r}; first defined at line {first}")
            entries[name] = (key_node, value)
            if name not in known:
                self.ignore(where, key_node, "not a key of dcgm-exporter's YAML schema as documented: ignored")
        return {name: entry for name, entry in entries.items() if name in known}

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{key} must be a list")
        return list(node.value)

    def scalar(self, node: yaml.Node, key: str, tags: tuple[str, ...], kind: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in tags:
            raise self.error(node, f"{key} must be {kind}")
        return str(node.value).strip()

    def text(self, node: yaml.Node, key: str) -> str:
        return self.scalar(node, key, (_STR,), "a string")

    def integer(self, node: yaml.Node, key: str) -> int:
        number = parse_int(self.scalar(node, key, (_INT,), "an integer"))
        if number is None:
            raise self.error(node, f"{key} must be a 64-bit integer")
        return number

    def boolean(self, node: yaml.Node, key: str) -> bool:
        return self.scalar(node, key, (_BOOL,), "true or false").lower() in ("true", "yes", "on", "y")

    def interval_ns(self, node: yaml.Node, key: str) -> int:
        """A positive Go duration in whole milliseconds, as dcgm-exporter stores its intervals."""
        text = self.scalar(node, key, (_STR, _INT), "a duration")
        try:
            duration = parse_duration(text)
        except DurationError as error:
            raise self.error(node, f"{key}: {error}") from error
        if duration <= 0:
            raise self.error(node, f"{key}: must be greater than 0")
        if duration % _MILLISECOND_NS:
            raise self.error(node, f"{key}: must be expressed in whole milliseconds or larger")
        return duration

    def duration_ns(self, node: yaml.Node, key: str) -> int:
        text = self.scalar(node, key, (_STR, _INT), "a duration")
        try:
            return parse_duration(text)
        except DurationError as error:
            raise self.error(node, f"{key}: {error}") from error


def read_dcgm_config_file(path: str) -> DcgmConfigSettings:
    """The settings of dcgm-exporter's YAML config file at ``path``; a :class:`DcgmConfigError` names what is wrong."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise DcgmConfigError(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise DcgmConfigError(f"cannot read the config file {path}: {error.strerror or error}") from error
    if len(data) > MAX_BYTES:
        raise DcgmConfigError(f"{path}: larger than {MAX_BYTES} bytes: not a dcgm-exporter config file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DcgmConfigError(f"{path}:{line}: not UTF-8 text") from error
    return parse_dcgm_config(text, path)


def _compose(text: str, path: str) -> yaml.Node:
    """The one YAML document of ``text``, without aliases (which could make a small file a large tree)."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                line = f":{event.start_mark.line + 1}" if event.start_mark is not None else ""
                raise DcgmConfigError(f"{path}{line}: YAML anchors and aliases are not accepted")
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise DcgmConfigError(f"{path}{line}: not YAML ({error.problem or error.context})") from error
    except yaml.YAMLError as error:
        raise DcgmConfigError(f"{path}: not YAML ({error})") from error
    if len(documents) != 1 or documents[0] is None:
        raise DcgmConfigError(f"{path}: expected one YAML document, found {len(documents)}")
    return documents[0]


def parse_dcgm_config(text: str, path: str) -> DcgmConfigSettings:
    """The settings of a config file's text (``path`` names it in messages)."""
    reader = _Reader(path)
    root = _compose(text, path)
    top = reader.mapping(root, "", ("version", "metrics", "collection", "collections", "sources", "server"))
    if "version" not in top:
        raise reader.error(root, f"version must be {' or '.join(map(str, VERSIONS))}")
    version_node = top["version"][1]
    version = reader.integer(version_node, "version")
    if version not in VERSIONS:
        raise reader.error(version_node, f"version must be {' or '.join(map(str, VERSIONS))}, got {version}")
    if version == 1 and "collections" in top:
        raise reader.error(top["collections"][0], "version 1 accepts only the singular collection block")
    if version == 2 and "collection" in top:
        raise reader.error(top["collection"][0], "version 2 uses collections; the two schemas cannot be mixed")
    if "metrics" in top:
        _metrics(reader, top["metrics"][1])
    if "collection" in top:
        _collection(reader, top["collection"][1])
    if "collections" in top:
        _collections(reader, top["collections"][1])
    if "sources" in top:
        _sources(reader, top["sources"][1], "sources")
    if "server" in top:
        server = reader.mapping(top["server"][1], "server", ("maxConcurrentScrapes",))
        if "maxConcurrentScrapes" in server:
            node = server["maxConcurrentScrapes"][1]
            limit = reader.integer(node, "server.maxConcurrentScrapes")
            if limit <= 0:
                raise reader.error(node, f"server.maxConcurrentScrapes must be greater than 0, got {limit}")
            reader.fields["max_requests"] = limit
    return DcgmConfigSettings(dict(reader.fields), tuple(reader.ignored))


def _metrics(reader: _Reader, node: yaml.Node) -> None:
    metrics = reader.mapping(node, "metrics", ("file", "fields", "enableExporterMetrics"))
    if "enableExporterMetrics" in metrics:
        on = reader.boolean(metrics["enableExporterMetrics"][1], "metrics.enableExporterMetrics")
        reader.fields["exporter_metrics"] = on
    file = reader.text(metrics["file"][1], "metrics.file") if "file" in metrics else ""
    fields = reader.sequence(metrics["fields"][1], "metrics.fields") if "fields" in metrics else []
    if bool(file) == bool(fields):
        raise reader.error(node, "metrics must specify exactly one of file or fields")
    if file:
        reader.fields.update(dcgm_collectors=file, dcgm_inline_counters=())
        return
    counters: list[Counter] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(fields):
        key = f"metrics.fields[{index}]"
        cells = reader.mapping(entry, key, ("name", "prometheusType", "help"))
        record = {name: reader.text(value, f"{key}.{name}") for name, (_, value) in cells.items()}
        for name in ("name", "prometheusType", "help"):
            if not record.get(name):
                raise reader.error(entry, f"{key}.{name} is required")
        if record["name"] in seen:
            raise reader.error(entry, f"{key}.name duplicates metrics.fields[{seen[record['name']]}].name")
        seen[record["name"]] = index
        line = entry.start_mark.line + 1
        try:
            counters.append(counter_of(record["name"], record["prometheusType"], record["help"], reader.path, line))
        except CountersError as error:
            raise DcgmConfigError(str(error)) from error
    reader.fields.update(dcgm_collectors="", dcgm_inline_counters=tuple(counters))


def _collection(reader: _Reader, node: yaml.Node) -> None:
    collection = reader.mapping(node, "collection", ("interval", "watchGroups"))
    if "interval" in collection:
        reader.fields["collect_interval_ns"] = reader.interval_ns(collection["interval"][1], "collection.interval")
    if "watchGroups" in collection:
        names: set[str] = set()
        for index, entry in enumerate(reader.sequence(collection["watchGroups"][1], "collection.watchGroups")):
            key = f"collection.watchGroups[{index}]"
            group = reader.mapping(entry, key, ("name", "interval", "fields"))
            name = reader.text(group["name"][1], f"{key}.name") if "name" in group else ""
            if not name:
                raise reader.error(entry, f"{key}.name is required")
            if name in names:
                raise reader.error(entry, f"{key}.name {name!r} is duplicated")
            names.add(name)
            if "interval" not in group:
                raise reader.error(entry, f"{key}.interval is required")
            reader.interval_ns(group["interval"][1], f"{key}.interval")
            fields = reader.sequence(group["fields"][1], f"{key}.fields") if "fields" in group else []
            if not fields:
                raise reader.error(entry, f"{key}.fields must not be empty")
            for number, each in enumerate(fields):
                if not reader.text(each, f"{key}.fields[{number}]"):
                    raise reader.error(each, f"{key}.fields[{number}] is required")
            reader.ignore(f"{key} ({name})", entry, _ONE_CADENCE)


def _collections(reader: _Reader, node: yaml.Node) -> None:
    names: set[str] = set()
    for index, entry in enumerate(reader.sequence(node, "collections")):
        key = f"collections[{index}]"
        collection = reader.mapping(entry, key, ("name", "every", "metrics", "sources"))
        name = reader.text(collection["name"][1], f"{key}.name") if "name" in collection else ""
        if not name:
            raise reader.error(entry, f"{key}.name is required")
        if name in names:
            raise reader.error(entry, f"{key}.name {name!r} is duplicated")
        names.add(name)
        if "every" not in collection:
            raise reader.error(entry, f"{key}.every is required")
        every = reader.interval_ns(collection["every"][1], f"{key}.every")
        include: list[str] = []
        if "metrics" in collection:
            metrics = reader.mapping(collection["metrics"][1], f"{key}.metrics", ("include",))
            if "include" in metrics:
                patterns = reader.sequence(metrics["include"][1], f"{key}.metrics.include")
                include = [reader.text(each, f"{key}.metrics.include") for each in patterns]
        if not include:
            raise reader.error(entry, f"{key}.metrics.include must list at least one field pattern")
        if "sources" in collection:
            _sources(reader, collection["sources"][1], f"{key}.sources")
        if include == [_ALL_FIELDS]:
            reader.fields["collect_interval_ns"] = every  # the all-fields collection: the default cadence
        else:
            reader.ignore(f"{key} ({name})", entry, _ONE_CADENCE)


def _sources(reader: _Reader, node: yaml.Node, key: str) -> None:
    sources = reader.mapping(node, key, ("dcgm",))
    if "dcgm" not in sources:
        return
    dcgm = reader.mapping(sources["dcgm"][1], f"{key}.dcgm", ("watch", "detectBindUnbind"))
    if "watch" in dcgm:
        watch_key = f"{key}.dcgm.watch"
        watch = reader.mapping(dcgm["watch"][1], watch_key, ("maxKeepAge", "maxKeepSamples"))
        if "maxKeepAge" in watch:
            reader.duration_ns(watch["maxKeepAge"][1], f"{watch_key}.maxKeepAge")
        if "maxKeepSamples" in watch:
            reader.integer(watch["maxKeepSamples"][1], f"{watch_key}.maxKeepSamples")
        reader.ignore(watch_key, dcgm["watch"][0], _NO_WATCHES)
    if "detectBindUnbind" in dcgm:
        detect_key = f"{key}.dcgm.detectBindUnbind"
        detect = reader.mapping(dcgm["detectBindUnbind"][1], detect_key, ("enabled", "pollInterval"))
        if "pollInterval" in detect:
            reader.interval_ns(detect["pollInterval"][1], f"{detect_key}.pollInterval")
        if "enabled" in detect and reader.boolean(detect["enabled"][1], f"{detect_key}.enabled"):
            reader.ignore(detect_key, dcgm["detectBindUnbind"][0], _NO_BIND_WATCH)
