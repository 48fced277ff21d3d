#!/usr/bin/env python3
"""A/B of two Turnstile binaries: the same redis-benchmark tests against
each, runs alternated A B B A ..., both servers up for the whole run (the
idle one SIGSTOPped). Prints median ops/s and server CPU per operation of
each, and the ratio B/A. For judging a change to the hot path on this noisy
machine: CPU per operation is the steadier figure.

    python3 benches/ab.py OLD_BINARY NEW_BINARY [--reps 4] [-n 1000000]
        [--algos window,gcra,fixed,log] [--scripts] [-P 16] [-r 100000] [-c 50]
        [--a-args "--threads 1"] [--b-args "--threads 2"] [--preload 10000000]
        [--b-algos sliding]

`--scripts` adds compare.py's Lua limiters (EVALSHA), loaded into both.
`--a-args`/`--b-args` add flags to one server: the same binary twice
compares two settings (how the default `--threads` was chosen).
`--preload N` first loads N window keys (`window:%012d`, the names
redis-benchmark's `__rand_int__` makes) into both servers, and sets `-r N`:
the lookups of a large keyspace, as `scale.py`'s keyspace scenario.
`--denials` adds, for each algorithm, a test where almost every decision
is a denial (a limit of 1 an hour over 1,000 keys): what a denial costs,
e.g. the heavy hitters' counting (`--a-args "--top-keys 0"` against the
default, the same binary twice).
`--key-bytes N` makes the `RL.ALLOW` keys N bytes long (`window:` cut or
padded with dashes to N - 12, then redis-benchmark's 12 random digits;
default `window:` and the digits, 19 bytes for window): what a key's
length costs.
`--b-algos` gives B other algorithms, pairwise with `--algos`: `--algos
window --b-algos sliding` runs A's window against B's sliding (a new
algorithm against the one it would replace, in one alternated run).

Example: build the previous commit in a worktree and compare:

    git worktree add /tmp/base HEAD~1
    CARGO_TARGET_DIR=/tmp/base-target cargo build --release --manifest-path /tmp/base/Cargo.toml
    python3 benches/ab.py /tmp/base-target/release/turnstile target/release/turnstile
"""

import argparse
from pathlib import Path

import benchlib

# Keys of the denial tests: each admitted once, then denied for the hour.
DENIAL_KEYS = 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("-P", dest="pipeline", type=int, default=16)
    ap.add_argument("-r", dest="randomkeys", type=int, default=100_000)
    ap.add_argument("-c", dest="clients", type=int, default=50, help="redis-benchmark's connections")
    ap.add_argument("--algos", default="window,gcra,fixed,log")
    ap.add_argument("--b-algos", help="B's algorithms, pairwise with --algos (default the same)")
    ap.add_argument("--scripts", action="store_true", help="also the Lua limiters of compare.py")
    ap.add_argument("--no-ping", action="store_true")
    ap.add_argument("--denials", action="store_true",
                    help="also each algorithm where nearly every decision is a denial")
    ap.add_argument("--a-args", default="", help="extra flags for server A")
    ap.add_argument("--b-args", default="", help="extra flags for server B")
    ap.add_argument("--key-bytes", type=int, default=0, metavar="N",
                    help="RL.ALLOW keys of N bytes (the prefix padded with dashes)")
    ap.add_argument("--preload", type=int, default=0, metavar="N",
                    help="load N window keys into both first, and use -r N")
    opts = ap.parse_args()
    benchlib.require("redis-benchmark")
    servers = {"A": benchlib.start_turnstile(*opts.a_args.split(), binary=opts.a),
               "B": benchlib.start_turnstile(*opts.b_args.split(), binary=opts.b)}
    if opts.preload:
        import scale
        for s in servers.values():
            scale.preload(s, b"window:%012d", opts.preload)
        opts.randomkeys = opts.preload
    def allow(a):
        prefix = f"{a}:"
        if opts.key_bytes:
            room = max(0, opts.key_bytes - len("000000000000"))
            prefix = prefix[:room].ljust(room, "-")
        return ["RL.ALLOW", f"{prefix}__rand_int__", "100", "60", "ALGO", a]

    algos = [a for a in opts.algos.split(",") if a]
    b_algos = [a for a in (opts.b_algos or opts.algos).split(",") if a]
    if len(b_algos) != len(algos):
        ap.error("--b-algos needs as many algorithms as --algos")
    # (name, args, key space or None for -r)
    tests = [(f"RL.ALLOW {a}" if a == b else f"RL.ALLOW {a} (A) vs {b} (B)", {"A": allow(a), "B": allow(b)}, None)
             for a, b in zip(algos, b_algos)]
    if opts.denials:
        def deny(a):
            return ["RL.ALLOW", f"deny:{a}:__rand_int__", "1", "3600", "ALGO", a]
        tests += [(f"RL.ALLOW {a}, denied", {"A": deny(a), "B": deny(b)}, DENIAL_KEYS)
                  for a, b in zip(algos, b_algos)]
    if not opts.no_ping:
        tests.append(("PING_MBULK", ["-t", "ping_mbulk"], None))
    if opts.scripts:
        import compare
        for name, body, args in compare.SCRIPTS:
            shas = set()
            for s in servers.values():
                with benchlib.Client(s.port) as c:
                    shas.add(c("SCRIPT", "LOAD", body))
            (sha,) = shas
            tests.append((f"Lua {name}", ["EVALSHA", sha.decode(), *args], None))
    print(f"A = {opts.a} {opts.a_args}\nB = {opts.b} {opts.b_args}\n-n {opts.n} -P {opts.pipeline} -r {opts.randomkeys} -c {opts.clients}, "
          f"{opts.reps} runs each, alternated\n")
    print(f"| test | A ops/s | B ops/s | B/A ops | A CPU us/op | B CPU us/op | B/A CPU |")
    print("|---|---|---|---|---|---|---|")
    for name, args, keys in tests:
        med = benchlib.alternating_medians(servers, args, opts.n, opts.pipeline, opts.reps,
                                           randomkeys=keys or opts.randomkeys, clients=opts.clients)
        (ao, ac), (bo, bc) = med["A"], med["B"]
        print(f"| {name} | {ao:,.0f} | {bo:,.0f} | {bo / ao:.2f}x | {ac:.3f} | {bc:.3f} | "
              f"{bc / ac:.2f}x |", flush=True)
    for s in servers.values():
        s.stop()


if __name__ == "__main__":
    main()
