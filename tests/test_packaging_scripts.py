"""The deb/rpm maintainer scripts, run for real against recording stubs of useradd, systemctl and friends.

Each script runs in a private mount namespace where ``/run`` and ``/var/cache`` are fresh tmpfs mounts, so
"systemd is running" (``/run/systemd/system`` exists) and the cache directory can be set up per case without
touching the host. Needs root and ``unshare``; the CI step installs the real packages into a chroot as well.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import REPO

SCRIPTS = REPO / "packaging" / "scripts"
SERVICE = "nvidia_gpu_exporter.service"
USERADD = (
    "useradd --system --gid nvidia_gpu_exporter --no-create-home --home-dir /nonexistent "
    "--shell /usr/sbin/nologin --comment NVIDIA GPU Prometheus exporter nvidia_gpu_exporter"
)


def _namespaces_work() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _namespaces_work(), reason="needs root and unshare --mount")

STUB = """#!/bin/sh
state={state}
echo "$(basename "$0") $*" >>"$state/calls"
case "$(basename "$0") $1" in
    "getent passwd") [ -e "$state/user" ] ;;
    "getent group") [ -e "$state/group" ] ;;
    "useradd "*) touch "$state/user" ;;
    "groupadd "*) touch "$state/group" ;;
    "userdel "*) rm -f "$state/user" ;;
    "groupdel "*) rm -f "$state/group" ;;
