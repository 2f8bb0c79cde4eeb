"""Differential fuzz against the real Go exporter: many random nvidia-smi outputs, both exporters, byte compare.

Not a benchmark of speed: it lives here because it needs the Go binary (benchmarks/go-exporter/README.md)
and runs for minutes. tests/go_differential.py holds the generator; tests/test_go_differential.py runs a
few cases of it in the slow suite.

    python benchmarks/diff_go.py --go-binary /path/to/nvidia_gpu_exporter --seed 1 --setups 100 --rounds 20

Each difference is written to --out as ``<setup>-<round>.txt`` (the flags, both statuses, a unified diff of
Go's text against ours) with the capture that produced it as ``<setup>-<round>.capture.txt``; each difference in
an HTTP answer as ``<setup>-http-<n>.txt``, and each on the command line (``--cli-cases``) as ``cli-<n>.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from go_differential import Difference, HttpDifference, run
from go_differential_cli import CliDifference, run_cli


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-binary", default=os.environ.get("GO_EXPORTER_BIN"), help="default: $GO_EXPORTER_BIN")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--setups", type=int, default=20, help="exporter pairs started (startup settings drawn)")
    parser.add_argument("--rounds", type=int, default=10, help="scrapes per setup (data drawn anew each time)")
    parser.add_argument("--minutes", type=float, help="start no new setup after this long (a time-boxed run)")
    parser.add_argument("--cli-cases", type=int, default=0, help="command lines run to their exit or their listen")
    parser.add_argument("--out", type=Path, default=Path("diff-go-out"))
    args = parser.parse_args()
    if not args.go_binary:
        parser.error("--go-binary (or GO_EXPORTER_BIN) is required")
    args.out.mkdir(parents=True, exist_ok=True)

    def record(difference: Difference) -> None:
        stem = args.out / f"{difference.setup_number}-{difference.round_number}"
        stem.with_suffix(".txt").write_text(difference.report() + "\n", encoding="utf-8", errors="surrogateescape")
        stem.with_suffix(".capture.txt").write_text(difference.capture, encoding="utf-8", errors="surrogateescape")
        print(difference.report().split("\n", 1)[0], flush=True)

    http_count = 0

    def record_http(difference: HttpDifference) -> None:
        nonlocal http_count
        path = args.out / f"{difference.setup_number}-http-{http_count}.txt"
        http_count += 1
        path.write_text(difference.report() + "\n", encoding="utf-8", errors="surrogateescape")
        print(difference.report().split("\n", 1)[0], flush=True)

    def record_cli(difference: CliDifference) -> None:
        path = args.out / f"cli-{difference.case_number}.txt"
        path.write_text(difference.report() + "\n", encoding="utf-8", errors="surrogateescape")
        print(difference.report().split("\n", 1)[0], flush=True)

    began = time.monotonic()
    stop_after = None if args.minutes is None else args.minutes * 60
    cli = run_cli(args.go_binary, args.seed, args.cli_cases, on_difference=record_cli)
    print(f"seed {args.seed}: {cli.cases} command lines, {len(cli.differences)} differences", flush=True)
    tally = run(
        args.go_binary,
        args.seed,
        args.setups,
        args.rounds,
        on_difference=record,
        on_http_difference=record_http,
        stop_after=stop_after,
    )
    print(
        f"seed {args.seed}: {tally.setups} setups, {tally.rounds} rounds compared, "
        f"{len(tally.differences)} differences; {tally.requests} HTTP requests, "
        f"{len(tally.http_differences)} differences; {time.monotonic() - began:.0f} s"
    )
    return 1 if tally.differences or tally.http_differences or cli.differences else 0


if __name__ == "__main__":
    sys.exit(main())
