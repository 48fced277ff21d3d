#!/usr/bin/env python3
"""The cluster's own cost of moving an empty slot: Turnstile beside Redis 7.

    python3 benches/cluster_slot_moves.py [BIN] [--slots N]

Four primaries per server (a quarter of the slots each, met with CLUSTER
MEET), then N empty slots moved from the first to the second with the
commands `redis-cli --cluster reshard` sends for each slot: SETSLOT
IMPORTING on the target, MIGRATING on the source, GETKEYSINSLOT, then
SETSLOT NODE on the target, the source and the two others. One client, one
command at a time, so the time per slot is seven round trips plus what the
nodes do meanwhile (the target's broadcast and every node's handling of
it). Prints the mean time per slot for each server and their ratio.
Needs redis-server and the redis package.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_pos = [a for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and not sys.argv[i - 1].startswith("--")]
BIN = os.path.abspath(_pos[0]) if _pos else os.path.join(ROOT, "target/release/turnstile")
SLOTS = int(sys.argv[sys.argv.index("--slots") + 1]) if "--slots" in sys.argv else 1500


def start(kind, binary, port, root):
    d = os.path.join(root, str(port))
    os.makedirs(d)
    if kind == "redis":
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--appendonly", "yes", "--save", "", "--dir", d]
    else:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--appendonly", "yes", "--metrics-addr", "off"]
    p = subprocess.Popen(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port, decode_responses=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            r.ping()
            return p, r
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    raise SystemExit(f"{kind} on {port} did not start")


def per_slot(kind, binary, base):
    root = tempfile.mkdtemp(prefix="slot-moves-")
    procs, rs = [], []
    try:
        for i in range(4):
            p, r = start(kind, binary, base + i, root)
            procs.append(p)
            rs.append(r)
        for i, r in enumerate(rs):
            r.execute_command("CLUSTER", "ADDSLOTSRANGE", i * 4096, i * 4096 + 4095)
        for r in rs[1:]:
            r.execute_command("CLUSTER", "MEET", "127.0.0.1", base)
        deadline = time.time() + 60
        while time.time() < deadline:
            if all(len(r.execute_command("CLUSTER", "NODES").splitlines()) == 4
                   and "cluster_state:ok" in r.execute_command("CLUSTER", "INFO") for r in rs):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"{kind}: the cluster did not form")
        time.sleep(2)
        ids = [r.execute_command("CLUSTER", "MYID") for r in rs]
        src, dst = rs[0], rs[1]
        t = time.perf_counter()
        for s in range(SLOTS):
            dst.execute_command("CLUSTER", "SETSLOT", s, "IMPORTING", ids[0])
            src.execute_command("CLUSTER", "SETSLOT", s, "MIGRATING", ids[1])
            src.execute_command("CLUSTER", "GETKEYSINSLOT", s, 10)
            dst.execute_command("CLUSTER", "SETSLOT", s, "NODE", ids[1])
            src.execute_command("CLUSTER", "SETSLOT", s, "NODE", ids[1])
            rs[2].execute_command("CLUSTER", "SETSLOT", s, "NODE", ids[1])
            rs[3].execute_command("CLUSTER", "SETSLOT", s, "NODE", ids[1])
        return (time.perf_counter() - t) / SLOTS * 1e6
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)
        shutil.rmtree(root, ignore_errors=True)


def main():
    t = per_slot("turnstile", BIN, 17201)
    r = per_slot("redis", shutil.which("redis-server") or "redis-server", 17211)
    print(f"{SLOTS} empty slots moved, 4 primaries: per slot turnstile {t:.0f} us, redis {r:.0f} us, "
          f"ratio {t / r:.2f}")


if __name__ == "__main__":
    main()
