"""The health verdict's cost per collection (issue 28), next to the collection it is judged from, at 8 and 64 GPUs.

Each iteration parses a different ``nvidia-smi`` output (the H200 table of ``bench_pipeline.py``: the shared
capture when ``../shared`` is beside the checkout, else the demo fleet) and renders the ``nvidia_smi_*`` exposition:
the collection. The verdict is then judged on that snapshot with the previous verdict's memory
(``model/judge.py``), and its families rendered as the exposition does (``exposition/verdicts.py``: again only when
the verdict changed). ``--xids`` gives every GPU XID
records of that many codes (the kernel log's ledger), so the XID reasons have something to read.

    python benchmarks/bench_verdict.py [--iterations 300] [--gpus 8,64] [--xids 4] [--moving N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import outputs_for, source_capture
from nvidia_gpu_exporter.backends.exec.output import parse_gpu_csv
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.exposition.verdicts import VerdictBlocks
from nvidia_gpu_exporter.model.judge import VerdictMemory, judge
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    Readings,
    Snapshot,
    StatusFamily,
    XidRecord,
    column_of,
)

XID_CODES = (48, 63, 74, 79, 94, 119, 13, 31)


def run(gpus: int, iterations: int, xids: int, moving: int) -> tuple[float, float, float, float, float]:
    """Median and p99 of the collection and of the verdict (judged and rendered), and the judging's median."""
    capture, state, _ = source_capture()
    outputs, fields = outputs_for(capture, state, gpus, min(iterations, 50))
    exposition = Exposition(fields, StatusFamily.COMMAND_EXIT_CODE)
    uuid_column = column_of(fields, "uuid")
    assert uuid_column is not None
    memory = VerdictMemory()
    rendered = VerdictBlocks()  # as the exposition holds it
    collection: list[float] = []
    verdict: list[float] = []
    judging: list[float] = []
    now = time.time()
    for iteration in range(iterations):
        started = time.thread_time()
        rows = parse_gpu_csv(outputs[iteration % len(outputs)], len(fields)).rows
        snapshot = Snapshot(Attempt(Readings(GpuTable(rows), None, "13.1"), 0, 0.1, now), 0, now, iteration + 1)
        exposition.render(snapshot)
        collection.append(time.thread_time() - started)
        count = 1 + (iteration // moving if moving else 0)  # the XIDs' count moves every `moving` collections
        last = now - 60.0 + (count - 1)
        records = tuple(XidRecord(row[uuid_column], code, count, last) for row in rows for code in XID_CODES[:xids])
        snapshot = replace(snapshot, xids=records)
        started = time.thread_time()
        judgement = judge(snapshot, fields, memory, now + iteration)
        memory = judgement.memory
        judged = time.thread_time()
        rendered.blocks(judgement.verdicts)
        verdict.append(time.thread_time() - started)
        judging.append(judged - started)
    p99 = 98
    return (
        statistics.median(collection),
        statistics.quantiles(collection, n=100)[p99],
        statistics.median(verdict),
        statistics.quantiles(verdict, n=100)[p99],
        statistics.median(judging),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--gpus", default="8,64")
    parser.add_argument("--xids", type=int, default=4, help="XID codes per GPU (0 to 8)")
    parser.add_argument("--moving", type=int, default=0, help="a new XID of each code every N collections (0: none)")
    args = parser.parse_args()
    xids = f"{args.xids} XID codes per GPU, a new one every {args.moving or 'never'}"
    print(f"source: {source_capture()[2]}; {args.iterations} iterations; {xids}")
    columns = ("collection median", "collection p99", "verdict median", "verdict p99", "of it judging", "ratio")
    print("| GPUs | " + " | ".join(columns) + " |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in (int(count) for count in args.gpus.split(",")):
        c_median, c_p99, v_median, v_p99, judging = run(gpus, args.iterations, args.xids, args.moving)
        print(
            f"| {gpus} | {c_median * 1e3:.3f} ms | {c_p99 * 1e3:.3f} ms | {v_median * 1e3:.3f} ms | "
            f"{v_p99 * 1e3:.3f} ms | {judging * 1e3:.3f} ms | {v_median / c_median:.0%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
