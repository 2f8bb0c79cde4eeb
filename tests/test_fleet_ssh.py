"""Fleet mode against a real OpenSSH server (tests/sshd_helpers.py): ``GET /probe?target=<name>`` through one
exporter, the remote command being the project's fake nvidia-smi replaying a capture.

One sshd and one exporter serve the module: targets are names on that sshd with different commands, keys
and known-hosts files. The exporter's own ``/metrics`` runs the same fake locally (``--nvidia-smi-command``),
which is what "a local exporter on that host" serves for the same capture.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import FIXTURE_CAPTURES, REPO, Exporter, fake_smi_command, process_gone, start_exporter
from polling import wait_until
from sshd_helpers import Sshd, running_sshd

LINUX = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
WINDOWS = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"
# A third capture, for the target behind the jump host: the Windows one with another GPU (name, UUID, readings).
THIRD_CAPTURE_EDITS = (
    ("NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4070"),
    ("GPU-5b0d7e19-a4c3-4f26-8e91-3c7a2f6d0e48", "GPU-0f3c9a55-7d21-4b8e-9c04-1e6b2d8a7f13"),
    ("38, 17.84 W, 210 MHz", "41, 21.50 W, 225 MHz"),
)
# Per collection, not per capture: these two change with every run, locally and remotely alike.
VARYING = re.compile(r"^nvidia_smi_last_collect_(duration|success_timestamp)_seconds .*$", re.MULTILINE)


@dataclass
class Fleet:
    sshd: Sshd
    exporter: Exporter
    targets_file: Path
    directory: Path

    def probe(self, target: str) -> tuple[int, str]:
        response = self.exporter.get(f"/probe?target={target}")
        return response.status, response.body.decode("utf-8", "replace")


def targets_yaml(sshd: Sshd, directory: Path, extra: Mapping[str, Mapping[str, object]] | None = None) -> str:
    """The module's targets (JSON is YAML): one per case, all on the one sshd."""
    # A hung nvidia-smi: a sleep (the fake's --delay is one too) whose pid the test can look up.
    runs = sshd.shared / "serial.log"
    serial = f"echo start >> {runs}; sleep 0.2; echo end >> {runs}"
    # The nvidia-smi arguments land after the `true` the exec never reaches.
    hung = f"echo $$ > {sshd.shared / 'hung.pid'}; exec sleep 60; true"
    targets: dict[str, Mapping[str, object]] = {
        "linux": {"command": sshd.fake_smi("--capture", str(LINUX))},
        "windows": {"command": sshd.fake_smi("--capture", str(WINDOWS))},
        "hung": {"command": hung, "timeout": "1s"},
        "refused": {"identity_file": str(sshd.stranger_key)},
        "rekeyed": {"known_hosts": str(sshd.wrong_known_hosts)},
        "upgraded": {"command": sshd.fake_smi("--config", str(sshd.shared / "upgraded.yaml"))},
        # Through the same sshd as its own jump host (a direct-tcpip channel back to itself).
        "jumped": {
            "jump_host": f"{sshd.user}@127.0.0.1:{sshd.port}",
            "connect_timeout": "10s",
            "command": sshd.fake_smi("--capture", str(third_capture(sshd))),
        },
        # Two targets on a connection of their own (another connect_timeout makes another connection) limited to
        # one run at a time; each run leaves "start" and "end" in a shared file around a short sleep.
        **{
            name: {"command": f"{serial}; true", "connect_timeout": "4s", "max_concurrent": 1}
            for name in ("serial-a", "serial-b")
        },
        # 2 MB on stdout, twice the default --collect.max-output-bytes.
        "flooding": {"command": "head -c 2000000 /dev/zero; true"},
        **(extra or {}),
    }
    document = {
        "defaults": {
            "user": sshd.user,
            "port": sshd.port,
            "identity_file": str(sshd.client_key),
            "known_hosts": str(sshd.known_hosts),
            "timeout": "10s",
            "connect_timeout": "5s",
            "command": sshd.fake_smi("--capture", str(LINUX)),
        },
        "groups": {"loopback": {"targets": {name: {"host": "127.0.0.1", **t} for name, t in targets.items()}}},
    }
    return json.dumps(document, indent=1)


