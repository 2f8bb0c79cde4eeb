#!/usr/bin/env bash
# Fleet mode (docs/fleet.md) is tested against a real OpenSSH server (tests/sshd_helpers.py) with asyncssh, the
# 'fleet' extra. The main suite runs with '.[test]' only, so its fleet tests were skipped there; this step
# installs openssh-server when it is absent and runs them, failing if they are still skipped for want of sshd
# or asyncssh. The slow load test already ran in the slow run when sshd was there; otherwise it runs here.
set -euo pipefail

marks="not slow"
if [ ! -x /usr/sbin/sshd ]; then
    echo "no OpenSSH server: installing openssh-server for the fleet tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
    marks="slow or not slow"
fi
# '.[dev]' (installed before the steps) includes the 'fleet' extra; reinstalling the project would cost ~15 s.
.venv/bin/python -c "import asyncssh" 2>/dev/null || .venv/bin/pip install -q -e '.[fleet]'

out=$(mktemp)
status=0
.venv/bin/python -m pytest tests/test_fleet_ssh.py tests/test_fleet_targets.py -m "$marks" -q -rs 2>&1 | tee "$out" || status=$?
if grep -q -e "no OpenSSH server" -e "need asyncssh" -e "needs asyncssh" "$out"; then
    echo "the fleet tests were skipped: no sshd or no asyncssh" >&2
    exit 1
fi
exit "$status"
