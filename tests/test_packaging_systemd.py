"""The hardened systemd unit: required settings, ``systemd-analyze`` verdicts, and the README's account of gaps."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import REPO
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.httpserver.connections import fit_to_fd_limit

UNIT = REPO / "deploy" / "systemd" / "nvidia_gpu_exporter.service"
README = REPO / "deploy" / "systemd" / "README.md"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")


def _settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_unit_keeps_the_go_service_contract() -> None:
    settings = _settings()
    for key, value in {
        "Type": "simple",
        "User": "nvidia_gpu_exporter",
        "Group": "nvidia_gpu_exporter",
        "ExecStart": "/usr/bin/nvidia_gpu_exporter",
        "SyslogIdentifier": "nvidia_gpu_exporter",
        "Restart": "always",
        "RestartSec": "1",
        "After": "network-online.target",
        "Wants": "network-online.target",
        "WantedBy": "multi-user.target",
    }.items():
        assert settings[key] == [value], key


def test_unit_is_hardened_as_the_issue_requires() -> None:
    settings = _settings()
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "DevicePolicy": "closed",
        # One capability, to read XIDs from /dev/kmsg under kernel.dmesg_restrict=1 (issue 11).
        "CapabilityBoundingSet": "CAP_SYSLOG",
        "AmbientCapabilities": "CAP_SYSLOG",
        "ProtectKernelLogs": "no",
        "SystemCallArchitectures": "native",
        "MemoryDenyWriteExecute": "yes",
        "RestrictNamespaces": "yes",
    }.items():
        assert settings[key] == [value], key
    assert settings["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    assert settings["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    # Device access: exactly the NVIDIA device groups (nvidia[0-9]*, nvidiactl, nvidia-uvm*, nvidia-caps/*), and the
    # kernel log read-only.
    assert sorted(settings["DeviceAllow"]) == [
        "/dev/kmsg r",
        "char-nvidia rw",
        "char-nvidia-caps rw",
        "char-nvidia-frontend rw",
        "char-nvidia-uvm rw",
    ]
    assert "PrivateDevices" not in settings  # it would hide the NVIDIA nodes; see the README
    assert settings["Environment"] == ["PEX_ROOT=%C/nvidia_gpu_exporter"]
    assert settings["CacheDirectory"] == ["nvidia_gpu_exporter"]


def _analyze_root(tmp_path: Path) -> Path:
    """A root directory with the host's units, ours, and an executable ExecStart (verify checks it exists)."""
    root = tmp_path / "root"
    (root / "usr" / "lib" / "systemd").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    system_units = next(
        path for path in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if path.is_dir()
    )
    shutil.copytree(system_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    shutil.copy(UNIT, root / "usr" / "lib" / "systemd" / "system" / UNIT.name)
    stub = root / "usr" / "bin" / "nvidia_gpu_exporter"
    stub.write_text("#!/bin/sh\n", encoding="utf-8")
    stub.chmod(0o755)
    return root


@needs_systemd_analyze
def test_systemd_analyze_verify_prints_nothing(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    root = _analyze_root(tmp_path)
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}", UNIT.name], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")

    # The check itself can fail: a typo in a key is only a warning with exit status 0, hence "prints nothing".
    broken = root / "usr" / "lib" / "systemd" / "system" / UNIT.name
    broken.write_text(UNIT.read_text(encoding="utf-8").replace("Restart=always", "Restrat=always"), encoding="utf-8")
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", f"--root={root}", UNIT.name], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "Unknown key 'Restrat'" in result.stdout + result.stderr


def _security() -> tuple[float, list[str]]:
    assert SYSTEMD_ANALYZE is not None
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=true", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        check=True,
    )
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert exposure is not None, result.stdout
    open_checks = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("✗")]
    return float(exposure.group(1)), open_checks


@needs_systemd_analyze
def test_security_exposure_is_at_most_3() -> None:
    exposure, _ = _security()
    assert exposure <= 3.0


@needs_systemd_analyze
def test_readme_explains_every_check_left_open() -> None:
    _, open_checks = _security()
    left_out = README.read_text(encoding="utf-8").split("## Left out, and why", 1)[1]
    explained = set(re.findall(r"^- `([A-Za-z]+)=`", left_out, flags=re.MULTILINE))
    explained |= set(re.findall(r"^- `[A-Za-z]+=` / `([A-Za-z]+)=`", left_out, flags=re.MULTILINE))
    settings = {re.split(r"[=/]", check, maxsplit=1)[0] for check in open_checks}
    assert settings, "systemd-analyze reported no open checks: the README's list is stale"
    assert settings <= explained, f"open checks without an explanation: {sorted(settings - explained)}"


def _packaged_unit() -> Path:
    """The unit file the packages install as /usr/lib/systemd/system/nvidia_gpu_exporter.service (nfpm.yaml)."""
    lines = (REPO / "packaging" / "nfpm.yaml").read_text(encoding="utf-8").splitlines()
    for source, destination in itertools.pairwise(lines):
        if destination.strip() == f"dst: /usr/lib/systemd/system/{UNIT.name}":
            return REPO / source.split("src:", 1)[1].strip()
    raise AssertionError("nfpm.yaml installs no systemd unit")


@pytest.mark.parametrize(
    "unit",
    [pytest.param(UNIT, id="deploy-unit"), pytest.param(_packaged_unit(), id="packaged-unit")],
)
def test_limit_nofile_leaves_room_for_the_default_connection_cap(unit: Path) -> None:
    """The unit (and the one the packages install) raises systemd's default soft limit of 1,024 descriptors to the
    figure the docs give, which fits the default connection cap whole and leaves room to raise it eightfold."""
    limits = [
        line.partition("=")[2]
        for line in unit.read_text(encoding="utf-8").splitlines()
        if line.startswith("LimitNOFILE=")
    ]
    assert limits == ["8192"]  # deploy/systemd/README.md and docs/compatibility.md say 8192
    assert fit_to_fd_limit(Config().max_connections, int(limits[0])) == Config().max_connections
    assert fit_to_fd_limit(8 * Config().max_connections, int(limits[0])) == 8 * Config().max_connections
