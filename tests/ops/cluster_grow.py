#!/usr/bin/env python3
"""A cluster's day with the tools Redis operators use, through the binary.

    python3 tests/ops/cluster_grow.py [BIN] [--keys N]

Six nodes made a cluster by Debian's `redis-cli --cluster create
--cluster-replicas 1`; `check` clean; a seventh node added (`add-node`) and
given slots (`rebalance --cluster-use-empty-masters`); its slots moved back
(`reshard`) and the node removed (`del-node`); a primary restarted from its
config file. Throughout, redis-py's RedisCluster sends limited requests
(`RL.ALLOW ... ALGO log`, one hour, so every request of the run falls in one
window) and monthly quota charges to keys in every slot, following MOVED and
ASK. Judged per key at the end: admissions never above the limit and never
below min(requests, limit); each quota key's usage equals what was
acknowledged. ioredis's Cluster client (tests/compat/node, after `npm ci`
there) sends limited requests to keys of its own beside them, judged the
same way. Exits non-zero on any failure. Needs redis-cli (redis-tools)
and the redis Python package.
"""

import os
import random
import re
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
KEYS = int(sys.argv[sys.argv.index("--keys") + 1]) if "--keys" in sys.argv else 400
PASSWORD = sys.argv[sys.argv.index("--password") + 1] if "--password" in sys.argv else None
AUTH = ["-a", PASSWORD, "--no-auth-warning"] if PASSWORD else []
# Ports below the ephemeral range (32768+), bus ports (+10000) too, so no
# outbound connection can hold one.
BASE = 16001
LIMIT = 20
QUOTA_COST = 7
TIMEOUT_MS = 5000

failures = []


def fail(msg):
    print("FAIL:", msg, flush=True)
    failures.append(msg)


def cli(*args, check=True, timeout=300):
    cmd = ["redis-cli", *AUTH, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input="yes\n")
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        print(out)
        fail(f"redis-cli {' '.join(args)} exited {r.returncode}")
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
        self.proc = subprocess.Popen(
            [BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-node-timeout", str(TIMEOUT_MS), "--metrics-addr", "off",
             "--appendonly", "yes", "--appendfsync", "always",
             *(["--requirepass", PASSWORD, "--masterauth", PASSWORD] if PASSWORD else [])],
            cwd=self.dir, stdout=log, stderr=log)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1, password=PASSWORD).ping():
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise SystemExit(f"node {self.port} did not start; log:\n" + open(os.path.join(self.dir, "log")).read())

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)

    def r(self):
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True, password=PASSWORD)

    def id(self):
        return self.r().execute_command("CLUSTER", "MYID")

    def addr(self):
        return f"127.0.0.1:{self.port}"

    def owns(self, slot):
        line = [l for l in self.r().execute_command("CLUSTER", "NODES").splitlines() if "myself" in l][0]
        for part in line.split()[8:]:
            if part.startswith("["):
                continue
            a, _, b = part.partition("-")
            if int(a) <= int(slot) <= int(b or a):
                return True
        return False