esac
"""


@dataclass
class Outcome:
    returncode: int
    stdout: str
    calls: list[str]
    cache_kept: bool
    user_exists: bool
    group_exists: bool


def run_script(tmp_path: Path, script: str, *args: str, systemd: bool, user_exists: bool = False) -> Outcome:
    state = tmp_path / "state"
    stubs = tmp_path / "bin"
    state.mkdir(exist_ok=True)
    stubs.mkdir(exist_ok=True)
    for name in ("getent", "groupadd", "useradd", "userdel", "groupdel", "systemctl"):
        stub = stubs / name
        stub.write_text(STUB.format(state=state), encoding="utf-8")
        stub.chmod(0o755)
    if user_exists:
        (state / "user").touch()
        (state / "group").touch()
    setup = "mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/cache && mkdir /var/cache/nvidia_gpu_exporter"
    if systemd:
        setup += " && mkdir -p /run/systemd/system"
    command = (
        f'{setup} && sh "$0" "$@"; rc=$?; '
        f'if [ -e /var/cache/nvidia_gpu_exporter ]; then touch "{state}/cache-kept"; fi; exit $rc'
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command, str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        env={"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin"},
        check=False,
    )
    calls_file = state / "calls"
    calls = calls_file.read_text(encoding="utf-8").splitlines() if calls_file.exists() else []
    return Outcome(
        result.returncode,
        result.stdout + result.stderr,
        calls,
        (state / "cache-kept").exists(),
        (state / "user").exists(),
        (state / "group").exists(),
    )


def test_scripts_are_executable_posix_sh() -> None:
    for name in ("preinstall.sh", "postinstall.sh", "preremove.sh", "postremove.sh"):
        path = SCRIPTS / name
        assert path.read_text(encoding="utf-8").startswith("#!/bin/sh\n"), name
        assert os.access(path, os.X_OK), name
        assert "set -eu\n" in path.read_text(encoding="utf-8"), name


@pytest.mark.parametrize("args", [("install",), ("upgrade", "0.0.9"), ("1",), ("2",)])
def test_preinstall_creates_the_system_user_once(tmp_path: Path, args: tuple[str, ...]) -> None:
    first = run_script(tmp_path, "preinstall.sh", *args, systemd=True)
    assert first.returncode == 0, first.stdout
    assert first.calls == [
        "getent group nvidia_gpu_exporter",
        "groupadd --system nvidia_gpu_exporter",
        "getent passwd nvidia_gpu_exporter",
        USERADD,
    ]
    (tmp_path / "state" / "calls").unlink()
    again = run_script(tmp_path, "preinstall.sh", *args, systemd=True)
    assert again.calls == ["getent group nvidia_gpu_exporter", "getent passwd nvidia_gpu_exporter"]


@pytest.mark.parametrize("args", [("configure", ""), ("1",)])
def test_fresh_install_with_systemd_enables_and_starts(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "postinstall.sh", *args, systemd=True)
    assert outcome.returncode == 0, outcome.stdout
    assert outcome.calls == ["systemctl daemon-reload", f"systemctl enable --now {SERVICE}"]


@pytest.mark.parametrize("args", [("configure", "0.0.9"), ("2",), ("abort-upgrade", "0.2.0")])
def test_upgrade_with_systemd_restarts_only_a_running_service(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "postinstall.sh", *args, systemd=True)
    assert outcome.returncode == 0, outcome.stdout
    assert outcome.calls == ["systemctl daemon-reload", f"systemctl try-restart {SERVICE}"]


@pytest.mark.parametrize("args", [("configure", ""), ("1",), ("2",)])
def test_without_systemd_postinstall_explains_and_touches_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "postinstall.sh", *args, systemd=False)
    assert outcome.returncode == 0, outcome.stdout
    assert outcome.calls == []
    assert "systemd is not running here" in outcome.stdout
    assert "systemctl enable --now nvidia_gpu_exporter.service" in outcome.stdout
    assert "PEX_ROOT=/var/cache/nvidia_gpu_exporter /usr/bin/nvidia_gpu_exporter" in outcome.stdout


@pytest.mark.parametrize("args", [("remove",), ("deconfigure",), ("0",)])
def test_removal_stops_and_disables(tmp_path: Path, args: tuple[str, ...]) -> None:
    with_systemd = run_script(tmp_path, "preremove.sh", *args, systemd=True)
    assert with_systemd.returncode == 0, with_systemd.stdout
    assert with_systemd.calls == [f"systemctl disable --now {SERVICE}"]
    (tmp_path / "state" / "calls").unlink()
    offline = run_script(tmp_path, "preremove.sh", *args, systemd=False)
    assert offline.returncode == 0, offline.stdout
    assert offline.calls == [f"systemctl --no-reload disable {SERVICE}"]


@pytest.mark.parametrize("args", [("upgrade", "0.2.0"), ("failed-upgrade", "0.2.0"), ("1",)])
def test_upgrades_leave_the_service_alone_in_preremove(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "preremove.sh", *args, systemd=True)
    assert (outcome.returncode, outcome.calls) == (0, [])


def test_deb_remove_keeps_user_and_cache(tmp_path: Path) -> None:
    outcome = run_script(tmp_path, "postremove.sh", "remove", systemd=True, user_exists=True)
    assert outcome.returncode == 0, outcome.stdout
    assert outcome.calls == ["systemctl daemon-reload"]
    assert outcome.cache_kept
    assert outcome.user_exists
    assert outcome.group_exists


@pytest.mark.parametrize("args", [("purge",), ("0",)])
def test_purge_and_rpm_erase_delete_user_group_and_cache(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "postremove.sh", *args, systemd=False, user_exists=True)
    assert outcome.returncode == 0, outcome.stdout
    assert outcome.calls == [
        "getent passwd nvidia_gpu_exporter",
        "userdel nvidia_gpu_exporter",
        "getent group nvidia_gpu_exporter",
        "groupdel nvidia_gpu_exporter",
    ]
    assert not outcome.cache_kept
    assert not outcome.user_exists
    assert not outcome.group_exists


@pytest.mark.parametrize("args", [("upgrade", "0.2.0"), ("1",), ("abort-install",)])
def test_upgrades_leave_the_user_alone_in_postremove(tmp_path: Path, args: tuple[str, ...]) -> None:
    outcome = run_script(tmp_path, "postremove.sh", *args, systemd=True, user_exists=True)
    assert (outcome.returncode, outcome.calls, outcome.cache_kept) == (0, [], True)
