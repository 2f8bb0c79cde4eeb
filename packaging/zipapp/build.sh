#!/usr/bin/env bash
# Build the single-file exporter: a pex (a zipapp) of the exporter wheel and the locked dependencies of
# packaging/requirements.lock, runnable by any CPython >= 3.10 on Linux x86_64 or aarch64:
#
#   packaging/zipapp/build.sh OUTPUT.pex PROJECT_WHEEL [WHEELHOUSE_DIR]
#
# The dependencies are pure-Python wheels, PyYAML built here without libyaml, and bcrypt's abi3 wheels for both
# architectures (pex picks the matching one at run time). WHEELHOUSE_DIR, when given, receives every wheel
# that went into the file. Needs pip, pex and network access to PyPI; PYTHON selects the interpreter that runs
# them (default python3). Byte-identical output for the same inputs: pex writes fixed timestamps and order.
set -euo pipefail

[ "$#" -ge 2 ] || { echo "usage: $0 OUTPUT.pex PROJECT_WHEEL [WHEELHOUSE_DIR]" >&2; exit 2; }
output=$1
wheel=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lock=$root/packaging/requirements.lock
python=${PYTHON:-python3}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800}
export PIP_CONSTRAINT=$root/packaging/build-constraints.txt
export PIP_DISABLE_PIP_VERSION_CHECK=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheelhouse=${3:-$work/wheelhouse}
mkdir -p "$wheelhouse" "$work/download"
cp "$wheel" "$wheelhouse/"

# Every locked file whose hash matches: the pure wheels, the PyYAML sdist and bcrypt for x86_64 ...
"$python" -m pip download -q --no-deps --require-hashes -r "$lock" -d "$work/download" \
    --python-version 3.10 --implementation cp --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform any
# ... and bcrypt for aarch64.
awk '/^bcrypt==/ { keep = 1 } keep { print } keep && !/\\$/ { keep = 0 }' "$lock" >"$work/bcrypt.txt"
"$python" -m pip download -q --no-deps --require-hashes -r "$work/bcrypt.txt" -d "$work/download" \
    --only-binary=:all: --python-version 3.10 --implementation cp --abi abi3 --platform manylinux_2_28_aarch64
cp "$work"/download/*.whl "$wheelhouse/"

# PyYAML publishes no pure-Python wheel: build one from the locked sdist, without the libyaml extension. The
# wheel records the modes the build left on disk (0664 under umask 0002): normalized, so the single file's bytes
# do not depend on the builder's umask.
PYYAML_FORCE_LIBYAML=0 "$python" -m pip wheel -q --no-deps -w "$work/pyyaml" "$work"/download/pyyaml-*.tar.gz
"$python" "$root/packaging/normalize_wheel.py" "$work"/pyyaml/pyyaml-*-py3-none-any.whl >/dev/null
cp "$work"/pyyaml/pyyaml-*-py3-none-any.whl "$wheelhouse/"

# The requirement list: the exporter plus every locked name, pinned.
version=$(basename "$wheel" | cut -d- -f2)
requirements=("nvidia-gpu-exporter==$version")
while read -r pin; do
    requirements+=("$pin")
done < <(grep -E '^[A-Za-z0-9_.-]+==' "$lock" | cut -d' ' -f1)

# The pex root the file uses at run time, fixed: pex's default is the build machine's cache directory (PEX_ROOT,
# XDG_CACHE_HOME), written into __main__.py, so the bytes would depend on the builder's environment.
# shellcheck disable=SC2088 # a literal ~: the single file expands it when it runs
runtime_pex_root='~/.cache/pex'
mkdir -p "$(dirname "$output")"
"$python" -m pex --no-pypi --find-links "$wheelhouse" --intransitive --runtime-pex-root "$runtime_pex_root" \
    --platform manylinux_2_28_x86_64-cp-310-cp310 --platform manylinux_2_28_aarch64-cp-310-cp310 \
    --interpreter-constraint 'CPython>=3.10' --python-shebang '/usr/bin/env python3' \
    --console-script nvidia_gpu_exporter --output-file "$output" "${requirements[@]}"
