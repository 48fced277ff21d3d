#!/usr/bin/env python3
"""A bounded soak of a real Turnstile: many connections, mixed commands, churn.

    python3 tests/ops/soak.py target/release/turnstile [--seconds 120] [--connections 1000]

Python 3 standard library only (asyncio, raw RESP2 over TCP, no redis-py).

1. Starts BIN --port 0 --metrics-addr off --snapshot TMP/soak.tsnap
   --snapshot-interval 1s --client-output-buffer-limit "1mb 256kb 2" (log to TMP/turnstile.log; the port is read from its
   "turnstile listening local=127.0.0.1:PORT" line) and records INFO memory,
   INFO persistence and DBSIZE before any load.
2. For --seconds, --connections asyncio tasks each loop: pick a random
   operation, send it, read and parse the reply, check its shape. The mix:
   RL.ALLOW on all four algorithms with 1-3 s periods (keys expire and are
   re-created all run long), some with COST; RL.PEEK; RL.ALLOWMANY over two
   limits of different algorithms; RL.REFUND; RL.RESET; RL.STATE;
   CL.THROTTLE; SET ... EX; GET; INCR + EXPIRE (always in one write, so no
   counter is ever left without a TTL); DEL; now and then a pipeline of 10-50
   commands in one write, and now and then a connection closes and reopens.
   Every family of keys has its own prefix and a few thousand names, so no
   error reply is ever expected: any error reply, malformed reply or dropped
   connection is a failure. A separate connection polls INFO memory every
   2 s for the peak. Beside them, 8 clients send 200 GETs of a 64 KiB
   value and never read: `--client-output-buffer-limit 1mb 256kb 2` must
   drop them (only the control connection is left after the load); and a
   SIGHUP halfway must change nothing (no connection dropped).
3. The admission check: 200 `soak:log:{i}` keys take only
   `RL.ALLOW key 5 2s ALGO log` (never refunded, reset or deleted). Every
   admission's (send, receive) times are recorded, and no `limit + 1`
   admissions of one key may fit in less than a period (see
   `check_log_admissions` for why this can miss a violation but never
   invents one), nor may a key's total exceed limit * ceil(run / period) + limit.
4. After the load every connection is closed; every key must expire (DBSIZE
   0 within 30 s), and used_memory must come back near where it started
   (MEMORY_SLACK below). INFO persistence must show about a snapshot a second
   and no failure. The server must still answer PING, exit 0 within 10 s of
   SIGTERM, and its log must hold no `panicked` and no ` ERROR ` line.

Listens and connects on 127.0.0.1 only. The whole run is bounded by
--seconds + 90 s; the server is killed on every way out. Exits 0 only if
every check passed; the temporary directory (log, snapshot) is kept on
failure and its path printed.
"""

import argparse
import asyncio
import heapq
import math
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"
OUTPUT_LIMIT = "1mb 256kb 2"  # --client-output-buffer-limit for the run
NONREADERS = 8             # clients that pipeline GETs and never read
DROP_WAIT_S = 10           # they must be gone this long after the load
HARD_EXTRA_S = 90          # whole run <= seconds + this
EXPIRE_WAIT_S = 30         # DBSIZE must reach 0 within this after the load
MEMORY_SETTLE_S = 5        # then used_memory may take this long to settle
TERM_WAIT_S = 10
# used_memory after every key expired and every client left must be within
# max(2 MiB, 10 % of the start) of its value before the load (about 0.16 MiB).
# Measured: it comes back to 1.0-1.6 MiB above the start, from a peak of about
# 38 MiB (1,000 connections' buffers plus ~10,000 keys). What stays is by
# design and bounded, not growing with the run: sweep_shard (src/store/mod.rs)
# only shrinks a shard's table whose capacity is over 64, so each of the 256
# shards may keep a 64-bucket table (~95 B a bucket: about 1.5 MiB in all),
# plus what the server keeps for its high-water mark of connections. A leak of
# one byte per request would add more than 1 MiB to a full run (1-2 million
# requests), and one of a few bytes per key created, as much.
MEMORY_SLACK_ABS = 2 << 20
MEMORY_SLACK_REL = 0.10

