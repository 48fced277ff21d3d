#!/usr/bin/env python3
"""Replication: what two replicas cost a primary, and how far behind they
run under load.

    python3 benches/replication.py [--quick] [--runs N] [-n N] [--lag-seconds S]
                                   [--interval-ms MS] [--noisy CORES] [--retries N]
                                   [--quiet-wait S] [--no-build] [--doc]

Every server is `target/release/turnstile` (copied aside first, as the other
harnesses do), with its defaults (worker threads: a core each but one), on 127.0.0.1.
The load is `redis-benchmark -c 50 -r 100000 -P 16 -n N` running
`RL.ALLOW key:__rand_int__ 100 60` against the primary; keys start empty
and every decision in these runs is admitted (about N/100,000 per key, well
under 100; the primary's INFO `decisions_window` is checked for
`limited=0`), so each operation changes a key and is replicated.

1. Throughput and CPU, two configurations:
   (a) a primary with no replicas;
   (b) a primary with two replicas, separate processes started with
       `--replicaof 127.0.0.1:<primary>`, measured once both replicas say
       `master_link_status:up` and the primary lists both `state=online`.
   Each configuration is started fresh for each run (empty keyspace, new
   processes) and stopped after it; the order of (a) and (b) alternates
   run by run (a b, b a, ...). Reported: redis-benchmark's ops/s and
   p50/p99 latency, and CPU per operation: the sum over a process's threads
   of /proc/<pid>/stat, user + system, read just before redis-benchmark starts
   and again once every replica's `slave_repl_offset` has reached the
   primary's `master_repl_offset` as it stood when redis-benchmark ended
   (so the replication work an operation causes is charged in full, to the
   primary and to each replica; how long that catch-up took is reported).
   In (a) the second reading is taken as soon as redis-benchmark ends.
   Medians of --runs (3) runs; the ratio (b)/(a) is of the medians.
   redis-benchmark's own CPU (getrusage of children) is reported in
   cores: the machine has 2 cores, and the load generator, the primary and
   in (b) both replicas share them. So is the CPU every other process on
   the machine took meanwhile (/proc/stat's busy time less the servers'
   and redis-benchmark's, as benches/tx.py reads it): an attempt during
   which others took more than --noisy cores (0.25) is repeated, fresh, up
   to --retries times (2), and the quietest attempt kept (with its lag
   phase); how many were repeated is reported. Before each attempt, with
   no server of this harness running, it waits up to --quiet-wait seconds
   (30) for half a second in which the machine is busy less than --noisy
   cores.

2. Replication lag under load, in each run's configuration (b), after its
   throughput measurement, on the same processes: redis-benchmark as above
   but on keys `lag:__rand_int__` (fresh ones, so decisions stay admitted),
   with -n sized to last about --lag-seconds (5) at the rate just measured.
   While it runs, this process (one thread, two plain connections) every
   --interval-ms (20) writes `SET lagprobe:<i> <i>:<ns>` to the primary
   and, from the moment the primary's +OK is read, sends `GET
   lagprobe:<i>` to the first replica again and again, each GET after the
   previous reply, until one returns the value. A sample is the time from
   the +OK to the reply of the first GET that saw the value: an upper
   bound on the true lag, by at most one GET round trip (whose median is
   reported), and it includes any time this Python process waited for a
   core on the busy machine. Samples from all runs are pooled: p50, p99,
   max. The probing process's own CPU, and other processes' (as in 1.,
   less the servers', redis-benchmark's and the prober's), are reported.
   Every 100 ms between probes, `INFO replication` on the primary gives
   `master_repl_offset` less each `slaveN` `offset`: the bytes the primary
   has sent but not yet had acknowledged. Replicas acknowledge (REPLCONF
   ACK) once a second, so this measures mostly the time since the last
   ACK, not the replica's real progress; it is coarse, reported as
   p50/p99/max in bytes and, divided by the stream's rate (bytes per
   second over the phase), in milliseconds.

After each throughput run and each lag phase with replicas, once they have
caught up, each replica's DBSIZE is compared with the primary's (reported,
with the count of denied decisions, which should be 0). The ops/s ratio
is followed by an estimate, labelled as such: the ratio of the primary's
CPU per operation, (a)/(b), what the ratio would approach if the primary's
CPU were the only limit (replicas and load generator on other cores). `--quick` is a smoke run (1 run,
small N, 2 s of lag probing, no doc). `--doc` rewrites the `replication`
section of docs/performance.md (not with --quick).
"""

