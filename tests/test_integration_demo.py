"""The demo backend through the real exporter process, its startup errors, the unavailable nvml backend,
and a check that the package ships no recorded capture.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from conftest import StartExporter, conformance_dir_or_skip
from exposition_reader import comparable, family_of, label_values, parse, sample_value, samples
from harness import FIXTURE_CAPTURES, REPO, StartupFailed, run_exporter_to_exit, start_exporter
from nvidia_gpu_exporter.app import build_backend
from nvidia_gpu_exporter.capture.format import GPU_CSV_LABEL_PREFIX, load_capture
from nvidia_gpu_exporter.config import Backend as BackendName
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.preflight import StartupError

DEMO = "--collect.backend=demo"
SRC = REPO / "src"
CUDA_VERSION = re.compile(r'cuda_version="[0-9]+\.[0-9]+"')
# Families whose demo values follow the wall clock between collections (energy integrates power over real
# elapsed time), so two seeded exporters only agree on them when scraped at the same instants.
WALL_CLOCK_DEPENDENT = frozenset({"nvidia_smi_energy_joules_total"})


def demo_config(tmp_path: Path, text: str, name: str = "demo.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return f"--demo-config={path}"


def deterministic(scrape: str) -> str:
    """``comparable`` output minus the samples of families that depend on wall-clock time."""
    return "".join(
        line + "\n"
        for line in comparable(scrape).splitlines()
        if line.startswith("#") or family_of(line) not in WALL_CLOCK_DEPENDENT
    )


# -- serving ----------------------------------------------------------------------------------------------


def test_demo_backend_zero_config_serves_two_simulated_gpus(exporter: StartExporter) -> None:
    handle = exporter(DEMO, "--collect.compute-apps")
    scrape = handle.scrape()
    parse(scrape)
    info = samples(scrape, "nvidia_smi_gpu_info")
    assert len(info) == 2
    assert len(set(label_values(scrape, "nvidia_smi_gpu_info", "uuid"))) == 2
    assert all(CUDA_VERSION.search(line) for line in info)
    assert "nvidia_smi_compute_app_info{" in scrape
    assert sample_value(scrape, "nvidia_smi_nvml_return_code") == 0
    assert "nvidia_smi_command_exit_code" not in scrape
    assert sample_value(scrape, "nvidia_smi_last_collect_success") == 1
    assert sample_value(scrape, "nvidia_smi_compute_apps_last_collect_success") == 1
    assert "demo mode: serving synthetic data, not a real GPU" in handle.log


def test_demo_values_move_between_scrapes(exporter: StartExporter) -> None:
    handle = exporter(DEMO)
    first, second = handle.scrape(), handle.scrape()
    assert comparable(first) != comparable(second)
    assert samples(first, "nvidia_smi_gpu_info") == samples(second, "nvidia_smi_gpu_info")


def test_demo_with_the_same_seed_is_deterministic(exporter: StartExporter, tmp_path: Path) -> None:
    config = demo_config(tmp_path, "extras:\n  seed: 42\n")
    one = exporter(DEMO, config, "--collect.compute-apps")
    two = exporter(DEMO, config, "--collect.compute-apps")
    first = [deterministic(one.scrape()), deterministic(two.scrape())]
    second = [deterministic(one.scrape()), deterministic(two.scrape())]
    assert first[0] == first[1]
    assert second[0] == second[1]
    assert first[0] != second[0]  # seeded, yet still moving from one collection to the next
    assert "nvidia_smi_gpu_info{" in first[0]


def test_demo_with_different_seeds_differs(exporter: StartExporter, tmp_path: Path) -> None:
    one = exporter(DEMO, demo_config(tmp_path, "extras:\n  seed: 42\n", "a.yaml"))
    two = exporter(DEMO, demo_config(tmp_path, "extras:\n  seed: 43\n", "b.yaml"))
    scrapes_one = [deterministic(one.scrape()) for _ in range(2)]
    scrapes_two = [deterministic(two.scrape()) for _ in range(2)]
    assert scrapes_one != scrapes_two


def test_demo_config_gpu_count(exporter: StartExporter, tmp_path: Path) -> None:
    handle = exporter(DEMO, demo_config(tmp_path, "gpus: 3\n"))
    scrape = handle.scrape()
    assert len(samples(scrape, "nvidia_smi_gpu_info")) == 3
    assert sorted(label_values(scrape, "nvidia_smi_gpu_info", "index")) == ["0", "1", "2"]
    assert len(set(label_values(scrape, "nvidia_smi_gpu_info", "uuid"))) == 3


def test_demo_config_override(exporter: StartExporter, tmp_path: Path) -> None:
    handle = exporter(DEMO, demo_config(tmp_path, "overrides:\n  temperature.gpu: 95\n"))
    for _ in range(2):
        lines = samples(handle.scrape(), "nvidia_smi_temperature_gpu")
        assert len(lines) == 2
        assert all(line.endswith("} 95") for line in lines)


def test_demo_config_can_replay_a_capture(exporter: StartExporter, tmp_path: Path) -> None:
    capture = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"
    handle = exporter(DEMO, demo_config(tmp_path, f"capture: '{capture}'\nstate: load\n"))
    scrape = handle.scrape()
    info = samples(scrape, "nvidia_smi_gpu_info")
    assert len(info) == 1
    assert 'name="NVIDIA GeForce RTX 3060"' in info[0]
    assert 'cuda_version="13.3"' in info[0]
    assert sample_value(scrape, "nvidia_smi_nvml_return_code") == 0


def test_demo_compute_apps_mig_adds_instance_labels(exporter: StartExporter) -> None:
    handle = exporter(DEMO, "--collect.compute-apps", "--collect.compute-apps-mig")
    lines = samples(handle.scrape(), "nvidia_smi_compute_app_info")
    assert lines
    assert all('gpu_instance_id="' in line and 'compute_instance_id="' in line for line in lines)


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(("--collect.pcie-throughput",), id="pcie-throughput-is-accepted"),
        pytest.param(("--nvidia-smi-command=nvidia-smi",), id="explicit-default-command-is-accepted"),
        pytest.param(("--collect.interval=100ms",), id="cached-mode"),
    ],
)
def test_demo_accepts(exporter: StartExporter, flags: tuple[str, ...]) -> None:
    handle = exporter(DEMO, *flags)
    assert handle.get("/-/healthy").status == 200
    assert "nvidia_smi_last_collect_success" in handle.scrape()


# -- startup errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "messages"),
    [
        pytest.param(
            ("--demo-config=/some/demo.yaml",),
            ("--demo-config requires --collect.backend=demo",),
            id="demo-config-with-exec",
        ),
        pytest.param(
            (DEMO, "--nvidia-smi-command=x"),
            ("--nvidia-smi-command cannot be combined with --collect.backend=demo",),
            id="demo-with-custom-command",
        ),
        pytest.param(
            (DEMO, "--collect.compute-apps-mig"),
            ("--collect.compute-apps-mig requires --collect.compute-apps",),
            id="compute-apps-mig-without-compute-apps",
        ),
        pytest.param(
            (DEMO, "--demo-config=/nonexistent/demo.yaml"),
            ("failed to set up the demo backend",),
            id="missing-demo-config",
        ),
    ],
)
def test_demo_startup_errors(flags: tuple[str, ...], messages: tuple[str, ...]) -> None:
    code, log = run_exporter_to_exit(list(flags))
    assert code == 1, log
    assert "failed to run" in log
    for message in messages:
        assert message in log


def test_nvml_backend_without_a_driver_fails_startup() -> None:
    failure: StartupFailed | None = None
    try:
        handle = start_exporter(["--collect.backend=nvml"])
    except StartupFailed as error:
        failure = error
    else:
        handle.stop()
        pytest.skip("an NVIDIA driver is present here: the nvml backend starts")
    assert failure is not None
    assert failure.returncode == 1, failure.log
    assert "failed to run" in failure.log
    # nvidia-ml-py is a dependency, so the bindings load here and it is the library that cannot initialize.
    assert "failed to set up the nvml backend: failed to initialize NVML" in failure.log


def test_a_build_without_the_nvml_bindings_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way the nvml backend is unavailable: a build that left it out names that, not the driver."""
    monkeypatch.setitem(sys.modules, "nvidia_gpu_exporter.backends.nvml", None)
    with pytest.raises(StartupError) as raised:
        asyncio.run(build_backend(Config(backend=BackendName.NVML)))
    assert str(raised.value).startswith("failed to set up the nvml backend: not available in this build (")


