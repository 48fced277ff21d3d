#!/usr/bin/env python3
"""redis-py `RedisCluster` against a three-node Turnstile cluster.

Usage:
  redis_py_cluster_check.py live HOST P1 P2 P3
  redis_py_cluster_check.py down HOST P1 P2 P3   (the node on P3 was killed)

live: for RESP2 and RESP3, RL.ALLOW on many keys (each admits exactly its
limit, then denies), spread over all three nodes; RL.ALLOWMANY with hash tags
is all-or-nothing; RL.PEEK/STATE/REFUND/RESET and CL.THROTTLE route by key;
keys in different slots are refused (by redis-py itself, and CROSSSLOT by the
server).

down: a fresh client seeded with the live nodes still gets answers for every
key owned by the live nodes, and a clear error (not a hang) for keys of the
dead node's slots.

Periods are long (1 h, 1 d) and the algorithms exact (log, gcra), so the real
clock cannot refill anything while the check runs.
"""

import os
import sys
import time

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

TIMEOUT = 5
# Key prefix unique to this run, so reruns against the same nodes start fresh.
RUN = f"{os.getpid()}.{int(time.time())}"


def fail(msg):
    print(f"redis-py cluster check FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def as_list(reply, fields):
    """A limiter reply as a list, from a RESP2 array or a RESP3 map."""
    if isinstance(reply, dict):
        return [reply[f.encode()] if f.encode() in reply else reply[f] for f in fields]
    return list(reply)


ALLOW_FIELDS = ["allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms"]
MANY_FIELDS = ALLOW_FIELDS + ["index"]


def as_map(reply):
    """RL.STATE as a dict of str -> value (RESP2 flat list or RESP3 map)."""
    if isinstance(reply, dict):
        items = reply.items()
    else:
        items = zip(reply[::2], reply[1::2])
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in items}


def error_line(e):
    """The server's error line, whichever way this redis-py version parsed it
    (5.x keeps `MOVED ...`/`CROSSSLOT ...` as plain ResponseError text; newer
    versions map them to MovedError / ClusterCrossSlotError without the code)."""
    if isinstance(e, redis.exceptions.MovedError):
        return f"MOVED {e.slot_id} {e.host}:{e.port}"
    text = str(e)
    if isinstance(e, redis.exceptions.ClusterCrossSlotError) and not text.startswith("CROSSSLOT"):
        return f"CROSSSLOT {text}"
    return text


def call(rc, *args):
    """execute_command, reporting exactly what redis-py says if it refuses."""
    try:
        return rc.execute_command(*args)
    except Exception as e:  # noqa: BLE001 - report anything verbatim
        fail(f"{' '.join(map(str, args))}: {type(e).__name__}: {e}")


def ranges(host, port):
    """[(start, end, port)] from CLUSTER SLOTS on one node (plain client)."""
    r = redis.Redis(host=host, port=port, socket_timeout=TIMEOUT)
    try:
        slots = r.execute_command("CLUSTER SLOTS")
    finally:
        r.close()
    # Redis 7 shape: [[start, end, [host, port, id, {}]], ...]
    out = []
    for entry in slots:
        check(len(entry) == 3 and len(entry[2]) == 4, f"CLUSTER SLOTS entry {entry!r}")
        out.append((int(entry[0]), int(entry[1]), int(entry[2][1])))
    return sorted(out)


def owner_port(rs, key):
    s = key_slot(key.encode())
    for a, b, p in rs:
        if a <= s <= b:
            return p
    fail(f"no owner for slot {s} of {key!r}")


def dbsizes(host, ports):
    out = {}
    for p in ports:
        r = redis.Redis(host=host, port=p, socket_timeout=TIMEOUT)
        out[p] = r.dbsize()
        r.close()
    return out


