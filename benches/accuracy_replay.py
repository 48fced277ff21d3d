#!/usr/bin/env python3
"""Accuracy in real time: traffic replayed through the release server, each
decision judged against the exact sliding window over the same send times.

    python3 benches/accuracy_replay.py            # 12 s a trace, about 50 s
    python3 benches/accuracy_replay.py --quick    # 3 s a trace, for CI
        [--algos window,sliding,log] [--limit 200] [--binary PATH]

`benches/accuracy.rs` judges the pure functions on a simulated clock; this
judges the server as clients meet it: its own clock, the network between,
the command path. A limit of `--limit` per second; four traces, each
generated with a fixed seed as send times (Poisson arrivals):

- Poisson at 1x the limit's rate, and at 2x;
- on/off: 0.3 s of every second at 4x, then quiet;
- weighted: costs 1-10 (COST), at 1x the limit's rate in units.

At each send time one pipeline carries the request to every algorithm,
one key each (`<trace>:<algo>`), so all algorithms see the same moments.
A decision is wrong when it differs from the exact answer over that
algorithm's own admitted history: the units it admitted with send times in
the second before this one, plus this cost, fit the limit. `ALGO log` is
exact, so its figure is the harness's own noise (the server decides at its
clock, some microseconds after the send time). "Worst" is the most units
admitted in any one-second interval of send times.
"""

import argparse
import random
import socket
import time
from collections import deque

import benchlib

PERIOD_NS = 1_000_000_000


def traces(limit, seconds):
    """(name, [(offset ns, cost)]) per trace, deterministic."""
    def poisson(rate, seed, on=1.0, weighted=False):
        rng = random.Random(seed)
        out, t = [], 0.0
        mean_cost = 5.5 if weighted else 1.0
        while True:
            t += rng.expovariate(rate / mean_cost)
            if t >= seconds:
                return out
            if t % 1.0 < on:
                out.append((int(t * 1e9), rng.randint(1, 10) if weighted else 1))

    return [
        ("poisson-1x", poisson(limit, 1)),
        ("poisson-2x", poisson(2 * limit, 2)),
        ("on-off-4x", poisson(4 * limit, 3, on=0.3)),
        ("weighted-1x", poisson(limit, 4, weighted=True)),
    ]


class Judge:
    """The exact sliding window over one algorithm's admitted send times."""

    def __init__(self, limit):
        self.limit = limit
        self.recent = deque()
        self.sum = 0
        self.decisions = self.allowed = self.wrong_allow = self.wrong_deny = self.worst = 0

    def judge(self, t, cost, allowed):
        while self.recent and self.recent[0][0] + PERIOD_NS <= t:
            self.sum -= self.recent.popleft()[1]
        exact = self.sum + cost <= self.limit
        self.decisions += 1
        if allowed and not exact:
            self.wrong_allow += 1
        if exact and not allowed:
            self.wrong_deny += 1
        if allowed:
            self.allowed += 1
            self.recent.append((t, cost))
            self.sum += cost
            self.worst = max(self.worst, self.sum)


def read_allowed(f):
    """One RL.ALLOW reply (an array of five integers): its first."""
    head = f.readline()
    if not head.startswith(b"*"):
        raise SystemExit(f"unexpected reply {head!r}")
    values = [int(f.readline()[1:-2]) for _ in range(int(head[1:-2]))]
    return values[0] == 1


def replay(port, name, trace, algos, limit):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = sock.makefile("rb")
    judges = {a: Judge(limit) for a in algos}
    commands = {}
    start = time.monotonic_ns() + 50_000_000
    for offset, cost in trace:
        due = start + offset
        while True:
            left = due - time.monotonic_ns()
            if left <= 0:
                break
            if left > 2_000_000:
                time.sleep((left - 1_000_000) / 1e9)
        if cost not in commands:
            commands[cost] = b"".join(
                benchlib.encode("RL.ALLOW", f"{name}:{a}", limit, "1s", "ALGO", a, "COST", cost)
                for a in algos)
        sent = time.monotonic_ns()
        sock.sendall(commands[cost])
        for a in algos:
            judges[a].judge(sent, cost, read_allowed(f))
    lag = time.monotonic_ns() - (start + trace[-1][0])
    f.close()
    sock.close()
    return judges, lag


def pct(n, d):
    return f"{100 * n / max(d, 1):.2f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 s a trace instead of 12")
    ap.add_argument("--algos", default="window,sliding,log")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--binary", help="the server to run (default target/release/turnstile)")
    opts = ap.parse_args()
    algos = [a for a in opts.algos.split(",") if a]
    seconds = 3 if opts.quick else 12
    server = benchlib.start_turnstile(binary=opts.binary)
    rows = []
    try:
        for name, trace in traces(opts.limit, seconds):
            judges, lag = replay(server.port, name, trace, algos, opts.limit)
            for a in algos:
                j = judges[a]
                rows.append(f"| {a} | {name} | {j.decisions} | {pct(j.allowed, j.decisions)} | "
                            f"{pct(j.wrong_allow, j.decisions)} | {pct(j.wrong_deny, j.decisions)} | "
                            f"{j.worst} ({j.worst / opts.limit:.3f}x) |")
            print(f"{name}: {len(trace)} sends, last one {lag / 1e6:.1f} ms after its time", flush=True)
    finally:
        server.stop()
    print(f"\nLimit {opts.limit} per second, {seconds} s a trace, {benchlib.machine_line()}, "
          f"build {benchlib.build_line()}.\n")
    print("| algorithm | trace | decisions | admitted | wrongly allowed | wrongly denied | worst units in any second |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
