#!/usr/bin/env python3
"""Failover inside a cluster, through the binary, with the tools Redis
operators use.

    python3 tests/ops/cluster_failover.py [BIN] [--redis] [--timeout MS]

Six nodes made a cluster by Debian's `redis-cli --cluster create
--cluster-replicas 1`, with redis-py RedisCluster clients sending INCR to
keys in every slot throughout. Then:

1. `CLUSTER FAILOVER` on a replica: roles swapped, timed; no acknowledged
   increment lost.
2. `kill -9` of a primary: its replica promoted (timed from the kill), and
   the time until a client is served on its slots again; the old primary
   restarted rejoins as a replica; `redis-cli --cluster check` clean.
3. `SIGSTOP` of a primary past the node timeout, then `SIGCONT`: it must
   not serve a single write on its old slots (a client connected to it
   directly writes as fast as it can from the instant it resumes).

At the end, every key's value is compared with the increments clients saw
acknowledged: the number lost is reported per step (a failover by
`kill -9` may lose what was acknowledged but not yet replicated; a
manual failover must lose none). `--redis` runs the same against
redis-server (Redis 7) for the side-by-side figures. Exits non-zero on a
failure.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import redis
from redis.cluster import RedisCluster, ClusterNode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_pos = [a for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and not sys.argv[i - 1].startswith("--")]
BIN = os.path.abspath(_pos[0]) if _pos else os.path.join(ROOT, "target/release/turnstile")
REDIS = "--redis" in sys.argv
TIMEOUT_MS = int(sys.argv[sys.argv.index("--timeout") + 1]) if "--timeout" in sys.argv else 2000
BASE = 12001 if not REDIS else 12101  # bus ports (+10000) below the ephemeral range
KEYS = 300

failures = []


def fail(msg):
    print("FAIL:", msg, flush=True)
    failures.append(msg)


def cli(*args, check=True, timeout=120):
    r = subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=timeout, input="yes\n")
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        print(out)
        raise SystemExit(f"redis-cli {' '.join(args)} exited {r.returncode}")
    return out


class Node:
    def __init__(self, root, port):
        self.port = port
        self.dir = os.path.join(root, str(port))
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None

    def start(self):
        log = open(os.path.join(self.dir, "log"), "ab")
        if REDIS:
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                   "--cluster-node-timeout", str(TIMEOUT_MS), "--appendonly", "yes", "--appendfsync", "always",
                   "--save", "", "--dir", self.dir]
        else:
            cmd = [BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                   "--cluster-node-timeout", str(TIMEOUT_MS), "--metrics-addr", "off",
                   "--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=log, stderr=log)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise SystemExit(f"node {self.port} did not start")

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(timeout=20)

    def r(self):
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True)

    def myself(self):
        try:
            return [l for l in self.r().execute_command("CLUSTER", "NODES").splitlines() if "myself" in l][0].split()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            return None

    def is_primary(self):
        m = self.myself()
        return m is not None and "master" in m[2]

    def id(self):
        return self.r().execute_command("CLUSTER", "MYID")

    def addr(self):
        return f"127.0.0.1:{self.port}"


class Load:
    """Clients sending INCR to keys in every slot, counting what was
    acknowledged."""

    def __init__(self, keys):
        self.keys = keys
        self.acked = {k: 0 for k in keys}
        self.unknown = {k: 0 for k in keys}
        self.errors = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(3)]

    def start(self):
        for t in self.threads:
            t.start()

    def run(self, seed):
        rnd = random.Random(seed)
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", BASE)], decode_responses=True,
                          cluster_error_retry_attempts=20)
        while not self.stop.is_set():
            k = rnd.choice(self.keys)
            try:
                rc.incr(k)
                with self.lock:
                    self.acked[k] += 1
            except Exception:  # noqa: BLE001 - the outcome is unknown: it may or may not count
                with self.lock:
                    self.unknown[k] += 1
                    self.errors += 1
                time.sleep(0.05)
            time.sleep(0.001)

    def lost(self, rc):
        """Acknowledged increments the cluster no longer has."""
        with self.lock:
            acked = dict(self.acked)
        lost = 0
        for k in self.keys:
            v = int(rc.get(k) or 0)
            lost += max(0, acked[k] - v)
        return lost, sum(acked.values())

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def check(node, what):
    out = cli("--cluster", "check", node.addr(), check=False)
    if "[ERR]" in out or "[WARNING]" in out or "All 16384 slots covered" not in out:
        fail(f"check after {what}:\n{out}")
    else:
        print(f"check after {what}: clean", flush=True)


def wait_for(what, f, timeout=60, step=0.01):
    t = time.time()
    while time.time() - t < timeout:
        try:
            if f():
                return time.time() - t
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.ResponseError):
            pass
        time.sleep(step)
    fail(f"timed out waiting for {what}")
    return None


def wait_agreement(nodes, what, timeout=60):
    def same():
        sigs = set()
        for n in nodes:
            lines = n.r().execute_command("CLUSTER", "NODES").strip().splitlines()
            sigs.add(tuple(sorted(" ".join([l.split()[0], "master" if "master" in l.split()[2] else "slave"]
                                           + [w for w in l.split()[8:] if not w.startswith("[")])
                                  for l in lines)))
        return len(sigs) == 1
    wait_for(f"agreement after {what}", same, timeout, 0.2)


def replica_of(nodes, primary):
    pid = primary.id()
    for n in nodes:
        m = n.myself()
        if m and m[3] == pid:
            return n
    return None


def key_of(node, rc, keys):
    """A key whose slot `node` serves."""
    for k in keys:
        slot = rc.keyslot(k)
        for a, b, *owners in node.r().execute_command("CLUSTER", "SLOTS"):
            if a <= slot <= b and owners[0][1] == node.port:
                return k
    return None


def main():
    if not shutil.which("redis-cli"):
        raise SystemExit("redis-cli is not installed")
    root = tempfile.mkdtemp(prefix="turnstile-failover-")
    nodes = [Node(root, BASE + i) for i in range(6)]
    who = "redis-server" if REDIS else "turnstile"
    try:
        for n in nodes:
            n.start()
        cli("--cluster", "create", *[n.addr() for n in nodes], "--cluster-replicas", "1", "--cluster-yes")
        wait_agreement(nodes, "create")
        wait_for("cluster_state:ok", lambda: all("cluster_state:ok" in n.r().execute_command("CLUSTER", "INFO")
                                                  for n in nodes), 30, 0.2)
        check(nodes[0], "create")
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", BASE)], decode_responses=True,
                          cluster_error_retry_attempts=20)
        keys = [f"k{i}" for i in range(KEYS)]
        load = Load(keys)
        load.start()
        time.sleep(2)

        # 1. CLUSTER FAILOVER on a replica, under load.
        primary = next(n for n in nodes if n.is_primary())
        replica = replica_of(nodes, primary)
        lost0, _ = load.lost(rc)
        t = time.time()
        replica.r().execute_command("CLUSTER", "FAILOVER")
        took = wait_for("the replica to be primary", replica.is_primary, 10)
        back = wait_for("the old primary to be a replica", lambda: not primary.is_primary(), 10)
        print(f"[{who}] CLUSTER FAILOVER: replica primary after {took * 1000:.0f} ms, old primary a replica "
              f"after {(time.time() - t) * 1000:.0f} ms", flush=True)
        wait_agreement(nodes, "CLUSTER FAILOVER")
        time.sleep(1)
        lost, total = load.lost(rc)
        print(f"[{who}] CLUSTER FAILOVER: {lost - lost0} of {total} acknowledged increments lost", flush=True)
        if lost - lost0:
            fail(f"CLUSTER FAILOVER lost {lost - lost0} acknowledged increments")
        check(nodes[0], "CLUSTER FAILOVER")

        # 2. kill -9 of a primary.
        victim = next(n for n in nodes if n.is_primary() and n is not replica)
        heir = replica_of(nodes, victim)
        probe_key = key_of(victim, rc, keys)
        lost0, _ = load.lost(rc)
        t = time.time()
        victim.signal(signal.SIGKILL)
        promoted = wait_for("the replica's promotion", heir.is_primary, 60)

        def served():
            c = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", heir.port)], decode_responses=True)
            try:
                c.incr(probe_key + ":probe")
                return True
            finally:
                c.close()
        wait_for("a client served on the dead primary's slots", served, 60, 0.05)
        served_after = time.time() - t
        print(f"[{who}] kill -9: replica promoted after {promoted * 1000:.0f} ms, clients served after "
              f"{served_after * 1000:.0f} ms (node timeout {TIMEOUT_MS} ms)", flush=True)
        time.sleep(1)
        lost, total = load.lost(rc)
        print(f"[{who}] kill -9: {lost - lost0} of {total} acknowledged increments lost", flush=True)
        victim.start()
        wait_for("the old primary to rejoin as a replica", lambda: (victim.myself() or ["", "", "master"])[2]
                 .endswith("slave") and victim.myself()[3] == heir.id(), 60, 0.1)
        wait_agreement(nodes, "the old primary's restart")
        wait_for("the rejoined replica's link",
                 lambda: victim.r().info("replication").get("master_link_status") == "up", 30, 0.2)
        check(nodes[0], "kill -9 and the old primary's return")

        # 3. SIGSTOP of a primary past the timeout, then SIGCONT.
        stopped = next(n for n in nodes if n.is_primary() and n is not heir)
        heir2 = replica_of(nodes, stopped)
        key = key_of(stopped, rc, keys)
        direct = redis.Redis(port=stopped.port, socket_timeout=5)
        direct.ping()
        lost0, _ = load.lost(rc)
        stopped.signal(signal.SIGSTOP)
        wait_for("the stopped primary's replica's promotion", heir2.is_primary, 60)
        time.sleep(1)
        served = 0
        refused = {}
        stopped.signal(signal.SIGCONT)
        t = time.time()
        while time.time() - t < 3:
            try:
                direct.execute_command("INCR", key + ":stale")
                served += 1
            except redis.exceptions.ResponseError as e:
                w = str(e).split()[0]
                refused[w] = refused.get(w, 0) + 1
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                break
        print(f"[{who}] SIGSTOP past the timeout, SIGCONT: {served} writes served as a second primary, "
              f"refused {refused}", flush=True)
        if served:
            fail(f"the resumed primary served {served} writes on slots another node now serves")
        wait_for("the resumed primary to follow", lambda: not stopped.is_primary(), 30, 0.1)
        wait_agreement(nodes, "SIGCONT")
        time.sleep(2)
        lost, total = load.lost(rc)
        print(f"[{who}] SIGSTOP: {lost - lost0} of {total} acknowledged increments lost", flush=True)
        check(nodes[0], "SIGSTOP/SIGCONT")

        load.finish()
        lost, total = load.lost(rc)
        print(f"[{who}] in all: {lost} of {total} acknowledged increments lost, {load.errors} requests "
              f"failed (outcome unknown)", flush=True)
    finally:
        for n in nodes:
            if n.proc and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
            n.signal(signal.SIGKILL)
        if failures or "--keep" in sys.argv:
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("cluster_failover: all passed")


if __name__ == "__main__":
    main()
