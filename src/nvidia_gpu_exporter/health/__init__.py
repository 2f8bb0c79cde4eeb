"""Node health sources beside the backends: the kernel log (XIDs, GPUs fallen off the bus) and sysfs (the GPUs
the node should have). Like the backends they read the machine and know nothing of Prometheus; they work
whichever backend collects the GPU readings.
"""
