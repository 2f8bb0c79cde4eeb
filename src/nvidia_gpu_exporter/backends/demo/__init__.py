"""The ``demo`` backend: simulated GPUs answered through the exec pipeline, plus the NVML-only readings."""
