"""--metrics.profile through the real exporter and the fake nvidia-smi (docs/dcgm.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StartExporter, conformance_dir_or_skip
from exposition_reader import checked, comparable, family_of, names_in
from harness import FIXTURES, MIG_FIXTURE, assert_golden, fake_smi_command, run_exporter_to_exit
from nvml_fixtures import FakeNvmlLibrary
from test_unit_dcgm import shared_counters

SMI = ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE))
GPU0_LABELS = (
    'gpu="0",UUID="GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA A100-SXM4-80GB",hostname="node-a",DCGM_FI_DRIVER_VERSION="550.54.15"'
)
# Generation 4.8's names, for the tests about them; without the flag the newest generation's are served.
V4_8 = "--dcgm.compatibility=4.8"
NEWEST_GPU0_TEMP = (
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS{"
    + GPU0_LABELS.replace("DCGM_FI_DRIVER_VERSION=", "DCGM_FI_SYSTEM_DRIVER_VERSION=")
    + "} 31\n"
)


def test_dcgm_profile_serves_gpu_temp_with_dcgm_labels_and_no_nvidia_smi_families(exporter: StartExporter) -> None:
    text = exporter(*SMI, "--metrics.profile=dcgm", env={"NODE_NAME": "node-a"}).scrape()
    assert NEWEST_GPU0_TEMP in text
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP_CELSIUS gauge\n" in text
    checked(text)  # a valid exposition for Prometheus' own parser
    names = names_in(text)
    assert not any(name.startswith("nvidia_smi_") for name in names)
    assert "nvidia_gpu_exporter_build_info" in names
    assert "promhttp_metric_handler_requests_total" in names


def test_nvidia_smi_profile_is_the_default_output(exporter: StartExporter) -> None:
    default = exporter(*SMI).scrape()
    explicit = exporter(*SMI, "--metrics.profile=nvidia_smi").scrape()
    both = exporter(*SMI, "--metrics.profile=both", env={"NODE_NAME": "node-a"}).scrape()
    assert "DCGM_" not in default
    assert "DCGM_" not in explicit
    assert comparable(explicit) == comparable(default)
    assert comparable(both) == comparable(default)
    assert NEWEST_GPU0_TEMP in both


def test_demo_families_under_the_dcgm_profile_match_the_counters_file(exporter: StartExporter) -> None:
    """The demo simulates far more fields than the fixtures: every DCGM family it gets must be dcgm-exporter's."""
    counters = shared_counters()
    text = checked(exporter("--collect.backend=demo", "--metrics.profile=dcgm", V4_8).scrape())
    lines = text.splitlines()
    served = {line.split(" ")[2]: line.split(" ", 3)[3] for line in lines if line.startswith("# HELP DCGM_")}
    types = {line.split(" ")[2]: line.split(" ")[3] for line in lines if line.startswith("# TYPE DCGM_")}
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in served  # NVML's counter, which the demo simulates
    assert len(served) >= 15
    for name, help_text in served.items():
        assert counters[name] == (types[name], help_text), name


# -- dcgm-exporter's counters file (-f / --dcgm.collectors) ------------------------------------------------------

COUNTERS = (
    "# the fields an operator's dashboard needs\n"
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\n"
    "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
)