def live(host, ports):
    rs = ranges(host, ports[0])
    check([p for _, _, p in rs] == ports, f"CLUSTER SLOTS owners {rs}, want {ports}")
    for protocol in (2, 3):
        tag = f"py{protocol}:{RUN}"
        # Seeded with the second node only: the client learns the rest.
        try:
            rc = RedisCluster(
                host=host,
                port=ports[1],
                protocol=protocol,
                socket_timeout=TIMEOUT,
                socket_connect_timeout=TIMEOUT,
            )
        except Exception as e:  # noqa: BLE001
            fail(f"RedisCluster(protocol={protocol}) did not start: {type(e).__name__}: {e}")
        nodes = sorted(n.port for n in rc.get_primaries())
        check(nodes == sorted(ports), f"RESP{protocol}: primaries {nodes}, want {ports}")

        # RL.ALLOW on many keys: each admits exactly its limit, then denies.
        before = dbsizes(host, ports)
        keys = [f"{tag}:k:{i}" for i in range(600)]
        limit = 4
        for rnd in range(limit + 1):
            for k in keys:
                r = as_list(call(rc, "RL.ALLOW", k, limit, "1h", "ALGO", "log"), ALLOW_FIELDS)
                if rnd < limit:
                    check(r[:4] == [1, limit, limit - 1 - rnd, -1], f"RESP{protocol} {k} call {rnd}: {r}")
                else:
                    check(r[:3] == [0, limit, 0] and r[3] > 0, f"RESP{protocol} {k} call {rnd}: {r}")
        after = dbsizes(host, ports)
        want = {p: 0 for p in ports}
        for k in keys:
            want[owner_port(rs, k)] += 1
        for p in ports:
            got = after[p] - before[p]
            check(got == want[p], f"RESP{protocol}: node {p} got {got} new keys, want {want[p]}")
            check(got > 0, f"RESP{protocol}: node {p} got no keys")
        print(f"  RESP{protocol}: RL.ALLOW {len(keys)} keys x {limit + 1}: exact; keys per node {[want[p] for p in ports]}")

        # Other single-key limiter commands route by their key.
        k = keys[0]
        peek = as_list(call(rc, "RL.PEEK", k, limit, "1h", "ALGO", "log"), ALLOW_FIELDS)
        check(peek[:3] == [0, limit, 0], f"RL.PEEK {k}: {peek}")
        state = as_map(call(rc, "RL.STATE", k))
        check(state.get("count") == limit, f"RL.STATE {k}: {state}")
        check(call(rc, "RL.REFUND", k, 1) == 1, "RL.REFUND")
        r = as_list(call(rc, "RL.ALLOW", k, limit, "1h", "ALGO", "log"), ALLOW_FIELDS)
        check(r[0] == 1, f"after RL.REFUND: {r}")
        check(call(rc, "RL.RESET", k) == 1, "RL.RESET")
        cell = call(rc, "CL.THROTTLE", f"{tag}:cell", 2, 3, 3600)
        check(list(cell)[:3] == [0, 3, 2], f"CL.THROTTLE: {cell}")

        # RL.ALLOWMANY with hash tags, users spread over every node.
        users = []
        for p in ports:
            users += [u for u in (f"{tag}u{i}" for i in range(1000)) if owner_port(rs, u) == p][:5]
        for u in users:
            a, b = f"{{{u}}}:min", f"{{{u}}}:day"
            args = ["RL.ALLOWMANY", "LIMIT", a, 3, "1h", "ALGO", "log", "LIMIT", b, 5, "1d", "ALGO", "gcra"]
            for n in range(3):
                r = as_list(call(rc, *args), MANY_FIELDS)
                check(r[0] == 1 and r[1] == 3 and r[2] == 2 - n and r[5] == 0, f"RESP{protocol} {u} call {n}: {r}")
            r = as_list(call(rc, *args), MANY_FIELDS)
            check(r[:3] == [0, 3, 0] and r[5] == 0, f"RESP{protocol} {u} 4th: {r}")
            # All-or-nothing: the day limit was charged 3 times, not 4.
            check(as_map(call(rc, "RL.STATE", a)).get("count") == 3, f"{u}: minute count")
            day = as_list(call(rc, "RL.PEEK", b, 5, "1d", "ALGO", "gcra"), ALLOW_FIELDS)
            check(day[:3] == [1, 5, 1], f"RESP{protocol} {u}: the denied call charged the day limit: {day}")
            # The second limit binds: 2 of 2, then index 1, and the first is not charged.
            c, d = f"{{{u}}}:c", f"{{{u}}}:d"
            args = ["RL.ALLOWMANY", "COST", 1, "LIMIT", c, 10, "1h", "ALGO", "log", "LIMIT", d, 2, "1h", "ALGO", "log"]
            for n in range(2):
                r = as_list(call(rc, *args), MANY_FIELDS)
                check(r[0] == 1 and r[5] == 1, f"{u} c/d call {n}: {r}")
            r = as_list(call(rc, *args), MANY_FIELDS)
            check(r[0] == 0 and r[5] == 1, f"{u} c/d 3rd: {r}")
            check(as_map(call(rc, "RL.STATE", c)).get("count") == 2, f"{u}: first limit charged on a deny")
        print(f"  RESP{protocol}: RL.ALLOWMANY with hash tags, {len(users)} users on 3 nodes: all-or-nothing")

        # Keys in different slots: redis-py refuses before sending...
        try:
            rc.execute_command("RL.ALLOWMANY", "LIMIT", "{a}:x", 1, "1h", "LIMIT", "{b}:y", 1, "1h")
            fail("cross-slot RL.ALLOWMANY was accepted")
        except redis.exceptions.RedisClusterException as e:
            check("same key slot" in str(e), f"cross-slot refusal: {e}")
        rc.close()

    # ...and the server answers CROSSSLOT and MOVED to a plain client.
    r = redis.Redis(host=host, port=ports[0], socket_timeout=TIMEOUT)
    try:
        r.execute_command("RL.ALLOWMANY", "LIMIT", "{a}:x", 1, "1h", "LIMIT", "{b}:y", 1, "1h")
        fail("cross-slot RL.ALLOWMANY was accepted by the server")
    except redis.exceptions.ResponseError as e:
        check(error_line(e) == "CROSSSLOT Keys in request don't hash to the same slot",
              f"CROSSSLOT: {type(e).__name__}: {error_line(e)!r}")
    try:
        r.execute_command("RL.ALLOW", "foo", 1, 1)
        fail("foo (slot 12182) was served by the first node")
    except redis.exceptions.ResponseError as e:
        check(error_line(e) == f"MOVED 12182 {host}:{ports[2]}", f"MOVED: {type(e).__name__}: {error_line(e)!r}")
    r.close()


