"""dcgm-exporter's generations (``--dcgm.compatibility``, docs/dcgm.md "Generations"): what each names how.

dcgm-exporter renamed labels and fields across its releases, and dashboards, rules and integrations are written
against each of them. This module is the one table of those facts: per generation, the spelling of the node's
label and, per renamed field, its new name, the release line that made it the default, the factor from the old
unit to the new one and the HELP text under it. :mod:`.dcgm` derives every family and label field from it; the
sources are cited in docs/dcgm.md, whose table of this one a test keeps equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from nvidia_gpu_exporter.exposition.dcgm_counters import Counter
from nvidia_gpu_exporter.exposition.dcgm_defaults import (
    DEFAULT_GENERATION,
    GENERATION_ORDER,
    IMAGE_DIRECTORY,
    Generation,
)


@dataclass(frozen=True, slots=True)
class GenerationFacts:
    """What one generation stands for and how its every series is labelled."""

    generation: Generation
    releases: str  # the dcgm-exporter releases it stands for
    hostname_label: str


GENERATIONS: tuple[GenerationFacts, ...] = (
    GenerationFacts(Generation.V3, "3.x (the default file of 3.3.9-3.6.1)", "Hostname"),
    GenerationFacts(Generation.V4_5, "4.0.0 to 4.8.2 (the default file of 4.4.0 and later)", "Hostname"),
    GenerationFacts(Generation.V4_8, "4.8.3 and 4.8.4", "hostname"),
    GenerationFacts(Generation.V4_9, "4.9.x", "hostname"),
    GenerationFacts(Generation.V4_10, "4.10.x", "hostname"),
)
_FACTS = {facts.generation: facts for facts in GENERATIONS}

# Unit factors: a value in the old name's unit times this is in the new name's.
SAME = Fraction(1)
MHZ_TO_HZ = Fraction(1_000_000)
MJ_TO_J = Fraction(1, 1000)
PERCENT_TO_RATIO = Fraction(1, 100)
MIB_TO_BYTES = Fraction(1_048_576)


@dataclass(frozen=True, slots=True)
class Rename:
    """A field dcgm-exporter's default file lists under a new name from ``since`` on; the old name still works."""

    old: str
    new: str
    since: Generation
    factor: Fraction = SAME
    unit: str = ""  # the new name's unit where it changed ("" = the old name's)
    help: str = ""  # the HELP text under the new name ("" = the old name's)
    # The reading (a GpuExtras attribute) the new name is served from where it is not the old one's times
    # ``factor``, already in the new unit ("" = the old name's); and its Prometheus type where that changed.
    source: str = ""
    metric_type: str = ""


