#!/usr/bin/env bash
# One command for the side-by-side benchmark with Redis; see compare.py.
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/compare.py" "$@"