class Load:
    """Clients sending limited requests and quota charges while slots move."""

    def __init__(self, keys):
        self.keys = keys
        self.sent = {k: 0 for k in keys}
        self.admitted = {k: 0 for k in keys}
        self.charged = {k: 0 for k in keys}
        self.errors = []
        self.client_ask_bug = 0
        self.expected = 0
        self.outage = threading.Event()
        self.stop = threading.Event()
        # pause(): no request in flight while a node is killed, so none can
        # be applied and persisted but unacknowledged, then retried by the
        # client library (redis-py retries on a lost connection), which
        # would count twice through no fault of the server's.
        self.running = threading.Event()
        self.running.set()
        self.parked = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(3)]

    def start(self):
        for t in self.threads:
            t.start()

    def run(self, seed):
        rnd = random.Random(seed)
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", BASE)], decode_responses=True, password=PASSWORD,
                          cluster_error_retry_attempts=10)
        while not self.stop.is_set():
            if not self.running.is_set():
                self.parked.release()
                self.running.wait()
            k = rnd.choice(self.keys)
            try:
                if rnd.random() < 0.5:
                    reply = rc.execute_command("RL.ALLOW", "lim:" + k, LIMIT, "1h", "ALGO", "log")
                    with self.lock:
                        if self.sent[k] is not None:
                            self.sent[k] += 1
                        self.admitted[k] += int(reply[0])
                else:
                    reply = rc.execute_command("RL.ALLOW", "quota:" + k, 10**9, "1mo", "ALGO", "fixed", "COST", QUOTA_COST)
                    with self.lock:
                        self.charged[k] += QUOTA_COST * int(reply[0])
            except AttributeError as e:
                if "redis_connection" not in str(e):
                    raise
                # redis-py 5.2 follows an ASK to a node with no slots yet (the
                # rebalance's first slots to the new node) by looking it up in
                # a node list built from CLUSTER SLOTS, finds none and fails
                # before sending (redis/redis-py#4015, #2432; Redis's ASK
                # does the same). Nothing ran: every try before answered
                # ASK, MOVED or TRYAGAIN. Counted, and the key stays judged.
                with self.lock:
                    self.client_ask_bug += 1
            except Exception as e:  # noqa: BLE001 - every error a client could not follow is a failure
                with self.lock:
                    if self.outage.is_set():
                        # A node was killed on purpose: its keys' requests
                        # fail until it is back.
                        self.expected += 1
                    else:
                        self.errors.append(f"{type(e).__name__}: {e}")
                # A request whose fate is unknown would make the judgement
                # unsound; count it and stop judging that key.
                with self.lock:
                    self.sent[k] = None
            time.sleep(0.001)

    def pause(self):
        self.running.clear()
        for _ in self.threads:
            self.parked.acquire()

    def resume(self):
        self.running.set()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def judge(self, rc):
        for e in self.errors[:5]:
            fail(f"client error during moves: {e}")
        if len(self.errors) > 5:
            fail(f"... {len(self.errors)} client errors in all")
        judged = 0
        for k in self.keys:
            sent = self.sent[k]
            if sent is None:
                continue
            judged += 1
            if self.admitted[k] > LIMIT:
                fail(f"{k}: {self.admitted[k]} admissions over a limit of {LIMIT}")
            if self.admitted[k] < min(sent, LIMIT):
                fail(f"{k}: {self.admitted[k]} admissions of {sent} requests, limit {LIMIT}")
            # The keys' own counts agree with what clients saw.
            if used(rc, "lim:" + k) != self.admitted[k]:
                fail(f"{k}: server counts {used(rc, 'lim:' + k)}, clients saw {self.admitted[k]} admissions")
            if used(rc, "quota:" + k) != self.charged[k]:
                fail(f"quota:{k}: usage {used(rc, 'quota:' + k)}, acknowledged {self.charged[k]}")
        print(f"judged {judged} keys: {sum(v or 0 for v in self.sent.values())} limited requests, "
              f"{sum(self.charged.values()) // QUOTA_COST} quota charges; {self.expected} requests failed "
              f"while a node was down on purpose (their keys not judged); {self.client_ask_bug} ASKs "
              f"redis-py could not follow to a node with no slots (not run)", flush=True)


