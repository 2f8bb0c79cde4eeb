"""Build metadata for ``--version``: the branch, revision and date of the commit a wheel was built from.

Written once per build by ``hatch_build.py`` (the hatchling build hook at the repository root, which loads this
file by path, so only the standard library may be imported here) into the package as :data:`FILE_NAME`, and
read by ``cli.version_text``. The values come from the environment (:data:`ENV_BRANCH`, :data:`ENV_REVISION`:
for builds outside a git checkout, e.g. the container build, which gets them as build arguments), else from
git in the source tree; the date is ``SOURCE_DATE_EPOCH`` (the last commit's time in every release build),
else the commit's time. An sdist carries the file its build wrote, so a wheel rebuilt from it says the same.
Whatever is not known reads :data:`UNKNOWN`: an editable install, a tarball without git, a damaged file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pathlib loads urllib.parse and ipaddress at every start for a build-time annotation
    from pathlib import Path

FILE_NAME = "_build_info.json"
UNKNOWN = "unknown"
ENV_BRANCH = "NVIDIA_GPU_EXPORTER_BUILD_BRANCH"
ENV_REVISION = "NVIDIA_GPU_EXPORTER_BUILD_REVISION"
MAX_FIELD_CHARS = 200  # a branch name or a sha; anything longer is not ours


GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}  # machine names as Go's GOARCH spells them


def machine() -> str:
    """The machine as ``--version`` and the build-info metric name it (Go's GOARCH: ``amd64``, ``arm64``).

    ``os.uname()`` is what ``platform.machine()`` reads on POSIX; ``platform`` (0.27 MiB) loads only elsewhere.
    """
    if hasattr(os, "uname"):
        raw = os.uname().machine
    else:
        import platform  # noqa: PLC0415 - Windows reads it from the environment or the registry

        raw = platform.machine()
    raw = raw.lower()
    return GO_ARCH.get(raw, raw)


def operating_system() -> str:
    """The OS as Go's GOOS names it (``linux``, ``windows``, ``darwin``)."""
    return sys.platform.replace("win32", "windows")


def python_version() -> str:
    """``platform.python_version()`` without ``platform``: the first word of ``sys.version`` (``3.11.7``)."""
    return sys.version.split(maxsplit=1)[0]


@dataclass(frozen=True, slots=True)
class BuildInfo:
    branch: str = UNKNOWN
    revision: str = UNKNOWN
    date: str = UNKNOWN  # RFC 3339, UTC

    @property
    def known(self) -> bool:
        return self.revision != UNKNOWN

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def _clean(value: object) -> str:
    if not isinstance(value, str):
        return UNKNOWN
    value = value.strip()
    if not value or len(value) > MAX_FIELD_CHARS or not value.isprintable():
        return UNKNOWN
    return value


def parse(text: str | None) -> BuildInfo:
    """The metadata in a build's file; :data:`UNKNOWN` for whatever is missing or malformed (never raises)."""
    if text is None:
        return BuildInfo()
    try:
        data = json.loads(text)
    except ValueError:
        return BuildInfo()
    if not isinstance(data, dict):
        return BuildInfo()
    return BuildInfo(**{key: _clean(data.get(key)) for key in ("branch", "revision", "date")})


def installed(package: str = "nvidia_gpu_exporter") -> BuildInfo:
    """The metadata baked into the installed package (:data:`UNKNOWN` fields when there is none).

    Read through the package's own loader (``pkgutil.get_data``: a directory, or the single-file zipapp's
    archive), not ``importlib.resources``, which loads ``zipfile``, ``tempfile`` and the compression modules:
    about 1.5 MiB of resident memory for one small file (issue 16).
    """
    import pkgutil  # noqa: PLC0415 - --version and the build_info family need it, once

    try:
        data = pkgutil.get_data(package, FILE_NAME)
        return parse(data.decode("utf-8")) if data is not None else BuildInfo()
    except (OSError, UnicodeDecodeError):
        return BuildInfo()


def _git(root: Path, *args: str) -> str:
    try:
        completed = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return completed.stdout.strip() if completed.returncode == 0 else ""


def from_source(root: Path, environ: Mapping[str, str]) -> BuildInfo:
    """What a build of the tree at ``root`` records: the environment's values first, then git's."""
    revision = _clean(environ.get(ENV_REVISION) or _git(root, "rev-parse", "--verify", "HEAD"))
    branch = _clean(environ.get(ENV_BRANCH) or _git(root, "rev-parse", "--abbrev-ref", "HEAD"))
    epoch = environ.get("SOURCE_DATE_EPOCH") or _git(root, "log", "-1", "--format=%ct")
    from datetime import datetime, timezone  # noqa: PLC0415 - a build-time need; the exporter's start skips it

    try:
        date = datetime.fromtimestamp(int(epoch), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        date = UNKNOWN
    if revision == UNKNOWN:  # no commit: a date or branch alone would describe nothing
        return BuildInfo()
    return BuildInfo(branch=branch, revision=revision, date=date)
