#!/usr/bin/env bash
# Install a server from Debian's packages without starting it as a service:
#   bash .ci/install-server.sh PACKAGE BINARY
# Does nothing when BINARY is already on PATH (or in /usr/sbin). The tests start their own
# throwaway instances on free ports; a service started by the package's post-install script
# would hold the default ports, so policy-rc.d (exit 101) keeps it from starting.
set -euo pipefail
package=$1
binary=$2

found() {
    command -v "$binary" 2>/dev/null || { [ -x "/usr/sbin/$binary" ] && echo "/usr/sbin/$binary"; }
}

if path=$(found); then
    echo "$binary found: $path"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
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
$SUDO apt-get install -y --no-install-recommends "$package"

if ! path=$(found); then
    echo "$binary is still not on PATH after apt-get install $package" >&2
    exit 1
fi
echo "installed $binary: $path"
