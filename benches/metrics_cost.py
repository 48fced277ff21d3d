#!/usr/bin/env python3
"""What metrics cost: two Turnstile servers, one with the Prometheus endpoint
on and one with `--metrics-addr off`, the same `redis-benchmark -P 16
RL.ALLOW` alternating between them. Reports median ops/s and server CPU per
operation (sum of /proc/<pid>/task/*/schedstat) for each.

    python3 benches/metrics_cost.py [--reps 6] [-n 1000000]
"""

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import benchlib

ROOT = Path(__file__).resolve().parent.parent


def cpu_ns(pid):
    return sum(int((t / "schedstat").read_text().split()[0]) for t in Path(f"/proc/{pid}/task").iterdir())


ORDER = [("metrics on", "127.0.0.1:0"), ("metrics off", "off")]


def main():
    ap = argparse.ArgumentParser()

    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("-n", type=int, default=1_000_000)
    opts = ap.parse_args()
    benchlib.require("redis-benchmark")
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    servers = {}
    for name, metrics in ORDER:
        port = benchlib.free_port()
        proc = subprocess.Popen([str(ROOT / "target/release/turnstile"), "--port", str(port), "--metrics-addr", metrics,
                                 "--log-level", "warn"], stdout=subprocess.DEVNULL,
                                preexec_fn=benchlib.die_with_parent)
        servers[name] = (port, proc)
    try:
        time.sleep(0.5)
        results = {name: [] for name in servers}
        for rep in range(opts.reps):
            # ABBA order: whichever server runs second in a round gains or
            # loses from the first (caches, CPU clocks); alternating cancels it.
            round_order = list(servers.items())
            if rep % 2:
                round_order.reverse()
            for name, (port, proc) in round_order:
                before = cpu_ns(proc.pid)
                out = subprocess.check_output(
                    ["redis-benchmark", "-p", str(port), "-c", "50", "-r", "100000", "-n", str(opts.n), "-P", "16",
                     "--csv", "RL.ALLOW", f"r{rep}:__rand_int__", "100", "60"], text=True)
                cpu = (cpu_ns(proc.pid) - before) / opts.n
                ops = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
                results[name].append((ops, cpu))
        for name, rows in results.items():
            print(f"{name}: median {statistics.median(r[0] for r in rows):,.0f} ops/s, "
                  f"median {statistics.median(r[1] for r in rows):,.0f} ns server CPU per RL.ALLOW "
                  f"({opts.reps} runs of -n {opts.n} -P 16)")
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
