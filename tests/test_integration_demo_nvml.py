"""The demo's NVML-only families through the real exporter process (docs/demo.md): what a zero-config demo
serves, the windowed MIG activity, energy without a served power column, MIG labels on processes, and the
live config re-read (a broken edit fails one collection while the XID families stay)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import checked, label_values, sample_value, samples, series, values_of
from harness import run_exporter_to_exit, start_exporter
from polling import wait_until

DEMO = "--collect.backend=demo"


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def zero_config_scrapes() -> tuple[str, str]:
    """Two consecutive scrapes of one zero-config demo exporter with per-process metrics."""
    handle = start_exporter([DEMO, "--collect.compute-apps"])
    try:
        first = checked(handle.scrape())
        second = checked(handle.scrape())
    finally:
        handle.stop()
    return first, second


@pytest.mark.parametrize(
    "series",
    [
        pytest.param("nvidia_smi_gpu_info{", id="gpu-info"),
        pytest.param("nvidia_smi_compute_app_info{", id="compute-app-info"),
        pytest.param("nvidia_smi_energy_joules_total{", id="energy"),
        pytest.param("nvidia_smi_pcie_throughput_tx_bytes_per_second{", id="pcie-tx"),
        pytest.param("nvidia_smi_pcie_throughput_rx_bytes_per_second{", id="pcie-rx"),
        pytest.param("nvidia_smi_mig_info{", id="mig-info"),
        pytest.param("nvidia_smi_mig_memory_used_bytes{", id="mig-memory-used"),
        pytest.param("nvidia_smi_nvml_return_code 0\n", id="nvml-return-code"),
    ],
)
def test_zero_config_demo_serves(zero_config_scrapes: tuple[str, str], series: str) -> None:
    first, _ = zero_config_scrapes
    assert series in first


@pytest.mark.parametrize(
    ("scrape_index", "present"),
    [pytest.param(0, False, id="first-scrape-absent"), pytest.param(1, True, id="second-scrape-present")],
)
def test_mig_activity_needs_two_collections(
    zero_config_scrapes: tuple[str, str], scrape_index: int, present: bool
) -> None:
    scrape = zero_config_scrapes[scrape_index]
    assert ("nvidia_smi_mig_sm_activity_ratio{" in scrape) is present
    assert "nvidia_smi_mig_memory_used_bytes{" in scrape


def test_mig_gpu_reports_mig_mode_enabled(zero_config_scrapes: tuple[str, str]) -> None:
    first, _ = zero_config_scrapes
    (parent,) = set(label_values(first, "nvidia_smi_mig_info", "uuid"))
    assert sample_value(first, "nvidia_smi_mig_mode_current", {"uuid": parent}) == 1
    others = set(label_values(first, "nvidia_smi_gpu_info", "uuid")) - {parent}
    assert others
    assert all(sample_value(first, "nvidia_smi_mig_mode_current", {"uuid": uuid}) == 0 for uuid in others)


def test_energy_counts_from_zero_and_grows(zero_config_scrapes: tuple[str, str]) -> None:
    first, second = zero_config_scrapes
    assert values_of(first, "nvidia_smi_energy_joules_total") == [0.0, 0.0]
    assert all(value > 0 for value in values_of(second, "nvidia_smi_energy_joules_total"))


def test_the_zero_config_demo_has_no_xid(zero_config_scrapes: tuple[str, str]) -> None:
    """A healthy machine by default: XIDs are a scenario (docs/demo.md, "Faults on request")."""
    for scrape in zero_config_scrapes:
        assert "nvidia_smi_xid_errors_total{" not in scrape
        assert "nvidia_smi_xid_last_timestamp_seconds{" not in scrape


def test_the_xid_79_scenario_serves_its_initial_xids(exporter: StartExporter, tmp_path: Path) -> None:
    config = write_config(tmp_path, "extras:\n  scenarios: [xid-79]\n")
    first = checked(exporter(DEMO, f"--demo-config={config}").scrape())
    (line,) = samples(first, "nvidia_smi_xid_errors_total")
    assert line.endswith('xid="79"} 2')
    (stamp,) = samples(first, "nvidia_smi_xid_last_timestamp_seconds")
    assert 'xid="79"' in stamp
    (second,) = (info.labels["uuid"] for info in series(first, "nvidia_smi_gpu_info") if info.labels["index"] == "1")
    assert f'uuid="{second}"' in line  # on the second GPU


def test_energy_without_a_served_power_column(exporter: StartExporter) -> None:
    handle = exporter(DEMO, "--query-field-names=uuid,name")
    checked(handle.scrape())
    second = checked(handle.scrape())
    assert "nvidia_smi_power_draw_watts" not in second
    energy = values_of(second, "nvidia_smi_energy_joules_total")
    assert len(energy) == 2
    assert all(value > 0 for value in energy)


def test_compute_apps_mig_labels_processes_on_the_mig_gpu(exporter: StartExporter) -> None:
    handle = exporter(DEMO, "--collect.compute-apps", "--collect.compute-apps-mig")
    scrape = checked(handle.scrape())
    (parent,) = set(label_values(scrape, "nvidia_smi_mig_info", "uuid"))
    lines = samples(scrape, "nvidia_smi_compute_app_info")
    on_mig = [line for line in lines if f'uuid="{parent}"' in line]
    elsewhere = [line for line in lines if f'uuid="{parent}"' not in line]
    assert on_mig
    assert elsewhere
    assert all(re.search(r'gpu_instance_id="[0-9]+"', line) for line in on_mig)
    assert all('compute_instance_id="",gpu_instance_id=""' in line for line in elsewhere)


def test_pcie_throughput_flag_is_accepted_as_a_no_op(exporter: StartExporter) -> None:
    handle = exporter(DEMO, "--collect.pcie-throughput")
    assert "nvidia_smi_pcie_throughput_rx_bytes_per_second{" in checked(handle.scrape())


def test_invalid_mig_extras_fail_startup(tmp_path: Path) -> None:
    path = write_config(tmp_path, "extras:\n  mig: [{gpu: 0}]\n")
    code, log = run_exporter_to_exit([DEMO, f"--demo-config={path}"])
    assert code == 1, log
    assert "failed to set up the demo backend" in log
    assert "extras.mig[0].instances" in log


def test_broken_config_edit_fails_one_collection_and_keeps_xids(exporter: StartExporter, tmp_path: Path) -> None:
    good = "extras:\n  seed: 3\n  xids:\n    initial: [{gpu: 0, xid: 48, count: 1}]\n"
    path = write_config(tmp_path, good)
    handle = exporter(DEMO, f"--demo-config={path}")
    assert sample_value(checked(handle.scrape()), "nvidia_smi_last_collect_success") == 1
    path.write_text(good + "  bogus: 1\n", encoding="utf-8")
    failed = checked(handle.scrape())
    assert sample_value(failed, "nvidia_smi_last_collect_success") == 0
    assert sample_value(failed, "nvidia_smi_nvml_return_code") == -1
    assert "nvidia_smi_gpu_info{" not in failed
    assert "nvidia_smi_energy_joules_total" not in failed
    assert samples(failed, "nvidia_smi_xid_errors_total")[0].endswith('xid="48"} 1')
    # The exporter logs before it answers, but the harness reads its stderr on a thread of its own.
    wait_until(lambda: "failed to collect metrics" in handle.log, "the failed collection to be logged")
    assert sum("failed to collect metrics" in line for line in handle.stderr_lines) == 1
    path.write_text(good, encoding="utf-8")
    recovered = checked(handle.scrape())
    assert sample_value(recovered, "nvidia_smi_last_collect_success") == 1
    assert all(value > 0 for value in values_of(recovered, "nvidia_smi_energy_joules_total"))
