#!/usr/bin/env bash
# Runs Redis 7.0.15's own Tcl tests, for the command families Turnstile
# claims, against a fresh Turnstile (or, with --redis, against redis-server:
# the same files with the same harness adjustments, which Redis must pass
# whole).
#
# Usage: tests/redis-suite/run.sh [--redis] [--only FILE] REDIS_SRC [BIN]
#
#   REDIS_SRC  a Redis 7.0.15 source tree (its tests/ and runtest are used;
#              e.g. `apt-get source redis` on Debian 12, or a checkout of the
#              7.0.15 tag); it is copied, never modified
#   BIN        the server to test: default target/release/turnstile, built
#              first with `cargo build --release` (--redis: redis-server)
#   --redis    run the files against redis-server instead: every test must pass
#   --only F   run one file of the list (e.g. unit/type/hash)
#
# Each file runs against its own freshly started server on a free port with
# `runtest --host --port --singledb --durable --ignore-encoding
# --ignore-digest` (the suite's own switches for a server whose internal
# encodings differ: Turnstile has none to report). harness.patch (beside this
# script) adjusts the copy of the harness for external mode: an error outside
# any test (FUNCTION FLUSH, a start_server override or an encoding threshold
# the server lacks) no longer ends the file, a failed test hands the next one
# a fresh client, and unit/scripting runs its EVAL pass only.
#
# Every failing test must be listed in out_of_scope.txt (FILE<TAB>TEST<TAB>
# REASON); a failure not listed, a listed test that now passes, a file that
# stops on an exception, or any failure at all with --redis fails the run.
# Prints per-file ok/err counts; exits non-zero on any of the above.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FILES=(unit/type/incr unit/type/string unit/expire unit/keyspace unit/multi
    unit/scripting unit/type/list unit/type/zset unit/type/hash unit/pubsub
    unit/info-command unit/protocol unit/querybuf)
MODE=turnstile
ONLY=""
while [[ $# -gt 0 ]]; do
    case $1 in
    --redis) MODE=redis; shift ;;
    --only) ONLY=${2:?--only needs a file}; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) break ;;
    esac
done
SRC=${1:?usage: tests/redis-suite/run.sh [--redis] [--only FILE] REDIS_SRC [BIN]}
BIN=${2:-}
if [[ -n "$ONLY" ]]; then
    [[ " ${FILES[*]} " == *" $ONLY "* ]] || { echo "redis-suite: $ONLY is not one of: ${FILES[*]}" >&2; exit 2; }
    FILES=("$ONLY")
fi

grep -q 'REDIS_VERSION "7.0.15"' "$SRC/src/version.h" 2>/dev/null || {
    echo "redis-suite: $SRC is not a Redis 7.0.15 source tree (src/version.h)" >&2
    exit 2
}
command -v tclsh >/dev/null || { echo "redis-suite: tclsh not found (apt: tcl)" >&2; exit 2; }

if [[ -z "$BIN" ]]; then
    if [[ $MODE == redis ]]; then
        BIN=$(command -v redis-server) || { echo "redis-suite: redis-server not found" >&2; exit 2; }
    else
        (cd "$ROOT" && cargo build --release --quiet)
        BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/turnstile
    fi
fi
[[ -x "$BIN" ]] || { echo "redis-suite: $BIN is not executable" >&2; exit 2; }

