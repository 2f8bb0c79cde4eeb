#!/usr/bin/env bash
# Kubernetes attribution and the doctor: the README's default test run installs only '.[test]', so the tests
# that need grpcio/protobuf (the fake kubelet, the exporter against it) skipped there. This step installs
# the `kubernetes` extra and runs them all, failing if any still skips for want of grpcio.
set -euo pipefail

.venv/bin/pip install -q -e '.[kubernetes]'

out=$(mktemp)
status=0
.venv/bin/python -m pytest tests/test_k8s_*.py tests/test_doctor.py -q -rs 2>&1 | tee "$out" || status=$?
if grep -q "the 'kubernetes' extra) are not installed" "$out"; then
    echo "the Kubernetes attribution tests were skipped: grpcio/protobuf did not install" >&2
    exit 1
fi
exit "$status"
