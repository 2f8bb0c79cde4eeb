"""The answering engine of the fake ``nvidia-smi``: one nvidia-smi invocation in, stdout/stderr/exit code out.

Importable in-process (the demo backend calls :func:`answer` with no subprocess) and used by the CLI, which
adds failure injection on top. Everything here is driven by the capture content only: the two CSV queries
the exporter makes are answered by projecting the recorded CSV, every other invocation by verbatim replay
of the section recorded for the same command line.

The CSV rows pass through three optional transforms, in this order: replication into several simulated
GPUs (with generated identities), per-field overrides (fixed values or seeded random ranges) and
fluctuation (seeded jitter of the fields that move on a live GPU). A given seed reproduces the output
exactly; without a seed every call draws anew, like a fresh ``nvidia-smi`` process would.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from nvidia_gpu_exporter._go.strconv import UINT64_MAX
from nvidia_gpu_exporter._go.text import go_fields, go_quote
from nvidia_gpu_exporter._go.text import go_trim_space as go_trim
from nvidia_gpu_exporter.capture.format import (
    CAPABILITIES_STATE,
    COMPUTE_APPS_LABEL_PREFIX,
    GPU_CSV_LABEL_PREFIX,
    Capture,
    Section,
)
from nvidia_gpu_exporter.model.fields import fields_under
from nvidia_gpu_exporter.model.uuids import normalize_uuid

if TYPE_CHECKING:
    import random

EXIT_OK = 0
EXIT_REJECTED = 1
"""A query the real nvidia-smi would reject too (unknown field), or an injected ``--fail-arg`` failure."""
EXIT_USAGE = 2
"""A problem of the fake itself: bad flag, config, capture, state or identity."""

DEFAULT_STATE = "idle"
MAX_GPUS = 255
"""Replication writes the GPU number into the PCI bus byte, which has 255 usable values."""

PROG = "fake-nvidia-smi"

IDENTITY_FIELDS = frozenset(
    {"uuid", "serial", "index", "count", "pci.bus_id", "pci.bus", "gpu_uuid", "gpu_serial", "gpu_bus_id"}
)
"""Fields that carry a simulated GPU's identity; they cannot be overridden while replication is active."""

FLUCTUATE_FIELDS = frozenset(
    {
        *fields_under("utilization."),
        *fields_under("clocks.current."),
        "temperature.gpu",
        "temperature.memory",
        "fan.speed",
        "power.draw",
        "power.draw.average",
        "power.draw.instant",
        "module.power.draw.average",
        "module.power.draw.instant",
        "memory.used",
        "used_gpu_memory",
    }
)
"""The fields that naturally move on a live GPU; everything else stays as recorded under ``fluctuate``."""

_FREE_TEXT_FIELD = "process_name"
_UUID_NAMESPACE = "nvidia_gpu_exporter/fake-nvidia-smi/gpu/"
_MASK64 = UINT64_MAX
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3

# Go's unicode.IsSpace set; Python's str.isspace() also counts U+001C..U+001F, which Go does not trim.
_NUMERIC_PREFIX = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")
_DIGITS = frozenset("0123456789")


class ScenarioError(ValueError):
    """The scenario settings are inconsistent (bad override, identity clash, GPU count out of range)."""


@dataclass(frozen=True, slots=True)
class Fixed:
    """A fixed override: every data row gets this cell text."""

    value: str


@dataclass(frozen=True, slots=True)
class Range:
    """A random override: every data row gets a fresh uniform draw from ``[min, max]``."""

    min: float
    max: float


Generator = Fixed | Range


@dataclass(frozen=True, slots=True)
class GpuEntry:
    """One simulated GPU of a replication list: optional explicit identity and per-GPU overrides.

    An empty ``uuid`` means "generate one"; an empty ``serial`` keeps the captured cell.
    """

    uuid: str = ""
    serial: str = ""
    overrides: Mapping[str, Generator] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))


