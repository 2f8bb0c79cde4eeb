"""Per-process → pod: /proc/<pid>/cgroup for cgroup v1/v2, systemd/cgroupfs drivers, containerd/CRI-O/Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_fakes import CGROUP_LAYOUTS, HOST_SERVICE, UID, make_proc
from nvidia_gpu_exporter.kubernetes import cgroups
from nvidia_gpu_exporter.model.kubernetes import HOSTPID_OFF, NOT_IN_A_POD, PROCESS_NOT_VISIBLE


@pytest.mark.parametrize(
    ("text", "uid", "container_id", "runtime"),
    [layout[1:] for layout in CGROUP_LAYOUTS],
    ids=[layout[0] for layout in CGROUP_LAYOUTS],
)
def test_every_layout_names_pod_and_container(text: str, uid: str, container_id: str, runtime: str) -> None:
    assert cgroups.parse_cgroup_file(text) == cgroups.CgroupPod(uid, container_id, runtime)


@pytest.mark.parametrize(
    "text",
    [
        HOST_SERVICE,
        "0::/init.scope\n",
        "0::/\n",
        "12:memory:/user.slice/user-1000.slice/session-3.scope\n",
        "0::/kubepods.slice/kubepods-burstable.slice\n",  # the QoS slice itself, no pod below it
        "0::/system.slice/docker-" + "a" * 64 + ".scope\n",  # a plain Docker container, not a pod
        "garbage without colons\n",
        "",
    ],
    ids=["host-service", "init", "root", "user-session", "qos-slice", "plain-docker", "garbage", "empty"],
)
def test_paths_outside_pods_name_none(text: str) -> None:
    assert cgroups.parse_cgroup_file(text) is None


def test_a_line_with_a_container_wins_over_a_pod_only_line() -> None:
    # Hybrid hierarchies can put the process in the pod's cgroup on one controller only.
    cid = "c" * 64
    text = f"3:cpuset:/kubepods/burstable/pod{UID}\n0::/kubepods/burstable/pod{UID}/{cid}\n"
    assert cgroups.parse_cgroup_file(text) == cgroups.CgroupPod(UID, cid, "")


def test_lookup_reads_the_fake_proc_tree(tmp_path: Path) -> None:
    layout = CGROUP_LAYOUTS[1]
    proc = make_proc(tmp_path, {"4242": layout[1], "17": HOST_SERVICE})
    found = cgroups.lookup_process(proc, "4242")
    assert found.pod == cgroups.CgroupPod(layout[2], layout[3], layout[4])
    assert found.reason == ""
    assert cgroups.lookup_process(proc, "17").reason == NOT_IN_A_POD
    missing = cgroups.lookup_process(proc, "99999")
    assert missing.pod is None
    assert missing.reason == PROCESS_NOT_VISIBLE
    assert "hostPID" in missing.detail
    assert cgroups.lookup_process(proc, "../1").reason == PROCESS_NOT_VISIBLE  # never a path outside proc


def test_host_pid_problem_when_pid_1_is_a_pods_process(tmp_path: Path) -> None:
    host = make_proc(tmp_path / "host", {})
    assert cgroups.host_pid_problem(host) == ("", "")
    in_pod = make_proc(tmp_path / "pod", {}, init=CGROUP_LAYOUTS[3][1])
    reason, detail = cgroups.host_pid_problem(in_pod)
    assert reason == HOSTPID_OFF
    assert UID in detail
    assert "hostPID: true" in detail
    assert cgroups.host_pid_problem(tmp_path / "nowhere") == ("", "")
