#!/usr/bin/env bash
# Where the second worker's cost goes: the server's CPU, context switches,
# futex calls (one worker waking another), epoll waits and all system
# calls per request, for `PING` without pipelining (redis-benchmark -c 50),
# under --threads 1 and the default two workers. Counts, not timings: they
# hold on a noisy machine. Needs perf (linux-perf) and redis-benchmark.
#
#   bash benches/runtime_tax.sh [BINARY]      (default target/release/turnstile)
#   N=400000 THREADS="1 2 4" bash benches/runtime_tax.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-$ROOT/target/release/turnstile}
N=${N:-400000}
[[ -x "$BIN" ]] || { echo "runtime_tax: $BIN is missing: cargo build --release" >&2; exit 2; }
for tool in perf redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "runtime_tax: $tool not found" >&2; exit 2; }
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for t in ${THREADS:-1 2}; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$BIN" --port "$port" --threads "$t" --metrics-addr off --log-level warn &
    pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    perf stat -x, -o "$OUT/$t.csv" -p "$pid" -e task-clock,context-switches,cpu-migrations,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,raw_syscalls:sys_enter &
    perf_pid=$!
    sleep 0.3
    redis-benchmark -p "$port" -c 50 -n "$N" -t ping_mbulk -q >/dev/null
    kill -INT "$perf_pid"
    wait "$perf_pid" 2>/dev/null || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "--threads $t, per request ($N requests):"
    awk -F, -v n="$N" '/^[0-9]/ {
        v = $1 / n; name = $3
        if (name == "task-clock") { v *= 1000; name = "server CPU (us)" }
        printf "  %-32s %8.3f\n", name, v }' "$OUT/$t.csv"
done
