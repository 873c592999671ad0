#!/usr/bin/env bash
# Debian's rabbitmq-server for the Celery no-loss tests (tests/test_celery_crash.py), which
# start a node of their own (tests/_rabbitmq.py: own node name, free AMQP, distribution and
# epmd ports, own data and log directories) and skip with a reason where it is missing.
set -euo pipefail
bash "$(dirname "$0")/install-server.sh" rabbitmq-server rabbitmq-server
