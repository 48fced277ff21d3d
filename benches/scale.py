#!/usr/bin/env python3
"""Scaling: how Turnstile's RL.ALLOW holds up as the keyspace, the number
of connections, key skew and mass expiry grow, with redis-benchmark, on
this machine, in one run (about 5 minutes; all traffic on 127.0.0.1).

    benches/scale.sh               # full run, prints the table
    benches/scale.sh --write       # ... and writes it to docs/performance.md
    benches/scale.sh --quick       # tiny sizes, for CI: checks it completes

Each scenario compares a run against its baseline, alternating them, each
--reps times (default 2), and reports medians of ops/s, p50, p99 (from
redis-benchmark --csv) and the server's CPU per operation (its threads'
/proc/<pid>/stat, user + system before and after, divided by requests: on
this 2-core machine redis-benchmark takes about a core, so CPU per
operation is the steadier figure). Turnstile runs as shipped (metrics on).

- keyspace: `RL.ALLOW k:__rand_int__ 100 60 ALGO window`, -c 50 -P 16, with
  -r 10000 against 10,000 preloaded keys, vs 1,000,000 and 10,000,000
  preloaded keys (-r equal to the count, so every request hits an existing
  key; redis-benchmark's __rand_int__ is 12 digits, so keys are
  `k:%012d`). Preloaded with a period of an hour, so keys the benchmark
  does not touch never expire mid-scenario; the three servers live side by
  side and the two not being measured are stopped (SIGSTOP), so their
  expiry sweepers take no CPU. Target: 10M >= 0.8x the ops/s of 10k.
- connections: the same command, -r 1000000 on 1,000,000 preloaded keys
  (so no key nears its limit of 100 a minute), -c 50 vs -c 1000, with
  -P 16 and without. Target: 1000 >= 0.8x of 50.
- hot key: `RL.ALLOW hot 1000000000 60 ALGO window` (one key, which keeps
  admitting) vs the same limit on random keys (`r:__rand_int__`,
  -r 100000, preloaded), -c 50, -P 16 and without. Target: hot >= 0.7x.
- mass expiry: 1,000,000 keys `RL.ALLOW e:%012d 100 5 ALGO window` loaded
  in about a second right after a 5 s bucket boundary: a window key expires
  at the end of the next bucket (docs/commands.md), so all of them expire
  at the same millisecond (checked with PTTL on the first and the last).
  A benchmark on other keys (`RL.ALLOW b:__rand_int__ 100 60 ALGO window`,
  -r 100000, preloaded) starts a second before that moment and lasts
  several seconds, while the sweeper (src/store/sweeper.rs, one pass a
  second) deletes them; INFO's expired_keys before and after the run
  confirms it happened inside the run. Baseline: the same on a server whose
  1,000,000 e: keys have a period of an hour. Fresh server per run.
  Target: p99 during expiry <= 2x steady p99.
"""

import argparse
import statistics
import sys
import time

from benchlib import (require, Client, build_line, build_release, keyed_batches, machine_line, pin_turnstile, pipeline,
                      raise_nofile, redis_benchmark, start_turnstile, template, thread_cpu_ns, write_section)

SWEEPER = "turnstile-sweeper"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def preload(server, key_format, count, limit=100, period=3600):
    if count:
        tmpl = template("RL.ALLOW", None, limit, period, "ALGO", "window", key_format=key_format)
        pipeline(server.port, keyed_batches(tmpl, 0, count, 6))


def stats(server):
    with Client(server.port) as c:
        info = c.info()
    keys = 0
    for part in info.get("db0", "").split(","):
        if part.startswith("keys="):
            keys = int(part[5:])
    return int(info["expired_keys"]), keys


def run(server, label, args, n, pipeline_depth, clients=50, randomkeys=100000):
    exp0, keys0 = stats(server)
    sw0 = thread_cpu_ns(server.pid, SWEEPER)
    res = redis_benchmark(server.port, server.pid, args, n, pipeline_depth, clients, randomkeys)
    sw1 = thread_cpu_ns(server.pid, SWEEPER)
    exp1, keys1 = stats(server)
    res.update(expired=exp1 - exp0, keys_before=keys0, keys_after=keys1, sweeper_ms=(sw1 - sw0) / 1e6)
    log(f"  {label:40} {res['ops']:>11,.0f} ops/s  p50 {res['p50']:.3f}  p99 {res['p99']:.3f}  "
        f"max {res['max']:.3f} ms  {res['cpu_us']:.2f} us CPU/op  {res['seconds']:.1f}s  "
        f"sweeper {res['sweeper_ms']:.0f} ms  expired {res['expired']:,}  keys {keys0:,} -> {keys1:,}")
    return res


