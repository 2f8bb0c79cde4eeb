"""The release's Helm chart (packaging/chart_release.py): the Go chart's version scheme, the release's own image
as the default, and bytes that depend only on the inputs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from deploy_helpers import CHART, helm_chart_module
from harness import REPO, load_script
from nvidia_gpu_exporter import __version__

IMAGE = "ghcr.io/example-org/nvidia-gpu-exporter"
EPOCH = 1_700_000_000


chart_release = load_script(REPO / "packaging" / "chart_release.py")


@pytest.mark.parametrize(
    ("app", "chart"),
    [
        pytest.param("0.1.0", "1.1.0", id="major-0-gives-chart-major-1"),
        pytest.param("1.14.2", "2.14.2", id="minor-and-patch-kept"),
        pytest.param("10.0.0", "11.0.0", id="multi-digit-major"),
    ],
)
def test_chart_version_is_the_app_version_with_major_plus_one(app: str, chart: str) -> None:
    assert chart_release.chart_version(app) == chart


@pytest.mark.parametrize(
    "app",
    [
        pytest.param("0.1", id="two-parts"),
        pytest.param("0.1.0rc1", id="pre-release"),
        pytest.param("01.0.0", id="leading-zero"),
    ],
)
def test_a_version_that_is_not_major_minor_patch_is_refused(app: str) -> None:
    with pytest.raises(chart_release.ChartError, match=r"is not MAJOR\.MINOR\.PATCH"):
        chart_release.chart_version(app)


def _package(tmp_path: Path, chart: Path = CHART, image: str = IMAGE, version: str = __version__) -> Path:
    path: Path = chart_release.package(chart, image, version, tmp_path / "out", EPOCH)
    return path


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as archive:
        return {member.name: member for member in archive.getmembers()}


def _read(path: Path, name: str) -> str:
    with tarfile.open(path) as archive:
        extracted = archive.extractfile(name)
        assert extracted is not None
        return extracted.read().decode()


def test_the_released_chart_defaults_to_the_release_image(tmp_path: Path) -> None:
    packaged = _package(tmp_path)
    assert packaged.name == f"nvidia-gpu-exporter-{chart_release.chart_version(__version__)}.tgz"
    values = yaml.safe_load(_read(packaged, "nvidia-gpu-exporter/values.yaml"))
    assert values["image"]["repository"] == IMAGE
    shipped = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert _read(packaged, "nvidia-gpu-exporter/values.yaml") == shipped.replace(
        '  repository: ""\n', f'  repository: "{IMAGE}"\n', 1
    )  # the comments stay; only the one line changes


def test_the_released_chart_renders_the_release_image(tmp_path: Path) -> None:
    chart_module = helm_chart_module()
    with tarfile.open(_package(tmp_path)) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    with chart_module.Chart.load(tmp_path / "unpacked" / "nvidia-gpu-exporter") as chart:
        manifests = chart.render({}, name="gpu", namespace="monitoring")
    (daemonset,) = (
        document
        for path, text in manifests.items()
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document and document["kind"] == "DaemonSet"
    )
    images = {entry["name"]: entry["image"] for entry in daemonset["spec"]["template"]["spec"]["containers"]}
    assert images["nvidia-gpu-exporter"] == f"{IMAGE}:{__version__}"


def test_the_package_holds_every_chart_file_with_fixed_metadata(tmp_path: Path) -> None:
    members = _members(_package(tmp_path))
    expected = sorted(
        f"nvidia-gpu-exporter/{path.relative_to(CHART).as_posix()}" for path in CHART.rglob("*") if path.is_file()
    )
    assert list(members) == expected
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members.values()} == {
        (EPOCH, 0, 0, "", "", 0o644)
    }


def test_two_packages_of_one_chart_are_byte_identical_whatever_the_umask_and_path(tmp_path: Path) -> None:
    loose = tmp_path / "elsewhere" / "nvidia-gpu-exporter"
    shutil.copytree(CHART, loose)
    for path in [loose, *loose.rglob("*")]:
        path.chmod(0o775 if path.is_dir() else 0o664)  # a checkout under umask 0002
        os.utime(path, (EPOCH + 99, EPOCH + 99))
    first = _package(tmp_path / "a")
    second = _package(tmp_path / "b", chart=loose)
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(
    ("image", "version", "message"),
    [
        pytest.param("ghcr.io/Example/exporter", __version__, "is not a lower-case registry/path", id="upper-case"),
        pytest.param(f"{IMAGE}:1.0", __version__, "without a tag or digest", id="tagged-image"),
        pytest.param("nvidia-gpu-exporter", __version__, "is not a lower-case registry/path", id="no-registry"),
        pytest.param(IMAGE, "9.9.9", "appVersion is", id="app-version-differs"),
    ],
)
def test_bad_inputs_are_refused(tmp_path: Path, image: str, version: str, message: str) -> None:
    with pytest.raises(chart_release.ChartError, match=message):
        _package(tmp_path, image=image, version=version)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(("version: 1.1.0", "version: 0.1.0"), "the scheme gives 1.1.0", id="chart-version-off-scheme"),
        pytest.param(
            ('  repository: ""', "  repository: ghcr.io/x/y"), "no top-level image with", id="repository-preset"
        ),
    ],
)
def test_a_chart_that_breaks_a_rule_is_refused(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    broken = tmp_path / "chart"
    shutil.copytree(CHART, broken)
    for name in ("Chart.yaml", "values.yaml"):
        path = broken / name
        path.write_text(path.read_text(encoding="utf-8").replace(*edit, 1), encoding="utf-8")
    with pytest.raises(chart_release.ChartError, match=message):
        _package(tmp_path, chart=broken)


def test_the_command_line_needs_source_date_epoch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "chart_release.py"), str(CHART), IMAGE, __version__, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env={key: value for key, value in os.environ.items() if key != "SOURCE_DATE_EPOCH"},
    )
    assert result.returncode == 2
    assert "SOURCE_DATE_EPOCH must be set" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_gzip_header_carries_no_name_or_time(tmp_path: Path) -> None:
    header = _package(tmp_path).read_bytes()[:10]
    assert header[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no FNAME flag
    assert header[4:8] == b"\x00\x00\x00\x00"  # MTIME 0