# The checked `log` family.
LOG_KEYS = 200
LOG_LIMIT = 5
LOG_PERIOD_S = 2
# The other families: a few thousand names each, one prefix per family, one
# algorithm or type per prefix (so WRONGTYPE is never expected).
FAMILY_KEYS = 3000
LIMITER_FAMILIES = {  # prefix -> ALGO
    "soak:win": "window",
    "soak:gcra": "gcra",
    "soak:fix": "fixed",
    "soak:lx": "log",  # unchecked log keys: refunded, reset, weighted
}
CL_PREFIX = "soak:cl"      # CL.THROTTLE, RL.REFUND, RL.STATE
STR_PREFIX = "soak:str"    # SET EX / GET / DEL
CTR_PREFIX = "soak:ctr"    # INCR + EXPIRE / GET / DEL

T0 = time.monotonic()


def say(msg):
    print(f"[soak +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class Failure(Exception):
    pass


class RespError(str):
    """An error reply (-ERR ..., -WRONGTYPE ...)."""


# --------------------------------------------------------------------------
# RESP2


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if not isinstance(a, bytes):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


async def read_reply(reader):
    """One RESP2 reply: + - : $ * (nil bulk and nil array are None)."""
    line = await reader.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"connection closed mid-reply ({line!r})")
    t, body = line[:1], line[1:-2]
    if t == b":":
        return int(body)
    if t == b"*":
        n = int(body)
        if n < 0:
            return None
        return [await read_reply(reader) for _ in range(n)]
    if t == b"$":
        n = int(body)
        if n < 0:
            return None
        data = await reader.readexactly(n + 2)
        if data[-2:] != b"\r\n":
            raise Failure(f"bulk string not followed by CRLF: {data[-2:]!r}")
        return data[:-2]
    if t == b"+":
        return body.decode()
    if t == b"-":
        return RespError(body.decode(errors="replace"))
    raise Failure(f"unknown RESP type byte in {line[:80]!r}")


class Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port):
        r, w = await asyncio.open_connection(HOST, port)
        return cls(r, w)

    async def call(self, *args):
        self.writer.write(enc(*args))
        await self.writer.drain()
        return await read_reply(self.reader)

    async def close(self):
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def info_fields(text):
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


# --------------------------------------------------------------------------
# Reply checks: each returns None if the reply is as documented, else why not.


def is_ints(r, n):
    return isinstance(r, list) and len(r) == n and all(type(x) is int for x in r)


def check_decision(limit, n=5):
    def check(r):
        if not is_ints(r, n):
            return "not an array of %d integers" % n
        allowed, lim, remaining, retry, reset = r[:5]
        if allowed not in (0, 1) or lim != limit or remaining < 0 or reset < 0:
            return "fields out of range"
        if allowed == 1 and retry != -1:
            return "allowed with retry_after_ms != -1"
        if allowed == 0 and retry < 0:
            return "denied with retry_after_ms < 0"
        if n == 6 and r[5] not in (0, 1):
            return "index out of range"
        return None
    return check


def check_throttle(max_burst):
    def check(r):
        if not is_ints(r, 5):
            return "not an array of 5 integers"
        if r[0] not in (0, 1) or r[1] != max_burst + 1 or r[2] < 0:
            return "fields out of range"
        return None
    return check


def check_int_in(*allowed):
    def check(r):
        return None if type(r) is int and r in allowed else "not one of %s" % (allowed,)
    return check


def check_nonneg_int(r):
    return None if type(r) is int and r >= 0 else "not an integer >= 0"


def check_pos_int(r):
    return None if type(r) is int and r >= 1 else "not an integer >= 1"


def check_ok(r):
    return None if r == "OK" else "not +OK"


def check_bulk_or_nil(r):
    return None if r is None or isinstance(r, bytes) else "not a bulk string or nil"


def check_state(r):
    if r is None:
        return None
    if not isinstance(r, list) or len(r) % 2 or b"algorithm" not in r:
        return "not a flat field/value array with 'algorithm'"
    return None


# --------------------------------------------------------------------------
# The operation mix. An op is (payload, kind, check, log_key or None).


def period_arg():
    return random.choice(("1s", "2s", "3s", "1500ms", "2500ms", "1", "3"))


def limiter_key(prefix):
    return f"{prefix}:{random.randrange(FAMILY_KEYS)}"


def limit_spec(prefix):
    """(key, limit, args after the key) of a random limit on this family."""
    algo = LIMITER_FAMILIES[prefix]
    limit = random.choice((1, 3, 5, 10, 20, 100))
    return limiter_key(prefix), limit, [limit, period_arg(), "ALGO", algo]