class Scenario:
    """Runs of one scenario: rows in order, the first being the baseline."""

    def __init__(self, name, metric, target, threshold, better):
        self.name, self.metric, self.target = name, metric, target
        self.threshold, self.better = threshold, better  # better: "ge" (ratio >= t) or "le"
        self.rows = {}  # label -> list of results
        self.targets = set()  # labels the target applies to
        self.notes = []

    def add(self, label, res):
        self.rows.setdefault(label, []).append(res)

    def medians(self):
        return {label: {f: statistics.median(r[f] for r in rs) for f in ("ops", "p50", "p99", "max", "cpu_us")}
                for label, rs in self.rows.items()}


def stray_expiry(res, label, sc):
    """Keys expiring during a run that should see none would distort it."""
    if res["expired"]:
        msg = f"{res['expired']:,} keys expired during a `{label}` run"
        log(f"  warning: {msg}")
        sc.notes.append(msg)


def keyspace(opts, sizes):
    sc = Scenario("keyspace size (-P 16)", "ops", "≥ 0.8x ops/s", 0.8, "ge")
    servers = {}
    try:
        for size in sizes:
            s = start_turnstile(metrics="127.0.0.1:0")
            t = time.monotonic()
            preload(s, b"k:%012d", size)
            rss = s.rss()
            log(f"keyspace: preloaded {size:,} keys in {time.monotonic() - t:.1f}s, "
                f"RSS {rss / 2**20:,.0f} MiB ({rss / size:,.0f} B/key)")
            servers[size] = s
            s.pause()
        cmd = ["RL.ALLOW", "k:__rand_int__", "100", "60", "ALGO", "window"]
        for rep in range(opts.reps):
            for size in sizes:
                s = servers[size]
                s.resume()
                label = f"{size:,} keys (-r {size})"
                res = run(s, f"rep {rep + 1} {label}", cmd, opts.pipelined_n, 16, randomkeys=size)
                s.pause()
                stray_expiry(res, label, sc)
                sc.add(label, res)
    finally:
        for s in servers.values():
            s.stop()
    sweep = ", ".join(f"{statistics.median(r['sweeper_ms'] / r['seconds'] for r in rs):,.0f} ms/s at {label.split(' (')[0]}"
                      for label, rs in sc.rows.items())
    sc.notes.append(f"keyspace: CPU of the expiry sweeper thread (nothing expiring), per second of run: {sweep}")
    sc.targets = {f"{sizes[-1]:,} keys (-r {sizes[-1]})"}
    return sc


def connections(opts, keys, many):
    out = []
    s = start_turnstile(metrics="127.0.0.1:0")
    try:
        preload(s, b"k:%012d", keys)
        cmd = ["RL.ALLOW", "k:__rand_int__", "100", "60", "ALGO", "window"]
        for pipe, n in [(16, opts.pipelined_n), (1, opts.n)]:
            title = "-P 16" if pipe > 1 else "no pipelining"
            sc = Scenario(f"connections ({title}, -r {keys})", "ops", "≥ 0.8x ops/s", 0.8, "ge")
            for rep in range(opts.reps):
                for c in (50, many):
                    label = f"-c {c}"
                    res = run(s, f"rep {rep + 1} conns {title} {label}", cmd, n, pipe, clients=c, randomkeys=keys)
                    stray_expiry(res, label, sc)
                    sc.add(label, res)
            sc.targets = {f"-c {many}"}
            out.append(sc)
    finally:
        s.stop()
    return out


