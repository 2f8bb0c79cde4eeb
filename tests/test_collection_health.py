"""The collection's health under one name whatever --metrics.profile (docs/metrics.md, "Collection health"):
``nvidia_gpu_exporter_collection_*`` beside the Go exporter's ``nvidia_smi_*`` ones, which stay as they were."""

from __future__ import annotations

import pytest

from conftest import StartExporter
from exposition_reader import checked, comparable, family_block, names_in, sample_value
from harness import MIG_FIXTURE, fake_smi_command
from nvidia_gpu_exporter.exposition.families import COLLECTION

SMI = ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE))
FAILING = ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE, "--fail-arg", "--query-gpu=", "--stderr-msg", "gone"))
NAMES = {spec.name for spec in COLLECTION}


def value(text: str, name: str) -> float:
    found = sample_value(text, name)
    assert found is not None, name
    return found


def test_the_collection_families_are_the_documented_five() -> None:
    assert {
        "nvidia_gpu_exporter_collection_success",
        "nvidia_gpu_exporter_collection_exit_code",
        "nvidia_gpu_exporter_collection_duration_seconds",
        "nvidia_gpu_exporter_collection_success_timestamp_seconds",
        "nvidia_gpu_exporter_collection_failures_total",
    } == NAMES


@pytest.mark.parametrize("profile", ["nvidia_smi", "dcgm", "both"])
def test_a_successful_collection_is_said_under_every_profile(exporter: StartExporter, profile: str) -> None:
    text = checked(exporter(*SMI, f"--metrics.profile={profile}").scrape())
    assert names_in(text) >= NAMES
    assert sample_value(text, "nvidia_gpu_exporter_collection_success") == 1
    assert sample_value(text, "nvidia_gpu_exporter_collection_exit_code") == 0
    assert sample_value(text, "nvidia_gpu_exporter_collection_failures_total") == 0
    assert value(text, "nvidia_gpu_exporter_collection_duration_seconds") >= 0
    assert value(text, "nvidia_gpu_exporter_collection_success_timestamp_seconds") > 1.7e9
    assert family_block(text, "nvidia_gpu_exporter_collection_failures_total").startswith(
        "# HELP nvidia_gpu_exporter_collection_failures_total "
    )


@pytest.mark.parametrize("profile", ["nvidia_smi", "dcgm"])
def test_a_failed_collection_is_said_under_every_profile(exporter: StartExporter, profile: str) -> None:
    text = checked(exporter(*FAILING, f"--metrics.profile={profile}").scrape())
    assert sample_value(text, "nvidia_gpu_exporter_collection_success") == 0
    assert sample_value(text, "nvidia_gpu_exporter_collection_exit_code") == 1
    assert value(text, "nvidia_gpu_exporter_collection_failures_total") >= 1
    assert "nvidia_gpu_exporter_collection_success_timestamp_seconds" not in names_in(text)  # never succeeded


def test_the_nvidia_smi_families_are_unchanged_by_them(exporter: StartExporter) -> None:
    text = exporter(*SMI).scrape()
    nvidia_smi = comparable(text)
    assert not any(name in nvidia_smi for name in NAMES)
    assert sample_value(text, "nvidia_smi_last_collect_success") == 1
    assert sample_value(text, "nvidia_smi_command_exit_code") == 0
