"""The fake nvidia-smi's ``pmon``: written from a scenario's processes in the layout real drivers (535 on) print,
read back by the exec backend's parser; a recorded pmon section is replayed instead."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness import MIG_FIXTURE
from nvidia_gpu_exporter.backends.exec.pmon import PMON_ARGS, parse_pmon
from nvidia_gpu_exporter.capture.engine import Scenario, answer
from nvidia_gpu_exporter.capture.format import Capture, Section, load_capture
from nvidia_gpu_exporter.model.snapshot import ProcessUsageRow

GPU0 = "GPU-11111111-2222-4333-8444-555555555555"
GPU1 = "GPU-66666666-7777-4888-9999-000000000000"
GPU_COMMAND = "nvidia-smi --query-gpu=index,uuid,utilization.gpu,utilization.memory,mig.mode.current --format=csv"
APPS_COMMAND = "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory --format=csv"
# The two header lines of a real -s um answer (driver 535 on), trailing space included.
REAL_HEADER = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name \n"
)


def scenario(processes: str, gpu0: str = "45 %, 12 %, Disabled", **settings: object) -> Scenario:
    gpus = f"index, uuid, utilization.gpu [%], utilization.memory [%], mig.mode.current\n0, {GPU0}, {gpu0}\n"
    gpus += f"1, {GPU1}, 0 %, 0 %, Disabled"
    apps = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n" + processes
    capture = Capture(
        "test",
        "",
        (
            Section("load", "query-gpu (csv, test)", GPU_COMMAND, gpus),
            Section("load", "query-compute-apps", APPS_COMMAND, apps),
        ),
    )
    return Scenario(capture, state="load", **settings)  # type: ignore[arg-type]


def test_rows_are_laid_out_as_real_drivers_print_them() -> None:
    result = answer(scenario(f"{GPU0}, 100949, python, 624 MiB"), PMON_ARGS)
    assert result.exit_code == 0
    assert result.stdout == REAL_HEADER + (
        "    0     100949     C     45     12      -      -      -      -    624      0    python         \n"
        "    1          -     -      -      -      -      -      -      -      -      -    -              \n"
    )


def test_a_gpus_utilization_is_split_by_memory_and_read_back_by_the_exec_parser() -> None:
    result = answer(
        scenario(f"{GPU0}, 1, big job, 3000 MiB\n{GPU0}, 2, small, 1000 MiB", "80 %, 40 %, Disabled"), PMON_ARGS
    )
    rows = parse_pmon(result.stdout, {"0": GPU0, "1": GPU1})
    assert rows == (
        ProcessUsageRow(GPU0, "1", "big job", 60.0, 30.0, None, None, 3000 * 1_048_576.0),
        ProcessUsageRow(GPU0, "2", "small", 20.0, 10.0, None, None, 1000 * 1_048_576.0),
    )


@pytest.mark.parametrize(
    ("args", "header_start"),
    [
        (("pmon",), "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n"),
        (("pmon", "-s", "mu"), "# gpu         pid   type     fb   ccpm     sm    mem"),
        (("pmon", "--select", "m"), "# gpu         pid   type     fb   ccpm    command \n"),
    ],
    ids=["default-u", "mu-order", "m-only"],
)
def test_select_letters_order_the_column_groups(args: tuple[str, ...], header_start: str) -> None:
    assert answer(scenario(f"{GPU0}, 7, a, 5 MiB"), args).stdout.startswith(header_start)


def test_count_repeats_the_cycle_under_one_header() -> None:
    lines = answer(scenario(f"{GPU0}, 7, a, 5 MiB"), ("pmon", "-c", "3", "-d", "1")).stdout.splitlines()
    assert [line.split()[1] for line in lines[2:]] == ["7", "-"] * 3
    assert sum(line.startswith("#") for line in lines) == 2


def test_a_gpu_in_mig_mode_prints_no_utilization() -> None:
    result = answer(scenario(f"{GPU0}, 7, a, 5 MiB", "45 %, 12 %, Enabled"), PMON_ARGS)
    [row] = parse_pmon(result.stdout, {"0": GPU0, "1": GPU1})
    assert (row.sm_percent, row.memory_percent, row.used_memory_bytes) == (None, None, 5 * 1_048_576.0)


def test_unknown_memory_prints_a_dash() -> None:
    result = answer(scenario(f"{GPU0}, 7, a, [N/A]"), PMON_ARGS)
    [row] = parse_pmon(result.stdout, {"0": GPU0, "1": GPU1})
    assert (row.sm_percent, row.used_memory_bytes) == (45.0, None)


@pytest.mark.parametrize("args", [("pmon", "-x"), ("pmon", "-s", "z"), ("pmon", "-c", "0"), ("pmon", "-c")])
def test_an_unknown_option_is_refused_as_nvidia_smi_does(args: tuple[str, ...]) -> None:
    result = answer(scenario(""), args)
    assert (result.exit_code, result.stdout.splitlines()[0].startswith("Option ")) == (1, True)


def test_replicated_gpus_each_list_the_recorded_processes() -> None:
    gpus = f"index, uuid, utilization.gpu [%]\n0, {GPU0}, 90 %"
    apps = f"gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n{GPU0}, 7, a, 5 MiB"
    capture = Capture(
        "one",
        "",
        (
            Section("load", "query-gpu (csv", "nvidia-smi --query-gpu=index,uuid,utilization.gpu --format=csv", gpus),
            Section("load", "query-compute-apps", APPS_COMMAND, apps),
        ),
    )
    stdout = answer(Scenario(capture, state="load", gpus=3), PMON_ARGS).stdout
    assert [line.split()[:4] for line in stdout.splitlines()[2:]] == [[str(i), "7", "C", "90"] for i in range(3)]


def test_a_recorded_pmon_section_is_replayed_verbatim() -> None:
    recorded = (
        "# gpu        pid  type    sm   mem   enc   dec    fb   command\n"
        "    0       5913     C    72    68     0     0  3225   python"
    )
    capture = scenario("").capture
    capture = Capture("rec", "", (*capture.sections, Section("load", "pmon", "nvidia-smi pmon -c 1 -s um", recorded)))
    assert answer(Scenario(capture, state="load"), PMON_ARGS).stdout == recorded + "\n"


def test_the_fake_command_answers_pmon_from_the_fixture_capture() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvidia_gpu_exporter.fakesmi",
            "--capture",
            str(MIG_FIXTURE),
            "--state",
            "load",
            *PMON_ARGS,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    section = load_capture(MIG_FIXTURE).find("load", "query-compute-apps")
    assert section is not None
    pids = [line.split(",")[1].strip() for line in section.body.splitlines()[1:]]
    assert [line.split()[1] for line in completed.stdout.splitlines()[2:] if line.split()[1] != "-"] == pids


def test_the_mig_fixtures_processes_have_no_utilization() -> None:
    """The fixture capture's GPU 0 is in MIG mode (and its memory reads [N/A]): name and pid only."""
    stdout = answer(Scenario(load_capture(MIG_FIXTURE), state="load"), PMON_ARGS).stdout
    rows = parse_pmon(stdout, {"0": "GPU-0", "1": "GPU-1"})
    assert rows
    assert {(row.gpu_uuid, row.sm_percent, row.memory_percent, row.used_memory_bytes) for row in rows} == {
        ("GPU-0", None, None, None)
    }
