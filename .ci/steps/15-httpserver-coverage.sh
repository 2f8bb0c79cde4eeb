#!/usr/bin/env bash
# The HTTP server package (src/nvidia_gpu_exporter/httpserver/) is what a hostile client reaches first: its line
# coverage by its own tests (the protocol, reads, stalls, connections, TLS, web-config and auth tests) is measured
# on every change and may not fall below the floor (docs/architecture.md, "Tests"). What the floor leaves out is
# printed (term-missing), so a new branch without a test shows.
set -euo pipefail

.venv/bin/pip install -q 'pytest-cov>=5'
.venv/bin/python -m pytest -q -p no:cacheprovider \
    --cov=nvidia_gpu_exporter.httpserver --cov-report=term-missing:skip-covered --cov-fail-under=90 \
    tests/test_web_protocol.py tests/test_web_reads.py tests/test_web_listeners.py tests/test_web_app.py \
    tests/test_web_auth.py tests/test_webconfig.py tests/test_unit_connections.py tests/test_unit_web_helpers.py \
    tests/test_integration_tls.py tests/test_private_apis.py tests/test_systemd_socket.py tests/hostile/test_web_*.py \
    tests/hostile/test_auth_*.py tests/hostile/test_tls_reload.py
