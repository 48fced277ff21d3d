#!/usr/bin/env python3
"""Memory per key: Turnstile's limiter keys against Redis holding the seeds'
limiter state, measured as resident memory (VmRSS) on this machine.

    benches/memory.sh              # full run (1,000,000 keys), prints the table
    benches/memory.sh --write      # ... and writes it to docs/performance.md
    benches/memory.sh --quick      # 20,000 keys, for CI: checks it completes

Every shape gets a fresh server on a free loopback port: VmRSS (from
/proc/<pid>/status) is read after startup, the keys are loaded over one
connection as raw RESP pipelines (batches of 10,000 commands, replies
counted), the connection is closed, and VmRSS is read again;
bytes per key = (RSS after - RSS before) / keys. The allocator's own figure
(`INFO memory` used_memory) is recorded beside it for reference.

Key lengths: every shape is measured with keys of exactly 16 bytes
(`k:%014d`); the fixed-size algorithms and Redis's string limiters also at
19, 36, 64 and 128 bytes (`--lengths`; `k:` and zero-padded digits), since
a key's own bytes are part of what it costs.

Turnstile (`target/release/turnstile --metrics-addr off`):

- one `RL.ALLOW k 100 3600 ALGO <algo>` per key, for window, sliding,
  gcra and fixed at each length, and log (which then holds one timestamp)
  at 16 bytes. The period is an hour so that nothing expires during the
  run; the state is the same size for any period. The target for these
  is the key's length plus 32 bytes.
- log (one timestamp per key) and lease keys (one `RL.ACQUIRE k 100 3600`
  per key: a key holding one lease) at each length too, with no target:
  their records are the key and the slot of a state that owns a heap
  block (the log's ring once it holds two timestamps, the leases'
  vector).
- log with 100 timestamps: a tenth as many keys, 100 `RL.ALLOW` each, sent
  in 100 rounds over all keys, so a key's requests are a whole round apart
  (tens of milliseconds): the log coalesces requests with equal microsecond
  timestamps into one slot, and this keeps every request a slot of its own
  (checked with RL.STATE, which reports `slots`). Bytes per timestamp =
  (RSS delta - keys * the 1-timestamp run's bytes per key) / the 99 extra
  timestamps per key, i.e. what each timestamp beyond the first costs.

Redis (Debian's redis-server, --save '' --appendonly no), same key names:

- the one-key fixed window, at each length: one string key per limiter,
  a small integer with an expiry (`SET k 7 EX`, as INCR + EXPIRE leaves
  it); bytes per limiter.
- the two-bucket limiter, at each length: two string keys per limiter
  (`k:%014d:cur`, `k:%014d:prev`), each a small integer with an expiry
  (`SET ... EX`, as the seed's INCR + EXPIRE leaves it); bytes per limiter.
- with `--redis-cell SO` (the redis-cell module, not in Debian: `cargo
  build --release` in the source of the `redis-cell` crate, 0.2.2 on
  crates.io, gives `target/release/libredis_cell.so`):
  one `CL.THROTTLE k 99 100 3600 1` per key, the module's GCRA, which
  keeps one string with an expiry; bytes per limiter.
- the sorted-set log: `ZADD k ts ts` (microsecond timestamps, member
  = score, as the seed writes them) plus `EXPIRE`, with 1 and with 100
  timestamps per key, in the default listpack encoding
  (zset-max-listpack-entries 128) and again as a skiplist
  (zset-max-listpack-entries 0); bytes per timestamp as for Turnstile.
"""

import argparse
import os
import sys
import time

from benchlib import (require, build_line, build_release, keyed_batches, machine_line, pin_turnstile, pipeline,
                      redis_version, start_redis, start_turnstile, template, write_section)

