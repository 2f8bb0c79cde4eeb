"""The exec backend's defaults that ``config.py`` reads for every start, apart from :mod:`.runner`, whose asyncio
must not load before ``preflight`` decides whether ``ssl`` may (issue 16: support/sslgate.py).
"""

from __future__ import annotations

# 8 GPUs with every field nvidia-smi lists print about 40 KB, a thousand processes about 100 KB. 1 MiB leaves
# ten to twenty times that, and keeps the costliest answer that fits (about 3,500 distinct GPUs, parsed and
# rendered in a thread) under 128 MiB of resident set and a couple of seconds (BENCHMARKS.md).
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024  # --collect.max-output-bytes