WORK=$(mktemp -d)
SERVER_PID=""
stop_server() {
    if [[ -n "$SERVER_PID" ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap 'stop_server; rm -rf "$WORK"' EXIT

mkdir -p "$WORK/tree"
cp -r "$SRC/tests" "$SRC/runtest" "$WORK/tree/"
(cd "$WORK/tree" && patch -p1 --quiet <"$HERE/harness.patch")

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server() {
    local port=$1 log=$2
    if [[ $MODE == redis ]]; then
        "$BIN" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --enable-debug-command yes --dir "$WORK" --daemonize no >"$log" 2>&1 &
    else
        "$BIN" --port "$port" --bind 127.0.0.1 --metrics-addr off --log-level warn >"$log" 2>&1 &
    fi
    SERVER_PID=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$log" >&2
    echo "redis-suite: the server did not start on port $port" >&2
    exit 1
}

# the listed failures of one file, one test name a line
listed() {
    awk -F'\t' -v f="$1" '!/^#/ && NF >= 3 && $1 == f { print $2 }' "$HERE/out_of_scope.txt" | sort -u
}

# Listed tests that may pass or fail from run to run (their reason starts
# with "order across connections"): not reported when they pass.
either_way() {
    awk -F'\t' -v f="$1" '!/^#/ && NF >= 3 && $1 == f && $3 ~ /^order across connections/ { print $2 }' "$HERE/out_of_scope.txt" | sort -u
}

STATUS=0
printf '%-20s %5s %5s %6s\n' file ok err listed >"$WORK/summary"
for file in "${FILES[@]}"; do
    name=${file//\//_}
    port=$(free_port)
    start_server "$port" "$WORK/$name.server.log"
    # the harness's own server listens on the first free port of the 32
    # from --baseport (it also wants each port + 10000 free): a random
    # block below Linux's ephemeral ports (32768 on), where the system's
    # own outgoing connections cannot take it first; tried again on a new
    # block if one was taken all the same
    for attempt in 1 2 3; do
        rc=0
        base=$((11008 + 32 * (RANDOM % 340)))
        (cd "$WORK/tree" && timeout 900 ./runtest --host 127.0.0.1 --port "$port" --singledb \
            --durable --ignore-encoding --ignore-digest --timeout 300 --baseport "$base" \
            --single "$file") >"$WORK/$name.out" 2>&1 || rc=$?
        grep -q "couldn't open socket: address already in use" "$WORK/$name.out" || break
        echo "redis-suite: $file: the harness's port block at $base was taken (attempt $attempt)" >&2
    done
    stop_server
    sed -i 's/\x1b\[[0-9;]*m//g' "$WORK/$name.out"
    sed -nE 's/^\[ok\]: (.*) \([0-9]+ ms\)$/\1/p' "$WORK/$name.out" | sort -u >"$WORK/$name.ok"
    # an [err] line names the test ("NAME in tests/unit/F.tcl"), or is an
    # error outside any test (its message)
    sed -nE 's/^\[err\]: (.*)$/\1/p' "$WORK/$name.out" \
        | sed -E "s# in tests/$file\.tcl\$##" | sort -u >"$WORK/$name.err"
    listed "$file" >"$WORK/$name.listed"
    n_ok=$(grep -c '^\[ok\]' "$WORK/$name.out" || true)
    n_err=$(grep -c '^\[err\]' "$WORK/$name.out" || true)
    printf '%-20s %5d %5d %6d\n' "$file" "$n_ok" "$n_err" "$(wc -l <"$WORK/$name.listed")" >>"$WORK/summary"
    echo "--- redis-suite: $file ($MODE): $n_ok ok, $n_err err"
    if grep -q '^\[exception\]' "$WORK/$name.out" || ! grep -q 'All tests passed\|following tests failed' "$WORK/$name.out"; then
        echo "redis-suite: $file did not run to its end (runtest exit $rc):" >&2
        grep -A30 '^\[exception\]' "$WORK/$name.out" >&2 || tail -30 "$WORK/$name.out" >&2
        STATUS=1
    fi
    if [[ $MODE == redis ]]; then
        if [[ -s "$WORK/$name.err" ]]; then
            echo "redis-suite: redis-server failed in $file:" >&2
            sed 's/^/    /' "$WORK/$name.err" >&2
            STATUS=1
        fi
        continue
    fi
    unexpected=$(comm -23 "$WORK/$name.err" "$WORK/$name.listed")
    if [[ -n "$unexpected" ]]; then
        echo "redis-suite: failures in $file not in out_of_scope.txt:" >&2
        sed 's/^/    /' <<<"$unexpected" >&2
        # the details of each, from runtest's report
        awk '/^\[err\]:/ { p = 1 } /^\[(ok|skip|ignore)\]:/ { p = 0 } p' "$WORK/$name.out" >&2
        STATUS=1
    fi
    stale=$(comm -12 "$WORK/$name.ok" "$WORK/$name.listed" | comm -23 - <(either_way "$file"))
    if [[ -n "$stale" ]]; then
        echo "redis-suite: listed in out_of_scope.txt but passing in $file (remove them):" >&2
        sed 's/^/    /' <<<"$stale" >&2
        STATUS=1
    fi
done
cat "$WORK/summary"
if [[ -n "${REDIS_SUITE_KEEP:-}" ]]; then
    mkdir -p "$REDIS_SUITE_KEEP" && cp "$WORK"/*.out "$WORK"/*.server.log "$REDIS_SUITE_KEEP"/
fi
exit $STATUS