def third_capture(sshd: Sshd) -> Path:
    """:data:`THIRD_CAPTURE_EDITS` applied to the Windows capture, in a directory every login can read."""
    path = sshd.shared / "third-capture.txt"
    if not path.exists():
        text = WINDOWS.read_text(encoding="utf-8")
        for old, new in THIRD_CAPTURE_EDITS:
            assert old in text, old
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    with running_sshd() as server:
        yield server


@pytest.fixture(scope="module")
def fleet(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    directory = tmp_path_factory.mktemp("fleet")
    (sshd.shared / "upgraded.yaml").write_text(json.dumps({"capture": str(LINUX)}), encoding="utf-8")
    targets_file = directory / "targets.yaml"
    targets_file.write_text(targets_yaml(sshd, directory), encoding="utf-8")
    (directory / "sysfs").mkdir()
    exporter = start_exporter([
        "--fleet.targets-file", str(targets_file),
        "--nvidia-smi-command", fake_smi_command(LINUX),
        "--collect.xid-source=off",
        f"--collect.sysfs-path={directory / 'sysfs'}",
    ])  # fmt: skip
    try:
        handle = Fleet(sshd, exporter, targets_file, directory)
        # The first probes (field discovery: four nvidia-smi runs each) at once, to keep the module short;
        # the tests then probe again, as Prometheus does every interval.
        with ThreadPoolExecutor(4) as pool:
            firsts = list(pool.map(handle.probe, ["linux", "windows", "upgraded", "jumped"]))
        assert [status for status, _ in firsts] == [200] * 4, firsts
        yield handle
    finally:
        exporter.stop()


def nvidia_smi_block(body: str) -> str:
    """The ``nvidia_smi_*`` lines (HELP, TYPE and samples) in served order, the per-run values masked."""
    lines = [line for line in body.splitlines() if re.match(r"^(# (HELP|TYPE) )?nvidia_smi_", line)]
    return VARYING.sub(r"nvidia_smi_last_collect_\1_seconds <varies>", "\n".join(lines))


def sample(body: str, name: str) -> str:
    match = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    assert match is not None, f"no {name} in:\n{body[:3000]}"
    return match.group(1)


def local_exporters_block(fleet: Fleet, capture: Path, exporter: Callable[..., Exporter]) -> str:
    """The ``nvidia_smi_*`` block a local exporter serves for ``capture`` (the module's own for the Linux one)."""
    if capture == LINUX:
        return nvidia_smi_block(fleet.exporter.scrape("/metrics"))
    local = exporter(
        "--nvidia-smi-command", fake_smi_command(capture),
        "--collect.xid-source=off", f"--collect.sysfs-path={fleet.directory / 'sysfs'}",
    )  # fmt: skip
    return nvidia_smi_block(local.scrape("/metrics"))


@pytest.mark.parametrize(
    ("target", "capture"),
    [
        pytest.param("linux", LINUX, id="linux-2gpu-mig"),
        pytest.param("windows", WINDOWS, id="windows-1gpu"),
        pytest.param("jumped", None, id="third-capture-behind-the-jump-host"),
    ],
)
def test_each_probed_target_serves_its_local_exporters_nvidia_smi_block_byte_for_byte(
    fleet: Fleet, exporter: Callable[..., Exporter], target: str, capture: Path | None
) -> None:
    """The three targets Prometheus scrapes below, each on its own capture, each equal to a local exporter's."""
    status, probed = fleet.probe(target)
    assert status == 200, probed
    assert sample(probed, "probe_success") == "1"
    local = local_exporters_block(fleet, capture or third_capture(fleet.sshd), exporter)
    assert nvidia_smi_block(probed) == local


def test_the_three_targets_serve_three_different_blocks(fleet: Fleet) -> None:
    """The comparison above can fail: each target's capture gives a block of its own."""
    blocks = {nvidia_smi_block(fleet.probe(target)[1]) for target in ("linux", "windows", "jumped")}
    assert len(blocks) == 3


def test_targets_on_one_host_run_their_own_commands(fleet: Fleet) -> None:
    _, linux = fleet.probe("linux")
    status, windows = fleet.probe("windows")
    assert status == 200, windows
    assert sample(windows, "probe_success") == "1"
    assert 'driver_model_current="WDDM"' in windows
    assert 'driver_model_current="WDDM"' not in linux


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        pytest.param("", "exactly one target parameter", id="no-target-parameter"),
        pytest.param("?target=", "exactly one target parameter", id="empty-target"),
        pytest.param("?target=linux&target=windows", "exactly one target parameter", id="two-targets"),
        pytest.param("?target=nowhere", 'unknown target "nowhere"', id="unknown-name"),
        pytest.param(f"?target=127.0.0.1:{22}", 'unknown target "127.0.0.1:22"', id="an-address-is-not-a-target"),
    ],
)
def test_probe_refuses_what_is_not_one_configured_target(fleet: Fleet, query: str, answer: str) -> None:
    response = fleet.exporter.get("/probe" + query)
    assert response.status == 400
    assert answer in response.body.decode("utf-8")