def op_log_checked():
    i = random.randrange(LOG_KEYS)
    return (enc("RL.ALLOW", f"soak:log:{i}", LOG_LIMIT, f"{LOG_PERIOD_S}s", "ALGO", "log"),
            "rl.allow(log checked)", check_decision(LOG_LIMIT), i)


def op_allow():
    prefix = random.choice(tuple(LIMITER_FAMILIES))
    key, limit, rest = limit_spec(prefix)
    if random.random() < 0.3:
        rest += ["COST", random.randint(1, limit)]
    if prefix == "soak:lx" and random.random() < 0.2:
        rest += ["PRECISION", "100ms"]
    return enc("RL.ALLOW", key, *rest), "rl.allow", check_decision(limit), None


def op_peek():
    prefix = random.choice(tuple(LIMITER_FAMILIES))
    key, limit, rest = limit_spec(prefix)
    if random.random() < 0.3:
        rest += ["COST", random.randint(1, limit)]
    return enc("RL.PEEK", key, *rest), "rl.peek", check_decision(limit), None


def op_allowmany():
    a, b = random.sample(tuple(LIMITER_FAMILIES), 2)
    ka, la, ra = limit_spec(a)
    kb, lb, rb = limit_spec(b)
    head = []
    if random.random() < 0.3:
        head = ["COST", random.randint(1, min(la, lb))]
    payload = enc("RL.ALLOWMANY", *head, "LIMIT", ka, *ra, "LIMIT", kb, *rb)

    def check(r):
        why = check_decision(r[1] if is_ints(r, 6) else None, 6)(r)
        if why is None and r[1] != (la, lb)[r[5]]:
            why = "limit does not match the binding index"
        return why
    return payload, "rl.allowmany", check, None


def op_refund():
    prefix = random.choice(tuple(LIMITER_FAMILIES) + (CL_PREFIX,))
    key = f"{prefix}:{random.randrange(FAMILY_KEYS)}"
    return enc("RL.REFUND", key, random.randint(1, 3)), "rl.refund", check_int_in(0, 1), None


def op_reset():
    prefix = random.choice(tuple(LIMITER_FAMILIES) + (CL_PREFIX,))
    keys = [f"{prefix}:{random.randrange(FAMILY_KEYS)}" for _ in range(random.randint(1, 3))]
    return enc("RL.RESET", *keys), "rl.reset", check_nonneg_int, None


def op_state():
    prefix = random.choice(tuple(LIMITER_FAMILIES) + (CL_PREFIX,))
    return enc("RL.STATE", limiter_key(prefix)), "rl.state", check_state, None


def op_throttle():
    # CL.THROTTLE keys hold GCRA state: on their own family, and sometimes on
    # RL.ALLOW's gcra family (the same state, so no WRONGTYPE either).
    prefix = CL_PREFIX if random.random() < 0.7 else "soak:gcra"
    max_burst = random.choice((0, 2, 4, 9))
    payload = enc("CL.THROTTLE", f"{prefix}:{random.randrange(FAMILY_KEYS)}", max_burst,
                  random.choice((5, 10, 30)), random.choice((1, 2, 3)),
                  random.choice((0, 1, 1, 1, 2)))
    return payload, "cl.throttle", check_throttle(max_burst), None


def op_set():
    return (enc("SET", f"{STR_PREFIX}:{random.randrange(FAMILY_KEYS)}",
                "v" * random.choice((1, 10, 100, 500)), "EX", random.randint(1, 3)),
            "set", check_ok, None)


def op_get():
    prefix = random.choice((STR_PREFIX, CTR_PREFIX))
    return enc("GET", f"{prefix}:{random.randrange(FAMILY_KEYS)}"), "get", check_bulk_or_nil, None


def ops_incr():
    """INCR then EXPIRE on the same key: always sent together in one write."""
    key = f"{CTR_PREFIX}:{random.randrange(FAMILY_KEYS)}"
    return [(enc("INCR", key), "incr", check_pos_int, None),
            (enc("EXPIRE", key, random.randint(1, 3)), "expire", check_int_in(0, 1), None)]


