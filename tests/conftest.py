"""Shared pytest fixtures: the exporter harness lives in ``harness.py``, the fake NVML's in ``nvml_fixtures.py``."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Exporter, start_exporter
from k8s_fakes import FakeKubelet, require_grpc, short_socket_dir


# The exporters and fake nvidia-smis the tests start (hundreds) read their bytecode from one cache outside the
# checkout. Where the environment says PYTHONDONTWRITEBYTECODE (this project's CI machines do), each of them would
# compile every module it imports from source: 0.44 s of CPU per fake nvidia-smi run instead of 0.08 s. An
# installed exporter has its bytecode (pip compiles at install), so this makes the children start as it does.
def _share_bytecode() -> None:
    if "PYTHONPYCACHEPREFIX" in os.environ or not hasattr(os, "getuid"):
        return
    cache = os.path.join(tempfile.gettempdir(), f"nvge-test-pycache-{os.getuid()}")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    if os.stat(cache).st_uid != os.getuid():  # somebody else's directory: never run bytecode it holds
        return
    os.environ["PYTHONPYCACHEPREFIX"] = cache
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_share_bytecode()

# Fixture modules every test module may use without importing them: the fake libnvidia-ml (built on first use).
pytest_plugins = ["nvml_fixtures"]

StartExporter = Callable[..., Exporter]

# The modules of fast in-process tests (no child process, servers only on in-process loopback sockets, no
# wait longer than a fraction of a second), marked ``unit`` so that ``pytest -m unit`` runs them in seconds.
# Each names the prefixes of its few tests that do start a process, sleep or explore hundreds of generated
# inputs: those stay unmarked.
UNIT_MODULES: dict[str, tuple[str, ...]] = {
    "test_collector": (),
    "test_collector_pod_usage": (),
    "test_demo_extras": (),
    "test_fakesmi": (),
    "test_fakesmi_capture": (),
    "test_fakesmi_cli": ("test_subprocess_", "test_delay_really_sleeps"),
    "test_fakesmi_config": (),
    "test_fakesmi_pmon": ("test_the_fake_command_",),
    "test_fleet_targets": ("test_an_invalid_targets_file_stops_", "test_a_changed_file_is_reloaded_"),
    "test_fakesmi_conformance": (),
    "test_health_kernellog": (),
    "test_k8s_attribution": (),
    "test_k8s_cgroups": (),
    "test_k8s_devices": (),
    "test_k8s_podresources": (),
    "test_nvml_catalog": (),
    "test_nvml_families": (),
    "test_readme": (),
    "test_stuck_children": ("test_a_wedged_driver_",),
    "test_unit_asynctimeout": (),
    "test_unit_cli_flags": (),
    "test_unit_cmdsplit": (),
    "test_unit_dcgm": (),
    "test_unit_dcgm_counters": (),
    "test_unit_dcgm_mig_pods": (),
    "test_unit_exposition": (),
    "test_unit_fields": (),
    "test_unit_go_text": (),
    "test_unit_gofloat": (),
    "test_unit_history": (),
    "test_unit_view": (),
    "test_unit_naming": (),
    "test_unit_pci": (),
    "test_unit_pmon": (),
    "test_unit_pod_usage": (),
    "test_unit_process_usage_cap": (),
    "test_unit_smi_backend": (),
    "test_unit_smi_output": (),
    "test_unit_sysfs": (),
    "test_unit_text_payload": (),
    "test_unit_transform": (),
    "test_unit_web_helpers": (),
    "test_web_app": (),
    "test_webconfig": ("test_web_config_loader_raises_only_its_own_error_on_any_",),
    "test_windows_service": (),
}


def pytest_configure(config: pytest.Config) -> None:
    """A renamed or removed module must leave UNIT_MODULES too, or its tests would silently lose the mark."""
    tests = Path(__file__).resolve().parent
    missing = sorted(name for name in UNIT_MODULES if not (tests / f"{name}.py").is_file())
    if missing:
        raise pytest.UsageError(f"conftest.UNIT_MODULES names modules that do not exist: {missing}")


@pytest.hookimpl(tryfirst=True)  # before -m selects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        left_out = UNIT_MODULES.get(item.module.__name__ if isinstance(item, pytest.Function) else "")
        if left_out is not None and not item.name.startswith(left_out):
            item.add_marker(pytest.mark.unit)


# The end of a run counts the skips by reason in a few lines (pyproject's -r leaves out "s"); `pytest -ra` lists
# every skip instead. A reason's per-test detail (a path, a parenthesis, what follows its first ": ") is dropped,
# every path into ../shared reads "../shared", and tools that one CI step installs make one line naming them.
SKIP_LINES = 8
_PARENTHESES = re.compile(r"\s*\([^()]*\)")
_SHARED_PATH = re.compile(r"\S*/shared(?:/\S*)?")
_CI_STEP = re.compile(r"\.ci/steps/[\w.-]+\.sh")
_NOT_INSTALLED = re.compile(r" (?:is|are) not installed$")


def skip_group(reason: str) -> tuple[str, str]:
    """The group a skip reason counts under, and what it adds to the group's line (a tool's name, or nothing)."""
    head = _SHARED_PATH.sub("../shared", _PARENTHESES.sub("", reason).split(": ", 1)[0])
    step = _CI_STEP.search(reason)
    if step is not None and _NOT_INSTALLED.search(head):
        return f"not installed, {step.group()} installs them", _NOT_INSTALLED.sub("", head)
    return head, ""


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or terminalreporter.hasopt("s"):
        return
    counts: Counter[str] = Counter()
    members: defaultdict[str, set[str]] = defaultdict(set)
    for report in skipped:
        group, member = skip_group(_skip_reason(report))
        counts[group] += 1
        if member:
            members[group].add(member)
    lines = [
        (count, f"{group}: {', '.join(sorted(members[group]))}" if members[group] else group)
        for group, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    if len(lines) > SKIP_LINES:
        rest = lines[SKIP_LINES - 1 :]
        lines[SKIP_LINES - 1 :] = [
            (sum(count for count, _ in rest), f"{len(rest)} more: " + "; ".join(line for _, line in rest))
        ]
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, by reason (pytest -ra lists each)")
    for count, line in lines:
        terminalreporter.write_line(f"{count:6d}  {line}")


@pytest.fixture
def exporter() -> Iterator[StartExporter]:
    """Factory: ``exporter(*args, env=None)`` starts the real exporter; every one is stopped afterwards."""
    started: list[Exporter] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> Exporter:
        handle = start_exporter(args, env)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        if handle.process.poll() is None:
            handle.stop()


def conformance_dir_or_skip() -> Path:
    from harness import CONFORMANCE

    if not (CONFORMANCE / "captures").is_dir():
        pytest.skip(f"{CONFORMANCE} is absent: the shared conformance captures are not beside this checkout")
    return CONFORMANCE


__all__: Sequence[str] = ("StartExporter", "conformance_dir_or_skip", "skip_group")


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for unix sockets (their paths must stay under 108 bytes)."""
    with short_socket_dir() as directory:
        yield directory


@pytest.fixture
def kubelet(sockets: Path) -> Iterator[FakeKubelet]:
    """A fake kubelet serving PodResources on ``sockets/kubelet.sock``; the test is skipped without grpcio."""
    require_grpc()
    fake = FakeKubelet(sockets / "kubelet.sock").start()
    yield fake
    fake.stop()