@dataclass(frozen=True, slots=True)
class Scenario:
    """What the fake serves: a capture, the state to replay and the value transforms.

    ``overrides`` is the top-level layer; a per-GPU entry's overrides beat it for that GPU. (The CLI folds
    its ``--set`` flags into this layer and drops those fields from the entries, so a flag beats both.)
    ``gpus`` is ``None`` (replay the captured rows as they are), a count of identical simulated GPUs, or a
    tuple of per-GPU entries. ``seed=None`` draws anew on every call (like a fresh process). Construction
    validates the settings and raises :class:`ScenarioError`; the mappings are frozen, so a scenario can be
    shared by concurrent callers (it is not hashable).
    """

    capture: Capture
    state: str = DEFAULT_STATE
    seed: int | None = None
    overrides: Mapping[str, Generator] = field(default_factory=dict)
    gpus: int | tuple[GpuEntry, ...] | None = None
    fluctuate: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))
        if isinstance(self.gpus, list):
            object.__setattr__(self, "gpus", tuple(self.gpus))
        validate_settings(self.overrides, self.gpus)


@dataclass(frozen=True, slots=True)
class Answer:
    """What one nvidia-smi invocation prints and how it exits."""

    stdout: str
    stderr: str
    exit_code: int


# --------------------------------------------------------------------------------------------------
# Go-compatible text helpers


def _utf8(text: str) -> bytes:
    """The bytes Go would see for this text (surrogate escapes turned back into the original bytes)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def fnv1a64(data: bytes) -> int:
    """64-bit FNV-1a, the per-field seed derivation of the Go fake."""
    value = _FNV64_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV64_PRIME) & _MASK64
    return value


def field_seed(seed: int, key: str) -> int:
    """Seed of one field's own random source: ``seed XOR FNV-1a-64(key)`` (as an unsigned 64-bit value)."""
    return (seed & _MASK64) ^ fnv1a64(_utf8(key))