def hot_key(opts, keys):
    out = []
    s = start_turnstile(metrics="127.0.0.1:0")
    try:
        preload(s, b"r:%012d", keys, limit=1_000_000_000, period=60)
        random_cmd = ["RL.ALLOW", "r:__rand_int__", "1000000000", "60", "ALGO", "window"]
        hot_cmd = ["RL.ALLOW", "hot", "1000000000", "60", "ALGO", "window"]
        for pipe, n in [(16, opts.pipelined_n), (1, opts.n)]:
            title = "-P 16" if pipe > 1 else "no pipelining"
            sc = Scenario(f"hot key ({title})", "ops", "≥ 0.7x ops/s", 0.7, "ge")
            for rep in range(opts.reps):
                for label, cmd in [(f"random keys (-r {keys})", random_cmd), ("one key", hot_cmd)]:
                    res = run(s, f"rep {rep + 1} hot {title} {label}", cmd, n, pipe, randomkeys=keys)
                    stray_expiry(res, label, sc)
                    sc.add(label, res)
            with Client(s.port) as c:
                st = c.pairs("RL.STATE", "hot")
            if st is None or st["current"] + st["previous"] == 0:
                sys.exit(f"hot key: RL.STATE hot = {st}")
            sc.targets = {"one key"}
            out.append(sc)
    finally:
        s.stop()
    return out


def mass_expiry(opts, count, bench_keys, period, lead, n_pipelined, n_plain):
    out = []
    cmd = ["RL.ALLOW", "b:__rand_int__", "100", "60", "ALGO", "window"]
    for pipe, n in [(16, n_pipelined), (1, n_plain)]:
        title = "-P 16" if pipe > 1 else "no pipelining"
        sc = Scenario(f"mass expiry ({title})", "p99", "≤ 2x p99", 2.0, "le")
        steady, expiring = "steady (keys expire in an hour)", f"{count:,} keys expire mid-run"
        for rep in range(opts.reps):
            for label in (steady, expiring):
                s = start_turnstile(metrics="127.0.0.1:0")
                try:
                    preload(s, b"b:%012d", bench_keys, period=60)
                    if label == steady:
                        preload(s, b"e:%012d", count, period=3600)
                        res = run(s, f"rep {rep + 1} expiry {title} {label}", cmd, n, pipe, randomkeys=bench_keys)
                        stray_expiry(res, label, sc)
                    else:
                        res = expiring_run(s, sc, rep, title, label, cmd, n, pipe, count, bench_keys, period, lead)
                finally:
                    s.stop()
                sc.add(label, res)
        sc.targets = {expiring}
        out.append(sc)
    return out


def expiring_run(s, sc, rep, title, label, cmd, n, pipe, count, bench_keys, period, lead):
    # Start loading just after a bucket boundary, so the whole load lands
    # in one bucket and every key expires at that bucket's end + period.
    now = time.time()
    time.sleep(period - now % period + 0.02)
    t = time.monotonic()
    preload(s, b"e:%012d", count, period=period)
    load_s = time.monotonic() - t
    with Client(s.port) as c:
        first, last = c("PTTL", "e:%012d" % 0), c("PTTL", "e:%012d" % (count - 1))
    if abs(first - last) > 50:
        sc.notes.append(f"expiry moments spread: PTTL {first} vs {last} ms (load {load_s:.1f}s)")
    expiry_at = time.monotonic() + first / 1000
    wait = expiry_at - lead - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    res = run(s, f"rep {rep + 1} expiry {title} {label}", cmd, n, pipe, randomkeys=bench_keys)
    # The run started `lead` s before the moment; did the sweeper delete
    # (nearly) all of them while it ran?
    ran_past = res["seconds"] > lead + 1.0
    inside = res["expired"] >= 0.99 * count
    res["inside"] = inside
    msg = (f"{label}, {title}, rep {rep + 1}: loaded in {load_s:.1f}s, run {res['seconds']:.1f}s from "
           f"{lead:.1f}s before the expiry moment, {res['expired']:,} keys expired during it, "
           f"sweeper {res['sweeper_ms']:.0f} ms CPU, max latency {res['max']:.1f} ms")
    sc.notes.append(msg)
    if not (inside and ran_past):
        log(f"  warning: the expiry was not inside the run: {msg}")
    return res


