#!/usr/bin/env bash
# Runs every client-compatibility check against a Turnstile server, in order.
#
# Usage: tests/compat/run.sh PORT [HOST]
#
# Needs redis-cli and redis-benchmark (apt: redis-tools), Python with redis-py
# (set PYTHON to pick the interpreter, default python3), and Node with
# `npm ci` already run in tests/compat/node. The redis-cli check runs FLUSHALL:
# point this only at a server you own. .ci/run sets all of this up.
set -euo pipefail

PORT=${1:?usage: tests/compat/run.sh PORT [HOST]}
HOST=${2:-127.0.0.1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}

for tool in redis-cli redis-benchmark node "$PYTHON"; do
    command -v "$tool" >/dev/null || { echo "compat: $tool not found" >&2; exit 1; }
done
[[ -d "$HERE/node/node_modules/ioredis" && -d "$HERE/node/node_modules/redis" ]] || {
    echo "compat: run 'npm ci' in $HERE/node first" >&2
    exit 1
}

check() {
    local name=$1
    shift
    local t0=$SECONDS
    echo "--- compat: $name"
    if ! "$@"; then
        echo "--- compat: $name FAILED" >&2
        exit 1
    fi
    echo "--- compat: $name passed ($((SECONDS - t0)) s)"
}

check "redis-py"        "$PYTHON" "$HERE/redis_py_check.py" "$PORT" "$HOST"
check "redis-py limiter" "$PYTHON" "$HERE/redis_py_limiter_check.py" "$PORT" "$HOST"
check "redis-cli"       bash "$HERE/redis_cli_check.sh" "$PORT" "$HOST"
check "redis-benchmark" bash "$HERE/benchmark_check.sh" "$PORT" "$HOST"
check "ioredis"         node "$HERE/node/ioredis_check.js" "$PORT" "$HOST"
check "node-redis"      node "$HERE/node/node_redis_check.js" "$PORT" "$HOST"
echo "--- compat: all checks passed"
