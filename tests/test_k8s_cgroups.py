"""Per-process → pod: /proc/<pid>/cgroup for cgroup v1/v2, systemd/cgroupfs drivers, containerd/CRI-O/Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s_fakes import CGROUP_LAYOUTS, HOST_SERVICE, UID, make_proc, write_stat
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


# -- the per-process cache: a running process's pod is read once ----------------------------------------

POD = CGROUP_LAYOUTS[1]
OTHER_POD = CGROUP_LAYOUTS[-1]


def running(tmp_path: Path, pids: tuple[str, ...] = ("4242",), start: int = 100) -> Path:
    """A fake /proc whose ``pids`` run in POD's container since ``start``."""
    proc = make_proc(tmp_path, dict.fromkeys(pids, POD[1]))
    for pid in pids:
        write_stat(proc, pid, start)
    return proc


def move_to_other_pod(proc: Path, pid: str) -> None:
    """What a cgroup file read afresh would now say: a cached lookup still says POD."""
    (proc / pid / "cgroup").write_text(OTHER_POD[1], encoding="utf-8")


@pytest.mark.parametrize(
    "pid", ["4242", "17", "99999", "../1", "31"], ids=["in-a-pod", "host", "missing", "not-a-pid", "no-stat-file"]
)
def test_cache_answers_what_a_fresh_lookup_does(tmp_path: Path, pid: str) -> None:
    proc = make_proc(tmp_path, {"4242": POD[1], "17": HOST_SERVICE, "31": POD[1]})
    write_stat(proc, "4242", 100)
    write_stat(proc, "17", 100)
    cache = cgroups.CgroupCache(proc)
    assert [cache.lookup(pid), cache.lookup(pid)] == [cgroups.lookup_process(proc, pid)] * 2


@pytest.mark.parametrize("comm", ["python3", "my (odd) name", "a) b c d e f g h i j k l m n o p q r s t"])
def test_cache_keeps_a_running_process_whatever_its_command_name(tmp_path: Path, comm: str) -> None:
    proc = running(tmp_path)
    write_stat(proc, "4242", 100, comm)
    cache = cgroups.CgroupCache(proc)
    first = cache.lookup("4242")
    move_to_other_pod(proc, "4242")
    assert cache.lookup("4242") == first


def test_cache_reads_again_when_the_pid_is_reused(tmp_path: Path) -> None:
    proc = running(tmp_path)
    cache = cgroups.CgroupCache(proc)
    cache.lookup("4242")
    move_to_other_pod(proc, "4242")
    write_stat(proc, "4242", 200)  # another process, started later, with the same pid
    assert cache.lookup("4242").pod == cgroups.CgroupPod(OTHER_POD[2], OTHER_POD[3], OTHER_POD[4])


def test_cache_forgets_a_process_whose_pid_is_gone(tmp_path: Path) -> None:
    proc = running(tmp_path, ("4242", "4243"))
    cache = cgroups.CgroupCache(proc)
    cache.lookup("4242")
    cache.lookup("4243")
    (proc / "4242" / "stat").unlink()
    (proc / "4242" / "cgroup").unlink()
    assert (cache.lookup("4242").reason, len(cache)) == (PROCESS_NOT_VISIBLE, 1)


def test_cache_forgets_the_processes_the_last_collection_did_not_look_up(tmp_path: Path) -> None:
    proc = running(tmp_path, ("4242", "4243"))
    cache = cgroups.CgroupCache(proc)
    cache.lookup("4242")
    cache.lookup("4243")
    cache.next_collection()
    cache.lookup("4243")  # 4242 left the GPU
    cache.next_collection()
    move_to_other_pod(proc, "4242")
    assert (len(cache), cache.lookup("4242").pod) == (1, cgroups.CgroupPod(OTHER_POD[2], OTHER_POD[3], OTHER_POD[4]))


def test_cache_holds_at_most_its_limit(tmp_path: Path) -> None:
    proc = running(tmp_path, ("4242", "4243", "4244"))
    cache = cgroups.CgroupCache(proc, limit=2)
    for pid in ("4242", "4243", "4244"):
        cache.lookup(pid)
    move_to_other_pod(proc, "4244")
    assert (len(cache), cache.lookup("4244").pod) == (2, cgroups.CgroupPod(OTHER_POD[2], OTHER_POD[3], OTHER_POD[4]))


@pytest.mark.parametrize(
    "stat",
    ["", "4242 (python3\n", "4242 (python3) S 1", "4242 (python3) " + " ".join(["x"] * 50)],
    ids=["empty", "unclosed-name", "short", "start-not-a-number"],
)
def test_cache_reads_every_time_when_the_start_time_cannot_be_read(tmp_path: Path, stat: str) -> None:
    proc = running(tmp_path)
    (proc / "4242" / "stat").write_text(stat, encoding="utf-8")
    cache = cgroups.CgroupCache(proc)
    cache.lookup("4242")
    move_to_other_pod(proc, "4242")
    assert (len(cache), cache.lookup("4242").pod) == (0, cgroups.CgroupPod(OTHER_POD[2], OTHER_POD[3], OTHER_POD[4]))
