"""``python -m nvidia_gpu_exporter.fakesmi [fake flags...] <nvidia-smi arguments...>``."""

from nvidia_gpu_exporter.fakesmi.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
