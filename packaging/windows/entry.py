"""The frozen executable's entry point (PyInstaller, packaging/windows/build.py): the same ``main`` as
``python -m nvidia_gpu_exporter``, given the process's own arguments, so that under the Service Control Manager it
hosts the service (``windows.dispatch``) and ``install`` registers this executable itself (``scm.launcher``)."""

import sys

from nvidia_gpu_exporter.cli import main

sys.exit(main())
