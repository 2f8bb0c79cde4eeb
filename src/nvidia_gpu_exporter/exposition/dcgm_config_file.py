"""dcgm-exporter's YAML ``--config-file`` (``DCGM_EXPORTER_CONFIG_FILE``), schema versions 1 and 2 (docs/dcgm.md,
"The YAML config file").

Read once at startup, under the environment and the flags (flags > environment > file > defaults, as dcgm-exporter
reads it). What maps onto this exporter becomes ``Config`` values: the metric source (a counters file or inline
fields), the collection interval, the scrape limit and the exporter's own metrics. What has no counterpart here (DCGM
field-watch retention, per-field cadences, bind/unbind detection) is reported back to be warned about once, as is a
key outside the schema as documented. What dcgm-exporter itself refuses is refused with the file and line: not one
YAML document, a repeated key, a wrong version, a metric source with both or neither of ``file`` and ``fields``, a
non-positive or sub-millisecond interval, the two versions' collection blocks mixed. The document is read by the
project's strict YAML reader (support/strictyaml.py, which bounds what aliases can build), and the file is bounded
in bytes, so a hostile file cannot grow startup's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration
from nvidia_gpu_exporter.exposition.dcgm_counters import Counter, CountersError, counter_of, read_startup_text

if TYPE_CHECKING:
    from nvidia_gpu_exporter.support.strictyaml import Entries, YamlNode

MAX_BYTES = 64 * 1024  # dcgm-exporter's own examples are a few hundred bytes
VERSIONS = (1, 2)
_MILLISECOND_NS = 1_000_000
_ALL_FIELDS = "*"  # a version 2 collection including every field supplies the default cadence
_NO_WATCHES = "there are no DCGM field watches here: each collection reads the GPUs afresh and keeps no samples"
_ONE_CADENCE = "every field is read at each collection interval here: there are no per-field cadences"
_NO_BIND_WATCH = "GPU bind/unbind events are not watched"
_UNKNOWN = "not a key of dcgm-exporter's YAML schema as documented: ignored"
_FIELD_KEYS = ("name", "prometheusType", "help")  # an inline field's, in the counters file's column order


class DcgmConfigError(ValueError):
    """The file cannot be read, or dcgm-exporter would refuse it; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class DcgmConfigSettings:
    """The file's ``Config`` values, and each setting accepted without effect as ``(key, line, why)``."""

    fields: dict[str, Any] = field(default_factory=dict)
    ignored: tuple[tuple[str, int, str], ...] = ()


def read_dcgm_config_file(path: str) -> DcgmConfigSettings:
    """The settings of dcgm-exporter's YAML config file at ``path``; a :class:`DcgmConfigError` names what is wrong."""
    text = read_startup_text(path, MAX_BYTES, "config file", DcgmConfigError, too_large="dcgm-exporter config file")
    return parse_dcgm_config(text, path)


def parse_dcgm_config(text: str, path: str) -> DcgmConfigSettings:
    """The settings of a config file's text (``path`` names it in messages)."""
    from nvidia_gpu_exporter.support.strictyaml import StrictYamlError, load_yaml  # noqa: PLC0415 - with a file only

    reader = _Reader(path)
    try:
        root = load_yaml(text)
        if root is None:
            raise DcgmConfigError(f"{path}: no YAML document: version must be 1 or 2")
        reader.read(root)
    except StrictYamlError as error:
        raise DcgmConfigError(f"{path}: {error}") from error
    except CountersError as error:  # an inline field, already named by file and line
        raise DcgmConfigError(str(error)) from error
    return DcgmConfigSettings(dict(reader.fields), tuple(reader.ignored))


