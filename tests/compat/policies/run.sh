#!/usr/bin/env bash
# Policies and the rate limit service through real clients: grpcio (stubs
# generated from Envoy's .proto files), POST /json, redis-py 8 and ioredis 6,
# each over RESP3 (their default) and RESP2. Starts its own server.
#
#   tests/compat/policies/run.sh BIN
#
# POLICIES_VENV names the venv to use (created if missing; default
# tests/compat/policies/.venv); `npm ci` runs here first.
set -euo pipefail
BIN=${1:?usage: tests/compat/policies/run.sh BIN}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${POLICIES_VENV:-$HERE/.venv}
# Installs are retried (the registries are the network); the check is not.
installed() {
    for i in 1 2 3; do
        "$@" && return 0
        echo "install attempt $i failed: $*" >&2
        sleep $((5 * i))
    done
    return 1
}
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
installed "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"
(cd "$HERE" && installed npm ci --no-audit --no-fund --silent)
timeout 300 "$VENV/bin/python" "$HERE/check.py" "$BIN"
