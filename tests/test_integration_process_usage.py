"""Per-process usage (--collect.process-usage) against the real server: exec with the fake nvidia-smi's pmon
(written from a capture, or recorded verbatim), the cap on series per GPU, ended processes, and the demo."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import parse_openmetrics, sample_value, series
from harness import fake_smi_command
from nvidia_gpu_exporter.capture.format import FENCE
from nvidia_gpu_exporter.model.fields import IDENTITY_FIELDS

GPU0 = "GPU-11111111-2222-4333-8444-555555555555"
GPU1 = "GPU-66666666-7777-4888-9999-000000000000"
UUID0 = GPU0.removeprefix("GPU-").lower()
UUID1 = GPU1.removeprefix("GPU-").lower()
MIB = 1_048_576.0
SM = "nvidia_smi_process_sm_utilization_ratio"
MEMORY = "nvidia_smi_process_used_memory_bytes"
OVERFLOW = "nvidia_smi_process_usage_overflow_processes"
OVERFLOWED = "nvidia_gpu_exporter_process_usage_overflowed_processes_total"
SUCCESS = "nvidia_smi_process_usage_last_collect_success"
USAGE_FAMILIES = (
    SM,
    "nvidia_smi_process_memory_utilization_ratio",
    "nvidia_smi_process_encoder_utilization_ratio",
    "nvidia_smi_process_decoder_utilization_ratio",
    MEMORY,
    OVERFLOW,
    SUCCESS,
    OVERFLOWED,
)
EXTRA_FIELDS = ("utilization.gpu", "utilization.memory", "utilization.encoder", "utilization.decoder")

# Recorded by a real driver with -s um (new layout: the header sits right of the data), GPU indices as ours.
RECORDED_PMON = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name \n"
    "    0       2479     G      -      -      -      -      -      -      1      0    kwalletd6      \n"
    "    0     100949     C     45     12      -      -      -      -    624      0    python         \n"
    "    1          -     -      -      -      -      -      -      -      -      -    -              \n"
)


def _block(label: str, command: str, body: str) -> str:
    return f"{FENCE}\n# load :: {label}\n# $ {command}\n{FENCE}\n{body.rstrip(chr(10))}\n\n"


def write_capture(path: Path, processes: list[tuple[str, int, str, int]], pmon: str | None = None) -> Path:
    """A two-GPU capture: GPU 0 at 80 % utilization, GPU 1 idle, ``processes`` as (uuid, pid, name, MiB)."""
    fields = [*IDENTITY_FIELDS, *EXTRA_FIELDS]
    header = ", ".join([*IDENTITY_FIELDS, *(f"{name} [%]" for name in EXTRA_FIELDS)])

    def gpu(uuid: str, index: int, utilization: int) -> str:
        identity = {"uuid": uuid, "name": "NVIDIA H200", "index": str(index), "pci.bus_id": f"00000000:0{index}:00.0"}
        cells = [identity.get(name, "[N/A]") for name in IDENTITY_FIELDS]
        return ", ".join([*cells, f"{utilization} %", f"{utilization // 2} %", "0 %", "0 %"])

    apps = "\n".join(f"{uuid}, {pid}, {name}, {mib} MiB" for uuid, pid, name, mib in processes)
    text = _block(
        "query-gpu (csv, test)",
        f"nvidia-smi --query-gpu={','.join(fields)} --format=csv",
        "\n".join([header, gpu(GPU0, 0, 80), gpu(GPU1, 1, 0)]),
    )
    text += _block(
        "query-compute-apps (per-process)",
        "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv",
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n" + apps,
    )
    if pmon is not None:
        text += _block("pmon (recorded)", "nvidia-smi pmon -c 1 -s um", pmon)
    path.write_text(text, encoding="utf-8")
    return path


def start(exporter: StartExporter, capture: Path, *args: str) -> str:
    """The exporter on the capture with per-process usage on; returns its first scrape."""
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture, "--state", "load"),
        "--query-field-names=" + ",".join(EXTRA_FIELDS),
        *args,
    )
    return handle.scrape()


def test_exec_serves_each_process_share_of_the_gpu(exporter: StartExporter, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "c.txt", [(GPU0, 100, "python3 train.py", 3000), (GPU0, 200, "infer", 1000)])
    text = start(exporter, capture, "--collect.process-usage")
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "100", "process_name": "python3 train.p"}) == 0.6
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "200", "process_name": "infer"}) == 0.2
    assert sample_value(text, MEMORY, {"uuid": UUID0, "pid": "100", "process_name": "python3 train.p"}) == 3000 * MIB
    assert {sample.labels["uuid"]: sample.value for sample in series(text, OVERFLOW)} == {UUID0: 0.0, UUID1: 0.0}
    assert (sample_value(text, SUCCESS), sample_value(text, OVERFLOWED)) == (1.0, 0.0)


def test_exec_reads_a_recorded_pmon_answer(exporter: StartExporter, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "c.txt", [], pmon=RECORDED_PMON)
    text = start(exporter, capture, "--collect.process-usage")
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "100949", "process_name": "python"}) == 0.45
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "2479", "process_name": "kwalletd6"}) is None
    assert sample_value(text, MEMORY, {"uuid": UUID0, "pid": "2479", "process_name": "kwalletd6"}) == MIB


def test_processes_past_the_cap_are_summed_and_counted(exporter: StartExporter, tmp_path: Path) -> None:
    processes = [(GPU0, pid, f"job{pid}", 1000) for pid in (11, 12, 13, 14, 15)]
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(write_capture(tmp_path / "c.txt", processes), "--state", "load"),
        "--query-field-names=" + ",".join(EXTRA_FIELDS),
        "--collect.process-usage",
        "--collect.process-usage-max-processes=2",
    )
    text = handle.scrape()
    assert sorted(sample.labels["pid"] for sample in series(text, MEMORY)) == ["11", "12", "other"]
    assert sample_value(text, MEMORY, {"uuid": UUID0, "pid": "other", "process_name": ""}) == 3000 * MIB
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "other", "process_name": ""}) == 0.48
    assert sample_value(text, OVERFLOW, {"uuid": UUID0}) == 3.0
    assert sample_value(text, OVERFLOWED) == 3.0
    assert sample_value(handle.scrape(), OVERFLOWED) == 6.0  # every synchronous scrape is a collection


def test_an_ended_process_is_gone_at_the_next_collection(exporter: StartExporter, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "c.txt", [(GPU0, 100, "a", 3000), (GPU0, 200, "b", 1000)])
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture, "--state", "load"),
        "--query-field-names=" + ",".join(EXTRA_FIELDS),
        "--collect.process-usage",
    )
    assert sorted(sample.labels["pid"] for sample in series(handle.scrape(), MEMORY)) == ["100", "200"]
    write_capture(capture, [(GPU0, 100, "a", 3000)])
    text = handle.scrape()
    assert sorted(sample.labels["pid"] for sample in series(text, MEMORY)) == ["100"]
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "100", "process_name": "a"}) == 0.8


def test_a_failed_pmon_serves_only_its_failure_and_the_collection_succeeds(
    exporter: StartExporter, tmp_path: Path
) -> None:
    capture = write_capture(tmp_path / "c.txt", [(GPU0, 100, "a", 3000)])
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture, "--state", "load", "--fail-arg", "pmon"),
        "--query-field-names=" + ",".join(EXTRA_FIELDS),
        "--collect.process-usage",
    )
    text = handle.scrape()
    assert (sample_value(text, SUCCESS), sample_value(text, "nvidia_smi_last_collect_success")) == (0.0, 1.0)
    assert series(text, SM) == series(text, MEMORY) == series(text, OVERFLOW) == []
    assert handle.logged("failed to collect per-process usage")


def test_without_the_flag_nothing_of_it_is_served(exporter: StartExporter, tmp_path: Path) -> None:
    text = start(exporter, write_capture(tmp_path / "c.txt", [(GPU0, 100, "a", 3000)]), "--collect.compute-apps")
    assert [name for name in USAGE_FAMILIES if name.removesuffix("_total") in text] == []


def test_demo_processes_share_their_gpus_utilization(exporter: StartExporter) -> None:
    handle = exporter("--collect.backend=demo", "--collect.process-usage")
    for _ in range(3):
        text = handle.scrape()
        per_gpu: dict[str, float] = {}
        for sample in series(text, SM):
            per_gpu[sample.labels["uuid"]] = per_gpu.get(sample.labels["uuid"], 0.0) + sample.value
        for uuid, total in per_gpu.items():
            gpu = sample_value(text, "nvidia_smi_utilization_gpu_ratio", {"uuid": uuid})
            assert gpu is not None
            assert total == pytest.approx(gpu, abs=0.011 * len(series(text, SM)))
        assert sample_value(text, SUCCESS) == 1.0


def test_streaming_mode_runs_pmon_per_collection(exporter: StartExporter, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "c.txt", [(GPU0, 100, "a", 3000)])
    text = start(exporter, capture, "--collect.process-usage", "--collect.stream-interval=1s")
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "100", "process_name": "a"}) == 0.8


def test_the_dcgm_profile_serves_only_the_exporters_own_counter(exporter: StartExporter) -> None:
    text = exporter("--collect.backend=demo", "--collect.process-usage", "--metrics.profile=dcgm").scrape()
    assert [name for name in USAGE_FAMILIES if name.removesuffix("_total") in text] == [OVERFLOWED]


def test_a_hostile_pmon_answer_neither_fails_the_scrape_nor_grows_the_labels(
    exporter: StartExporter, tmp_path: Path
) -> None:
    header = "".join(RECORDED_PMON.splitlines(keepends=True)[:2])
    name = "x" * 5000
    rows = [
        f"    0        {pid}     C     10      1      -      -      -      -      5      0    {name}\n"
        for pid in (7, 7)
    ]
    rows += [
        f"    0   {pid}     C   37100      1      -      -      -      -      5      0    y\n" for pid in range(9, 40)
    ]
    rows += ["    9          8     C     10      1      -      -      -      -      5      0    z\n", "garbage\n"]
    capture = write_capture(tmp_path / "c.txt", [], pmon=header + "".join(rows))
    text = start(exporter, capture, "--collect.process-usage", "--collect.process-usage-max-processes=4")
    [seven] = [sample for sample in series(text, MEMORY) if sample.labels["pid"] == "7"]
    assert (seven.value, len(seven.labels["process_name"])) == (10 * MIB, 128)  # one series: the two rows summed
    assert len(series(text, MEMORY)) == 5  # four processes and the sum of the other 28
    assert sample_value(text, OVERFLOW, {"uuid": UUID0}) == 28.0
    assert sample_value(text, SM, {"uuid": UUID0, "pid": "other", "process_name": ""}) is None  # 37100 is no value


def test_an_openmetrics_scrape_parses_with_the_usage_families(exporter: StartExporter) -> None:
    handle = exporter(
        "--collect.backend=demo",
        "--collect.process-usage",
        "--collect.process-usage-max-processes=0",
        "--web.enable-openmetrics",
    )
    response = handle.get(headers={"Accept": "application/openmetrics-text;version=1.0.0"})
    families = {family.name: family for family in parse_openmetrics(response.text)}
    assert families[OVERFLOWED.removesuffix("_total")].type == "counter"
    assert {sample.labels["pid"] for sample in families[MEMORY].samples} == {"other"}