class IoLoad:
    """ioredis's Cluster client (tests/compat/node/cluster_load.js) on keys
    of its own, judged like the Python clients'."""

    SCRIPT = os.path.join(ROOT, "tests/compat/node/cluster_load.js")

    def __init__(self):
        self.proc = None
        if not (shutil.which("node") and os.path.isdir(os.path.join(ROOT, "tests/compat/node/node_modules/ioredis"))):
            print("ioredis client: skipped (node or tests/compat/node's npm ci missing)", flush=True)
            return
        self.proc = subprocess.Popen(["node", self.SCRIPT, str(BASE), "200", str(LIMIT), *([PASSWORD] if PASSWORD else [])],
                                     stdout=subprocess.PIPE, text=True)

    def pause(self):
        if self.proc:
            self.proc.send_signal(signal.SIGUSR1)
            line = self.proc.stdout.readline().strip()
            if line != "paused":
                fail(f"ioredis client did not pause: {line!r}")

    def resume(self):
        if self.proc:
            self.proc.send_signal(signal.SIGUSR2)

    def judge(self, rc):
        if not self.proc:
            return
        self.proc.send_signal(signal.SIGTERM)
        import json
        out = json.loads(self.proc.stdout.readline())
        self.proc.wait(timeout=30)
        for e in out["errors"][:5]:
            fail(f"ioredis client error during moves: {e}")
        for k, sent in out["sent"].items():
            got = out["admitted"][k]
            if got > LIMIT or got < min(sent, LIMIT):
                fail(f"ioredis {k}: {got} admissions of {sent} requests, limit {LIMIT}")
            if used(rc, "lim:" + k) != got:
                fail(f"ioredis {k}: server counts {used(rc, 'lim:' + k)}, the client saw {got}")
        print(f"ioredis Cluster: judged {len(out['sent'])} keys, {sum(out['sent'].values())} requests; "
              f"{out['closed']} requests whose connection ioredis closed (keys not judged)", flush=True)
        self.proc = None


def used(rc, key):
    """A limiter key's count, from RL.STATE (0 if it does not exist)."""
    state = rc.execute_command("RL.STATE", key)
    if not state:
        return 0
    if isinstance(state, list):
        state = dict(zip(state[::2], state[1::2]))
    return int(state["count"])


def check(node, what, context=""):
    out = cli("--cluster", "check", node.addr(), check=False)
    if "[ERR]" in out or "[WARNING]" in out or "All 16384 slots covered" not in out:
        problems = [l for l in out.splitlines() if "[ERR]" in l or "[WARNING]" in l]
        fail(f"check after {what}: " + "; ".join(problems) + f"\n{context}{out}")
        return False
    print(f"check after {what}: clean", flush=True)
    return True


def diagnose(nodes):
    """What each node says about the cluster, and its log's last lines: CI
    keeps no files, so a failure prints what explains it."""
    for n in nodes:
        try:
            print(f"--- {n.addr()} CLUSTER NODES:\n" + n.r().execute_command("CLUSTER", "NODES"), flush=True)
        except Exception as e:  # noqa: BLE001 - a dead node is part of the picture
            print(f"--- {n.addr()}: {e}", flush=True)
        try:
            with open(os.path.join(n.dir, "log"), errors="replace") as f:
                tail = f.readlines()[-25:]
            print(f"--- {n.addr()} log tail:\n" + "".join(tail), flush=True)
        except OSError:
            pass


def nodes_owner(nodes, slot):
    """The id of the node that owns `slot`, as the first node sees it."""
    for line in nodes[0].r().execute_command("CLUSTER", "NODES").splitlines():
        w = line.split()
        for part in w[8:]:
            if part.startswith("["):
                continue
            a, _, b = part.partition("-")
            if int(a) <= int(slot) <= int(b or a):
                return w[0]
    return None