def down(host, ports):
    dead = ports[2]
    alive = ports[:2]
    rs = ranges(host, alive[0])
    # A fresh client seeded with the live nodes (and the dead one last: a real
    # config still lists it).
    t0 = time.monotonic()
    try:
        rc = RedisCluster(
            startup_nodes=[ClusterNode(host, p) for p in alive + [dead]],
            socket_timeout=2,
            socket_connect_timeout=1,
            cluster_error_retry_attempts=1,
        )
    except Exception as e:  # noqa: BLE001
        fail(f"RedisCluster with a dead node did not start: {type(e).__name__}: {e}")
    print(f"  fresh RedisCluster up in {time.monotonic() - t0:.2f} s with {dead} dead")
    served = {p: 0 for p in alive}
    for i in range(300):
        k = f"down:{RUN}:k:{i}"
        p = owner_port(rs, k)
        if p == dead:
            continue
        for n in range(3):
            r = as_list(call(rc, "RL.ALLOW", k, 2, "1h", "ALGO", "log"), ALLOW_FIELDS)
            want = [1, 2, 1 - n] if n < 2 else [0, 2, 0]
            check(r[:3] == want, f"{k} on live node {p}, call {n}: {r}")
        served[p] += 1
    check(all(v > 0 for v in served.values()), f"live nodes served {served}")
    # RL.ALLOWMANY with a tag on a live node.
    u = next(u for u in (f"downu{RUN}:{i}" for i in range(1000)) if owner_port(rs, u) != dead)
    r = as_list(call(rc, "RL.ALLOWMANY", "LIMIT", f"{{{u}}}:a", 1, "1h", "LIMIT", f"{{{u}}}:b", 1, "1h"), MANY_FIELDS)
    check(r[0] == 1, f"RL.ALLOWMANY on a live node: {r}")
    print(f"  keys of the live nodes answered: {served}")

    # A key of the dead node: an error within bounded time, not a hang.
    k = next(k for k in (f"dead:{RUN}:k:{i}" for i in range(1000)) if owner_port(rs, k) == dead)
    t0 = time.monotonic()
    try:
        r = rc.execute_command("RL.ALLOW", k, 2, "1h")
        fail(f"{k} (owned by the dead node) answered {r}")
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
            redis.exceptions.ClusterDownError, redis.exceptions.RedisClusterException) as e:
        print(f"  key of the dead node: {type(e).__name__} after {time.monotonic() - t0:.2f} s ({e})")
    # And the live nodes still answer after that failure.
    k = next(k for k in (f"after:{RUN}:k:{i}" for i in range(1000)) if owner_port(rs, k) != dead)
    r = as_list(call(rc, "RL.ALLOW", k, 2, "1h"), ALLOW_FIELDS)
    check(r[0] == 1, f"a live node after the failure: {r}")
    rc.close()


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("live", "down"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    mode, host = sys.argv[1], sys.argv[2]
    ports = [int(p) for p in sys.argv[3:6]]
    print(f"redis-py {redis.__version__} RedisCluster check ({mode}) against {host}:{ports}")
    (live if mode == "live" else down)(host, ports)
    print(f"redis-py cluster check ({mode}): OK")


if __name__ == "__main__":
    main()
