#!/bin/sh
# nfpm postremove: Debian postrm (remove | purge | upgrade | failed-upgrade | abort-* | disappear), rpm
# %postun ($1 = 0 erase, 1 upgrade). Debian "remove" keeps the user and the cache (like configuration);
# "purge", and an rpm erase (rpm has no purge), delete them too.
set -eu

name=nvidia_gpu_exporter

case "${1:-}" in
    remove) purge=no ;;
    purge | 0) purge=yes ;;
    *) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi

if [ "$purge" = yes ]; then
    rm -rf "/var/cache/$name"
    if getent passwd "$name" >/dev/null 2>&1; then
        userdel "$name" || echo "nvidia-gpu-exporter: could not delete the user $name" >&2
    fi
    if getent group "$name" >/dev/null 2>&1; then
        groupdel "$name" || echo "nvidia-gpu-exporter: could not delete the group $name" >&2
    fi
fi
exit 0
