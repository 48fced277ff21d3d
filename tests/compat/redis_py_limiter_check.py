#!/usr/bin/env python3
"""redis-py check of the limiter commands (RL.*, CL.THROTTLE) against a live
Turnstile, over RESP2 and RESP3.

Usage: redis_py_limiter_check.py PORT [HOST]

Uses long periods (an hour) so the real clock cannot refill a limit while the
check runs; every key has a fresh unique prefix. Exits non-zero on the first
mismatch.
"""

import sys
import threading
import uuid

import redis
from redis.exceptions import ResponseError

PORT = int(sys.argv[1])
HOST = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
RUN = uuid.uuid4().hex[:8]
FIELDS = ["allowed", "limit", "remaining", "retry_after_ms", "reset_after_ms"]


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def expect_error(fn, want, what):
    try:
        got = fn()
    except ResponseError as e:
        eq(str(e), want, f"{what}: error text")
        return
    raise AssertionError(f"{what}: expected error {want!r}, got {got!r}")


def as_list(reply, proto, extra=()):
    """The five (or six) decision fields: the same positional array of
    integers in RESP2 and RESP3 (a RESP3 map would be unpacked as its keys
    by code written for the array, and limit nothing)."""
    want = len(FIELDS) + len(extra)
    if not (isinstance(reply, list) and len(reply) == want and all(type(v) is int for v in reply)):
        raise AssertionError(f"RESP{proto} reply should be an array of {want} integers, got {reply!r}")
    return reply


def scenario(proto):
    r = redis.Redis(host=HOST, port=PORT, protocol=proto)
    p = f"{RUN}:{proto}"

    # RL.ALLOW: every algorithm admits exactly the limit, then denies.
    for algo in ["window", "log", "gcra", "fixed"]:
        key = f"{p}:allow:{algo}"
        for i in range(5):
            d = as_list(r.execute_command("RL.ALLOW", key, 5, "1h", "ALGO", algo), proto)
            eq(d[:4], [1, 5, 4 - i, -1], f"{algo} request {i + 1}")
            if not 0 < d[4] <= 2 * 3_600_000:
                raise AssertionError(f"{algo} reset_after_ms {d[4]}")
        d = as_list(r.execute_command("RL.ALLOW", key, 5, "1h", "ALGO", algo), proto)
        eq(d[:3], [0, 5, 0], f"{algo} over the limit")
        if d[3] <= 0:
            raise AssertionError(f"{algo} retry_after_ms {d[3]}")
        eq(r.type(key), f"rl-{algo}".encode(), f"{algo} TYPE")
        if r.ttl(key) <= 0:
            raise AssertionError(f"{algo} key has no TTL")

    # RL.PEEK consumes nothing.
    key = f"{p}:peek"
    for _ in range(3):
        d = as_list(r.execute_command("RL.PEEK", key, 2, 3600, "COST", 2), proto)
        eq(d[:3], [1, 2, 0], "peek")
    eq(r.exists(key), 0, "peek creates no key")

    # RL.ALLOWMANY: all-or-nothing, binding limit and its index.
    a, b = f"{p}:many:a", f"{p}:many:b"
    d = as_list(
        r.execute_command("RL.ALLOWMANY", "LIMIT", a, 10, "1h", "LIMIT", b, 1, "1h", "ALGO", "fixed"),
        proto,
        ["index"],
    )
    eq(d, [1, 1, 0, -1, d[4], 1], "allowmany first")
    d = as_list(
        r.execute_command("RL.ALLOWMANY", "LIMIT", a, 10, "1h", "LIMIT", b, 1, "1h", "ALGO", "fixed"),
        proto,
        ["index"],
    )
    eq([d[0], d[1], d[2], d[5]], [0, 1, 0, 1], "allowmany denied by the second limit")
    d = as_list(r.execute_command("RL.PEEK", a, 10, "1h"), proto)
    eq(d[2], 8, "the first limit was charged once, not twice")

    # RL.REFUND, RL.STATE, RL.RESET.
    key = f"{p}:refund"
    r.execute_command("RL.ALLOW", key, 3, 3600, "ALGO", "log", "COST", 3)
    eq(r.execute_command("RL.REFUND", key, 2), 1, "refund")
    eq(r.execute_command("RL.REFUND", f"{p}:nope", 2), 0, "refund of a missing key")
    state = r.execute_command("RL.STATE", key)
    if proto == 2:
        state = dict(zip(state[::2], state[1::2]))
    state = {k.decode() if isinstance(k, bytes) else k: v for k, v in state.items()}
    eq(state["algorithm"], b"log", "state algorithm")
    eq(state["count"], 1, "state count after refund")
    eq(state["limit"], 3, "state limit")
    eq(r.execute_command("RL.RESET", key, f"{p}:nope"), 1, "reset")
    eq(r.exists(key), 0, "reset removes the key")

    # CL.THROTTLE as redis-cell.
    eq(r.execute_command("CL.THROTTLE", f"{p}:cell", 15, 30, 60), [0, 16, 15, -1, 2], "CL.THROTTLE")

    # Errors, and nothing created.
    bad = f"{p}:bad"
    expect_error(lambda: r.execute_command("RL.ALLOW", bad, 0, 10), "limit must be a positive integer", "zero limit")
    expect_error(lambda: r.execute_command("RL.ALLOW", bad, 5, 10, "COST", 6), "cost exceeds limit", "cost > limit")
    expect_error(
        lambda: r.execute_command("RL.ALLOW", bad, 5, "1e9"),
        "invalid period '1e9': use whole seconds, a whole number with ms, s, m, h, d or w, or 1mo or 1y",
        "bad duration",
    )
    eq(r.exists(bad), 0, "bad arguments create no key")
    expect_error(
        lambda: r.get(f"{p}:allow:window"),
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "GET on a limiter key",
    )

    # A pipeline of decisions.
    pipe = r.pipeline(transaction=False)
    for _ in range(100):
        pipe.execute_command("RL.ALLOW", f"{p}:pipe", 60, 3600, "ALGO", "gcra")
    allowed = sum(as_list(x, proto)[0] for x in pipe.execute())
    eq(allowed, 60, "pipelined gcra admits its burst")

    # Concurrency: 10 connections x 50 requests on one key, limit 200.
    key = f"{p}:race"
    counts = []

    def worker():
        c = redis.Redis(host=HOST, port=PORT, protocol=proto)
        n = 0
        for _ in range(50):
            n += as_list(c.execute_command("RL.ALLOW", key, 200, 3600, "ALGO", "log"), proto)[0]
        counts.append(n)
        c.close()

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    eq(sum(counts), 200, "concurrent admissions")
    r.close()


for proto in (2, 3):
    scenario(proto)
    print(f"redis-py limiter check passed (RESP{proto})")
