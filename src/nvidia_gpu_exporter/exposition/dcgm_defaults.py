"""The DCGM profile's flag defaults and its generations' names, for ``config.py`` and ``flags.py``.

Every start reads these to parse its flags; the tables behind them (:mod:`.dcgm_generations`' renames and their
unit factors, :mod:`.dcgm_events`' windows) load only with the DCGM profile (issue 31, item 2: nothing imported
that the configuration does not use).
"""

from __future__ import annotations

from enum import Enum


class Generation(str, Enum):
    """A line of dcgm-exporter releases whose output looks the same; the values order them."""

    V3 = "3"
    V4_5 = "4.5"
    V4_8 = "4.8"
    V4_9 = "4.9"
    V4_10 = "4.10"

    def at_least(self, other: Generation) -> bool:
        return GENERATION_ORDER.index(self) >= GENERATION_ORDER.index(other)


GENERATION_ORDER = tuple(Generation)
AUTO = "auto"  # --dcgm.compatibility's default: the generation a counters file's names say (resolve_generation)
# What `auto` serves where nothing says otherwise (no counters file, or one whose names say nothing): the newest.
DEFAULT_GENERATION = GENERATION_ORDER[-1]
IMAGE_DIRECTORY = "/etc/dcgm-exporter/"  # where dcgm-exporter's image keeps its counters files
DEFAULT_WINDOW_MS = 300_000  # dcgm-exporter's default for both windows (XIDs, clock events): 5 minutes