import argparse
import csv
import io
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib

COMMAND = ["RL.ALLOW", "key:__rand_int__", "100", "60"]
LAG_COMMAND = ["RL.ALLOW", "lag:__rand_int__", "100", "60"]
CLIENTS, RANDOM_KEYS, PIPELINE = 50, 100_000, 16


# ---------------------------------------------------------------- servers

def info(port, section="replication"):
    with benchlib.Client(port, timeout=10) as c:
        return c.info(section)


def slaves(fields):
    """The primary's `slaveN:ip=..,port=..,state=..,offset=..,lag=..` lines
    as a list of dicts, in N order."""
    out = []
    for i in range(int(fields.get("connected_slaves", 0))):
        line = fields.get(f"slave{i}")
        if line is None:
            continue
        out.append(dict(kv.split("=", 1) for kv in line.split(",")))
    return out


def start_config(replicas):
    """A fresh primary and `replicas` replicas of it, linked and online."""
    primary = benchlib.start_turnstile()
    reps = []
    try:
        for _ in range(replicas):
            reps.append(benchlib.start_turnstile("--replicaof", f"127.0.0.1:{primary.port}"))
        deadline = time.monotonic() + 30
        while True:
            up = all(info(r.port).get("master_link_status") == "up" for r in reps)
            online = [s for s in slaves(info(primary.port)) if s.get("state") == "online"]
            if up and len(online) == replicas:
                return primary, reps
            if time.monotonic() > deadline:
                raise SystemExit(f"replicas not linked after 30 s: primary lists {online}")
            time.sleep(0.05)
    except BaseException:
        stop_config(primary, reps)
        raise


def stop_config(primary, reps):
    # Replicas first: a replica whose primary goes away logs a warning and
    # starts reconnecting.
    for r in reps:
        r.stop()
    primary.stop()


def catch_up(primary, reps, timeout=120):
    """Waits until every replica's slave_repl_offset has reached the
    primary's master_repl_offset as read now; returns the seconds waited."""
    target = int(info(primary.port)["master_repl_offset"])
    start = time.monotonic()
    while True:
        if all(int(info(r.port)["slave_repl_offset"]) >= target for r in reps):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            offs = [info(r.port)["slave_repl_offset"] for r in reps]
            raise SystemExit(f"replicas did not catch up within {timeout} s: "
                             f"primary at {target}, replicas at {offs}")
        time.sleep(0.002)


def limited(port):
    """Denied decisions so far (INFO stats `decisions_window:...limited=N`)."""
    line = info(port, "stats").get("decisions_window", "")
    fields = dict(kv.split("=", 1) for kv in line.split(",") if "=" in kv)
    return int(fields.get("limited", 0))


def dbsizes_match(primary, reps):
    with benchlib.Client(primary.port) as c:
        want = c("DBSIZE")
    got = []
    for r in reps:
        with benchlib.Client(r.port) as c:
            got.append(c("DBSIZE"))
    return all(g == want for g in got), want, got


