#!/usr/bin/env bash
# SIGTERM while a script runs, against the release binary: the process must
# end within its documented bound (docs/reliability.md, "Scripts under
# hostile use"), which only a process can show (the runtime's worker stays
# inside the script):
#   1. a script that waits on TIME for 300 ms after writing ends on its own
#      (TIME reads the clock inside scripts);
#   2. a script that has not written (`while true do end`) is stopped after
#      the 1 s grace: exit 0, final snapshot written;
#   3. a script that has written and never ends: exit 1 after the 10 s
#      wait, without a final snapshot (the last periodic one stands).
#
# Usage: tests/ops/busy_script_shutdown.sh path/to/turnstile
set -euo pipefail
BIN=${1:?usage: $0 path/to/turnstile}
BENCHES="$(cd "$(dirname "$0")/../../benches" && pwd)"
DIR=$(mktemp -d)
PID=""
trap '[[ -n "$PID" ]] && kill -KILL "$PID" 2>/dev/null; rm -rf "$DIR"' EXIT

start() {
    PORT=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import benchlib; print(benchlib.free_port())' "$BENCHES")
    rm -f "$DIR/dump.tsnap"
    NO_COLOR=1 "$BIN" --port "$PORT" --metrics-addr off --lua-time-limit 100 \
        --snapshot "$DIR/dump.tsnap" --snapshot-interval 3600 >"$DIR/log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        [[ "$(redis-cli -p "$PORT" ping 2>/dev/null)" == PONG ]] && return 0
        sleep 0.1
    done
    echo "busy script shutdown: the server did not start" >&2
    exit 1
}

wait_busy() {
    for _ in $(seq 100); do
        redis-cli -p "$PORT" ping 2>&1 | grep -q BUSY && return 0
        sleep 0.05
    done
    echo "busy script shutdown: the script never became busy" >&2
    exit 1
}

# stop EXPECTED_STATUS BOUND_SECONDS: SIGTERM, then the exit within the bound.
stop() {
    local want=$1 bound=$2 t0 status=0
    t0=$(date +%s.%N)
    kill -TERM "$PID"
    local polls=$((bound * 20))
    while kill -0 "$PID" 2>/dev/null && ! grep -q '^' <(ps -o stat= -p "$PID" | grep Z); do
        polls=$((polls - 1))
        if ((polls <= 0)); then
            echo "busy script shutdown: still running ${bound}s after SIGTERM" >&2
            tail -n 5 "$DIR/log" >&2
            exit 1
        fi
        sleep 0.05
    done
    wait "$PID" || status=$?
    PID=""
    printf 'exit %s after %.2f s\n' "$status" "$(echo "$(date +%s.%N) - $t0" | bc)"
    [[ "$status" == "$want" ]] || { echo "busy script shutdown: exit $status, expected $want" >&2; tail -n 5 "$DIR/log" >&2; exit 1; }
}

start
t0=$(date +%s.%N)
out=$(redis-cli -p "$PORT" eval "redis.call('SET', KEYS[1], 1) local t = redis.call('TIME') local until_us = t[1] * 1000000 + t[2] + 300000 while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] >= until_us then return 'done' end end" 1 k)
[[ "$out" == done ]] || { echo "busy script shutdown: the TIME script answered '$out'" >&2; exit 1; }
printf '1. a script waiting 300 ms on TIME ended in %.2f s\n' "$(echo "$(date +%s.%N) - $t0" | bc)"
stop 0 15

start
redis-cli -p "$PORT" eval "while true do end" 0 >"$DIR/killed" 2>&1 &
wait_busy
printf '2. a script that has not written: '
stop 0 8
[[ -s "$DIR/dump.tsnap" ]] || { echo "busy script shutdown: no final snapshot" >&2; exit 1; }
grep -q "Script killed" "$DIR/killed" || { echo "busy script shutdown: the client got '$(cat "$DIR/killed")'" >&2; exit 1; }

start
redis-cli -p "$PORT" eval "redis.call('SET', KEYS[1], 1) while true do end" 1 k >/dev/null 2>&1 &
wait_busy
printf '3. a script that has written: '
stop 1 20
grep -q "exiting without the final snapshot" "$DIR/log" || { echo "busy script shutdown: no log line saying why" >&2; exit 1; }
[[ ! -e "$DIR/dump.tsnap" ]] || { echo "busy script shutdown: a snapshot was written over a half-run script" >&2; exit 1; }
echo "busy script shutdown: ok"
