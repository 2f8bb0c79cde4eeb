#!/usr/bin/env python3
"""Package the Helm chart of a release: deploy/helm/nvidia-gpu-exporter as a .tgz whose default image is the
release's own, whose version follows the chart version scheme, and whose bytes depend on nothing but its inputs.

    python3 packaging/chart_release.py CHART_DIR IMAGE_REPOSITORY APP_VERSION OUTPUT_DIR

- Chart version: the application version with the major number plus one (app 0.1.0 -> chart 1.1.0), as the Go
  exporter's chart does (its major is one ahead of the application's). The checked-in Chart.yaml already
  carries it (tests/test_release_chart.py); here it is checked, not guessed.
- Default image: `image.repository` in values.yaml is empty in the repository (a chart from a checkout must be
  told which registry holds the image) and is set to IMAGE_REPOSITORY here, e.g.
  ghcr.io/OWNER/NAME from `${{ github.repository }}` in the release workflow.
- Bytes: members sorted, mtime SOURCE_DATE_EPOCH (required), owner 0:0, modes 0644/0755, gzip without a
  name or timestamp; `helm package` stamps the current time instead. `helm push` uploads the file as it is.

Exit status 2 with the reason for any bad input (a version that is not X.Y.Z, an image with a tag or in upper
case, a chart whose appVersion or version disagrees).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import tarfile
from pathlib import Path

SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
# An OCI repository as `docker pull` takes it: lower case, a registry host, path components, no tag or digest.
IMAGE = re.compile(r"[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)+")
REPOSITORY_LINE = re.compile(r'^(  repository:) ""$', re.MULTILINE)
IGNORED_PARTS = {"__pycache__", ".DS_Store"}


class ChartError(Exception):
    """A bad input: the message says which and why."""


def chart_version(app_version: str) -> str:
    match = SEMVER.fullmatch(app_version)
    if match is None:
        raise ChartError(f"application version {app_version!r} is not MAJOR.MINOR.PATCH")
    major, minor, patch = (int(part) for part in match.groups())
    return f"{major + 1}.{minor}.{patch}"


def _field(text: str, key: str) -> str | None:
    match = re.search(rf'^{key}: "?([^"\n]*)"?$', text, re.MULTILINE)
    return match.group(1) if match else None


def released_values(values: str, image_repository: str) -> str:
    if IMAGE.fullmatch(image_repository) is None:
        raise ChartError(
            f"image repository {image_repository!r} is not a lower-case registry/path without a tag or digest"
        )
    released, count = REPOSITORY_LINE.subn(rf'\1 "{image_repository}"', values, count=1)
    if count != 1:
        raise ChartError('values.yaml has no top-level image with `  repository: ""` to fill')
    return released


def _members(chart: Path) -> list[Path]:
    return sorted(
        (path for path in chart.rglob("*") if path.is_file() and not IGNORED_PARTS & set(path.parts)),
        key=lambda path: path.relative_to(chart).as_posix(),
    )


def package(chart: Path, image_repository: str, app_version: str, output: Path, epoch: int) -> Path:
    chart_yaml = (chart / "Chart.yaml").read_text(encoding="utf-8")
    name, version = _field(chart_yaml, "name"), chart_version(app_version)
    if _field(chart_yaml, "appVersion") != app_version:
        raise ChartError(f"Chart.yaml appVersion is {_field(chart_yaml, 'appVersion')!r}, not {app_version!r}")
    if _field(chart_yaml, "version") != version:
        raise ChartError(f"Chart.yaml version is {_field(chart_yaml, 'version')!r}; the scheme gives {version}")
    replaced = {
        chart / "values.yaml": released_values((chart / "values.yaml").read_text(encoding="utf-8"), image_repository)
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for path in _members(chart):
            data = replaced[path].encode() if path in replaced else path.read_bytes()
            info = tarfile.TarInfo(f"{name}/{path.relative_to(chart).as_posix()}")
            info.size, info.mtime = len(data), epoch
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(data))
    output.mkdir(parents=True, exist_ok=True)
    target = output / f"{name}-{version}.tgz"
    with target.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed:
        compressed.write(buffer.getvalue())
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: chart_release.py CHART_DIR IMAGE_REPOSITORY APP_VERSION OUTPUT_DIR", file=sys.stderr)
        return 2
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch.isdigit():
        print(f"chart_release.py: SOURCE_DATE_EPOCH must be set to seconds, not {epoch!r}", file=sys.stderr)
        return 2
    try:
        target = package(Path(argv[0]), argv[1], argv[2], Path(argv[3]), int(epoch))
    except (ChartError, OSError) as error:
        print(f"chart_release.py: {error}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
