#!/bin/sh
# nfpm postinstall: Debian postinst (configure [old-version] | abort-*), rpm %post ($1 = 1 install, 2 upgrade).
# With systemd running: a fresh install enables and starts the service, an upgrade restarts it only if it
# runs (an administrator's stop or disable survives upgrades). Without systemd (containers, chroots, other
# init systems): explain what to do instead.
set -eu

service=nvidia_gpu_exporter.service

case "${1:-}" in
    configure) if [ -n "${2:-}" ]; then upgrade=yes; else upgrade=no; fi ;;
    1) upgrade=no ;;
    2) upgrade=yes ;;
    abort-upgrade | abort-remove | abort-deconfigure) upgrade=yes ;;
    *) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    if [ "$upgrade" = yes ]; then
        systemctl try-restart "$service"
    else
        systemctl enable --now "$service"
    fi
else
    cat <<'MESSAGE'
nvidia-gpu-exporter: systemd is not running here (a container, a chroot or another init system), so the
nvidia_gpu_exporter service was neither enabled nor started.
  * On a host that boots with systemd, enable and start it there:
        systemctl enable --now nvidia_gpu_exporter.service
  * Otherwise run it under your own supervisor, as the nvidia_gpu_exporter user, with a writable cache
    for the unpacked single-file build, e.g.:
        PEX_ROOT=/var/cache/nvidia_gpu_exporter /usr/bin/nvidia_gpu_exporter
MESSAGE
fi
exit 0
