"""The health sources' defaults that ``config.py`` reads for every start, apart from :mod:`.sysfs`, whose asyncio
must not load before ``preflight`` decides whether ``ssl`` may (issue 16: support/sslgate.py), and from
:mod:`.source`, whose parser loads once the first nvidia-smi run is under way (issue 31, item 2).
"""

from __future__ import annotations

DEFAULT_SYSFS_PATH = "/sys"  # --collect.sysfs-path: where the NVIDIA PCI functions are read
DEFAULT_KERNEL_LOG = "/dev/kmsg"  # --collect.kernel-log: where XIDs are read