def test_a_counters_file_selects_the_families_and_warns_once(exporter: StartExporter, tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(COUNTERS, encoding="utf-8")
    handle = exporter(*SMI, "--metrics.profile=dcgm", "-f", str(counters), env={"NODE_NAME": "node-a"})
    first, second = handle.scrape(), handle.scrape()
    assert {name for name in names_in(first) if name.startswith("DCGM_")} == {"DCGM_FI_DEV_GPU_TEMP"}
    assert f"DCGM_FI_DEV_GPU_TEMP{{{GPU0_LABELS}}} 31\n" in second
    warnings = [line for line in handle.log.splitlines() if "not serving DCGM fields" in line]
    assert len(warnings) == 1
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (line 3: needs the nvml backend: NVML GPM)" in warnings[0]  # exec
    assert f"file={counters}" in warnings[0]


@pytest.mark.parametrize(
    ("source", "warned", "name"),
    [("off", 1, "DCGM_FI_DEV_XID_ERRORS"), ("kmsg", 0, "DCGM_FI_DEV_XID_ERRORS"), ("off", 1, "DCGM_FI_DEV_XID_ERROR")],
)
def test_xid_errors_asked_for_with_the_xid_source_off_is_said_once(
    exporter: StartExporter, tmp_path: Path, source: str, warned: int, name: str
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{name}, gauge, x\n", encoding="utf-8")
    quiet_log = tmp_path / "kmsg"
    quiet_log.write_text("")
    handle = exporter(
        *SMI,
        "--metrics.profile=dcgm",
        f"--dcgm.collectors={counters}",
        f"--collect.xid-source={source}",
        f"--collect.kernel-log={quiet_log}",
    )
    handle.scrape()
    handle.scrape()
    warnings = [line for line in handle.log.splitlines() if f"{name} is never served" in line]
    assert len(warnings) == warned


def test_a_bad_counters_file_stops_the_exporter_naming_file_and_line(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_SM_CLOCK, gaug, s\n", encoding="utf-8")
    code, log = run_exporter_to_exit([*SMI, "--metrics.profile=dcgm", f"--dcgm.collectors={counters}"])
    assert code == 1
    assert f"{counters}:2: unknown Prometheus type 'gaug'" in log


# -- golden output of the real captures ----------------------------------------------------------------------

GOLDEN = FIXTURES / "dcgm"
# The MIG capture (an H200 split into five MIG devices) and the Windows one (a GeForce under WDDM).
GOLDEN_CAPTURES = (
    "linux-x86_64__nvidia-h200-mig__590.48.01",
    "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86",
)


def dcgm_part(scrape: str) -> str:
    """The ``DCGM_FI_*`` families of a scrape, verbatim: the block the profile serves before all else."""
    return "".join(line for line in scrape.splitlines(keepends=True) if family_of(line).startswith("DCGM_"))


@pytest.mark.parametrize("state", ["idle", "load"])
@pytest.mark.parametrize("capture", GOLDEN_CAPTURES)
def test_golden_dcgm_output_of_the_real_mig_and_windows_captures(
    exporter: StartExporter, capture: str, state: str
) -> None:
    """Byte for byte what ``--metrics.profile=dcgm`` serves for a real capture (XIDs off: no host kernel log)."""
    capture_file = conformance_dir_or_skip() / "captures" / f"{capture}.txt"
    handle = exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture_file, "--state", state),
        "--metrics.profile=dcgm",
        V4_8,  # the goldens are 4.8's, reviewed against its default file
        "--collect.xid-source=off",
        env={"NODE_NAME": "gpu-node-1"},
    )
    scrape = handle.scrape()
    assert dcgm_part(scrape) in scrape  # the DCGM block is served in one piece
    assert dcgm_part(scrape).encode("utf-8") == (GOLDEN / f"{capture}__{state}.prom").read_bytes()


# -- dcgm-exporter's /health -----------------------------------------------------------------------------------


def test_health_answers_as_dcgm_exporter_does_under_the_dcgm_profiles(exporter: StartExporter) -> None:
    for profile in ("dcgm", "both"):
        response = exporter(*SMI, f"--metrics.profile={profile}").get("/health")
        assert (response.status, response.body) == (200, b"OK")
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"


def test_health_is_not_served_under_the_go_exporters_profile(exporter: StartExporter) -> None:
    handle = exporter(*SMI, "--web.telemetry-path=/health")  # the Go exporter lets metrics live there
    assert handle.get("/health").status == 200
    assert "nvidia_smi_gpu_info" in handle.scrape("/health")
    assert exporter(*SMI).get("/health").status == 404


def test_the_metrics_path_cannot_take_health_under_the_dcgm_profile() -> None:
    code, log = run_exporter_to_exit([*SMI, "--metrics.profile=dcgm", "--web.telemetry-path=/health"])
    assert code == 1
    assert "web.telemetry-path must not be /health with --metrics.profile=dcgm or both" in log


# -- MIG ----------------------------------------------------------------------------------------------------------

DEMO_MIG = """\
gpus: 2
extras:
  seed: 42
  mig:
    - gpu: 0
      instances:
        - {gi: 1, profile: 4g.71gb, cis: 2}
        - {gi: 5, profile: 2g.35gb}
"""


def test_a_mig_gpu_is_served_per_gpu_instance(exporter: StartExporter, tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text(DEMO_MIG, encoding="utf-8")
    text = checked(
        exporter("--collect.backend=demo", f"--demo-config={config}", "--metrics.profile=dcgm", V4_8).scrape()
    )
    temperatures = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temperatures) == 3  # GPU 0's two GPU instances, then GPU 1 whole
    assert (
        'device="nvidia0",modelName="NVIDIA H200",GPU_I_PROFILE="4g.71gb",GPU_I_ID="1",hostname=' in (temperatures[0])
    )
    assert ',GPU_I_PROFILE="2g.35gb",GPU_I_ID="5",hostname=' in temperatures[1]
    assert 'gpu="1",' in temperatures[2]
    assert "GPU_I_ID" not in temperatures[2]
    assert not [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and "GPU_I_ID" in line]


# -- --dcgm.compatibility ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "expected"),
    [
        ("3", "DCGM_FI_DEV_GPU_TEMP{" + GPU0_LABELS.replace("hostname=", "Hostname=") + "} 31\n"),
        ("4.8", "DCGM_FI_DEV_GPU_TEMP{" + GPU0_LABELS + "} 31\n"),
        ("4.10", NEWEST_GPU0_TEMP),
    ],
)
def test_the_generation_flag_renames_labels_and_fields_in_the_served_output(
    exporter: StartExporter, generation: str, expected: str
) -> None:
    text = checked(
        exporter(
            *SMI, "--metrics.profile=dcgm", f"--dcgm.compatibility={generation}", env={"NODE_NAME": "node-a"}
        ).scrape()
    )
    assert expected in text


@pytest.mark.parametrize("generation", ["3", "4.5", "4.8", "4.9", "4.10"])
def test_golden_dcgm_output_of_the_fake_nvml_mig_machine_per_generation(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, generation: str
) -> None:
    """The nvml backend on the fake library's two H200s (GPU 0 in MIG mode), the second collection (a GPM window)."""
    handle = exporter(
        "--collect.backend=nvml",
        "--metrics.profile=dcgm",
        f"--dcgm.compatibility={generation}",
        "--collect.xid-source=off",
        env={**fake_nvml_library.env("mig"), "NODE_NAME": "gpu-node-1"},
    )
    handle.scrape()
    assert_golden(GOLDEN / f"fake-nvml-mig__{generation}.prom", dcgm_part(checked(handle.scrape())))