# In the order dcgm-exporter's default file lists them; the label fields last.
RENAMES: tuple[Rename, ...] = (
    Rename("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", Generation.V4_9, MHZ_TO_HZ, "Hz", "SM clock (in Hz)."),
    Rename(
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
        Generation.V4_9,
        MHZ_TO_HZ,
        "Hz",
        "Memory clock (in Hz).",
    ),
    Rename("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", Generation.V4_9),
    Rename("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", Generation.V4_9),
    Rename("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", Generation.V4_9),
    Rename(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        Generation.V4_9,
        MJ_TO_J,
        "J",
        "Total energy consumption since the driver was last loaded (in J).",
    ),
    Rename("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", Generation.V4_9),
    Rename(
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        Generation.V4_9,
        PERCENT_TO_RATIO,
        "ratio 0-1",
        "GPU utilization (ratio 0-1).",
    ),
    Rename(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        Generation.V4_9,
        PERCENT_TO_RATIO,
        "ratio 0-1",
        "Memory utilization (ratio 0-1).",
    ),
    Rename(
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_ENC_UTIL_RATIO",
        Generation.V4_9,
        PERCENT_TO_RATIO,
        "ratio 0-1",
        "Encoder utilization (ratio 0-1).",
    ),
    Rename(
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL_RATIO",
        Generation.V4_9,
        PERCENT_TO_RATIO,
        "ratio 0-1",
        "Decoder utilization (ratio 0-1).",
    ),
    Rename("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", Generation.V4_9),
    Rename(
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_FREE_BYTES",
        Generation.V4_9,
        MIB_TO_BYTES,
        "bytes",
        "Framebuffer memory free (in bytes).",
    ),
    Rename(
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_USED_BYTES",
        Generation.V4_9,
        MIB_TO_BYTES,
        "bytes",
        "Framebuffer memory used (in bytes).",
    ),
    Rename(
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_FB_RESERVED_BYTES",
        Generation.V4_9,
        MIB_TO_BYTES,
        "bytes",
        "Framebuffer memory reserved (in bytes).",
    ),
    Rename("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", Generation.V4_9),
    Rename("DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", Generation.V4_9),
    Rename(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        Generation.V4_9,
        unit="bytes/s",
        help="NVLink throughput, data sent and received over all links (in B/s).",
        source="nvlink_bytes_per_second",  # DCGM 4.7 scales its KiB/s sample, not the MB/s it served before
        metric_type="gauge",
    ),
    Rename("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", Generation.V4_9),
    Rename("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", Generation.V4_9),
    Rename("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", Generation.V4_9),
    Rename("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", Generation.V4_9),
    Rename("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", Generation.V4_9),
    Rename("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", Generation.V4_9),
    Rename("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", Generation.V4_10),
    Rename("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", Generation.V4_10),
    Rename("DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION", Generation.V4_9),
    Rename("DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_BOARD_SERIAL", Generation.V4_9),
    Rename("DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_INFOROM_OEM_VERSION", Generation.V4_9),
    Rename("DCGM_FI_DEV_ECC_INFOROM_VER", "DCGM_FI_DEV_INFOROM_ECC_VERSION", Generation.V4_9),
    Rename("DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_INFOROM_POWER_VERSION", Generation.V4_9),
    Rename("DCGM_FI_DEV_INFOROM_IMAGE_VER", "DCGM_FI_DEV_INFOROM_IMAGE_VERSION", Generation.V4_9),
)

# Fields a generation's default file lists that the older ones did not, with the first generation listing them.
ADDED: dict[str, Generation] = {
    "DCGM_FI_DEV_FB_RESERVED": Generation.V4_5,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Generation.V4_5,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Generation.V4_5,
    "DCGM_FI_PROF_DRAM_ACTIVE": Generation.V4_5,
    "DCGM_FI_DEV_FB_CAPACITY_BYTES": Generation.V4_9,
}


@dataclass(frozen=True, slots=True)
class Retype:
    """A field dcgm-exporter's own counters files list under another Prometheus type from ``since`` on."""

    name: str
    old_type: str
    new_type: str
    since: Generation


