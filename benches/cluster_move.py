#!/usr/bin/env python3
"""Moving slots with their keys: Turnstile beside Redis 7, same redis-cli.

    python3 benches/cluster_move.py [--keys N] [--bin PATH] [--redis-server PATH]

For each server: three empty primaries made a cluster by `redis-cli
--cluster create`, N limiter keys written (Turnstile: `RL.ALLOW k 100 1h`,
one window record; Redis: the same limiter the Redis way, an `INCR` counter
with `EXPIRE`), a fourth primary added and given a quarter of the slots by
`redis-cli --cluster rebalance --cluster-use-empty-masters`, then those
slots moved back by `reshard`. Meanwhile one RedisCluster client sends one
request after another to random keys and records each one's latency.
Prints the time of each move, the CPU time its four nodes spent in it
(user + system, from /proc/PID/stat), and the client's median, p99 and
worst latency during it. Needs redis-cli, redis-server and the redis
package.
"""

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

import redis
from redis.cluster import ClusterNode, RedisCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args):
    r = subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=1800, input="yes\n")
    if r.returncode != 0:
        raise SystemExit(f"redis-cli {' '.join(args)}: {r.stdout}{r.stderr}")
    return r.stdout


class Cluster:
    def __init__(self, kind, binary, base):
        self.kind, self.binary, self.base = kind, binary, base
        self.root = tempfile.mkdtemp(prefix=f"cluster-move-{kind}-")
        self.procs = []

    def start(self, port):
        d = os.path.join(self.root, str(port))
        os.makedirs(d)
        if self.kind == "redis":
            args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
                    "--appendonly", "yes", "--save", "", "--dir", d]
        else:
            args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                    "--cluster-node-timeout", "5000", "--appendonly", "yes", "--metrics-addr", "off"]
        log = open(os.path.join(d, "log"), "wb")
        p = subprocess.Popen(args, cwd=d, stdout=log, stderr=log)
        self.procs.append(p)
        for _ in range(200):
            try:
                redis.Redis(port=port).ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise SystemExit(f"{self.kind} on {port} did not start:\n" + open(os.path.join(d, "log")).read()[-2000:])

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class Probe(threading.Thread):
    """One client, one request at a time, each one's latency recorded."""

    def __init__(self, rc, kind, keys):
        super().__init__(daemon=True)
        self.rc, self.kind, self.keys = rc, kind, keys
        self.lat = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self):
        rnd = random.Random(7)
        while not self.stop.is_set():
            k = f"k:{rnd.randrange(self.keys)}"
            t = time.perf_counter()
            try:
                if self.kind == "redis":
                    self.rc.execute_command("INCR", k)
                else:
                    self.rc.execute_command("RL.ALLOW", k, 100, "1h")
            except Exception:  # noqa: BLE001 - counted, not hidden
                self.errors += 1
            self.lat.append(time.perf_counter() - t)


def cpu_seconds(procs):
    """User + system CPU time the processes have used (clock ticks)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def wait_ok(ports, timeout=60):
    """Until every node knows every slot's owner (`cluster_state:ok`)."""
    deadline = time.time() + timeout
    for p in ports:
        while b"cluster_state:ok" not in redis.Redis(port=p).execute_command("CLUSTER", "INFO"):
            if time.time() > deadline:
                raise SystemExit(f"node {p} never reached cluster_state:ok")
            time.sleep(0.1)


def fill(port_base, kind, keys):
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", port_base)])
    pipe = rc.pipeline()
    for i in range(keys):
        if kind == "redis":
            pipe.incr(f"k:{i}")
            pipe.expire(f"k:{i}", 3600)
        else:
            pipe.execute_command("RL.ALLOW", f"k:{i}", 100, "1h")
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    return rc


def measure(kind, binary, base, keys):
    c = Cluster(kind, binary, base)
    try:
        for i in range(4):
            c.start(base + i)
        cli("--cluster", "create", *[f"127.0.0.1:{base + i}" for i in range(3)], "--cluster-yes")
        wait_ok([base + i for i in range(3)])
        rc = fill(base, kind, keys)
        cli("--cluster", "add-node", f"127.0.0.1:{base + 3}", f"127.0.0.1:{base}")
        wait_ok([base + i for i in range(4)])
        out = {}
        for what in ("rebalance", "reshard"):
            probe = Probe(rc, kind, keys)
            probe.start()
            time.sleep(1)
            cpu = cpu_seconds(c.procs)
            t = time.time()
            if what == "rebalance":
                cli("--cluster", "rebalance", f"127.0.0.1:{base}", "--cluster-use-empty-masters")
            else:
                new = redis.Redis(port=base + 3).execute_command("CLUSTER", "MYID").decode()
                first = redis.Redis(port=base).execute_command("CLUSTER", "MYID").decode()
                n = sum(int(b) - int(a) + 1 for a, b, *rest in redis.Redis(port=base + 3).execute_command("CLUSTER", "SLOTS")
                        if rest[0][1] == base + 3)
                cli("--cluster", "reshard", f"127.0.0.1:{base}", "--cluster-from", new, "--cluster-to", first,
                    "--cluster-slots", str(n), "--cluster-yes")
            took = time.time() - t
            cpu = cpu_seconds(c.procs) - cpu
            probe.stop.set()
            probe.join()
            lat = sorted(probe.lat)
            out[what] = (took, cpu, statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99)] * 1e3, lat[-1] * 1e3,
                         probe.errors, len(lat))
            wait_ok([base + i for i in range(4)])
        return out
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/turnstile"))
    ap.add_argument("--redis-server", default=shutil.which("redis-server"))
    a = ap.parse_args()
    results = {
        "redis": measure("redis", a.redis_server, 14001, a.keys),
        "turnstile": measure("turnstile", a.bin, 15001, a.keys),
    }
    print(f"\n{a.keys} keys; 4,096 slots moved each way; one client, one request at a time\n")
    print("| move | server | time (s) | nodes' CPU (s) | client median (ms) | p99 (ms) | worst (ms) | errors | requests |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what in ("rebalance", "reshard"):
        for kind in ("redis", "turnstile"):
            t, cpu, med, p99, worst, err, n = results[kind][what]
            print(f"| {what} | {kind} | {t:.1f} | {cpu:.2f} | {med:.2f} | {p99:.2f} | {worst:.1f} | {err} | {n} |")


if __name__ == "__main__":
    main()
