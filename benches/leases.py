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
    python3 benches/leases.py --many N [--no-build]

Reports units per second, the server's CPU per unit and per command
(the sum over its threads of /proc/<pid>/stat, user + system), medians of
--runs (3) alternating runs; every reply line is counted and an error
reply aborts. Afterwards, memory per live lease: one key holding 100,000
leases, and 10,000 keys of one lease each (INFO used_memory before and
after). `--doc` rewrites the `leases` section of docs/performance.md.

`--many N` measures one key under hostile use instead: N leases built on
it by pipelined acquires (limit 10^9, TTL 1h, server-made ids), then
2,000 single acquires and 2,000 releases of those leases, one round trip
each (client-side latency: median and worst), and the time `RL.LEASES`
takes to list them all (page by page where it pages).
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


def many(port, n):
    """One key holding `n` leases: acquire/release latency and listing."""
    c = benchlib.Client(port)
    c("FLUSHALL")
    acq = benchlib.encode("RL.ACQUIRE", "hot", 10**9, "1h")
    t0 = time.perf_counter()
    benchlib.pipeline(port, ((acq * min(1000, n - lo), 8 * min(1000, n - lo))
                             for lo in range(0, n, 1000)))
    build = time.perf_counter() - t0
    held = c("RL.STATE", "hot")
    acquire, release, ids = [], [], []
    for _ in range(2000):
        t = time.perf_counter()
        r = c("RL.ACQUIRE", "hot", 10**9, "1h")
        acquire.append(time.perf_counter() - t)
        ids.append(r[5])
    for lid in ids:
        t = time.perf_counter()
        assert c("RL.RELEASE", "hot", lid) == 1
        release.append(time.perf_counter() - t)
    t = time.perf_counter()
    listed, cursor, pages = 0, b"0", 0
    while True:
        try:
            r = c("RL.LEASES", "hot", "CURSOR", cursor, "COUNT", 1000)
        except benchlib.RespError:
            r = [b"0", c("RL.LEASES", "hot")]  # a server that does not page
        cursor, page = r
        listed, pages = listed + len(page), pages + 1
        if cursor == b"0":
            break
    listing = time.perf_counter() - t
    c.close()

    def ms(v):
        return f"{v * 1000:.3f} ms"
    print(f"{n:,} leases built in {build:.1f} s; RL.STATE {held}")
    print(f"RL.ACQUIRE: median {ms(statistics.median(acquire))}, worst {ms(max(acquire))}")
    print(f"RL.RELEASE: median {ms(statistics.median(release))}, worst {ms(max(release))}")
    print(f"RL.LEASES: {listed:,} leases in {pages} replies, {ms(listing)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--units", type=int, default=800_000, help="units per run at depth 16")
    ap.add_argument("--doc", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--many", type=int, metavar="N", help="one key holding N leases (see above)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.units = 1, 40_000
    if not args.no_build:
        benchlib.build_release()
    benchlib.pin_turnstile()
    server = benchlib.start_turnstile()
    if args.many:
        try:
            many(server.port, args.many)
        finally:
            server.stop()
        return
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
