#!/usr/bin/env bash
# Every benchmark harness, one after another, each writing its table into
# docs/performance.md: the side-by-side comparison with Redis
# (compare.sh), memory per key (memory.sh) and scaling (scale.sh). About
# 10 minutes on a 2-core machine; run it on a quiet one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --quiet
bash benches/compare.sh --no-build
bash benches/memory.sh --write --no-build
bash benches/scale.sh --write --no-build
