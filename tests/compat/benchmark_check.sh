#!/usr/bin/env bash
# redis-benchmark compatibility check for Turnstile.
#
# Usage: benchmark_check.sh PORT [HOST]
#
# Runs `redis-benchmark -t ping,set,get,incr,mset -n 20000 -q`, without and with
# -P 16, and fails if redis-benchmark fails, prints any error or warning (for
# example "Error from server: ..." or "WARNING: Could not fetch server CONFIG"),
# or does not finish every expected test. This is a compatibility check, not a
# performance measurement: the numbers are printed, never compared.
set -euo pipefail

PORT=${1:?usage: benchmark_check.sh PORT [HOST]}
HOST=${2:-127.0.0.1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
EXPECTED=(PING_INLINE PING_MBULK SET GET INCR "MSET (10 keys)")

fail() {
    echo "redis-benchmark check FAILED: $*" >&2
    exit 1
}

run_bench() {
    local label=$1
    shift
    local raw="$TMP/raw" out="$TMP/out" rc=0
    echo "  redis-benchmark -h $HOST -p $PORT -t ping,set,get,incr,mset -n 20000 -q $*"
    # A server that drops a reply makes redis-benchmark wait forever: bound it.
    timeout 120 redis-benchmark -h "$HOST" -p "$PORT" -t ping,set,get,incr,mset -n 20000 -q "$@" \
        >"$raw" 2>&1 || rc=$?
    # Progress lines end in carriage returns; keep only what a terminal would
    # show last on each line, i.e. split on CR and drop the empty pieces.
    tr '\r' '\n' <"$raw" | sed -e 's/[[:space:]]*$//' | grep -v '^$' >"$out" || true
    [[ $rc == 0 ]] || fail "$label: redis-benchmark exited $rc:
$(tail -20 "$out")"
    if grep -iE 'error|err|warn|could not|refused|reset by peer' "$out" >"$TMP/bad"; then
        fail "$label: redis-benchmark printed errors:
$(sort -u "$TMP/bad" | head -20)"
    fi
    local t line rps
    for t in "${EXPECTED[@]}"; do
        line=$(grep -F "$t: " "$out" | grep 'requests per second' | tail -1 || true)
        [[ -n "$line" ]] || fail "$label: no final result line for $t; output:
$(grep 'requests per second' "$out")"
        rps=$(sed -E 's/^.*: ([0-9.]+) requests per second.*$/\1/' <<<"$line")
        if ! [[ "$rps" =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v r="$rps" 'BEGIN { exit !(r > 0) }'; then
            fail "$label: $t reported no throughput: '$line'"
        fi
        echo "    $line"
    done
    local n
    n=$(grep -c 'requests per second' "$out" || true)
    [[ "$n" == "${#EXPECTED[@]}" ]] || fail "$label: $n result lines, want ${#EXPECTED[@]}:
$(grep 'requests per second' "$out")"
}

echo "redis-benchmark check against $HOST:$PORT ($(redis-benchmark --version 2>/dev/null || echo redis-benchmark))"
run_bench "no pipelining"
run_bench "-P 16" -P 16
# The server must still answer normally after the load.
[[ "$(redis-cli -h "$HOST" -p "$PORT" ping)" == PONG ]] || fail "server does not answer PING after the benchmark"
echo "redis-benchmark check: OK"
