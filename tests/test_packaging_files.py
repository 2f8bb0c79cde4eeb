"""Packaging files that CI can lint but not run here: the container image, Compose, nfpm, the release workflow."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from harness import REPO

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
COMPOSE = REPO / "deploy" / "docker" / "docker-compose.yml"
NFPM = REPO / "packaging" / "nfpm.yaml"
RELEASE = REPO / ".github" / "workflows" / "release.yml"
LOCK = REPO / "packaging" / "requirements.lock"


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


def test_dockerfile_installs_the_locked_set_and_no_nvidia_component() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    runs = [value for name, value in _instructions(text) if name == "RUN"]
    assert any("--require-hashes" in run and "packaging/requirements.lock" in run for run in runs)
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


def _workflow() -> dict[str, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE.read_text(encoding="utf-8"))
    loaded["on"] = loaded.pop(True)  # YAML 1.1 reads the key `on` as a boolean
    return loaded


def test_release_workflow_signs_attests_and_compares_two_builds() -> None:
    workflow = _workflow()
    assert workflow["on"]["push"]["tags"] == ["v*"]
    assert workflow["permissions"] == {"contents": "read"}
    build_steps = workflow["jobs"]["build"]["steps"]
    runs = "\n".join(step.get("run", "") for step in build_steps)
    assert "packaging/build-release.sh dist" in runs
    assert "packaging/build-release.sh rebuild" in runs
    assert "diff -r dist rebuild" in runs
    publish = workflow["jobs"]["publish"]
    assert publish["permissions"] == {"contents": "write", "id-token": "write", "attestations": "write"}
    uses = [step.get("uses", "").split("@")[0] for step in publish["steps"]]
    assert "actions/attest-build-provenance" in uses
    assert "sigstore/gh-action-sigstore-python" in uses
    signed = next(step for step in publish["steps"] if step.get("uses", "").startswith("sigstore/"))["with"]["inputs"]
    for pattern in ("*.whl", "*.tar.gz", "*.pex", "*.deb", "*.rpm", "*.cdx.json", "checksums.txt"):
        assert pattern in signed
    image_uses = [step.get("uses", "").split("@")[0] for step in workflow["jobs"]["image"]["steps"]]
    assert "docker/build-push-action" in image_uses
    assert "actions/attest-build-provenance" in image_uses


def test_lock_covers_every_runtime_dependency() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "update_lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pins = re.findall(r"^([a-z0-9-]+)==\S+ \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", LOCK.read_text(), re.M)
    hashes = {name: block.count("--hash=") for name, block in pins}
    assert hashes["bcrypt"] == 2  # x86_64 and aarch64
    assert all(count == 1 for name, count in hashes.items() if name != "bcrypt")
    assert "async-timeout" in hashes  # needed on Python 3.10 only: the lock follows markers for every version


@pytest.mark.parametrize("script", ["packaging/build-release.sh", "packaging/zipapp/build.sh"])
def test_build_scripts_refuse_missing_arguments(script: str) -> None:
    result = subprocess.run(["bash", str(REPO / script)], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "usage:" in result.stderr
