"""The fake ``nvidia-smi`` command, answering from captures (``python -m nvidia_gpu_exporter.fakesmi``)."""