def op_del():
    prefix = random.choice(tuple(LIMITER_FAMILIES) + (CL_PREFIX, STR_PREFIX, CTR_PREFIX))
    keys = [f"{prefix}:{random.randrange(FAMILY_KEYS)}" for _ in range(random.randint(1, 3))]
    return enc("DEL", *keys), "del", check_nonneg_int, None


# (weight, generator of a list of ops); weights are relative.
MIX = [
    (25, lambda: [op_log_checked()]),
    (28, lambda: [op_allow()]),
    (7, lambda: [op_peek()]),
    (7, lambda: [op_allowmany()]),
    (3, lambda: [op_refund()]),
    (1, lambda: [op_reset()]),
    (2, lambda: [op_state()]),
    (7, lambda: [op_throttle()]),
    (7, lambda: [op_set()]),
    (6, lambda: [op_get()]),
    (5, ops_incr),
    (2, lambda: [op_del()]),
]
MIX_FNS = [f for _, f in MIX]
MIX_WEIGHTS = [w for w, _ in MIX]
PIPELINE_P = 0.02
RECONNECT_P = 0.003


def pick_ops():
    if random.random() < PIPELINE_P:
        n = random.randint(10, 50)
        ops = []
        while len(ops) < n:
            ops += random.choices(MIX_FNS, MIX_WEIGHTS)[0]()
        return ops, True
    return random.choices(MIX_FNS, MIX_WEIGHTS)[0](), False


# --------------------------------------------------------------------------
# The load


class Tally:
    def __init__(self):
        self.commands = 0
        self.pipelines = 0
        self.reconnects = 0
        self.by_kind = {}
        self.problems = []          # (kind, payload head, reply, why)
        self.problem_count = 0
        self.log_admits = [[] for _ in range(LOG_KEYS)]  # (send, recv)
        self.log_denied = 0
        self.latencies = []         # sampled single-command round trips

    def problem(self, kind, payload, reply, why):
        self.problem_count += 1
        if len(self.problems) < 20:
            self.problems.append((kind, payload[:120], repr(reply)[:200], why))


async def client(idx, port, stop_at, tally, opened):
    conn = None
    try:
        conn = await Conn.open(port)
        opened.append(idx)
        while time.monotonic() < stop_at:
            if random.random() < RECONNECT_P:
                await conn.close()
                conn = await Conn.open(port)
                tally.reconnects += 1
                continue
            ops, pipelined = pick_ops()
            payload = b"".join(op[0] for op in ops)
            # Taken before write(): asyncio may send the bytes at once, and
            # the server must not be able to decide before `sent`.
            sent = time.monotonic()
            conn.writer.write(payload)
            await conn.writer.drain()
            for payload, kind, check, log_key in ops:
                reply = await read_reply(conn.reader)
                recv = time.monotonic()
                tally.commands += 1
                tally.by_kind[kind] = tally.by_kind.get(kind, 0) + 1
                if isinstance(reply, RespError):
                    tally.problem(kind, payload, reply, "error reply")
                    continue
                why = check(reply)
                if why is not None:
                    tally.problem(kind, payload, reply, why)
                    continue
                if log_key is not None:
                    if reply[0] == 1:
                        tally.log_admits[log_key].append((sent, recv))
                    else:
                        tally.log_denied += 1
            if pipelined:
                tally.pipelines += 1
            elif len(ops) == 1 and random.random() < 0.01:
                tally.latencies.append(recv - sent)
    except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
        tally.problem("connection", b"", repr(e), f"client {idx}: connection lost")
    finally:
        if conn is not None:
            await conn.close()


async def poll_memory(port, stop_evt, peaks, every=2.0):
    conn = await Conn.open(port)
    try:
        last_print = time.monotonic()
        while not stop_evt.is_set():
            mem = info_fields(await conn.call("INFO", "memory"))
            keys = await conn.call("DBSIZE")
            peaks["used"] = max(peaks["used"], int(mem["used_memory"]))
            peaks["rss"] = max(peaks["rss"], int(mem["used_memory_rss"]))
            peaks["keys"] = max(peaks["keys"], keys)
            if time.monotonic() - last_print >= 10:
                last_print = time.monotonic()
                t = peaks["tally"]
                say(f"  {t.commands} commands, {keys} keys, used_memory "
                    f"{int(mem['used_memory']) / 2**20:.1f} MiB, rss "
                    f"{int(mem['used_memory_rss']) / 2**20:.1f} MiB, "
                    f"{t.problem_count} problems")
            try:
                await asyncio.wait_for(stop_evt.wait(), every)
            except asyncio.TimeoutError:
                pass
    finally:
        await conn.close()


