#!/usr/bin/env bash
# Runs the middleware examples' tests against a running Turnstile, with the
# pinned client versions and with the latest releases, each over RESP2 and
# RESP3:
#
#   examples/run_tests.sh PORT
#
#   Express (npm ci, node --test test.js, TURNSTILE_PROTOCOL=2|3):
#     pinned  examples/express/package-lock.json         ioredis 5.x: RESP2 only
#             (ioredis 5 cannot speak RESP3; the RESP3 run is reported as
#             not applicable, not as passed)
#     latest  examples/express/latest/package-lock.json  ioredis 6.x: RESP2, RESP3
#             (the example's .js files are copied to a temporary directory
#             that uses latest/node_modules)
#   ASGI (pip install into a venv, python test_app.py PORT, TURNSTILE_PROTOCOL=2|3),
#   and the LLM gateway in llm-gateway/ (python test_gateway.py PORT, same venvs):
#     pinned  asgi/requirements.txt         redis-py 5.x: RESP2, RESP3
#             venv $EXAMPLES_VENV (default examples/asgi/.venv)
#     latest  asgi/requirements-latest.txt  redis-py 8.x: RESP2, RESP3
#             venv $EXAMPLES_VENV_LATEST (default: $EXAMPLES_VENV-latest)
#
# "latest" is pinned too (lock file, ==), so runs are reproducible; refresh
# it when a new client release comes out (see examples/README.md).
#
# Every run goes on even if an earlier one failed; the exit status is 1 if any
# failed, 2 if nothing answers PING on PORT. SKIP_INSTALL=1 skips npm ci and
# pip (for reruns). Every test run uses its own key prefix, so reruns against
# the same server do not collide, and it RL.RESETs its keys at the end.
set -uo pipefail

PORT=${1:-}
if [[ ! $PORT =~ ^[0-9]+$ ]]; then
    echo "usage: $0 PORT   (the port of a running Turnstile on 127.0.0.1)" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${EXAMPLES_VENV:-$HERE/asgi/.venv}
VENV_LATEST=${EXAMPLES_VENV_LATEST:-$VENV-latest}
PYTHON3=${PYTHON3:-python3}
T0=$SECONDS

# Is anything answering PING on PORT? (bash /dev/tcp: no redis-cli needed)
ping_turnstile() {
    local reply
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || return 1
    printf '*1\r\n$4\r\nPING\r\n' >&3
    IFS= read -r -t 2 reply <&3
    exec 3<&- 3>&-
    [[ $reply == "+PONG"* ]]
}
if ! ping_turnstile 2>/dev/null; then
    echo "no Turnstile answering PING on 127.0.0.1:$PORT" >&2
    exit 2
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/turnstile-examples.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

results=()   # "PASS|FAIL|N/A  label"
failed=0
record() {   # record STATUS LABEL
    results+=("$(printf '%-5s %s' "$1" "$2")")
    [[ $1 == FAIL ]] && failed=$((failed + 1))
    return 0
}

npm_ci() {   # npm_ci DIR
    [[ ${SKIP_INSTALL:-} == 1 ]] && return 0
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
}
pkg_version() {   # pkg_version LOCKFILE NAME: the version npm ci installs
    "${NODE:-node}" -e 'const l = require(process.argv[1]); console.log(l.packages["node_modules/" + process.argv[2]].version)' "$1" "$2"
}
venv_install() {   # venv_install VENV REQUIREMENTS
    if [[ ! -x $1/bin/python ]]; then
        "$PYTHON3" -m venv "$1" || return 1
    fi
    [[ ${SKIP_INSTALL:-} == 1 ]] && return 0
    "$1/bin/python" -m pip install -q --disable-pip-version-check -r "$2"
}
pin() {   # pin REQUIREMENTS NAME
    grep -E "^$2==" "$1" | cut -d= -f3
}

