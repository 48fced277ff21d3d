#!/usr/bin/env bash
# redis-benchmark --cluster against a Turnstile cluster, running RL.ALLOW.
#
# Usage: [N=20000] benchmark_cluster_check.sh HOST PORT LABEL [SUMMARY_FILE]
#
# Runs `redis-benchmark --cluster -p PORT -n 20000 -q RL.ALLOW
# k:{tag}:__rand_int__ 100 60` (redis-benchmark replaces {tag} with a hash tag
# per primary, so the load is spread over every node; against a one-node
# cluster, which redis-benchmark --cluster refuses, the same command runs
# without --cluster) and fails if it exits
# non-zero, prints any error, or prints no final throughput line. Checks with
# INFO commandstats that every primary served RL.ALLOW calls and that no call
# failed. Prints the throughput line (and appends it, labelled, to
# SUMMARY_FILE). A compatibility check: numbers are printed, never compared.
set -euo pipefail

HOST=${1:?usage: benchmark_cluster_check.sh HOST PORT LABEL [SUMMARY_FILE]}
PORT=${2:?usage: benchmark_cluster_check.sh HOST PORT LABEL [SUMMARY_FILE]}
LABEL=${3:-cluster}
SUMMARY=${4:-}
N=${N:-20000}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
    echo "redis-benchmark --cluster check ($LABEL) FAILED: $*" >&2
    exit 1
}

# The primaries, as `host:port`, from CLUSTER NODES.
mapfile -t NODES < <(timeout 5 redis-cli -h "$HOST" -p "$PORT" cluster nodes | tr -d '\r' |
    awk '$3 ~ /master/ { split($2, a, "@"); print a[1] }')
[[ ${#NODES[@]} -gt 0 ]] || fail "CLUSTER NODES lists no primaries"

# cmdstat_rl.allow calls and failed_calls (0 0 if never called).
stats() {
    local hp=$1
    timeout 5 redis-cli -h "${hp%:*}" -p "${hp##*:}" info commandstats | tr -d '\r' |
        awk -F'[:=,]' '$1 == "cmdstat_rl.allow" {
            for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
            c = v["calls"]; f = v["failed_calls"]
        }
        END { print (c == "" ? 0 : c), (f == "" ? 0 : f) }'
}
declare -A CALLS0 FAILED0
for hp in "${NODES[@]}"; do
    read -r CALLS0[$hp] FAILED0[$hp] < <(stats "$hp")
done

# redis-benchmark --cluster refuses a cluster of one node ("Invalid cluster:
# 1 node(s)."); a single node owns every slot, so the same command without
# --cluster is the same load on it ({tag} stays a literal hash tag).
# --cluster also runs one client thread per primary, and a threaded
# redis-benchmark only notices the end of the run on its 250 ms progress
# timer, so its elapsed time (and requests per second) come in steps of
# 250 ms: the single node gets the same --threads (BENCH_THREADS, default 3)
# so both numbers are measured alike.
CLUSTER_FLAG=(--cluster)
if [[ ${#NODES[@]} -lt 2 ]]; then
    CLUSTER_FLAG=(--threads "${BENCH_THREADS:-3}")
fi
echo "  redis-benchmark ${CLUSTER_FLAG[*]} -h $HOST -p $PORT -n $N -q RL.ALLOW k:{tag}:__rand_int__ 100 60   ($LABEL: ${NODES[*]})"
rc=0
# A server that drops a reply makes redis-benchmark wait forever: bound it.
timeout 120 redis-benchmark "${CLUSTER_FLAG[@]}" -h "$HOST" -p "$PORT" -n "$N" -q \
    RL.ALLOW 'k:{tag}:__rand_int__' 100 60 >"$TMP/raw" 2>&1 || rc=$?
# Progress lines end in carriage returns: keep what a terminal would show.
tr '\r' '\n' <"$TMP/raw" | sed -e 's/[[:space:]]*$//' | grep -v '^$' >"$TMP/out" || true
[[ $rc == 0 ]] || fail "redis-benchmark exited $rc:
$(tail -20 "$TMP/out")"
if grep -iE 'error|err |moved|crossslot|clusterdown|warn|could not|refused|reset by peer' "$TMP/out" >"$TMP/bad"; then
    fail "redis-benchmark printed errors:
$(sort -u "$TMP/bad" | head -20)"
fi
grep -E '^(Cluster has|Master [0-9])' "$TMP/out" | sed 's/^/    /' || true
line=$(grep 'requests per second' "$TMP/out" | tail -1 || true)
[[ -n "$line" ]] || fail "no final throughput line; output:
$(tail -20 "$TMP/out")"
rps=$(sed -E 's/^.*: ([0-9.]+) requests per second.*$/\1/' <<<"$line")
if ! [[ "$rps" =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v r="$rps" 'BEGIN { exit !(r > 0) }'; then
    fail "no throughput in '$line'"
fi

# Every primary served some of the calls, none failed, and all were counted.
total=0
for hp in "${NODES[@]}"; do
    read -r calls failed < <(stats "$hp")
    d=$((calls - CALLS0[$hp]))
    df=$((failed - FAILED0[$hp]))
    echo "    $hp: $d RL.ALLOW calls, $df failed"
    [[ $d -gt 0 ]] || fail "$hp served no RL.ALLOW calls: the load was not spread"
    [[ $df -eq 0 ]] || fail "$hp: $df RL.ALLOW calls failed"
    total=$((total + d))
done
[[ $total -ge $N ]] || fail "only $total RL.ALLOW calls reached the nodes, want $N"

echo "    $LABEL: $line"
if [[ -n "$SUMMARY" ]]; then
    echo "  $LABEL (${#NODES[@]} primary node(s), redis-benchmark ${CLUSTER_FLAG[*]}, -n $N): $rps requests per second ($line)" >>"$SUMMARY"
fi
# Every node still answers afterwards.
for hp in "${NODES[@]}"; do
    [[ "$(timeout 5 redis-cli -h "${hp%:*}" -p "${hp##*:}" ping)" == PONG ]] || fail "$hp does not answer PING after the benchmark"
done
echo "redis-benchmark --cluster check ($LABEL): OK"
