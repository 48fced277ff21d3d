#!/usr/bin/env python3
"""The Python limiter libraries that keep their limiter in Lua, run
unchanged against two servers (Turnstile and redis-server) with the same
scenario; each prints a JSON summary per server, and the run fails if a
library's documented outcome is not met or the two summaries differ.

    python_libs.py --a PORT --b PORT [--host H] [--protocol 2|3]

- limits (fixed window, moving window, sliding window counter): hit, test,
  window stats, clear, through its Redis storage (SCRIPT LOAD, EVALSHA).
- Flask-Limiter over limits: a real Flask app, 5 per minute: 5 x 200 then 429.
- pyrate-limiter RedisBucket (SCRIPT LOAD, EVALSHA with ZADD/ZCOUNT/ZRANGE
  inside; ZCARD and ZREMRANGEBYSCORE sent directly): try_acquire, count, leak.
- django-redis cache.incr (EVAL of EXISTS + INCRBY): 1,000 concurrent
  increments end at exactly 1,000; django-ratelimit's is_ratelimited on it.
- redis-py register_script (EVALSHA, EVAL on NOSCRIPT) with the two classic
  limiter scripts: a two-bucket sliding-window counter on keys it builds
  from KEYS[1] (undeclared keys), and a sorted-set log; timestamps come in
  ARGV, so every reply is a function of the calls.

Time: every limit is per minute or longer, so no window rolls over during
a run (about a second); reset times are not compared. Keys live under a
prefix each scenario deletes first. Bounded: socket timeouts of 10 s.
"""

import argparse
import json
import sys
import threading

import redis

PREFIX = "compat:libs:"
TIMEOUT = 10


def client(host, port, protocol):
    return redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=TIMEOUT,
                       socket_connect_timeout=TIMEOUT, decode_responses=False)


def clean(r):
    for k in r.scan_iter(match=PREFIX + "*", count=1000):
        r.delete(k)


def limits_scenario(host, port, protocol):
    from limits import parse
    from limits.storage import RedisStorage
    from limits.strategies import (FixedWindowRateLimiter, MovingWindowRateLimiter,
                                   SlidingWindowCounterRateLimiter)
    storage = RedisStorage(f"redis://{host}:{port}", key_prefix=PREFIX + "limits", protocol=protocol)
    out = {}
    for name, cls in [("fixed", FixedWindowRateLimiter), ("moving", MovingWindowRateLimiter),
                      ("sliding", SlidingWindowCounterRateLimiter)]:
        lim = cls(storage)
        item = parse("5/hour")
        lim.clear(item, "user", name)
        hits = [lim.hit(item, "user", name) for _ in range(7)]
        weighted = lim.hit(parse("10/day"), "heavy", name, cost=4)
        stats = lim.get_window_stats(item, "user", name)
        tested = lim.test(item, "user", name)
        lim.clear(item, "user", name)
        after_clear = lim.hit(item, "user", name)
        assert hits == [True] * 5 + [False] * 2, (name, hits)
        assert stats.remaining == 0 and not tested and after_clear, (name, stats, tested, after_clear)
        out[name] = {"hits": hits, "weighted": weighted, "remaining": stats.remaining,
                     "test": tested, "after_clear": after_clear}
    return out


def flask_scenario(host, port, protocol):
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"redis://{host}:{port}",
                      storage_options={"protocol": protocol}, key_prefix=PREFIX + "flask",
                      headers_enabled=True)

    @app.route("/")
    @limiter.limit("5 per minute")
    def index():
        return "ok"

    limiter.reset()
    with app.test_client() as c:
        responses = [c.get("/") for _ in range(7)]
    codes = [r.status_code for r in responses]
    remaining = [r.headers.get("X-RateLimit-Remaining") for r in responses]
    assert codes == [200] * 5 + [429] * 2, codes
    return {"codes": codes, "remaining": remaining}


def pyrate_scenario(host, port, protocol):
    from pyrate_limiter import Duration, Limiter, Rate, RedisBucket
    r = client(host, port, protocol)
    key = PREFIX + "pyrate"
    r.delete(key)
    bucket = RedisBucket.init([Rate(5, Duration.MINUTE)], r, key)
    limiter = Limiter(bucket)
    acquired = [limiter.try_acquire("item", blocking=False) for _ in range(7)]
    count = bucket.count()
    zcard = r.zcard(key)
    leaked = bucket.leak(bucket.now() + 120_000)
    after = r.zcard(key)
    assert acquired == [True] * 5 + [False] * 2, acquired
    return {"acquired": acquired, "count": count, "zcard": zcard, "leaked": leaked, "after_leak": after}


