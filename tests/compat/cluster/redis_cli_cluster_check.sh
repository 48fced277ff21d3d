#!/usr/bin/env bash
# redis-cli against a three-node Turnstile cluster.
#
# Usage: redis_cli_cluster_check.sh live|down HOST P1 P2 P3
#
# live: `redis-cli -c` sent to a node that does NOT own the key follows the
# MOVED and gets the limiter's answer: RL.ALLOW on keys owned by each node
# admits exactly its limit; RL.ALLOWMANY with hash tags is all-or-nothing;
# without -c the same request answers `MOVED <slot> <host>:<port>` word for
# word; keys in two slots answer CROSSSLOT. Several commands piped into one
# `redis-cli -c` session are routed too.
# down: the node on P3 is dead; redis-cli -c on a live node still answers for
# the live nodes' slots (following MOVED between them), and a key of the dead
# node's slots fails with a connection error instead of hanging.
set -euo pipefail

MODE=${1:?usage: redis_cli_cluster_check.sh live|down HOST P1 P2 P3}
HOST=${2:?}
PORTS=("${3:?}" "${4:?}" "${5:?}")
RUN="$$.$(date +%s)"

fail() {
    echo "redis-cli cluster check FAILED ($MODE): $*" >&2
    exit 1
}

cli() { timeout 10 redis-cli -h "$HOST" "$@"; }

