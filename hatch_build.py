"""hatchling build hook: bake the build metadata ``--version`` prints into the wheel and the sdist.

The metadata and its file are defined once, in ``src/nvidia_gpu_exporter/support/buildinfo.py``, loaded here
by path (the package itself is not importable while it is being built). A wheel built from an sdist finds the
file the sdist's build wrote and keeps it; an editable install records nothing (``--version`` says unknown).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "src/nvidia_gpu_exporter"


def _buildinfo(root: Path) -> Any:
    spec = importlib.util.spec_from_file_location(
        "_nvidia_gpu_exporter_buildinfo", root / PACKAGE / "support/buildinfo.py"
    )
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {root / PACKAGE / 'support/buildinfo.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up
    spec.loader.exec_module(module)
    return module


class BuildInfoHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"
    _directory: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        buildinfo = _buildinfo(root)
        info = buildinfo.from_source(root, os.environ)
        if not info.known:
            return  # an sdist's own file (or none) stays as it is
        directory = self._directory = Path(tempfile.mkdtemp(prefix="nvidia-gpu-exporter-build-"))
        path = directory / buildinfo.FILE_NAME
        path.write_text(info.to_json(), encoding="utf-8")
        path.chmod(0o644)
        inside = (
            f"nvidia_gpu_exporter/{buildinfo.FILE_NAME}"
            if self.target_name == "wheel"
            else f"{PACKAGE}/{buildinfo.FILE_NAME}"
        )
        build_data["force_include"][str(path)] = inside

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
