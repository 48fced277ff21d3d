#!/usr/bin/env bash
# TLS with real clients: redis-cli --tls and redis-py (ssl=True) against
# target/release/turnstile, with certificates made here by the openssl CLI.
#
# Usage: tls_check.sh   (no arguments; env PYTHON: an interpreter with
# redis-py, default python3)
#
#   1. a throwaway CA, a server certificate for 127.0.0.1/localhost and a
#      client certificate; the server keys are EC in SEC1 form and RSA in
#      PKCS#1 form, so both non-PKCS#8 encodings are read
#   2. server A: --tls-port, no client certificates: redis-cli and redis-py
#      PING and RL.ALLOW over TLS; the plaintext port still answers
#   3. server B: with --tls-ca-cert-file: the same with a client
#      certificate; without one, redis-cli and redis-py are refused
#   4. SIGTERM both; each must exit 0
#
# Every client call is bounded by `timeout`, so the script cannot hang.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN="$ROOT/target/release/turnstile"
PYTHON=${PYTHON:-python3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-tls.XXXXXX")
PIDS=()

cleanup() {
    local rc=$? pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ $rc != 0 ]]; then
        for log in "$TMP"/*.log; do
            [[ -s "$log" ]] && { echo "=== $log" >&2; tail -n 20 "$log" >&2; }
        done
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "TLS check FAILED: $*" >&2
    exit 1
}

[[ -x "$BIN" ]] || fail "no binary at $BIN (cargo build --release first)"
command -v openssl >/dev/null || fail "openssl not installed"
# (not `| grep -q`: with pipefail, redis-cli's SIGPIPE would fail the test)
CLI_HELP=$(redis-cli --help 2>&1 || true)
grep -q -- '--tls' <<<"$CLI_HELP" || fail "this redis-cli was built without TLS"
"$PYTHON" -c 'import redis' 2>/dev/null || fail "$PYTHON has no redis-py"

# --- certificates ------------------------------------------------------------
cd "$TMP"
ossl() { openssl "$@" 2>>openssl.log || fail "openssl $1 failed: $(tail -n 5 openssl.log)"; }
ossl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout ca.key -out ca.crt -days 2 -subj "/CN=turnstile tls_check CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
# sign NAME EXTENSIONS: NAME.key (already made) -> NAME.crt signed by the CA
sign() {
    ossl req -new -key "$1.key" -subj "/CN=turnstile $1" -out "$1.csr"
    printf '%s\n' "$2" >"$1.ext"
    ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile "$1.ext" -out "$1.crt"
}
SERVER_EXT=$'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'
ossl ecparam -name prime256v1 -genkey -noout -out server-ec.key # SEC1
sign server-ec "$SERVER_EXT"
ossl genrsa -traditional -out server-rsa.key 2048 # PKCS#1
sign server-rsa "$SERVER_EXT"
ossl genrsa -out client.key 2048
sign client "extendedKeyUsage=clientAuth"
grep -q 'BEGIN EC PRIVATE KEY' server-ec.key || fail "server-ec.key is not SEC1"
grep -q 'BEGIN RSA PRIVATE KEY' server-rsa.key || fail "server-rsa.key is not PKCS#1"

# --- servers -----------------------------------------------------------------
# start NAME ARGS...: starts turnstile with plaintext and TLS on free ports;
# sets PLAIN and TLS from its log lines.
start() {
    local name=$1 log="$TMP/$1.log" pid clean
    shift
    # The log exists before the server does: the loop below may read it
    # before the background shell has opened it (sed would fail, and
    # set -e end the check).
    : >"$log"
    NO_COLOR=1 "$BIN" --bind 127.0.0.1 --port 0 --metrics-addr 127.0.0.1:0 --tls-port 0 "$@" \
        >"$log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    PLAIN="" TLS=""
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || fail "$name exited during startup: $(tail -n 5 "$log")"
        clean=$(sed 's/\x1b\[[0-9;]*m//g' "$log")
        PLAIN=$(sed -nE 's/.*turnstile listening local=127\.0\.0\.1:([0-9]+).*/\1/p' <<<"$clean" | head -n 1)
        TLS=$(sed -nE 's/.*turnstile listening \(tls\) local=127\.0\.0\.1:([0-9]+).*/\1/p' <<<"$clean" | head -n 1)
        [[ -n "$PLAIN" && -n "$TLS" ]] && break
        sleep 0.1
    done
    [[ -n "$PLAIN" && -n "$TLS" ]] || fail "$name: no listening lines within 10 s"
    echo "$name: plaintext port $PLAIN, TLS port $TLS (pid $pid)"
}

