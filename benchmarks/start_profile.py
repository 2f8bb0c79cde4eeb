"""Where a start's import CPU goes (issue 31, item 2): each module's own CPU (as ``-X importtime``'s "self"
column, but thread CPU time, which the machine's load disturbs far less than wall time), and three costs spread
over many modules: dataclass generation, the cyclic garbage collector, regular expressions compiled.

Each round is a fresh interpreter that keeps ``ssl`` out (as a plain start does), imports what a start imports
before its first nvidia-smi run (``cli`` and ``app``), then what ``serve`` imports beside that run
(``app.import_serving_modules``); each figure is the minimum over the rounds. The hooks cost some CPU
themselves, so read the shares, not the sum against ``bench_footprint.py``'s totals.

    python benchmarks/start_profile.py [--rounds 7] [--top 15]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_hooks import LOADER_PROXY, WRAPPING_FINDER

REPO = Path(__file__).resolve().parents[1]

PROBE = (
    r"""
import dataclasses, gc, json, re, sys, time
modules, stack = {}, []
costs = {"dataclasses": 0.0, "gc": 0.0, "re": 0.0}
counts = {"dataclasses": 0, "gc": 0, "re": 0}

def timed(kind, function):
    def wrapper(*args, **kwargs):
        began = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            costs[kind] += time.thread_time() - began
            counts[kind] += 1
    return wrapper

dataclasses._process_class = timed("dataclasses", dataclasses._process_class)
re._compile = timed("re", re._compile)
gc_began = [0.0]
def on_gc(phase, info):
    if phase == "start":
        gc_began[0] = time.thread_time()
    else:
        costs["gc"] += time.thread_time() - gc_began[0]
        counts["gc"] += 1
gc.callbacks.append(on_gc)

"""
    + LOADER_PROXY
    + r"""
class _Loader(_LoaderProxy):
    def exec_module(self, module):
        stack.append(0.0)
        began = time.thread_time()
        try:
            return self._loader.exec_module(module)
        finally:
            spent = time.thread_time() - began
            children = stack.pop()
            modules[self._name] = modules.get(self._name, 0.0) + spent - children
            if stack:
                stack[-1] += spent

"""
    + WRAPPING_FINDER
    + r"""
from nvidia_gpu_exporter.support.sslgate import keep_ssl_out
keep_ssl_out()
import nvidia_gpu_exporter.cli, nvidia_gpu_exporter.app
before = (dict(modules), dict(costs), dict(counts))
nvidia_gpu_exporter.app.import_serving_modules()
print(json.dumps({"before": before, "all": (modules, costs, counts)}))
"""
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    runs = [json.loads(subprocess.check_output([sys.executable, "-c", PROBE], cwd=REPO)) for _ in range(args.rounds)]
    for phase, title in (("before", "before the first nvidia-smi run"), ("all", "all a start imports")):
        least: dict[str, float] = {}
        spread: dict[str, float] = {}
        counts: dict[str, int] = {}
        for run in runs:
            modules, costs, counted = run[phase]
            for name, seconds in modules.items():
                least[name] = min(least.get(name, seconds), seconds)
            for kind, seconds in costs.items():
                spread[kind] = min(spread.get(kind, seconds), seconds)
            counts = counted
        ours = {name: seconds for name, seconds in least.items() if name.startswith("nvidia_gpu_exporter")}
        print(
            f"\n### Imports {title}: {len(least)} modules, {sum(least.values()) * 1000:.1f} ms of CPU "
            f"(each module's least of {args.rounds}); this project's {len(ours)}: {sum(ours.values()) * 1000:.1f} ms\n"
        )
        print(
            f"Dataclasses built: {counts['dataclasses']} classes, {spread['dataclasses'] * 1000:.1f} ms; "
            f"collections by the garbage collector: {counts['gc']}, {spread['gc'] * 1000:.1f} ms; "
            f"regular expressions compiled: {counts['re']}, {spread['re'] * 1000:.1f} ms.\n"
        )
        print("| module | own CPU |\n|---|---:|")
        for name, seconds in sorted(least.items(), key=lambda item: -item[1])[: args.top]:
            print(f"| {name} | {seconds * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