def wait_ok(node, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline and "cluster_state:ok" not in node.r().execute_command("CLUSTER", "INFO"):
        time.sleep(0.2)


def wait_agreement(nodes, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        sigs = set()
        for n in nodes:
            lines = n.r().execute_command("CLUSTER", "NODES").strip().splitlines()
            # As redis-cli compares them: id and slots, not open-slot marks.
            sigs.add(tuple(sorted(" ".join([l.split()[0]] + [w for w in l.split()[8:] if not w.startswith("[")])
                                  for l in lines)))
        if len(sigs) == 1:
            return
        time.sleep(0.2)
    fail(f"nodes do not agree after {what}")


def main():
    if not shutil.which("redis-cli"):
        raise SystemExit("redis-cli is not installed")
    root = tempfile.mkdtemp(prefix="turnstile-cluster-")
    nodes = [Node(root, BASE + i) for i in range(7)]
    try:
        for n in nodes[:6]:
            n.start()
        t = time.time()
        out = cli("--cluster", "create", *[n.addr() for n in nodes[:6]], "--cluster-replicas", "1", "--cluster-yes")
        print(f"create: {time.time() - t:.1f} s", flush=True)
        if "[OK] All 16384 slots covered" not in out:
            fail("create did not cover the slots:\n" + out)
        check(nodes[0], "create")
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", BASE)], decode_responses=True, password=PASSWORD)
        keys = [f"k{i}" for i in range(KEYS)]
        load = Load(keys)
        load.start()
        io = IoLoad()
        time.sleep(2)

        nodes[6].start()
        cli("--cluster", "add-node", nodes[6].addr(), nodes[0].addr())
        wait_agreement(nodes, "add-node")
        t = time.time()
        out = cli("--cluster", "rebalance", nodes[0].addr(), "--cluster-use-empty-masters")
        print(f"rebalance: {time.time() - t:.1f} s", flush=True)
        check(nodes[0], "rebalance")
        moved = len(nodes[6].r().execute_command("CLUSTER", "SLOTS"))
        if moved == 0:
            fail("rebalance gave the new node no slots")

        new_id = nodes[6].id()
        first_id = nodes[0].id()
        owned = sum(b - a + 1 for a, b, *_ in nodes[6].r().execute_command("CLUSTER", "SLOTS")
                    if _ and _[0][1] == nodes[6].port)
        t = time.time()
        cli("--cluster", "reshard", nodes[0].addr(), "--cluster-from", new_id, "--cluster-to", first_id,
            "--cluster-slots", str(owned), "--cluster-yes")
        print(f"reshard {owned} slots: {time.time() - t:.1f} s", flush=True)
        check(nodes[0], "reshard")
        cli("--cluster", "del-node", nodes[0].addr(), new_id)
        nodes[6].stop()
        wait_agreement(nodes[:6], "del-node")
        check(nodes[0], "del-node")

        # kill -9 of the source in the middle of a reshard, then fix.
        src, dst = nodes[0], next(n for n in nodes[1:6] if "myself,master" in n.r().execute_command("CLUSTER", "NODES"))
        src_id, dst_id = src.id(), dst.id()
        mover = subprocess.Popen(["redis-cli", *AUTH, "--cluster", "reshard", src.addr(), "--cluster-from", src_id,
                                  "--cluster-to", dst_id, "--cluster-slots", "3000", "--cluster-yes"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            if "->-" in src.r().execute_command("CLUSTER", "NODES") and time.time() > deadline - 57:
                break
            time.sleep(0.05)
        load.outage.set()
        load.pause()
        io.pause()
        src.stop(signal.SIGKILL)
        mover.wait(timeout=60)
        src.start()
        wait_agreement(nodes[:6], "the source's restart")
        # A primary back from a crash serves again once it has heard the
        # cluster (Redis's rejoin delay): fix waits for it.
        wait_ok(src)
        # The clients wait for fix too. A key whose move the kill cut
        # short (the target restored it, the source's delete was not yet
        # on disk) is on both nodes; fix replaces the importing copy only
        # when DEBUG DIGEST-VALUE finds the two equal, and a client served
        # by the source meanwhile would make them differ (fix then stops,
        # as it does with Redis: docs/cluster.md).
        t = time.time()
        out = cli("--cluster", "fix", src.addr(), check=False)
        print(f"fix after kill -9 mid-reshard: {time.time() - t:.1f} s", flush=True)
        load.resume()
        io.resume()
        for line in out.splitlines():
            if "open slot" in line.lower() or "Fixing" in line or "migrating" in line.lower() or "key" in line.lower():
                print("  fix: " + line.strip(), flush=True)
        print("  fix found " + ("an open slot" if "Fixing open slot" in out else "the move closed by itself"), flush=True)
        if "[OK] All 16384 slots covered" not in out:
            fail("fix did not cover the slots:\n" + out)
        wait_agreement(nodes[:6], "fix")
        wait_ok(src)
        load.outage.clear()
        if not check(nodes[0], "fix after the reshard's kill", context=f"fix said:\n{out}\ncheck said:\n"):
            diagnose(nodes[:6])

        # The same, with the source killed while half a slot's keys have
        # moved: the slot is open on both sides for certain.
        src_id, dst_id = src.id(), dst.id()
        r = src.r()
        # Ten keys sharing a slot the source owns, each with a usage of 3.
        tag = next(t for t in (f"fix{i}" for i in range(100000))
                   if src.owns(r.execute_command("CLUSTER", "KEYSLOT", t)))
        slot = r.execute_command("CLUSTER", "KEYSLOT", tag)
        for i in range(10):
            r.execute_command("RL.ALLOW", f"{{{tag}}}:{i}", 100, "1h", "ALGO", "log", "COST", 3)
        dst.r().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        r.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        in_slot = r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        half = in_slot[: len(in_slot) // 2]
        auth = ["AUTH", PASSWORD] if PASSWORD else []
        r.execute_command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, *auth, "KEYS", *half)
        load.outage.set()
        load.pause()
        io.pause()
        src.stop(signal.SIGKILL)
        src.start()
        wait_agreement(nodes[:6], "the source's second restart")
        wait_ok(src)
        # The clients wait for fix here too: with keys on both nodes, fix
        # sends DELSLOTS and then SETSLOT NODE to the importing node, and
        # between the two that node has the slot unassigned (-CLUSTERDOWN, and
        # a CLUSTER SLOTS without it), as Redis does; redis-py 5.2 then
        # fails on its own slot map's hole (AttributeError), seen once.
        out = cli("--cluster", "fix", src.addr(), check=False)
        n_failures = len(failures)
        if f"Fixing open slot {slot}" not in out:
            fail(f"fix did not find slot {slot} open:\n" + out)
        wait_agreement(nodes[:6], "the second fix")
        load.resume()
        io.resume()
        owner_id = nodes_owner(nodes, slot)
        owner = next(n for n in nodes[:6] if n.id() == owner_id)
        try:
            missing = [k for k in in_slot if not owner.r().exists(k)]
        except redis.exceptions.ResponseError as e:
            fail(f"after fix, slot {slot}'s owner {owner.addr()} redirects: {e}; fix said:\n{out}")
            diagnose(nodes[:6])
            raise
        if missing:
            fail(f"after fix, slot {slot}'s owner {owner.addr()} lacks {missing}")
        wrong = [k for k in in_slot if k.startswith("{") and used(owner.r(), k) != 3]
        if wrong:
            fail(f"after fix, keys lost their usage: {wrong}")
        else:
            print(f"fix closed slot {slot} with its {len(in_slot)} keys on {owner.addr()}", flush=True)
        deadline = time.time() + 30
        while time.time() < deadline and "cluster_state:ok" not in src.r().execute_command("CLUSTER", "INFO"):
            time.sleep(0.2)
        load.outage.clear()
        time.sleep(2)
        check(nodes[0], "fix of a half-moved slot")
        if len(failures) > n_failures:
            print("the second fix said:\n" + out, flush=True)
            diagnose(nodes[:6])

        load.finish()
        load.judge(rc)
        io.judge(rc)

        # A primary restarts from its config file: same id, same slots.
        primary = next(n for n in nodes[:6] if "myself,master" in n.r().execute_command("CLUSTER", "NODES"))
        before_id = primary.id()
        before = [l for l in primary.r().execute_command("CLUSTER", "NODES").splitlines() if "myself" in l][0].split()
        primary.stop()
        primary.start()
        after = [l for l in primary.r().execute_command("CLUSTER", "NODES").splitlines() if "myself" in l][0].split()
        if primary.id() != before_id or before[8:] != after[8:] or before[6] != after[6]:
            fail(f"restart changed the node: {before} -> {after}")
        wait_agreement(nodes[:6], "restart")
        # A restarted primary refuses requests for its writable delay (2 s,
        # as Redis's), time to hear of a failover made while it was down.
        wait_ok(primary)
        check(nodes[0], "restart")
        load.judge(RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", BASE)], decode_responses=True, password=PASSWORD))
    finally:
        for n in nodes:
            n.stop(signal.SIGKILL)
        if failures:
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("cluster_grow: all passed")


if __name__ == "__main__":
    main()
