"""From a snapshot to the ``nvidia_smi_*`` exposition (names, types, HELP and labels: :mod:`.families`), and the
chosen ``--metrics.profile``'s composition with the DCGM block (:mod:`.dcgm`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from nvidia_gpu_exporter.exposition.children import stuck_children_families, supplement_failures_family
from nvidia_gpu_exporter.exposition.families import (
    COMPUTE_APP_INFO,
    COMPUTE_APP_MEMORY,
    COMPUTE_APPS,
    COMPUTE_APPS_SUCCESS,
    FAILED_COLLECTIONS,
    GPU_INFO,
    LAST_DURATION,
    LAST_SUCCESS,
    LAST_SUCCESS_TIMESTAMP,
    MIG_PROCESS_LABELS,
    PROCESS_LABELS,
    STATUS,
)
from nvidia_gpu_exporter.exposition.health import health_families
from nvidia_gpu_exporter.exposition.jobs import job_families
from nvidia_gpu_exporter.exposition.naming import FieldMetric, plan_field_metrics
from nvidia_gpu_exporter.exposition.nvml import extras_families, xid_families
from nvidia_gpu_exporter.exposition.pci import pci_families
from nvidia_gpu_exporter.exposition.podusage import allocation_families, pod_families
from nvidia_gpu_exporter.exposition.processusage import overflowed_family, usage_families
from nvidia_gpu_exporter.exposition.text import (
    NEGATIVE_ZERO,
    DuplicateSeriesError,
    Family,
    escape_label_value,
    format_value,
    has_surrogates,
    header,
    render_blocks,
    render_family,
)
from nvidia_gpu_exporter.exposition.verdicts import VerdictBlocks
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS
from nvidia_gpu_exporter.model.snapshot import Attempt, GpuTable, ProcessList, QueryField, Snapshot, StatusFamily
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.values import PROCESS_ABSENT_TOKENS, transform_generic, transform_value

if TYPE_CHECKING:  # built by the caller for --metrics.profile=dcgm or both, so only they load it
    from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition

log = logging.getLogger(__name__)

MIB = 1_048_576.0
OWN_PREFIX = "nvidia_gpu_exporter_"  # the exporter's own families, served under every profile
# The per-field cell cache keeps a field only while it pays (docs/architecture.md, "The layers, top to bottom"):
# every CELL_CACHE_CHECK new texts, a field whose lookups since the last check hit less often than
# CELL_CACHE_MIN_HITS is a moving reading (power, energy, memory used) whose texts seldom come back, and is
# computed at every render from then on; no field keeps more than CELL_CACHE_LIMIT texts.
CELL_CACHE_CHECK = 256
CELL_CACHE_MIN_HITS = 0.2
CELL_CACHE_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class _Gpu:
    """A GPU row that will be rendered, with its labels worked out once."""

    uuid: str
    label: str  # '{uuid="..."}'
    cells: tuple[str, ...]


class Exposition:
    """Renders snapshots of one backend configuration; the field plan is decided once, at construction."""

    def __init__(
        self,
        fields: Sequence[QueryField],
        status_family: StatusFamily,
        *,
        mig_process_labels: bool = False,
        kubernetes_pod_labels: bool = False,
        nvidia_smi: bool = True,
        dcgm: DcgmExposition | None = None,
    ) -> None:
        self.fields = tuple(fields)
        self.status_family = status_family
        self.mig_process_labels = mig_process_labels
        self.kubernetes_pod_labels = kubernetes_pod_labels  # --kubernetes.pod-labels
        self.nvidia_smi = nvidia_smi  # --metrics.profile: nvidia_smi or both
        self.dcgm = dcgm  # --metrics.profile: dcgm or both
        self._verdict_blocks = VerdictBlocks()
        self.field_metrics: tuple[FieldMetric, ...] = plan_field_metrics(
            [(field.qfield, field.rfield) for field in self.fields]
        )
        self._headers = {metric.name: header(metric.name, metric.help, "gauge") for metric in self.field_metrics}
        positions = {field.qfield: index for index, field in enumerate(self.fields)}
        missing = [name for name in IDENTITY_FIELDS if name not in positions]
        if missing:
            raise ValueError(f"identity fields missing from the query: {', '.join(missing)}")
        self._identity_columns = tuple(positions[name] for name in IDENTITY_FIELDS)
        # Per field: raw cell text -> formatted sample value ("" = no sample). Most fields repeat their texts
        # across GPUs and scrapes (identity, settings, enumerations, percentages), so most of a render is
        # dictionary lookups. A field whose cache does not pay is left an empty dict and never filled again.
        self._formatted: list[dict[str, str]] = [{} for _ in self.field_metrics]
        self._caching = [True] * len(self.field_metrics)
        self._renders = 0  # renders of GPU rows so far, and how many rows the last one had
        self._rows = 0
        self._checked_at = [0] * len(self.field_metrics)  # per field: self._renders at its last check
        # attributes so that benchmarks/bench_pipeline.py can compare policies
        self.cell_cache_limit = CELL_CACHE_LIMIT
        self.cell_cache_min_hits = CELL_CACHE_MIN_HITS

    def cached_texts(self) -> int:
        """How many cell texts the per-field caches hold now (what a steady state keeps resident)."""
        return sum(len(cache) for cache in self._formatted)

    # -- health -----------------------------------------------------------------------------------------

    def health_families(self, snapshot: Snapshot) -> list[Family]:
        attempt = snapshot.attempt
        families = [FAILED_COLLECTIONS.family(), LAST_SUCCESS.family()]
        families[0].add((), float(snapshot.failed_collections))
        families[1].add((), 1.0 if attempt is not None and attempt.succeeded else 0.0)
        if attempt is not None:
            status = STATUS[self.status_family].family()
            status.add((), float(attempt.status_code))
            duration = LAST_DURATION.family()
            duration.add((), attempt.duration_seconds)
            families += [status, duration]
        if snapshot.last_success_at is not None:
            timestamp = LAST_SUCCESS_TIMESTAMP.family()
            timestamp.add((), float(int(snapshot.last_success_at)))
            families.append(timestamp)
        return families

    # -- GPUs -------------------------------------------------------------------------------------------

    def _renderable_gpus(self, table: GpuTable, cuda_version: str) -> tuple[list[_Gpu], Family]:
        info = GPU_INFO.family()
        gpus: list[_Gpu] = []
        for cells in table.rows:
            identity = [cells[column] for column in self._identity_columns]
            identity[0] = normalize_uuid(identity[0])
            identity.append(cuda_version)
            if any(has_surrogates(value) for value in identity):
                log.error("dropping a GPU whose identity is not valid UTF-8", extra={"pci_bus_id": identity[6]})
                continue
            info.add(identity, 1.0)
            uuid = identity[0]
            gpus.append(_Gpu(uuid, '{uuid="' + escape_label_value(uuid) + '"}', cells))
        gpus.sort(key=lambda gpu: gpu.uuid)
        return gpus, info

    def _format_cell(self, index: int, raw: str) -> str:
        """The formatted sample value of a cell ("" for no sample), memoized while the field's texts repeat."""
        metric = self.field_metrics[index]
        value = transform_value(raw, metric.kind, metric.multiplier, metric.qfield)
        text = "" if value is None else format_value(value)
        if text == NEGATIVE_ZERO:  # rendered for protobuf only: never cached for a text render to find
            return text
        if self._caching[index]:
            cache = self._formatted[index]
            size = len(cache)
            if size >= self.cell_cache_limit or (size and size % CELL_CACHE_CHECK == 0 and not self._pays(index)):
                self._formatted[index] = {}  # remembering its texts would only hold memory
                self._caching[index] = False
            else:
                cache[raw] = text
        return text

    def _pays(self, index: int) -> bool:
        """Whether a field's cache hit often enough since its last check (every miss since added a text)."""
        lookups = (self._renders - self._checked_at[index]) * self._rows
        self._checked_at[index] = self._renders
        return not lookups or lookups - CELL_CACHE_CHECK >= self.cell_cache_min_hits * lookups

    def _field_blocks(self, gpus: list[_Gpu]) -> list[tuple[str, str]]:
        signed = format_value(-0.0) == NEGATIVE_ZERO  # within signed_zeros(), for the protobuf rewrite
        unique = len({gpu.uuid for gpu in gpus}) == len(gpus)
        self._renders += 1
        self._rows = len(gpus)
        blocks: list[tuple[str, str]] = []
        for index, metric in enumerate(self.field_metrics):
            cache, column, name = self._formatted[index], metric.column, metric.name
            lines: list[str] = []
            emitted: set[str] = set()
            for gpu in gpus:
                raw = gpu.cells[column]
                text = cache.get(raw)
                if text is None or (text == "0" and signed):  # a cached 0 may have been a negative zero
                    text = self._format_cell(index, raw)
                if not text:
                    continue
                if not unique:
                    if gpu.uuid in emitted:
                        raise DuplicateSeriesError(
                            f"collected metric {name}{gpu.label} was collected before with the same "
                            "name and label values"
                        )
                    emitted.add(gpu.uuid)
                lines.append(f"{name}{gpu.label} {text}\n")
            if lines:
                blocks.append((name, self._headers[name] + "".join(lines)))
        return blocks

    # -- processes --------------------------------------------------------------------------------------

    def process_families(self, processes: ProcessList, gpu_uuids: Sequence[str]) -> list[Family]:
        success = COMPUTE_APPS_SUCCESS.family()
        success.add((), 1.0 if processes.succeeded else 0.0)
        if not processes.succeeded:
            return [success]
        label_names = MIG_PROCESS_LABELS if self.mig_process_labels else PROCESS_LABELS
        info = replace(COMPUTE_APP_INFO, labels=label_names).family()
        memory = replace(COMPUTE_APP_MEMORY, labels=label_names).family()
        counts = dict.fromkeys(gpu_uuids, 0)
        for row in processes.rows:
            uuid = normalize_uuid(row.gpu_uuid)
            values: tuple[str, ...] = (uuid, row.pid, row.process_name)
            if self.mig_process_labels:
                values += (row.gpu_instance_id, row.compute_instance_id)
            counts[uuid] = counts.get(uuid, 0) + 1  # counted even when its own series are dropped, as in Go
            if any(has_surrogates(value) for value in values):
                log.warning("dropping a process whose labels are not valid UTF-8", extra={"pid": row.pid})
                continue
            info.add(values, 1.0)
            if row.used_memory.strip().lower() not in PROCESS_ABSENT_TOKENS:
                used = transform_generic(row.used_memory, MIB)
                if used is not None:
                    memory.add(values, used)
        count_family = COMPUTE_APPS.family()
        for uuid, count in counts.items():
            count_family.add((uuid,), float(count))
        return [info, memory, count_family, success]

    # -- whole scrape -----------------------------------------------------------------------------------

    def render(self, snapshot: Snapshot) -> str:
        """The chosen profile's text: the DCGM block first, then the ``nvidia_smi_*`` families (or, for dcgm
        alone, only the exporter's own ``nvidia_gpu_exporter_*`` ones); a repeated series raises
        :class:`DuplicateSeriesError`."""
        blocks = self._blocks(snapshot)
        if not self.nvidia_smi:
            blocks = [block for block in blocks if block[0].startswith(OWN_PREFIX)]
        dcgm = self.dcgm.render(snapshot) if self.dcgm is not None else ""
        return dcgm + render_blocks(blocks)

    def _blocks(self, snapshot: Snapshot) -> list[tuple[str, str]]:
        """The ``(family name, text)`` blocks of the ``nvidia_smi_*`` profile."""
        families = self.health_families(snapshot)
        blocks: list[tuple[str, str]] = []
        attempt: Attempt | None = snapshot.attempt
        rendered_uuids: set[str] | None = None  # the GPUs of a successful collection, for attribution
        if attempt is not None and attempt.readings is not None:
            readings = attempt.readings
            gpus, info = self._renderable_gpus(readings.gpus, readings.cuda_version)
            families.append(info)
            if self.kubernetes_pod_labels and snapshot.kubernetes is not None:
                from nvidia_gpu_exporter.exposition.kubernetes import labelled_gpu  # noqa: PLC0415 - attribution only

                holders = snapshot.kubernetes.sole_holders()
                gpus = [replace(gpu, label=labelled_gpu(gpu.uuid, holders.get(gpu.uuid))) for gpu in gpus]
            blocks += self._field_blocks(gpus)
            rendered_uuids = {gpu.uuid for gpu in gpus}
            # Every GPU row gets a count, also one dropped for a bad identity cell, as in the Go exporter.
            every_uuid = [normalize_uuid(cells[self._identity_columns[0]]) for cells in readings.gpus.rows]
            if readings.processes is not None:
                families += self.process_families(readings.processes, every_uuid)
            if readings.process_usage is not None:
                families += usage_families(readings.process_usage, every_uuid)
            if snapshot.pod_usage is not None:  # only with --collect.process-usage and --kubernetes.process-pods
                families += pod_families(snapshot.pod_usage, rendered_uuids)
            if snapshot.pod_allocations is not None:  # only with --kubernetes.pod-resources, when it answered
                families += allocation_families(snapshot.pod_allocations, rendered_uuids)
            if snapshot.slurm_jobs is not None:  # only with --slurm.jobs
                families += job_families(snapshot.slurm_jobs, rendered_uuids)
            if readings.extras is not None:
                families += extras_families(readings.extras)
        families += xid_families(snapshot.xids)  # XID counts outlive failed collections
        families += pci_families(snapshot.pci)  # so does what sysfs lists: a lost GPU often fails the collection
        families += health_families(snapshot)  # so do the kernel log's other findings
        if snapshot.stuck_children is not None:  # exec only; a stuck child is why its collections fail
            families += stuck_children_families(snapshot.stuck_children)
        if snapshot.supplement_failures is not None:  # the exec backend's NVML supplement (DCGM profile)
            families.append(supplement_failures_family(snapshot.supplement_failures))
        if snapshot.process_usage_overflowed is not None:  # only with --collect.process-usage
            families.append(overflowed_family(snapshot.process_usage_overflowed))
        if snapshot.kubernetes is not None:  # only with --kubernetes.* attribution on
            from nvidia_gpu_exporter.exposition.kubernetes import attribution_families  # noqa: PLC0415 - attribution only

            families += attribution_families(snapshot.kubernetes, rendered_uuids)
        if snapshot.pod_metadata_failures is not None:  # only with --kubernetes.pod-metadata
            from nvidia_gpu_exporter.exposition.kubernetes import pod_metadata_family  # noqa: PLC0415 - opt-in

            families.append(pod_metadata_family(snapshot.pod_metadata_failures))
        blocks += [(family.name, render_family(family)) for family in families]
        blocks += self._verdict_blocks.blocks(snapshot.verdicts)  # the verdict judged from all of the above
        return blocks
