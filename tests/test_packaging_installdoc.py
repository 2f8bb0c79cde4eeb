"""INSTALL.md: every command block is either run (by CI or here) or says why it cannot be, and stays current."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import installdoc
from harness import MIG_FIXTURE, REPO, start_exporter
from nvidia_gpu_exporter import __version__

CI_STEP = REPO / ".ci" / "steps" / "30-packaging.sh"
# Tested blocks run somewhere other than the CI step: by the test named here.
RUN_BY_TESTS = {"macos-ssh": "tests/test_packaging_installdoc.py"}
RUN_WITH_FAKES = {
    "windows-install": "tests/test_windows_service.py",
    "windows-uninstall": "tests/test_windows_service.py",
}


def test_every_block_is_marked_and_named_once() -> None:
    blocks = installdoc.blocks()  # raises when a fence lacks its marker or a name repeats
    assert len(blocks) >= 15
    assert {block.language for block in blocks} <= {"sh", "powershell"}
    for block in blocks:
        assert block.tested or (block.untested_reason or "").strip(), block.name


def test_every_tested_block_is_run_by_ci_or_a_test() -> None:
    ci_step = CI_STEP.read_text(encoding="utf-8")
    for block in installdoc.blocks():
        if not block.tested:
            continue
        if block.name in RUN_BY_TESTS:
            assert f'"{block.name}"' in (REPO / RUN_BY_TESTS[block.name]).read_text(encoding="utf-8")
        else:
            assert re.search(rf"block {re.escape(block.name)}\b|\bfor name in [^\n]*\b{block.name}\b", ci_step), (
                f"INSTALL.md block {block.name!r} is marked tested but .ci/steps/30-packaging.sh never runs it"
            )
    for name, test_file in RUN_WITH_FAKES.items():
        assert f'"{name}"' in (REPO / test_file).read_text(encoding="utf-8")


def test_the_sections_the_issue_asks_for_are_there() -> None:
    text = installdoc.INSTALL_MD.read_text(encoding="utf-8")
    for heading in (
        "## Verify a download",
        "## pip and pipx",
        "## Single file",
        "## Debian, Ubuntu (deb) and RHEL, Fedora, SUSE (rpm)",
        "## systemd without the package",
        "## Docker",
        "### Compose",
        "## Kubernetes",
        "## Windows service",
        "## macOS: scraping a remote GPU host over SSH",
    ):
        assert f"\n{heading}\n" in text, heading
    assert "KUBERNETES.md" in text


def test_versions_and_file_names_match_this_release() -> None:
    text = installdoc.INSTALL_MD.read_text(encoding="utf-8")
    major, minor, patch = (int(part) for part in __version__.split("."))
    chart_version = re.escape(f"{major + 1}.{minor}.{patch}")
    chart = re.compile(rf"nvidia-gpu-exporter-{chart_version}\.tgz|charts/nvidia-gpu-exporter:{chart_version}")
    assert len(chart.findall(text)) >= 2  # the chart's version: the app's major plus one (packaging/chart_release.py)
    text = chart.sub("", text)
    # The Go exporter's packages (nvidia-gpu-exporter_1.14.0_linux_amd64.deb, in "Replacing the Go exporter's
    # package") are named with _linux_, which ours never are.
    versions = set(
        re.findall(r"(?:VERSION=|nvidia_gpu_exporter-|nvidia-gpu-exporter[_-]|:)(\d+\.\d+\.\d+)(?!\d|_linux_)", text)
    )
    assert versions == {__version__}
    build_script = (REPO / "packaging" / "build-release.sh").read_text(encoding="utf-8")
    for pattern in ("nvidia_gpu_exporter-V.pex", "nvidia-gpu-exporter_V-1_{amd64,arm64}.deb", "checksums.txt"):
        assert pattern in build_script
    assert f"nvidia-gpu-exporter_{__version__}-1_amd64.deb" in installdoc.block("deb-install").body
    assert f"nvidia_gpu_exporter-{__version__}.pex" in installdoc.block("single-file").body


def test_verify_block_accepts_good_files_and_rejects_tampered_ones(tmp_path: Path) -> None:
    artifact = tmp_path / f"nvidia_gpu_exporter-{__version__}.pex"
    artifact.write_bytes(b"the single file")
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    (tmp_path / "checksums.txt").write_text(
        f"{digest}  {artifact.name}\n{'0' * 64}  nvidia-gpu-exporter_{__version__}-1_arm64.deb\n", encoding="utf-8"
    )
    command = ["bash", "-euo", "pipefail", "-c", installdoc.block("verify-checksums").body]
    ok = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # files not downloaded are skipped (--ignore-missing)
    assert f"{artifact.name}: OK" in ok.stdout

    artifact.write_bytes(b"the single file, tampered")
    tampered = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert tampered.returncode != 0
    assert f"{artifact.name}: FAILED" in tampered.stdout


FAKE_SSH = """#!/bin/sh
# ssh as the exporter runs it: options, a host, then the remote command line (here: the fake nvidia-smi).
echo "$@" >>"{log}"
while [ "$#" -gt 0 ]; do
    case "$1" in
        -o) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host=$1
shift
[ "$1" = nvidia-smi ] || exit 127
shift
exec "{python}" -m nvidia_gpu_exporter.fakesmi --capture "{capture}" "$@"
"""


def test_macos_ssh_block_collects_through_ssh(tmp_path: Path) -> None:
    (line,) = installdoc.block("macos-ssh").lines()
    argv = shlex.split(line)
    assert argv[0] == "nvidia_gpu_exporter"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh.log"
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE_SSH.format(log=log, python=sys.executable, capture=MIG_FIXTURE), encoding="utf-8")
    ssh.chmod(0o755)

    exporter = start_exporter(argv[1:], env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    try:
        scrape = exporter.scrape()
    finally:
        assert exporter.stop() == 0

    assert "nvidia_smi_gpu_info{" in scrape
    assert "nvidia_smi_last_collect_success 1" in scrape
    calls = log.read_text(encoding="utf-8").splitlines()
    assert calls, "ssh was never run"
    assert all(call.startswith("-o BatchMode=yes gpu-host nvidia-smi ") for call in calls), calls
    assert any("--query-gpu=" in call for call in calls)


@pytest.mark.parametrize("name", ["checkout", "wheel", "pipx", "venv", "single-file", "deb-install", "systemd-manual"])
def test_tested_install_blocks_end_with_a_version_check(name: str) -> None:
    lines = installdoc.block(name).lines()
    if name == "systemd-manual":
        assert lines[-1] == "sudo systemctl start nvidia_gpu_exporter.service"
    else:
        assert lines[-1].endswith("nvidia_gpu_exporter --version"), lines


RELEASE_ONLY = re.compile(
    r"pipx install nvidia-gpu-exporter|pip install [\"']?nvidia-gpu-exporter|releases/download|ghcr\.io/"
)


def test_every_section_with_a_release_only_command_says_after_a_release() -> None:
    """No release is published: a block that needs one (PyPI's name, a download, a registry) must say so."""
    text = installdoc.INSTALL_MD.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    unmarked = [
        section.split("\n", 1)[0]
        for section in sections
        if RELEASE_ONLY.search(section) and "after a release" not in " ".join(section.lower().split())
    ]
    assert unmarked == []
