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
        in_tree = root / PACKAGE / buildinfo.FILE_NAME  # an sdist's record
        if info.known:
            directory = self._directory = Path(tempfile.mkdtemp(prefix="nvidia-gpu-exporter-build-"))
            source = directory / buildinfo.FILE_NAME
            source.write_text(info.to_json(), encoding="utf-8")
            source.chmod(0o644)
        elif in_tree.is_file() and self.target_name == "wheel":
            source = in_tree
        else:
            return
        # Always added here, never as an ordinary package file (the wheel target excludes it), so a wheel built
        # from the sdist lays its files out exactly as one built from the checkout.
        if self.target_name == "wheel":
            build_data["force_include"][str(source)] = f"nvidia_gpu_exporter/{buildinfo.FILE_NAME}"
        else:
            build_data["force_include"][str(source)] = f"{PACKAGE}/{buildinfo.FILE_NAME}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
