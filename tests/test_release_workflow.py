"""The release workflow (.github/workflows/release.yml) has every build, rebuild, publish, sign and attest step
of issue 15, names everything from the repository it runs in, and pins the image bases by digest. actionlint and
the github-workflows schema check the file itself (.ci/steps/30-packaging.sh)."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import yaml

from harness import REPO

RELEASE = REPO / ".github" / "workflows" / "release.yml"
BUILD_RELEASE = REPO / "packaging" / "build-release.sh"
SCOOP_MANIFEST = "nvidia_gpu_exporter.json"  # Scoop names an app after its manifest file
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"


@functools.cache  # parsed once: the tests only read it
def _workflow() -> dict[str, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(RELEASE.read_text(encoding="utf-8"))
    loaded["on"] = loaded.pop(True)  # YAML 1.1 reads the key `on` as a boolean
    return loaded


def _steps(job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _workflow()["jobs"][job]["steps"]
    return steps


def _uses(job: str) -> list[str]:
    return [step["uses"].split("@")[0] for step in _steps(job) if "uses" in step]


def _runs(job: str) -> str:
    return "\n".join(step.get("run", "") for step in _steps(job))


PUBLISHERS = ["pypi", "github-release", "image", "chart"]


def test_the_workflow_runs_on_version_tags_with_read_only_defaults() -> None:
    workflow = _workflow()
    assert workflow["on"]["push"]["tags"] == ["v*"]
    assert workflow["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("job", PUBLISHERS)
def test_every_publisher_waits_for_the_rebuild_and_runs_on_tags_only(job: str) -> None:
    definition = _workflow()["jobs"][job]
    # A checksum mismatch in `rebuild` or `windows-rebuild`, or a failed Windows smoke test, stops them all.
    assert set(definition["needs"]) == {"build", "rebuild", "windows", "windows-rebuild"}
    assert definition["if"] == "startsWith(github.ref, 'refs/tags/v')"


def test_the_rebuild_is_a_second_runner_from_the_sdist_that_compares_every_checksum() -> None:
    jobs = _workflow()["jobs"]
    assert jobs["rebuild"]["needs"] == "build"
    assert jobs["rebuild"]["runs-on"] != jobs["build"]["runs-on"]  # another machine image, not just another VM
    assert "actions/checkout" not in _uses("rebuild")  # the sdist alone: what PyPI users get
    runs = _runs("rebuild")
    assert "umask 0002" in runs
    assert "unset SOURCE_DATE_EPOCH" in runs
    assert 'diff -u released/checksums.txt "$RUNNER_TEMP/rebuilt/checksums.txt"' in runs
    assert 'diff -r released "$RUNNER_TEMP/rebuilt"' in runs
    assert "umask 0022" in _runs("build")


@pytest.mark.parametrize(
    ("job", "action"),
    [
        pytest.param("pypi", "pypa/gh-action-pypi-publish", id="pypi-trusted-publishing"),
        pytest.param("github-release", "actions/attest-build-provenance", id="files-attested"),
        pytest.param("github-release", "sigstore/gh-action-sigstore-python", id="files-signed-sigstore"),
        pytest.param("github-release", "sigstore/cosign-installer", id="checksums-cosign"),
        pytest.param("image", "docker/build-push-action", id="image-built-and-pushed"),
        pytest.param("image", "actions/attest-build-provenance", id="image-attested"),
        pytest.param("image", "sigstore/cosign-installer", id="image-cosign"),
        pytest.param("chart", "azure/setup-helm", id="chart-helm"),
        pytest.param("chart", "actions/attest-build-provenance", id="chart-attested"),
        pytest.param("chart", "sigstore/cosign-installer", id="chart-cosign"),
    ],
)
def test_each_publisher_has_its_publish_sign_and_attest_actions(job: str, action: str) -> None:
    assert action in _uses(job)


@pytest.mark.parametrize(
    ("job", "command"),
    [
        pytest.param(
            "github-release", "cosign sign-blob --yes --bundle dist/checksums.txt.cosign.bundle", id="checksums"
        ),
        pytest.param("github-release", 'gh release create "$TAG"', id="release-files"),
        pytest.param("image", 'cosign sign --yes "$GHCR@$DIGEST" "$DOCKERHUB@$DIGEST"', id="image-both-registries"),
        pytest.param("chart", 'helm push "dist/nvidia-gpu-exporter-$CHART_VERSION.tgz"', id="chart-oci-push"),
        pytest.param("chart", 'cosign sign --yes "$NAME@$DIGEST"', id="chart-signed"),
    ],
)
def test_each_publisher_runs_its_command(job: str, command: str) -> None:
    assert command in _runs(job)


def test_every_release_file_is_signed_with_sigstore() -> None:
    signer = next(step for step in _steps("github-release") if step.get("uses", "").startswith("sigstore/gh-action"))
    for pattern in (
        "*.whl",
        "*.tar.gz",
        "*.pex",
        "*.deb",
        "*.rpm",
        "*.tgz",
        "*.cdx.json",
        "*.service",
        "checksums.txt",
        SCOOP_MANIFEST,
        "*.zip",  # the Windows executable
        "*.yaml",  # its winget manifests
    ):
        assert pattern in signer["with"]["inputs"], pattern
    attest = next(step for step in _steps("github-release") if step.get("uses", "").startswith("actions/attest"))
    assert attest["with"] == {"subject-checksums": "dist/checksums.txt"}  # one attestation per file listed


def test_the_pypi_job_holds_only_the_oidc_permission_and_its_environment() -> None:
    job = _workflow()["jobs"]["pypi"]
    assert job["permissions"] == {"id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    assert not [step for step in job["steps"] if "password" in step.get("with", {})]  # trusted publishing: no token


def test_images_go_to_ghcr_and_docker_hub_multi_arch_with_both_attested() -> None:
    meta = next(step for step in _steps("image") if step.get("id") == "meta")
    assert meta["with"]["images"].splitlines() == [
        "${{ steps.names.outputs.ghcr }}",
        "${{ steps.names.outputs.dockerhub }}",
    ]
    push = next(step for step in _steps("image") if step.get("id") == "push")
    assert push["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert "labels" not in push["with"]  # metadata-action's labels carry the build time
    assert "CREATED=${{ steps.names.outputs.created }}" in push["with"]["build-args"]
    subjects = [
        step["with"]["subject-name"] for step in _steps("image") if step.get("uses", "").startswith("actions/attest")
    ]
    assert subjects == ["${{ steps.names.outputs.ghcr }}", "${{ steps.names.outputs.dockerhub }}"]
    logins = [step["with"]["registry"] for step in _steps("image") if step.get("uses", "").startswith("docker/login")]
    assert logins == ["ghcr.io", "docker.io"]


def test_names_come_from_the_repository_not_a_placeholder() -> None:
    text = RELEASE.read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"(?<![$\w])owner/", code, re.IGNORECASE)  # $owner is the lower-cased github owner
    assert 'IMAGE_REPOSITORY="ghcr.io/${GITHUB_REPOSITORY,,}"' in _runs("build")
    assert 'IMAGE_REPOSITORY="ghcr.io/${GITHUB_REPOSITORY,,}"' in _runs("rebuild")  # same chart default, same bytes


@pytest.mark.parametrize("argument", ["BUILDER_IMAGE", "RUNTIME_IMAGE"])
def test_the_image_bases_are_pinned_by_digest(argument: str) -> None:
    match = re.search(rf"^ARG {argument}=(\S+)$", DOCKERFILE.read_text(encoding="utf-8"), re.MULTILINE)
    assert match is not None
    assert re.fullmatch(r"[a-z0-9./-]+:[a-z0-9.-]+@sha256:[0-9a-f]{64}", match.group(1)), match.group(1)


def test_the_image_labels_carry_no_build_time() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^ARG CREATED=1970-01-01T00:00:00Z$", text, re.MULTILINE)
    assert "$(date" not in text
    assert "BUILDKIT_" not in text


@pytest.mark.parametrize("job", ["image", "chart"])
def test_the_registry_login_comes_before_every_push_attestation_and_signature(job: str) -> None:
    uses = [step.get("uses", "").split("@")[0] for step in _steps(job)]
    runs = [step.get("run", "") for step in _steps(job)]
    first_login = uses.index("docker/login-action")
    assert first_login < uses.index("actions/attest-build-provenance")
    assert first_login < next(index for index, run in enumerate(runs) if "cosign sign" in run)


@pytest.mark.parametrize("job", ["build", "rebuild"])
def test_both_builds_write_the_scoop_manifest_of_the_repository_the_workflow_runs_in(job: str) -> None:
    # In both builds, so checksums.txt lists it, the rebuild compares it and the checksum attestation covers it.
    assert 'SCOOP_REPOSITORY="$GITHUB_REPOSITORY"' in _runs(job)


def test_the_release_build_writes_the_scoop_manifest_from_build_stack() -> None:
    script = BUILD_RELEASE.read_text(encoding="utf-8")
    assert (
        '"$root/deploy/build_stack.py" --scoop-manifest "$SCOOP_REPOSITORY" "$wheel" >"$out/' + SCOOP_MANIFEST + '"'
    ) in script
    assert script.index("--scoop-manifest") < script.index("sha256sum")  # listed in checksums.txt


# --------------------------------------------------------------------------------------------------------------
# Windows: the frozen executable and its winget manifests


WINDOWS_ZIP = "nvidia_gpu_exporter-$VERSION-windows-amd64.zip"


def _step_index(job: str, text: str) -> int:
    return next(index for index, step in enumerate(_steps(job)) if text in step.get("run", "") + step.get("uses", ""))


@pytest.mark.parametrize("job", ["windows", "windows-rebuild"])
def test_the_windows_builds_run_on_windows_with_one_pinned_python_and_hashed_pins(job: str) -> None:
    definition = _workflow()["jobs"][job]
    assert definition["runs-on"].startswith("windows-")
    setup = next(step for step in _steps(job) if step.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["python-version"] == "${{ env.WINDOWS_PYTHON_VERSION }}"
    assert re.fullmatch(r"3\.12\.\d+", _workflow()["env"]["WINDOWS_PYTHON_VERSION"])  # the cp312 wheels' Python
    runs = _runs(job)
    assert 'python -m pip install --require-hashes --no-deps -r "$RUNNER_TEMP/requirements.txt"' in runs
    assert "python -m pip check" in runs


def test_the_windows_job_builds_from_the_released_wheel() -> None:
    assert "needs.build.outputs.version" in _workflow()["jobs"]["windows"]["env"]["VERSION"]
    assert 'pip install --no-deps "released/nvidia_gpu_exporter-$VERSION-py3-none-any.whl"' in _runs("windows")


def test_the_windows_job_tests_the_zipped_executable_and_its_service_before_uploading_it() -> None:
    smoke = _step_index("windows", "smoke_test.py")
    run = _steps("windows")[smoke]["run"]
    assert f'python -m zipfile -e "windows/{WINDOWS_ZIP}" "$RUNNER_TEMP/unpacked"' in run  # the file to publish
    assert '--expect-version "$VERSION" --service' in run
    assert '"$RUNNER_TEMP/unpacked/nvidia_gpu_exporter.exe"' in run
    assert _step_index("windows", "build.py build windows") < smoke < _step_index("windows", "actions/upload-artifact")


def test_the_windows_job_writes_the_winget_manifests_of_the_repository_it_runs_in() -> None:
    runs = _runs("windows")
    words = " ".join(runs.replace("\\\n", " ").split())
    assert f'--winget-manifests "$GITHUB_REPOSITORY" "windows/{WINDOWS_ZIP}" windows' in words
    assert runs.index("--winget-manifests") < runs.index("build.py checksums windows")  # listed in the checksums


def test_the_windows_rebuild_is_a_second_runner_from_the_sdist_that_fails_on_any_difference() -> None:
    jobs = _workflow()["jobs"]
    assert set(jobs["windows-rebuild"]["needs"]) == {"build", "windows"}  # its own job: a fresh VM
    # The same image: Windows' own resource updater writes part of the executable (docs/windows.md).
    assert jobs["windows-rebuild"]["runs-on"] == jobs["windows"]["runs-on"]
    assert "actions/checkout" not in _uses("windows-rebuild")  # the sdist's scripts, as PyPI users get them
    runs = _runs("windows-rebuild")
    assert "unset SOURCE_DATE_EPOCH" in runs
    assert 'python "$sdist/packaging/windows/build.py" compare' in runs  # names the entries that differ
    assert 'diff -u windows/checksums-windows.txt "$RUNNER_TEMP/rebuilt/checksums-windows.txt"' in runs
    assert 'diff -r windows "$RUNNER_TEMP/rebuilt"' in runs


def test_the_windows_files_join_checksums_txt_before_it_is_attested_and_signed() -> None:
    joined = _step_index("github-release", "checksums-windows.txt")
    run = _steps("github-release")[joined]["run"]
    assert "(cd windows && sha256sum --check --strict checksums-windows.txt)" in run
    assert "cat windows/checksums-windows.txt >>dist/checksums.txt" in run
    assert run.rstrip().endswith("(cd dist && sha256sum --check --strict checksums.txt)")
    assert joined < _step_index("github-release", "actions/attest-build-provenance")
    assert joined < _step_index("github-release", "sigstore/gh-action-sigstore-python")
