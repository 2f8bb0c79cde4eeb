#!/usr/bin/env bash
# The live view in a real browser (issue 18): Debian's Chromium, headless and off the network, driven by
# Playwright against the demo backend (tests/browser/). No browser is downloaded: Playwright drives
# /usr/bin/chromium. Screenshots go to $CI_ARTIFACTS/screenshots (build/screenshots without it).
# Budget: at most 90 s with its installs (measured in docs/view.md): apt and pip run side by side.
set -euo pipefail
started=$(date +%s)

pip_log=$(mktemp)
trap 'rm -f "$pip_log"' EXIT
.venv/bin/pip install -q 'playwright>=1.40' >"$pip_log" 2>&1 &
pip_pid=$!
if ! [ -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
if ! wait "$pip_pid"; then
    cat "$pip_log"
    exit 1
fi
echo "browser step: installs done in $(( $(date +%s) - started ))s"

.venv/bin/python -m pytest -q -p no:cacheprovider tests/browser -rs
echo "browser step: done in $(( $(date +%s) - started ))s"
