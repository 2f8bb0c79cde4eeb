"""The exporter's fixed routes, in one place: the server adds them, startup validation keeps them free."""

from __future__ import annotations

DEFAULT_TELEMETRY_PATH = "/metrics"
LANDING_PATH = "/"
HEALTH_PATH = "/-/healthy"
READY_PATH = "/-/ready"
ATTRIBUTION_PATH = "/-/attribution"  # served only with Kubernetes attribution on
XIDS_PATH = "/-/xids"  # the XIDs known, with their meaning and what to do
VERDICTS_PATH = "/-/health"  # every GPU's health verdict, its reasons and actions (docs/health.md)
VIEW_JSON_PATH = "/-/view.json"  # the live view's document (docs/view.md), polled by the landing page
DCGM_HEALTH_PATH = "/health"  # dcgm-exporter's liveness route, served only under the DCGM profiles
PROBE_PATH = "/probe"  # served only with --fleet.targets-file
PPROF_PREFIX = "/debug/pprof"  # served only with --web.enable-pprof
# --web.telemetry-path may never take these
RESERVED_PATHS = (HEALTH_PATH, READY_PATH, XIDS_PATH, VERDICTS_PATH, VIEW_JSON_PATH)
