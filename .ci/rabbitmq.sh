#!/usr/bin/env bash
# Install rabbitmq-server from the system packages when it is not on PATH.
#
# The Celery no-loss tests (tests/test_celery_crash.py) start their own throwaway RabbitMQ
# node (tests/_rabbitmq.py: its own node name, free AMQP, distribution and epmd ports, its
# own data and log directories); they skip only where no rabbitmq-server binary exists, and
# CI must not be such a place. CI runs as root on Debian. The broker is never started as a
# system service here.
set -euo pipefail

if command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ]; then
    echo "rabbitmq-server found: $(command -v rabbitmq-server || echo /usr/sbin/rabbitmq-server)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# policy-rc.d exit code 101 keeps the package's post-install script from starting a service
# (the node, and the epmd it would start, would hold the default ports 5672, 25672 and 4369).
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
$SUDO apt-get install -y --no-install-recommends rabbitmq-server

if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    echo "rabbitmq-server is still not on PATH after apt-get install" >&2
    exit 1
fi
echo "installed rabbitmq-server: $(command -v rabbitmq-server || echo /usr/sbin/rabbitmq-server)"
