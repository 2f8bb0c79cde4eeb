"""CPU per collection of the nvml backend in MIG mode under the DCGM profile (8 GPUs of the fake libnvidia-ml's
``mig`` scenario: each with two GPU instances, three MIG devices), with and without the GPU-instance placements
that only the DRA claim labels use (``--kubernetes.dra-claims``).

Process CPU time (``time.process_time``) over the cycles, divided by their number, in the calling thread.

    python benchmarks/bench_mig.py [--iterations 300]
"""

from __future__ import annotations

import argparse
import ctypes
import inspect
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_fake import compile_fake_nvml, nvml_env

GPUS = 8
PLACEMENT_CALLS = ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo")


def mig_layout(gpus: int) -> list[str]:
    """The fake's commands that put every GPU in MIG mode with GPU 0's layout of the ``mig`` scenario (its
    replicas start plain)."""
    commands = ["reset mig", f"replicate {gpus}"]
    for gpu in range(1, gpus):
        commands += [
            f"set {gpu} mig_cur 1",
            f"mig {gpu} 2 0 1c.3g.71gb 76235669504 10737418240",
            f"mig {gpu} 2 1 1c.3g.71gb 76235669504 10737418240",
            f"mig {gpu} 7 0 1g.18gb 19327352832 0",
            f"gpm {gpu} 2 45.5 40.25 30.0 12.5 100.0 200.0",
            f"gpm {gpu} 7 0.5 0.25 0.125 0.0 1.5 2.5",
        ]
        for slot, (profile, start, size) in enumerate(((2, 0, 4), (2, 0, 4), (0, 6, 1))):
            commands += [
                f"setmig {gpu} {slot} gi_profile {profile}",
                f"setmig {gpu} {slot} placement_start {start}",
                f"setmig {gpu} {slot} placement_size {size}",
            ]
    return commands


def placement_cost(backend: Any, iterations: int) -> tuple[float, float]:
    """CPU per collection of the placement step alone over every GPU: read from NVML (an empty cache each time, as
    every collection did before placements were cached) and from a warm cache."""
    from nvidia_gpu_exporter.backends.nvml.mig import PlacementCache

    extras = backend.collect_blocking().extras
    gpus = [(pynvml_handle(index), device.gpu_uuid) for index, device in enumerate(extras.gpus)]
    layouts = {
        uuid: tuple(
            sorted(
                (d.gpu_instance_id, d.compute_instance_id, d.profile, d.mig_uuid)
                for d in extras.mig_devices
                if d.gpu_uuid == uuid
            )
        )
        for _, uuid in gpus
    }
    timings = []
    for fresh in (True, False):
        cache = PlacementCache()
        started = time.process_time()
        for _ in range(iterations):
            cache = PlacementCache() if fresh else cache
            for handle, uuid in gpus:
                cache.placements(handle, uuid, layouts[uuid])
        timings.append((time.process_time() - started) / iterations)
    return timings[0], timings[1]


def pynvml_handle(index: int) -> Any:
    import pynvml

    return pynvml.nvmlDeviceGetHandleByIndex(index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    import pynvml

    from nvidia_gpu_exporter.backends.fields import FieldRequest
    from nvidia_gpu_exporter.backends.nvml import open_backend

    with tempfile.TemporaryDirectory() as directory:
        library = compile_fake_nvml(Path(directory))
        os.environ.update(nvml_env(library, None, "mig"))
        fake = ctypes.CDLL(str(library))
        fake.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
        fake.fakeNvmlCallCount.restype = ctypes.c_ulong
        fake.fakeNvmlCommand.argtypes = [ctypes.c_char_p]
        for command in mig_layout(GPUS):
            assert fake.fakeNvmlCommand(command.encode()) == 0, command
        pynvml.nvmlLib = fake
        # Older trees always read the placements and take no option: one row, "every collection".
        options: list[dict[str, Any]] = (
            [{}]
            if "mig_placements" not in inspect.signature(open_backend).parameters
            else [
                {"mig_placements": False},
                {"mig_placements": True},
            ]
        )
        rows: list[tuple[str, float, int]] = []
        isolated: tuple[float, float] | None = None
        for option in options:
            backend: Any = open_backend(
                FieldRequest(), watch_xids=False, gpm_whole_gpus=True, dcgm_readings=True, **option
            )
            for _ in range(20):  # warm-up: bindings' symbol cache, allocator, the first placement read
                backend.collect_blocking()
            fake.fakeNvmlResetCallCounts()
            started = time.process_time()
            for _ in range(args.iterations):
                backend.collect_blocking()
            cpu = (time.process_time() - started) / args.iterations
            calls = sum(int(fake.fakeNvmlCallCount(name.encode())) for name in PLACEMENT_CALLS)
            if option.get("mig_placements"):
                isolated = placement_cost(backend, args.iterations)
            backend.session.close(5)
            label = {
                (): "placements every collection (no option)",
                (False,): "placements not read (no DRA labels)",
                (True,): "placements once per MIG layout (--kubernetes.dra-claims)",
            }[tuple(option.values())]
            rows.append((label, cpu, calls))

    print(
        f"{GPUS} simulated H200 GPUs in MIG mode (2 GPU instances, 3 MIG devices each), the full catalog, DCGM "
        f"profile readings; python {platform.python_version()} on {platform.machine()}"
    )
    print("| placements | iterations | CPU per collection | placement calls over the timed cycles |")
    print("|---|---:|---:|---:|")
    for label, cpu, calls in rows:
        print(f"| {label} | {args.iterations} | {cpu * 1000:.2f} ms | {calls} |")
    if isolated is not None:
        print(
            f"placements of the {GPUS} GPUs alone, CPU per collection: read {isolated[0] * 1000:.3f} ms, "
            f"from the cache {isolated[1] * 1000:.3f} ms"
        )


if __name__ == "__main__":
    main()
