"""Prometheus exporter for NVIDIA GPUs, a drop-in for the Go ``nvidia_gpu_exporter``."""

__version__ = "0.1.0"
