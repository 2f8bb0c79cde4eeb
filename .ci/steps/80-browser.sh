#!/usr/bin/env bash
# The live view in a real browser (issue 18): Debian's Chromium, headless and off the network, driven by
# Playwright against the demo backend (tests/browser/). No browser is downloaded: Playwright drives Debian's
# /usr/bin/chromium-headless-shell (or /usr/bin/chromium when that is what the machine has). Screenshots go to $CI_ARTIFACTS/screenshots (build/screenshots without it).
# Budget: at most 90 s with its installs. Measured: 79 s from nothing, 29 s with both installed (docs/view.md);
# apt and pip run side by side.
set -euo pipefail
started=$(date +%s)

pip_log=$(mktemp)
trap 'rm -f "$pip_log"' EXIT
.venv/bin/pip install -q 'playwright>=1.40' >"$pip_log" 2>&1 &
pip_pid=$!
# Debian's headless shell: the same Chromium build without GTK, a smaller download than the full browser.
if ! [ -x /usr/bin/chromium-headless-shell ] && ! [ -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null
fi
if ! wait "$pip_pid"; then
    cat "$pip_log"
    exit 1
fi
echo "browser step: installs done in $(( $(date +%s) - started ))s"

.venv/bin/python -m pytest -q -p no:cacheprovider tests/browser -rs
echo "browser step: done in $(( $(date +%s) - started ))s"
