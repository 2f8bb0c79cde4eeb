#!/usr/bin/env bash
# Build every release artifact into OUTPUT_DIR (created; must not exist or be empty):
#
#   packaging/build-release.sh OUTPUT_DIR
#
#   nvidia_gpu_exporter-V.tar.gz, nvidia_gpu_exporter-V-py3-none-any.whl   python -m build (hatchling)
#   nvidia_gpu_exporter-V.pex                       single file (packaging/zipapp/build.sh)
#   nvidia-gpu-exporter_V-1_{amd64,arm64}.deb       nfpm (packaging/nfpm.yaml)
#   nvidia-gpu-exporter-V-1.{x86_64,aarch64}.rpm    nfpm
#   nvidia_gpu_exporter.service                     the hardened unit, for installs without the packages
#   nvidia_gpu_exporter-V.cdx.json                  CycloneDX SBOM of the locked dependencies
#   nvidia-gpu-exporter-C.tgz                       the Helm chart, only when IMAGE_REPOSITORY is set (the release's
#                                                   image, e.g. ghcr.io/OWNER/NAME: the chart's default); C is the
#                                                   chart version, V's major plus one (packaging/chart_release.py)
#   nvidia_gpu_exporter.json                        the Scoop manifest, only when SCOOP_REPOSITORY (OWNER/NAME, the
#                                                   GitHub repository whose release serves the wheel) is set
#                                                   (deploy/build_stack.py --scoop-manifest)
#   checksums.txt                                   sha256 of all of the above (sha256sum format)
#
# Tools: pip install -r packaging/build-tools.txt, on PATH (python3, pex, nfpm, cyclonedx-py), or PYTHON set to
# the interpreter of that environment. SOURCE_DATE_EPOCH, when unset, comes from the tree (packaging/
# source_date_epoch.py): the last commit's time in a git checkout, the sdist's PKG-INFO mtime in an unpacked sdist.
# So every build of one commit is byte-identical, from the checkout or from its sdist, whatever the builder's
# umask and directory (CI: .ci/steps/30-packaging.sh). The packages' Homepage is packaging/project-url.sh's
# (PROJECT_URL, else the GitHub repository of the workflow, else the checkout's origin). WHEELHOUSE_DIR, when set, receives every wheel inside the
# single file (CI installs from it offline).
set -euo pipefail

[ "$#" -eq 1 ] || { echo "usage: $0 OUTPUT_DIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
[ -z "$(ls -A "$out")" ] || { echo "$out is not empty" >&2; exit 2; }
# Absolute, so that a relative PYTHON (packaging/README.md's `.venv/bin/python`) still names the venv's tools after a
# `cd` (its nfpm ran as `.venv/bin/nfpm` from the staging folder: exit 127). The venv's bin folder, not the link's
# target: a venv's python is a link to the base interpreter.
python=$(command -v "${PYTHON:-python3}") || { echo "no ${PYTHON:-python3} on PATH" >&2; exit 2; }
bindir=$(cd "$(dirname "$python")" && pwd)
python=$bindir/$(basename "$python")
nfpm=$(command -v nfpm || echo "$bindir/nfpm")
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$("$python" "$root/packaging/source_date_epoch.py" "$root")
fi
export SOURCE_DATE_EPOCH
homepage=$("$root/packaging/project-url.sh")
export PIP_CONSTRAINT=$root/packaging/build-constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. sdist and wheel.
"$python" -m build --sdist --wheel --outdir "$work/dist" "$root" >"$work/build.log" 2>&1 || {
    cat "$work/build.log" >&2
    exit 1
}
cp "$work"/dist/* "$out/"
wheel=$(echo "$out"/nvidia_gpu_exporter-*-py3-none-any.whl)
version=$(basename "$wheel" | cut -d- -f2)

# 2. The single file.
PYTHON=$python "$root/packaging/zipapp/build.sh" "$out/nvidia_gpu_exporter-$version.pex" "$wheel" \
    "$work/wheelhouse" >/dev/null
if [ -n "${WHEELHOUSE_DIR:-}" ]; then
    mkdir -p "$WHEELHOUSE_DIR"
    cp "$work"/wheelhouse/*.whl "$WHEELHOUSE_DIR/"
fi

# 3. deb and rpm, amd64 and arm64, from a staging copy laid out like the repository (see packaging/nfpm.yaml).
# Modes set here, not copied: a checkout made under umask 0002 has 0664 files, and nfpm records the maintainer
# scripts' modes as it finds them.
stage=$work/nfpm
mkdir -p "$stage/build" "$stage/deploy/systemd" "$stage/packaging/scripts"
install -m 0755 "$out/nvidia_gpu_exporter-$version.pex" "$stage/build/nvidia_gpu_exporter"
install -m 0644 "$root/deploy/systemd/nvidia_gpu_exporter.service" "$stage/deploy/systemd/"
install -m 0644 "$root/LICENSE" "$stage/"
install -m 0755 "$root"/packaging/scripts/*.sh "$stage/packaging/scripts/"
install -m 0644 "$root/packaging/nfpm.yaml" "$stage/packaging/"
for arch in amd64 arm64; do
    for packager in deb rpm; do
        (cd "$stage" && NFPM_ARCH=$arch NFPM_VERSION=$version NFPM_HOMEPAGE=$homepage \
            "$nfpm" package --config packaging/nfpm.yaml --packager "$packager" --target "$out/" >/dev/null)
    done
done

# 4. The unit, for systemd installs without the packages.
install -m 0644 "$root/deploy/systemd/nvidia_gpu_exporter.service" "$out/"

# 5. SBOM of exactly the files in the single file: an environment holding them, described by cyclonedx-py.
"$python" -m venv --without-pip "$work/sbom-env"
grep -E '^[A-Za-z0-9_.-]+==' "$root/packaging/requirements.lock" | cut -d' ' -f1 >"$work/pins.txt"
echo "nvidia-gpu-exporter==$version" >>"$work/pins.txt"
"$python" -m pip --python "$work/sbom-env/bin/python" install -q --no-index --no-deps \
    --find-links "$work/wheelhouse" -r "$work/pins.txt"
"$python" -m cyclonedx_py environment --pyproject "$root/pyproject.toml" --output-reproducible \
    --output-format JSON --output-file "$out/nvidia_gpu_exporter-$version.cdx.json" \
    "$work/sbom-env/bin/python" 2>"$work/sbom.log" || {
    cat "$work/sbom.log" >&2
    exit 1
}
"$python" "$root/packaging/sbom_finalize.py" "$out/nvidia_gpu_exporter-$version.cdx.json" "$version"

# 6. The Helm chart, with the release's image as its default.
if [ -n "${IMAGE_REPOSITORY:-}" ]; then
    "$python" "$root/packaging/chart_release.py" "$root/deploy/helm/nvidia-gpu-exporter" "$IMAGE_REPOSITORY" \
        "$version" "$out" >/dev/null
fi

# 7. The Scoop manifest: the wheel's URL on the release of SCOOP_REPOSITORY and its sha256.
if [ -n "${SCOOP_REPOSITORY:-}" ]; then
    "$python" "$root/deploy/build_stack.py" --scoop-manifest "$SCOOP_REPOSITORY" "$wheel" >"$out/nvidia_gpu_exporter.json"
fi

# 8. Checksums over every artifact.
(cd "$out" && LC_ALL=C sha256sum -- * >"$work/checksums.txt" && mv "$work/checksums.txt" checksums.txt)
echo "built $(find "$out" -type f | wc -l) files in $out (version $version, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
