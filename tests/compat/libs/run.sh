#!/usr/bin/env bash
# The limiter libraries that run Lua (tests/compat/libs/python_libs.py and
# node/node_libs.js), each against server A (Turnstile) and server B
# (redis-server) with the same results; Python in RESP3 (redis-py 8's
# default) and again in RESP2.
#
#   tests/compat/libs/run.sh A_PORT B_PORT [HOST]
#
# Makes its own venv ($LIBS_VENV, default a temporary directory) and runs
# `npm ci` in node/ when node_modules is missing. Stops at the first
# failure, non-zero.
set -euo pipefail
A=${1:?usage: run.sh A_PORT B_PORT [HOST]}
B=${2:?usage: run.sh A_PORT B_PORT [HOST]}
HOST=${3:-127.0.0.1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${LIBS_VENV:-$(mktemp -d "${TMPDIR:-/tmp}/turnstile-libs.XXXXXX")}

if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$HERE/requirements.txt"
if [[ ! -d "$HERE/node/node_modules/rate-limiter-flexible" ]]; then
    (cd "$HERE/node" && npm ci --no-audit --no-fund)
fi

for proto in 3 2; do
    echo "--- libs: Python limiter libraries, RESP$proto"
    timeout 180 "$VENV/bin/python" "$HERE/python_libs.py" --a "$A" --b "$B" --host "$HOST" --protocol "$proto"
done
echo "--- libs: Node limiter libraries"
timeout 90 node "$HERE/node/node_libs.js" --a "$A" --b "$B" --host "$HOST"
echo "--- libs: all passed"
