#!/usr/bin/env bash
# redis-cli compatibility check for Turnstile.
#
# Usage: redis_cli_check.sh PORT [HOST]
#
# redis-cli exits 0 even when the server answers with an error, so every step
# here compares the printed output with what Redis prints. The check runs
# FLUSHALL first: point it only at a server you own.
set -euo pipefail

PORT=${1:?usage: redis_cli_check.sh PORT [HOST]}
HOST=${2:-127.0.0.1}
CLI=(redis-cli -h "$HOST" -p "$PORT")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
    echo "redis-cli check FAILED: $*" >&2
    exit 1
}

# expect DESCRIPTION EXPECTED_OUTPUT redis-cli-args...
expect() {
    local what=$1 want=$2
    shift 2
    local got
    got=$("${CLI[@]}" "$@" 2>&1) || fail "$what: redis-cli $* exited $?: $got"
    if [[ "$got" != "$want" ]]; then
        fail "$what: redis-cli $*
--- got:
$got
--- want:
$want"
    fi
    echo "  ok: $what"
}

# contains DESCRIPTION NEEDLE redis-cli-args...   (output must contain NEEDLE, no error line)
contains() {
    local what=$1 needle=$2
    shift 2
    local got
    got=$("${CLI[@]}" "$@" 2>&1) || fail "$what: redis-cli $* exited $?: $got"
    if grep -qE '^(\(error\) )?(ERR|WRONGTYPE|NOAUTH|WRONGPASS)' <<<"$got"; then
        fail "$what: redis-cli $* answered an error: $got"
    fi
    grep -qF -- "$needle" <<<"$got" || fail "$what: redis-cli $* output lacks '$needle':
$got"
    echo "  ok: $what"
}

echo "redis-cli check against $HOST:$PORT ($(redis-cli --version))"

expect "FLUSHALL" "OK" flushall
expect "PING" "PONG" ping
expect "PING with message" "hello" ping hello

# default output when stdout is not a tty is raw
expect "SET" "OK" set a 1
expect "GET" "1" get a
expect "INCR" "2" incr a
expect "INCRBY" "12" incrby a 10
expect "GET missing key (raw)" "" get nope

# --no-raw: the formatting a terminal user sees
expect "--no-raw SET" "OK" --no-raw set s hello
expect "--no-raw GET" '"hello"' --no-raw get s
expect "--no-raw INCR" "(integer) 13" --no-raw incr a
expect "--no-raw GET missing" "(nil)" --no-raw get nope
expect "--no-raw MGET" '1) "hello"
2) (nil)
3) "13"' --no-raw mget s nope a
expect "--no-raw unknown command" \
    "(error) ERR unknown command 'foo', with args beginning with: 'bar' " --no-raw foo bar
expect "--no-raw wrong arity" \
    "(error) ERR wrong number of arguments for 'get' command" --no-raw get
expect "--no-raw INCR non-integer" \
    "(error) ERR value is not an integer or out of range" --no-raw incr s
expect "--no-raw EXISTS" "(integer) 2" --no-raw exists a s nope
expect "--no-raw TTL without expiry" "(integer) -1" --no-raw ttl a
expect "--no-raw EXPIRE" "(integer) 1" --no-raw expire a 100
got=$("${CLI[@]}" --no-raw ttl a)
[[ "$got" =~ ^\(integer\)\ (9[89]|100)$ ]] || fail "--no-raw TTL after EXPIRE 100: got '$got'"
echo "  ok: --no-raw TTL after EXPIRE"
# --raw
expect "--raw GET" "hello" --raw get s
expect "--raw INCR" "14" --raw incr a
expect "--raw MGET" "hello

14" --raw mget s nope a
expect "--raw unknown command" "ERR unknown command 'foo', with args beginning with: 'bar' " --raw foo bar
expect "--raw DEL" "2" --raw del a s

# RESP3
contains "-3 HELLO 3 proto" '"proto" => (integer) 3' -3 --no-raw hello 3
contains "-3 HELLO 3 server" '"server" => "redis"' -3 --no-raw hello 3
contains "-3 HELLO 3 version" '"version" => "' -3 --no-raw hello 3
expect "-3 GET missing key" "(nil)" -3 --no-raw get nope
expect "-3 SET" "OK" -3 --no-raw set r3 v
expect "-3 GET" '"v"' -3 --no-raw get r3
expect "-3 INCR" "(integer) 1" -3 --no-raw incr r3n
expect "-3 unknown command" \
    "(error) ERR unknown command 'foo', with args beginning with: " -3 --no-raw foo

