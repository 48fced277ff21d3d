#!/usr/bin/env bash
# A flood of unique limiter keys (redis-benchmark -r 100000000) against a
# server capped with --maxmemory and --maxmemory-policy volatile-ttl: keys
# are evicted rather than refused, no request errors, and memory in use
# (INFO's used_memory, what --maxmemory caps, as in Redis) stays under the
# cap: a table whose growth would cross it is never allocated; the write
# evicts the shard's soonest-expiring keys instead.
#
# Usage: tests/ops/maxmemory_flood.sh path/to/turnstile
set -euo pipefail
BIN=${1:?usage: $0 path/to/turnstile}
CAP=$((32 * 1024 * 1024))
# A free port below the ephemeral range (benchlib.free_port).
PORT=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import benchlib; print(benchlib.free_port())' \
    "$(dirname "$0")/../../benches")
LOG=$(mktemp)
"$BIN" --port "$PORT" --metrics-addr off --maxmemory "$CAP" --maxmemory-policy volatile-ttl >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 100); do
    [[ "$(redis-cli -p "$PORT" ping 2>/dev/null)" == PONG ]] && break
    sleep 0.1
done
out=$(timeout 300 redis-benchmark -p "$PORT" -c 50 -n 1000000 -r 100000000 -P 16 -q \
    RL.ALLOW 'flood:__rand_int__' 100 60 2>&1 | tr '\r' '\n')
if grep -qi "error" <<<"$out"; then
    echo "maxmemory flood: redis-benchmark saw errors:" >&2
    echo "$out" | grep -i error | head -5 >&2
    exit 1
fi
echo "$out" | grep "requests per second" || { echo "maxmemory flood: redis-benchmark did not finish" >&2; exit 1; }
used=$(redis-cli -p "$PORT" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
rss=$(redis-cli -p "$PORT" info memory | sed -n 's/^used_memory_rss:\([0-9]*\).*/\1/p')
evicted=$(redis-cli -p "$PORT" info stats | sed -n 's/^evicted_keys:\([0-9]*\).*/\1/p')
keys=$(redis-cli -p "$PORT" dbsize)
echo "maxmemory flood: used_memory $used of $CAP (rss $rss), evicted $evicted, keys left $keys"
if (( used > CAP )); then
    echo "maxmemory flood: used_memory $used is over the cap $CAP" >&2
    exit 1
fi
(( evicted > 0 )) || { echo "maxmemory flood: nothing was evicted" >&2; exit 1; }
(( keys > 0 )) || { echo "maxmemory flood: no keys left" >&2; exit 1; }
echo "maxmemory flood: passed"
