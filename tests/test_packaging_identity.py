"""Who the packages say they are: the Homepage and image source of this repository (packaging/project-url.sh),
never the Go project's, and a version that sorts above the Go exporter's packages of the same name (the epoch in
packaging/nfpm.yaml), so that `apt-get install -y` and `rpm -U` replace them in place (INSTALL.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import REPO
from nvidia_gpu_exporter import __version__
from optional_tools import needs_tool

NFPM = REPO / "packaging" / "nfpm.yaml"
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "docker" / "Dockerfile.dockerignore"
PROJECT_URL = REPO / "packaging" / "project-url.sh"
GO_PROJECT = "utkuozdemir"
GO_VERSION = "1.14.0"  # the Go exporter's packages: nvidia-gpu-exporter 1.14.0, no epoch


def _nfpm() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(NFPM.read_text(encoding="utf-8"))
    return loaded


def _dockerfile_args() -> dict[str, str]:
    found = re.findall(r"^ARG (\w+)=(.*)$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    return dict(found)


NAMES = [
    ("packaging/nfpm.yaml homepage", lambda: _nfpm()["homepage"]),
    ("Dockerfile ARG SOURCE", lambda: _dockerfile_args()["SOURCE"]),
]


@pytest.mark.parametrize(("where", "value"), NAMES, ids=[row[0] for row in NAMES])
def test_no_package_metadata_names_the_go_project(where: str, value: Any) -> None:
    assert GO_PROJECT not in value(), f"{where} points at the Go project"


def test_the_package_homepage_comes_from_project_url() -> None:
    assert _nfpm()["homepage"] == "${NFPM_HOMEPAGE}"
    assert "NFPM_HOMEPAGE=$homepage" in (REPO / "packaging" / "build-release.sh").read_text(encoding="utf-8")


needs_git = needs_tool("git", "packaging/project-url.sh reads the remote of a throwaway git checkout")


def _run_project_url(root: Path, environ: dict[str, str], remote: str | None) -> subprocess.CompletedProcess[str]:
    (root / "packaging").mkdir()
    shutil.copy2(PROJECT_URL, root / "packaging" / "project-url.sh")
    subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
    if remote is not None:
        subprocess.run(["git", "-C", str(root), "remote", "add", "origin", remote], check=True)
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("GITHUB_", "PROJECT_URL"))}
    return subprocess.run(
        ["bash", str(root / "packaging" / "project-url.sh")],
        capture_output=True,
        text=True,
        env={**clean, **environ},
        check=False,
    )


# (environment, origin remote, printed address, rule)
ADDRESSES: list[tuple[dict[str, str], str | None, str, str]] = [
    (
        {"PROJECT_URL": "https://example.org/a/b"},
        "git@github.com:o/r.git",
        "https://example.org/a/b",
        "PROJECT_URL wins",
    ),
    (
        {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "org/exporter"},
        "git@github.com:o/r.git",
        "https://github.com/org/exporter",
        "the workflow's repository before the checkout's remote",
    ),
    ({}, "git@github.com:o/r.git", "https://github.com/o/r", "an scp-like remote as https"),
    ({}, "https://user:token@github.com/o/r.git/", "https://github.com/o/r", "credentials and .git dropped"),
    ({}, "ssh://git@git.example.org:2222/g/o/r.git", "https://git.example.org/g/o/r", "an ssh remote as https"),
    ({}, "/srv/git/r.git", "", "a local remote: no address rather than a wrong one"),
    ({}, None, "", "no remote: no address"),
]


@pytest.mark.parametrize(("environ", "remote", "expected", "rule"), ADDRESSES, ids=[row[3] for row in ADDRESSES])
@needs_git
def test_project_url(tmp_path: Path, environ: dict[str, str], remote: str | None, expected: str, rule: str) -> None:
    result = _run_project_url(tmp_path, environ, remote)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected, rule


@needs_git
def test_project_url_refuses_what_is_not_a_web_address(tmp_path: Path) -> None:
    result = _run_project_url(tmp_path, {"PROJECT_URL": "nvidia_gpu_exporter"}, None)
    assert result.returncode == 1
    assert "not a web address" in result.stderr


def test_the_image_build_context_carries_the_build_hook() -> None:
    """pyproject.toml's build hook (hatch_build.py, the --version metadata) must be in the image's context."""
    assert "[tool.hatch.build.hooks.custom]" in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "!hatch_build.py" in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    assert re.search(r"^COPY [^\n]*\bhatch_build\.py\b", DOCKERFILE.read_text(encoding="utf-8"), re.M)


def _ours() -> str:
    config = _nfpm()
    epoch = f"{config['epoch']}:" if config.get("epoch") else ""
    return f"{epoch}{__version__}-{config['release']}"


@needs_tool("dpkg")
def test_the_deb_version_sorts_above_the_go_package() -> None:
    ours = _ours()
    assert subprocess.run(["dpkg", "--compare-versions", ours, "gt", GO_VERSION], check=False).returncode == 0, ours


@needs_tool("rpm")
def test_the_rpm_version_sorts_above_the_go_package() -> None:
    ours = _ours()
    script = f'%{{lua: print(rpm.vercmp("{ours}", "{GO_VERSION}-1"))}}'
    result = subprocess.run(["rpm", "--eval", script], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "1", (ours, result.stdout, result.stderr)
