"""The HTTP part of the configuration, as the server, the metrics route and the landing page need it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WebSettings:
    """Built from the flags by ``app.web_settings``; timeouts in seconds, 0 meaning "no bound"."""

    telemetry_path: str
    max_requests: int  # concurrent scrapes; 0 = no limit
    timeout_offset_seconds: float  # subtracted from Prometheus' scrape timeout header
    idle_timeout_seconds: float  # keep-alive connections without a request are closed after this
    header_timeout_seconds: float  # request headers must arrive within this
    write_timeout_seconds: float  # a scrape answers within this; a response unread this long is cut
    enable_pprof: bool
    openmetrics: bool = False  # --web.enable-openmetrics: else text 0.0.4 whatever Accept prefers, as Go's handler
    protobuf: bool = False  # delimited protobuf when Accept prefers it, as Go's promhttp (not dcgm-exporter's handler)
    dcgm_health: bool = False  # serve dcgm-exporter's GET /health (--metrics.profile=dcgm or both)
    dcgm_health_require_gpus: bool = False  # its --health-require-gpus: 503 while the last success saw no GPU
    exporter_metrics: bool = True  # process_* and promhttp_* beside the GPUs' (dcgm-exporter's are opt-in)
    landing_description: str = "Prometheus exporter for Nvidia GPUs, using nvidia-smi."
    max_connections: int = 0  # open connections across every listener; 0 = no cap
