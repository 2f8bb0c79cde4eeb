"""The ``nvml`` backend: NVIDIA's official bindings (nvidia-ml-py) reading libnvidia-ml in-process.

Importing this package imports ``pynvml``; the command line imports it only when ``--collect.backend=nvml``.
"""

from __future__ import annotations

from nvidia_gpu_exporter.backends.nvml.backend import STILL_IN_PROGRESS, NvmlBackend, open_backend

__all__ = ["STILL_IN_PROGRESS", "NvmlBackend", "open_backend"]
