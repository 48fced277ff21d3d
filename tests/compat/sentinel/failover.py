#!/usr/bin/env python3
"""Automatic failover under real Redis Sentinel, with clients deciding limits.

    failover.py --server redis                 # primary and replicas: redis-server
    failover.py --server turnstile --bin PATH  # primary and replicas: Turnstile

Starts a primary P0 and two replicas P1, P2 (started replicating from P0),
then three `redis-sentinel` processes (Debian's) told
`sentinel monitor turnstile 127.0.0.1 P0 2`, and two clients that decide
limits through Sentinel at about 400 decisions/s each:

- redis-py: `Sentinel(...).master_for("turnstile")` in a thread of this
  script (keys fo:py:0..4);
- ioredis: `new Redis({sentinels, name: "turnstile"})` in
  ioredis_loop.js beside this file (keys fo:js:0..4), which prints its
  counts as JSON lines.

After 3 s the primary is killed (SIGKILL). The script checks that every
Sentinel moves the primary to a replica, that both clients carry on
against the new primary (failover time: from the kill to each client's
first decision answered after it), that the old primary, restarted on its
port with no replication option, is turned by Sentinel into a replica of
the new primary, and that the other replica follows the new primary. The
clients then run until every key is at its limit (2000 per key for 1 h,
`ALGO fixed`, so no window resets during the run), and the admissions the
clients saw are compared with the counts of the new primary:

- lost admissions (per key, client-admitted minus the server's count) are
  at most the admissions made in the 1000 ms before the kill (the window a
  replica may not have received yet); a key's loss can be negative, by a
  decision the server counted whose reply never reached the client;
- no key admitted more than limit + its lost admissions, nor more than
  limit + its own admissions of that window;
- exactly one failover happened (every Sentinel at config-epoch 1).

Sentinels: down-after-milliseconds 2000 (see DOWN_AFTER_MS for why not
1000), failover-timeout 10000, parallel-syncs 2, quorum 2.

The decision per kind of server (the same in ioredis_loop.js):
- turnstile: `RL.ALLOW key 2000 1h ALGO fixed`, admitted when the first
  of its five integers is 1; the server's count afterwards from
  `RL.PEEK key 2000 1h ALGO fixed` (limit - remaining - allowed: PEEK's
  `remaining` is what would be left after one more request);
- redis (a dry run of the harness on real Redis): `INCR key`, admitted
  while the reply is <= 2000; the server's count min(GET key, 2000).

The ioredis process learns when the primary died from a line
`kill T_KILL_MS T_DEAD_MS` on its stdin (this script's time.time() at the
SIGKILL and once the primary was reaped, in ms); it keeps its own times in
the same wall clock (performance.timeOrigin + performance.now()), so both
clients' failover times are measured from the same instant. A decision
counts as "after the failover" when its request was sent after the
primary was reaped, so no reply already on its way from the old primary
can pass for one.

Needs: redis-sentinel and redis-server (Debian: apt-get install
redis-sentinel redis-server), redis-py (pip install redis), node with
tests/compat/node/node_modules (npm ci there). Every process it starts is
killed on exit. Exit status 0 when every check passed.
"""

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sentinel_common import (HERE, ROOT, PacedClient, ServerProcess, agreed_primary, alive,
                             ask, check, conclude, conn, decide, failures, follows, info_repl,
                             logs, note, procs, repl_summary, run, sentinel_master,
                             sentinel_ready, server_count, stamp, start_sentinel, wait_for)
from benchlib import die_with_parent, free_ports  # sentinel_common puts benches/ on sys.path

from redis.sentinel import Sentinel

MASTER = "turnstile"
LIMIT = 2000
NKEYS = 5
RATE = 400          # decisions/s per client
WARMUP = 3.0        # s of decisions before the kill
LAG_WINDOW = 1.0    # s before the kill whose admissions a replica may miss
RUN_AFTER = 40.0    # s at most, after the reconfiguration, for every key to reach its limit
# Sentinel's down-after-milliseconds. Not 1000: at +switch-master a Sentinel
# resets its link to the new primary (the silence clock starts then) but
# reconnects at most once a second (SENTINEL_PING_PERIOD), so its first PONG
# can come more than 1000 ms later; the new primary is then s_down, and with
# the other Sentinels' "master down" answers about the old primary still
# counted (kept 5 s) it is o_down at once: a second failover, to the other
# replica, while clients still write to the first one (1 run in 5 here).
DOWN_AFTER_MS = 2000


