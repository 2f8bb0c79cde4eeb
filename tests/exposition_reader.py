"""The one reader of exposition text in the tests.

Values and labels come from prometheus_client's parser (an independent reading of our output, which also
proves the whole text parses). Comparisons that must stay byte-exact use the line helpers, which slice
the text by family without reinterpreting it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from nvidia_gpu_exporter.exposition.families import WALL_CLOCK_FAMILIES

# -- parsed: values and labels --------------------------------------------------------------------------


def parse(text: str) -> list[Metric]:
    """Every family of ``text``, read by the reference parser (raises on text it rejects)."""
    return list(text_string_to_metric_families(text))


def parse_openmetrics(text: str) -> list[Metric]:
    """Every family of OpenMetrics ``text``, read by the reference parser (which also demands the ``# EOF``)."""
    return list(openmetrics_families(text))  # type: ignore[no-untyped-call]  # the library leaves it untyped


def checked(text: str) -> str:
    """``text`` itself, once the reference parser has accepted all of it."""
    parse(text)
    return text


def parsed_names(text: str) -> list[str]:
    """The parser's family names in order (a counter's ``_total`` suffix is not part of its name)."""
    return [family.name for family in parse(text)]


def series(text: str, name: str) -> list[Sample]:
    """The parsed samples named ``name`` (a counter's samples keep their ``_total``), in text order."""
    return [sample for family in parse(text) for sample in family.samples if sample.name == name]


def sample_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The value of the sample with exactly this name and label set (none: unlabelled); None when absent."""
    wanted = dict(labels or {})
    for sample in series(text, name):
        if sample.labels == wanted:
            return float(sample.value)
    return None


def values_of(text: str, name: str) -> list[float]:
    """The values of every sample named ``name``, in text order."""
    return [float(sample.value) for sample in series(text, name)]


def label_values(text: str, name: str, label: str) -> list[str]:
    """The (unescaped) value of ``label`` on every sample named ``name``; each sample must carry it."""
    found = []
    for sample in series(text, name):
        assert label in sample.labels, f"{name} sample without a {label} label: {sample}"
        found.append(sample.labels[label])
    return found


# -- byte-exact: lines by family ------------------------------------------------------------------------


def family_of(line: str) -> str:
    """The metric name a HELP/TYPE or sample line belongs to."""
    if line.startswith("# "):
        return line.split(" ")[2]
    return re.split(r"[{ ]", line, maxsplit=1)[0]


def names_in(text: str) -> set[str]:
    """Every metric name on any line (HELP, TYPE or sample)."""
    return {family_of(line) for line in text.split("\n") if line}


def family_names(text: str) -> list[str]:
    """Family names in the order their ``# HELP`` lines appear."""
    return [line.split(" ")[2] for line in text.splitlines() if line.startswith("# HELP ")]


def family_block(text: str, name: str) -> str:
    """The HELP/TYPE/sample lines of one family, verbatim ("" when absent)."""
    return "".join(_lines_by_family(text, lambda family: family == name, before_first=False))


def without_families(text: str, names: Iterable[str]) -> str:
    """The exposition text, verbatim, with the given families removed."""
    dropped = set(names)
    return "".join(_lines_by_family(text, lambda family: family not in dropped, before_first=True))


def _lines_by_family(text: str, keep: Callable[[str], bool], *, before_first: bool) -> list[str]:
    """The lines (with their endings) of the families ``keep`` accepts; a family runs from its ``# HELP``."""
    out: list[str] = []
    kept = before_first
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            kept = keep(line.split(" ")[2])
        if kept:
            out.append(line)
    return out


def sample_lines(text: str) -> list[str]:
    """Every sample line, verbatim."""
    return [line for line in text.splitlines() if not line.startswith("#")]


def samples(text: str, family: str) -> list[str]:
    """The sample lines of one family, verbatim."""
    return [line for line in text.split("\n") if line and not line.startswith("#") and family_of(line) == family]


def nvidia_smi_part(text: str) -> str:
    """Every line that mentions an ``nvidia_smi_`` metric, verbatim (the handler's own counters left out)."""
    return "".join(line + "\n" for line in text.splitlines() if "nvidia_smi_" in line)


def comparable(scrape: str) -> str:
    """Only the ``nvidia_smi_*`` lines minus the wall-clock families, as the conformance files hold them."""
    kept = [
        line
        for line in scrape.split("\n")
        if line and family_of(line).startswith("nvidia_smi_") and family_of(line) not in WALL_CLOCK_FAMILIES
    ]
    return "\n".join(kept) + "\n"