# Every release to 4.8.2 types the NVLink bandwidth `counter` in its files, 4.8.3 `gauge` (docs/dcgm.md cites them).
RETYPES: tuple[Retype, ...] = (Retype("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "gauge", Generation.V4_8),)

# Generation 3's default file types and describes some fields otherwise: name -> (Prometheus type, HELP).
V3_DECLARATIONS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Frame buffer memory free (in MB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Frame buffer memory used (in MB)."),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": ("counter", "Total number of NVLink bandwidth counters for all lanes"),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("counter", "Total number of bytes transmitted through PCIe TX via NVML."),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("counter", "Total number of bytes received through PCIe RX via NVML."),
}


# The counters files of dcgm-exporter's image that a DaemonSet names without mounting them, by the generation of
# the releases that name them, for `auto` when the file is absent here. The GPU Operator sets
# DCGM_EXPORTER_COLLECTORS to dcp-metrics-included.csv in every release, and its newest pins 4.6.0-4.8.3
# (docs/dcgm.md "Generations" cites each). dcgm-exporter's chart mounts its own ConfigMap at the path it names,
# whose names say its generation, so its path needs no row.
IMAGE_FILES: dict[str, tuple[Generation, str]] = {
    IMAGE_DIRECTORY + "dcp-metrics-included.csv": (Generation.V4_8, "the GPU Operator's counters file"),
}


def facts_of(generation: Generation) -> GenerationFacts:
    return _FACTS[generation]


def current_name(name: str, generation: Generation) -> str:
    """The name the generation's default file gives a field known under ``name`` (its oldest name)."""
    for rename in RENAMES:
        if rename.old == name and generation.at_least(rename.since):
            name = rename.new
    return name


def oldest_name(name: str) -> str:
    """The oldest name of a field known under ``name`` (itself where it was never renamed)."""
    for rename in reversed(RENAMES):
        if rename.new == name:
            name = rename.old
    return name


def spellings(name: str) -> tuple[str, ...]:
    """Every name a field known under ``name`` has had, oldest first: what a query for any generation matches."""
    names = [oldest_name(name)]
    for rename in RENAMES:
        if rename.old == names[-1]:
            names.append(rename.new)
    return tuple(names)


def same_unit_throughout(name: str) -> bool:
    """Whether no rename of the field changed its unit, so one threshold holds for each of its names."""
    return all(rename.factor == SAME for rename in RENAMES if rename.old in spellings(name))


def in_default_file(name: str, generation: Generation) -> bool:
    """Whether a field (by its oldest name) is listed, and enabled, in the generation's default file."""
    added = ADDED.get(name)
    return added is None or generation.at_least(added)


def default_type(name: str, generation: Generation) -> str:
    """The Prometheus type the generation's default file gives a field dcgm-exporter retyped ("" = not retyped)."""
    for retype in RETYPES:
        if retype.name == name:
            return retype.new_type if generation.at_least(retype.since) else retype.old_type
    return ""


def declaration(name: str, generation: Generation) -> tuple[str, str] | None:
    """The generation's own (type, HELP) of a field by its oldest name, where it differs from the newest's."""
    return V3_DECLARATIONS.get(name) if generation is Generation.V3 else None


def resolve_generation(
    chosen: Generation | None, counters: Sequence[Counter] | None, *, absent: str = ""
) -> tuple[Generation, str]:
    """The generation to serve and why: ``chosen`` where given, else (``auto``) what the counters file's names say.

    A name a generation introduced (a rename's new name, a field it added) says the file is of that generation or
    later, and the newest such wins: 4.10 still reads the older names in a custom file, so an old name beside a new
    one proves nothing. Without one, a name a later generation renamed, or a type it changed, says the generation
    before that change, the earliest such. Without a file, ``absent`` (the image file the invocation named, not
    here) says its releases' generation.
    """
    if chosen is not None:
        return chosen, "--dcgm.compatibility"
    if not counters:
        if absent in IMAGE_FILES:
            generation, whose = IMAGE_FILES[absent]
            return generation, f"{absent}, absent here, is {whose}, whose releases run generation {generation.value}"
        return DEFAULT_GENERATION, "no counters file"
    introduced = {rename.new: rename.since for rename in RENAMES}
    introduced |= {name: since for name, since in ADDED.items() if since.at_least(Generation.V4_9)}
    newest: tuple[Generation, Counter] | None = None
    for counter in counters:
        since = introduced.get(counter.name)
        if since is not None and (newest is None or (since.at_least(newest[0]) and since is not newest[0])):
            newest = (since, counter)
    if newest is not None:
        since, counter = newest
        return since, f"{counter.source}:{counter.line} names {counter.name}, a name of generation {since.value} on"
    renamed_at = {rename.old: rename.since for rename in RENAMES}
    retyped_at = {(retype.name, retype.old_type): retype.since for retype in RETYPES}
    earliest: tuple[Generation, str] | None = None
    for counter in counters:
        where = f"{counter.source}:{counter.line}"
        renamed = renamed_at.get(counter.name)
        if renamed is not None and (earliest is None or not renamed.at_least(earliest[0])):
            earliest = (renamed, f"{where} names {counter.name}, a name generation {renamed.value} renamed")
        retyped = retyped_at.get((counter.name, counter.metric_type))
        if retyped is not None and (earliest is None or not retyped.at_least(earliest[0])):
            what = f"types {counter.name} {counter.metric_type}, a type generation {retyped.value} changed"
            earliest = (retyped, f"{where} {what}")
    if earliest is not None:
        since, why = earliest
        return GENERATION_ORDER[GENERATION_ORDER.index(since) - 1], why
    return DEFAULT_GENERATION, f"{counters[0].source} names no field that a generation renamed"