def test_hung_target_is_cut_at_its_timeout_and_its_remote_process_is_gone(fleet: Fleet) -> None:
    if fleet.sshd.no_signal is not None:
        pytest.skip(fleet.sshd.no_signal)
    pid_file = fleet.sshd.shared / "hung.pid"
    status, body = fleet.probe("hung")
    assert status == 200
    assert sample(body, "probe_success") == "0"
    assert fleet.exporter.logged("timed out after 1.0s")
    pid = int(pid_file.read_text(encoding="ascii"))
    wait_until(lambda: process_gone(pid), f"the remote fake nvidia-smi (pid {pid}) to be gone", timeout=10)


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        pytest.param("refused", "authentication refused", id="auth-refused"),
        pytest.param("rekeyed", "host key not verifiable", id="host-key-changed"),
    ],
)
def test_unreachable_target_fails_its_probe_with_the_reason_logged(fleet: Fleet, target: str, reason: str) -> None:
    status, body = fleet.probe(target)
    assert status == 200
    assert sample(body, "probe_success") == "0"
    assert sample(body, "nvidia_smi_command_exit_code") == "-1"
    assert fleet.exporter.logged(reason)


def test_a_target_behind_a_jump_host_is_reached_through_it(fleet: Fleet) -> None:
    status, body = fleet.probe("jumped")
    assert status == 200
    assert sample(body, "probe_success") == "1"
    assert "NVIDIA GeForce RTX 4070" in body  # its own command ran, on the far side of the jump
    assert "direct-tcpip" in fleet.sshd.log.read_text(errors="replace")  # only the jump opens such channels


def test_output_past_the_cap_fails_the_probe_and_is_dropped(fleet: Fleet) -> None:
    status, body = fleet.probe("flooding")
    assert status == 200
    assert sample(body, "probe_success") == "0"
    assert fleet.exporter.logged("printed more than 1048576 bytes over ssh")


