"""Packaging files that CI can lint but not run here: the container image, Compose, nfpm, the release workflow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from harness import REPO, load_script

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
COMPOSE = REPO / "deploy" / "docker" / "docker-compose.yml"
NFPM = REPO / "packaging" / "nfpm.yaml"
LOCK = REPO / "packaging" / "requirements.lock"
KUBERNETES_LOCK = REPO / "packaging" / "requirements-kubernetes.lock"
FLEET_LOCK = REPO / "packaging" / "requirements-fleet.lock"
DOCKERIGNORE = REPO / "deploy" / "docker" / "Dockerfile.dockerignore"
LAUNCHER = REPO / "deploy" / "docker" / "nvidia_gpu_exporter"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(line for line in text.splitlines() if not line.startswith("#")))
    return [
        (line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1] if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip()
    ]


def test_dockerfile_final_stage_is_distroless_nonroot_and_labelled() -> None:
    instructions = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    froms = [index for index, (name, _) in enumerate(instructions) if name == "FROM"]
    assert len(froms) == 2  # multi-stage: builder, runtime
    final = instructions[froms[-1] :]
    assert final[0] == ("FROM", "${RUNTIME_IMAGE}")
    args = {value.split("=", 1)[0]: value.split("=", 1)[1] for name, value in instructions if name == "ARG"}
    assert args["RUNTIME_IMAGE"].startswith("gcr.io/distroless/python3-debian12:")  # no shell, no package manager
    assert ("USER", "65534:65534") in final
    assert ("EXPOSE", "9835") in final
    assert ("ENTRYPOINT", '["/usr/bin/python3", "-m", "nvidia_gpu_exporter"]') in final
    assert not [value for name, value in final if name == "RUN"]  # nothing runs in the final image
    labels = " ".join(value for name, value in final if name == "LABEL")
    for key in ("title", "description", "licenses", "version", "revision", "created", "source"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    env = " ".join(value for name, value in final if name == "ENV")
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env


def _pins(lock: Path) -> dict[str, int]:
    """name -> number of hashes, for every pin of a lock."""
    pins = re.findall(r"^([a-z0-9-]+)==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock.read_text(), re.M)
    return {name: block.count("--hash=") for name, block in pins}


def _update_lock() -> ModuleType:
    return load_script(REPO / "packaging" / "update_lock.py")


def test_dockerfile_installs_the_locked_set_and_no_nvidia_component() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    runs = [value for name, value in _instructions(text) if name == "RUN"]
    # The three locks in one hashed install: the runtime set, the `kubernetes` extra (grpcio, protobuf) and the
    # `fleet` extra (asyncssh: the chart's fleet Deployment runs this image).
    assert any(
        "--require-hashes" in run
        and "-r packaging/requirements.lock" in run
        and "-r packaging/requirements-kubernetes.lock" in run
        and "-r packaging/requirements-fleet.lock" in run
        for run in runs
    )
    ignored = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    for needed in (
        "packaging/requirements.lock",
        "packaging/requirements-kubernetes.lock",
        "packaging/requirements-fleet.lock",
        "deploy/docker/nvidia_gpu_exporter",
    ):
        assert f"!{needed}" in ignored, f"the build context filter drops {needed}"
    assert not re.search(r"(apt-get|apt|dnf|yum)\s+install", text)
    assert not re.search(r"(?i)(cuda|nvidia-(utils|driver|container))", " ".join(runs))


def test_compose_reserves_the_gpus_with_the_utility_capability() -> None:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    service = compose["services"]["nvidia_gpu_exporter"]
    assert service["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert "gpu" in device["capabilities"]
    assert service["build"] == {"context": "../..", "dockerfile": "deploy/docker/Dockerfile"}
    assert service["user"] == "65534:65534"
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert service["ports"] == ["9835:9835"]


def test_nfpm_config_installs_the_single_file_unit_and_scripts() -> None:
    config: dict[str, Any] = yaml.safe_load(NFPM.read_text(encoding="utf-8"))
    assert config["name"] == "nvidia-gpu-exporter"
    destinations = {entry["dst"]: entry for entry in config["contents"]}
    assert destinations["/usr/bin/nvidia_gpu_exporter"]["src"] == "build/nvidia_gpu_exporter"
    assert destinations["/usr/bin/nvidia_gpu_exporter"]["file_info"]["mode"] == 0o755
    unit = destinations["/usr/lib/systemd/system/nvidia_gpu_exporter.service"]
    assert (unit["src"], unit["file_info"]["mode"]) == ("deploy/systemd/nvidia_gpu_exporter.service", 0o644)
    assert "/usr/share/doc/nvidia-gpu-exporter/copyright" in destinations
    for stage, path in config["scripts"].items():
        assert (REPO / path).is_file(), stage
    assert config["depends"] == ["python3 (>= 3.10)"]


def test_lock_covers_every_runtime_dependency() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "update_lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    hashes = _pins(LOCK)
    assert hashes["bcrypt"] == 2  # x86_64 and aarch64
    assert all(count == 1 for name, count in hashes.items() if name != "bcrypt")
    assert "h11" in hashes  # the HTTP layer's parser (issue 16: aiohttp and its seven dependencies are gone)
    assert not hashes.keys() & {"aiohttp", "multidict", "yarl"}


def test_kubernetes_lock_serves_the_image_only() -> None:
    """grpcio is locked for the image's CPython on both architectures; the single file and packages carry none."""
    pins, core = _pins(KUBERNETES_LOCK), _pins(LOCK)
    # grpcio: x86_64 and aarch64 wheels; protobuf and typing-extensions (grpcio's one dependency, which no runtime
    # dependency needs since aiohttp left): their pure wheels
    assert pins == {"grpcio": 2, "protobuf": 1, "typing-extensions": 1}
    assert not pins.keys() & core.keys(), "a name pinned by both locks"
    update_lock = _update_lock()
    builder = re.search(r"^ARG BUILDER_IMAGE=python:(\d+\.\d+)-", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert builder is not None
    assert builder.group(1) == update_lock.IMAGE_PYTHON, "grpcio's locked wheels must match the image's CPython"
    assert f"CPython {update_lock.IMAGE_PYTHON} wheels" in KUBERNETES_LOCK.read_text(encoding="utf-8")
    for path in ("packaging/zipapp/build.sh", "packaging/build-release.sh", "packaging/sbom_finalize.py"):
        assert "requirements-kubernetes" not in (REPO / path).read_text(encoding="utf-8"), path


def test_fleet_lock_serves_the_image_only() -> None:
    """asyncssh and its compiled dependencies for both architectures, none of them pinned by another lock."""
    pins, others = _pins(FLEET_LOCK), {**_pins(LOCK), **_pins(KUBERNETES_LOCK)}
    # cryptography: abi3 wheels for x86_64 and aarch64; cffi: the image's CPython's, both architectures.
    assert pins == {"asyncssh": 1, "cffi": 2, "cryptography": 2, "pycparser": 1}
    assert not pins.keys() & others.keys(), "a name pinned by two locks"
    assert f"cffi's CPython {_update_lock().IMAGE_PYTHON} wheels" in FLEET_LOCK.read_text(encoding="utf-8")
    for path in ("packaging/zipapp/build.sh", "packaging/build-release.sh", "packaging/sbom_finalize.py"):
        assert "requirements-fleet" not in (REPO / path).read_text(encoding="utf-8"), path


def test_lock_check_catches_a_broken_fleet_lock(tmp_path: Path) -> None:
    update_lock = _update_lock()
    extra = update_lock.extra_requirements(REPO / "pyproject.toml", "fleet")
    assert update_lock.lock_problems(extra, FLEET_LOCK, also=(LOCK, KUBERNETES_LOCK)) == []
    text = FLEET_LOCK.read_text(encoding="utf-8")
    without = tmp_path / "without-asyncssh.lock"
    without.write_text(re.sub(r"^asyncssh==.*?(?=^\S)", "", text, flags=re.M | re.S), encoding="utf-8")
    assert update_lock.lock_problems(extra, without, also=(LOCK, KUBERNETES_LOCK)) == ["lacks asyncssh"]
    protobuf = re.search(r"^protobuf==.*?(?=^\S|\Z)", KUBERNETES_LOCK.read_text(encoding="utf-8"), re.M | re.S)
    assert protobuf is not None
    repeated = tmp_path / "repeated.lock"
    repeated.write_text(text + protobuf.group(0), encoding="utf-8")
    assert update_lock.lock_problems(extra, repeated, also=(LOCK, KUBERNETES_LOCK)) == [
        "repeats protobuf, pinned by requirements-kubernetes.lock"
    ]


def test_lock_check_catches_a_broken_kubernetes_lock(tmp_path: Path) -> None:
    update_lock = _update_lock()
    extra = update_lock.extra_requirements(REPO / "pyproject.toml", "kubernetes")
    assert sorted(requirement.name for requirement in extra) == ["grpcio", "protobuf"]
    assert update_lock.lock_problems(extra, KUBERNETES_LOCK, also=LOCK) == []
    text = KUBERNETES_LOCK.read_text(encoding="utf-8")
    without_grpcio = tmp_path / "without-grpcio.lock"
    without_grpcio.write_text(re.sub(r"^grpcio==.*?(?=^\S)", "", text, flags=re.M | re.S), encoding="utf-8")
    assert update_lock.lock_problems(extra, without_grpcio, also=LOCK) == ["lacks grpcio"]
    too_old = tmp_path / "too-old.lock"
    too_old.write_text(re.sub(r"^grpcio==\S+", "grpcio==1.60.0", text, flags=re.M), encoding="utf-8")
    assert update_lock.lock_problems(extra, too_old, also=LOCK) == ["pins grpcio==1.60.0, outside >=1.85.1"]
    repeated = tmp_path / "repeated.lock"
    h11_pin = re.search(r"^h11==.*?(?=^\S|\Z)", LOCK.read_text(encoding="utf-8"), re.M | re.S)
    assert h11_pin is not None
    repeated.write_text(text + h11_pin.group(0), encoding="utf-8")
    assert update_lock.lock_problems(extra, repeated, also=LOCK) == ["repeats h11, pinned by requirements.lock"]


def test_image_command_launcher_runs_the_exporter() -> None:
    """`kubectl exec ds/NAME -- nvidia_gpu_exporter doctor` needs this executable on the shell-less image's PATH."""
    text = LAUNCHER.read_text(encoding="utf-8")
    final = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    final = final[max(index for index, (name, _) in enumerate(final) if name == "FROM") :]
    entrypoint = next(value for name, value in final if name == "ENTRYPOINT")
    assert text.startswith("#!/usr/bin/python3\n")
    assert "/usr/bin/python3" in entrypoint
    assert os.access(LAUNCHER, os.X_OK)
    assert ("COPY", "deploy/docker/nvidia_gpu_exporter /usr/local/bin/nvidia_gpu_exporter") in final
    env = " ".join(value for name, value in final if name == "ENV")
    path = re.search(r"(?<![A-Z_])PATH=(\S+)", env)
    assert path is not None
    assert "/usr/local/bin" in path.group(1).split(":")
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, str(LAUNCHER), "--version"], capture_output=True, text=True, env=environment, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "nvidia_gpu_exporter, version" in result.stderr  # on stderr, as kingpin prints it
    result = subprocess.run(
        [sys.executable, str(LAUNCHER), "doctor", "--bogus"],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert result.returncode == 3, result.stderr  # the doctor's usage error: dispatched to the doctor


@pytest.mark.parametrize("script", ["packaging/build-release.sh", "packaging/zipapp/build.sh"])
def test_build_scripts_refuse_missing_arguments(script: str) -> None:
    result = subprocess.run(["bash", str(REPO / script)], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "usage:" in result.stderr
