#!/usr/bin/env bash
# Runs the middleware examples' tests against a running Turnstile:
#
#   examples/run_tests.sh PORT
#
#   1. Express: npm ci in examples/express, then `node --test test.js`
#   2. ASGI:    pip install -r examples/asgi/requirements.txt into a venv
#               ($EXAMPLES_VENV, default examples/asgi/.venv, created if
#               missing), then `python test_app.py PORT`
#
# Both run even if the first fails; the exit status is non-zero if either
# failed (or if nothing answers on PORT). SKIP_INSTALL=1 skips npm ci and pip
# (for reruns). Every test run uses its own key prefix, so reruns against the
# same server do not collide, and it RL.RESETs its keys at the end.
set -uo pipefail

PORT=${1:-}
if [[ ! $PORT =~ ^[0-9]+$ ]]; then
    echo "usage: $0 PORT   (the port of a running Turnstile on 127.0.0.1)" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${EXAMPLES_VENV:-$HERE/asgi/.venv}
PYTHON3=${PYTHON3:-python3}

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

failed=()

echo "=== examples/express (ioredis $(grep -o '"ioredis": "[^"]*"' "$HERE/express/package.json" | cut -d'"' -f4), express $(grep -o '"express": "[^"]*"' "$HERE/express/package.json" | cut -d'"' -f4))"
(
    set -e
    cd "$HERE/express"
    if [[ ${SKIP_INSTALL:-} != 1 ]]; then
        npm ci --no-audit --no-fund --loglevel=error
    fi
    TURNSTILE_PORT=$PORT timeout 60 node --test --test-reporter=spec test.js
) || failed+=(express)

echo
echo "=== examples/asgi ($(grep -E '^[a-z]' "$HERE/asgi/requirements.txt" | paste -sd' '))"
(
    set -e
    if [[ ! -x $VENV/bin/python ]]; then
        "$PYTHON3" -m venv "$VENV"
    fi
    if [[ ${SKIP_INSTALL:-} != 1 ]]; then
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/asgi/requirements.txt"
    fi
    cd "$HERE/asgi"
    timeout 60 "$VENV/bin/python" test_app.py "$PORT"
) || failed+=(asgi)

echo
if ((${#failed[@]})); then
    echo "=== examples FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "=== examples: express and asgi passed"
