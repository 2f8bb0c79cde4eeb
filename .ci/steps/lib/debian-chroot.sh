# shellcheck shell=bash
# Sourced (not run: .ci/run runs .ci/steps/*.sh only) by the steps that need a fresh minimal Debian 12 image:
# 30-packaging.sh and 35-fresh-debian.sh. The image comes from deb.debian.org.

started=${started:-$(date +%s)} # when the step began, for step()'s lines

step() { # MESSAGE: a progress line, with the seconds since the step's $started
    echo "--- [$(($(date +%s) - started))s] $*"
}

fail() { # MESSAGE: stop the step
    echo "FAIL: $*" >&2
    exit 1
}

debootstrap_start() { # DIR LOG: build a minimal Debian 12 in DIR in the background (about 50 s); sets deboot_pid
    debootstrap --variant=minbase bookworm "$1" http://deb.debian.org/debian >"$2" 2>&1 &
    deboot_pid=$!
}

# The packaging step keeps a copy of its image as debootstrap left it, before it installs anything, and the
# fresh-Debian step that runs next takes that copy instead of building its own (about 45 s saved of CI's 30
# minutes). Only a copy made within the last hour is taken; else the step builds its own.
pristine_image=$PWD/.ci-cache/debian-bookworm

debootstrap_keep_pristine() { # DIR: copy the image just built in DIR to $pristine_image
    rm -rf "$pristine_image"
    mkdir -p "$(dirname "$pristine_image")"
    cp -a "$1" "$pristine_image"
}

debootstrap_take_pristine() { # DIR: move a recent $pristine_image to DIR (which must not exist); 1 if there is none
    [ -d "$pristine_image" ] && [ -n "$(find "$pristine_image" -maxdepth 0 -mmin -60)" ] || return 1
    mv "$pristine_image" "$1"
}

debootstrap_wait() { # LOG: wait for debootstrap_start's build; on failure print its LOG and fail
    wait "$deboot_pid" || {
        cat "$1"
        fail "debootstrap"
    }
    deboot_pid=
}

chroot_argv() { # DIR WORKDIR [VAR=value...] SCRIPT: set chroot_cmd to the command that runs SCRIPT with bash in the
    # image DIR, in WORKDIR, as root with a clean environment (a login's PATH and HOME, plus the VARs)
    local dir=$1 workdir=$2
    shift 2
    local -a env_vars=()
    while [ "$#" -gt 1 ]; do
        env_vars+=("$1")
        shift
    done
    chroot_cmd=(chroot "$dir" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        HOME=/root DEBIAN_FRONTEND=noninteractive "${env_vars[@]}" /bin/bash -euo pipefail -c "cd $workdir
$1")
}

chroot_run() { # DIR WORKDIR [VAR=value...] SCRIPT: run chroot_argv's command
    chroot_argv "$@"
    "${chroot_cmd[@]}"
}
