#!/bin/sh
# nfpm preinstall: Debian preinst (install|upgrade ...), rpm %pre ($1 = 1 install, 2 upgrade).
# Creates the system user and group the service runs as; a no-op when they exist. POSIX sh (dash has no
# pipefail; this script has no pipelines).
set -eu

name=nvidia_gpu_exporter

if ! getent group "$name" >/dev/null 2>&1; then
    groupadd --system "$name"
fi
if ! getent passwd "$name" >/dev/null 2>&1; then
    useradd --system --gid "$name" --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin --comment "NVIDIA GPU Prometheus exporter" "$name"
fi
exit 0
