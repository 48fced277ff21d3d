#!/usr/bin/env python3
"""Lua limiters through EVALSHA: Turnstile beside Redis, in one run.

    benches/scripts.py [--reps 3] [-n 200000] [-P 16] [--no-build] [--quick]

Starts `target/release/turnstile` twice, as shipped (catalogued scripts
run natively, `cmd/script/native`) and with `--scripts-native no` (every script in
the Lua VM), and Debian's `redis-server` (--save '' --appendonly no), on
free loopback ports; loads every catalogued script redis-benchmark can
drive (the `limits` fixed, moving and sliding windows,
rate-limiter-flexible, rate-limit-redis, django-redis: the texts in
src/cmd/script/native/lua/), and compare.py's two general-path limiters
(benches/lua/, not catalogued: the Lua VM in both Turnstile columns), into
each, and runs `redis-benchmark -c 50 -r 100000` with EVALSHA against each
in turn (the idle ones paused), `--reps` times alternating. Prints medians
of ops/s and of server CPU per call (its /proc/<pid>/stat before and
after, over calls) and Turnstile's ratios to Redis, native and Lua.
"""

import argparse

import benchlib
import compare

LUA = benchlib.ROOT / "src/cmd/script/native/lua"

# name, script, EVALSHA arguments after the SHA (numkeys, key, args).
SCRIPTS = [
    ("limits fixed window", (LUA / "limits_incr_expire.lua").read_text(), ["1", "lf:__rand_int__", "60", "1"]),
    ("rate-limiter-flexible consume", (LUA / "rlflex_consume.lua").read_text(),
     ["1", "rf:__rand_int__", "1", "60", "100", "60"]),
    ("rate-limit-redis increment", (LUA / "rlr_increment.lua").read_text(),
     ["1", "rr:__rand_int__", "60000"]),
    ("rate-limit-redis get", (LUA / "rlr_get.lua").read_text(), ["1", "rr:__rand_int__"]),
    ("django-redis incr", (LUA / "django_redis_incr.lua").read_text(),
     ["1", "dj:__rand_int__", "1"]),
    # The moving window's timestamp is the client's time.time(), which
    # redis-benchmark cannot send: a fixed one (as redis-py writes a float),
    # a 60 s window, limit 5. The acquire runs admit a key's first 5 hits
    # and deny the rest (more denials rep after rep: ~6 hits a key per
    # server by the last); the get runs read those lists (binary search).
    ("limits moving window acquire", (LUA / "limits_acquire_moving_window.lua").read_text(),
     ["1", "lm:__rand_int__", "1732563494.1234565", "5", "60", "1"]),
    ("limits moving window get", (LUA / "limits_moving_window.lua").read_text(),
     ["1", "lm:__rand_int__", "1732563434.1234565", "5"]),
    # Sliding window: previous and current counters (each __rand_int__ is
    # drawn on its own, so a pair is two random keys), 1 s windows, limit 2:
    # the server's clock shifts windows; admits with some denials.
    ("limits sliding window acquire", (LUA / "limits_acquire_sliding_window.lua").read_text(),
     ["2", "ls:__rand_int__:p", "ls:__rand_int__:c", "2", "1", "1"]),
    ("limits sliding window get", (LUA / "limits_sliding_window.lua").read_text(),
     ["2", "ls:__rand_int__:p", "ls:__rand_int__:c", "1"]),
] + compare.GENERAL_SCRIPTS  # not catalogued: the VM in both Turnstile columns


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
    servers = {
        "native": benchlib.start_turnstile(),
        "lua": benchlib.start_turnstile("--scripts-native", "no"),
        "redis": benchlib.start_redis(),
    }
    print(f"{benchlib.build_line()}\nRedis {benchlib.redis_version()}; "
          f"redis-benchmark -c 50 -r 100000 -n {opts.n} -P {opts.pipeline}, "
          f"medians of {opts.reps} alternating runs\n")
    print("| script | native ops/s | Lua path ops/s | Redis ops/s | native / Redis | Lua / Redis "
          "| native CPU us/call | Lua CPU us/call | Redis CPU us/call | native CPU / Redis | Lua CPU / Redis |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, body, args in SCRIPTS:
        shas = set()
        for s in servers.values():
            with s.client() as c:
                shas.add(c("SCRIPT", "LOAD", body))
        (sha,) = shas
        med = benchlib.alternating_medians(servers, ["EVALSHA", sha.decode(), *args], opts.n,
                                           opts.pipeline, opts.reps)
        (no, nc), (lo, lc), (ro, rc) = med["native"], med["lua"], med["redis"]
        print(f"| {name} | {no:,.0f} | {lo:,.0f} | {ro:,.0f} | {no / ro:.2f}x | {lo / ro:.2f}x "
              f"| {nc:.2f} | {lc:.2f} | {rc:.2f} | {nc / rc:.2f}x | {lc / rc:.2f}x |", flush=True)
    for s in servers.values():
        s.stop()


if __name__ == "__main__":
    main()
