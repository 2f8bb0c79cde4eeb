"""The health sources' defaults that ``config.py`` reads for every start, apart from :mod:`.sysfs`, whose asyncio
must not load before ``preflight`` decides whether ``ssl`` may (issue 16: support/sslgate.py).
"""

from __future__ import annotations

DEFAULT_SYSFS_PATH = "/sys"  # --collect.sysfs-path: where the NVIDIA PCI functions are read
