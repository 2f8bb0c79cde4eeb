"""Attribution without gRPC: the attributor's mapping, cache, bounds and logging against a fake source,
the rendered families, the collector hook, the /-/attribution report and the flags."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from exposition_reader import family_block, without_families
from fakes import FakeBackend
from harness import MIG_FIXTURE
from k8s_fakes import CGROUP_LAYOUTS, CID, GPU0, GPU1, HOST_SERVICE, MIG0, MIG1, UID, make_proc, write_stat
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.config import Config, ConfigError, validate
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.kubernetes.attribution import AttributionSettings, Attributor
from nvidia_gpu_exporter.kubernetes.defaults import DEFAULT_RESOURCE_PATTERNS
from nvidia_gpu_exporter.kubernetes.podresources import PodResourcesError
from nvidia_gpu_exporter.model import kubernetes as model
from nvidia_gpu_exporter.model.kubernetes import KubernetesAttribution, PodDevice, PodResourcesReading
from nvidia_gpu_exporter.model.snapshot import (
    Attempt,
    GpuTable,
    MigDevice,
    NvmlExtras,
    ProcessList,
    ProcessRow,
    Readings,
    Snapshot,
    StatusFamily,
)
from nvidia_gpu_exporter.web.attribution import build_report
from polling import eventually
from unit_helpers import gpu_row, query_fields

FIELDS = query_fields([("mig.mode.current", "mig.mode.current"), ("temperature.gpu", "temperature.gpu")])
ROWS = (
    gpu_row(FIELDS, uuid=GPU0, index="0", mig_mode_current="Enabled", temperature_gpu="47"),
    gpu_row(FIELDS, uuid=GPU1, index="1", mig_mode_current="Disabled", temperature_gpu="30"),
)
G0, G1 = GPU0.removeprefix("GPU-"), GPU1.removeprefix("GPU-")
M0, M1 = MIG0.removeprefix("MIG-"), MIG1.removeprefix("MIG-")
SOCKET = "/fake/pod-resources/kubelet.sock"
GUARD_SECONDS = 10.0  # every await in these tests is bounded by this; none should come close
KUBERNETES_FAMILIES = (
    "nvidia_smi_gpu_pod_info",
    "nvidia_smi_kubernetes_attribution_up",
    "nvidia_smi_compute_app_pod_info",
)


def readings(processes: ProcessList | None = None, extras: NvmlExtras | None = None) -> Readings:
    return Readings(GpuTable(ROWS), processes, "12.4", extras)


def dev(pod: str, device_id: str, resource: str = "nvidia.com/gpu", container: str = "main") -> PodDevice:
    return PodDevice("ml", pod, container, resource, device_id)


class FakeSource:
    """A PodResources source whose answer, failure or hang the test sets."""

    socket = SOCKET

    def __init__(self, devices: Sequence[PodDevice] = ()) -> None:
        self.devices = tuple(devices)
        self.error: Exception | None = None
        self.hang = False
        self.calls = 0
        self.cancelled = 0

    async def list_devices(self, timeout_seconds: float) -> tuple[PodDevice, ...]:
        self.calls += 1
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.error is not None:
            raise self.error
        return self.devices


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_attributor(
    source: FakeSource | None, *, clock: Clock | None = None, lister_text: str | None = None, **overrides: object
) -> tuple[Attributor, list[int]]:
    """An attributor on FIELDS; the list counts nvidia-smi -L runs (answered with ``lister_text``)."""
    settings = AttributionSettings(
        pod_resources=True,
        socket=SOCKET,
        timeout_seconds=0.05,
        cache_seconds=0.0,
        resource_patterns=DEFAULT_RESOURCE_PATTERNS,
    )
    settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    runs: list[int] = []

    async def lister() -> str:
        runs.append(1)
        assert lister_text is not None
        return lister_text

    attributor = Attributor(
        settings,
        FIELDS,
        source=source,
        mig_lister=lister if lister_text is not None else None,
        clock=clock or Clock(),
        wall_clock=lambda: 1_700_000_000.0,
    )
    return attributor, runs


def run(attributor: Attributor, current: Readings | None = None) -> KubernetesAttribution:
    async def both() -> KubernetesAttribution:
        return await attributor.attribute(await attributor.fetch(), current)

    return asyncio.run(asyncio.wait_for(both(), GUARD_SECONDS))


def list_text() -> str:
    section = load_capture(MIG_FIXTURE).find("capabilities", "list (-L)")
    assert section is not None
    return section.body


# -- mapping ----------------------------------------------------------------------------------------------


def test_whole_gpu_mig_and_time_sliced_replicas() -> None:
    source = FakeSource(
        [
            dev("trainer", GPU1 + "::0"),
            dev("trainer", GPU1 + "::1"),  # one container with two replicas of one GPU
            dev("notebook", GPU1 + "::2", container="jupyter"),
            dev("infer", MIG1, "nvidia.com/mig-1g.10gb"),
        ]
    )
    attributor, runs = make_attributor(source, lister_text=list_text())
    result = run(attributor, readings())
    assert [(p.uuid, p.pod, p.container, p.mig_uuid, p.replica) for p in result.gpu_pods] == [
        (G1, "trainer", "main", "", "0"),
        (G1, "trainer", "main", "", "1"),
        (G1, "notebook", "jupyter", "", "2"),
        (G0, "infer", "main", M1, ""),
    ]
    assert result.unmatched == ()
    assert runs == [1]  # the exec backend's MIG inventory came from nvidia-smi -L, once
    run(attributor, readings())
    assert runs == [1]  # the inventory is kept: MIG uuids it knows need no new run
    assert result.pod_resources is not None
    assert result.pod_resources.ok


def test_mig_inventory_from_nvml_readings_needs_no_nvidia_smi() -> None:
    extras = NvmlExtras(mig_devices=(MigDevice(GPU0, MIG0, 1, 0, "3g.40gb"), MigDevice(GPU0, MIG1, 9, 0, "1g.10gb")))
    source = FakeSource(
        [dev("a", MIG0, "nvidia.com/mig-3g.40gb"), dev("b", f"MIG-{GPU0}/9/0", "nvidia.com/mig-1g.10gb")]
    )
    attributor, runs = make_attributor(source, lister_text="")
    result = run(attributor, readings(extras=extras))
    assert [(p.pod, p.uuid, p.mig_uuid) for p in result.gpu_pods] == [("a", G0, M0), ("b", G0, M1)]
    assert runs == []


def test_index_ids_and_every_kind_of_unplaceable_device() -> None:
    source = FakeSource(
        [
            dev("by-index", "1"),
            dev("garbage", "not-a-gpu"),
            dev("mig-by-index", "0:1", "nvidia.com/mig-1g.10gb"),
            dev("renamed", GPU0, "example.com/shared-gpu"),
            dev("elsewhere", "GPU-00000000-0000-0000-0000-000000000009"),
            dev("no-such-index", "7"),
            dev("unknown-mig", MIG0, "nvidia.com/mig-3g.40gb"),
            dev("nic", "0000:3b:00.1", "intel.com/sriov"),  # another vendor's device: ignored
        ]
    )
    attributor, _ = make_attributor(source)  # no -L lister: the MIG uuid cannot be placed
    result = run(attributor, readings())
    assert [(p.pod, p.uuid) for p in result.gpu_pods] == [("by-index", G1)]
    assert [(u.device.pod, u.reason, u.uuid) for u in result.unmatched] == [
        ("garbage", model.DEVICE_ID_NOT_RECOGNISED, ""),
        ("mig-by-index", model.DEVICE_ID_NOT_RECOGNISED, ""),
        ("renamed", model.RESOURCE_NOT_MATCHED, G0),
        ("elsewhere", model.GPU_NOT_VISIBLE, "00000000-0000-0000-0000-000000000009"),
        ("no-such-index", model.GPU_NOT_VISIBLE, ""),
        ("unknown-mig", model.MIG_DEVICE_UNKNOWN, ""),
    ]
    assert "DEVICE_ID_STRATEGY=uuid" in result.unmatched[1].detail
    assert "--kubernetes.resource-names" in result.unmatched[2].detail


def test_configured_resource_names_decide_what_is_read() -> None:
    source = FakeSource([dev("renamed", GPU0, "example.com/shared-gpu")])
    attributor, _ = make_attributor(source, resource_patterns=("example.com/*",))
    assert [(p.pod, p.uuid) for p in run(attributor, readings()).gpu_pods] == [("renamed", G0)]


def test_a_failed_collection_maps_nothing_but_keeps_the_kubelet_state() -> None:
    attributor, _ = make_attributor(FakeSource([dev("a", GPU0)]))
    result = run(attributor, None)
    assert result.gpu_pods == ()
    assert result.pod_resources is not None
    assert result.pod_resources.ok


# -- cache, bounds, failures, logging ---------------------------------------------------------------------


def test_cache_reuses_an_answer_then_a_gone_pod_disappears() -> None:
    clock = Clock()
    source = FakeSource([dev("a", GPU0), dev("b", GPU1)])
    attributor, _ = make_attributor(source, clock=clock, cache_seconds=5.0)
    assert {p.pod for p in run(attributor, readings()).gpu_pods} == {"a", "b"}
    source.devices = (dev("a", GPU0),)  # pod b is deleted
    clock.now += 4.9
    assert {p.pod for p in run(attributor, readings()).gpu_pods} == {"a", "b"}  # still the cached answer
    assert source.calls == 1
    clock.now += 0.2
    assert {p.pod for p in run(attributor, readings()).gpu_pods} == {"a"}
    assert source.calls == 2


def test_a_hung_kubelet_is_bounded_by_the_timeout() -> None:
    source = FakeSource()
    source.hang = True
    attributor, _ = make_attributor(source, timeout_seconds=0.05)
    result = run(attributor, readings())
    assert result.pod_resources is not None
    assert (result.pod_resources.ok, result.pod_resources.reason) == (False, model.TIMEOUT)
    assert SOCKET in result.pod_resources.detail
    assert source.cancelled == 1  # the call was abandoned, not left running
    assert result.gpu_pods == ()


def test_failures_keep_their_reason_and_unexpected_errors_do_not_escape() -> None:
    source = FakeSource()
    source.error = PodResourcesError(model.SOCKET_MISSING, f"{SOCKET} does not exist")
    attributor, _ = make_attributor(source)
    reading = run(attributor, readings()).pod_resources
    assert reading == PodResourcesReading(False, model.SOCKET_MISSING, f"{SOCKET} does not exist", (), 1_700_000_000.0)
    source.error = KeyError("boom")
    reading = run(attributor, readings()).pod_resources
    assert reading is not None
    assert (reading.reason, reading.detail) == (model.RPC_ERROR, "KeyError('boom')")


def test_the_reason_is_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource()
    attributor, _ = make_attributor(source)
    caplog.set_level(logging.INFO, logger="nvidia_gpu_exporter.kubernetes")

    def messages() -> list[tuple[str, str]]:
        return [(r.levelname, getattr(r, "reason", "")) for r in caplog.records if r.name.endswith("attribution")]

    source.error = PodResourcesError(model.SOCKET_MISSING, "gone")
    for _ in range(3):
        run(attributor, readings())
    assert messages() == [("WARNING", model.SOCKET_MISSING)]
    source.error = PodResourcesError(model.PERMISSION_DENIED, "no")
    run(attributor, readings())
    source.error = None
    run(attributor, readings())
    run(attributor, readings())
    assert messages() == [
        ("WARNING", model.SOCKET_MISSING),
        ("WARNING", model.PERMISSION_DENIED),
        ("INFO", ""),
    ]


def test_source_off_means_no_kubelet_call() -> None:
    source = FakeSource([dev("a", GPU0)])
    attributor, _ = make_attributor(source, pod_resources=False)
    result = run(attributor, readings())
    assert result.pod_resources is None
    assert source.calls == 0


# -- processes --------------------------------------------------------------------------------------------


def process_rows(*pids: str) -> ProcessList:
    return ProcessList(True, tuple(ProcessRow(GPU0, pid, "python3", "100 MiB") for pid in pids))


def test_processes_map_to_pod_uid_and_container_id(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {"41872": CGROUP_LAYOUTS[4][1], "41903": HOST_SERVICE})
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(proc))
    result = run(attributor, readings(process_rows("41872", "41903", "41950")))
    assert result.processes is not None
    assert [(p.pid, p.pod_uid, p.container_id, p.runtime, p.reason) for p in result.processes] == [
        ("41872", UID, CID, "cri-o", ""),
        ("41903", "", "", "", model.NOT_IN_A_POD),
        ("41950", "", "", "", model.PROCESS_NOT_VISIBLE),
    ]
    assert result.process_reason == ""


def test_a_pid_reused_by_another_pods_process_names_the_new_pod_at_the_next_collection(tmp_path: Path) -> None:
    """Collections keep each running process's pod (kubernetes.cgroups.CgroupCache): a new start time under the
    same pid is another process, whose cgroup is read."""
    proc = make_proc(tmp_path, {"41872": CGROUP_LAYOUTS[4][1]})
    write_stat(proc, "41872", 100)
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(proc))
    run(attributor, readings(process_rows("41872")))
    (proc / "41872" / "cgroup").write_text(CGROUP_LAYOUTS[-1][1], encoding="utf-8")
    write_stat(proc, "41872", 900)
    result = run(attributor, readings(process_rows("41872")))
    assert result.processes is not None
    assert [(p.pod_uid, p.container_id) for p in result.processes] == [(CGROUP_LAYOUTS[-1][2], CGROUP_LAYOUTS[-1][3])]


def test_hostpid_off_is_detected_and_no_process_is_misattributed(tmp_path: Path) -> None:
    # Without hostPID the host pids name this pod's own processes, or nothing: never look them up.
    proc = make_proc(tmp_path, {"41872": CGROUP_LAYOUTS[1][1]}, init=CGROUP_LAYOUTS[3][1])
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(proc))
    result = run(attributor, readings(process_rows("41872")))
    assert result.process_reason == model.HOSTPID_OFF
    assert result.processes is not None
    assert [(p.pod_uid, p.reason) for p in result.processes] == [("", model.HOSTPID_OFF)]
    # A private cgroup namespace hides that; then no pid at all being visible says it.
    quiet = make_proc(tmp_path / "quiet", {})
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(quiet))
    result = run(attributor, readings(process_rows("41872", "41903")))
    assert result.process_reason == model.HOSTPID_OFF
    assert "none of the 2 GPU processes" in result.process_detail


def test_a_failed_process_query_is_not_an_empty_gpu(tmp_path: Path) -> None:
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(tmp_path))
    result = run(attributor, readings(ProcessList(False)))
    assert (result.processes, result.process_reason) == ((), model.PROCESS_QUERY_FAILED)


# -- exposition -------------------------------------------------------------------------------------------


def snapshot(attribution: KubernetesAttribution | None, current: Readings | None = None) -> Snapshot:
    attempt = Attempt(current or readings(), 0, 0.1, 1_700_000_000.0)
    return Snapshot(attempt, 0, 1_700_000_000.0, 1, kubernetes=attribution)


def attribution_of(devices: Sequence[PodDevice], current: Readings | None = None) -> KubernetesAttribution:
    attributor, _ = make_attributor(FakeSource(devices), lister_text=list_text())
    return run(attributor, current or readings())


def test_families_render_the_joinable_pod_info() -> None:
    expo = Exposition(FIELDS, StatusFamily.COMMAND_EXIT_CODE)
    attribution = attribution_of(
        [dev("t", GPU1 + "::0"), dev("t", GPU1 + "::1"), dev("n", GPU1 + "::2"), dev("i", MIG1, "nvidia.com/mig-1g")]
    )
    text = expo.render(snapshot(attribution))
    assert family_block(text, "nvidia_smi_gpu_pod_info").splitlines()[2:] == [
        f'nvidia_smi_gpu_pod_info{{container="main",mig_uuid="",namespace="ml",pod="n",uuid="{G1}"}} 1',
        f'nvidia_smi_gpu_pod_info{{container="main",mig_uuid="",namespace="ml",pod="t",uuid="{G1}"}} 1',
        f'nvidia_smi_gpu_pod_info{{container="main",mig_uuid="{M1}",namespace="ml",pod="i",uuid="{G0}"}} 1',
    ]  # two replicas held by one container are one series, not a duplicate-series error
    assert family_block(text, "nvidia_smi_kubernetes_attribution_up").splitlines()[2:] == [
        'nvidia_smi_kubernetes_attribution_up{reason=""} 1'
    ]
    assert 'nvidia_smi_temperature_gpu{uuid="' in text  # no pod labels unless asked for


def test_a_down_kubelet_renders_up_0_with_the_reason_and_nothing_else_changes() -> None:
    expo = Exposition(FIELDS, StatusFamily.COMMAND_EXIT_CODE)
    down = KubernetesAttribution(PodResourcesReading(False, model.SOCKET_MISSING, "gone"), SOCKET)
    text = expo.render(snapshot(down))
    assert family_block(text, "nvidia_smi_kubernetes_attribution_up").splitlines()[2:] == [
        'nvidia_smi_kubernetes_attribution_up{reason="socket_missing"} 0'
    ]
    assert without_families(text, KUBERNETES_FAMILIES) == expo.render(snapshot(None))
    failed = Snapshot(Attempt(None, 1, 0.1, 1.0, error="x"), 1, None, 1, kubernetes=down)
    assert "nvidia_smi_kubernetes_attribution_up{" in expo.render(failed)
    assert "nvidia_smi_gpu_pod_info" not in expo.render(failed)


def test_pod_labels_only_on_gpus_held_whole_by_one_container() -> None:
    expo = Exposition(FIELDS, StatusFamily.COMMAND_EXIT_CODE, kubernetes_pod_labels=True)
    sole = attribution_of([dev("train", GPU1, container="c"), dev("i", MIG1, "nvidia.com/mig-1g")])
    text = expo.render(snapshot(sole))
    assert f'nvidia_smi_temperature_gpu{{container="c",namespace="ml",pod="train",uuid="{G1}"}} 30' in text
    assert f'nvidia_smi_temperature_gpu{{uuid="{G0}"}} 47' in text  # a MIG slice is not the whole GPU
    shared = attribution_of([dev("a", GPU1 + "::0"), dev("b", GPU1 + "::1")])
    assert f'nvidia_smi_temperature_gpu{{uuid="{G1}"}} 30' in expo.render(snapshot(shared))
    escaped = attribution_of([PodDevice('n"s', "p\\", "c\n", "nvidia.com/gpu", GPU1)])
    assert 'container="c\\n",namespace="n\\"s",pod="p\\\\"' in expo.render(snapshot(escaped))


def test_process_pod_info(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {"41872": CGROUP_LAYOUTS[0][1]})
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(proc))
    current = readings(process_rows("41872", "41903"))
    text = Exposition(FIELDS, StatusFamily.COMMAND_EXIT_CODE).render(snapshot(run(attributor, current), current))
    assert family_block(text, "nvidia_smi_compute_app_pod_info").splitlines()[2:] == [
        f'nvidia_smi_compute_app_pod_info{{container_id="{CID}",pid="41872",pod_uid="{UID}",uuid="{G0}"}} 1'
    ]
    assert "nvidia_smi_kubernetes_attribution_up" not in text  # the kubelet source is off


# -- the collector ----------------------------------------------------------------------------------------


def test_collector_attaches_attribution_and_a_hung_kubelet_never_stalls_it() -> None:
    from nvidia_gpu_exporter.collector import Collector

    async def scenario() -> tuple[Snapshot, Snapshot]:
        source = FakeSource([dev("a", GPU1)])
        attributor, _ = make_attributor(source)
        backend = FakeBackend(fields=FIELDS, readings=readings())
        collector = Collector(backend, timeout_seconds=5.0, attributor=attributor)
        first = await collector.scrape()
        source.hang = True
        second = await collector.scrape()
        return first, second

    first, second = asyncio.run(asyncio.wait_for(scenario(), GUARD_SECONDS))
    assert first.kubernetes is not None
    assert [p.pod for p in first.kubernetes.gpu_pods] == ["a"]
    assert second.attempt is not None
    assert second.attempt.succeeded
    assert second.kubernetes is not None
    assert second.kubernetes.pod_resources is not None
    assert second.kubernetes.pod_resources.reason == model.TIMEOUT


def test_collector_reports_attribution_even_when_the_collection_fails() -> None:
    from nvidia_gpu_exporter.backends import CollectionError
    from nvidia_gpu_exporter.collector import Collector

    async def scenario() -> Snapshot:
        attributor, _ = make_attributor(FakeSource([dev("a", GPU1)]))
        failing = FakeBackend([CollectionError("nvidia-smi failed", 9)], fields=FIELDS, readings=readings())
        collector = Collector(failing, timeout_seconds=5.0, attributor=attributor)
        return await collector.scrape()

    result = asyncio.run(asyncio.wait_for(scenario(), GUARD_SECONDS))
    assert result.attempt is not None
    assert not result.attempt.succeeded
    assert result.kubernetes is not None
    assert result.kubernetes.pod_resources is not None
    assert result.kubernetes.pod_resources.ok
    assert result.kubernetes.gpu_pods == ()


def test_an_abandoned_collection_cancels_the_kubelet_call() -> None:
    from nvidia_gpu_exporter.collector import Collector

    source = FakeSource()
    source.hang = True

    async def scenario() -> Snapshot:
        attributor, _ = make_attributor(source, timeout_seconds=60.0)
        never_done = FakeBackend(gated=True, fields=FIELDS, readings=readings())
        collector = Collector(never_done, timeout_seconds=None, attributor=attributor)
        result = await collector.scrape(budget_seconds=0.05)
        await eventually(lambda: source.cancelled > 0, "the cancellation to reach the kubelet call")
        await collector.aclose()
        return result

    result = asyncio.run(asyncio.wait_for(scenario(), GUARD_SECONDS))
    assert result.attempt is None
    assert source.cancelled == 1


# -- GET /-/attribution's report --------------------------------------------------------------------------


def settings(**overrides: object) -> AttributionSettings:
    base = AttributionSettings(True, SOCKET, 1.0, 0.0, DEFAULT_RESOURCE_PATTERNS, False, "/proc")
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def gpu_entries(report: dict[str, object]) -> dict[str, dict[str, object]]:
    gpus = report["gpus"]
    assert isinstance(gpus, list)
    return {gpu["uuid"]: gpu for gpu in gpus}


def test_report_explains_each_gpu_without_a_pod() -> None:
    attribution = attribution_of([dev("renamed", GPU0, "example.com/gpu"), dev("t", GPU1)])
    gpus = gpu_entries(build_report(snapshot(attribution), settings(), FIELDS, {}))
    assert gpus[G0]["reason"] == model.RESOURCE_NOT_MATCHED
    assert gpus[G0]["pods"] == []
    assert gpus[G1]["reason"] == ""
    assert gpus[G1]["pods"] == [
        {"namespace": "ml", "pod": "t", "container": "main", "resource": "nvidia.com/gpu", "device_id": GPU1,
         "mig_uuid": "", "replica": ""}
    ]  # fmt: skip
    assert gpus[G0]["mig_enabled"] is True
    assert gpus[G1]["processes_reason"] == "process_pods_off"
    garbage = attribution_of([dev("g", "garbage")])
    gpus = gpu_entries(build_report(snapshot(garbage), settings(), FIELDS, {}))
    assert gpus[G1]["reason"] == model.DEVICE_ID_NOT_RECOGNISED
    nobody = attribution_of([])
    gpus = gpu_entries(build_report(snapshot(nobody), settings(), FIELDS, {}))
    assert gpus[G1]["reason"] == model.NO_POD_REQUESTS_GPU


def test_report_passes_the_socket_problem_to_every_gpu() -> None:
    down = KubernetesAttribution(PodResourcesReading(False, model.PERMISSION_DENIED, "not root"), SOCKET)
    report = build_report(snapshot(down), settings(), FIELDS, {})
    assert report["pod_resources"] == {
        "enabled": True, "socket": SOCKET, "resource_names": list(DEFAULT_RESOURCE_PATTERNS), "up": False,
        "reason": model.PERMISSION_DENIED, "detail": "not root", "fetched_at": 0.0, "devices": 0,
    }  # fmt: skip
    assert {gpu["reason"] for gpu in gpu_entries(report).values()} == {model.PERMISSION_DENIED}
    off = build_report(snapshot(KubernetesAttribution(None)), settings(pod_resources=False), FIELDS, {})
    assert {gpu["reason"] for gpu in gpu_entries(off).values()} == {"pod_resources_off"}
    failed = Snapshot(Attempt(None, 1, 0.1, 1.0, error="nvidia-smi failed"), 1, None, 1, kubernetes=down)
    report = build_report(failed, settings(), FIELDS, {})
    assert (report["gpus"], report["reason"]) == ([], "no_gpu_readings")
    assert report["collection"] == {"succeeded": False, "error": "nvidia-smi failed"}


def test_report_says_when_the_mig_monitor_environment_is_missing(tmp_path: Path) -> None:
    proc = make_proc(tmp_path, {})
    current = readings(ProcessList(True, ()))
    attributor, _ = make_attributor(None, pod_resources=False, process_pods=True, proc_root=str(proc))
    attribution = run(attributor, current)
    on = settings(pod_resources=False, process_pods=True, proc_root=str(proc))
    gpus = gpu_entries(build_report(snapshot(attribution, current), on, FIELDS, {}))
    assert gpus[G0]["processes_reason"] == model.MIG_MONITOR_ENV_MISSING
    assert gpus[G1]["processes_reason"] == ""  # MIG is off there: an idle GPU is just idle
    env = {"NVIDIA_MIG_MONITOR_DEVICES": "all"}
    gpus = gpu_entries(build_report(snapshot(attribution, current), on, FIELDS, env))
    assert gpus[G0]["processes_reason"] == ""


# -- flags ------------------------------------------------------------------------------------------------


def test_flags_parse_into_the_config() -> None:
    config = parse_args(
        [
            "--kubernetes.pod-resources",
            "--kubernetes.pod-resources-socket=/k/kubelet.sock",
            "--kubernetes.pod-resources-timeout=250ms",
            "--kubernetes.pod-resources-cache=0s",
            "--kubernetes.resource-names=nvidia.com/gpu",
            "--kubernetes.pod-labels",
            "--collect.compute-apps",
            "--kubernetes.process-pods",
            "--kubernetes.proc-root=/host/proc",
        ]
    ).config
    assert (config.kubernetes_pod_resources, config.kubernetes_pod_labels, config.kubernetes_process_pods) == (
        True,
        True,
        True,
    )
    assert config.kubernetes_pod_resources_socket == "/k/kubelet.sock"
    assert (config.kubernetes_pod_resources_timeout_ns, config.kubernetes_pod_resources_cache_ns) == (250_000_000, 0)
    assert (config.kubernetes_resource_names, config.kubernetes_proc_root) == ("nvidia.com/gpu", "/host/proc")
    validate(config)
    defaults = Config()
    assert not defaults.kubernetes_pod_resources
    assert defaults.kubernetes_pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kubernetes_pod_labels": True}, "--kubernetes.pod-labels requires --kubernetes.pod-resources"),
        ({"kubernetes_process_pods": True}, "--kubernetes.process-pods requires --collect.compute-apps"),
        (
            {"kubernetes_pod_resources": True, "kubernetes_pod_resources_timeout_ns": 0},
            "kubernetes.pod-resources-timeout must be positive, got 0s",
        ),
        (
            {"kubernetes_pod_resources": True, "kubernetes_pod_resources_cache_ns": -1},
            "kubernetes.pod-resources-cache must not be negative",
        ),
        ({"kubernetes_pod_resources": True, "kubernetes_resource_names": " , "}, "must name at least one resource"),
        (
            {"kubernetes_pod_resources": True, "telemetry_path": "/-/attribution"},
            "web.telemetry-path must not be /-/attribution",
        ),
    ],
)
def test_flag_combinations_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("-", "\\-").replace(".", "\\.")):
        validate(dataclasses.replace(Config(), **changes))  # type: ignore[arg-type]


def test_without_attribution_the_attribution_route_path_is_still_a_valid_telemetry_path() -> None:
    validate(dataclasses.replace(Config(), telemetry_path="/-/attribution"))
