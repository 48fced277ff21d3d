#!/usr/bin/env python3
"""Concurrency limits: `RL.ACQUIRE` + `RL.RELEASE` pairs beside `RL.ALLOW`,
in one run, with redis-benchmark's settings (50 connections, keys random
over 100,000, 16 units in flight per connection, and 1), through the
epoll driver of benches/tx.py (redis-benchmark cannot send a pair whose
second command names the first's lease):

- `ACQUIRE + RELEASE`: `RL.ACQUIRE lk:{i} 1000000 60s ID id{i}` then
  `RL.RELEASE lk:{i} id{i}`, written together (the pair is the unit);
- `RL.ALLOW`: `RL.ALLOW lk:{i} 1000000 60`, one per unit;
- `RL.ACQUIRE` alone (`ID id{i}`, so a key's later acquires are retries
  of its live lease: the lookup path).

    python3 benches/leases.py [--quick] [--runs N] [--doc]

Reports units per second, the server's CPU per unit and per command
(the sum over its threads of /proc/<pid>/stat, user + system), medians of
--runs (3) alternating runs; every reply line is counted and an error
reply aborts. Afterwards, memory per live lease: one key holding 100,000
leases, and 10,000 keys of one lease each (INFO used_memory before and
after). `--doc` rewrites the `leases` section of docs/performance.md.
"""

import argparse
import random
import statistics
import sys
import time

import benchlib
import tx

KEYS = 100_000


def key(i):
    return b"lk:%d" % i


def _pair(i):
    k, lid = key(i), b"id%d" % i
    return (benchlib.encode("RL.ACQUIRE", k, 1_000_000, "60s", "ID", lid)
            + benchlib.encode("RL.RELEASE", k, lid))


# Reply lines per unit: an acquire is `*6`, five integers and the id's
# `$n` and bytes (8); a release `:1` (1); an allow `*5` and five (6).
WORKLOADS = [
    tx.Workload("RL.ACQUIRE + RL.RELEASE", "pair", 2, 9, 0, 0, _pair, None),
    tx.Workload("RL.ALLOW", "allow", 1, 6, 0, 0,
                lambda i: benchlib.encode("RL.ALLOW", key(i), 1_000_000, 60), None),
    tx.Workload("RL.ACQUIRE (a key's own id)", "acquire", 1, 8, 0, 0,
                lambda i: benchlib.encode("RL.ACQUIRE", key(i), 1_000_000, "60s", "ID", b"id%d" % i),
                None),
]


def memory(port):
    c = benchlib.Client(port)

    def used():
        return int(c.info("memory")["used_memory"])

    def load(cmds):
        for lo in range(0, len(cmds), 1000):
            payload = b"".join(benchlib.encode(*a) for a in cmds[lo:lo + 1000])
            benchlib.pipeline(port, [(payload, 8 * len(cmds[lo:lo + 1000]))])

    out = []
    c("FLUSHALL")
    time.sleep(0.2)
    load([("RL.ACQUIRE", "one", 10**9, "1h")])
    before = used()
    load([("RL.ACQUIRE", "one", 10**9, "1h")] * 99_999)
    out.append(("one key, 100,000 leases", (used() - before) / 99_999, "bytes per further lease"))
    c("FLUSHALL")
    time.sleep(0.2)
    before = used()
    load([("RL.ACQUIRE", f"k:{j}", 5, "1h") for j in range(10_000)])
    out.append(("10,000 keys of one lease", (used() - before) / 10_000, "bytes per key with its lease"))
    c("FLUSHALL")
    c.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--units", type=int, default=800_000, help="units per run at depth 16")
    ap.add_argument("--doc", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.units = 1, 40_000
    if not args.no_build:
        benchlib.build_release()
    benchlib.pin_turnstile()
    server = benchlib.start_turnstile()
    rng = random.Random(7)
    keys = [rng.randrange(KEYS) for _ in range(KEYS)]
    results = {}
    try:
        for depth in (16, 1):
            units = args.units if depth > 1 else args.units // 8
            pools = {w.short: tx.Pool(w, keys, depth) for w in WORKLOADS}
            for run in range(args.runs):
                for w in WORKLOADS:
                    benchlib.Client(server.port)("FLUSHALL")
                    r = tx.drive(server.port, pools[w.short], w, units // depth, pid=server.pid)
                    n = (units // depth) * depth
                    row = results.setdefault((depth, w.name), [])
                    row.append({"ops": n / r["seconds"], "cpu_us": r["server_ns"] / 1000 / n,
                                "per_cmd": r["server_ns"] / 1000 / n / w.commands})
                    print(f"-P {depth} run {run + 1} {w.name}: {row[-1]['ops']:,.0f} units/s, "
                          f"{row[-1]['cpu_us']:.2f} us CPU/unit", file=sys.stderr)
        mem = memory(server.port)
    finally:
        server.stop()
    lines = [f"{benchlib.build_line()}; {benchlib.machine_line()}; medians of {args.runs}", "",
             "| depth | workload | units/s | server CPU/unit | CPU/command |", "|---|---|---|---|---|"]
    for (depth, name), rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        lines.append(f"| -P {depth} | {name} | {med['ops']:,.0f} | {med['cpu_us']:.2f} µs | {med['per_cmd']:.2f} µs |")
    lines.append("")
    for what, n, unit in mem:
        lines.append(f"- {what}: {n:.1f} {unit}")
    block = "\n".join(lines)
    print(block)
    if args.doc and not args.quick:
        benchlib.write_section(
            "leases", "Concurrency limits",
            "`python3 benches/leases.py --doc`: `RL.ACQUIRE` + `RL.RELEASE` pairs beside `RL.ALLOW` "
            "(50 connections, keys random over 100,000, 16 units in flight per connection, and 1), "
            "through benches/tx.py's driver, and memory per live lease from `INFO used_memory`.",
            block)


if __name__ == "__main__":
    main()