def django_run(host, port, protocol):
    import django
    from django.conf import settings
    location = f"redis://{host}:{port}/0"
    if not settings.configured:
        settings.configure(CACHES={}, RATELIMIT_USE_CACHE="rl", ALLOWED_HOSTS=["*"], USE_TZ=True)
        django.setup()
    from django_redis.cache import RedisCache
    cache = RedisCache(location, {"OPTIONS": {"CONNECTION_POOL_KWARGS": {"protocol": protocol,
                                                                         "socket_timeout": TIMEOUT}}})
    key = PREFIX + "django:ctr"
    cache.delete(key)
    cache.set(key, 0, timeout=None)
    errors = []

    def work():
        try:
            for _ in range(50):
                cache.incr(key)
        except Exception as e:  # a failure must show, not vanish in a thread
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = cache.get(key)
    assert not errors, errors
    assert final == 1000, f"1,000 concurrent incr ended at {final}"
    # django-ratelimit's core check over the same backend (its cache is
    # looked up by name; the server under test is given that name).
    import django_ratelimit.core as core
    from django.test import RequestFactory
    cache.clear()
    req = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1")
    original = core.caches
    core.caches = {"rl": cache}
    try:
        limited = [core.is_ratelimited(req, group=PREFIX + "grp", key="ip", rate="5/m", increment=True)
                   for _ in range(7)]
    finally:
        core.caches = original
    assert limited == [False] * 5 + [True] * 2, limited
    return {"final": final, "limited": limited}


TWO_BUCKET = """
local t = tonumber(ARGV[3])
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cur = math.floor(t / period)
local elapsed = t - cur * period
local ckey = KEYS[1] .. ':' .. cur
local pkey = KEYS[1] .. ':' .. (cur - 1)
local prev = tonumber(redis.call('GET', pkey) or '0')
local curr = tonumber(redis.call('GET', ckey) or '0')
local estimate = prev * (period - elapsed) / period + curr
if estimate + 1 <= limit then
  redis.call('INCR', ckey)
  redis.call('EXPIRE', ckey, period * 2)
  return {1, math.floor(limit - estimate - 1)}
end
return {0, 0}
"""

ZSET_LOG = """
local now = tonumber(ARGV[3])
local window_start = now - tonumber(ARGV[2]) * 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', window_start)
local count = redis.call('ZCARD', KEYS[1])
local allowed = 0
if count < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, now)
  allowed = 1
end
redis.call('EXPIRE', KEYS[1], ARGV[2] + 5)
return {allowed, count}
"""


def scripts_scenario(host, port, protocol):
    r = client(host, port, protocol)
    r.script_flush()
    two = r.register_script(TWO_BUCKET)
    log = r.register_script(ZSET_LOG)
    base_s = 1_700_000_000
    out = {"two_bucket": [], "zset_log": []}
    for i in range(8):
        # 8 requests over 3 windows of 60 s: the estimate carries over.
        t = base_s + i * 20
        out["two_bucket"].append(two(keys=[PREFIX + "tb"], args=[5, 60, t]))
        out["zset_log"].append(log(keys=[PREFIX + "zl"], args=[5, 60, t * 1_000_000]))
    out["exists"] = r.script_exists(two.sha, log.sha, "0" * 40)
    r.script_flush()
    out["after_flush"] = r.script_exists(two.sha)
    # register_script loads it again on NOSCRIPT.
    out["again"] = two(keys=[PREFIX + "tb2"], args=[5, 60, base_s])
    out["type"] = r.type(PREFIX + "zl").decode()
    out = json.loads(json.dumps(out, default=lambda b: b.decode() if isinstance(b, bytes) else str(b)))
    # 5 per 60 s, one request every 20 s: the first window fills down to
    # one left, after which the previous window's weight keeps one free.
    assert out["two_bucket"][:4] == [[1, 4], [1, 3], [1, 2], [1, 1]], out["two_bucket"]
    assert [a for a, _ in out["zset_log"]] == [1] * 8, out["zset_log"]
    return out


SCENARIOS = [("limits", limits_scenario), ("flask-limiter", flask_scenario),
             ("pyrate-limiter", pyrate_scenario), ("django-redis", django_run),
             ("register_script", scripts_scenario)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", type=int, required=True)
    ap.add_argument("--b", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--protocol", type=int, default=3, choices=[2, 3])
    ap.add_argument("-k", default="")
    opts = ap.parse_args()
    failed = False
    for name, fn in SCENARIOS:
        if opts.k and opts.k not in name:
            continue
        results = {}
        for label, port in (("a", opts.a), ("b", opts.b)):
            clean(client(opts.host, port, opts.protocol))
            try:
                results[label] = fn(opts.host, port, opts.protocol)
            except Exception as e:  # reported per server, then the run fails
                results[label] = {"FAILED": f"{type(e).__name__}: {e}"}
        same = json.dumps(results["a"], sort_keys=True, default=str) == json.dumps(results["b"], sort_keys=True, default=str)
        ok = same and "FAILED" not in results["a"] and "FAILED" not in results["b"]
        print(f"--- {name} (RESP{opts.protocol}): {'passed' if ok else 'FAILED'}")
        print("    a:", json.dumps(results["a"], sort_keys=True, default=str))
        if not ok:
            print("    b:", json.dumps(results["b"], sort_keys=True, default=str))
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
