"""The HTTP layer: routes, the metrics endpoint, web-config (TLS, auth, headers, rate limit) and deadlines."""
