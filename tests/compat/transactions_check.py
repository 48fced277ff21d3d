#!/usr/bin/env python3
"""redis-py transactions check: MULTI/EXEC through pipeline(), WATCH-based
optimistic locking through transaction(), queue-time and run-time errors.

Usage: transactions_check.py PORT [HOST]

Runs everything over RESP2 and RESP3 (protocol=3: redis-py sends HELLO 3).
Touches only keys under compat:tx:; works with redis-py 5.x. Exits non-zero
with the failing assertion on the first mismatch; a watchdog ends the run
after 60 s.
"""

import os
import sys
import threading
import time

import redis
from redis.exceptions import ExecAbortError, ResponseError, WatchError

if len(sys.argv) < 2:
    sys.exit("usage: transactions_check.py PORT [HOST]")
PORT = int(sys.argv[1])
HOST = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"


def watchdog():
    print("redis-py transactions check FAILED: timed out after 60 s", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def client(proto):
    return redis.Redis(host=HOST, port=PORT, protocol=proto, decode_responses=True,
                       socket_timeout=10, socket_connect_timeout=5)


def run(proto):
    tag = f"[RESP{proto}]"
    p = f"compat:tx:py{proto}:"
    r = client(proto)
    other = client(proto)
    mine = list(r.scan_iter(match=p + "*", count=1000))
    if mine:
        r.delete(*mine)

    # --- pipeline(): MULTI ... EXEC ---------------------------------------
    k = p + "k"
    for i in range(1, 4):
        pipe = r.pipeline()  # transaction=True is the default
        pipe.incr(k)
        pipe.expire(k, 10)
        eq(pipe.execute(), [i, True], f"{tag} pipeline() INCR+EXPIRE, run {i}")
    eq(r.get(k), "3", f"{tag} GET after three transactions")
    ttl = r.ttl(k)
    check(8 <= ttl <= 10, f"{tag} TTL after the transactions: {ttl}")

    # the same through the context manager, with every reply type
    with r.pipeline() as pipe:
        pipe.set(p + "s", "v").get(p + "s").get(p + "missing").mset({p + "a": "1", p + "b": "2"})
        pipe.mget(p + "a", p + "missing", p + "b").exists(p + "a", p + "b", p + "missing")
        pipe.delete(p + "b").type(p + "a").ttl(p + "a").echo("hi").ping()
        eq(pipe.execute(),
           [True, "v", None, True, ["1", None, "2"], 2, 1, "string", -1, "hi", True],
           f"{tag} pipeline() with mixed reply types")

    # an empty transaction pipeline sends nothing and returns []
    eq(r.pipeline().execute(), [], f"{tag} empty pipeline()")

    # --- pipeline(transaction=False): no MULTI ------------------------------
    pipe = r.pipeline(transaction=False)
    pipe.set(p + "nt", "1").incr(p + "nt").incrby(p + "nt", 10).get(p + "nt")
    eq(pipe.execute(), [True, 2, 12, "12"], f"{tag} pipeline(transaction=False)")

    # --- run-time error inside EXEC: in place, the rest still runs -------------
    r.set(p + "str", "notanumber")
    pipe = r.pipeline()
    pipe.set(p + "rt", "1").incr(p + "str").incr(p + "rt")
    res = pipe.execute(raise_on_error=False)
    eq(len(res), 3, f"{tag} run-time error: reply count")
    eq(res[0], True, f"{tag} run-time error: SET before it")
    check(isinstance(res[1], ResponseError)
          and str(res[1]) == "value is not an integer or out of range",
          f"{tag} run-time error in place: got {res[1]!r}")
    eq(res[2], 2, f"{tag} run-time error: INCR after it still ran")
    pipe = r.pipeline()
    pipe.incr(p + "rt").incr(p + "str").incr(p + "rt")
    try:
        pipe.execute()
        raise AssertionError(f"{tag} run-time error with raise_on_error: no exception")
    except ResponseError as e:
        check("value is not an integer or out of range" in str(e),
              f"{tag} run-time error with raise_on_error: {e}")
    eq(r.get(p + "rt"), "4", f"{tag} run-time error: the other commands ran")

    # --- queue-time error: EXECABORT, nothing written ------------------------
    r.set(p + "q", "before")
    pipe = r.pipeline()
    pipe.set(p + "q", "after").incr(p + "qn")
    pipe.execute_command("NOSUCHCOMMAND", "x")
    pipe.set(p + "q2", "x")
    try:
        pipe.execute()
        raise AssertionError(f"{tag} unknown command in a transaction: no exception")
    except ExecAbortError as e:
        raise AssertionError(f"{tag} unknown command: got ExecAbortError {e}, "
                             "want the queue-time error itself") from None
    except ResponseError as e:
        check("unknown command" in str(e) and "NOSUCHCOMMAND" in str(e),
              f"{tag} unknown command in a transaction raises its error: {e}")
    eq(r.get(p + "q"), "before", f"{tag} aborted transaction left the key untouched")
    eq(r.exists(p + "qn", p + "q2"), 0, f"{tag} aborted transaction created no key")

    # wrong arity at queue time
    pipe = r.pipeline()
    pipe.set(p + "q", "after")
    pipe.execute_command("GET")
    try:
        pipe.execute()
        raise AssertionError(f"{tag} wrong arity in a transaction: no exception")
    except ResponseError as e:
        check("wrong number of arguments for 'get' command" in str(e),
              f"{tag} wrong arity in a transaction: {e}")
    eq(r.get(p + "q"), "before", f"{tag} wrong-arity transaction left the key untouched")
    # the connection is still usable for a normal transaction afterwards
    pipe = r.pipeline()
    pipe.set(p + "q", "after").get(p + "q")
    eq(pipe.execute(), [True, "after"], f"{tag} transaction after an aborted one")

    # --- WATCH: another client writes -> WatchError --------------------------
    w = p + "w"
    r.set(w, "1")
    with r.pipeline() as pipe:
        pipe.watch(w)
        eq(pipe.get(w), "1", f"{tag} immediate-mode GET after WATCH")
        other.set(w, "changed")
        pipe.multi()
        pipe.set(w, "mine")
        try:
            pipe.execute()
            raise AssertionError(f"{tag} WATCH then another client writes: no WatchError")
        except WatchError:
            pass
    eq(r.get(w), "changed", f"{tag} the aborted transaction did not write")

    # WATCH, nobody writes -> runs
    with r.pipeline() as pipe:
        pipe.watch(w)
        cur = pipe.get(w)
        pipe.multi()
        pipe.set(w, cur + "+mine")
        eq(pipe.execute(), [True], f"{tag} WATCH without interference runs")
    eq(r.get(w), "changed+mine", f"{tag} value after the watched transaction")

    # WATCH, another client writes another key only -> runs
    with r.pipeline() as pipe:
        pipe.watch(w)
        other.set(p + "unrelated", "x")
        pipe.multi()
        pipe.incr(p + "wn")
        eq(pipe.execute(), [1], f"{tag} WATCH with a write to an unwatched key runs")

    # WATCH, another client deletes -> WatchError; UNWATCH (reset) clears it
    with r.pipeline() as pipe:
        pipe.watch(w)
        other.delete(w)
        pipe.multi()
        pipe.set(w, "x")
        try:
            pipe.execute()
            raise AssertionError(f"{tag} WATCH then DEL by another client: no WatchError")
        except WatchError:
            pass
    with r.pipeline() as pipe:
        pipe.watch(w)
        other.set(w, "again")
        pipe.unwatch()
        pipe.multi()
        pipe.set(w, "after-unwatch")
        eq(pipe.execute(), [True], f"{tag} UNWATCH forgets the change")
    eq(r.get(w), "after-unwatch", f"{tag} value after UNWATCH")

    # WATCH, the key expires -> WatchError
    r.set(w, "short", px=50)
    with r.pipeline() as pipe:
        pipe.watch(w)
        time.sleep(0.15)
        pipe.multi()
        pipe.set(p + "after-expiry", "x")
        try:
            pipe.execute()
            raise AssertionError(f"{tag} WATCH then the key expires: no WatchError")
        except WatchError:
            pass
    eq(r.exists(p + "after-expiry"), 0, f"{tag} transaction aborted by expiry wrote nothing")

    # --- transaction(): WATCH/GET/MULTI/SET/EXEC with retries, several threads -
    counter = p + "counter"
    r.set(counter, 0)
    threads_n, per_thread = 4, 25
    calls = [0] * threads_n
    errors = []

    def worker(i):
        c = client(proto)
        try:
            def incr_by_read_modify_write(pipe):
                calls[i] += 1
                cur = int(pipe.get(counter))
                time.sleep(0.002)  # widen the window so the threads collide
                pipe.multi()
                pipe.set(counter, cur + 1)

            for _ in range(per_thread):
                res = c.transaction(incr_by_read_modify_write, counter)
                if res != [True]:
                    errors.append(f"thread {i}: transaction() returned {res!r}")
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {type(e).__name__}: {e}")
        finally:
            c.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(40)
    check(not any(t.is_alive() for t in ts), f"{tag} transaction() threads did not finish")
    eq(errors, [], f"{tag} transaction() thread errors")
    eq(r.get(counter), str(threads_n * per_thread),
       f"{tag} counter after {threads_n} threads x {per_thread} WATCH-protected increments")
    retries = sum(calls) - threads_n * per_thread
    check(retries > 0, f"{tag} transaction(): no thread ever retried, so WATCH was never "
          f"exercised (calls per thread: {calls})")

    # --- clean up ------------------------------------------------------------
    mine = list(r.scan_iter(match=p + "*", count=1000))
    if mine:
        r.delete(*mine)
    r.close()
    other.close()
    print(f"redis-py {redis.__version__} transactions {tag}: OK "
          f"({threads_n * per_thread} increments, {retries} WATCH retries)")


def main():
    timer = threading.Timer(60, watchdog)
    timer.daemon = True
    timer.start()
    for proto in (2, 3):
        run(proto)
    timer.cancel()


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, redis.RedisError) as e:
        print(f"redis-py transactions check FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
