#!/usr/bin/env bash
# One command for the scaling benchmark; see scale.py. Builds the release binary first
# (unless --no-build).
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/scale.py" "$@"
