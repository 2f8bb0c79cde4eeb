"""The exec backend under the DCGM profile reads through NVML what nvidia-smi cannot print (issue 27, item 4):
energy, PCIe replays, NVLink, violation times, GPM and per-MIG-instance readings, keyed by GPU uuid, when
libnvidia-ml loads; without it, what it serves today and one startup warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence

import pytest

from harness import MIG_FIXTURE, Exporter, fake_smi_command, start_exporter
from nvidia_gpu_exporter.app import build_attributor
from nvidia_gpu_exporter.backends.exec.backend import SmiBackend
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.backends.nvml.supplement import NvmlSupplemented, open_supplement, supplement
from nvidia_gpu_exporter.capture.engine import Scenario, answer
from nvidia_gpu_exporter.capture.format import load_capture
from nvidia_gpu_exporter.exposition.dcgm import DcgmExposition
from nvidia_gpu_exporter.exposition.dcgm_counters import parse_counters
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.model.snapshot import Attempt, Snapshot
from nvml_fixtures import ControlFile, FakeNvmlLibrary, InProcessFake
from polling import wait_until
from unit_helpers import FakeRunner

# The fixture capture's GPUs (GPU 0 in MIG mode): the fake NVML's "mig" scenario is given their uuids, as one
# driver reports the same uuid to nvidia-smi and to NVML.
UUIDS = ("GPU-3f1a9c2e-7b4d-4e8a-9c61-2d5e8f0a1b37", "GPU-8d42e1b5-0c9f-4a73-b2e6-5f17c3d9a804")
SAME_GPUS = ("reset mig", *(f"set {index} uuid {uuid}" for index, uuid in enumerate(UUIDS)))


def exec_backend() -> SmiBackend:
    scenario = Scenario(load_capture(MIG_FIXTURE))

    def reply(args: Sequence[str]) -> RunResult:
        result = answer(scenario, args)
        return RunResult(result.stdout, result.stderr, result.exit_code)

    return asyncio.run(
        SmiBackend.start(FakeRunner({"": reply}), FieldRequest(), timeout_seconds=10.0, compute_apps=False)
    )


@pytest.fixture(name="supplemented")
def _supplemented(fake_nvml: InProcessFake) -> Iterator[NvmlSupplemented]:
    fake_nvml.command(*SAME_GPUS)
    backend = NvmlSupplemented(exec_backend(), open_supplement())
    yield backend
    asyncio.run(backend.aclose())


def test_the_exec_readings_gain_nvmls_extras_for_the_same_gpus(supplemented: NvmlSupplemented) -> None:
    plain = asyncio.run(supplemented.inner.collect())
    readings = asyncio.run(supplemented.collect())
    assert readings.gpus == plain.gpus  # nvidia-smi stays the source of every other value
    assert plain.extras is None
    assert readings.extras is not None
    assert [gpu.gpu_uuid for gpu in readings.extras.gpus] == list(UUIDS)
    assert all(gpu.energy_joules is not None for gpu in readings.extras.gpus)
    assert {instance.gpu_instance_id for instance in readings.extras.mig_instances} == {2, 7}


def test_the_dcgm_profile_serves_the_nvml_only_fields_on_exec(supplemented: NvmlSupplemented) -> None:
    readings = asyncio.run(supplemented.collect())
    counters = parse_counters(
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, e\n"
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, r\nDCGM_FI_DEV_THERMAL_VIOLATION, counter, v\n",
        "c.csv",
    )
    exposition = DcgmExposition(supplemented.fields, "node-1", counters=counters, gpm=True)
    text = exposition.render(Snapshot(Attempt(readings, 0, 0.1, 1.0), 0, 1.0))
    served = [line.split("{", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    # GPU 0 as its two GPU instances, GPU 1 whole: one series each per family.
    assert served == [
        *["DCGM_FI_DEV_GPU_TEMP"] * 3,
        *["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] * 3,
        *["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] * 3,
        *["DCGM_FI_DEV_THERMAL_VIOLATION"] * 3,
    ]
    assert 'GPU_I_PROFILE="3g.71gb",GPU_I_ID="2"' in text


def test_a_failing_nvml_cycle_leaves_the_nvidia_smi_collection_served_and_is_counted(
    supplemented: NvmlSupplemented, fake_nvml: InProcessFake, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.command("rc nvmlDeviceGetCount_v2 3")
    with caplog.at_level(logging.INFO):
        first = asyncio.run(supplemented.collect())
        second = asyncio.run(supplemented.collect())
        fake_nvml.command("rc nvmlDeviceGetCount_v2 0")
        third = asyncio.run(supplemented.collect())
    assert (first.extras, second.extras) == (None, None)
    assert first.gpus.rows
    assert third.extras is not None
    assert supplemented.failures == 2
    messages = [record.getMessage() for record in caplog.records if "beside nvidia-smi" in record.getMessage()]
    assert messages == [  # once when the failures start, once when they end
        "could not read NVML beside nvidia-smi: serving nvidia-smi's readings without the NVML-only fields",
        "reading NVML beside nvidia-smi again",
    ]


def test_when_nvml_cannot_start_the_exec_backend_is_served_as_it_is_with_one_warning(
    fake_nvml: InProcessFake, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml.command("reset mig")
    monkeypatch.setenv("FAKE_NVML_INIT_RETURN", "12")  # NVML_ERROR_LIBRARY_NOT_FOUND
    inner = exec_backend()
    with caplog.at_level(logging.WARNING):
        backend = asyncio.run(supplement(inner))
    assert backend is inner
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.getMessage() == "the exec backend reads no NVML-only DCGM fields"
    assert "energy" in warning.__dict__["fields"]
    assert warning.__dict__["reason"] == "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"


# -- the exporter ------------------------------------------------------------------------------------------------


def exec_exporter(env: dict[str, str] | None = None) -> Exporter:
    return start_exporter(
        [
            "--metrics.profile=dcgm",
            "--dcgm.compatibility=4.8",  # the names below are 4.8's
            "--collect.xid-source=off",
            "--nvidia-smi-command",
            fake_smi_command(MIG_FIXTURE),
        ],
        env=env,
    )


FAILED = 'nvidia_gpu_exporter_nvml_supplement_failures_total{reason="not_supported"}'


def test_the_exporter_on_exec_serves_nvml_energy_and_mig_instances_when_the_library_loads(
    fake_nvml_library: FakeNvmlLibrary, tmp_path_factory: pytest.TempPathFactory
) -> None:
    control = ControlFile(tmp_path_factory.mktemp("supplement") / "control")
    control.send(*(f"set {index} uuid {uuid}" for index, uuid in enumerate(UUIDS)))
    exporter = exec_exporter(fake_nvml_library.env("mig", control=control.path))
    try:
        text = exporter.scrape()
        assert exporter.logged('msg="reading NVML beside nvidia-smi"')
        control.send("rc nvmlDeviceGetCount_v2 3")  # the NVML cycles fail from now on; nvidia-smi's do not
        failed = wait_until(exporter.scrape, "a failed NVML cycle counted", until=lambda body: FAILED in body)
    finally:
        exporter.stop()
    assert f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="1",UUID="{UUIDS[1]}"' in text
    assert 'GPU_I_PROFILE="3g.71gb",GPU_I_ID="2"' in text
    assert "nvidia_gpu_exporter_nvml_supplement_failures_total" not in text
    assert "DCGM_FI_DEV_GPU_TEMP{" in failed


def test_the_exporter_on_exec_without_the_library_warns_once_and_serves_what_nvidia_smi_gives() -> None:
    exporter = exec_exporter({"LD_LIBRARY_PATH": "/nonexistent"})
    try:
        text = exporter.scrape()
        warnings = exporter.logged("the exec backend reads no NVML-only DCGM fields")
    finally:
        exporter.stop()
    assert len(warnings) == 1
    assert "DCGM_FI_DEV_GPU_TEMP{" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in text


def test_kubernetes_attribution_keeps_nvidia_smi_l_for_mig_on_the_supplemented_exec_backend(
    supplemented: NvmlSupplemented,
) -> None:
    config = parse_args(["--kubernetes.process-pods", "--metrics.profile=dcgm"]).config
    attributor = build_attributor(config, supplemented)
    assert attributor is not None
    assert attributor.mig_lister is not None
