#!/usr/bin/env bash
# Build the Go nvidia_gpu_exporter from its source tree and a directory of module sources, with no
# network: the modules go through a file:// GOPROXY made by modproxy.py, so go.sum still verifies
# every one that matches upstream; any that does not is replaced by its directory and listed.
#
# Usage: build.sh SRC_DIR MODDIR OUT_BINARY
#   SRC_DIR     the exporter at the wanted tag (git archive v1.14.0 | tar -x -C SRC_DIR)
#   MODDIR      <module>@<version>/ trees, one per module go.mod requires (see README.md)
#   OUT_BINARY  where the binary goes
# Environment: GO (default: go on PATH), VERSION (default 1.14.0), REVISION, BUILD_DATE,
#   WORK_DIR (default: a fresh temporary directory; GOPATH and GOCACHE live under it).
set -euo pipefail

if [ "$#" -ne 3 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
moddir=$(cd "$2" && pwd)
out=$3
here=$(cd "$(dirname "$0")" && pwd)
go=${GO:-go}
version=${VERSION:-1.14.0}
revision=${REVISION:-unknown}
build_date=${BUILD_DATE:-unknown}
work=${WORK_DIR:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)

rm -rf "$work/src" "$work/proxy"
cp -R "$src" "$work/src"
python3 "$here/modproxy.py" "$moddir" "$work/src/go.sum" "$work/proxy" >"$work/modules.txt"

cd "$work/src"
replaced=0
while read -r kind module modversion dir; do
    if [ "$kind" = replace ]; then
        "$go" mod edit -replace "$module@$modversion=$dir"
        echo "not verified against go.sum (replaced by a local tree): $module@$modversion" >&2
        replaced=$((replaced + 1))
    fi
done <"$work/modules.txt"
echo "$(grep -c '^verified' "$work/modules.txt") modules verified against go.sum, $replaced replaced" >&2

export GOPATH="$work/gopath" GOCACHE="$work/gocache" GOMODCACHE="$work/gopath/pkg/mod"
export GOPROXY="file://$work/proxy" GOSUMDB=off GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
pkg=github.com/prometheus/common/version
"$go" build -trimpath -o "$out" -ldflags "-s -w \
    -X $pkg.Version=$version -X $pkg.Revision=$revision -X $pkg.Branch=HEAD \
    -X $pkg.BuildUser=build.sh -X $pkg.BuildDate=$build_date" \
    ./cmd/nvidia_gpu_exporter
"$out" --version
