"""The fleet's defaults that ``config.py`` reads for every start, apart from :mod:`.targets`, whose parser (and
its imports) only fleet mode needs (issue 16, the startup time and the footprint).
"""

from __future__ import annotations

DEFAULT_GLOBAL_CONCURRENCY = 64  # --fleet.max-concurrent: nvidia-smi runs in flight over SSH, all targets