# Slot ranges from CLUSTER NODES of the first live node: "start end port".
mapfile -t RANGES < <(cli -p "${PORTS[0]}" cluster nodes | tr -d '\r' | awk '{
    split($2, hp, "@"); n = split(hp[1], a, ":"); port = a[n]
    for (i = 9; i <= NF; i++) { split($i, r, "-"); print r[1], (r[2] == "" ? r[1] : r[2]), port }
}')
[[ ${#RANGES[@]} -eq 3 ]] || fail "CLUSTER NODES: want 3 ranges, got: ${RANGES[*]}"

owner_of() { # key -> port of the owner
    local slot s e p
    slot=$(cli -p "${PORTS[0]}" cluster keyslot "$1")
    for r in "${RANGES[@]}"; do
        read -r s e p <<<"$r"
        if ((slot >= s && slot <= e)); then
            echo "$p"
            return
        fi
    done
    fail "no owner for $1 (slot $slot)"
}

# key_on PORT PREFIX -> the first PREFIX<n> owned by PORT
key_on() {
    local i k
    for ((i = 0; i < 1000; i++)); do
        k="$2$i"
        if [[ $(owner_of "$k") == "$1" ]]; then
            echo "$k"
            return
        fi
    done
    fail "no key with prefix $2 on $1"
}

# The first N integers of a reply, space-separated (redis-cli prints one
# element per line when stdout is not a terminal).
firstn() { head -"$1" | tr -d '\r' | paste -sd' '; }

expect() { # what got want
    [[ "$2" == "$3" ]] || fail "$1: got '$2', want '$3'"
}

live() {
    local i p other k out slot
    for i in 0 1 2; do
        p=${PORTS[$i]}
        other=${PORTS[$(((i + 1) % 3))]}
        for k in $(key_on "$p" "cli:$RUN:a:") $(key_on "$p" "cli:$RUN:b:"); do
            slot=$(cli -p "$p" cluster keyslot "$k")
            # Without -c: MOVED, word for word.
            expect "RL.ALLOW $k on $other (no -c)" "$(cli -p "$other" RL.ALLOW "$k" 3 1h ALGO log)" \
                "MOVED $slot $HOST:$p"
            # With -c: redis-cli follows the redirection; exactly 3 admitted.
            for n in 0 1 2; do
                expect "RL.ALLOW $k call $n via $other" \
                    "$(cli -c -p "$other" RL.ALLOW "$k" 3 1h ALGO log | firstn 4)" "1 3 $((2 - n)) -1"
            done
            out=$(cli -c -p "$other" RL.ALLOW "$k" 3 1h ALGO log | firstn 4)
            [[ "$out" =~ ^0\ 3\ 0\ [1-9][0-9]*$ ]] || fail "RL.ALLOW $k 4th call: '$out', want '0 3 0 <retry>'"
            # The key is on its owner and nowhere else.
            expect "EXISTS $k on the owner" "$(cli -p "$p" EXISTS "$k")" 1
        done
        echo "  RL.ALLOW via -c on keys owned by $HOST:$p (sent to $HOST:$other): exact"

        # RL.ALLOWMANY with a hash tag owned by this node, sent elsewhere.
        local u a b
        u=$(key_on "$p" "cliu$RUN:")
        a="{$u}:min"
        b="{$u}:day"
        for n in 0 1; do
            out=$(cli -c -p "$other" RL.ALLOWMANY LIMIT "$a" 2 1h ALGO log LIMIT "$b" 5 1h ALGO log)
            expect "RL.ALLOWMANY $u call $n" "$(firstn 3 <<<"$out") $(sed -n 6p <<<"$out")" "1 2 $((1 - n)) 0"
        done
        out=$(cli -c -p "$other" RL.ALLOWMANY LIMIT "$a" 2 1h ALGO log LIMIT "$b" 5 1h ALGO log)
        expect "RL.ALLOWMANY $u 3rd" "$(firstn 3 <<<"$out") $(sed -n 6p <<<"$out")" "0 2 0 0"
        # All-or-nothing: the day limit holds 2, not 3.
        expect "RL.STATE $b count" "$(cli -c -p "$other" RL.STATE "$b" | tr -d '\r' | awk 'prev == "count" { print; exit } { prev = $0 }')" 2
        echo "  RL.ALLOWMANY via -c with hash tag {$u} (owned by $HOST:$p): all-or-nothing"
    done

    # Keys in two slots.
    expect "cross-slot RL.ALLOWMANY" \
        "$(cli -c -p "${PORTS[0]}" RL.ALLOWMANY LIMIT '{a}:x' 1 1h LIMIT '{b}:y' 1 1h)" \
        "CROSSSLOT Keys in request don't hash to the same slot"

    # One session, commands piped in: each is routed to its owner.
    local keys=() cmds=""
    for p in "${PORTS[@]}"; do
        keys+=("$(key_on "$p" "clipipe:$RUN:")")
    done
    for n in 1 2; do
        for k in "${keys[@]}"; do
            cmds+="RL.ALLOW $k 1 1h ALGO log"$'\n'
        done
    done
    # (redis-cli notes each redirection it follows on stdout: drop those.)
    out=$(printf '%s' "$cmds" | cli -c -p "${PORTS[0]}" | tr -d '\r' | grep -v '^-> Redirected' |
        awk 'NR % 5 == 1' | paste -sd' ')
    expect "piped session (allowed flags)" "$out" "1 1 1 0 0 0"
    echo "  one piped redis-cli -c session over keys of all three nodes: routed"
}

down() {
    local dead=${PORTS[2]} k p out rc t0
    for p in "${PORTS[0]}" "${PORTS[1]}"; do
        k=$(key_on "$p" "clidown:$RUN:")
        # Sent to the other live node: MOVED between live nodes still works.
        for other in "${PORTS[0]}" "${PORTS[1]}"; do
            [[ $other == "$p" ]] && continue
            out=$(cli -c -p "$other" RL.ALLOW "$k" 2 1h ALGO log | firstn 3)
            expect "RL.ALLOW $k (owner $p, alive) via $other" "$out" "1 2 1"
            out=$(cli -c -p "$p" RL.ALLOW "$k" 2 1h ALGO log | firstn 3)
            expect "RL.ALLOW $k (owner $p, alive) direct" "$out" "1 2 0"
        done
        echo "  key owned by live node $HOST:$p: answered"
    done
    # A key of the dead node: MOVED to it, then a connection error, quickly.
    k=$(key_on "$dead" "clidead:$RUN:")
    expect "RL.ALLOW $k (dead owner) without -c" "$(cli -p "${PORTS[0]}" RL.ALLOW "$k" 2 1h)" \
        "MOVED $(cli -p "${PORTS[0]}" cluster keyslot "$k") $HOST:$dead"
    t0=$SECONDS
    rc=0
    out=$(timeout 20 redis-cli -c -h "$HOST" -p "${PORTS[0]}" RL.ALLOW "$k" 2 1h 2>&1) || rc=$?
    [[ $rc -ne 124 ]] || fail "redis-cli -c hung on a key of the dead node"
    grep -qiE 'could not connect|connection refused|error' <<<"$out" ||
        fail "a key of the dead node answered '$out' (exit $rc)"
    echo "  key of the dead node: '$(head -1 <<<"$out")' after $((SECONDS - t0)) s"
}

echo "redis-cli cluster check ($MODE) against $HOST:${PORTS[*]} ($(redis-cli --version))"
"$MODE"
echo "redis-cli cluster check ($MODE): OK"