# piped input: one command per line on stdin
got=$(printf 'SET a 1\nGET a\nINCR a\nDEL a\n' | "${CLI[@]}" 2>&1) || fail "piped input: exit $?"
[[ "$got" == $'OK\n1\n2\n1' ]] || fail "piped input: got
$got"
echo "  ok: piped input"

# --pipe mass insertion: 10 000 SET commands in RESP
python3 - "$TMP/mass.resp" <<'EOF'
import sys
with open(sys.argv[1], "wb") as f:
    for i in range(10000):
        k = b"k:%d" % i
        v = b"value-%d" % i
        f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
EOF
got=$("${CLI[@]}" --pipe <"$TMP/mass.resp" 2>&1) || fail "--pipe exited $?: $got"
grep -qx 'errors: 0, replies: 10000' <<<"$got" || fail "--pipe: expected 'errors: 0, replies: 10000', got
$got"
echo "  ok: --pipe mass insertion of 10000 SETs"
expect "GET a --pipe key" "value-9999" get k:9999
expect "DBSIZE after --pipe" "10002" dbsize   # k:0..9999, r3, r3n

# --scan
"${CLI[@]}" --scan --pattern 'k*' >"$TMP/scan.out" 2>&1 || fail "--scan exited $?: $(head "$TMP/scan.out")"
n=$(wc -l <"$TMP/scan.out")
u=$(sort -u "$TMP/scan.out" | wc -l)
[[ "$n" == 10000 ]] || fail "--scan --pattern 'k*': $n lines, want 10000 ($u distinct)"
[[ "$u" == 10000 ]] || fail "--scan --pattern 'k*': $u distinct keys, want 10000"
if grep -qv '^k:[0-9]*$' "$TMP/scan.out"; then
    fail "--scan --pattern 'k*' returned keys outside the pattern: $(grep -v '^k:[0-9]*$' "$TMP/scan.out" | head -3)"
fi
echo "  ok: --scan --pattern 'k*' (10000 keys, each once)"
n=$("${CLI[@]}" --scan --pattern 'r3*' | wc -l)
[[ "$n" == 2 ]] || fail "--scan --pattern 'r3*': $n keys, want 2"
echo "  ok: --scan --pattern 'r3*'"

# INFO, COMMAND DOCS, CONFIG GET, misc
contains "INFO server" "redis_version:" info server
contains "INFO keyspace" "db0:keys=10002," info keyspace
contains "COMMAND DOCS GET" "summary" command docs get
contains "COMMAND INFO GET" "get" command info get
expect "COMMAND GETKEYS MSET" $'a\nc' command getkeys mset a b c d
expect "CONFIG GET maxclients" $'maxclients\n10000' config get maxclients
got=$(printf 'CLIENT SETNAME cli-check\nCLIENT LIST\nCLIENT GETNAME\n' | "${CLI[@]}" 2>&1) || fail "CLIENT LIST: exit $?"
grep -qE '^OK$' <<<"$got" || fail "CLIENT SETNAME via pipe: $got"
grep -qE '^id=[0-9]+ addr=[0-9.]+:[0-9]+ .*name=cli-check ' <<<"$got" || fail "CLIENT LIST lacks id/addr/name=cli-check: $got"
grep -qx 'cli-check' <<<"$got" || fail "CLIENT GETNAME: $got"
echo "  ok: CLIENT SETNAME / LIST / GETNAME"
got=$("${CLI[@]}" time)
[[ "$got" =~ ^[0-9]{10,}$'\n'[0-9]{1,6}$ ]] || fail "TIME: want seconds and microseconds, got '$got'"
now=$(date +%s); secs=${got%%$'\n'*}
(( secs >= now - 5 && secs <= now + 5 )) || fail "TIME: $secs is not near the wall clock $now"
echo "  ok: TIME"
expect "SELECT 0" "OK" select 0
expect "FLUSHALL" "OK" flushall
expect "DBSIZE after FLUSHALL" "0" dbsize

echo "redis-cli check: OK"
