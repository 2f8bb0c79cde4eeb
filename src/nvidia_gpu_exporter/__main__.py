"""``python -m nvidia_gpu_exporter``."""

import sys

from .cli import main

sys.exit(main())