run_express() {   # run_express DIR LABEL PROTOCOL
    local label="express, $2, RESP$3"
    echo
    echo "=== [+$((SECONDS - T0))s] $label"
    if (cd "$1" && TURNSTILE_PORT=$PORT TURNSTILE_PROTOCOL=$3 timeout 60 node --test --test-reporter=spec test.js); then
        record PASS "$label"
    else
        echo "=== FAILED: $label" >&2
        record FAIL "$label"
    fi
}
run_asgi() {   # run_asgi VENV LABEL PROTOCOL
    local label="asgi, $2, RESP$3"
    echo
    echo "=== [+$((SECONDS - T0))s] $label"
    if (cd "$HERE/asgi" && TURNSTILE_PROTOCOL=$3 timeout 60 "$1/bin/python" test_app.py "$PORT"); then
        record PASS "$label"
    else
        echo "=== FAILED: $label" >&2
        record FAIL "$label"
    fi
}

run_llm() {   # run_llm VENV LABEL PROTOCOL
    local label="llm-gateway, $2, RESP$3"
    echo
    echo "=== [+$((SECONDS - T0))s] $label"
    if (cd "$HERE/llm-gateway" && TURNSTILE_PROTOCOL=$3 timeout 60 "$1/bin/python" test_gateway.py "$PORT"); then
        record PASS "$label"
    else
        echo "=== FAILED: $label" >&2
        record FAIL "$label"
    fi
}

# --- Express, pinned --------------------------------------------------------
EXPRESS=$HERE/express
IOREDIS_PINNED=$(pkg_version "$EXPRESS/package-lock.json" ioredis)
echo "=== [+$((SECONDS - T0))s] examples/express: npm ci (ioredis $IOREDIS_PINNED, express $(pkg_version "$EXPRESS/package-lock.json" express))"
if npm_ci "$EXPRESS"; then
    run_express "$EXPRESS" "pinned ioredis $IOREDIS_PINNED" 2
    if [[ ${IOREDIS_PINNED%%.*} -ge 6 ]]; then
        run_express "$EXPRESS" "pinned ioredis $IOREDIS_PINNED" 3
    else
        record N/A "express, pinned ioredis $IOREDIS_PINNED, RESP3 (ioredis 5 speaks RESP2 only; RESP3 runs with ioredis 6 below)"
    fi
else
    echo "=== FAILED: npm ci in examples/express" >&2
    record FAIL "express, pinned ioredis $IOREDIS_PINNED: npm ci"
fi

# --- Express, latest ioredis ------------------------------------------------
LATEST=$EXPRESS/latest
IOREDIS_LATEST=$(pkg_version "$LATEST/package-lock.json" ioredis)
echo
echo "=== [+$((SECONDS - T0))s] examples/express/latest: npm ci (ioredis $IOREDIS_LATEST, express $(pkg_version "$LATEST/package-lock.json" express))"
if npm_ci "$LATEST"; then
    # The example itself, resolving its packages from latest/node_modules.
    mkdir -p "$TMP/express-latest"
    cp "$EXPRESS"/{middleware,app,test}.js "$TMP/express-latest/"
    ln -s "$LATEST/node_modules" "$TMP/express-latest/node_modules"
    run_express "$TMP/express-latest" "latest ioredis $IOREDIS_LATEST" 2
    run_express "$TMP/express-latest" "latest ioredis $IOREDIS_LATEST" 3
else
    echo "=== FAILED: npm ci in examples/express/latest" >&2
    record FAIL "express, latest ioredis $IOREDIS_LATEST: npm ci"
fi

# --- ASGI, pinned and latest redis-py -----------------------------------------
for which in pinned latest; do
    if [[ $which == pinned ]]; then
        venv=$VENV req=$HERE/asgi/requirements.txt
    else
        venv=$VENV_LATEST req=$HERE/asgi/requirements-latest.txt
    fi
    label="$which redis-py $(pin "$req" redis)"
    echo
    echo "=== [+$((SECONDS - T0))s] examples/asgi: venv $venv ($(grep -E '^[a-z]' "$req" | paste -sd' '))"
    if venv_install "$venv" "$req"; then
        run_asgi "$venv" "$label" 2
        run_asgi "$venv" "$label" 3
        run_llm "$venv" "$label" 2
        run_llm "$venv" "$label" 3
    else
        echo "=== FAILED: pip install -r $req" >&2
        record FAIL "asgi, $label: pip install"
    fi
done

echo
echo "=== examples, $((SECONDS - T0))s:"
printf '    %s\n' "${results[@]}"
if ((failed)); then
    echo "=== examples FAILED: $failed of the runs above" >&2
    exit 1
fi
echo "=== examples: all passed"