def generated_uuid(index: int) -> str:
    """Stable uuid of simulated GPU ``index``: independent of the seed, so series survive restarts."""
    from nvidia_gpu_exporter.support.sha256 import sha256  # noqa: PLC0415 - only replication needs it

    digest = bytearray(sha256(f"{_UUID_NAMESPACE}{index}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x40
    digest[8] = (digest[8] & 0x3F) | 0x80
    hexed = digest.hex()
    return f"GPU-{hexed[0:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"


# --------------------------------------------------------------------------------------------------
# Settings validation (shared by the config loader and the CLI, so messages are the same everywhere)


def check_value(name: str, value: str) -> str | None:
    """Problem with a cell value that would corrupt the comma-split CSV, or ``None``."""
    if any(char in value for char in ",\r\n"):
        return f"value for {go_quote(name)} must not contain a comma or newline"
    return None


def check_range(name: str, low: float, high: float) -> str | None:
    """Problem with a range's bounds (non-finite, min above max), or ``None``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"range for {go_quote(name)} must have finite bounds"
    if low > high:
        shown = f"min {_plain_decimal(low)} greater than max {_plain_decimal(high)}"
        return f"range for {go_quote(name)} has {shown}"
    return None


def check_generator(name: str, generator: object) -> str | None:
    """Problem with one override (empty field name, bad value, bad range, wrong type), or ``None``."""
    if not isinstance(name, str) or not name:
        return f"override field name must be a non-empty string, got {name!r}"
    if isinstance(generator, Fixed):
        if not isinstance(generator.value, str):
            return f"value for {go_quote(name)} must be a string, got {type(generator.value).__name__}"
        return check_value(name, generator.value)
    if isinstance(generator, Range):
        low, high = generator.min, generator.max
        if isinstance(low, bool) or isinstance(high, bool) or not isinstance(low, int | float):
            return f"range for {go_quote(name)} must have numeric bounds"
        if not isinstance(high, int | float):
            return f"range for {go_quote(name)} must have numeric bounds"
        try:
            return check_range(name, float(low), float(high))
        except OverflowError:
            return f"range for {go_quote(name)} must have finite bounds"
    return f"override for {go_quote(name)} must be Fixed or Range, got {type(generator).__name__}"


def _identity_error(name: str) -> str:
    return f"field {go_quote(name)} is a per-GPU identity and cannot be overridden while gpus is active"


def validate_settings(overrides: Mapping[str, Generator], gpus: int | tuple[GpuEntry, ...] | None) -> None:
    """Raise :class:`ScenarioError` when the overrides and replication settings cannot be served."""
    for name, generator in overrides.items():
        problem = check_generator(name, generator)
        if problem:
            raise ScenarioError(problem)
    if gpus is None:
        return
    if isinstance(gpus, bool) or not isinstance(gpus, int | tuple):
        raise ScenarioError(f"gpus must be a count or a tuple of GpuEntry, got {type(gpus).__name__}")
    count = gpus if isinstance(gpus, int) else len(gpus)
    if not 1 <= count <= MAX_GPUS:
        raise ScenarioError(f"gpu count must be between 1 and {MAX_GPUS}, got {count}")
    for name in overrides:
        if name in IDENTITY_FIELDS:
            raise ScenarioError(_identity_error(name))
    entries = gpus if isinstance(gpus, tuple) else ()
    for index, entry in enumerate(entries):
        if not isinstance(entry, GpuEntry):
            raise ScenarioError(f"gpus[{index}] must be a GpuEntry, got {type(entry).__name__}")
        for name, generator in entry.overrides.items():
            problem = check_generator(name, generator)
            if problem:
                raise ScenarioError(f"gpus[{index}]: {problem}")
            if name in IDENTITY_FIELDS:
                raise ScenarioError(_identity_error(name))
    seen: dict[str, int] = {}
    for index, (uuid, serial) in enumerate(_identities(gpus)):
        for name, value in (("uuid", uuid), ("serial", serial)):
            if not isinstance(value, str):
                raise ScenarioError(f"gpus[{index}].{name} must be a string")
            problem = check_value(name, value)
            if problem:
                raise ScenarioError(f"gpus[{index}]: {problem}")
        normalized = normalize_uuid(uuid)
        if normalized in seen:
            raise ScenarioError(f"gpus {seen[normalized]} and {index} share uuid {go_quote(uuid)}")
        seen[normalized] = index


def _identities(gpus: int | tuple[GpuEntry, ...]) -> list[tuple[str, str]]:
    """(uuid, serial) per simulated GPU; a generated uuid where none is given, ``""`` keeps the serial."""
    if isinstance(gpus, int):
        return [(generated_uuid(index), "") for index in range(gpus)]
    return [(entry.uuid or generated_uuid(index), entry.serial) for index, entry in enumerate(gpus)]


# --------------------------------------------------------------------------------------------------
# Value generators


def _fresh_seed() -> int:
    """A seed for a call without one: different on every call, even within one clock tick."""
    return int.from_bytes(os.urandom(8), "little") ^ time.time_ns()


def _round_half_away(value: float) -> int:
    """Round to the nearest integer, halves away from zero (Go's ``math.Round``)."""
    magnitude = abs(value)
    whole = math.floor(magnitude)
    rounded = int(whole) + (1 if magnitude - whole >= 0.5 else 0)
    return -rounded if value < 0 else rounded


def _plain_decimal(value: float) -> str:
    """Shortest round-tripping decimal in plain notation (Go's ``FormatFloat(v, 'f', -1, 64)``)."""
    text = repr(value)
    if "e" in text or "E" in text:
        from decimal import Decimal  # noqa: PLC0415 - rare path; keeps the per-call process start fast

        text = format(Decimal(text), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return text


class _RangeDraw:
    """A range override's generator: its own random source, one draw per call (i.e. per data row)."""

    def __init__(self, spec: Range, seed: int, key: str) -> None:
        import random  # noqa: PLC0415 - only ranges and fluctuation need it; keeps process start fast

        self._random = random.Random(field_seed(seed, key))
        self._low = float(spec.min)
        self._high = float(spec.max)
        self._whole = self._low.is_integer() and self._high.is_integer()

    def __call__(self) -> str:
        fraction = self._random.random()
        value = self._low + fraction * (self._high - self._low)
        if not math.isfinite(value):  # the width overflowed; interpolate without forming it
            value = self._low * (1 - fraction) + self._high * fraction
        value = min(max(value, self._low), self._high)
        if self._whole:
            return str(_round_half_away(value))
        return _plain_decimal(value)


def _make_generator(generator: Generator, seed: int, key: str) -> Callable[[], str]:
    if isinstance(generator, Fixed):
        text = generator.value
        return lambda: text
    return _RangeDraw(generator, seed, key)


# --------------------------------------------------------------------------------------------------
# Fluctuation


class _NumericCell:
    """A ``<decimal number><unit tail>`` cell such as ``38 %``, ``39.32 W`` or a bare ``40``.

    A plain class rather than a dataclass: every dataclass costs the per-call process start time.
    """

    __slots__ = ("decimals", "suffix", "value")

    def __init__(self, value: float, decimals: int, suffix: str) -> None:
        self.value = value
        self.decimals = decimals
        self.suffix = suffix

    def format(self, value: float) -> str:
        return f"{value:.{self.decimals}f}{self.suffix}"

    @property
    def is_percent(self) -> bool:
        return go_trim(self.suffix) == "%"


def _parse_numeric(cell: str) -> _NumericCell | None:
    """The cell as a number plus unit tail, or ``None`` for anything that is not that shape.

    A tail containing a digit (timestamps, exponent forms, second numbers) or starting with ``x`` (hex
    such as ``0x1F``) is refused, so ``[N/A]``, hex bitmasks and dates are never rewritten.
    """
    match = _NUMERIC_PREFIX.match(cell)
    if match is None:
        return None
    token = match.group()
    suffix = cell[len(token) :]
    if any(char in _DIGITS for char in suffix) or suffix[:1] in ("x", "X"):
        return None
    value = float(token)
    if not math.isfinite(value):
        return None
    _, dot, fraction = token.partition(".")
    return _NumericCell(value, len(fraction) if dot else 0, suffix)


class _Fluctuator:
    """Jitters the moving fields around their recorded values, one seeded source per field."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._sources: dict[str, random.Random] = {}

    def _draw(self, name: str) -> float:
        source = self._sources.get(name)
        if source is None:
            import random  # noqa: PLC0415 - only ranges and fluctuation need it; keeps process start fast

            source = random.Random(field_seed(self._seed, "fluctuate:" + name))
            self._sources[name] = source
        return source.random()

    def _jitter(self, name: str, cell: _NumericCell) -> float:
        spread = max(0.1 * abs(cell.value), 1.0)
        value = cell.value + (2 * self._draw(name) - 1) * spread
        if not math.isfinite(value):
            value = cell.value
        if not value > 0:
            value = 0.0
        if cell.is_percent:
            value = min(value, 100.0)
        return value

    def apply(
        self,
        cells: list[str],
        recorded: Sequence[str],
        column_of: Mapping[str, int],
        overridden: Mapping[str, object],
    ) -> None:
        """Jitter one data row in place, then keep memory used/free consistent with the total."""
        for column, name in enumerate(recorded):
            if name not in FLUCTUATE_FIELDS or name in overridden:
                continue
            cell = _parse_numeric(cells[column])
            if cell is not None:
                cells[column] = cell.format(self._jitter(name, cell))
        _reconcile_memory(cells, column_of, overridden)


def _numeric_at(cells: Sequence[str], column_of: Mapping[str, int], name: str) -> tuple[_NumericCell, int] | None:
    column = column_of.get(name)
    if column is None:
        return None
    cell = _parse_numeric(cells[column])
    return None if cell is None else (cell, column)


def _reconcile_memory(cells: list[str], column_of: Mapping[str, int], overridden: Mapping[str, object]) -> None:
    """Cap used at total minus reserved and recompute free, unless the user overrode them."""
    if "memory.used" in overridden:
        return
    used = _numeric_at(cells, column_of, "memory.used")
    total = _numeric_at(cells, column_of, "memory.total")
    if used is None or total is None:
        return
    reserved_cell = _numeric_at(cells, column_of, "memory.reserved")
    reserved = reserved_cell[0].value if reserved_cell is not None else 0.0
    capacity = max(total[0].value - reserved, 0.0)
    used_cell, used_column = used
    used_value = min(used_cell.value, capacity)
    if used_value != used_cell.value:
        cells[used_column] = used_cell.format(used_value)
    if "memory.free" in overridden:
        return
    free = _numeric_at(cells, column_of, "memory.free")
    if free is not None:
        cells[free[1]] = free[0].format(max(capacity - used_value, 0.0))


# --------------------------------------------------------------------------------------------------
# CSV projection


class _Rejected(Exception):
    """A query answered with a message on stdout and exit 1, like the real nvidia-smi rejects one."""


def _recorded_fields(command: str) -> list[str]:
    """The field list of a recorded query command (``--query-gpu=a,b,c`` gives ``[a, b, c]``)."""
    for token in go_fields(command):
        _, sep, value = token.partition("=")
        if sep and token.startswith("--query-") and not token.startswith("--format"):
            fields = value.split(",")
            if "" in fields:
                raise _Rejected(f"recorded command {go_quote(command)} has an empty field name")
            return fields
    raise _Rejected(f"no field list found in recorded command {go_quote(command)}")


def overridable_fields(capture: Capture) -> frozenset[str]:
    """Every field an override can replace: those the capture's query sections record, in any state."""
    fields: set[str] = set()
    for section in capture.sections:
        try:
            fields.update(_recorded_fields(section.command))
        except _Rejected:  # a section without a field list (--version, -q): nothing to override there
            continue
    return frozenset(fields)


def _split_row(row: str, want: int, free_text_column: int, row_number: int) -> list[str]:
    """Split a CSV line into exactly ``want`` trimmed cells; surplus commas belong to the free-text column."""
    raw = row.split(",")
    extra = len(raw) - want
    if extra != 0 and (extra < 0 or free_text_column < 0):
        raise _Rejected(f"row {row_number}: expected {want} cells, got {len(raw)} in row {go_quote(row)}")
    if extra == 0:
        return [go_trim(cell) for cell in raw]
    cells = [go_trim(cell) for cell in raw[:free_text_column]]
    cells.append(go_trim(",".join(raw[free_text_column : free_text_column + extra + 1])))
    cells.extend(go_trim(cell) for cell in raw[free_text_column + extra + 1 :])
    return cells


def _rewrite_bus_id(recorded: str, bus: int) -> str:
    parts = recorded.split(":")
    if len(parts) != 3:
        return f"00000000:{bus:02X}:00.0"
    parts[1] = f"{bus:02X}"
    return ":".join(parts)


def _rewrite_identity(
    cells: list[str], column_of: Mapping[str, int], identity: tuple[str, str], index: int, total: int
) -> None:
    """Stamp simulated GPU ``index``'s identity into whichever identity columns the section records."""
    uuid, serial = identity
    values = {"uuid": uuid, "gpu_uuid": uuid, "index": str(index), "count": str(total)}
    values["pci.bus"] = f"0x{index + 1:02X}"
    if serial:
        values["serial"] = serial
        values["gpu_serial"] = serial
    for name, value in values.items():
        column = column_of.get(name)
        if column is not None:
            cells[column] = value
    for name in ("pci.bus_id", "gpu_bus_id"):
        column = column_of.get(name)
        if column is not None:
            cells[column] = _rewrite_bus_id(cells[column], index + 1)


def _override_layers(
    scenario: Scenario, identities: list[tuple[str, str]] | None, seed: int
) -> list[dict[str, Callable[[], str]]]:
    """One generator map per simulated GPU (one map without replication).

    Top-level generators are shared by all GPUs, so a range draws independently per row across GPUs; a
    per-GPU entry's generators are seeded in their own ``gpu<i>:`` scope.
    """
    top = {name: _make_generator(gen, seed, name) for name, gen in scenario.overrides.items()}
    if identities is None:
        return [top]
    entries = scenario.gpus if isinstance(scenario.gpus, tuple) else ()
    layers: list[dict[str, Callable[[], str]]] = []
    for index in range(len(identities)):
        layer = dict(top)
        if index < len(entries):
            scope = f"gpu{index}:"
            for name, gen in entries[index].overrides.items():
                layer[name] = _make_generator(gen, seed, scope + name)
        layers.append(layer)
    return layers


def _project(section: Section, request: str, scenario: Scenario, identities: list[tuple[str, str]] | None) -> str:
    recorded = _recorded_fields(section.command)
    column_of = {name: column for column, name in enumerate(recorded)}
    columns: list[int] = []
    for name in request.split(","):
        column = column_of.get(go_trim(name))
        if column is None:
            raise _Rejected(f"Field {go_quote(name)} is not a valid field to query.")
        columns.append(column)
    lines = section.body.split("\n")
    if lines[0] == "":
        raise _Rejected("section body has no header row")
    header = _split_row(lines[0], len(recorded), -1, 1)
    free_text_column = column_of.get(_FREE_TEXT_FIELD, -1)
    rows = [_split_row(line, len(recorded), free_text_column, number) for number, line in enumerate(lines[1:], 2)]

    seed = scenario.seed if scenario.seed is not None else _fresh_seed()
    layers = _override_layers(scenario, identities, seed)
    fluctuator = _Fluctuator(seed) if scenario.fluctuate else None
    output = [", ".join(header[column] for column in columns)]

    def emit(cells: list[str], layer: Mapping[str, Callable[[], str]]) -> None:
        for column, name in enumerate(recorded):
            generator = layer.get(name)
            if generator is not None:
                cells[column] = generator()
        if fluctuator is not None:
            fluctuator.apply(cells, recorded, column_of, layer)
        output.append(", ".join(cells[column] for column in columns))

    if identities is None:
        for row in rows:
            emit(list(row), layers[0])
    else:
        for index, identity in enumerate(identities):
            for row in rows:
                cells = list(row)
                _rewrite_identity(cells, column_of, identity, index, len(identities))
                emit(cells, layers[index])
    return "\n".join(output)


# --------------------------------------------------------------------------------------------------
# Answering


def _usage(message: str) -> Answer:
    return Answer("", f"{PROG}: {message}\n", EXIT_USAGE)


def _query_request(args: Sequence[str]) -> tuple[str, str] | None:
    """(requested field list, section label prefix) for the two CSV queries, else ``None``."""
    if len(args) != 2 or args[1] != "--format=csv":
        return None
    for flag, prefix in (
        ("--query-gpu=", GPU_CSV_LABEL_PREFIX),
        ("--query-compute-apps=", COMPUTE_APPS_LABEL_PREFIX),
    ):
        if args[0].startswith(flag):
            return args[0][len(flag) :], prefix
    return None


def _find_verbatim(capture: Capture, state: str, args: Sequence[str]) -> Section | None:
    """First section of the state (or ``capabilities``) recorded with the same command line."""
    requested = " ".join(args)
    for section in capture.sections:
        if section.state not in (state, CAPABILITIES_STATE) or not section.command:
            continue
        recorded = section.command.removeprefix("nvidia-smi")
        if " ".join(go_fields(recorded)) == requested:
            return section
    return None


def _replication_problem(capture: Capture, state: str) -> str | None:
    section = capture.find(state, GPU_CSV_LABEL_PREFIX)
    if section is None:
        return f"gpus needs a query-gpu section for state {go_quote(state)} to replicate"
    rows = section.body.count("\n")
    if rows != 1:
        return (
            f"gpus needs a single-GPU capture, but the query-gpu section for state {go_quote(state)} "
            f"has {rows} data rows"
        )
    return None


def _stdout_and_code(result: Answer) -> tuple[str, int]:
    return result.stdout, result.exit_code


def answer(scenario: Scenario, args: Sequence[str]) -> Answer:
    """Answer one nvidia-smi invocation (``args`` without the program name) from the scenario.

    Never raises for any ``args``: rejected queries exit 1 with the message on stdout (as nvidia-smi
    does), fake-level problems exit 2 with a message on stderr.
    """
    args = list(args)
    query = _query_request(args)
    if query is None:
        section = _find_verbatim(scenario.capture, scenario.state, args)
        if section is None and args and args[0] == "pmon":
            from nvidia_gpu_exporter.capture.pmon import render_pmon  # noqa: PLC0415 - only `nvidia-smi pmon` needs it

            stdout, code = render_pmon(args, lambda query_args: _stdout_and_code(answer(scenario, query_args)))
            return Answer(stdout, "", code)
        if section is None:
            return _usage(
                f"capture has no section recorded for {go_quote(' '.join(args))} in state {go_quote(scenario.state)}"
            )
        return Answer(section.body + "\n", "", EXIT_OK)

    request, label_prefix = query
    identities: list[tuple[str, str]] | None = None
    if scenario.gpus is not None:
        problem = _replication_problem(scenario.capture, scenario.state)
        if problem:
            return _usage(problem)
        identities = _identities(scenario.gpus)
    section = scenario.capture.find(scenario.state, label_prefix)
    if section is None:
        return _usage(f"capture has no {go_quote(label_prefix)} section for state {go_quote(scenario.state)}")
    try:
        output = _project(section, request, scenario, identities)
    except _Rejected as rejected:
        return Answer(f"{rejected}\n", "", EXIT_REJECTED)
    return Answer(output + "\n", "", EXIT_OK)