def machine_busy():
    """CPU seconds the whole machine has spent busy, all cores (/proc/stat:
    user, nice, system, irq, softirq, steal), as benches/tx.py reads it."""
    with open("/proc/stat") as stat:
        f = stat.readline().split()
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit, max_wait):
    """Before an attempt, while none of this harness's servers runs: waits
    (up to `max_wait` seconds) for a half-second in which the machine's
    busy time is under `limit` cores. Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < max_wait:
        b0, t0 = machine_busy(), time.monotonic()
        time.sleep(0.5)
        if (machine_busy() - b0) / (time.monotonic() - t0) < limit:
            break
    return time.monotonic() - start


def self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------- part 1

def throughput_run(primary, reps, n):
    pids = [primary.pid] + [r.pid for r in reps]
    before = [benchlib.cpu_ns(p) for p in pids]
    off0 = int(info(primary.port)["master_repl_offset"])
    child0, busy0, wall0 = children_cpu(), machine_busy(), time.monotonic()
    r = benchlib.redis_benchmark(primary.port, primary.pid, COMMAND, n, pipeline=PIPELINE,
                                 clients=CLIENTS, randomkeys=RANDOM_KEYS)
    bench_cpu = children_cpu() - child0
    drain = catch_up(primary, reps) if reps else 0.0
    after = [benchlib.cpu_ns(p) for p in pids]
    busy, wall = machine_busy() - busy0, time.monotonic() - wall0
    others = busy - bench_cpu - sum(a - b for a, b in zip(after, before)) / 1e9
    off1 = int(info(primary.port)["master_repl_offset"])
    cpu = [(a - b) / 1000 / n for a, b in zip(after, before)]
    return {"ops": r["ops"], "p50": r["p50"], "p99": r["p99"], "seconds": r["seconds"],
            "primary_cpu": cpu[0], "replica_cpu": cpu[1:], "drain": drain,
            "bench_cores": bench_cpu / r["seconds"], "others": max(0.0, others) / wall,
            "stream_bytes_per_op": (off1 - off0) / n}


# ---------------------------------------------------------------- part 2

def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def lag_phase(primary, reps, n, interval, probe_timeout=5.0):
    """redis-benchmark in the background; probes and INFO samples from this
    thread until it ends."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(primary.port), "-c", str(CLIENTS),
           "-r", str(RANDOM_KEYS), "-n", str(n), "-P", str(PIPELINE), "--csv", *LAG_COMMAND]
    pc = benchlib.Client(primary.port, timeout=10)
    rc = benchlib.Client(reps[0].port, timeout=10)
    out = {"lag": [], "rtt": [], "first_read": 0, "timeouts": 0,
           "offset_lag": [[] for _ in reps]}
    off0 = int(pc.info("replication")["master_repl_offset"])
    pids = [primary.pid] + [r.pid for r in reps]
    servers0 = sum(benchlib.cpu_ns(p) for p in pids)
    busy0, child0, self0 = machine_busy(), children_cpu(), self_cpu()
    t_start = time.perf_counter()
    # Its output goes to files, not pipes: a pipe nobody reads while the
    # probes run could fill and stall it.
    outf, errf = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=outf, stderr=errf, stdin=subprocess.DEVNULL,
                            preexec_fn=benchlib.die_with_parent)
    # Generous bound: 20x the expected duration, at least a minute.
    deadline = time.monotonic() + max(60.0, 20 * n / 100_000)
    try:
        time.sleep(0.2)  # let redis-benchmark connect its 50 clients
        i = 0
        next_tick = time.perf_counter()
        last_info = 0.0
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise SystemExit("lag phase: redis-benchmark still running after its deadline")
            now = time.perf_counter()
            if now < next_tick:
                time.sleep(next_tick - now)
                continue
            i += 1
            key = f"lagprobe:{i}"
            value = f"{i}:{time.time_ns()}".encode()
            pc("SET", key, value)
            t0 = time.perf_counter()
            reads = 0
            while True:
                ts = time.perf_counter()
                v = rc("GET", key)
                te = time.perf_counter()
                reads += 1
                if v == value:
                    out["lag"].append(te - t0)
                    out["rtt"].append(te - ts)
                    out["first_read"] += reads == 1
                    break
                if te - t0 > probe_timeout:
                    out["timeouts"] += 1
                    break
            if time.perf_counter() - last_info >= 0.1 and proc.poll() is None:
                last_info = time.perf_counter()
                f = pc.info("replication")
                m = int(f["master_repl_offset"])
                for j, s in enumerate(slaves(f)[:len(reps)]):
                    out["offset_lag"][j].append(m - int(s["offset"]))
            next_tick += interval
            if next_tick < time.perf_counter():
                next_tick = time.perf_counter()
        proc.wait(timeout=10)
        elapsed = time.perf_counter() - t_start
        servers = (sum(benchlib.cpu_ns(p) for p in pids) - servers0) / 1e9
        busy, bench = machine_busy() - busy0, children_cpu() - child0
        mine = self_cpu() - self0
        out["prober_cores"] = mine / elapsed
        out["others"] = max(0.0, busy - servers - bench - mine) / elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pc.close()
        rc.close()
        outf.seek(0)
        errf.seek(0)
        stdout, stderr = outf.read(), errf.read()
        outf.close()
        errf.close()
    if proc.returncode != 0 or "error" in (stdout + stderr).lower():
        raise SystemExit(f"redis-benchmark failed: {' '.join(cmd)}\n{stdout}\n{stderr}")
    rows = [row for row in csv.reader(io.StringIO(stdout)) if row and row[0] != "test"]
    out["ops"] = float(rows[0][1])
    off1 = int(info(primary.port)["master_repl_offset"])
    out["stream_rate"] = (off1 - off0) / elapsed
    out["probes"] = i
    return out


