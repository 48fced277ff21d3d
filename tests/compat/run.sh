#!/usr/bin/env bash
# Runs every client-compatibility check against a Turnstile server, in order.
#
# Usage: tests/compat/run.sh PORT [HOST]
#        REDIS_PORT=P tests/compat/run.sh PORT [HOST]
#
# Needs redis-cli and redis-benchmark (apt: redis-tools), Python with redis-py
# (set PYTHON to pick the interpreter, default python3), and Node with
# `npm ci` already run in tests/compat/node. The redis-cli check runs FLUSHALL:
# point this only at a server you own. .ci/run sets all of this up.
#
# With REDIS_PORT set to the port of a real redis-server (on HOST too), it
# then compares Turnstile with it: every reply of tests/compat/diff_cases/*.txt
# byte for byte in RESP2 and RESP3 (differential.py, which runs FLUSHALL on
# both servers before every case), and the rate-limiter-flexible summaries.
# Without REDIS_PORT those two comparisons are skipped (and say so).
set -euo pipefail

PORT=${1:?usage: tests/compat/run.sh PORT [HOST]}
HOST=${2:-127.0.0.1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}

for tool in redis-cli redis-benchmark node "$PYTHON"; do
    command -v "$tool" >/dev/null || { echo "compat: $tool not found" >&2; exit 1; }
done
[[ -d "$HERE/node/node_modules/ioredis" && -d "$HERE/node/node_modules/redis" \
    && -d "$HERE/node/node_modules/rate-limiter-flexible" ]] || {
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
check "ACL users (ioredis, node-redis)" node "$HERE/node/acl_users_check.js" "$PORT" "$HOST"
check "redis-py transactions" timeout 90 "$PYTHON" "$HERE/transactions_check.py" "$PORT" "$HOST"
check "node transactions (node-redis, ioredis)" timeout 60 node "$HERE/node/transactions_check.js" "$PORT" "$HOST"
if [[ -n "${REDIS_PORT:-}" ]]; then
    check "rate-limiter-flexible, against redis-server on port $REDIS_PORT" \
        timeout 60 node "$HERE/node/rate_limiter_flexible_check.js" "$PORT" "$HOST" --against "$REDIS_PORT"
    # the cases first against redis-server twice: a difference there is in
    # the cases (not deterministic), not in Turnstile
    check "differential cases are deterministic (redis-server on port $REDIS_PORT against itself)" \
        timeout 120 python3 "$HERE/differential.py" --host "$HOST" --a "$REDIS_PORT" --b "$REDIS_PORT" \
        --a-name redis-again --budget 100 "$HERE/diff_cases"
    check "differential, RESP2 and RESP3, against redis-server on port $REDIS_PORT" \
        timeout 120 python3 "$HERE/differential.py" --host "$HOST" --a "$PORT" --b "$REDIS_PORT" \
        --budget 100 "$HERE/diff_cases"
    echo "--- compat: all checks passed, with the comparisons against redis-server"
else
    check "rate-limiter-flexible" timeout 60 node "$HERE/node/rate_limiter_flexible_check.js" "$PORT" "$HOST"
    echo "--- compat: REDIS_PORT not set: skipped the comparisons against redis-server"
    echo "--- compat: all checks passed"
fi