# ------------------------------------------------------------ decision drivers

class TurnstileDriver:
    """RL.ALLOW key limit 1h ALGO fixed -> [allowed, limit, remaining, retry_after_ms,
    reset_after_ms]."""

    def decide(self, client, key):
        return decide(client, key, LIMIT)

    def server_count(self, client, key):
        return server_count(client, key, LIMIT)


class RedisDriver:
    """Real Redis, for dry runs of this harness: INCR, admitted within the limit."""

    def decide(self, client, key):
        return int(client.incr(key)) <= LIMIT

    def server_count(self, client, key):
        return min(int(client.get(key) or 0), LIMIT)


DRIVERS = {"turnstile": TurnstileDriver, "redis": RedisDriver}


# ------------------------------------------------------------------- processes

class DataServer(ServerProcess):
    """A primary or replica, redis-server or Turnstile, on a fixed port (a
    restart takes the same port back)."""

    def __init__(self, kind, binary, port, tmp):
        super().__init__("server", port, tmp)
        self.kind, self.binary = kind, binary

    def argv(self, replicaof):
        if self.kind == "redis":
            argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", str(self.dir)]
            if replicaof:
                argv += ["--replicaof", "127.0.0.1", str(replicaof)]
        else:
            argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                    "--metrics-addr", "off", "--log-level", "info"]
            if replicaof:
                argv += ["--replicaof", f"127.0.0.1:{replicaof}"]
        return argv

    def start(self, replicaof=None):
        self.launch(self.argv(replicaof))
        return self.answers()


class PyClient(PacedClient):
    """redis-py through Sentinel: decisions in a paced loop until stopped."""

    def __init__(self, driver, sentinel_ports, prefix):
        sentinel = Sentinel([("127.0.0.1", p) for p in sentinel_ports], socket_timeout=0.5)
        super().__init__("redis-py client", sentinel.master_for(MASTER, socket_timeout=0.5),
                         [f"{prefix}{i}" for i in range(NKEYS)], RATE)
        self.driver = driver
        self.successes = []                              # (start, end), monotonic

    def decide(self, key):
        return self.driver.decide(self.client, key)

    def answered(self, key, start, end):
        self.successes.append((start, end))

    def result(self, t_kill, t_dead):
        first = next((e for s, e in self.successes if s >= t_dead), None)
        return {
            "admitted": dict(self.admitted),
            "denied": dict(self.denied),
            "ok": self.ok,
            "errors": self.errors,
            "error_kinds": dict(self.error_kinds),
            "failover_ms": None if first is None else (first - t_kill) * 1000,
            "lag_window": self.lag_window(t_kill, LAG_WINDOW),
            "ok_after_kill": self.ok_after_kill,
        }


class NodeClient:
    """ioredis_loop.js: its latest tick and final summary, read from its stdout."""

    def __init__(self, server, sentinel_ports, tmp):
        self.log = tmp / "ioredis.log"
        logs.append(("ioredis stderr", self.log))
        argv = ["node", str(HERE / "ioredis_loop.js"), "--server", server,
                "--sentinels", ",".join(map(str, sentinel_ports)), "--name", MASTER,
                "--prefix", "fo:js:", "--keys", str(NKEYS), "--limit", str(LIMIT),
                "--rate", str(RATE)]
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, preexec_fn=die_with_parent)
        procs.append(self.proc)
        alive["ioredis_loop.js"] = self.proc
        self.tick = {}
        self.summary = None
        self.other = collections.deque(maxlen=20)
        self.reader = threading.Thread(target=self._read, daemon=True, name="ioredis-reader")
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                self.other.append(line.rstrip())
                continue
            if obj.get("type") == "tick":
                self.tick = obj
            elif obj.get("type") == "summary":
                self.summary = obj

    def send_kill(self, wall_kill, wall_dead):
        self.proc.stdin.write(f"kill {wall_kill * 1000:.3f} {wall_dead * 1000:.3f}\n")
        self.proc.stdin.flush()

    def stop(self, timeout=10):
        """Closes its stdin (the loop stops, prints its summary, exits)."""
        alive.pop("ioredis_loop.js", None)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        return self.summary