@pytest.mark.parametrize(
    "config",
    [
        pytest.param("bogus: 1\n", id="unknown-key"),
        pytest.param("gpus: [1, 2\n", id="bad-yaml"),
        pytest.param("gpus: 0\n", id="no-gpus"),
        pytest.param("extras:\n  bogus: 1\n", id="unknown-extras-key"),
        pytest.param("extras:\n  seed: forty-two\n", id="non-integer-seed"),
        pytest.param("extras:\n  mig:\n    - gpu: 0\n", id="mig-entry-without-instances"),
        pytest.param("state: bogus\n", id="unknown-state"),
        pytest.param("overrides:\n  name: 'a,b'\n", id="override-with-a-comma"),
    ],
)
def test_invalid_demo_config_fails_startup(tmp_path: Path, config: str) -> None:
    code, log = run_exporter_to_exit([DEMO, demo_config(tmp_path, config)])
    assert code == 1, log
    assert "failed to run" in log
    assert "failed to set up the demo backend" in log


# -- no recorded capture ships in the package --------------------------------------------------------------


def _source_files() -> list[Path]:
    return [path for path in SRC.rglob("*") if path.is_file() and "__pycache__" not in path.parts]


def test_package_contains_no_capture_or_expected_files() -> None:
    offending = [path for path in _source_files() if path.suffix in (".txt", ".metrics")]
    assert offending == []


def test_package_contains_no_capture_section_banner() -> None:
    banner = re.compile(r"^# \S+ :: query-gpu \(csv, what the exporter parses\)\s*$", re.MULTILINE)
    title = re.compile(r"^# nvidia_gpu_exporter GPU capture\s*$", re.MULTILINE)
    offending = [
        str(path)
        for path in _source_files()
        if path.suffix != ".pyc"
        and (banner.search(text := path.read_text(encoding="utf-8", errors="replace")) or title.search(text))
    ]
    assert offending == []


def test_package_contains_no_row_of_the_shared_captures() -> None:
    captures = conformance_dir_or_skip() / "captures"
    rows: set[str] = set()
    for capture_path in sorted(captures.glob("*.txt")):
        capture = load_capture(capture_path)
        for state in capture.states():
            section = capture.find(state, GPU_CSV_LABEL_PREFIX)
            assert section is not None
            rows.update(line.strip() for line in section.body.split("\n")[1:] if len(line.strip()) > 40)
    assert rows
    texts = {path: path.read_text(encoding="utf-8", errors="replace") for path in _source_files()}
    offending = sorted({str(path) for path, text in texts.items() for row in rows if row in text})
    assert offending == []
