"""The exec runner's stuck ``nvidia-smi`` children, rendered whatever the collection's outcome, and the failed NVML
cycles of its supplement under the DCGM profile.

Outside ``nvidia_smi_*`` (the Go exporter has no such family, and its bytes stay the same); they sort
after ``nvidia_gpu_exporter_build_info`` and before every ``nvidia_smi_`` family.
"""

from __future__ import annotations

from nvidia_gpu_exporter.exposition.families import STUCK_CHILDREN, STUCK_CHILDREN_TOTAL, SUPPLEMENT_FAILURES
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.snapshot import StuckChildren, SupplementFailures


def stuck_children_families(stuck: StuckChildren) -> list[Family]:
    current, total = STUCK_CHILDREN.family(), STUCK_CHILDREN_TOTAL.family()
    current.add((), float(stuck.current))
    total.add((), float(stuck.total))
    return [current, total]


def supplement_failures_family(failures: SupplementFailures) -> Family:
    """The exec backend's failed NVML cycles by reason: it has children, and NVML beside them."""
    family = SUPPLEMENT_FAILURES.family()
    for reason, count in failures:
        family.add((reason,), float(count))
    return family