# ------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=sorted(DRIVERS), required=True)
    ap.add_argument("--bin", help="the Turnstile binary (--server turnstile)")
    args = ap.parse_args()
    if args.server == "turnstile" and not args.bin:
        ap.error("--server turnstile needs --bin PATH")
    for tool in ["redis-sentinel", "node"] + (["redis-server"] if args.server == "redis" else []):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed")
    if not (ROOT / "tests/compat/node/node_modules/ioredis").is_dir():
        sys.exit("ioredis is missing: cd tests/compat/node && npm ci")
    binary = str(Path(args.bin).resolve()) if args.bin else None
    driver = DRIVERS[args.server]()

    tmp = Path(tempfile.mkdtemp(prefix="turnstile-failover."))
    print(f"failover check: --server {args.server}, files in {tmp}", flush=True)
    p0, p1, p2, *sports = free_ports(6)
    servers = {p: DataServer(args.server, binary, p, tmp) for p in (p0, p1, p2)}
    replicas = [p1, p2]

    if not servers[p0].start():
        return finish(tmp, driver)
    for p in replicas:
        if not servers[p].start(replicaof=p0):
            return finish(tmp, driver)

    def replication_up():
        return (info_repl(p0).get("connected_slaves") == 2
                and all(info_repl(p).get("master_link_status") == "up" for p in replicas))

    if not wait_for("replication up (connected_slaves:2, both links up)", replication_up, 30):
        return finish(tmp, driver)
    check(True, f"primary {p0} with replicas {p1}, {p2}: connected_slaves:2, links up {stamp()}")

    for sp in sports:
        start_sentinel(tmp, sp, [(MASTER, p0)], {"down-after-milliseconds": DOWN_AFTER_MS,
                                                 "failover-timeout": 10000,
                                                 "parallel-syncs": 2})
    for sp in sports:
        if not wait_for(f"sentinel {sp} answers PING", lambda: ask(sp, "PING"), 10):
            return finish(tmp, driver)
    for sp in sports:
        if not wait_for(f"sentinel {sp} lists both replicas and both other sentinels",
                        lambda: sentinel_ready(sp, MASTER, replicas), 30):
            return finish(tmp, driver)
    check(True, f"sentinels {', '.join(map(str, sports))} each list both replicas "
                f"and the other two sentinels {stamp()}")

    # ---------------------------------------------------------------- clients
    py = PyClient(driver, sports, "fo:py:")
    node = NodeClient(args.server, sports, tmp)
    py.start()
    t_clients = time.monotonic()
    if not wait_for("both clients decide through Sentinel",
                    lambda: py.ok > 0 and node.tick.get("ok", 0) > 0, 15):
        return finish(tmp, driver, py, node)
    check(True, f"redis-py and ioredis decide through Sentinel {stamp()}")
    time.sleep(max(0.0, t_clients + WARMUP - time.monotonic()))

    before = {p: repl_summary(p) for p in (p0, p1, p2)}
    note(f"before the kill: py ok={py.ok} errors={py.errors}; "
         f"ioredis ok={node.tick.get('ok')} errors={node.tick.get('errors')}")
    for p in (p0, p1, p2):
        note(f"INFO replication {before[p]}")

    # --------------------------------------------------------------- failover
    wall_kill, t_kill = time.time(), time.monotonic()
    servers[p0].kill()
    wall_dead, t_dead = time.time(), time.monotonic()
    py.t_dead = t_dead
    node.send_kill(wall_kill, wall_dead)
    note(f"{stamp()} primary {p0} killed (SIGKILL), reaped after "
         f"{(t_dead - t_kill) * 1000:.1f} ms")

    def promoted():
        port = agreed_primary(sports, MASTER)
        return port if port in replicas else None

    new = wait_for("every sentinel names one replica as the primary", promoted, 60)
    if not new:
        return finish(tmp, driver, py, node)
    check(True, f"every sentinel names {new} as the primary, "
                f"{time.monotonic() - t_kill:.1f} s after the kill {stamp()}")
    other = p2 if new == p1 else p1

    if not wait_for("both clients decide again after the kill",
                    lambda: py.ok_after_kill > 0 and node.tick.get("ok_after_kill", 0) > 0, 30):
        return finish(tmp, driver, py, node)
    check(True, f"redis-py and ioredis both decide again after the failover {stamp()}")

    # ------------------------------------------- old primary back, as a replica
    if not servers[p0].start():
        return finish(tmp, driver, py, node)
    t_restart = time.monotonic()
    note(f"{stamp()} old primary {p0} restarted with no replication option: "
         f"{repl_summary(p0)}")

    if wait_for(f"old primary {p0} becomes a replica of {new} (link up)",
                lambda: follows(p0, new), 60):
        check(True, f"Sentinel turned the old primary {p0} into a replica of {new}, "
                    f"{time.monotonic() - t_restart:.1f} s after its restart {stamp()}")
    if wait_for(f"replica {other} follows the new primary {new}", lambda: follows(other, new), 30):
        check(True, f"replica {other} follows the new primary {new} (link up)")

    # ------------------------------------------------------ run to the limits
    def all_denied():
        return (all(py.denied[k] > 0 for k in py.keys)
                and all(v > 0 for v in node.tick.get("denied", {}).values())
                and len(node.tick.get("denied", {})) == NKEYS)

    deadline = time.monotonic() + RUN_AFTER
    while time.monotonic() < deadline and not all_denied():
        time.sleep(0.2)
    reached = all_denied()
    return finish(tmp, driver, py, node, t_kill=t_kill, t_dead=t_dead, new=new, sports=sports,
                  reached=reached)


