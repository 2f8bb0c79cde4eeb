"""The fake libnvidia-ml (``tests/fakenvml/fake_nvml.c``) built for the benchmarks that load it: ``bench_nvml.py``
into its own process, ``bench_footprint.py`` into the exporter's through ``LD_LIBRARY_PATH``.

``tests/nvml_fixtures.py`` builds the same file for the tests (with warnings as errors, skipping where there is no
compiler); a benchmark exits with the reason instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "fakenvml" / "fake_nvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"  # the soname the bindings dlopen


def compile_fake_nvml(directory: Path, *defines: str) -> Path:
    """Build the fake as ``directory/libnvidia-ml.so.1`` with ``-D`` ``defines`` (``MAX_TOP=256``: room for more
    GPUs); returns the library's path."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("no C compiler (cc, gcc or $CC): cannot build the fake libnvidia-ml")
    output = directory / LIBRARY_NAME
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-O2",
            *(f"-D{define}" for define in defines),
            f"-Wl,-soname,{LIBRARY_NAME}",
            "-o",
            str(output),
            str(SOURCE),
            "-lpthread",
        ],
        check=True,
    )
    return output


def nvml_env(library: Path, gpus: int | None = None, scenario: str = "h200") -> dict[str, str]:
    """The environment that makes a process load the fake at ``library`` with ``scenario`` and ``gpus`` GPUs."""
    env = {"LD_LIBRARY_PATH": str(library.parent), "FAKE_NVML_SCENARIO": scenario}
    if gpus is not None:
        env["FAKE_NVML_GPUS"] = str(gpus)
    return env
