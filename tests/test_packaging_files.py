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


WINDOWS_REQUIREMENTS = REPO / "packaging" / "windows" / "requirements.txt"


def _block(text: str, name: str) -> str:
    """The ``name==version \\`` line of a hashed lock with its hash lines."""
    match = re.search(rf"^{re.escape(name)}==.*?(?=^\S|\Z)", text, re.M | re.S)
    assert match is not None, name
    return match.group(0)


def _locked(lock: Path, name: str) -> str:
    return _block(lock.read_text(encoding="utf-8"), name).split("==", 1)[1].split()[0]


def _without(name: str) -> str:
    text = WINDOWS_REQUIREMENTS.read_text(encoding="utf-8")
    return text.replace(_block(text, name), "")


def _repinned(name: str, version: str) -> str:
    return re.sub(
        rf"^{re.escape(name)}==\S+", f"{name}=={version}", WINDOWS_REQUIREMENTS.read_text("utf-8"), flags=re.M
    )


@pytest.mark.parametrize(
    ("windows", "problems"),
    [
        pytest.param(lambda: WINDOWS_REQUIREMENTS.read_text("utf-8"), lambda: [], id="as-committed"),
        pytest.param(
            lambda: _without("bcrypt"),
            lambda: [f"lacks bcrypt (the Windows wheel of requirements.lock's bcrypt=={_locked(LOCK, 'bcrypt')})"],
            id="a-compiled-package-of-the-lock-missing",
        ),
        pytest.param(
            lambda: _repinned("pyyaml", "5.4.1"),
            lambda: [f"pins pyyaml==5.4.1, requirements.lock pins pyyaml=={_locked(LOCK, 'pyyaml')}"],
            id="a-compiled-package-at-another-version-than-the-lock",
        ),
        pytest.param(
            lambda: WINDOWS_REQUIREMENTS.read_text("utf-8") + _block(LOCK.read_text("utf-8"), "h11"),
            lambda: ["repeats h11, pinned by requirements.lock"],
            id="a-pure-pin-of-the-lock-repeated",
        ),
        pytest.param(lambda: _without("pywin32"), lambda: ["lacks pywin32"], id="the-windows-extra-missing"),
        pytest.param(
            lambda: _repinned("pyinstaller", "5.13.2"),
            lambda: ["pins pyinstaller==5.13.2, outside <7,>=6.22.3"],
            id="the-build-tool-out-of-range",
        ),
    ],
)
def test_lock_check_of_the_windows_requirements(windows: Any, problems: Any, tmp_path: Path) -> None:
    update_lock = _update_lock()
    extra = update_lock.extra_requirements(REPO / "pyproject.toml", "windows")
    path = tmp_path / "requirements.txt"
    path.write_text(windows(), encoding="utf-8")
    assert update_lock.windows_problems(extra, path, LOCK) == problems()


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        pytest.param(None, "packaging/windows/requirements.txt is missing", id="missing"),
        pytest.param(lambda: _without("pywin32"), "packaging/windows/requirements.txt lacks pywin32", id="broken"),
    ],
)
def test_lock_check_fails_on_the_windows_requirements(
    contents: Any, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    update_lock = _update_lock()
    # A copy of what --check reads, under a root of its own, with the Windows file as the case has it.
    (tmp_path / "packaging" / "windows").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    monkeypatch.setattr(update_lock, "ROOT", tmp_path)
    for constant, lock in (("LOCK", LOCK), ("KUBERNETES_LOCK", KUBERNETES_LOCK), ("FLEET_LOCK", FLEET_LOCK)):
        copy = tmp_path / "packaging" / lock.name
        copy.write_bytes(lock.read_bytes())
        monkeypatch.setattr(update_lock, constant, copy)
    windows = tmp_path / "packaging" / "windows" / "requirements.txt"
    monkeypatch.setattr(update_lock, "WINDOWS_REQUIREMENTS", windows)
    if contents is not None:
        windows.write_text(contents(), encoding="utf-8")
    assert update_lock.main(["--check"]) == 1
    assert message in capsys.readouterr().err


def test_windows_requirements_are_what_the_generator_renders() -> None:
    """The committed file is in the generated form: its own pins, rendered by update_lock, give it back."""
    update_lock = _update_lock()
    text = WINDOWS_REQUIREMENTS.read_text(encoding="utf-8")
    sections: list[dict[str, tuple[str, list[str]]]] = []
    for line in text.splitlines():
        if line + "\n" in update_lock.WINDOWS_SECTIONS:
            sections.append({})
        elif pin := re.match(r"([a-z0-9-]+)==(\S+) \\$", line):
            hashes: list[str] = []
            sections[-1][pin[1]] = (pin[2], hashes)
        elif digest := re.match(r"    --hash=sha256:([0-9a-f]{64})", line):
            hashes.append(digest[1])
    assert len(sections) == len(update_lock.WINDOWS_SECTIONS)
    assert update_lock.render_windows(*sections) == text


def _fake_wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    import zipfile

    wheel = directory / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata)
    return wheel


