#!/usr/bin/env python3
"""Failover of one shard of a Turnstile cluster under real Redis Sentinel.

    cluster_failover.py --bin PATH [--keep]

Starts six Turnstile nodes in cluster mode, three shards of a primary and
one replica, all given the same `--cluster-config` file:

    [[node]]  addr = P1  slots = ["0-5460"]       replicas = [P4]   # shard-0
    [[node]]  addr = P2  slots = ["5461-10922"]   replicas = [P5]   # shard-1
    [[node]]  addr = P3  slots = ["10923-16383"]  replicas = [P6]   # shard-2

and `--cluster-sentinels S1,S2,S3`, then three `redis-sentinel` processes
(Debian's) monitoring each shard by its name (`sentinel monitor shard-N
127.0.0.1 PN 2`). A node listed as a replica replicates its shard's primary
by itself; every node follows the Sentinels (`GET-MASTER-ADDR-BY-NAME` when
it connects, `+switch-master` after), so its `CLUSTER SLOTS`, `CLUSTER
NODES` and `MOVED` replies follow a failover. Before any decision: every
replica's link is up, every Sentinel lists each shard's replica and the
other two Sentinels, and has the six nodes subscribed (`CLIENT LIST`).

A redis-py `RedisCluster` client (a thread of this script, given the six
nodes as startup nodes) decides `RL.ALLOW key 2000 1h ALGO fixed` round-robin
over 15 keys, 5 per shard, at about 400 decisions/s, retrying after 50 ms on
any error. After 3 s the primary of shard-0 is killed (SIGKILL). The script
measures:

- the Sentinel failover time: from the kill until every Sentinel names the
  replica P4 as shard-0's primary;
- the slots-follow time: until every live node's `CLUSTER SLOTS` names P4
  as the primary of 0-5460 (and its `CLUSTER NODES` marks P4 master of
  0-5460 and P1 its slave);
- the client failover time: from the kill to the first successful decision
  on a shard-0 key whose request was sent after the primary was reaped;
- the longest gap between successful decisions on the other shards' keys
  (they must keep being decided: at most OTHER_GAP_MAX).

The killed node is then restarted on its port with its command line; it
must answer `MOVED` to P4 for shard-0 writes (it asks the Sentinels at
start), and Sentinel must turn it into a replica of P4 (`role:slave`,
`master_port` P4, link up) within 60 s, its own `CLUSTER NODES` naming it a
slave of P4.

The client then runs until every key is at its limit: unpaced from here (15
keys x 2000 at 400/s would take 75 s; only the admissions before the kill
matter to the checks below). The admissions the client saw are compared
with the servers' counts (`RL.PEEK` through the cluster client, so on each
key's current primary; count = limit - remaining - allowed, PEEK's
`remaining` being what one more request would leave):

- shard-0 keys: lost admissions (client-admitted minus the server's count)
  in total at most the admissions on shard-0 keys made in the 1000 ms
  before the kill (what the replica may not have received); no key
  admitted more than limit + its own admissions of that window, nor more
  than limit + its lost admissions;
- other shards' keys: nothing lost, no key over its limit;
- every replica, read through a READONLY connection, has its primary's
  counts;
- exactly one failover: every Sentinel has shard-0 at config-epoch 1 and
  the other shards at 0.

Reported as WARN lines, not failures: a first sync of the (empty) nodes
slower than SLOW_SYNC, and the restarted node admitting a shard-0 write at
its first PING, before it heard from the Sentinels.

Sentinels: down-after-milliseconds 2000 (see failover.py's DOWN_AFTER_MS
for why not 1000), failover-timeout 10000, quorum 2.

Needs: redis-sentinel (Debian: apt-get install redis-sentinel), redis-py 5
(pip install redis). Every process it starts is killed on exit. Exit
status 0 when every check passed; the logs (in a temp dir) are printed
and kept when one failed, and kept with --keep.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sentinel_common import (PacedClient, ServerProcess, agreed_primary, ask, check,
                             conclude, conn, decide, died, failures, follows, info_repl,
                             master_port_by, note, repl_summary, run, sentinel_master,
                             sentinel_ready, server_count, stamp, start_sentinel, wait_for)
from benchlib import free_ports  # sentinel_common puts benches/ on sys.path

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

LIMIT = 2000
RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]
SHARDS = len(RANGES)
NAMES = [f"shard-{i}" for i in range(SHARDS)]
KEYS_PER_SHARD = 5
KILLED = 0          # the shard whose primary is killed
RATE = 400          # decisions/s, until the failover checks are done
WARMUP = 3.0        # s of decisions before the kill
LAG_WINDOW = 1.0    # s before the kill whose admissions a replica may miss
RUN_AFTER = 40.0    # s at most, after the restart checks, for every key to reach its limit
OTHER_GAP_MAX = 1.0  # s: the longest allowed gap between decisions on other shards' keys
DOWN_AFTER_MS = 2000  # see failover.py
SLOW_SYNC = 5.0     # s: a first sync of empty nodes slower than this is reported (WARN)
# Every error the client loop retries after 50 ms. RedisClusterException (no
# node reachable, slot not covered) is not a RedisError.
CLIENT_ERRORS = (redis.RedisError, RedisClusterException, OSError)

KEEP = False        # --keep: the temp dir stays after a passing run


def shard_of_slot(slot):
    return next(i for i, (a, b) in enumerate(RANGES) if a <= slot <= b)


def pick_keys():
    """KEYS_PER_SHARD keys per shard, interleaved shard by shard (so a
    failing shard never holds up the others for long)."""
    per = [[] for _ in RANGES]
    i = 0
    while min(len(k) for k in per) < KEYS_PER_SHARD:
        key = f"cfo:{i}"
        i += 1
        s = shard_of_slot(key_slot(key.encode()))
        if len(per[s]) < KEYS_PER_SHARD:
            per[s].append(key)
    return [per[s][j] for j in range(KEYS_PER_SHARD) for s in range(SHARDS)], \
        {k: s for s in range(SHARDS) for k in per[s]}


def scratch_key(shard, taken):
    """A key of `shard` that the client never decides."""
    i = 0
    while True:
        key = f"cfo:probe:{i}"
        if shard_of_slot(key_slot(key.encode())) == shard and key not in taken:
            return key
        i += 1


# ------------------------------------------------------------------- processes

class Node(ServerProcess):
    """A Turnstile cluster node on a fixed port (a restart takes it back)."""

    ping_interval = 0.02

    def __init__(self, binary, port, cluster_file, sentinel_ports, tmp):
        super().__init__("node", port, tmp)
        self.argv = [binary, "--port", str(port), "--bind", "127.0.0.1",
                     "--metrics-addr", "off", "--log-level", "info",
                     "--cluster-config", str(cluster_file),
                     "--cluster-sentinels",
                     ",".join(f"127.0.0.1:{p}" for p in sentinel_ports)]

    def launch(self):
        super().launch(self.argv)


def write_cluster_file(tmp, primaries, replicas):
    path = tmp / "cluster.toml"
    text = ""
    for i, ((a, b), p, r) in enumerate(zip(RANGES, primaries, replicas)):
        text += (f"[[node]]\naddr = \"127.0.0.1:{p}\"\nslots = [\"{a}-{b}\"]\n"
                 f"replicas = [\"127.0.0.1:{r}\"]\nname = \"{NAMES[i]}\"\n")
    path.write_text(text)
    return path


def subscribers(port):
    """Clients of Sentinel `port` subscribed to a channel: the nodes that
    follow it (Sentinels talk to each other without subscribing)."""
    return sum(1 for c in ask(port, "CLIENT", "LIST").splitlines()
               if int(dict(f.split("=", 1) for f in c.split() if "=" in f).get("sub", 0)) > 0)


def slots_primary(port, first_slot):
    """The ports `port`'s CLUSTER SLOTS lists for the range starting at
    `first_slot`: its primary, then its replicas."""
    for entry in ask(port, "CLUSTER", "SLOTS"):
        if int(entry[0]) == first_slot:
            return [int(n[1]) for n in entry[2:]]
    return []


def cluster_nodes(port):
    """CLUSTER NODES as {port: (id, flags, master id, slots)}."""
    out = {}
    text = ask(port, "CLUSTER", "NODES")
    for line in text.strip().splitlines():
        f = line.split()
        out[int(f[1].split("@")[0].rsplit(":", 1)[1])] = (f[0], set(f[2].split(",")), f[3],
                                                           f[8:])
    return out


# ---------------------------------------------------------------------- client

def cluster_client(ports):
    # What redis-py 5.2.1 does on a ConnectionError/TimeoutError from a node
    # (a dead primary): drops that node from its startup nodes, re-reads
    # CLUSTER SLOTS from the first startup node that answers, raises; and
    # RedisCluster.execute_command tries the call again, on the new slots,
    # cluster_error_retry_attempts times (CLUSTERDOWN alike). With
    # dynamic_startup_nodes (the default) the startup nodes are every node
    # of the last CLUSTER SLOTS, in its order: the dead primary, then its
    # replica, so the replica's view is read first once the primary is
    # dropped, and a dead node only costs a refused connect (socket
    # timeouts of 0.5 s bound a hung one). reinitialize_steps=1: every MOVED
    # re-reads CLUSTER SLOTS, rather than patching one slot's entry and
    # re-reading on the 5th.
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports],
                        decode_responses=True, socket_timeout=0.5,
                        socket_connect_timeout=0.5, cluster_error_retry_attempts=2,
                        reinitialize_steps=1)


class Client(PacedClient):
    """RedisCluster deciding limits round-robin over `keys`, paced to RATE
    (or unpaced once `fast` is set), until stopped."""

    retried = CLIENT_ERRORS

    def __init__(self, ports, keys, shard_of):
        super().__init__("cluster client", cluster_client(ports), keys, RATE)
        self.shard_of = shard_of
        self.successes = [[] for _ in RANGES]           # per shard: (start, end)

    def decide(self, key):
        return decide(self.client, key, LIMIT)

    def answered(self, key, start, end):
        self.successes[self.shard_of[key]].append((start, end))

    def after_kill(self, key):
        return self.shard_of[key] == KILLED             # ok_after_kill: the killed shard's keys

    def failover_s(self, t_kill, t_dead):
        first = next((e for s, e in self.successes[KILLED] if s >= t_dead), None)
        return None if first is None else first - t_kill

    def other_gap(self, t_from, t_to):
        """The longest time without a decision answered on another shard's
        key between t_from and t_to, and when it began (relative to t_from)."""
        ends = sorted(e for s in range(SHARDS) if s != KILLED for _, e in self.successes[s]
                      if t_from <= e <= t_to)
        points = [t_from] + ends + [t_to]
        gap, at = max((b - a, a) for a, b in zip(points, points[1:]))
        return gap, at - t_from


# ------------------------------------------------------------------------ main

def main():
    global KEEP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the Turnstile binary")
    ap.add_argument("--keep", action="store_true", help="keep the logs even when every check "
                                                        "passed")
    args = ap.parse_args()
    KEEP = args.keep
    if not shutil.which("redis-sentinel"):
        sys.exit("redis-sentinel is not installed")
    binary = str(Path(args.bin).resolve())
    if not Path(binary).is_file():
        sys.exit(f"{binary}: no such file")

    tmp = Path(tempfile.mkdtemp(prefix="turnstile-cluster-failover."))
    print(f"cluster failover check: files in {tmp}", flush=True)
    ports = free_ports(2 * SHARDS + 3)
    primaries, replicas, sports = ports[:SHARDS], ports[SHARDS:2 * SHARDS], ports[2 * SHARDS:]
    data_ports = primaries + replicas
    cluster_file = write_cluster_file(tmp, primaries, replicas)
    nodes = {p: Node(binary, p, cluster_file, sports, tmp) for p in data_ports}
    keys, shard_of = pick_keys()
    old, new = primaries[KILLED], replicas[KILLED]
    live = [p for p in data_ports if p != old]
    note(f"shards: " + "; ".join(f"{NAMES[i]} {a}-{b} primary {primaries[i]} replica "
                                  f"{replicas[i]}" for i, (a, b) in enumerate(RANGES))
         + f"; sentinels {', '.join(map(str, sports))}")

    # -------------------------------------------------------------- cluster up
    t_launch = time.monotonic()
    for p in data_ports:
        nodes[p].launch()
    for p in data_ports:
        if not nodes[p].answers():
            return finish(tmp)
    bad = {k: s for k, s in ((k, ask(primaries[0], "CLUSTER", "KEYSLOT", k)) for k in keys)
           if s != key_slot(k.encode())}
    check(not bad, f"CLUSTER KEYSLOT agrees with redis-py for the {len(keys)} keys", f"{bad}")

    def replication_up():
        return (all(info_repl(p).get("connected_slaves") == 1 for p in primaries)
                and all(info_repl(p).get("master_link_status") == "up" for p in replicas))

    if not wait_for("replication up (each primary connected_slaves:1, each replica link up)",
                    replication_up, 30):
        return finish(tmp)
    check(True, f"each replica replicates its shard's primary, link up {stamp()}")
    if time.monotonic() - t_launch > SLOW_SYNC:
        # Seen: a replica whose copy came in the same read as +FULLRESYNC
        # sits in sync until the primary's next PING (10 s) on an idle primary.
        note(f"WARN: the replication links took {time.monotonic() - t_launch:.1f} s to come "
             f"up (empty data set); see the nodes' 'full resync' / 'full copy loaded' lines")

    for sp in sports:
        start_sentinel(tmp, sp, list(zip(NAMES, primaries)),
                       {"down-after-milliseconds": DOWN_AFTER_MS, "failover-timeout": 10000})
    for sp in sports:
        if not wait_for(f"sentinel {sp} answers PING", lambda: ask(sp, "PING"), 10):
            return finish(tmp)
    for sp in sports:
        if not wait_for(f"sentinel {sp} lists each shard's replica and the other two sentinels",
                        lambda: all(sentinel_ready(sp, name, [r])
                                    for name, r in zip(NAMES, replicas)), 30):
            return finish(tmp)
    check(True, f"every sentinel lists each shard's replica and the other two sentinels "
                f"{stamp()}")
    if not wait_for(f"every sentinel has the {len(data_ports)} nodes subscribed (+switch-master)",
                    lambda: all(subscribers(sp) == len(data_ports) for sp in sports), 15):
        return finish(tmp)
    check(True, f"every sentinel has the {len(data_ports)} nodes subscribed {stamp()}")

    # ------------------------------------------------------------------ client
    client = Client(data_ports, keys, shard_of)
    client.start()
    t_client = time.monotonic()
    if not wait_for("the cluster client decides on every shard",
                    lambda: all(client.successes[s] for s in range(SHARDS)), 15):
        return finish(tmp, client)
    check(True, f"the cluster client decides on every shard {stamp()}")
    time.sleep(max(0.0, t_client + WARMUP - time.monotonic()))
    note(f"before the kill: ok={client.ok} errors={client.errors}")
    for p in data_ports:
        note(f"INFO replication {repl_summary(p)}")

    # ---------------------------------------------------------------- failover
    t_kill = time.monotonic()
    nodes[old].kill()
    t_dead = time.monotonic()
    client.t_dead = t_dead
    note(f"{stamp()} primary {old} of {NAMES[KILLED]} killed (SIGKILL), reaped after "
         f"{(t_dead - t_kill) * 1000:.1f} ms")

    seen = {}           # event -> seconds after the kill
    last = {}

    each = {}           # "sentinel S" / "node P" -> seconds after the kill it first named `new`

    def sentinels_moved():
        ports_ = {sp: master_port_by(sp, NAMES[KILLED]) for sp in sports}
        last["sentinels"] = ports_
        for sp, p in ports_.items():
            if p == new:
                each.setdefault(f"sentinel {sp}", time.monotonic() - t_kill)
        return all(p == new for p in ports_.values())

    def slots_moved():
        entries = {p: slots_primary(p, RANGES[KILLED][0]) for p in live}
        last["slots"] = entries
        for p, e in entries.items():
            if e[:1] == [new]:
                each.setdefault(f"node {p}", time.monotonic() - t_kill)
        return all(e[:1] == [new] for e in entries.values())

    def client_moved():
        return client.ok_after_kill > 0

    events = {"sentinels": sentinels_moved, "slots": slots_moved, "client": client_moved}

    def all_moved():
        for name, fn in events.items():
            if name not in seen:
                try:
                    if fn():
                        seen[name] = time.monotonic() - t_kill
                except (redis.RedisError, OSError) as e:
                    last[name] = e
        return len(seen) == len(events)

    if not wait_for(f"sentinels, slots and client move {NAMES[KILLED]} to {new}", all_moved, 60,
                    interval=0.02):
        note(f"seen so far {seen}; last {last}")
        return finish(tmp, client)
    check(True, f"every sentinel names {new} as {NAMES[KILLED]}'s primary "
                f"{seen['sentinels']:.2f} s after the kill")
    check(True, f"every live node's CLUSTER SLOTS names {new} as the primary of "
                f"{RANGES[KILLED][0]}-{RANGES[KILLED][1]} {seen['slots']:.2f} s after the kill")
    client_fo = client.failover_s(t_kill, t_dead)
    note("first named " + str(new) + " (s after the kill): "
         + ", ".join(f"{k} {v:.2f}" for k, v in sorted(each.items(), key=lambda kv: kv[1])))
    check(True, f"the cluster client decides on {NAMES[KILLED]} again "
                f"{client_fo:.2f} s after the kill {stamp()}")

    def nodes_agree(port):
        view = cluster_nodes(port)
        nid, flags, _, slots = view[new]
        _, oflags, of, oslots = view[old]
        want = f"{RANGES[KILLED][0]}-{RANGES[KILLED][1]}"
        return ("master" in flags and slots == [want] and "slave" in oflags and of == nid
                and not oslots)

    bad = [p for p in live if not nodes_agree(p)]
    check(not bad, f"every live node's CLUSTER NODES: {new} master of "
                   f"{RANGES[KILLED][0]}-{RANGES[KILLED][1]}, {old} its slave",
          "; ".join(f"{p}: {ask(p, 'CLUSTER', 'NODES')!r}" for p in bad))

    # ----------------------------------------------- old primary back, a replica
    probe = scratch_key(KILLED, keys)
    nodes[old].launch()
    if not nodes[old].answers():
        return finish(tmp, client)
    t_restart = time.monotonic()
    try:
        first = ask(old, "RL.ALLOW", probe, LIMIT, "1h", "ALGO", "fixed")
    except redis.RedisError as e:
        first = e
    first_nodes = cluster_nodes(old)[old]
    note(f"{stamp()} {old} restarted with the same command line; at its first PING it "
         f"answers RL.ALLOW on a {NAMES[KILLED]} key with {first!r}, its CLUSTER NODES "
         f"entry: {' '.join(sorted(first_nodes[1]))} {first_nodes[2]}; {repl_summary(old)}")

    if not isinstance(first, redis.RedisError):
        note(f"WARN: restarted {old} admitted a {NAMES[KILLED]} write as its primary before "
             f"it heard from the Sentinels that {new} is ({first!r})")

    def moves_to_new():
        try:
            ask(old, "RL.ALLOW", probe, LIMIT, "1h", "ALGO", "fixed")
        except redis.ResponseError as e:
            return str(e).startswith("MOVED") and str(e).endswith(f":{new}")
        return False

    if wait_for(f"restarted {old} answers MOVED to {new} for {NAMES[KILLED]} writes",
                moves_to_new, 5, interval=0.02):
        check(True, f"restarted {old} answers MOVED to {new} for {NAMES[KILLED]} writes, "
                    f"{time.monotonic() - t_restart:.2f} s after its first PING")

    if wait_for(f"every sentinel has the restarted {old} subscribed again",
                lambda: all(subscribers(sp) == len(data_ports) for sp in sports), 10):
        check(True, f"every sentinel has the {len(data_ports)} nodes subscribed again")

    if wait_for(f"restarted {old} becomes a replica of {new} (link up)",
                lambda: follows(old, new), 60, interval=0.2):
        check(True, f"Sentinel turned {old} into a replica of {new}, "
                    f"{time.monotonic() - t_restart:.1f} s after its restart {stamp()}")
        nid = cluster_nodes(old)[new][0]
        mine = cluster_nodes(old)[old]
        check("myself" in mine[1] and "slave" in mine[1] and mine[2] == nid,
              f"{old}'s own CLUSTER NODES: myself,slave of {new}",
              f"{' '.join(sorted(mine[1]))} {mine[2]} ({new} is {nid})")

    # -------------------------------------------------------- run to the limits
    t_fast = time.monotonic()
    client.fast = True

    def all_denied():
        return all(client.denied[k] > 0 for k in keys)

    deadline = time.monotonic() + RUN_AFTER
    while time.monotonic() < deadline and not all_denied() and not died():
        time.sleep(0.2)
    return finish(tmp, client, t_kill=t_kill, t_dead=t_dead, t_fast=t_fast, seen=seen,
                  reached=all_denied(), sports=sports, primaries=primaries, replicas=replicas)


def finish(tmp, client=None, t_kill=None, t_dead=None, t_fast=None, seen=None, reached=False,
           sports=None, primaries=None, replicas=None):
    """Stops the client; with a failover behind, compares its admissions with
    the servers' counts. Returns the exit status."""
    if client is not None:
        stopped = client.stop()
        if t_kill is not None:
            check(stopped and client.crash is None, "the cluster client stops", client.crash or "")

    if t_kill is not None:
        c = client.client
        keys, shard_of = client.keys, client.shard_of
        check(reached, "every key reached its limit (the client saw denials)",
              f"denied {client.denied}")
        new = replicas[KILLED]
        want = [new if i == KILLED else p for i, p in enumerate(primaries)]
        finals = {name: wait_for(f"sentinels agree on {name}'s primary",
                                 lambda name=name: agreed_primary(sports, name), 10)
                  for name in NAMES}
        check(list(finals.values()) == want,
              f"final primaries {list(finals.values())} are {want}")
        epochs = {name: [sentinel_master(sp, name).get("config-epoch") for sp in sports]
                  for name in NAMES}
        check(all(epochs[n] == (["1"] if i == KILLED else ["0"]) * len(sports)
                  for i, n in enumerate(NAMES)),
              f"exactly one failover ({NAMES[KILLED]} at config-epoch 1 on every sentinel, "
              f"the other shards at 0)", f"epochs {epochs}")

        server = {k: server_count(c, k, LIMIT) for k in keys}
        lag = client.lag_window(t_kill, LAG_WINDOW)
        fo = client.failover_s(t_kill, t_dead)
        note(f"client: ok={client.ok} errors={client.errors} {dict(client.error_kinds)}"
             + (f" last {client.last_error}" if client.last_error else ""))
        lost_total = lag_total = 0
        over_lost, over_lag, other_lost, other_over = [], [], [], []
        for k in keys:
            admitted, lost = client.admitted[k], client.admitted[k] - server[k]
            note(f"{NAMES[shard_of[k]]} {k}: client admitted {admitted}, server count "
                 f"{server[k]}, lost {lost}, lag-window admissions {lag[k]}, "
                 f"denied {client.denied[k]}")
            if shard_of[k] == KILLED:
                lost_total += lost
                lag_total += lag[k]
                if admitted > LIMIT + lost:
                    over_lost.append(f"{k}: {admitted} > {LIMIT} + {lost}")
                if admitted > LIMIT + lag[k]:
                    over_lag.append(f"{k}: {admitted} > {LIMIT} + {lag[k]}")
            else:
                if lost > 0:
                    other_lost.append(f"{k}: lost {lost}")
                if admitted > LIMIT:
                    other_over.append(f"{k}: {admitted} > {LIMIT}")
        check(lost_total <= lag_total,
              f"{NAMES[KILLED]}: lost admissions {lost_total} <= admissions of the "
              f"{LAG_WINDOW * 1000:.0f} ms before the kill {lag_total}")
        check(not over_lost, f"{NAMES[KILLED]}: no key admitted more than limit + its lost "
                             f"admissions", "; ".join(over_lost))
        check(not over_lag, f"{NAMES[KILLED]}: no key admitted more than limit + its "
                            f"admissions of the {LAG_WINDOW * 1000:.0f} ms before the kill",
              "; ".join(over_lag))
        check(not other_lost and not other_over,
              "other shards: no admission lost, no key over its limit",
              "; ".join(other_lost + other_over))

        gap, gap_at = client.other_gap(t_kill - WARMUP / 2, t_fast)
        check(gap <= OTHER_GAP_MAX, f"other shards' keys decided throughout: longest gap "
                                    f"{gap * 1000:.0f} ms <= {OTHER_GAP_MAX * 1000:.0f} ms",
              f"from {gap_at - WARMUP / 2:+.2f} s after the kill")

        def replicas_agree():
            bad = []
            for i, r in enumerate([p if i == KILLED else replicas[i]
                                   for i, p in enumerate(primaries)]):
                rc = conn(r)
                try:
                    rc.execute_command("READONLY")
                    for k in keys:
                        if shard_of[k] == i and server_count(rc, k, LIMIT) != server[k]:
                            bad.append(f"{r} {k}: {server_count(rc, k, LIMIT)} != {server[k]}")
                finally:
                    rc.close()
            last_bad[:] = bad
            return not bad

        last_bad = []
        if wait_for("every replica (READONLY) has its primary's counts", replicas_agree, 10,
                    interval=0.2):
            check(True, "every replica, read with READONLY, has its primary's counts")
        elif last_bad:
            note(f"differences: {last_bad}")

        print(f"cluster failover: sentinel failover {seen['sentinels']:.2f} s; slots follow "
              f"{seen['slots']:.2f} s; client failover "
              + (f"{fo:.2f} s" if fo is not None else "none")
              + f"; lost admissions {lost_total}; lag-window admissions {lag_total}; "
              f"longest other-shard gap {gap * 1000:.0f} ms", flush=True)
    elif not failures:
        check(False, "the run reached the failover")

    return conclude("cluster failover check", tmp, keep=KEEP)


if __name__ == "__main__":
    run(main, "cluster failover check")
