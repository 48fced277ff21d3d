#!/usr/bin/env bash
# Cluster-mode compatibility checks: three release Turnstile processes on
# free loopback ports, the same --cluster-nodes list on each, then
#   redis-py RedisCluster (RESP2 and RESP3), redis-cli -c, an ioredis Cluster
#   script: RL.ALLOW on many keys and RL.ALLOWMANY with hash tags, limits
#   checked exactly;
#   redis-benchmark --cluster running RL.ALLOW with no errors (3 nodes, then a
#   single-node cluster in the same run for comparison);
#   one node killed with SIGKILL: fresh redis-py, redis-cli -c and ioredis
#   clients still get answers for the other nodes' keys.
#
# Usage: tests/compat/cluster/run.sh path/to/turnstile
#
# Needs redis-cli and redis-benchmark (redis-tools), Python with redis-py
# (PYTHON, default python3) and Node with ioredis (tests/compat/node after
# `npm ci`, or IOREDIS=/path/to/node_modules/ioredis). Loopback only; every
# process started here is killed on exit.
set -euo pipefail

BIN=${1:?usage: tests/compat/cluster/run.sh path/to/turnstile}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
HOST=127.0.0.1
export IOREDIS=${IOREDIS:-$HERE/../node/node_modules/ioredis}

fail() {
    echo "cluster compat FAILED: $*" >&2
    exit 1
}

[[ -x "$BIN" ]] || fail "$BIN is not an executable"
for tool in redis-cli redis-benchmark node timeout "$PYTHON"; do
    command -v "$tool" >/dev/null || fail "$tool not found"
done
"$PYTHON" -c 'import redis.cluster' 2>/dev/null || fail "$PYTHON has no redis-py (pip install redis)"
[[ -d "$IOREDIS" ]] || fail "ioredis not found at $IOREDIS (run 'npm ci' in tests/compat/node, or set IOREDIS)"

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Free loopback ports, distinct, below the ephemeral range (benchlib.free_ports).
free_ports() {
    "$PYTHON" - "$1" "$HERE/../../../benches" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
from benchlib import free_ports
print(" ".join(str(p) for p in free_ports(int(sys.argv[1]))))
EOF
}

# start_node PORT NODELIST: starts one node in the background, records its pid
# in PIDS and in the variable LAST_PID.
start_node() {
    local port=$1 list=$2
    "$BIN" --bind "$HOST" --port "$port" --cluster-nodes "$list" --metrics-addr off \
        --log-level warn >"$TMP/node-$port.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# wait_ping PORT PID: up to 10 s for PONG; fails early if the process died.
wait_ping() {
    local port=$1 pid=$2 i
    for ((i = 0; i < 100; i++)); do
        if [[ "$(timeout 2 redis-cli -h "$HOST" -p "$port" ping 2>/dev/null)" == PONG ]]; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || fail "node on port $port exited:
$(cat "$TMP/node-$port.log")"
        sleep 0.1
    done
    fail "node on port $port did not answer PING within 10 s:
$(cat "$TMP/node-$port.log")"
}

check() {
    local name=$1
    shift
    local t0=$SECONDS
    echo "--- cluster compat: $name"
    if ! "$@"; then
        fail "$name (see above)"
    fi
    echo "--- cluster compat: $name passed ($((SECONDS - t0)) s)"
}

# Three nodes, plus one port for the single-node comparison.
read -r P1 P2 P3 PSINGLE < <(free_ports 4)
LIST="$HOST:$P1,$HOST:$P2,$HOST:$P3"
NODE_PIDS=()
for port in "$P1" "$P2" "$P3"; do
    start_node "$port" "$LIST"
    NODE_PIDS+=("$LAST_PID")
done
for i in 0 1 2; do
    port=$(eval echo "\$P$((i + 1))")
    wait_ping "$port" "${NODE_PIDS[$i]}"
done
echo "cluster compat: 3 nodes up: $LIST ($("$BIN" --version 2>/dev/null || echo turnstile))"
[[ "$(timeout 5 redis-cli -h "$HOST" -p "$P1" cluster info | tr -d '\r' | grep '^cluster_state:')" == cluster_state:ok ]] ||
    fail "CLUSTER INFO does not say cluster_state:ok"

check "redis-cli --cluster check" bash -c "
    out=\$(timeout 20 redis-cli --cluster check $HOST:$P1 2>&1) || { echo \"\$out\"; exit 1; }
    echo \"\$out\" | sed -e 's/\x1b\[[0-9;]*m//g' | grep -E '^\[(OK|ERR|WARNING)\]'
    ! echo \"\$out\" | grep -qE '\[(ERR|WARNING)\]'"
check "redis-py RedisCluster" timeout 120 "$PYTHON" "$HERE/redis_py_cluster_check.py" live "$HOST" "$P1" "$P2" "$P3"
check "redis-cli -c" timeout 120 bash "$HERE/redis_cli_cluster_check.sh" live "$HOST" "$P1" "$P2" "$P3"
check "ioredis Cluster" timeout 120 node "$HERE/ioredis_cluster_check.js" live "$HOST" "$P1" "$P2" "$P3"

# redis-benchmark --cluster: three nodes, then one node owning every slot,
# with -n 20000 and again with -n 200000 (its timing comes in 250 ms steps
# with client threads, see benchmark_cluster_check.sh: the longer run makes
# that step small).
start_node "$PSINGLE" "$HOST:$PSINGLE"
SINGLE_PID=$LAST_PID
wait_ping "$PSINGLE" "$SINGLE_PID"
for n in 20000 200000; do
    check "redis-benchmark --cluster (3 nodes, -n $n)" env N=$n timeout 300 \
        bash "$HERE/benchmark_cluster_check.sh" "$HOST" "$P1" "3 nodes" "$TMP/bench.txt"
    check "redis-benchmark (1-node cluster, -n $n)" env N=$n timeout 300 \
        bash "$HERE/benchmark_cluster_check.sh" "$HOST" "$PSINGLE" "1 node" "$TMP/bench.txt"
done
kill -9 "$SINGLE_PID" 2>/dev/null || true
wait "$SINGLE_PID" 2>/dev/null || true
echo "cluster compat: RL.ALLOW throughput, redis-benchmark, same run ($(nproc 2>/dev/null || echo '?') CPUs):"
cat "$TMP/bench.txt"

# Node 3 (slots 10923-16383) goes down hard.
kill -9 "${NODE_PIDS[2]}"
wait "${NODE_PIDS[2]}" 2>/dev/null || true
echo "cluster compat: killed node $HOST:$P3 (SIGKILL)"
check "redis-py after a node died" timeout 120 "$PYTHON" "$HERE/redis_py_cluster_check.py" down "$HOST" "$P1" "$P2" "$P3"
check "redis-cli -c after a node died" timeout 120 bash "$HERE/redis_cli_cluster_check.sh" down "$HOST" "$P1" "$P2" "$P3"
check "ioredis after a node died" timeout 120 node "$HERE/ioredis_cluster_check.js" down "$HOST" "$P1" "$P2" "$P3"
echo "--- cluster compat: all checks passed"