KEY = b"k:%014d"
PERIOD = 3600
TIMESTAMPS = 100
ALGOS = ["window", "sliding", "gcra", "fixed"]
# Measured at every length too, without the fixed-size target: the log
# holds one timestamp, the lease key one lease.
OWNED = ["log", "lease"]
LENGTHS = [16, 19, 36, 64, 128]
# The smoke run (--quick) checks the harness on three lengths.
QUICK_LENGTHS = [16, 36, 128]

# Targets, bytes: a fixed-size algorithm's key costs at most its length
# plus this, whatever the length.
TARGET_OVER_KEY = 32
LOG_PER_TS, LOG_PER_KEY = 8, 64


def key_format(length):
    """Keys of exactly `length` bytes: `k:` and zero-padded digits."""
    return b"k:%0" + str(length - 2).encode() + b"d"


def settle():
    time.sleep(0.5)


def measure(server, load, keys):
    """RSS and used_memory before and after `load()`, per key."""
    with server.client() as c:
        c("PING")
        settle()
        rss0, used0 = server.rss(), int(c.info("memory")["used_memory"])
    t = time.monotonic()
    load()
    load_s = time.monotonic() - t
    settle()
    with server.client() as c:
        rss1, used1 = server.rss(), int(c.info("memory")["used_memory"])
        dbsize = c("DBSIZE")
    return {
        "keys": keys,
        "rss_delta": rss1 - rss0,
        "used_delta": used1 - used0,
        "rss_before": rss0,
        "rss_after": rss1,
        "dbsize": dbsize,
        "load_s": load_s,
    }


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def report(name, m, per=None):
    per = per or m["keys"]
    log(f"{name:34} {m['keys']:>9,} keys in {m['load_s']:5.1f}s  RSS {m['rss_before'] / 2**20:7.1f} -> "
        f"{m['rss_after'] / 2**20:7.1f} MiB  {m['rss_delta'] / per:7.1f} B/key RSS  "
        f"{m['used_delta'] / per:7.1f} B/key used_memory  (DBSIZE {m['dbsize']:,})")


def check(cond, what):
    if not cond:
        sys.exit(f"check failed: {what}")


