#!/usr/bin/env bash
# Builds every fuzz target and runs each for a bounded time against a copy of
# its checked-in seed corpus (fuzz/corpus/<target>/ is never modified).
#
#   fuzz/run.sh [SECONDS] [TARGET...]     # SECONDS per target, default 60
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). cargo fuzz passes
# -Z flags (sanitizer, coverage instrumentation), so on a stable toolchain
# this sets RUSTC_BOOTSTRAP=1. Targets run one after another, one libFuzzer
# process each. Prints executions, coverage and corpus size per target; exits
# non-zero if any target crashed, hung (-timeout) or ran out of memory, and
# says where the reproducing input is (fuzz/artifacts/<target>/).
#
# No sanitizer by default: Turnstile is safe Rust but for a few small
# `unsafe` blocks (the counting allocator; a borrowed view of a log's ring in
# src/store/record.rs, checked under valgrind and FUZZ_SANITIZER=address;
# libc calls for the open-file limit and the socket's send queue, outside
# the Harness), the bugs hunted here are panics,
# overflow (debug assertions are on) and hangs, and AddressSanitizer makes
# the Harness targets about 6x slower. FUZZ_SANITIZER=address turns it on.
# FUZZ_WORK=DIR puts the grown corpora in DIR (default: a fresh temporary
# directory, removed on success); FUZZ_ARGS adds libFuzzer flags.
set -euo pipefail

FUZZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$FUZZ_DIR"

SECONDS_PER_TARGET=${1:-60}
shift || true
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]] || { echo "usage: fuzz/run.sh [SECONDS] [TARGET...]" >&2; exit 2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz is not installed; run: cargo install cargo-fuzz --locked" >&2
    exit 2
fi
if ! rustc --version | grep -q nightly; then
    # cargo fuzz needs -Zsanitizer and friends; let the stable compiler take them
    export RUSTC_BOOTSTRAP=1
fi

if (($# > 0)); then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo fuzz list)
fi

SANITIZER=${FUZZ_SANITIZER:-none}
WORK=${FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/turnstile-fuzz.XXXXXX")}
mkdir -p "$WORK"

echo "=== fuzz/run.sh: building ${TARGETS[*]} (sanitizer $SANITIZER, $(cargo fuzz --version), $(rustc --version))"
build_log="$WORK/build.log"
if (($# > 0)); then
    for t in "${TARGETS[@]}"; do cargo fuzz build -s "$SANITIZER" "$t" >>"$build_log" 2>&1 || { cat "$build_log" >&2; echo "fuzz/run.sh: build of $t failed" >&2; exit 1; }; done
else
    cargo fuzz build -s "$SANITIZER" >"$build_log" 2>&1 || { cat "$build_log" >&2; echo "fuzz/run.sh: build failed" >&2; exit 1; }
fi
tail -n 1 "$build_log"
# FUZZ_BUILD_ONLY=1: build and stop (CI builds first, so that the build's
# load is over before the timing-sensitive cluster tests start beside the
# fuzzers)
if [[ ${FUZZ_BUILD_ONLY:-} == 1 ]]; then
    exit 0
fi

SUMMARY=()
FAILED=()
for t in "${TARGETS[@]}"; do
    corpus="$WORK/corpus/$t"
    log="$WORK/$t.log"
    rm -rf "$corpus"
    mkdir -p "$corpus"
    [[ -d "corpus/$t" ]] && cp -R "corpus/$t/." "$corpus/"
    seeds=$(find "$corpus" -type f | wc -l)
    echo
    echo "=== fuzzing $t for ${SECONDS_PER_TARGET}s from $seeds seeds (log: $log)"
    rc=0
    # -timeout: one input running over 10 s is a hang; -rss_limit_mb: memory cap
    cargo fuzz run -s "$SANITIZER" "$t" "$corpus" -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1 || rc=$?
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    cov=$(sed -nE 's/.* cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+).*/cov \1, ft \2, corpus \3/p' <<<"$last")
    line="$t: ${execs:-?} executions (${rate:-?}/s), ${cov:-no coverage line}"
    if [[ $rc != 0 ]]; then
        line+=", FAILED (exit $rc)"
        FAILED+=("$t")
        echo "--- $t failed; the end of its log:" >&2
        grep -nE 'panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer|SUMMARY|Test unit written to|==[0-9]+==' "$log" | head -n 20 >&2 || true
        tail -n 30 "$log" >&2
    fi
    echo "$line"
    SUMMARY+=("$line")
done

echo
echo "=== fuzz/run.sh summary (${SECONDS_PER_TARGET}s per target)"
printf '  %s\n' "${SUMMARY[@]}"
if ((${#FAILED[@]})); then
    echo "fuzz/run.sh: FAILED: ${FAILED[*]}; inputs in $FUZZ_DIR/artifacts/, logs in $WORK" >&2
    echo "reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run -s $SANITIZER TARGET fuzz/artifacts/TARGET/crash-... (from fuzz/'s parent)" >&2
    exit 1
fi
[[ -n "${FUZZ_WORK:-}" ]] || rm -rf "$WORK"
echo "fuzz/run.sh: no crashes"