def finish(tmp, driver, py=None, node=None, t_kill=None, t_dead=None, new=None, sports=None,
           reached=False):
    """Stops the clients; with a failover behind, compares their admissions
    with the new primary's counts. Returns the exit status."""
    py_res = node_res = None
    if py is not None:
        stopped = py.stop()
        if t_kill is not None:
            check(stopped and py.crash is None, "the redis-py client stops", py.crash or "")
            py_res = py.result(t_kill, t_dead)
    if node is not None:
        summary = node.stop()
        if t_kill is not None:
            check(summary is not None, "the ioredis client stops and prints its summary",
                  f"last lines: {list(node.other)}")
            node_res = summary

    if t_kill is not None and py_res and node_res:
        check(reached, "every key of both clients reached its limit (clients saw denials)",
              f"py denied {py_res['denied']}, ioredis denied {node_res['denied']}")
        final = wait_for("sentinels agree on the final primary",
                         lambda: agreed_primary(sports, MASTER), 10)
        check(final == new, f"final primary {final} is the promoted replica {new}")
        epochs = [sentinel_master(sp, MASTER).get("config-epoch") for sp in sports]
        check(epochs == ["1"] * len(sports),
              "exactly one failover (every sentinel at config-epoch 1)", f"epochs {epochs}")
        c = conn(new)
        try:
            server = {k: driver.server_count(c, k) for k in list(py_res["admitted"]) +
                      list(node_res["admitted"])}
        finally:
            c.close()
        total_lost = total_lag = 0
        for name, res in (("redis-py", py_res), ("ioredis", node_res)):
            fo = res.get("failover_ms")
            check(fo is not None and res.get("ok_after_kill", 0) > 0,
                  f"{name}: decisions after the failover")
            note(f"{name}: failover time {fo:.0f} ms" if fo is not None else
                 f"{name}: no decision after the kill")
            note(f"{name}: ok={res['ok']} errors={res['errors']} {res.get('error_kinds')}")
            over_lost, over_lag = [], []
            for k, admitted in res["admitted"].items():
                lost = admitted - server[k]
                lag = res["lag_window"][k]
                total_lost += lost
                total_lag += lag
                note(f"{name} {k}: client admitted {admitted}, server count {server[k]}, "
                     f"lost {lost}, lag-window admissions {lag}, denied {res['denied'][k]}")
                if admitted > LIMIT + lost:
                    over_lost.append(f"{k}: {admitted} > {LIMIT} + {lost}")
                if admitted > LIMIT + lag:
                    over_lag.append(f"{k}: {admitted} > {LIMIT} + {lag}")
            check(not over_lost, f"{name}: no key admitted more than limit + its lost admissions",
                  "; ".join(over_lost))
            check(not over_lag, f"{name}: no key admitted more than limit + its admissions of "
                                f"the {LAG_WINDOW * 1000:.0f} ms before the kill",
                  "; ".join(over_lag))
        note(f"lost admissions: {total_lost}; admissions in the {LAG_WINDOW * 1000:.0f} ms "
             f"before the kill: {total_lag}")
        check(total_lost <= total_lag,
              f"lost admissions {total_lost} <= lag-window admissions {total_lag}")
        ms = [f"{r['failover_ms']:.0f} ms" if r.get("failover_ms") is not None else "none"
              for r in (py_res, node_res)]
        print(f"failover: redis-py {ms[0]}, ioredis {ms[1]}; lost admissions {total_lost}; "
              f"lag-window admissions {total_lag}; final primary port {final}", flush=True)
    elif not failures:
        check(False, "the run reached the failover")

    return conclude("failover check", tmp)


if __name__ == "__main__":
    run(main, "failover check")
