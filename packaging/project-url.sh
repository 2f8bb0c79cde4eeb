#!/usr/bin/env bash
# Print this project's web address: the package Homepage (packaging/nfpm.yaml) and, in the release workflow, the
# image's org.opencontainers.image.source come from the repository the build runs in, never from a name written
# into a file (a fork's packages point at the fork). In order:
#   PROJECT_URL, when set (a build outside a checkout, e.g. CI's snapshot of the tree);
#   GITHUB_SERVER_URL/GITHUB_REPOSITORY (GitHub Actions);
#   the checkout's `origin` remote, as https://HOST/OWNER/NAME (credentials and .git dropped).
# Prints nothing (exit 0) when none is known: the packages then carry no Homepage rather than a wrong one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PROJECT_URL:-}" ]; then
    url=$PROJECT_URL
elif [ -n "${GITHUB_SERVER_URL:-}" ] && [ -n "${GITHUB_REPOSITORY:-}" ]; then
    url=$GITHUB_SERVER_URL/$GITHUB_REPOSITORY
else
    remote=$(git -C "$root" remote get-url origin 2>/dev/null || true)
    case "$remote" in
        https://* | http://* | ssh://*)
            rest=${remote#*://}
            authority=${rest%%/*}
            host=${authority##*@} # without credentials
            url=https://${host%%:*}/${rest#*/}
            ;;
        *@*:*) # scp-like: git@github.com:owner/name.git
            rest=${remote#*@}
            url=https://${rest%%:*}/${rest#*:}
            ;;
        *) url= ;; # a local path, or no remote
    esac
fi
url=${url%/}
url=${url%.git}
case "$url" in
    "" | https://?*/?*) ;;
    *)
        echo "project-url.sh: not a web address: $url" >&2
        exit 1
        ;;
esac
printf '%s' "$url"
[ -z "$url" ] || echo