def test_windows_resolution_pins_the_locks_compiled_versions_and_follows_windows_markers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    update_lock = _update_lock()
    index = {  # a fake index: name -> (version, Requires-Dist)
        "bcrypt": ("9.9.9", []),
        "pywin32": ("312", []),
        "pyinstaller": (
            "6.22.3",
            [
                "pefile>=2022.5.30; sys_platform == 'win32'",
                "macholib>=1.8; sys_platform == 'darwin'",
                "importlib-metadata>=4.6; python_version < '3.10'",
                "h11>=0.1",
                "altgraph",
            ],
        ),
        "pefile": ("2024.8.26", []),
        "altgraph": ("0.17.5", []),
    }
    asked: list[tuple[str, bool]] = []

    def download(requirement: str, destination: Path, **options: Any) -> Path:
        name = re.match(r"[a-z0-9-]+", requirement)
        assert name is not None
        asked.append((requirement, options.get("windows", False)))
        version, requires = index[name[0]]
        return _fake_wheel(destination, name[0], version, requires)

    monkeypatch.setattr(update_lock, "pip_download", download)
    core = {"bcrypt": ("5.0.0", ["aa"]), "h11": ("0.16.0", ["bb"])}
    extra = update_lock.extra_requirements(REPO / "pyproject.toml", "windows")
    compiled, windows_extra, tools = update_lock.resolve_windows(core, extra, tmp_path)
    assert ("bcrypt==5.0.0", True) in asked  # the lock's version, whatever the index's latest
    assert all(windows for _, windows in asked)
    assert set(compiled) == {"bcrypt"}
    assert set(windows_extra) == {"pywin32"}  # its marker is sys_platform == 'win32'
    assert set(tools) == {"pyinstaller", "pefile", "altgraph"}  # not macholib, importlib-metadata, nor the lock's h11


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


def test_image_has_dcgm_exporters_command_path() -> None:
    """A manifest that runs /usr/bin/dcgm-exporter by name (its image's binary) finds ours there, with
    dcgm-exporter's defaults (docs/dcgm.md, "Swapping the image")."""
    launcher = REPO / "deploy" / "docker" / "dcgm-exporter"
    final = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    final = final[max(index for index, (name, _) in enumerate(final) if name == "FROM") :]
    assert ("COPY", "deploy/docker/dcgm-exporter /usr/bin/dcgm-exporter") in final
    assert "!deploy/docker/dcgm-exporter" in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    assert launcher.read_text(encoding="utf-8").startswith("#!/usr/bin/python3\n")
    assert os.access(launcher, os.X_OK)
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, str(launcher), "--help"], capture_output=True, text=True, env=environment, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "usage: nvidia_gpu_exporter" in result.stderr
