#!/usr/bin/env python3
"""Lua limiters through EVALSHA: Turnstile beside Redis, in one run.

    benches/scripts.py [--reps 3] [-n 200000] [-P 16] [--no-build] [--quick]

Starts `target/release/turnstile` as shipped and Debian's `redis-server`
(--save '' --appendonly no) on free loopback ports, loads compare.py's Lua
limiters (the seeds' two-bucket counter and sorted-set log, and the `limits`
library's fixed window) into both, and runs `redis-benchmark -c 50 -r 100000`
with EVALSHA against each in turn (the idle one paused), `--reps` times
alternating. Prints medians of ops/s and of server CPU per call (its
threads' schedstat before and after, over calls) and Turnstile's ratios to
Redis.
"""

import argparse

import benchlib
import compare


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("-P", dest="pipeline", type=int, default=16)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one short run of each: a smoke test")
    opts = ap.parse_args()
    if opts.quick:
        opts.reps, opts.n = 1, 20_000
    benchlib.require("redis-benchmark", "redis-server")
    if not opts.no_build:
        benchlib.build_release()
    benchlib.pin_turnstile()
    servers = {"turnstile": benchlib.start_turnstile(), "redis": benchlib.start_redis()}
    print(f"{benchlib.build_line()}\nRedis {benchlib.redis_version()}; "
          f"redis-benchmark -c 50 -r 100000 -n {opts.n} -P {opts.pipeline}, "
          f"medians of {opts.reps} alternating runs\n")
    print("| script | Turnstile ops/s | Redis ops/s | ops ratio | Turnstile CPU us/call "
          "| Redis CPU us/call | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, body, args in compare.SCRIPTS:
        shas = set()
        for s in servers.values():
            with s.client() as c:
                shas.add(c("SCRIPT", "LOAD", body))
        (sha,) = shas
        med = benchlib.alternating_medians(servers, ["EVALSHA", sha.decode(), *args], opts.n,
                                           opts.pipeline, opts.reps)
        (to, tc), (ro, rc) = med["turnstile"], med["redis"]
        print(f"| {name} | {to:,.0f} | {ro:,.0f} | {to / ro:.2f}x | {tc:.2f} | {rc:.2f} | "
              f"{tc / rc:.2f}x |", flush=True)
    for s in servers.values():
        s.stop()


if __name__ == "__main__":
    main()
