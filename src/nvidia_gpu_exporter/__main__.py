"""``python -m nvidia_gpu_exporter``."""

import sys

from nvidia_gpu_exporter.cli import main

sys.exit(main())