class _Reader:
    """Walks the document, collecting the ``Config`` values and what is accepted without effect."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fields: dict[str, Any] = {}
        self.ignored: list[tuple[str, int, str]] = []

    def entries(self, node: YamlNode, known: tuple[str, ...]) -> Entries:
        """A mapping's values by key; a key outside ``known`` is reported with its line and dropped."""
        from nvidia_gpu_exporter.support.strictyaml import Entries, child_path  # noqa: PLC0415

        mapping = node.as_mapping()
        for key, _ in mapping.entries:
            if key.written not in known:
                self.ignored.append((child_path(node.path, key.written), key.line, _UNKNOWN))
        return Entries(mapping)

    def ignore(self, node: YamlNode, why: str, name: str = "", parent: YamlNode | None = None) -> None:
        """Report ``node`` as accepted without effect: at its key's line in ``parent``, else at its own."""
        line = node.line
        if parent is not None:
            line = next((key.line for key, value in parent.as_mapping().entries if value is node), line)
        self.ignored.append((f"{node.path} ({name})" if name else node.path, line, why))

    @staticmethod
    def duration_ns(node: YamlNode) -> int:
        try:
            return parse_duration(node.text())
        except DurationError as error:
            raise node.fail(str(error)) from error

    def interval_ns(self, node: YamlNode) -> int:
        """A positive Go duration in whole milliseconds, as dcgm-exporter stores its intervals."""
        duration = self.duration_ns(node)
        if duration <= 0:
            raise node.fail("must be greater than 0")
        if duration % _MILLISECOND_NS:
            raise node.fail("must be expressed in whole milliseconds or larger")
        return duration

    def read(self, root: YamlNode) -> None:
        top = self.entries(root, ("version", "metrics", "collection", "collections", "sources", "server"))
        version = top.required("version").integer()
        if version not in VERSIONS:
            raise top["version"].fail(f"must be {' or '.join(map(str, VERSIONS))}, got {version}")
        if version == 1 and "collections" in top:
            raise top["collections"].fail("version 1 accepts only the singular collection block")
        if version == 2 and "collection" in top:
            raise top["collection"].fail("version 2 uses collections; the two schemas cannot be mixed")
        if "metrics" in top:
            self.metrics(top["metrics"])
        if "collection" in top:
            self.collection(top["collection"])
        if "collections" in top:
            self.collections(top["collections"])
        if "sources" in top:
            self.sources(top["sources"])
        if "server" in top:
            server = self.entries(top["server"], ("maxConcurrentScrapes",))
            if "maxConcurrentScrapes" in server:
                self.fields["max_requests"] = server["maxConcurrentScrapes"].integer(low=1)

    def metrics(self, node: YamlNode) -> None:
        metrics = self.entries(node, ("file", "fields", "enableExporterMetrics"))
        if "enableExporterMetrics" in metrics:
            self.fields["exporter_metrics"] = metrics["enableExporterMetrics"].boolean()
        file = metrics["file"].text().strip() if "file" in metrics else ""
        fields = metrics["fields"].items() if "fields" in metrics else ()
        if bool(file) == bool(fields):
            raise node.fail("must specify exactly one of file or fields")
        if file:
            self.fields.update(dcgm_collectors=file, dcgm_inline_counters=())
            return
        counters: list[Counter] = []
        seen: dict[str, str] = {}
        for entry in fields:
            cells = self.entries(entry, _FIELD_KEYS)
            name, metric_type, help_text = (cells.required(key).text().strip() for key in _FIELD_KEYS)
            if name in seen:
                raise entry.fail(f"name {name!r} duplicates {seen[name]}")
            seen[name] = entry.path
            counters.append(counter_of(name, metric_type, help_text, self.path, entry.line))
        self.fields.update(dcgm_collectors="", dcgm_inline_counters=tuple(counters))

    def collection(self, node: YamlNode) -> None:
        collection = self.entries(node, ("interval", "watchGroups"))
        if "interval" in collection:
            self.fields["collect_interval_ns"] = self.interval_ns(collection["interval"])
        if "watchGroups" in collection:
            names: set[str] = set()
            for group in collection["watchGroups"].items():
                entries = self.entries(group, ("name", "interval", "fields"))
                name = self.unique_name(entries, group, names)
                self.interval_ns(entries.required("interval"))
                if not entries.required("fields").items():
                    raise entries["fields"].fail("must not be empty")
                for each in entries["fields"].items():
                    each.text()
                self.ignore(group, _ONE_CADENCE, name)

    def collections(self, node: YamlNode) -> None:
        names: set[str] = set()
        for collection in node.items():
            entries = self.entries(collection, ("name", "every", "metrics", "sources"))
            name = self.unique_name(entries, collection, names)
            every = self.interval_ns(entries.required("every"))
            metrics = self.entries(entries.required("metrics"), ("include",))
            include = [each.text().strip() for each in metrics.required("include").items()]
            if not include:
                raise metrics["include"].fail("must list at least one field pattern")
            if "sources" in entries:
                self.sources(entries["sources"])
            if include == [_ALL_FIELDS]:
                self.fields["collect_interval_ns"] = every  # the all-fields collection: the default cadence
            else:
                self.ignore(collection, _ONE_CADENCE, name)

    @staticmethod
    def unique_name(entries: Entries, node: YamlNode, names: set[str]) -> str:
        name = entries.required("name").text().strip()
        if not name:
            raise entries["name"].fail("must not be empty")
        if name in names:
            raise node.fail(f"name {name!r} is duplicated")
        names.add(name)
        return name

    def sources(self, node: YamlNode) -> None:
        sources = self.entries(node, ("dcgm",))
        if "dcgm" not in sources:
            return
        dcgm = self.entries(sources["dcgm"], ("watch", "detectBindUnbind"))
        if "watch" in dcgm:
            watch = self.entries(dcgm["watch"], ("maxKeepAge", "maxKeepSamples"))
            if "maxKeepAge" in watch:
                self.duration_ns(watch["maxKeepAge"])
            if "maxKeepSamples" in watch:
                watch["maxKeepSamples"].integer()
            self.ignore(dcgm["watch"], _NO_WATCHES, parent=sources["dcgm"])
        if "detectBindUnbind" in dcgm:
            detect = self.entries(dcgm["detectBindUnbind"], ("enabled", "pollInterval"))
            if "pollInterval" in detect:
                self.interval_ns(detect["pollInterval"])
            if "enabled" in detect and detect["enabled"].boolean():
                self.ignore(dcgm["detectBindUnbind"], _NO_BIND_WATCH, parent=sources["dcgm"])
