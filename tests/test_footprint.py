"""The exporter imports only what its configuration uses (issue 16): every module costs resident memory on every
GPU node, so a heavy one that sneaks back onto a configuration that does not need it fails here.

Each case runs the real exporter (``python -m nvidia_gpu_exporter``, 127.0.0.1 port 0), scrapes it once and
stops it; a ``sitecustomize`` on ``PYTHONPATH`` writes the child's ``sys.modules`` at exit, one file per
process (the fake nvidia-smi children load it too). ``ssl`` is not in the lists: ``import asyncio`` loads it
on every Python the exporter supports (``asyncio.sslproto``; BENCHMARKS.md, "Footprint", has the figures).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import StartExporter
from harness import FIXTURE_CAPTURES, fake_smi_command
from nvml_fixtures import FakeNvmlLibrary

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
# A cost-4 hash, so the check stays cheap; the exporter loads bcrypt for the user whether or not anyone logs in.
HASH = "$2b$04$b97I2YmfSIIS85ucx1p1puYKWyht7rauQrXdi9POiaXzSr1TA1.Ni"

SITECUSTOMIZE = """
import atexit, os, sys

def _dump():
    with open(os.path.join({directory!r}, "modules.%d" % os.getpid()), "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(_dump)
"""

# Modules no configuration below loads unless it says so: the backends and tools it does not run, the
# bindings and parsers of features it does not configure.
OPTIONAL = (
    "bcrypt",  # basic_auth_users
    "yaml",  # a config file (--web.config.file, --demo-config)
    "nvidia_gpu_exporter.support.strictyaml",
    "pynvml",  # --collect.backend=nvml
    "nvidia_gpu_exporter.backends.nvml",
    "nvidia_gpu_exporter.backends.demo",  # --collect.backend=demo
    "nvidia_gpu_exporter.capture",  # the fake nvidia-smi's and the demo's engine
    "nvidia_gpu_exporter.fakesmi",
    "nvidia_gpu_exporter.doctor",
    "nvidia_gpu_exporter.windows",
    "nvidia_gpu_exporter.kubernetes.attribution",  # --kubernetes.*
    "nvidia_gpu_exporter.exposition.dcgm",  # --metrics.profile=dcgm or both
    "grpc",
    "asyncssh",  # --fleet.targets-file
    "nvidia_gpu_exporter.backends.fleet.targets",
    "nvidia_gpu_exporter.backends.fleet.ssh",
    "nvidia_gpu_exporter.kubernetes.podresources",  # --kubernetes.pod-resources (config.py reads only its defaults)
    "nvidia_gpu_exporter.kubernetes.devices",
    "nvidia_gpu_exporter.web.probe",
    "nvidia_gpu_exporter.web.view",  # the live view (GET / and /view.json), built at its first request
    "nvidia_gpu_exporter.web.landing",
    "aiohttp",  # a test dependency only: the HTTP layer is web/protocol.py on h11 (its client side alone cost 7 MiB)
    "multidict",
    "yarl",
    "secrets",  # nothing needs a cryptographic token generator (hmac behind it)
    "hmac",
)

EXEC = ("--nvidia-smi-command", fake_smi_command(CAPTURE))


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    loaded: tuple[str, ...] = ()  # modules the configuration needs, so they must be there
    web_config: str | None = None  # a --web.config.file's text
    nvml: bool = False  # load the fake libnvidia-ml


CASES = [
    pytest.param(Case(EXEC), id="plain-exec-loads-no-optional-module"),
    pytest.param(
        Case(
            EXEC,
            ("bcrypt", "yaml", "nvidia_gpu_exporter.support.strictyaml"),
            web_config=f"basic_auth_users:\n  prometheus: '{HASH}'\n",
        ),
        id="web-config-users-load-yaml-and-bcrypt",
    ),
    pytest.param(
        Case((*EXEC, "--metrics.profile=dcgm"), ("nvidia_gpu_exporter.exposition.dcgm",)),
        id="dcgm-profile-loads-its-table",
        marks=pytest.mark.slow,  # the CI budget: the two cases above guard the exec path
    ),
    pytest.param(
        Case(("--collect.backend=nvml",), ("pynvml", "nvidia_gpu_exporter.backends.nvml"), nvml=True),
        id="nvml-backend-loads-the-bindings-only",
    ),
    pytest.param(
        Case(
            ("--collect.backend=demo",),
            # The capture engine reads the fake's config (and the demo's extras) through the strict YAML loader.
            (
                "nvidia_gpu_exporter.backends.demo",
                "nvidia_gpu_exporter.capture",
                "nvidia_gpu_exporter.support.strictyaml",
            ),
        ),
        id="demo-backend-loads-its-engine-only",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_configuration_imports_only_what_it_uses(
    exporter: StartExporter, tmp_path: Path, request: pytest.FixtureRequest, case: Case
) -> None:
    dumps = tmp_path / "modules"
    dumps.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE.format(directory=str(dumps))))
    env = {"PYTHONPATH": str(hook)}
    if case.nvml:
        library: FakeNvmlLibrary = request.getfixturevalue("fake_nvml_library")
        env.update(library.env())
    args = case.args
    if case.web_config is not None:
        config = tmp_path / "web.yml"
        config.write_text(case.web_config)
        args = (*args, f"--web.config.file={config}")
    running = exporter(*args, env=env)
    headers = {"Authorization": "Basic cHJvbWV0aGV1czp4"} if case.web_config else None  # a wrong password
    assert running.get("/metrics", headers).status == (401 if case.web_config else 200)
    assert running.stop() == 0, running.log
    modules = set((dumps / f"modules.{running.process.pid}").read_text().split("\n"))
    assert [name for name in case.loaded if name not in modules] == []
    assert sorted(name for name in OPTIONAL if name in modules and name not in case.loaded) == []
