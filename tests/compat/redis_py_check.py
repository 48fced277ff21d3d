#!/usr/bin/env python3
"""redis-py compatibility check for Turnstile.

Usage: redis_py_check.py PORT [HOST]

Runs the same scenario over RESP2 (protocol=2) and RESP3 (protocol=3, which
makes redis-py send HELLO 3 on connect) and asserts every reply. Exits non-zero
(with the failing assertion) on the first mismatch.
"""

import sys
import time

import redis
from redis.exceptions import ResponseError

if len(sys.argv) < 2:
    sys.exit("usage: redis_py_check.py PORT [HOST]")
PORT = int(sys.argv[1])
HOST = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def expect_error(fn, want_text, what):
    try:
        got = fn()
    except ResponseError as e:
        eq(str(e), want_text, f"{what}: error text")
        return
    raise AssertionError(f"{what}: expected ResponseError {want_text!r}, got reply {got!r}")


def delete_prefix(r, prefix):
    mine = list(r.scan_iter(match=prefix + "*", count=1000))
    if mine:
        r.delete(*mine)


def run(proto):
    tag = f"[RESP{proto}]"
    p = f"compat:py{proto}:"  # every key this run touches starts with this
    r = redis.Redis(host=HOST, port=PORT, protocol=proto, decode_responses=True,
                    socket_timeout=10, socket_connect_timeout=5)

    delete_prefix(r, p)  # leftovers of an earlier, interrupted run

    # --- basics -----------------------------------------------------------
    eq(r.ping(), True, f"{tag} PING")
    eq(r.echo("hi there"), "hi there", f"{tag} ECHO")

    eq(r.set(p + "s", "hello"), True, f"{tag} SET")
    eq(r.get(p + "s"), "hello", f"{tag} GET")
    eq(r.get(p + "missing"), None, f"{tag} GET missing key")
    eq(r.set(p + "s", "x", nx=True), None, f"{tag} SET NX on existing key")
    eq(r.set(p + "s", "world", xx=True, get=True), "hello", f"{tag} SET XX GET")
    eq(r.get(p + "s"), "world", f"{tag} GET after SET XX")

    eq(r.incr(p + "n"), 1, f"{tag} INCR new key")
    eq(r.incr(p + "n"), 2, f"{tag} INCR")
    eq(r.incrby(p + "n", 10), 12, f"{tag} INCRBY")
    eq(r.decr(p + "n"), 11, f"{tag} DECR")
    eq(r.decrby(p + "n", 5), 6, f"{tag} DECRBY")
    expect_error(lambda: r.incr(p + "s"), "value is not an integer or out of range",
                 f"{tag} INCR on non-integer")

    eq(r.mset({p + "m1": "a", p + "m2": "b", p + "m3": "c"}), True, f"{tag} MSET")
    eq(r.mget([p + "m1", p + "m2", p + "nope", p + "m3"]), ["a", "b", None, "c"], f"{tag} MGET")

    # --- expiry -----------------------------------------------------------
    eq(r.ttl(p + "m1"), -1, f"{tag} TTL without expiry")
    eq(r.ttl(p + "nope"), -2, f"{tag} TTL missing key")
    eq(r.expire(p + "m1", 100), True, f"{tag} EXPIRE")
    ttl = r.ttl(p + "m1")
    check(isinstance(ttl, int) and 98 <= ttl <= 100, f"{tag} TTL after EXPIRE 100: got {ttl!r}")
    pttl = r.pttl(p + "m1")
    check(isinstance(pttl, int) and 98_000 <= pttl <= 100_000, f"{tag} PTTL: got {pttl!r}")
    eq(r.expire(p + "nope", 100), False, f"{tag} EXPIRE missing key")
    eq(r.persist(p + "m1"), True, f"{tag} PERSIST")
    eq(r.ttl(p + "m1"), -1, f"{tag} TTL after PERSIST")
    eq(r.set(p + "short", "v", px=150), True, f"{tag} SET PX")
    time.sleep(0.3)
    eq(r.get(p + "short"), None, f"{tag} GET after PX expiry")
    eq(r.exists(p + "short"), 0, f"{tag} EXISTS after PX expiry")

    # --- delete / exists / type -------------------------------------------
    eq(r.exists(p + "m1", p + "m2", p + "nope", p + "m1"), 3, f"{tag} EXISTS counts repeats")
    eq(r.type(p + "m2"), "string", f"{tag} TYPE")
    eq(r.type(p + "nope"), "none", f"{tag} TYPE missing key")
    eq(r.delete(p + "m1", p + "m2", p + "nope"), 2, f"{tag} DEL")
    eq(r.exists(p + "m1"), 0, f"{tag} EXISTS after DEL")
    eq(r.unlink(p + "m3"), 1, f"{tag} UNLINK")

    # --- pipeline of 1000 commands, every reply checked --------------------
    pipe = r.pipeline(transaction=False)
    n = 250
    for i in range(n):
        k = f"{p}pipe:{i}"
        pipe.set(k, i)
        pipe.incr(k)
        pipe.get(k)
        pipe.exists(k)
    replies = pipe.execute()
    eq(len(replies), 4 * n, f"{tag} pipeline reply count")
    for i in range(n):
        got = replies[4 * i: 4 * i + 4]
        eq(got, [True, i + 1, str(i + 1), 1], f"{tag} pipeline replies for key {i}")
    # a pipeline containing an error reply keeps going and reports it in place
    pipe = r.pipeline(transaction=False)
    pipe.set(p + "pe", "notanumber")
    pipe.incr(p + "pe")
    pipe.get(p + "pe")
    res = pipe.execute(raise_on_error=False)
    eq(res[0], True, f"{tag} pipeline with error: SET")
    check(isinstance(res[1], ResponseError)
          and str(res[1]) == "value is not an integer or out of range",
          f"{tag} pipeline with error: INCR should be the integer error, got {res[1]!r}")
    eq(res[2], "notanumber", f"{tag} pipeline with error: GET after the error")

    # --- INFO ---------------------------------------------------------------
    info = r.info()
    check(isinstance(info, dict), f"{tag} INFO is a dict: {type(info)}")
    for field in ("redis_version", "connected_clients"):
        check(field in info, f"{tag} INFO has {field}; keys: {sorted(info)[:40]}")
    check(isinstance(info["connected_clients"], int) and info["connected_clients"] >= 1,
          f"{tag} INFO connected_clients: {info['connected_clients']!r}")
    ver = str(info["redis_version"])
    check(len(ver.split(".")) >= 2 and ver.split(".")[0].isdigit(),
          f"{tag} INFO redis_version looks like a version: {ver!r}")
    for section in ("server", "clients", "memory", "stats", "keyspace"):
        sec = r.info(section)
        check(isinstance(sec, dict), f"{tag} INFO {section} is a dict")
    ks = r.info("keyspace")
    check("db0" in ks, f"{tag} INFO keyspace has db0 (keys exist): {ks!r}")
    check(isinstance(ks["db0"], dict) and ks["db0"].get("keys", 0) >= n,
          f"{tag} INFO keyspace db0 keys >= {n}: {ks!r}")
    dbsize = r.dbsize()
    check(isinstance(dbsize, int) and dbsize >= n, f"{tag} DBSIZE >= {n}: {dbsize!r}")

    # --- CLIENT / CONFIG / COMMAND -------------------------------------------
    eq(r.client_setname(f"compat-py{proto}"), True, f"{tag} CLIENT SETNAME")
    eq(r.client_getname(), f"compat-py{proto}", f"{tag} CLIENT GETNAME")
    cid = r.client_id()
    check(isinstance(cid, int) and cid > 0, f"{tag} CLIENT ID: {cid!r}")
    eq(r.config_get("maxclients"), {"maxclients": "10000"}, f"{tag} CONFIG GET maxclients")
    count = r.command_count()
    check(isinstance(count, int) and count > 0, f"{tag} COMMAND COUNT: {count!r}")
    names = r.command_list()
    # Redis 7 lists subcommands too ("config|get"); COMMAND COUNT counts only
    # the top-level commands.
    top = [x for x in names if "|" not in x]
    eq(len(top), count, f"{tag} COMMAND LIST top-level names == COMMAND COUNT")
    for must in ("get", "set", "ping", "incr", "mget", "mset", "hello", "info"):
        check(must in names, f"{tag} COMMAND LIST contains {must}")

    # --- errors, word for word ------------------------------------------------
    expect_error(lambda: r.execute_command("foo"),
                 "unknown command 'foo', with args beginning with: ",
                 f"{tag} unknown command without args")
    expect_error(lambda: r.execute_command("foo", "bar", "baz"),
                 "unknown command 'foo', with args beginning with: 'bar' 'baz' ",
                 f"{tag} unknown command with args")
    expect_error(lambda: r.execute_command("GET"),
                 "wrong number of arguments for 'get' command",
                 f"{tag} GET arity")
    expect_error(lambda: r.execute_command("SET", p + "x", "1", "EX"),
                 "syntax error", f"{tag} SET syntax error")
    eq(r.ping(), True, f"{tag} PING after errors (connection still usable)")

    # --- SCAN over 500 keys: each exactly once ---------------------------------
    want = {f"{p}scan:{i}" for i in range(500)}
    pipe = r.pipeline(transaction=False)
    for k in want:
        pipe.set(k, "1")
    check(all(x is True for x in pipe.execute()), f"{tag} SET of scan keys")
    seen = list(r.scan_iter(match=p + "scan:*", count=37))
    eq(len(seen), 500, f"{tag} SCAN returns 500 keys (duplicates: {len(seen) - len(set(seen))})")
    eq(set(seen), want, f"{tag} SCAN returns exactly the 500 keys")
    keys = r.keys(p + "scan:*")
    eq(set(keys), want, f"{tag} KEYS pattern")

    # --- HELLO ---------------------------------------------------------------
    if proto == 3:
        hello = r.execute_command("HELLO", "3")
        check(isinstance(hello, dict), f"{tag} HELLO 3 is a map: {hello!r}")
        eq(hello.get("proto"), 3, f"{tag} HELLO proto")
        for field in ("server", "version", "id", "mode", "role"):
            check(field in hello, f"{tag} HELLO has {field}: {hello!r}")
        # RESP3 replies for a key-less command still decode (null, not nil bulk)
        eq(r.get(p + "missing"), None, f"{tag} GET missing key as RESP3 null")
    else:
        hello = r.execute_command("HELLO", "2")
        # RESP2: a flat array of name/value pairs
        check(isinstance(hello, list) and len(hello) % 2 == 0, f"{tag} HELLO 2 array: {hello!r}")
        d = dict(zip(hello[0::2], hello[1::2]))
        eq(d.get("proto"), 2, f"{tag} HELLO proto")

    # --- clean up ------------------------------------------------------------
    delete_prefix(r, p)
    eq(list(r.scan_iter(match=p + "*")), [], f"{tag} all keys deleted")
    r.close()
    print(f"redis-py {redis.__version__} {tag}: OK")


def main():
    for proto in (2, 3):
        run(proto)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"redis-py check FAILED: {e}", file=sys.stderr)
        sys.exit(1)
