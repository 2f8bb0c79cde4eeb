"""dcgm-exporter's own event families under the DCGM profiles (docs/dcgm.md, "Event counts"): XIDs and clock
events counted over a window and since the start, served when the counters file lists them, as dcgm-exporter does.

dcgm-exporter's ``xid-errors`` and ``clock-events`` collectors read DCGM's samples of ``DCGM_FI_DEV_XID_ERRORS``
and ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``; here the samples are the exporter's own collections: the XID source's
counts per code (docs/health.md) and each collection's ``clocks_event_reasons.active`` bitmask. The windowed
families (since 3.3.5-3.4.0) count the samples of the last ``--xid-count-window-size`` /
``--clock-events-count-window-size`` milliseconds, one series per XID code or clock event reason labelled
``window_size_in_ms``, and one zero series without that label for a GPU with no sample in the window. The totals
(``internal/pkg/collector/*_total_collector.go``, NVIDIA/dcgm-exporter commit 7ad5832) count every XID, and every
clock event reason's start (inactive to active between two samples; the first sample only primes), since the
exporter started, one counter series per code or reason once it has happened.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from nvidia_gpu_exporter.exposition.text import header
from nvidia_gpu_exporter.model.snapshot import XidRecord
from nvidia_gpu_exporter.model.uuids import normalize_uuid

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
CLOCK_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
CLOCK_TOTAL = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
NAMES = (XID_COUNT, XID_TOTAL, CLOCK_COUNT, CLOCK_TOTAL)
XID_NAMES = (XID_COUNT, XID_TOTAL)
WINDOW_LABEL = "window_size_in_ms"
# dcgm-exporter's clock_event label of each DCGM_CLOCKS_EVENT_REASON_* bit (NVML's nvmlClocksEventReasons bits);
# other bits are not counted, as there.
CLOCK_EVENTS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "clocks_setting",
    0x4: "power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
MAX_SAMPLES = 10_000  # clock samples kept per GPU: a window longer than this many collections undercounts


@dataclass(frozen=True, slots=True)
class EventFamily:
    """A listed event family: its name and the counters file's type and HELP."""

    name: str
    metric_type: str
    help: str


class XidCounts:
    """Each GPU's XIDs per code since the first observation, and as of any later time, from the XID source's
    cumulative counts: what was counted before the first observation (the exporter's start) is not counted."""

    def __init__(self) -> None:
        self._baseline: dict[tuple[str, int], int] | None = None
        self._history: dict[tuple[str, int], list[tuple[float, int]]] = {}  # (when seen, count), on each change

    def observe(self, now: float, records: Sequence[XidRecord], keep_after: float) -> None:
        """Record the counts seen at ``now``; history before ``keep_after`` is needed no more."""
        current = {(normalize_uuid(record.gpu_uuid), record.xid): record.count for record in records if record.xid}
        if self._baseline is None:
            self._baseline = dict(current)
        for key, count in current.items():
            history = self._history.setdefault(key, [])
            if not history or history[-1][1] != count:
                history.append((now, count))
            while len(history) > 1 and history[1][0] <= keep_after:
                del history[0]

    def _count_at(self, key: tuple[str, int], when: float) -> int:
        """The count seen at ``when`` (the baseline before anything was seen)."""
        seen = [count for at, count in self._history.get(key, ()) if at <= when]
        baseline = (self._baseline or {}).get(key, 0)
        return seen[-1] if seen else baseline

    def counts(self, uuid: str, since: float | None, now: float) -> dict[int, int]:
        """Per code, the GPU's XIDs after ``since`` (``None``: since the first observation), those above 0."""
        found: dict[int, int] = {}
        for key in sorted(self._history):
            if key[0] != uuid:
                continue
            start = (self._baseline or {}).get(key, 0) if since is None else self._count_at(key, since)
            count = self._count_at(key, now) - start
            if count > 0:
                found[key[1]] = count
        return found


