#!/usr/bin/env bash
# Install redis-server from the system packages when it is not on PATH.
#
# The Celery tests (tests/test_celery.py) start their own throwaway redis-server on a free
# port; they skip only where no redis-server binary exists, and CI must not be such a place.
# CI runs as root on Debian. The server is never started as a system service here.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    echo "redis-server found: $(command -v redis-server) ($(redis-server --version))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# policy-rc.d exit code 101 keeps the package's post-install script from starting a service.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    CREATED_POLICY=1
fi
cleanup() {
    if [ "$CREATED_POLICY" -eq 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT

$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends redis-server

if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is still not on PATH after apt-get install" >&2
    exit 1
fi
echo "installed redis-server: $(command -v redis-server) ($(redis-server --version))"