# --------------------------------------------------------------------------
# The log check


def check_log_admissions(admits, limit, period):
    """Definite violations of "at most `limit` admissions in any `period`".

    Each admission's server decision time s lies in [send, recv]: `send` is
    read before the request is written, so the server cannot decide earlier,
    and `recv` after its reply is parsed, so the decision came before. For
    any set of limit+1 admissions of one key, every s in it is <= the largest
    recv of the set and >= the smallest send. If that largest recv minus
    that smallest send is under `period`, the limit+1 server decisions all
    fell within less than one period: a certain violation, whatever the
    latencies were (the log rounds timestamps up, so it may deny early, never
    admit more). Because the real s are unknown inside [send, recv], a
    violation whose admissions latency spreads to a period or more is
    missed: the check can miss a violation hidden by latency, never report a
    false one. (It assumes the server clock ran no faster than
    time.monotonic(), i.e. the system clock was not stepped forward during
    the run.)

    The tightest such set is found exactly: with admissions sorted by recv,
    for each admission j as the set's latest recv, the best companions are
    the `limit` earlier-received admissions with the latest sends (a min-heap
    of them). This includes every run i..i+limit of consecutive ones, where
    the test is recv[i+limit] - send[i] < period when sends are in order.

    Returns (violations as (key, j, span), checked admissions, keys with
    admissions, tightest span seen in seconds or None).
    """
    violations = []
    checked = keys = 0
    closest = None
    for key, adm in enumerate(admits):
        if not adm:
            continue
        keys += 1
        checked += len(adm)
        adm = sorted(adm, key=lambda a: a[1])
        latest_sends = []  # min-heap: the `limit` latest sends received so far
        for j, (send, recv) in enumerate(adm):
            if len(latest_sends) == limit:
                span = recv - min(send, latest_sends[0])
                if closest is None or span < closest:
                    closest = span
                if span < period:
                    violations.append((key, j, span))
                heapq.heappushpop(latest_sends, send)
            else:
                heapq.heappush(latest_sends, send)
    return violations, checked, keys, closest


# --------------------------------------------------------------------------
# Driver