def test_runs_over_one_connection_never_exceed_its_max_concurrent(fleet: Fleet) -> None:
    with ThreadPoolExecutor(2) as pool:
        statuses = [status for status, _ in pool.map(fleet.probe, ["serial-a", "serial-b"])]
    assert statuses == [200, 200]
    runs = (fleet.sshd.shared / "serial.log").read_text(encoding="ascii").split()
    assert len(runs) >= 4  # each probe ran nvidia-smi at least once
    assert runs == ["start", "end"] * (len(runs) // 2)  # never two runs at once


def test_dead_host_is_not_dialled_again_before_its_backoff(fleet: Fleet) -> None:
    fleet.probe("refused")
    before = fleet.sshd.log.read_text(errors="replace").count("Connection from")
    status, body = fleet.probe("refused")
    assert status == 200
    assert sample(body, "probe_success") == "0"
    assert fleet.sshd.log.read_text(errors="replace").count("Connection from") == before
    assert fleet.exporter.logged("not retrying for")


def test_driver_upgrade_rediscovers_the_targets_fields(fleet: Fleet) -> None:
    """A new driver's nvidia-smi knows other fields: the cached discovery is redone (docs/fleet.md)."""
    _, before = fleet.probe("upgraded")
    assert sample(before, "probe_success") == "1"
    assert 'driver_version="550.54.15"' in before
    (fleet.sshd.shared / "upgraded.yaml").write_text(json.dumps({"capture": str(WINDOWS)}), encoding="utf-8")
    after = wait_until(
        lambda: fleet.probe("upgraded")[1],
        "a probe with the new driver's fields",
        until=lambda body: 'driver_version="610.62"' in body,
        timeout=20,
        interval=0.1,
    )
    assert sample(after, "probe_success") == "1"
    assert 'driver_version="550.54.15"' not in after


def test_sighup_reloads_the_targets_file_and_a_bad_file_keeps_the_previous_targets(fleet: Fleet) -> None:
    good = fleet.targets_file.read_text(encoding="utf-8")
    # The added target fails fast (a key sshd refuses): what is checked is that /probe knows its name.
    added = {"added": {"identity_file": str(fleet.sshd.stranger_key)}}
    fleet.targets_file.write_text(targets_yaml(fleet.sshd, fleet.directory, added), encoding="utf-8")
    fleet.exporter.process.send_signal(signal.SIGHUP)
    wait_until(lambda: fleet.probe("added")[0], "the added target", until=lambda code: code == 200, interval=0.1)
    fleet.targets_file.write_text("targets: {linux: {port: many}}\n", encoding="utf-8")
    fleet.exporter.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "keeping the previous targets" in fleet.exporter.log, "the failed reload's log line")
    assert fleet.probe("added")[0] == 200
    fleet.targets_file.write_text(good, encoding="utf-8")


LOAD_TARGETS = 50
LOAD_ROUNDS = 2


@pytest.mark.slow
def test_fifty_targets_share_one_pooled_connection_and_all_answer(
    sshd: Sshd, tmp_path: Path, exporter: Callable[..., Exporter]
) -> None:
    """50 targets on one host, probed LOAD_ROUNDS times by 10 scrapers: every probe succeeds over one connection."""
    names = [f"gpu-{index:02d}" for index in range(LOAD_TARGETS)]
    document = {
        "defaults": {
            "user": sshd.user, "port": sshd.port, "identity_file": str(sshd.client_key),
            "known_hosts": str(sshd.known_hosts), "timeout": "60s", "max_concurrent": 8,
            "command": sshd.fake_smi("--capture", str(LINUX)),
        },
        "targets": {name: {"host": "127.0.0.1"} for name in names},
    }  # fmt: skip
    targets_file = tmp_path / "targets.yaml"
    targets_file.write_text(json.dumps(document), encoding="utf-8")
    accepted_before = sshd.log.read_text(errors="replace").count("Accepted publickey")
    handle = exporter("--fleet.targets-file", str(targets_file), "--collect.backend=demo")
    with ThreadPoolExecutor(10) as pool:
        for _ in range(LOAD_ROUNDS):
            bodies = list(pool.map(lambda name: handle.get(f"/probe?target={name}", timeout=120).text, names))
            assert [sample(body, "probe_success") for body in bodies] == ["1"] * LOAD_TARGETS
    assert sshd.log.read_text(errors="replace").count("Accepted publickey") == accepted_before + 1