cli() { timeout 10 redis-cli -h 127.0.0.1 "$@" 2>&1 || true; }

# check_cli LABEL ARGS...: PING is PONG and RL.ALLOW admits, over TLS.
check_cli() {
    local label=$1 got
    shift
    got=$(cli "$@" PING)
    [[ "$got" == PONG ]] || fail "$label: redis-cli PING said: $got"
    got=$(cli "$@" RL.ALLOW "cli:$label" 10 60 | head -n 3 | paste -sd ' ')
    [[ "$got" == "1 10 9" ]] || fail "$label: redis-cli RL.ALLOW said: $got"
    echo "  redis-cli $label: PING -> PONG, RL.ALLOW -> $got"
}

# check_py LABEL PORT [CERT KEY]: redis-py over TLS, PING and RL.ALLOW.
check_py() {
    timeout 30 "$PYTHON" - "$@" <<'PY' || fail "redis-py $1 failed"
import sys, redis
label, port = sys.argv[1], int(sys.argv[2])
cert = dict(ssl_certfile=sys.argv[3], ssl_keyfile=sys.argv[4]) if len(sys.argv) > 3 else {}
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs="ca.crt",
                ssl_check_hostname=True, socket_timeout=10, **cert)
assert r.ping() is True
reply = r.execute_command("RL.ALLOW", f"py:{label}", 10, 60)
if isinstance(reply, dict):  # RESP3, the default of newer redis-py
    reply = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
    reply = [reply[k] for k in ("allowed", "limit", "remaining")]
assert list(reply[:3]) == [1, 10, 9], reply
print(f"  redis-py {redis.__version__} {label}: PING -> True, RL.ALLOW -> {list(reply[:3])}")
PY
}

# refused_py PORT: redis-py without a client certificate gets no reply.
refused_py() {
    timeout 30 "$PYTHON" - "$@" <<'PY' || fail "redis-py without a client certificate was not refused"
import sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), ssl=True, ssl_ca_certs="ca.crt",
                socket_timeout=10)
try:
    r.ping()
except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
    print(f"  redis-py without a client certificate: refused ({type(e).__name__})")
else:
    sys.exit("served without a client certificate")
PY
}

echo "TLS check: $(redis-cli --version), $(openssl version)"

start A --tls-cert-file server-ec.crt --tls-key-file server-ec.key
A_PID=${PIDS[-1]}
check_cli tls --tls --cacert ca.crt -p "$TLS"
check_py tls "$TLS"
got=$(cli -p "$PLAIN" PING)
[[ "$got" == PONG ]] || fail "plaintext port $PLAIN next to TLS said: $got"
echo "  redis-cli plaintext port: PONG"
got=$(cli --tls -p "$TLS" PING)
[[ "$got" != PONG ]] || fail "redis-cli trusted the server without its CA"
echo "  redis-cli without --cacert: refused (server certificate unknown)"

start B --tls-cert-file server-rsa.crt --tls-key-file server-rsa.key --tls-ca-cert-file ca.crt
B_PID=${PIDS[-1]}
check_cli mtls --tls --cacert ca.crt --cert client.crt --key client.key -p "$TLS"
check_py mtls "$TLS" client.crt client.key
got=$(cli --tls --cacert ca.crt -p "$TLS" PING)
[[ "$got" != PONG ]] || fail "redis-cli without a client certificate was served"
echo "  redis-cli without a client certificate: refused ($(head -n 1 <<<"$got"))"
refused_py "$TLS"

for pid in "$A_PID" "$B_PID"; do
    kill -TERM "$pid"
    rc=0
    timeout 10 tail --pid="$pid" -f /dev/null || fail "turnstile $pid did not exit within 10 s of SIGTERM"
    wait "$pid" || rc=$?
    [[ $rc == 0 ]] || fail "turnstile $pid exited $rc after SIGTERM"
done
PIDS=()
echo "TLS check passed"
