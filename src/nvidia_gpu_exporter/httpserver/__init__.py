"""An HTTP/1.1 server on asyncio and h11 that knows nothing of GPUs or of the exporter: connections and their
deadlines, the connection cap, TLS, listeners and socket activation, ``--web.config.file`` (TLS, basic auth, rate
limit, headers) and its reload. The exporter's routes are :mod:`nvidia_gpu_exporter.web`'s."""