def documented_prometheus_job() -> dict[str, Any]:
    """The scrape job docs/fleet.md gives under "Prometheus" (its first YAML block there)."""
    text = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    section = text.split("\n## Prometheus\n", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    job: dict[str, Any] = yaml.safe_load(block)["scrape_configs"][0]
    return job


@pytest.fixture(scope="module")
def prometheus_binary() -> Path:
    """Skips before the module's sshd and exporter start when there is no Prometheus."""
    from deploy_helpers import binary

    return binary("prometheus")


def test_prometheus_scrapes_three_targets_through_one_exporter_as_documented(
    prometheus_binary: Path, fleet: Fleet, tmp_path: Path
) -> None:
    from deploy_helpers import get_json, prometheus

    names = ["linux", "windows", "jumped"]
    job = documented_prometheus_job()
    sd_file = tmp_path / "gpu-fleet.yml"
    sd_file.write_text(yaml.safe_dump([{"targets": names, "labels": {"cluster": "loopback"}}]), encoding="utf-8")
    # 3 s, not 1 s: in CI the 50-target load test runs beside this one, and its 50 sessions of the fake nvidia-smi
    # made every 1 s probe time out on two cores (2026-12-02).
    job |= {"scrape_interval": "3s", "scrape_timeout": "3s", "file_sd_configs": [{"files": [str(sd_file)]}]}
    assert job["relabel_configs"][-1]["target_label"] == "__address__"
    job["relabel_configs"][-1]["replacement"] = fleet.exporter.address
    with prometheus({"scrape_configs": [job]}, tmp_path / "prometheus") as server:
        query = server.url + "/api/v1/query?query=" + urllib.parse.quote('probe_success{job="gpu-fleet"} == 1')
        results = wait_until(
            lambda: get_json(query)["data"]["result"],
            "Prometheus to scrape the three targets successfully",
            until=lambda result: len(result) == len(names),
            timeout=60,
            interval=0.5,
        )
    assert sorted(series["metric"]["instance"] for series in results) == sorted(names)
    assert {series["metric"]["cluster"] for series in results} == {"loopback"}


def test_the_global_limit_holds_across_hosts(sshd: Sshd) -> None:
    """--fleet.max-concurrent=1: two targets on two connections (different connect_timeout) still run one at a time."""
    from nvidia_gpu_exporter.backends.fleet.ssh import SshPool, SshRunner
    from nvidia_gpu_exporter.backends.fleet.targets import parse_targets

    runs = sshd.shared / "global.log"
    command = f"echo start >> {runs}; sleep 0.2; echo end >> {runs}; true"
    settings = {
        "user": sshd.user, "port": sshd.port, "identity_file": str(sshd.client_key),
        "known_hosts": str(sshd.known_hosts), "command": command, "max_concurrent": 4,
    }  # fmt: skip
    document = {"targets": {name: {**settings, "host": "127.0.0.1", "connect_timeout": f"{seconds}s"}
                            for name, seconds in (("one", 3), ("two", 4))}}  # fmt: skip
    targets = parse_targets(json.dumps(document)).by_name

    async def scenario() -> list[int]:
        pool = SshPool(max_concurrent=1)
        runners = [SshRunner(pool, target) for target in targets.values()]
        try:
            results = await asyncio.gather(*(runner.run(["--version"]) for runner in runners for _ in range(2)))
        finally:
            await pool.aclose()
        return [result.exit_code for result in results]

    assert asyncio.run(scenario()) == [0, 0, 0, 0]
    lines = runs.read_text(encoding="ascii").split()
    assert lines == ["start", "end"] * 4


def test_a_probe_with_process_usage_serves_the_local_exporters_per_process_families(
    sshd: Sshd, exporter: Callable[..., Exporter], tmp_path: Path
) -> None:
    """--collect.process-usage goes through to the targets: pmon over SSH, capped as locally (the overflow too).

    The Windows capture under load: four processes with SM utilization on one GPU (the Linux one is in MIG mode,
    where pmon has none)."""
    targets = tmp_path / "targets.yaml"
    loaded = {"loaded": {"command": sshd.fake_smi("--capture", str(WINDOWS), "--state", "load")}}
    targets.write_text(targets_yaml(sshd, tmp_path, loaded), encoding="utf-8")
    (tmp_path / "sysfs").mkdir()
    flags = (
        "--collect.compute-apps", "--collect.process-usage", "--collect.process-usage-max-processes=1",
        "--collect.xid-source=off", f"--collect.sysfs-path={tmp_path / 'sysfs'}",
    )  # fmt: skip
    probing = exporter("--fleet.targets-file", str(targets), *flags)
    local = exporter(*flags, "--nvidia-smi-command", fake_smi_command(WINDOWS, "--state", "load"))
    response = probing.get("/probe?target=loaded")
    assert response.status == 200
    probed = response.body.decode("utf-8", "replace")
    assert sample(probed, "probe_success") == "1"
    assert "nvidia_smi_process_sm_utilization_ratio{" in probed
    assert 'pid="other"' in probed  # more processes than the cap of 1 on a GPU: the rest summed, as locally
    assert nvidia_smi_block(probed) == nvidia_smi_block(local.scrape("/metrics"))
