"""The landing page at ``/``, in the spirit of exporter-toolkit's."""

from __future__ import annotations

import html

from nvidia_gpu_exporter import __version__
from nvidia_gpu_exporter.web.routes import HEALTH_PATH, PPROF_PREFIX, READY_PATH
from nvidia_gpu_exporter.web.settings import WebSettings


def landing_page(settings: WebSettings) -> str:
    """The landing page, in the spirit of exporter-toolkit's."""
    links = [f'<li><a href="{html.escape(settings.telemetry_path)}">Metrics</a></li>']
    links.append(f'<li><a href="{HEALTH_PATH}">Health</a></li>')
    links.append(f'<li><a href="{READY_PATH}">Ready</a></li>')
    if settings.enable_pprof:
        links.append(f'<li><a href="{PPROF_PREFIX}/">Profiling</a></li>')
    profiling = "enabled" if settings.enable_pprof else "disabled"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="UTF-8">\n'
        "<title>Nvidia GPU Exporter</title>\n"
        "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto;padding:0 1em}"
        "header{border-bottom:1px solid #ccc}</style>\n</head>\n<body>\n"
        "<header><h1>Nvidia GPU Exporter</h1></header>\n<main>\n"
        f"<h2>{html.escape(settings.landing_description)}</h2>\n"
        f"<div>Version: {html.escape(__version__)}</div>\n"
        f"<div>Profiling: {profiling}</div>\n"
        f"<ul>\n{''.join(links)}\n</ul>\n</main>\n</body>\n</html>\n"
    )