class ClockEvents:
    """Each GPU's clock event reason bitmask per collection: the samples dcgm-exporter's collectors count."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._previous: dict[str, int] = {}
        self._starts: dict[tuple[str, int], int] = {}

    def observe(self, now: float, masks: dict[str, int], keep_after: float) -> None:
        """One sample per GPU and collection: a collection rendered again adds nothing."""
        for uuid, mask in masks.items():
            samples = self._samples.setdefault(uuid, deque(maxlen=MAX_SAMPLES))
            if samples and samples[-1][0] >= now:
                continue
            samples.append((now, mask))
            while samples and samples[0][0] <= keep_after:
                samples.popleft()
            previous = self._previous.get(uuid)
            self._previous[uuid] = mask
            if previous is None:  # the first sample primes: a reason active at the start did not start now
                continue
            for bit in CLOCK_EVENTS:
                if mask & bit and not previous & bit:
                    self._starts[(uuid, bit)] = self._starts.get((uuid, bit), 0) + 1

    def in_window(self, uuid: str, after: float) -> dict[int, int] | None:
        """Per reason bit, the GPU's samples after ``after`` with it active; ``None`` for no sample at all."""
        masks = [mask for at, mask in self._samples.get(uuid, ()) if at > after]
        if not masks:
            return None
        counts = {bit: sum(1 for mask in masks if mask & bit) for bit in CLOCK_EVENTS}
        return {bit: count for bit, count in counts.items() if count}

    def starts(self, uuid: str) -> dict[int, int]:
        return {bit: self._starts[(uuid, bit)] for bit in CLOCK_EVENTS if (uuid, bit) in self._starts}


def parse_mask(cell: str) -> int | None:
    """nvidia-smi's bitmask cell (``0x0000000000000004``), or ``None`` when it is not one."""
    try:
        return int(cell.strip(), 16)
    except ValueError:
        return None


class DcgmEvents:
    """The listed event families of a DCGM exposition, with the state their counts need."""

    def __init__(self, families: Sequence[EventFamily], xid_window_ms: int, clock_window_ms: int) -> None:
        self.families = tuple(families)
        self._xid_window = xid_window_ms
        self._clock_window = clock_window_ms
        self._xids = XidCounts()
        self._clocks = ClockEvents()
        self._lock = threading.Lock()  # scrapes may render concurrently

    def text(
        self, now: float, entities: Sequence[tuple[str, str]], xids: Sequence[XidRecord], masks: dict[str, int]
    ) -> str:
        """The families for ``entities`` (normalized GPU uuid, label text), GPUs' samples taken at ``now``."""
        xid_after = now - self._xid_window / 1000.0
        clock_after = now - self._clock_window / 1000.0
        with self._lock:
            self._xids.observe(now, xids, xid_after)
            self._clocks.observe(now, masks, clock_after)
            return "".join(self._family(family, now, xid_after, clock_after, entities) for family in self.families)

    def _family(
        self, family: EventFamily, now: float, xid_after: float, clock_after: float, entities: Sequence[tuple[str, str]]
    ) -> str:
        lines: list[str] = []
        for uuid, labels in entities:
            if family.name == XID_COUNT:
                window = f'{WINDOW_LABEL}="{self._xid_window}"'
                counts = self._xids.counts(uuid, xid_after, now)
                lines += [f'{family.name}{{{labels},{window},xid="{code}"}} {n}\n' for code, n in counts.items()]
                if not counts:  # no XID sample in the window: dcgm-exporter's zero series, without an xid
                    lines.append(f"{family.name}{{{labels},{window}}} 0\n")
            elif family.name == XID_TOTAL:
                counts = self._xids.counts(uuid, None, now)
                lines += [f'{family.name}{{{labels},xid="{code}"}} {n}\n' for code, n in counts.items()]
            elif family.name == CLOCK_COUNT:
                window = f'{WINDOW_LABEL}="{self._clock_window}"'
                found = self._clocks.in_window(uuid, clock_after)
                if found is None:
                    lines.append(f"{family.name}{{{labels},{window}}} 0\n")
                    continue
                lines += [
                    f'{family.name}{{{labels},clock_event="{CLOCK_EVENTS[bit]}",{window}}} {n}\n'
                    for bit, n in found.items()
                ]
            else:
                lines += [
                    f'{family.name}{{{labels},clock_event="{CLOCK_EVENTS[bit]}"}} {n}\n'
                    for bit, n in self._clocks.starts(uuid).items()
                ]
        return header(family.name, family.help, family.metric_type) + "".join(lines) if lines else ""
