"""A missing extra is named with a command that works from where the exporter was installed: no release is on
PyPI, so ``pip install 'nvidia-gpu-exporter[fleet]'`` is right only for an install that came from an index."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness import MIG_FIXTURE, REPO, exporter_argv, fake_smi_command
from nvidia_gpu_exporter.support.extras import Kind, Origin, current_origin, install_hint, origin_from_direct_url

PYTHON = "/opt/venv/bin/python"

DIRECT_URLS: dict[str, tuple[str | None, Origin]] = {
    "no record: from an index": (None, Origin(Kind.INDEX)),
    "pip install .": ('{"url": "file:///src/exporter", "dir_info": {}}', Origin(Kind.CHECKOUT, "/src/exporter")),
    "pip install -e .": (
        '{"url": "file:///src/exporter", "dir_info": {"editable": true}}',
        Origin(Kind.EDITABLE, "/src/exporter"),
    ),
    "a wheel file": (
        '{"url": "file:///tmp/dl/nvidia_gpu_exporter-0.1.0-py3-none-any.whl", "archive_info": {}}',
        Origin(Kind.ARCHIVE, "/tmp/dl/nvidia_gpu_exporter-0.1.0-py3-none-any.whl"),
    ),
    "a path with a space": (
        '{"url": "file:///home/a%20b/exporter", "dir_info": {}}',
        Origin(Kind.CHECKOUT, "/home/a b/exporter"),
    ),
    "a git URL": (
        '{"url": "https://github.com/o/n", "vcs_info": {"vcs": "git", "commit_id": "abc"}}',
        Origin(Kind.URL, "https://github.com/o/n"),
    ),
    "not JSON": ("{", Origin(Kind.INDEX)),
    "not an object": ("[]", Origin(Kind.INDEX)),
    "no url": ('{"dir_info": {}}', Origin(Kind.INDEX)),
}


@pytest.mark.parametrize(("recorded", "origin"), DIRECT_URLS.values(), ids=DIRECT_URLS.keys())
def test_the_origin_is_read_from_pips_record(recorded: str | None, origin: Origin) -> None:
    assert origin_from_direct_url(recorded) == origin


HINTS: dict[str, tuple[Origin, str, str]] = {
    "checkout": (Origin(Kind.CHECKOUT, "/src/exporter"), "posix", f"{PYTHON} -m pip install '/src/exporter[fleet]'"),
    "editable checkout": (
        Origin(Kind.EDITABLE, "/src/exporter"),
        "posix",
        f"{PYTHON} -m pip install -e '/src/exporter[fleet]'",
    ),
    "wheel": (
        Origin(Kind.ARCHIVE, "/tmp/nvidia_gpu_exporter-0.1.0-py3-none-any.whl"),
        "posix",
        f"{PYTHON} -m pip install '/tmp/nvidia_gpu_exporter-0.1.0-py3-none-any.whl[fleet]'",
    ),
    "git URL": (
        Origin(Kind.URL, "git+https://github.com/o/n"),
        "posix",
        f"{PYTHON} -m pip install 'nvidia-gpu-exporter[fleet] @ git+https://github.com/o/n'",
    ),
    "index": (Origin(Kind.INDEX), "posix", f"{PYTHON} -m pip install 'nvidia-gpu-exporter[fleet]'"),
    "index on Windows": (Origin(Kind.INDEX), "nt", f'"{PYTHON}" -m pip install "nvidia-gpu-exporter[fleet]"'),
    "single file": (
        Origin(Kind.SINGLE_FILE),
        "posix",
        "the single file carries no extras: install the wheel with [fleet] into a virtual environment"
        ' (INSTALL.md, "From a checkout or a wheel"), or run the container image',
    ),
}


@pytest.mark.parametrize(("origin", "os_name", "hint"), HINTS.values(), ids=HINTS.keys())
def test_the_hint_installs_into_this_environment_from_its_origin(origin: Origin, os_name: str, hint: str) -> None:
    assert install_hint("fleet", origin, PYTHON, os_name) == hint


def test_the_single_file_is_recognised_by_the_variable_pex_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEX", "/usr/bin/nvidia_gpu_exporter")
    assert current_origin() == Origin(Kind.SINGLE_FILE)


def test_the_origin_of_this_test_environment_is_the_checkout_it_installed() -> None:
    """The README's test command installs the checkout (`pip install -e '.[test]'`); pip recorded that."""
    origin = current_origin()
    if origin.kind is Kind.INDEX:
        pytest.skip("this environment installed the package from an index, not from the checkout")
    assert origin.kind in (Kind.EDITABLE, Kind.CHECKOUT)
    assert Path(origin.location).resolve() == REPO.resolve()


# -- the exporter's own messages --------------------------------------------------------------------------------

HIDDEN = {"fleet": ("asyncssh", "--fleet.targets-file"), "kubernetes": ("grpc", "--kubernetes.pod-resources")}


@pytest.mark.parametrize("extra", HIDDEN)
def test_a_missing_extra_stops_the_exporter_with_the_hint(extra: str, tmp_path: Path) -> None:
    module, flag = HIDDEN[extra]
    shim = tmp_path / "shim" / module
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(f"raise ImportError(\"No module named '{module}' (hidden by the test)\")\n")
    targets = tmp_path / "targets.yml"
    targets.write_text(json.dumps({"targets": {"a": {"host": "127.0.0.1"}}}), encoding="utf-8")
    value = {"fleet": f"={targets}", "kubernetes": ""}[extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")])}
    argv = exporter_argv("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), f"{flag}{value}")
    completed = subprocess.run(argv, capture_output=True, timeout=60, cwd=REPO, env=env, check=False)
    log = completed.stderr.decode("utf-8", "replace")
    assert completed.returncode == 1, log
    assert f"needs the '{extra}' extra" in log
    assert install_hint(extra).replace("\\", "\\\\").replace('"', '\\"') in log
