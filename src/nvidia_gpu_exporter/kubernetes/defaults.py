"""Attribution's defaults, apart from the modules that use them: ``config.py`` reads them for every start, and
importing :mod:`.podresources` or :mod:`.devices` for two constants would load attribution's code (and its
model) on every exporter, though attribution is opt-in (issue 16, the startup time and the footprint).
"""

from __future__ import annotations

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"  # --kubernetes.pod-resources-socket
DEFAULT_PROC_ROOT = "/proc"  # --kubernetes.proc-root
DEFAULT_RESOURCE_PATTERNS = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