def start_server(binary, tmp):
    log_path = os.path.join(tmp, "turnstile.log")
    snap = os.path.join(tmp, "soak.tsnap")
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(
            [binary, "--port", "0", "--metrics-addr", "off", "--snapshot", snap,
             "--snapshot-interval", "1s",
             "--client-output-buffer-limit", OUTPUT_LIMIT],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise Failure(f"cannot start {binary}: {e}")
    finally:
        log.close()
    pat = re.compile(r"turnstile listening local=127\.0\.0\.1:(\d+)")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with open(log_path, "rb") as f:
            for line in f.read().decode(errors="replace").splitlines():
                m = pat.search(line)
                if m:
                    return proc, int(m.group(1)), log_path, snap
        if proc.poll() is not None:
            raise Failure(f"turnstile exited at start with status {proc.returncode}")
        time.sleep(0.05)
    raise Failure("no 'turnstile listening local=127.0.0.1:PORT' line within 15 s")


def raise_nofile(connections):
    need = connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < need:
        raise Failure(f"RLIMIT_NOFILE is {soft} (hard {hard}); {need} needed")


async def soak(args, port, pid):
    res = {}
    ctl = await Conn.open(port)
    if await ctl.call("PING") != "PONG":
        raise Failure("no PONG before the load")
    keys0 = await ctl.call("DBSIZE")
    if keys0 != 0:
        raise Failure(f"DBSIZE is {keys0} before the load, expected 0")
    mem0 = info_fields(await ctl.call("INFO", "memory"))
    pers0 = info_fields(await ctl.call("INFO", "persistence"))
    res["mem0"] = int(mem0["used_memory"])
    res["rss0"] = int(mem0["used_memory_rss"])
    res["saves0"] = int(pers0["rdb_saves"])
    say(f"before the load: used_memory {res['mem0']} B, used_memory_rss "
        f"{res['rss0']} B, rdb_saves {res['saves0']}")

    tally = Tally()
    peaks = {"used": res["mem0"], "rss": res["rss0"], "keys": 0, "tally": tally}
    stop_evt = asyncio.Event()
    poller = asyncio.create_task(poll_memory(port, stop_evt, peaks))

    load_start = time.monotonic()
    stop_at = load_start + args.seconds
    # Clients that never read: the output limit must drop them while the
    # others are served (their value expires 5 s after the load).
    big = "x" * 65536
    if await ctl.call("SET", "soak:nonreader", big, "EX", int(args.seconds) + 5) != "OK":
        raise Failure("SET soak:nonreader failed")
    nonreaders = []
    for _ in range(NONREADERS):
        r, w = await asyncio.open_connection(HOST, port)
        w.write(enc("GET", "soak:nonreader") * 200)
        nonreaders.append(w)
    # SIGHUP (logrotate, systemctl reload) halfway: ignored, nothing dropped.
    async def hangup():
        await asyncio.sleep(args.seconds / 2)
        os.kill(pid, signal.SIGHUP)
        say("SIGHUP sent")
    hup = asyncio.create_task(hangup())
    opened = []
    tasks = []
    say(f"load: {args.connections} connections for {args.seconds} s")
    for i in range(args.connections):
        tasks.append(asyncio.create_task(client(i, port, stop_at, tally, opened)))
        if i % 50 == 49:  # ramp up: keep the accept backlog short
            await asyncio.sleep(0.02)
    # Tasks finish their current request after stop_at; a stuck one is a
    # failure (the server stopped answering).
    done, pending = await asyncio.wait(tasks, timeout=args.seconds + 25)
    load_end = time.monotonic()
    stop_evt.set()
    if pending:
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise Failure(f"{len(pending)} connections still waiting for a reply "
                      f"{load_end - stop_at:.0f} s after the load stopped")
    for t in done:
        if t.exception() is not None:
            raise t.exception()
    await poller
    await hup
    # Only the control connection is left: the non-readers were dropped.
    t_drop = time.monotonic()
    while True:
        clients = int(info_fields(await ctl.call("INFO", "clients"))["connected_clients"])
        if clients == 1 or time.monotonic() - t_drop > DROP_WAIT_S:
            break
        await asyncio.sleep(0.2)
    res["clients_left"] = clients
    for w in nonreaders:
        w.close()
    res["load_s"] = load_end - load_start
    res["tally"] = tally
    res["opened"] = len(opened)
    res["peaks"] = peaks
    say(f"load done: {tally.commands} replies in {res['load_s']:.1f} s; all "
        f"connections closed")

    # Every key expires.
    t_wait = time.monotonic()
    keys = await ctl.call("DBSIZE")
    res["keys_at_stop"] = keys
    while keys != 0 and time.monotonic() - t_wait < EXPIRE_WAIT_S:
        await asyncio.sleep(0.5)
        keys = await ctl.call("DBSIZE")
    res["expire_wait_s"] = time.monotonic() - t_wait
    res["keys_end"] = keys
    if keys != 0:
        sample = await ctl.call("SCAN", 0, "COUNT", 20)
        ttls = []
        for k in (sample[1] if isinstance(sample, list) else [])[:10]:
            ttls.append((k.decode(errors="replace"), await ctl.call("PTTL", k),
                         await ctl.call("TYPE", k)))
        res["leftover"] = ttls

    # Memory back near the start: the first reading, then (bounded) until it
    # is within the bound or stops falling.
    bound = res["mem0"] + max(MEMORY_SLACK_ABS, int(MEMORY_SLACK_REL * res["mem0"]))
    res["mem_bound"] = bound
    mem = info_fields(await ctl.call("INFO", "memory"))
    res["mem_first"] = int(mem["used_memory"])
    t_mem = time.monotonic()
    used = res["mem_first"]
    while used > bound and time.monotonic() - t_mem < MEMORY_SETTLE_S:
        await asyncio.sleep(0.5)
        mem = info_fields(await ctl.call("INFO", "memory"))
        used = int(mem["used_memory"])
    res["mem_end"] = used
    res["rss_end"] = int(mem["used_memory_rss"])

    pers = info_fields(await ctl.call("INFO", "persistence"))
    res["persistence"] = pers
    res["pong"] = await ctl.call("PING")
    await ctl.close()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--connections", type=int, default=1000)
    args = ap.parse_args()
    if args.seconds <= 0 or args.connections <= 0:
        sys.exit("soak: --seconds and --connections must be positive")
    hard_s = args.seconds + HARD_EXTRA_S

    raise_nofile(args.connections)
    tmp = tempfile.mkdtemp(prefix="turnstile-soak.")
    proc = None
    rc = None  # the server's exit status, once we stopped it
    ok = False

    def watchdog():
        print(f"soak: FAILED: hard deadline ({hard_s:.0f} s) reached; killing "
              f"the server (log and snapshot kept in {tmp})", flush=True)
        if proc is not None and proc.poll() is None:
            proc.kill()
        os._exit(3)

    dog = threading.Timer(hard_s, watchdog)
    dog.daemon = True
    dog.start()
    failures = []
    try:
        proc, port, log_path, snap = start_server(args.binary, tmp)
        say(f"turnstile pid {proc.pid} on {HOST}:{port}; log {log_path}")
        remaining = hard_s - (time.monotonic() - T0) - TERM_WAIT_S - 5
        try:
            res = asyncio.run(asyncio.wait_for(soak(args, port, proc.pid), remaining))
        except asyncio.TimeoutError:
            raise Failure("the soak did not finish within its deadline")
        tally = res["tally"]

        # Replies.
        if res["opened"] != args.connections:
            failures.append(f"only {res['opened']} of {args.connections} connections opened")
        if tally.problem_count:
            failures.append(f"{tally.problem_count} unexpected replies or lost connections")
            for kind, payload, reply, why in tally.problems:
                print(f"    {kind}: {why}: {reply}  <- {payload!r}")

        # The log family.
        viol, checked, nkeys, closest = check_log_admissions(
            tally.log_admits, LOG_LIMIT, LOG_PERIOD_S)
        periods = math.ceil(res["load_s"] / LOG_PERIOD_S)
        coarse = LOG_LIMIT * periods + LOG_LIMIT
        over = [(k, len(a)) for k, a in enumerate(tally.log_admits) if len(a) > coarse]
        if viol:
            failures.append(f"{len(viol)} definite log-limit violations (more than "
                            f"{LOG_LIMIT} admissions within {LOG_PERIOD_S} s)")
            for key, i, span in viol[:10]:
                print(f"    soak:log:{key}: {LOG_LIMIT + 1} admissions received by its "
                      f"admission #{i} within {span * 1000:.1f} ms")
        if over:
            failures.append(f"{len(over)} log keys over the coarse total bound {coarse}: "
                            f"{over[:10]}")
        if checked == 0 or tally.log_denied == 0:
            failures.append(f"the log family saw {checked} admissions and "
                            f"{tally.log_denied} denials: no contention, nothing checked")

        # Clients that never read.
        if res["clients_left"] != 1:
            failures.append(f"{res['clients_left'] - 1} connections left {DROP_WAIT_S} s after "
                            f"the load: the {NONREADERS} clients that never read were not "
                            f"all dropped by --client-output-buffer-limit {OUTPUT_LIMIT}")

        # Expiry and memory.
        if res["keys_end"] != 0:
            failures.append(f"{res['keys_end']} keys still there {EXPIRE_WAIT_S} s after "
                            f"the load (sample: key, PTTL, TYPE: {res.get('leftover')})")
        if res["mem_end"] > res["mem_bound"]:
            failures.append(f"used_memory {res['mem_end']} B after expiry, over the bound "
                            f"{res['mem_bound']} B (start {res['mem0']} B)")

        # Snapshots.
        pers = res["persistence"]
        saves = int(pers["rdb_saves"]) - res["saves0"]
        if int(pers["snapshot_failures"]) != 0 or pers["rdb_last_bgsave_status"] != "ok":
            failures.append(f"snapshot failures: {pers['snapshot_failures']}, last status "
                            f"{pers['rdb_last_bgsave_status']}")
        if saves < 0.8 * res["load_s"] - 2:
            failures.append(f"only {saves} snapshots written in a {res['load_s']:.0f} s load "
                            f"with --snapshot-interval 1s")
        if not os.path.exists(snap):
            failures.append(f"no snapshot file at {snap}")

        # Shutdown.
        if res["pong"] != "PONG":
            failures.append(f"PING after the load answered {res['pong']!r}")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(TERM_WAIT_S)
        except subprocess.TimeoutExpired:
            rc = None
            failures.append(f"no exit within {TERM_WAIT_S} s of SIGTERM")
        if rc is not None and rc != 0:
            failures.append(f"exit status {rc} after SIGTERM, expected 0")
        with open(log_path, "rb") as f:
            log_lines = f.read().decode(errors="replace").splitlines()
        bad = [l for l in log_lines if "panicked" in l or " ERROR " in l]
        if bad:
            failures.append(f"{len(bad)} panic/ERROR lines in the server log")
            for l in bad[:20]:
                print(f"    log: {l}")

        # Summary.
        mib = 2 ** 20
        lat = sorted(tally.latencies)
        p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000) if lat else (lambda q: 0)
        print()
        print("soak summary")
        print(f"  connections        {args.connections} ({tally.reconnects} reopened, "
              f"{tally.pipelines} pipelines of 10-50)")
        print(f"  load               {res['load_s']:.1f} s")
        print(f"  commands           {tally.commands} ({tally.commands / res['load_s']:.0f}/s; "
              f"round trip p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms)")
        print("  by command         " + ", ".join(
            f"{k} {v}" for k, v in sorted(tally.by_kind.items(), key=lambda kv: -kv[1])))
        print(f"  unexpected replies {tally.problem_count}")
        print(f"  never reading      {NONREADERS} clients pipelining GETs of 64 KiB, "
              f"{'all dropped' if res['clients_left'] == 1 else 'NOT all dropped'} "
              f"(--client-output-buffer-limit {OUTPUT_LIMIT}); a SIGHUP halfway")
        print(f"  log check          {checked} admissions on {nkeys} keys checked "
              f"({tally.log_denied} denied), limit {LOG_LIMIT} per {LOG_PERIOD_S} s: "
              f"{len(viol)} definite violations")
        print(f"                     tightest {LOG_LIMIT + 1} admissions of one key: within "
              f"{closest * 1000 if closest is not None else float('nan'):.1f} ms as seen by the "
              f"client (< {LOG_PERIOD_S * 1000} would fail); most on one key "
              f"{max((len(a) for a in tally.log_admits), default=0)} (coarse bound {coarse})")
        print(f"  keys               peak {res['peaks']['keys']}, {res['keys_at_stop']} at the "
              f"end of the load, 0 after {res['expire_wait_s']:.1f} s"
              if res["keys_end"] == 0 else
              f"  keys               peak {res['peaks']['keys']}, {res['keys_end']} left")
        print(f"  used_memory        start {res['mem0'] / mib:.2f} MiB, peak "
              f"{res['peaks']['used'] / mib:.2f} MiB, after expiry {res['mem_first'] / mib:.2f} "
              f"MiB, end {res['mem_end'] / mib:.2f} MiB (bound {res['mem_bound'] / mib:.2f} "
              f"MiB; end - start = {res['mem_end'] - res['mem0']:+d} B)")
        print(f"  used_memory_rss    start {res['rss0'] / mib:.1f} MiB, peak "
              f"{res['peaks']['rss'] / mib:.1f} MiB, end {res['rss_end'] / mib:.1f} MiB")
        print(f"  snapshots          {saves} written during the run, "
              f"{pers['snapshot_failures']} failures, last had "
              f"{pers['snapshot_last_keys']} keys")
        print(f"  shutdown           exit status {rc}; {len(log_lines)} log lines, "
              f"{len(bad)} panic/ERROR")
        print()
        if failures:
            raise Failure("; ".join(failures))
        print("soak: OK")
        ok = True
    except Failure as e:
        print(f"soak: FAILED: {e}", flush=True)
    except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
        print(f"soak: FAILED: lost the server: {type(e).__name__}: {e}", flush=True)
    except Exception as e:  # a bug here, or the server misbehaving oddly
        print(f"soak: FAILED: {type(e).__name__}: {e}", flush=True)
        import traceback
        traceback.print_exc()
    finally:
        if not ok and proc is not None and proc.poll() is not None and rc is None:
            print(f"soak: turnstile exited with status {proc.returncode} during the "
                  f"run; the end of its log:", flush=True)
            try:
                with open(os.path.join(tmp, "turnstile.log"), "rb") as f:
                    for l in f.read().decode(errors="replace").splitlines()[-20:]:
                        print(f"    log: {l}")
            except OSError:
                pass
        dog.cancel()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"soak: log and snapshot kept in {tmp}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
