#!/usr/bin/env bash
# The other end of the dependency ranges pyproject.toml pins where the code relies on a library's behaviour or
# private parts. The main suite runs the newest releases; this step runs the affected tests again, in a
# temporary venv, on: bcrypt 4.x (its floor and its newest 4.x: 4.x truncates passwords over 72 bytes where
# 5.x raises, and httpserver/auth.py must answer alike on both, flood and fail-closed rules included), the nvidia-ml-py floor (the private helpers
# backends/nvml/api.py uses) and the h11 floor (the HTTP/1.1 parser httpserver/protocol.py builds on, public API only).
# The floors are read from the project's own requirements, so raising one in pyproject.toml moves this step.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
started=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
python3 -m venv "$venv"
"$venv/bin/pip" install -q -e '.[test]'
python=$venv/bin/python

floor() { # floor NAME: "NAME==X" for the ">=X" of NAME in the installed project's requirements
    "$python" - "$1" <<'PY'
import importlib.metadata
import sys

from packaging.requirements import Requirement

name = sys.argv[1]
for line in importlib.metadata.requires("nvidia-gpu-exporter") or []:
    requirement = Requirement(line)
    if requirement.name.lower() == name and requirement.marker is None:
        lowest = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(lowest) != 1:
            sys.exit(f"{requirement}: expected one >= bound")
        print(f"{name}=={lowest[0]}")
        break
else:
    sys.exit(f"pyproject.toml does not require {name}")
PY
}

version_of() {
    "$python" -c 'import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))' "$1"
}

install() { # install REQUIREMENT: into the venv, wheels only, the newest release it allows
    "$venv/bin/pip" install -q --upgrade --only-binary=:all: "$1"
    echo "==> $1 (installed: $(version_of "${1%%[=<>]*}"))"
}

run_tests() {
    "$python" -m pytest -q -p no:cacheprovider -n 0 "$@" # a few seconds each: workers would cost more than they save
}

for bcrypt in "$(floor bcrypt)" 'bcrypt>=4,<5'; do
    install "$bcrypt"
    case "$(version_of bcrypt)" in
        4.*) ;;
        *)
            echo "asked for $bcrypt, got bcrypt $(version_of bcrypt): the 4.x runs need a 4.x" >&2
            exit 1
            ;;
    esac
    run_tests tests/test_web_auth.py tests/test_webconfig.py tests/hostile/test_auth_flood.py tests/hostile/test_auth_config_fail_closed.py
done

install "$(floor nvidia-ml-py)"
run_tests tests/test_private_apis.py

install "$(floor h11)"
run_tests tests/test_web_listeners.py tests/test_web_app.py tests/test_web_auth.py tests/test_private_apis.py \
    tests/hostile/test_web_http_version.py tests/test_web_protocol.py

echo "dependency ranges step done in $(($(date +%s) - started))s"
