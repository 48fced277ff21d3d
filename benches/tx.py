#!/usr/bin/env python3
"""Transactions: `MULTI; INCR key; EXPIRE key 10; EXEC` on Turnstile and on
Redis, in one run, with redis-benchmark's settings (50 connections, keys
random over 100,000) at two depths: 16 transactions in flight per
connection (`-P 16`: a batch of 16 written at once, the next batch when all
16 are answered) and 1 (a transaction's four commands written at once, the
next when its six reply lines are in).

    python3 benches/tx.py [--quick] [--runs N] [--binary PATH] [--doc]

redis-benchmark cannot send a multi-command transaction as one request, so
this has its own driver: one Python process, epoll over 50 non-blocking
sockets, requests pre-encoded (a pool of transactions over random keys
`tx:{0..99999}`, cycled), replies counted by lines rather than parsed (a
transaction answers `+OK`, `+QUEUED`, `+QUEUED`, `*2`, `:n`, `:1`: 6
lines), with the `+QUEUED`s and `*2`s and any error line counted too.

Each server is measured on, at each depth:
- `MULTI INCR EXPIRE EXEC`, the transaction;
- `INCR + EXPIRE`, the same two commands pipelined without MULTI/EXEC, the
  control: the difference is what the transaction costs;
- `INCR`, plain, through this driver and through `redis-benchmark -t incr`
  with the same -c/-P/-r: a check that the driver is not the bottleneck.
Every test runs the same number of units (transactions, pairs, commands)
per run. For every run: units per second, the server's CPU per unit (the
sum over its threads of /proc/<pid>/stat, user + system, before and after,
divided by units) and per command, the driver's own CPU use (this process,
or redis-benchmark's; near 100% of a core, the driver, not the server, set
the pace), and the CPU every other process on the machine took meanwhile
(/proc/stat's busy time less the server's and the driver's: anything well
above 0% means the machine was shared and the run is noisy). Servers
alternate run by run, the idle one SIGSTOPped, each run on an empty
keyspace (FLUSHALL before and after); a run during which other processes
took more than --noisy cores (0.25) is repeated, up to --retries times (3),
and the quietest attempt kept; medians of --runs runs are reported.

Checks (any failure aborts): before the runs, one unit of each workload's
pre-encoded bytes, sent raw, must be answered with exactly the expected
bytes (`+OK +QUEUED +QUEUED *2 :1 :1`), and the key must then have a TTL of
9-10 s; after each run the reply line, `+QUEUED` and `*2` counts must be
exactly as expected, no error line seen, no key expired (INFO
expired_keys), and every key's value (MGET over the 100,000) must equal the
number of INCRs the driver sent it.

`--quick` is a smoke run of a few seconds (one run, few units, no doc).
`--doc` rewrites the `transactions` section of docs/performance.md.
"""

import argparse
import os
import random
import resource
import select
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib

KEYS = 100_000
TTL = 10
CONNS = 50
KEY_FORMAT = b"tx:%d"


def key(i):
    return KEY_FORMAT % i


class Workload:
    def __init__(self, name, short, commands, lines, queued, star2, unit, reply):
        self.name, self.short = name, short
        self.commands = commands  # commands per unit
        self.lines = lines        # reply lines per unit
        self.queued = queued      # "+QUEUED" lines per unit
        self.star2 = star2        # "*2" lines per unit
        self.unit = unit          # key index -> request bytes
        self.reply = reply        # (value after INCR) -> exact reply bytes


def _tx(i):
    k = key(i)
    return (benchlib.encode("MULTI") + benchlib.encode("INCR", k)
            + benchlib.encode("EXPIRE", k, TTL) + benchlib.encode("EXEC"))


def _pair(i):
    k = key(i)
    return benchlib.encode("INCR", k) + benchlib.encode("EXPIRE", k, TTL)


