#!/usr/bin/env bash
# The main suite runs on the machine's python3 only. asyncio changes between releases (wait_for's lost
# cancellation on 3.10/3.11, a new TLS protocol in 3.11, child watchers in 3.12), so the runner,
# collector, web and TLS tests also run on the oldest and newest Pythons this machine has of those we support
# (pyenv's builds; the step says so and passes when there are none). The HTTP protocol and its stall handling run
# here too: a transport's write() buffers a view from 3.12 and a copy before, and writelines() became sendmsg().
# The byte-parity goldens (tests/test_conformance.py) and the capture-to-exposition runs
# (tests/test_integration_collection.py, half this step's time when it ran here) are string work asyncio never
# touches beyond what the runner and HTTP tests below already drive: the main suite's Python runs them, which
# keeps this step's share of the 30-minute budget small.
set -euo pipefail

tests=(
    tests/test_unit_asynctimeout.py
    tests/test_runner.py
    tests/test_collector.py
    tests/test_web_app.py
    tests/test_web_protocol.py
    tests/test_web_reads.py
    tests/hostile/test_web_stalls.py
    tests/test_integration_http.py
    tests/test_integration_tls.py
    tests/test_web_listeners.py
    tests/test_private_apis.py
    tests/test_integration_robustness.py
)

root=""
if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root)
elif [ -d "${HOME:-/root}/.pyenv/versions" ]; then
    root="${HOME:-/root}/.pyenv"
fi

# The two Pythons run side by side (each in its own venv and pytest base directory), which keeps this step's
# share of the 30-minute CI budget near one suite's time; each log is printed whole once both are done.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pids=()
names=()
for minor in 3.10 3.13; do
    interpreter=$(ls -d "$root"/versions/"$minor".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$root" ] || [ -z "$interpreter" ]; then
        echo "no Python $minor on this machine (pyenv): skipping it"
        continue
    fi
    (
        set -euo pipefail
        echo "==> Python $minor: $interpreter"
        venv=$work/$minor/venv
        "$interpreter" -m venv "$venv"
        "$venv/bin/pip" install -q -e '.[test]'
        "$venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$work/$minor/pytest" "${tests[@]}"
    ) >"$work/$minor.log" 2>&1 &
    pids+=("$!")
    names+=("$minor")
done

status=0
for index in "${!pids[@]}"; do
    minor=${names[$index]}
    if wait "${pids[$index]}"; then
        outcome=passed
    else
        outcome=FAILED
        status=1
    fi
    cat "$work/$minor.log"
    echo "==> Python $minor: $outcome"
done
exit "$status"