def table(scenarios):
    lines = [
        "| scenario | run | ops/s | p50 ms | p99 ms | server CPU us/op | ratio vs baseline | target | met? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for sc in scenarios:
        med = sc.medians()
        labels = list(sc.rows)
        base = med[labels[0]]
        for i, label in enumerate(labels):
            m = med[label]
            ratio = m[sc.metric] / base[sc.metric]
            what = "p99" if sc.metric == "p99" else "ops/s"
            if i == 0:
                ratio_s, target, met = f"baseline ({what})", "", ""
            else:
                ratio_s = f"{ratio:.2f}x {what}, {m['cpu_us'] / base['cpu_us']:.2f}x CPU/op"
                target, met = "", ""
                if label in sc.targets:
                    target = sc.target
                    ok = ratio >= sc.threshold if sc.better == "ge" else ratio <= sc.threshold
                    inside = all(r.get("inside", True) for r in sc.rows[label])
                    met = ("yes" if ok else "**no**") if inside else "n/a (expiry outside the run)"
            lines.append(f"| {sc.name} | {label} | {m['ops']:,.0f} | {m['p50']:.3f} | {m['p99']:.3f} | "
                         f"{m['cpu_us']:.2f} | {ratio_s} | {target} | {met} |")
        notes += sc.notes
    out = "\n".join(lines) + "\n"
    if notes:
        out += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return out


PROSE = """\
`benches/scale.sh` (add `--write` to update the table below; `--quick` is a
tiny smoke run for CI) builds the release binary and measures Turnstile
alone with redis-benchmark: `RL.ALLOW ... ALGO window` against 10,000 vs
1,000,000 vs 10,000,000 preloaded keys, 50 vs 1,000 connections, one hot key
vs random keys, and a steady run vs a run during which 1,000,000 keys
expire at the same moment. Each pair alternates, medians of two runs;
ratios are against the first row of each scenario. The docstring of
`benches/scale.py` gives every command and size. A full run takes about 5
minutes; on this 2-core machine redis-benchmark itself takes about a core,
so treat single ratios near a target as noise unless they repeat."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: checks it completes")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("-n", type=int, default=400_000, help="requests per run without pipelining")
    ap.add_argument("--pipelined-n", type=int, default=3_000_000, help="requests per run with -P 16")
    ap.add_argument("--only", nargs="+", choices=["keyspace", "connections", "hot", "expiry"])
    ap.add_argument("--write", action="store_true", help="update docs/performance.md (not with --quick)")
    ap.add_argument("--note", help="a sentence to print above the table in docs/performance.md")
    ap.add_argument("--no-build", action="store_true")
    opts = ap.parse_args()
    require("cargo", "redis-benchmark")
    many = 1000
    if opts.quick:
        if opts.write:
            sys.exit("--write needs a full run, not --quick")
        opts.reps, opts.n, opts.pipelined_n = 1, 5_000, 20_000
        sizes, conn_keys, hot_keys = [1_000, 10_000, 20_000], 10_000, 1_000
        # (keys that expire, benchmark keys, period, seconds the run starts
        # before the expiry moment, -n with -P 16, -n without): long enough
        # runs, even here, that the expiry falls inside them.
        expiry = (20_000, 1_000, 2, 0.3, 1_000_000, 100_000)
    else:
        sizes, conn_keys, hot_keys = [10_000, 1_000_000, 10_000_000], 1_000_000, 100_000
        expiry = (1_000_000, 100_000, 5, 1.0, opts.pipelined_n, opts.n)
    limit = raise_nofile(many + 1000)
    if limit < many + 100:
        sys.exit(f"open-file limit {limit} is too low for -c {many}")
    if not opts.no_build:
        build_release()
    pin_turnstile()
    only = set(opts.only or ["keyspace", "connections", "hot", "expiry"])
    started = time.monotonic()
    scenarios = []
    if "keyspace" in only:
        scenarios.append(keyspace(opts, sizes))
    if "connections" in only:
        scenarios += connections(opts, conn_keys, many)
    if "hot" in only:
        scenarios += hot_key(opts, hot_keys)
    if "expiry" in only:
        scenarios += mass_expiry(opts, *expiry)
    elapsed = time.monotonic() - started
    log(f"done in {elapsed:.0f}s")
    out = table(scenarios)
    print(out)
    if opts.write:
        block = (f"Measured {machine_line()}, build {build_line()}, by `benches/scale.sh` "
                 f"({elapsed / 60:.0f} minutes; -n {opts.n:,} "
                 f"without and {opts.pipelined_n:,} with `-P 16`, -c 50 unless stated, medians of {opts.reps} "
                 f"runs, runs alternated)." + (f" {opts.note}" if opts.note else "") + "\n\n" + out)
        write_section("scale", "Scaling", PROSE, block)


if __name__ == "__main__":
    main()
