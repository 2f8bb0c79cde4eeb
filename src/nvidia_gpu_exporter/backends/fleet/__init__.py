"""The fleet backend: nvidia-smi on other hosts over pooled SSH connections (docs/fleet.md).

It runs the exec backend's pipeline (:class:`~nvidia_gpu_exporter.backends.exec.backend.SmiBackend`) over an
:class:`~.ssh.SshRunner`, so a target's readings are exactly what a local exporter on it would read. Only this
package imports asyncssh, the optional ``fleet`` extra.
"""