WORKLOADS = [
    Workload("MULTI INCR EXPIRE EXEC", "tx", 4, 6, 2, 1, _tx,
             lambda n: b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:%d\r\n:1\r\n" % n),
    Workload("INCR + EXPIRE (no MULTI)", "pair", 2, 2, 0, 0, _pair,
             lambda n: b":%d\r\n:1\r\n" % n),
    Workload("INCR", "incr", 1, 1, 0, 0, lambda i: benchlib.encode("INCR", key(i)),
             lambda n: b":%d\r\n" % n),
]
RB_INCR = "INCR (redis-benchmark)"


# ---------------------------------------------------------------- driver

class Pool:
    """One unit of `workload` per key index in `keys` (random, the same for
    every workload), pre-encoded and joined `depth` at a time into
    batches, which the driver cycles through."""

    def __init__(self, workload, keys, depth):
        self.keys, self.depth = keys, depth
        units = [workload.unit(i) for i in keys]
        self.batches = [b"".join(units[j:j + depth]) for j in range(0, len(units), depth)]

    def expected_values(self, batches_sent):
        """Each key's value after `batches_sent` batches from the start of
        the pool (one INCR per unit)."""
        per_round, extra = divmod(batches_sent, len(self.batches))
        counts = [0] * KEYS
        for j, k in enumerate(self.keys):
            counts[k] += per_round + (1 if j // self.depth < extra else 0)
        return counts


def drive(port, pool, workload, batches, conns=CONNS, pid=None, timeout=60):
    """Sends `batches` batches from `pool` over `conns` connections, each
    connection one batch in flight (written at once; the next when every
    reply line of this one is in). Returns wall seconds, server CPU ns
    (if `pid`), driver CPU seconds, and the reply counts."""
    want = workload.lines * pool.depth
    nl, err, queued, star2 = b"\n", b"\n-", b"QUEUED", b"\n*2\r"
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    ep = select.epoll()
    # per connection: [socket, unsent bytes, lines still due, carry, carry's counts]
    state = {}
    pb = pool.batches
    npool = len(pb)
    sent = done = 0
    lines = nqueued = nstar2 = 0
    try:
        for s in socks:
            state[s.fileno()] = [s, None, 0, b"\n", (1, 0, 0, 0)]
            ep.register(s.fileno(), select.EPOLLIN)
        cpu0 = benchlib.cpu_ns(pid) if pid else 0
        pc0 = time.process_time()
        busy0 = busy_s()
        t0 = time.monotonic()
        for fd, c in state.items():
            if sent == batches:
                break
            c[2] = want
            out = pb[sent % npool]
            sent += 1
            n = c[0].send(out)
            if n < len(out):
                c[1] = memoryview(out)[n:]
                ep.modify(fd, select.EPOLLIN | select.EPOLLOUT)
        while done < batches:
            events = ep.poll(timeout)
            if not events:
                raise TimeoutError(f"no reply for {timeout}s: {done} of {batches} batches answered")
            for fd, ev in events:
                c = state[fd]
                if ev & select.EPOLLOUT and c[1] is not None:
                    n = c[0].send(c[1])
                    c[1] = c[1][n:] if n < len(c[1]) else None
                    if c[1] is None:
                        ep.modify(fd, select.EPOLLIN)
                if not ev & (select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP):
                    continue
                try:
                    data = c[0].recv(262144)
                except BlockingIOError:
                    continue
                if not data:
                    raise ConnectionError(f"server closed a connection after {done} batches")
                buf = c[3] + data
                l0, e0, q0, s0 = c[4]
                got = buf.count(nl) - l0
                e = buf.count(err) - e0
                if e:
                    at = buf.index(err) + 1
                    raise benchlib.RespError("error reply: " + buf[at:buf.find(b"\r", at)].decode(errors="replace"))
                nqueued += buf.count(queued) - q0
                nstar2 += buf.count(star2) - s0
                lines += got
                carry = buf[-7:]
                c[3] = carry
                c[4] = (carry.count(nl), carry.count(err), carry.count(queued), carry.count(star2))
                c[2] -= got
                if c[2] > 0:
                    continue
                if c[2] < 0:
                    raise RuntimeError(f"{-c[2]} reply lines more than requests sent on one connection")
                done += 1
                if sent < batches:
                    c[2] = want
                    out = pb[sent % npool]
                    sent += 1
                    n = c[0].send(out)
                    if n < len(out):
                        c[1] = memoryview(out)[n:]
                        ep.modify(fd, select.EPOLLIN | select.EPOLLOUT)
        t1 = time.monotonic()
        busy1 = busy_s()
        pc1 = time.process_time()
        cpu1 = benchlib.cpu_ns(pid) if pid else 0
    finally:
        ep.close()
        for s in socks:
            s.close()
    units = batches * pool.depth
    expect = (units * workload.lines, units * workload.queued, units * workload.star2)
    if (lines, nqueued, nstar2) != expect:
        raise RuntimeError(f"{workload.name}: read {lines} lines, {nqueued} QUEUED, {nstar2} *2; "
                           f"expected {expect[0]}, {expect[1]}, {expect[2]}")
    return {"seconds": t1 - t0, "server_ns": cpu1 - cpu0, "driver_s": pc1 - pc0, "busy_s": busy1 - busy0}


def busy_s():
    """CPU seconds the whole machine has spent busy (all cores; /proc/stat:
    user, nice, system, irq, softirq, steal), to tell how much of a run's
    CPU went to processes other than the server and the driver."""
    with open("/proc/stat") as stat:
        f = stat.readline().split()
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- checks

def values(port, n=KEYS, chunk=10_000):
    """Every key's value (0 if absent) via MGET, parsed from the raw reply."""
    out = []
    with benchlib.Client(port) as c:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            c.sock.sendall(benchlib.encode("MGET", *[key(i) for i in range(lo, hi)]))
            f = c.file
            head = f.readline()
            if head != b"*%d\r\n" % (hi - lo):
                raise RuntimeError(f"MGET answered {head!r}")
            for _ in range(hi - lo):
                h = f.readline()
                if h == b"$-1\r\n":
                    out.append(0)
                else:
                    out.append(int(f.readline()))
    return out


def expired_keys(port):
    with benchlib.Client(port) as c:
        return int(c.info("stats")["expired_keys"])


def flush(port):
    with benchlib.Client(port) as c:
        if c("FLUSHALL") != "OK":
            raise RuntimeError("FLUSHALL failed")


def check_replies(server):
    """One unit of each workload, its pre-encoded bytes sent raw: the reply
    must be exactly the expected bytes; then the key's TTL."""
    flush(server.port)
    with benchlib.Client(server.port, timeout=5) as c:
        for w in WORKLOADS:
            for n in (1, 2):
                req = w.unit(12345)
                c.sock.sendall(req)
                want = w.reply(n)
                got = b"".join(c.file.readline() for _ in range(w.lines))
                if got != want:
                    sys.exit(f"{server.kind}: {w.name} answered {got!r}, expected {want!r}")
            ttl = c("TTL", key(12345))
            if w.lines > 1 and not TTL - 1 <= ttl <= TTL:
                sys.exit(f"{server.kind}: TTL after {w.name} is {ttl}, expected {TTL - 1}-{TTL}")
            c("DEL", key(12345))
        # The transaction through a plain client, reply by reply.
        r = [c("MULTI"), c("INCR", key(1)), c("EXPIRE", key(1), TTL), c("EXEC")]
        if r != ["OK", "QUEUED", "QUEUED", [1, 1]]:
            sys.exit(f"{server.kind}: MULTI/INCR/EXPIRE/EXEC answered {r!r}")
    flush(server.port)


def run_one(server, workload, pool, batches):
    flush(server.port)
    exp0 = expired_keys(server.port)
    r = drive(server.port, pool, workload, batches, pid=server.pid)
    got = values(server.port)
    expired = expired_keys(server.port) - exp0
    if expired:
        sys.exit(f"{server.kind}: {expired} keys expired during a {r['seconds']:.1f}s run of {workload.name}: "
                 f"the INCR count check cannot hold; use fewer units per run")
    want = pool.expected_values(batches)
    if got != want:
        bad = [i for i in range(KEYS) if got[i] != want[i]]
        sys.exit(f"{server.kind}: {workload.name}: {len(bad)} keys differ from the INCRs sent, e.g. "
                 + ", ".join(f"{key(i).decode()}={got[i]} (sent {want[i]})" for i in bad[:5]))
    if sum(got) != batches * pool.depth:
        sys.exit(f"{server.kind}: {workload.name}: values sum to {sum(got)}, sent {batches * pool.depth} INCRs")
    flush(server.port)
    units = batches * pool.depth
    return {
        "ops": units / r["seconds"],
        "cpu_us": r["server_ns"] / 1000 / units,
        "driver": r["driver_s"] / r["seconds"],
        "others": max(0.0, r["busy_s"] - r["server_ns"] / 1e9 - r["driver_s"]) / r["seconds"],
        "seconds": r["seconds"],
    }


def run_rb(server, depth, n):
    flush(server.port)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)  # redis-benchmark's CPU, once waited for
    busy0 = busy_s()
    r = benchlib.redis_benchmark(server.port, server.pid, ["-t", "incr"], n, pipeline=depth,
                                 clients=CONNS, randomkeys=KEYS)
    busy1 = busy_s()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    flush(server.port)
    driver_s = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    server_s = r["cpu_us"] * n / 1e6
    return {"ops": r["ops"], "cpu_us": r["cpu_us"], "driver": driver_s / r["seconds"],
            "others": max(0.0, busy1 - busy0 - server_s - driver_s) / r["seconds"], "seconds": r["seconds"]}


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: one run, few units, no doc")
    ap.add_argument("--runs", type=int, default=3, help="runs per server and test (medians reported)")
    ap.add_argument("--binary", type=Path, default=benchlib.TURNSTILE,
                    help="the Turnstile binary (default: target/release/turnstile; copied before the run)")
    ap.add_argument("--label", help="what the binary was built from, for the doc (default: git describe)")
    ap.add_argument("--threads", type=int, help="Turnstile's --threads (default: as shipped, one per core)")
    ap.add_argument("-n", type=int, default=150_000, help="units per run, 1 in flight per connection")
    ap.add_argument("--pipelined-n", type=int, default=800_000, help="units per run, 16 in flight")
    ap.add_argument("--noisy", type=float, default=0.25,
                    help="a run during which other processes took more than this many cores is noisy (default 0.25)")
    ap.add_argument("--retries", type=int, default=3, help="repeat a noisy run up to this many times, keep the quietest")
    ap.add_argument("--retry-wait", type=float, default=5.0, help="seconds to wait before repeating a noisy run")
    ap.add_argument("--doc", action="store_true", help="rewrite the transactions section of docs/performance.md")
    opts = ap.parse_args()
    benchlib.require("cargo", "redis-server", "redis-benchmark")
    if opts.quick:
        opts.runs, opts.n, opts.pipelined_n, opts.retries = 1, 5_000, 40_000, 0
        opts.doc = False

    binary = opts.binary.resolve()
    if not binary.exists():
        sys.exit(f"{binary} is missing: run `cargo build --release`")
    if binary == benchlib.TURNSTILE.resolve():
        # The last commit that changed what the binary is built from.
        head = benchlib.subprocess.run(["git", "log", "-1", "--format=%ct", "--", "src", "Cargo.toml",
                                        "Cargo.lock", "build.rs"], cwd=benchlib.ROOT,
                                       capture_output=True, text=True).stdout.strip()
        if head and binary.stat().st_mtime < int(head):
            print(f"warning: {binary} is older than the last commit to src/ or Cargo: "
                  f"run `cargo build --release`", file=sys.stderr)
    # A private copy, so a rebuild during the run cannot mix two builds.
    tmp = tempfile.mkdtemp(prefix="turnstile-tx-")
    try:
        pinned = Path(tmp) / "turnstile"
        shutil.copy2(binary, pinned)
        table, meta = bench(opts, pinned)
    finally:
        shutil.rmtree(tmp, True)
    print(table)
    if opts.doc:
        label = opts.label or f"build {benchlib.build_line()}"
        cmd = "python3 benches/tx.py --doc" + (f" --runs {opts.runs}" if opts.runs != 3 else "")
        block = (f"Measured {benchlib.machine_line()}, Turnstile {label}"
                 f"{f' --threads {opts.threads}' if opts.threads else ''} (metrics off), "
                 f"Redis {benchlib.redis_version()}, by `{cmd}` ({meta}).\n\n{table}")
        benchlib.write_section("transactions", "Transactions", PROSE, block)


PROSE = """\
`benches/tx.py` measures a transaction as a fixed-window limiter written
with plain commands would send it, `MULTI; INCR key; EXPIRE key 10; EXEC`,
on Turnstile and on Redis: 50 connections, keys random over 100,000, 16
transactions in flight per connection (each batch of 16 written at once,
as `redis-benchmark -P 16` does) and 1 (the four commands written at once,
as a client library sends a transaction). redis-benchmark cannot send a
transaction as one request, so the script drives it itself (Python, epoll,
pre-encoded requests, reply lines counted; every key's value checked
against the INCRs sent). Beside it: the same `INCR` and `EXPIRE` pipelined
without `MULTI`/`EXEC` (the transaction's overhead is the difference), and
plain `INCR` through the driver and through `redis-benchmark -t incr` (if
the driver's `INCR` fell well short of redis-benchmark's, the driver would
be setting the pace). Server CPU is the sum over the server's threads of
`/proc/<pid>/stat, user + system`; the driver shares this 2-core machine with
the server, so CPU per transaction is the steadier figure. "others' CPU"
is what every other process took during the run (0% on a quiet machine); a
run where they took over a quarter of a core is repeated (up to three
times, the quietest kept). Servers alternate run by run, medians reported.
`python3 benches/tx.py --doc` rewrites the table below; `--quick` is a
few-second smoke run."""


def bench(opts, pinned):
    benchlib.raise_nofile(4096)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"warning: load average {load:.2f} before the run: other processes will add noise",
              file=sys.stderr)
    rng = random.Random(20261123)
    depths = [(16, opts.pipelined_n), (1, opts.n)]
    pool_units = 200_000 if not opts.quick else 20_000
    keys = [rng.randrange(KEYS) for _ in range(pool_units)]
    pools = {(w.short, d): Pool(w, keys, d) for w in WORKLOADS for d, _ in depths}

    extra = ["--threads", str(opts.threads)] if opts.threads else []
    servers = {"Turnstile": benchlib.start_turnstile(*extra, binary=pinned), "Redis": benchlib.start_redis()}
    results = {}
    try:
        for s in servers.values():
            check_replies(s)
        for rep in range(opts.runs):
            order = ["Turnstile", "Redis"] if rep % 2 == 0 else ["Redis", "Turnstile"]
            for depth, n in depths:
                for test in [w.name for w in WORKLOADS] + [RB_INCR]:
                    for name in order:
                        s, other = servers[name], servers["Redis" if name == "Turnstile" else "Turnstile"]
                        other.pause()
                        s.resume()
                        attempts = []
                        while True:
                            if test == RB_INCR:
                                res = run_rb(s, depth, n)
                            else:
                                w = next(w for w in WORKLOADS if w.name == test)
                                res = run_one(s, w, pools[(w.short, depth)], max(1, n // depth))
                            attempts.append(res)
                            noisy = res["others"] > opts.noisy
                            print(f"run {rep + 1} -P {depth:2} {name:9} {test:26} {res['ops']:>11,.0f} /s "
                                  f"{res['cpu_us']:7.2f} us CPU each  {res['seconds']:5.1f}s  "
                                  f"driver {res['driver'] * 100:3.0f}% CPU, others {res['others'] * 100:3.0f}%"
                                  + ("  (noisy)" if noisy else ""), file=sys.stderr, flush=True)
                            if not noisy or len(attempts) > opts.retries:
                                break
                            time.sleep(opts.retry_wait)
                        # The attempt least disturbed by other processes.
                        res = min(attempts, key=lambda r: r["others"])
                        res["attempts"] = len(attempts)
                        results.setdefault((depth, name, test), []).append(res)
    finally:
        for s in servers.values():
            s.stop()

    med = {k: {f: statistics.median(r[f] for r in v) for f in ("ops", "cpu_us", "driver", "others")}
           for k, v in results.items()}
    commands = {w.name: w.commands for w in WORKLOADS}
    commands[RB_INCR] = 1
    unit = {"MULTI INCR EXPIRE EXEC": "transactions", "INCR + EXPIRE (no MULTI)": "pairs",
            "INCR": "commands", RB_INCR: "commands"}
    lines = []
    for depth, _ in depths:
        title = ("16 transactions in flight per connection (-P 16)" if depth == 16
                 else "1 transaction in flight per connection (no pipelining)")
        lines += [f"### {title}", "",
                  "| test | server | units/s | commands/s | server CPU us/unit | server CPU us/command "
                  "| Turnstile/Redis units/s | Turnstile/Redis CPU/unit | driver CPU | others' CPU |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for test in [w.name for w in WORKLOADS] + [RB_INCR]:
            for name in ("Turnstile", "Redis"):
                m = med[(depth, name, test)]
                r = med[(depth, "Redis", test)]
                ratio = (f"{m['ops'] / r['ops']:.2f}x | {m['cpu_us'] / r['cpu_us']:.2f}x"
                         if name == "Turnstile" else " | ")
                lines.append(f"| {test} ({unit[test]}) | {name} | {m['ops']:,.0f} | "
                             f"{m['ops'] * commands[test]:,.0f} | {m['cpu_us']:.2f} | "
                             f"{m['cpu_us'] / commands[test]:.2f} | {ratio} | {m['driver'] * 100:.0f}% | "
                             f"{m['others'] * 100:.0f}% |")
        # The transaction's overhead over the same commands without it.
        tx_line = []
        for name in ("Turnstile", "Redis"):
            t = med[(depth, name, "MULTI INCR EXPIRE EXEC")]["cpu_us"]
            p = med[(depth, name, "INCR + EXPIRE (no MULTI)")]["cpu_us"]
            tx_line.append(f"{name} {t:.2f} vs {p:.2f} us ({t / p:.2f}x, {t - p:+.2f} us)")
        lines += ["", "Server CPU per transaction vs per `INCR`+`EXPIRE` pair without MULTI/EXEC: "
                  + "; ".join(tx_line) + ".", ""]
    kept = [r for v in results.values() for r in v]
    noisy = sum(r["others"] > opts.noisy for r in kept)
    meta = (f"{CONNS} connections, keys random over {KEYS:,}; per run {opts.pipelined_n:,} units "
            f"at 16 in flight and {opts.n:,} at 1; medians of {opts.runs} runs, servers alternated; "
            f"a run during which other processes took over {opts.noisy:g} of a core repeated up to "
            f"{opts.retries} times, the quietest kept: {sum(r['attempts'] for r in kept) - len(kept)} "
            f"repeats, {noisy} of {len(kept)} kept runs still noisy")
    return "\n".join(lines).rstrip(), meta


if __name__ == "__main__":
    try:
        main()
    except SystemExit as e:
        # benchlib turns SIGTERM and SIGHUP into SystemExit(128 + signal), silently.
        if isinstance(e.code, int) and e.code > 128:
            print(f"tx.py: stopped by signal {e.code - 128}", file=sys.stderr)
        raise
