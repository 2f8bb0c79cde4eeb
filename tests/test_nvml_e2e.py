"""``--collect.backend=nvml`` end to end: the real exporter process loading the fake libnvidia-ml.so.1.

The exporter child finds the fake through ``LD_LIBRARY_PATH`` (the bindings dlopen the soname), picks its
scenario from ``FAKE_NVML_SCENARIO`` and takes run-time commands from the ``FAKE_NVML_CONTROL`` file.
"""

from __future__ import annotations

import ctypes.util
import time
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import label_values, names_in, sample_value, samples
from harness import StartupFailed
from nvml_fixtures import ControlFile, FakeNvmlLibrary
from polling import wait_until

NVML = "--collect.backend=nvml"
PATIENCE_SECONDS = 30.0  # bounds a wait so a broken exporter fails instead of hanging; never asserted


def test_serves_the_query_field_families_and_the_nvml_status(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    handle = exporter(NVML, "--collect.compute-apps", env=fake_nvml_library.env("h200"))
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_nvml_return_code") == 0
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
    assert "nvidia_smi_command_exit_code" not in scrape
    [info] = samples(scrape, "nvidia_smi_gpu_info")
    assert 'cuda_version="13.1"' in info
    assert 'name="NVIDIA H200"' in info
    assert 'serial="1650124000001"' in info
    [uuid] = label_values(scrape, "nvidia_smi_gpu_info", "uuid")
    assert sample_value(scrape, "nvidia_smi_power_draw_watts", {"uuid": uuid}) == 77.71
    assert sample_value(scrape, "nvidia_smi_memory_total_bytes", {"uuid": uuid}) == 143771 * 1048576
    assert sample_value(scrape, "nvidia_smi_energy_joules_total", {"uuid": uuid}) == 123456.789
    assert samples(scrape, "nvidia_smi_compute_app_info") == [
        f'nvidia_smi_compute_app_info{{pid="4242",process_name="python3 train.py",uuid="{uuid}"}} 1'
    ]
    assert "nvidia_smi_pcie_throughput_tx_bytes_per_second" not in scrape
    assert "nvidia_smi_kmd_version" not in scrape


def test_pcie_throughput_is_opt_in(exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary) -> None:
    scrape = exporter(NVML, "--collect.pcie-throughput", env=fake_nvml_library.env("h200")).scrape()
    [tx] = samples(scrape, "nvidia_smi_pcie_throughput_tx_bytes_per_second")
    assert tx.endswith(" 1.234e+06")


def test_zero_devices_is_a_failed_collection(exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary) -> None:
    handle = exporter(NVML, env=fake_nvml_library.env("zero"))
    scrape = handle.scrape()
    assert sample_value(scrape, "nvidia_smi_nvml_return_code") == -1
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 0
    assert sample_value(scrape, "nvidia_smi_failed_scrapes_total") == 1
    assert "nvidia_smi_gpu_info" not in scrape
    assert handle.get("/-/healthy").status == 200


def test_a_gpu_lost_mid_run_fails_collections_until_it_recovers(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    handle = exporter(NVML, env=fake_nvml_library.env("lost"))  # GPU 1 is lost in cycles 2 and 3
    first, second, third, fourth = (handle.scrape() for _ in range(4))
    assert len(samples(first, "nvidia_smi_gpu_info")) == 2
    for failed in (second, third):
        assert sample_value(failed, "nvidia_smi_nvml_return_code") == 15
        assert "nvidia_smi_gpu_info" not in failed
    assert len(samples(fourth, "nvidia_smi_gpu_info")) == 2
    assert sample_value(fourth, "nvidia_smi_failed_scrapes_total") == 2
    assert handle.logged("NVML re-initialized")


def test_shutdown_on_error_exits_1_on_a_lifecycle_error(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    handle = exporter(NVML, "--shutdown-on-error", env=fake_nvml_library.env("lost"))
    handle.scrape()
    response = handle.get()
    assert response.status == 200
    assert handle.process.wait(PATIENCE_SECONDS) == 1


def test_xids_are_counted_and_served_even_while_collections_fail(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, tmp_path: Path
) -> None:
    control = ControlFile(tmp_path / "control")
    # NVML events are the source being tested; the machine's own kernel log would otherwise win (auto).
    handle = exporter(NVML, "--collect.xid-source=nvml", env=fake_nvml_library.env("h200", control=control.path))
    uuid = label_values(handle.scrape(), "nvidia_smi_gpu_info", "uuid")[0]
    control.send("xid 0 79", "xid 0 79", "count 0")
    xid_79 = {"uuid": uuid, "xid": "79"}
    scrape = wait_until(
        handle.scrape,
        "two XID 79 events",
        until=lambda text: sample_value(text, "nvidia_smi_xid_errors_total", xid_79) == 2,
    )
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 0
    assert f'nvidia_smi_xid_last_timestamp_seconds{{uuid="{uuid}",xid="79"}}' in scrape
    assert handle.logged("level=warn")
    assert handle.logged('msg="XID error"')


def test_mig_families_and_activity_from_the_second_collection(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    handle = exporter(NVML, "--collect.compute-apps", "--collect.compute-apps-mig", env=fake_nvml_library.env("mig"))
    first = handle.scrape()
    assert len(samples(first, "nvidia_smi_mig_info")) == 3
    assert len(samples(first, "nvidia_smi_mig_memory_used_bytes")) == 2
    assert "nvidia_smi_mig_sm_activity_ratio" not in first
    assert 'gpu_instance_id="2",pid="1001"' in first
    time.sleep(1.1)  # GPM windows under a second repeat the previous (here: no) values
    second = handle.scrape()
    assert sorted(samples(second, "nvidia_smi_mig_sm_activity_ratio"))[0].endswith(" 0.4025")
    assert sorted(line.rsplit(" ", 1)[1] for line in samples(second, "nvidia_smi_mig_mode_current")) == ["0", "1"]


def test_legacy_driver_serves_the_throttle_reason_spelling(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    scrape = exporter(NVML, env=fake_nvml_library.env("legacy")).scrape()
    names = names_in(scrape)
    assert "nvidia_smi_clocks_throttle_reasons_gpu_idle" in names
    assert "nvidia_smi_clocks_event_reasons_gpu_idle" not in names


def test_unsupported_and_forbidden_fields_are_absent(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    scrape = exporter(NVML, env=fake_nvml_library.env("noperm")).scrape()
    names = names_in(scrape)
    assert "nvidia_smi_ecc_mode_current" not in names
    assert "nvidia_smi_inforom_oem" not in names
    assert "nvidia_smi_energy_joules_total" not in names
    assert "nvidia_smi_temperature_gpu" in names
    scrape = exporter(NVML, env=fake_nvml_library.env("unsupported")).scrape()
    names = names_in(scrape)
    assert "nvidia_smi_power_draw_watts" not in names
    assert "nvidia_smi_c2c_mode" not in names
    assert "nvidia_smi_memory_reserved_bytes" not in names  # no v2 memory call: the v1 fallback has none
    assert "nvidia_smi_memory_total_bytes" in names
    assert "nvidia_smi_temperature_gpu" in names


@pytest.mark.parametrize(
    ("scenario", "flags", "message"),
    [
        pytest.param(
            "h200",
            ("--query-field-names=temperature.gpu,kmd_version",),
            'failed to set up the nvml backend: query field \\"kmd_version\\" is not supported by this backend',
            id="unsupported-explicit-field",
        ),
        pytest.param(
            "h200",
            ("--nvidia-smi-command=/usr/bin/nvidia-smi",),
            "--nvidia-smi-command cannot be combined with --collect.backend=nvml",
            id="custom-command",
        ),
    ],
)
def test_startup_errors(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, scenario: str, flags: tuple[str, ...], message: str
) -> None:
    with pytest.raises(StartupFailed) as failed:
        exporter(NVML, *flags, env=fake_nvml_library.env(scenario))
    assert failed.value.returncode == 1
    assert message in failed.value.log


def test_startup_refuses_a_library_without_nvmlDeviceGetUUID(
    exporter: StartExporter, fake_nvml_library_without_uuid: FakeNvmlLibrary
) -> None:
    with pytest.raises(StartupFailed) as failed:
        exporter(NVML, env=fake_nvml_library_without_uuid.env("h200"))
    assert failed.value.returncode == 1
    assert "failed to set up the nvml backend: the NVML library does not export nvmlDeviceGetUUID" in failed.value.log


def test_startup_without_any_library(exporter: StartExporter, tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed here")
    with pytest.raises(StartupFailed) as failed:
        exporter(NVML, env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert "failed to set up the nvml backend: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in failed.value.log


def test_dcgm_profile_serves_each_gpu_instance_of_a_mig_gpu(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary
) -> None:
    """The fake's MIG GPU through the real NVML backend: one series per GPU instance, its own framebuffer."""
    scrape = exporter(
        NVML, "--metrics.profile=dcgm", "--dcgm.compatibility=4.8", env=fake_nvml_library.env("mig")
    ).scrape()
    used = samples(scrape, "DCGM_FI_DEV_FB_USED")
    instances = [line for line in used if "GPU_I_ID=" in line]
    # GPU instance 2 holds two compute instances (1c.3g.71gb): one entity, the GPU instance's profile.
    assert [line.split('modelName="NVIDIA H200",', 1)[1].split(",hostname=")[0] for line in instances] == [
        'GPU_I_PROFILE="3g.71gb",GPU_I_ID="2"',
        'GPU_I_PROFILE="1g.18gb",GPU_I_ID="7"',
    ]
    assert [line.rsplit(" ", 1)[1] for line in instances] == ["10240", "0"]  # MiB of each GPU instance
    assert not [line for line in samples(scrape, "DCGM_FI_DEV_GPU_UTIL") if "GPU_I_ID=" in line]
    temperatures = samples(scrape, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temperatures) == len(used)  # a device field on every GPU instance and whole GPU alike


def test_dcgm_profile_serves_gpm_activity_as_ratios_from_the_second_collection(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, tmp_path: Path
) -> None:
    """The whole GPU's NVML GPM percentages (fake: 45.5, 12.5, 30) as DCGM's 0-1 ratios, once a window exists."""
    control = ControlFile(tmp_path / "control")
    control.send("gpmdev 0 45.5 12.5 30")  # read at nvmlInit
    handle = exporter(
        NVML,
        "--metrics.profile=dcgm",
        "--dcgm.compatibility=4.8",
        env=fake_nvml_library.env("h200", control=control.path),
    )
    first = handle.scrape()
    assert "DCGM_FI_DEV_GPU_TEMP{" in first
    assert "DCGM_FI_PROF_" not in first  # one sample is no window
    time.sleep(1.1)  # GPM windows under a second repeat the previous (here: no) values
    second = handle.scrape()
    for name, value in (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0.455"),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0.125"),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "0.3"),
    ):
        [line] = samples(second, name)
        assert line.startswith(name + '{gpu="0",UUID="GPU-')
        assert line.endswith(f" {value}")


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param(
            "h200",
            {
                "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "3",
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "0",  # DCGM serves 0 on the first reading: no window yet
                "DCGM_FI_PROF_PCIE_TX_BYTES": "1234000",  # 1234 KB/s
                "DCGM_FI_PROF_PCIE_RX_BYTES": "5678000",
            },
            id="h200-serves-replays-nvlink-and-pcie-rates",
        ),
        pytest.param(
            "rtx",
            {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "0"},
            id="rtx-replays-but-no-nvlink-and-no-rates-without-the-flag",
        ),
        pytest.param("unsupported", {}, id="unsupported-getters-give-no-series"),
    ],
)
def test_dcgm_profile_serves_nvml_pcie_and_nvlink_readings(
    exporter: StartExporter, fake_nvml_library: FakeNvmlLibrary, scenario: str, expected: dict[str, str]
) -> None:
    pcie = ("--collect.pcie-throughput",) if scenario == "h200" else ()
    scrape = exporter(
        NVML, "--metrics.profile=dcgm", "--dcgm.compatibility=4.8", *pcie, env=fake_nvml_library.env(scenario)
    ).scrape()
    served = {}
    for name in (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ):
        for line in samples(scrape, name):
            assert line.startswith(name + '{gpu="0",UUID="GPU-')
            served[name] = line.rsplit(" ", 1)[1]
    assert served == expected
