#!/usr/bin/env bash
# Fleet mode (docs/fleet.md) is tested against a real OpenSSH server (tests/sshd_helpers.py) with asyncssh, the
# 'fleet' extra, and a real Prometheus scraping three targets through one exporter with the documented
# relabelling. The main suite runs with '.[test]' only, so those tests were skipped there; this step installs
# openssh-server when it is absent and Debian's prometheus unpacked into a temporary directory (no service),
# runs them, and fails if any was skipped for want of sshd, asyncssh or Prometheus. That includes the slow 50-target
# load test (marked slow, so .ci/run's slow run collects it too, where it skips, saying so, before sshd is
# installed): it runs here, in the same pytest run, on the module's sshd, and the step prints its duration.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ ! -x /usr/sbin/sshd ]; then
    echo "no OpenSSH server: installing openssh-server for the fleet tests"
    apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
fi
# '.[dev]' (installed before the steps) includes the 'fleet' extra; reinstalling the project would cost ~15 s.
.venv/bin/python -c "import asyncssh" 2>/dev/null || .venv/bin/pip install -q -e '.[fleet]'

tools=$(mktemp -d)
out=$(mktemp)
trap 'rm -rf "$tools" "$out"' EXIT
mkdir "$tools/debs"
chown _apt "$tools/debs" 2>/dev/null || true
chmod 0755 "$tools"
(cd "$tools/debs" && apt-get download -qq prometheus)
dpkg-deb -x "$tools"/debs/prometheus_*.deb "$tools/root"
export PROMETHEUS_BIN_DIR="$tools/root/usr/bin"
echo "tools installed in $(( $(date +%s) - started ))s"

status=0
# -m 'slow or not slow': every test of these files, the load test (the only slow one) included.
.venv/bin/python -m pytest tests/test_fleet_ssh.py tests/test_fleet_targets.py tests/test_fleet_probe_refusals.py \
    tests/test_fleet_connection_drop.py -m 'slow or not slow' -q -rs --durations=3 --junitxml="$tools/junit.xml" \
    2>&1 | tee "$out" || status=$?
if ! grep -q 'name="test_fifty_targets_share_one_pooled_connection_and_all_answer"' "$tools/junit.xml"; then
    echo "the 50-target load test did not run" >&2
    exit 1
fi
if grep -q -e "no OpenSSH server" -e "need asyncssh" -e "needs asyncssh" -e "PROMETHEUS_BIN_DIR" "$out"; then
    echo "some fleet tests were skipped: no sshd, asyncssh or Prometheus" >&2
    exit 1
fi
echo "fleet step done in $(( $(date +%s) - started ))s"
exit "$status"
