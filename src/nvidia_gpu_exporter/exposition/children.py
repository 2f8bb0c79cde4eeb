"""The exec runner's stuck ``nvidia-smi`` children, rendered whatever the collection's outcome.

Outside ``nvidia_smi_*`` (the Go exporter has no such family, and its bytes stay the same); they sort
after ``nvidia_gpu_exporter_build_info`` and before every ``nvidia_smi_`` family.
"""

from __future__ import annotations

from nvidia_gpu_exporter.exposition.families import STUCK_CHILDREN, STUCK_CHILDREN_TOTAL
from nvidia_gpu_exporter.exposition.text import Family
from nvidia_gpu_exporter.model.snapshot import StuckChildren


def stuck_children_families(stuck: StuckChildren) -> list[Family]:
    current, total = STUCK_CHILDREN.family(), STUCK_CHILDREN_TOTAL.family()
    current.add((), float(stuck.current))
    total.add((), float(stuck.total))
    return [current, total]
