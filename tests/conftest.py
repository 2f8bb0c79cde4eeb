"""Shared pytest fixtures: the exporter harness lives in ``harness.py``, the fake NVML's in ``nvml_fixtures.py``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Exporter, start_exporter
from k8s_fakes import FakeKubelet, short_socket_dir

# Fixture modules every test module may use without importing them: the fake libnvidia-ml (built on first use).
pytest_plugins = ["nvml_fixtures"]

StartExporter = Callable[..., Exporter]


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


__all__: Sequence[str] = ("StartExporter", "conformance_dir_or_skip")


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for unix sockets (their paths must stay under 108 bytes)."""
    with short_socket_dir() as directory:
        yield directory


@pytest.fixture
def kubelet(sockets: Path) -> Iterator[FakeKubelet]:
    """A fake kubelet serving PodResources on ``sockets/kubelet.sock`` (needs grpcio, like its callers)."""
    fake = FakeKubelet(sockets / "kubelet.sock").start()
    yield fake
    fake.stop()
