#!/usr/bin/env bash
# The nvml backend's tests build a fake libnvidia-ml.so.1 (tests/fakenvml/) with the system C compiler. With
# a compiler present they already ran in the main suite; without one they were skipped there, so this step
# installs gcc and runs them, failing if they are still skipped for want of a compiler.
set -euo pipefail

if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; then
    echo "a C compiler is present: the nvml tests ran in the main suite"
    exit 0
fi

echo "no C compiler: installing gcc for the fake libnvidia-ml"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq gcc libc6-dev >/dev/null

out=$(mktemp)
status=0
.venv/bin/python -m pytest tests/test_nvml_*.py -m "slow or not slow" -q -rs 2>&1 | tee "$out" || status=$?
if grep -q "no C compiler" "$out"; then
    echo "the nvml tests were skipped: the fake libnvidia-ml could not be built" >&2
    exit 1
fi
exit "$status"