def turnstile_runs(keys, log_keys, lengths, algos):
    out = {}
    shapes = [(a, n) for a in algos for n in lengths]
    if log_keys and ("log", 16) not in shapes:
        shapes.append(("log", 16))
    for algo, length in shapes:
        kf = key_format(length)
        s = start_turnstile()
        try:
            if algo == "lease":
                # One lease per key; the reply is 5 integers and the id.
                tmpl, lines = template("RL.ACQUIRE", None, 100, PERIOD, key_format=kf), 8
            else:
                tmpl, lines = template("RL.ALLOW", None, 100, PERIOD, "ALGO", algo, key_format=kf), 6
            m = measure(s, lambda: pipeline(s.port, keyed_batches(tmpl, 0, keys, lines)), keys)
            check(m["dbsize"] == keys, f"turnstile {algo}: DBSIZE {m['dbsize']} != {keys}")
            with s.client() as c:
                st = c.pairs("RL.STATE", kf % (keys - 1))
                check(st and st["algorithm"] == algo.encode(), f"RL.STATE {st}")
                if algo == "log":
                    check(st["slots"] == 1, f"log key holds {st['slots']} slots, not 1")
        finally:
            s.stop()
        report(f"turnstile {algo} {length} B", m)
        out[(algo, length)] = m
    if not log_keys:
        return out

    s = start_turnstile()
    try:
        tmpl = template("RL.ALLOW", None, TIMESTAMPS, PERIOD, "ALGO", "log", key_format=KEY)

        def rounds():
            for _ in range(TIMESTAMPS):
                yield from keyed_batches(tmpl, 0, log_keys, 6)

        m = measure(s, lambda: pipeline(s.port, rounds()), log_keys)
        check(m["dbsize"] == log_keys, f"turnstile log x{TIMESTAMPS}: DBSIZE {m['dbsize']} != {log_keys}")
        with s.client() as c:
            for i in (0, log_keys // 2, log_keys - 1):
                st = c.pairs("RL.STATE", KEY % i)
                check(st["slots"] == TIMESTAMPS and st["count"] == TIMESTAMPS,
                      f"log key {i}: {st['slots']} slots, count {st['count']}; want {TIMESTAMPS} of each")
    finally:
        s.stop()
    report(f"turnstile log x{TIMESTAMPS}", m)
    out["log100"] = m
    return out


def redis_shape(name, keys, tmpl, lines, *extra):
    """One key per limiter, `tmpl % i` for key i (`lines` reply lines
    each), on a fresh Redis started with `extra`."""
    s = start_redis(*extra)
    try:
        m = measure(s, lambda: pipeline(s.port, keyed_batches(tmpl, 0, keys, lines)), keys)
        check(m["dbsize"] == keys, f"{name}: DBSIZE {m['dbsize']} != {keys}")
    finally:
        s.stop()
    return m


def redis_runs(keys, log_keys, lengths, cell=None):
    out = {}
    for length in lengths:
        kf = key_format(length)
        if cell:
            # redis-cell's GCRA: one CL.THROTTLE per key (a reply of 5
            # integers), the module's string with an expiry.
            tmpl = template("CL.THROTTLE", None, 99, 100, PERIOD, 1, key_format=kf)
            m = redis_shape("redis-cell", keys, tmpl, 6, "--loadmodule", cell)
            report(f"redis-cell {length} B", m)
            out[("cell", length)] = m
        tmpl = template("SET", None, 7, "EX", PERIOD * 2, key_format=kf)
        m = redis_shape("redis one-key", keys, tmpl, 1)
        report(f"redis one-key {length} B", m)
        out[("one-key", length)] = m
        # The two-bucket limiter's keys are the limiter's key and a suffix.
        s = start_redis()
        try:
            cur = template("SET", None, 7, "EX", PERIOD * 2, key_format=kf + b":cur")
            prev = template("SET", None, 3, "EX", PERIOD * 2, key_format=kf + b":prev")
            digits = kf[len(b"k:%"):]
            tmpl = (cur + prev).replace(b"%" + digits, b"%(i)" + digits)

            def batches(batch=5_000):
                for lo in range(0, keys, batch):
                    hi = min(keys, lo + batch)
                    yield b"".join([tmpl % {b"i": i} for i in range(lo, hi)]), (hi - lo) * 2

            m = measure(s, lambda: pipeline(s.port, batches()), keys)
            check(m["dbsize"] == 2 * keys, f"redis two-bucket: DBSIZE {m['dbsize']} != {2 * keys}")
        finally:
            s.stop()
        report(f"redis two-bucket {length} B", m)
        out[("two-bucket", length)] = m
    if not log_keys:
        return out

    base = int(time.time() * 1_000_000)
    for encoding, extra in [("listpack", ()), ("skiplist", ("--zset-max-listpack-entries", "0"))]:
        for n_ts, n_keys in [(1, keys), (TIMESTAMPS, log_keys)]:
            s = start_redis(*extra)
            try:
                pairs = []
                for j in range(n_ts):
                    ts = base + j * 1000
                    pairs += [ts, ts]
                zadd = template("ZADD", None, *pairs, key_format=KEY)
                expire = template("EXPIRE", None, PERIOD + 5, key_format=KEY)
                tmpl = (zadd + expire).replace(b"%014d", b"%(i)014d")

                def batches(batch=max(1, 10_000 // n_ts)):
                    for lo in range(0, n_keys, batch):
                        hi = min(n_keys, lo + batch)
                        yield b"".join([tmpl % {b"i": i} for i in range(lo, hi)]), (hi - lo) * 2

                m = measure(s, lambda: pipeline(s.port, batches()), n_keys)
                check(m["dbsize"] == n_keys, f"redis zset: DBSIZE {m['dbsize']} != {n_keys}")
                with s.client() as c:
                    enc = c("OBJECT", "ENCODING", KEY % (n_keys - 1)).decode()
                    check(enc == encoding, f"zset encoding {enc}, wanted {encoding}")
                    check(c("ZCARD", KEY % (n_keys - 1)) == n_ts, "ZCARD")
            finally:
                s.stop()
            report(f"redis zset {encoding} x{n_ts}", m)
            out[f"zset-{encoding}-{n_ts}"] = m
    return out


def per_ts(m100, m1, field):
    """Bytes per timestamp beyond each key's first, and total per key."""
    keys = m100["keys"]
    k1 = m1[field] / m1["keys"]
    return (m100[field] - keys * k1) / (keys * (TIMESTAMPS - 1)), m100[field] / keys


def table(t, r, lengths, log_keys):
    def yes(ok):
        return "yes" if ok else "**no**"

    rows = [
        "| server | shape | key bytes | keys | RSS bytes per key | RSS bytes per timestamp | used_memory bytes per key "
        "| used_memory bytes per timestamp | target | met? |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def row(server, shape, length, m, target="", met="", ts=None):
        rss_key = m["rss_delta"] / m["keys"]
        used_key = m["used_delta"] / m["keys"]
        rss_ts = used_ts = ""
        if ts:
            rss_ts = f"{ts[0]:.1f}"
            used_ts = f"{ts[1]:.1f}"
        rows.append(f"| {server} | {shape} | {length} | {m['keys']:,} | {rss_key:,.1f} | {rss_ts} | {used_key:,.1f} | "
                    f"{used_ts} | {target} | {met} |")

    for algo in ALGOS:
        for n in lengths:
            m = t.get((algo, n))
            if m:
                target = n + TARGET_OVER_KEY
                row("Turnstile", f"`RL.ALLOW ... ALGO {algo}`", n, m, f"≤ {target} B/key",
                    yes(m["rss_delta"] / m["keys"] <= target))
    for algo in OWNED:
        for n in lengths:
            m = t.get((algo, n))
            if m and (algo, n) != ("log", 16):
                shape = "`ALGO log`, 1 timestamp per key" if algo == "log" else "`RL.ACQUIRE`, 1 lease per key"
                row("Turnstile", shape, n, m)
    for n in lengths:
        row("Redis", "one-key fixed window: 1 string + expiry per limiter", n, r[("one-key", n)])
        row("Redis", "two-bucket: 2 strings + expiry per limiter", n, r[("two-bucket", n)])
        if ("cell", n) in r:
            row("Redis + redis-cell", "`CL.THROTTLE` (GCRA), 1 key per limiter", n, r[("cell", n)])
    if not log_keys:
        return "\n".join(rows) + "\n"
    m = t[("log", 16)]
    row("Turnstile", "`ALGO log`, 1 timestamp per key", 16, m, f"≤ {LOG_PER_KEY + LOG_PER_TS} B/key (64 + 8)",
        yes(m["rss_delta"] / m["keys"] <= LOG_PER_KEY + LOG_PER_TS))
    ts_rss, total_rss = per_ts(t["log100"], t[("log", 16)], "rss_delta")
    ts_used, _ = per_ts(t["log100"], t[("log", 16)], "used_delta")
    row("Turnstile", f"`ALGO log`, {TIMESTAMPS} timestamps per key", 16, t["log100"],
        f"≤ {LOG_PER_TS} B/timestamp, ≤ {LOG_PER_KEY + LOG_PER_TS * TIMESTAMPS} B/key",
        yes(ts_rss <= LOG_PER_TS and total_rss <= LOG_PER_KEY + LOG_PER_TS * TIMESTAMPS), (ts_rss, ts_used))
    for enc in ["listpack", "skiplist"]:
        row("Redis", f"zset log, {enc}, 1 timestamp per key", 16, r[f"zset-{enc}-1"])
        ts_rss, _ = per_ts(r[f"zset-{enc}-{TIMESTAMPS}"], r[f"zset-{enc}-1"], "rss_delta")
        ts_used, _ = per_ts(r[f"zset-{enc}-{TIMESTAMPS}"], r[f"zset-{enc}-1"], "used_delta")
        row("Redis", f"zset log, {enc}, {TIMESTAMPS} timestamps per key", 16,
            r[f"zset-{enc}-{TIMESTAMPS}"], ts=(ts_rss, ts_used))
    return "\n".join(rows) + "\n"


PROSE = """\
`benches/memory.sh` (add `--write` to update the table below; `--quick` is a
20,000-key smoke run for CI) builds the release binary, then for each shape
starts a fresh server, reads its resident memory (VmRSS), loads the keys
over raw RESP pipelines, and reads it again: bytes per key = RSS growth /
keys. Keys are 16, 19, 36, 64 and 128 bytes (`k:` and zero-padded digits)
for every algorithm, one `RL.ALLOW` each (the log then holds one
timestamp), and for lease keys, one `RL.ACQUIRE` each (one lease); the log
also with 100 timestamps per key at 16 bytes, on a tenth as many keys; Redis
holds the same keys as the seeds' limiters do: one string with an expiry
per fixed-window limiter, two per two-bucket limiter (the key and `:cur`,
`:prev`), a sorted set per log (listpack, and skiplist with
`zset-max-listpack-entries 0`). Bytes per timestamp are what each
timestamp beyond a key's first adds. `used_memory` (each server's
allocator count) is beside RSS for reference; the targets are on RSS."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 keys: checks the harness completes")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--write", action="store_true", help="update docs/performance.md (not with --quick)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--binary", help="measure this Turnstile binary (another build) instead of building")
    ap.add_argument("--only", choices=["turnstile", "redis"], help="measure one server only (no table)")
    ap.add_argument("--lengths", help="key lengths in bytes, comma-separated (at least 3; default "
                    f"{','.join(map(str, LENGTHS))}, with --quick {','.join(map(str, QUICK_LENGTHS))})")
    ap.add_argument("--algos", default=",".join(ALGOS + OWNED),
                    help="algorithms to measure (and `lease`), comma-separated")
    ap.add_argument("--no-log", action="store_true", help="skip the log and sorted-set shapes")
    ap.add_argument("--redis-cell", metavar="SO", default=os.environ.get("REDIS_CELL"),
                    help="also measure redis-cell's CL.THROTTLE, loading this module into Redis "
                         "(default: $REDIS_CELL; skipped if unset)")
    opts = ap.parse_args()
    lengths = opts.lengths or ",".join(map(str, QUICK_LENGTHS if opts.quick else LENGTHS))
    lengths = [int(n) for n in lengths.split(",")]
    if min(lengths) < 3:
        sys.exit("--lengths: keys are at least 3 bytes (`k:` and a digit)")
    algos = [a for a in opts.algos.split(",") if a]
    require("cargo", "redis-server")
    if opts.quick:
        opts.keys = 20_000
        if opts.write:
            sys.exit("--write needs a full run, not --quick")
    log_keys = 0 if opts.no_log else max(1, opts.keys // 10)
    if not (opts.no_build or opts.binary):
        build_release()
    pin_turnstile(opts.binary)
    started = time.monotonic()
    t = turnstile_runs(opts.keys, log_keys, lengths, algos) if opts.only != "redis" else None
    r = redis_runs(opts.keys, log_keys, lengths, opts.redis_cell) if opts.only != "turnstile" else None
    log(f"done in {time.monotonic() - started:.0f}s")
    if not (t and r):
        return
    out = table(t, r, lengths, log_keys)
    print(out)
    if opts.write:
        block = (f"Measured {machine_line()}, build {build_line()}, Redis {redis_version()}, by `benches/memory.sh` "
                 f"({opts.keys:,} keys per shape, {log_keys:,} for {TIMESTAMPS} timestamps per key; "
                 f"one run, VmRSS growth per key).\n\n" + out)
        write_section("memory", "Memory", PROSE, block)


if __name__ == "__main__":
    main()
