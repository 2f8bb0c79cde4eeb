#!/bin/sh
# nfpm preremove: Debian prerm (remove | upgrade <new> | deconfigure | failed-upgrade), rpm %preun
# ($1 = 0 erase, 1 upgrade). On a real removal: stop and disable the service; on an upgrade: nothing (the
# new package's postinstall restarts it).
set -eu

service=nvidia_gpu_exporter.service

case "${1:-}" in
    remove | deconfigure | 0) ;;
    *) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
    systemctl disable --now "$service" || echo "nvidia-gpu-exporter: could not stop or disable $service" >&2
elif command -v systemctl >/dev/null 2>&1; then
    # No running systemd, but the unit may have been enabled offline: remove the enablement symlinks.
    systemctl --no-reload disable "$service" >/dev/null 2>&1 || :
fi
exit 0