# ---------------------------------------------------------------- main

def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_cpu(us):
    return f"{us:.2f} µs"


def measure(run, which, replicas, args):
    """One configuration, fresh: its throughput run and, with replicas, its
    lag phase. Returns (throughput result, lag result or None, DBSIZE
    checks, denied decisions)."""
    primary, reps = start_config(replicas)
    lag, dbsize = None, []
    try:
        r = throughput_run(primary, reps, args.n)
        print(f"run {run + 1} {which} replicas: {r['ops']:,.0f} ops/s, primary "
              f"{r['primary_cpu']:.2f} us/op, replicas "
              f"{', '.join(f'{c:.2f}' for c in r['replica_cpu']) or '-'} us/op, "
              f"catch-up {r['drain'] * 1000:.0f} ms, redis-benchmark {r['bench_cores']:.2f} cores, "
              f"others {r['others']:.2f} cores", file=sys.stderr, flush=True)
        if reps:
            dbsize.append(dbsizes_match(primary, reps))
            n_lag = max(20_000, int(r["ops"] * args.lag_seconds))
            lag = lag_phase(primary, reps, n_lag, args.interval_ms / 1000)
            catch_up(primary, reps)
            dbsize.append(dbsizes_match(primary, reps))
            print(f"run {run + 1} lag phase: {lag['probes']} probes under {lag['ops']:,.0f} ops/s, "
                  f"p50 {percentile(lag['lag'], 50) * 1000:.2f} ms, "
                  f"max {max(lag['lag']) * 1000:.2f} ms, {lag['timeouts']} timeouts, prober "
                  f"{lag['prober_cores']:.2f} cores, others {lag['others']:.2f} cores",
                  file=sys.stderr, flush=True)
        return r, lag, dbsize, limited(primary.port)
    finally:
        stop_config(primary, reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short run, no docs written")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", type=int, default=2_000_000, help="RL.ALLOW operations per throughput run")
    ap.add_argument("--lag-seconds", type=float, default=5.0, help="load duration of each lag phase")
    ap.add_argument("--interval-ms", type=float, default=20.0, help="time between lag probes")
    ap.add_argument("--noisy", type=float, default=0.25,
                    help="repeat a configuration whose throughput run saw other processes take more cores")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--quiet-wait", type=float, default=30.0,
                    help="seconds to wait, before each attempt, for the machine to be quiet")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--binary", help="measure this build instead of target/release/turnstile (an A/B's other side); implies --no-build")
    ap.add_argument("--doc", action="store_true", help="rewrite the replication section of docs/performance.md")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.n, args.lag_seconds = 1, 200_000, 2.0
    benchlib.require("redis-benchmark", "redis-cli")
    if not args.no_build and not args.binary:
        benchlib.build_release()
    benchlib.pin_turnstile(args.binary)
    wall0 = time.monotonic()

    header = [benchlib.build_line(), benchlib.machine_line()]
    print("\n".join(header), flush=True)

    configs = {"none": 0, "two": 2}
    results = {c: [] for c in configs}
    lags = []
    checks = {"dbsize": [], "limited": 0, "retried": 0}
    for run in range(args.runs):
        order = list(configs) if run % 2 == 0 else list(reversed(configs))
        for which in order:
            best = None
            for attempt in range(1 + args.retries):
                waited = wait_quiet(args.noisy, args.quiet_wait)
                if waited > 1:
                    print(f"waited {waited:.0f} s for a quiet machine", file=sys.stderr, flush=True)
                got = measure(run, which, configs[which], args)
                if best is None or got[0]["others"] < best[0]["others"]:
                    best = got
                if got[0]["others"] <= args.noisy:
                    break
                checks["retried"] += 1
                print(f"run {run + 1} {which} replicas: other processes took {got[0]['others']:.2f} "
                      f"cores, more than --noisy {args.noisy}; "
                      f"{'again' if attempt < args.retries else 'keeping the quietest attempt'}",
                      file=sys.stderr, flush=True)
            r, lag, dbsize, denied = best
            results[which].append(r)
            if lag is not None:
                lags.append(lag)
            checks["dbsize"] += dbsize
            checks["limited"] += denied

    med = {c: {k: statistics.median(x[k] for x in rs) for k in ("ops", "p50", "p99", "primary_cpu",
                                                             "drain", "bench_cores", "others",
                                                             "stream_bytes_per_op")}
           for c, rs in results.items()}
    for c, rs in results.items():
        k = configs[c]
        med[c]["replica_cpu"] = [statistics.median(x["replica_cpu"][j] for x in rs) for j in range(k)]
    a, b = med["none"], med["two"]

    lines = [f"{header[0]}; {header[1]}; medians of {plural(args.runs, 'run')}, each configuration "
             f"started fresh per run, the two alternating ({plural(checks['retried'], 'attempt')} "
             f"repeated for noise)", "",
             f"`redis-benchmark -c {CLIENTS} -r {RANDOM_KEYS} -P {PIPELINE} -n {args.n}` "
             f"`{' '.join(COMMAND)}` against the primary; the primary, the replicas and "
             f"redis-benchmark share the machine's {os.cpu_count()} cores.", "",
             "| primary | ops/s | p50 ms | p99 ms | primary CPU/op | each replica's CPU/op "
             "| all servers' CPU/op | replicas caught up | redis-benchmark CPU | other processes |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c, label in (("none", "no replicas"), ("two", "two replicas")):
        m = med[c]
        total = m["primary_cpu"] + sum(m["replica_cpu"])
        reps_cpu = ", ".join(fmt_cpu(x) for x in m["replica_cpu"]) or "–"
        drain = f"{m['drain'] * 1000:.0f} ms after the load" if configs[c] else "–"
        lines.append(f"| {label} | {m['ops']:,.0f} | {m['p50']:.3f} | {m['p99']:.3f} | "
                     f"{fmt_cpu(m['primary_cpu'])} | {reps_cpu} | {fmt_cpu(total)} | {drain} | "
                     f"{m['bench_cores']:.2f} cores | {m['others']:.2f} cores |")
    lines += ["", "Other processes' CPU during the kept attempts, run by run: no replicas "
              + ", ".join(f"{x['others']:.2f}" for x in results["none"]) + "; two replicas "
              + ", ".join(f"{x['others']:.2f}" for x in results["two"]) + "; lag phases "
              + ", ".join(f"{x['others']:.2f}" for x in lags) + f" cores (over --noisy {args.noisy:g}: "
              "the machine was shared and that run is noisy)."]
    ratio = b["ops"] / a["ops"]
    lines += ["",
              f"Two replicas / none: {ratio:.2f}x the ops/s (target: at least 0.80x; "
              f"{'met' if ratio >= 0.8 else 'NOT met'}), {b['primary_cpu'] / a['primary_cpu']:.2f}x the "
              f"primary's CPU per operation, {(b['primary_cpu'] + sum(b['replica_cpu'])) / a['primary_cpu']:.2f}x "
              f"the CPU per operation of all servers together. The replication stream carried "
              f"{b['stream_bytes_per_op']:.0f} bytes per RL.ALLOW.",
              "",
              f"On {os.cpu_count()} shared cores the replicas' CPU comes out of what the primary and "
              f"redis-benchmark could use, so the ops/s ratio mostly shows the machine running out of "
              f"cores. Not measured here, an estimate: with the replicas on other machines and the "
              f"primary's CPU the only limit, its CPU per operation alone would put the ratio near "
              f"{a['primary_cpu'] / b['primary_cpu']:.2f}x."]

    lag_s = [x for l in lags for x in l["lag"]]
    rtt = [x for l in lags for x in l["rtt"]]
    probes = sum(l["probes"] for l in lags)
    timeouts = sum(l["timeouts"] for l in lags)
    first = sum(l["first_read"] for l in lags)
    rate = statistics.median(l["stream_rate"] for l in lags)
    load_ops = statistics.median(l["ops"] for l in lags)
    prober = statistics.median(l["prober_cores"] for l in lags)
    lag_others = statistics.median(l["others"] for l in lags)
    lines += ["", f"Replication lag under load: `{' '.join(LAG_COMMAND)}` at the same settings "
              f"({load_ops:,.0f} ops/s, median of {plural(len(lags), 'phase')} of about {args.lag_seconds:g} s, "
              f"with the probes running), a `SET` on the primary every {args.interval_ms:g} ms, "
              f"polled with `GET` on the first replica until seen; samples pooled over the phases. "
              f"The probing process took {prober:.2f} cores and other processes {lag_others:.2f} "
              f"(medians over the phases).", "",
              "| measure | samples | p50 | p99 | max |", "|---|---|---|---|---|"]
    if lag_s:
        lines.append(f"| SET's +OK on the primary → first GET on the first replica that sees it | {len(lag_s)} | "
                     f"{percentile(lag_s, 50) * 1000:.2f} ms | {percentile(lag_s, 99) * 1000:.2f} ms | "
                     f"{max(lag_s) * 1000:.2f} ms |")
        lines.append(f"| the GET round trip that saw it (the resolution) | {len(rtt)} | "
                     f"{percentile(rtt, 50) * 1000:.2f} ms | {percentile(rtt, 99) * 1000:.2f} ms | "
                     f"{max(rtt) * 1000:.2f} ms |")
    for j in range(2):
        samples = [x for l in lags for x in l["offset_lag"][j]]
        if samples:
            lines.append(f"| `master_repl_offset` − `slave{j}` offset (INFO on the primary) | {len(samples)} | "
                         f"{percentile(samples, 50):,} B ≈ {percentile(samples, 50) / rate * 1000:.0f} ms | "
                         f"{percentile(samples, 99):,} B ≈ {percentile(samples, 99) / rate * 1000:.0f} ms | "
                         f"{max(samples):,} B |")
    lines += ["",
              f"- {probes} probes, {len(lag_s)} seen, {timeouts} not seen within 5 s; "
              f"{first} ({first / max(1, len(lag_s)):.0%}) were seen by the first GET, i.e. within one "
              f"round trip of the +OK.",
              "- A lag sample is an upper bound: it is at most one GET round trip above the true lag, "
              "and includes any time the probing Python process waited for a core.",
              f"- The offset lag is what the primary knows: replicas acknowledge once a second, so it "
              f"mostly counts the bytes sent since the last ACK (the stream ran at {rate / 1e6:.1f} MB/s; "
              f"bytes are converted to ms at that rate); it is coarse, an order of magnitude, not the "
              f"replicas' real delay, which the probe samples measure."]
    all_match = all(ok for ok, _, _ in checks["dbsize"])
    lines.append(f"- After each phase with replicas, once caught up, both replicas' DBSIZE "
                 f"{'equalled' if all_match else 'did NOT always equal'} the primary's "
                 f"({len(checks['dbsize'])} checks); denied decisions: {checks['limited']}.")
    if not all_match:
        for ok, want, got in checks["dbsize"]:
            if not ok:
                lines.append(f"  - primary {want}, replicas {got}")
    block = "\n".join(lines)
    print()
    print(block)
    print(f"\n({time.monotonic() - wall0:.0f} s)", file=sys.stderr)
    if args.doc and not args.quick:
        benchlib.write_section(
            "replication", "Replication",
            "`python3 benches/replication.py --doc`: a primary's `RL.ALLOW` throughput and CPU with "
            "two replicas attached (separate Turnstile processes on loopback, `--replicaof`) against "
            "none, and how far the replicas run behind under that load: a `SET` on the primary polled "
            "on a replica until seen, and the primary's view of each replica's acknowledged offset. "
            "The primary, both replicas and redis-benchmark share the machine's cores.",
            block)


if __name__ == "__main__":
    main()
