"""Drives the example ASGI app in-process (httpx.ASGITransport) while the
middleware talks to a real Turnstile:

    python test_app.py PORT        (or TURNSTILE_PORT=PORT python test_app.py)

TURNSTILE_PROTOCOL=2|3 makes every client connect with RESP2 or RESP3 (unset:
redis-py's default), and the connection is checked to really speak it.
Runs every test, then exits non-zero if any failed. Every run uses its own key prefix, so
reruns against the same server start from empty limits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import socket
import sys
import time
import traceback
import uuid

import httpx

import redis as redis_py
from starlette.responses import JSONResponse

import middleware
from app import create_app
from middleware import (ConcurrencyLimitMiddleware, Limit, RateLimitManyMiddleware, RateLimitMiddleware, UnreadableReply,
                        create_client, read_acquire, read_reply)

PERIOD = 60
PROTOCOL = int(os.environ["TURNSTILE_PROTOCOL"]) if os.environ.get("TURNSTILE_PROTOCOL") else None
RUN = f"test:{os.getpid()}:{uuid.uuid4().hex[:8]}:"
RL_RE = re.compile(r'"([^"]+)";r=(\d+);t=(\d+)')


def parse_ratelimit(value):
    m = RL_RE.fullmatch(value or "")
    assert m, f"RateLimit header malformed: {value!r}"
    return m.group(1), int(m.group(2)), int(m.group(3))


def client(app, ip="127.0.0.1"):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(ip, 40000)),
                             base_url="http://example.test")


async def until_denied(c, path, headers=None, max_requests=50):
    out = []
    for _ in range(max_requests):
        r = await c.get(path, headers=headers or {})
        out.append(r)
        if r.status_code == 429:
            return out
    raise AssertionError(f"no 429 after {max_requests} requests to {path}")


def check_denied(r, policy_name):
    assert r.status_code == 429, r.status_code
    ra = r.headers.get("retry-after")
    assert ra is not None and re.fullmatch(r"[1-9][0-9]*", ra), f"Retry-After must be a positive integer, got {ra!r}"
    assert int(ra) <= 2 * PERIOD, f"Retry-After {ra} beyond two periods"
    name, rem, t = parse_ratelimit(r.headers.get("ratelimit"))
    assert (name, rem) == (policy_name, 0), (name, rem)
    assert t == int(ra), f"on a 429, t ({t}) equals Retry-After ({ra})"
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = json.loads(r.content)
    assert problem["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert problem["violated-policies"] == [policy_name]
    return int(ra)


async def test_protocol_and_reply_shape(redis):
    info = await redis.execute_command("CLIENT", "INFO")
    info = info.decode() if isinstance(info, bytes) else str(info)
    resp = int(re.search(r"\bresp=(\d)", info).group(1))
    print(f"#    redis-py {redis_py.__version__}, connection resp={resp}")
    if PROTOCOL:
        assert resp == PROTOCOL, f"asked for RESP{PROTOCOL}, connection says: {info}"
    key = RUN + "shape"
    peek = read_reply("RL.PEEK", await redis.execute_command("RL.PEEK", key, 5, PERIOD))
    assert (peek.allowed, peek.limit, peek.remaining) == (True, 5, 4), peek
    allow = read_reply("RL.ALLOW", await redis.execute_command("RL.ALLOW", key, 5, PERIOD))
    assert (allow.allowed, allow.remaining) == (True, 4), allow
    many = read_reply("RL.ALLOWMANY", await redis.execute_command(
        "RL.ALLOWMANY", "LIMIT", key, 5, PERIOD, "LIMIT", RUN + "shape2", 2, PERIOD))
    assert many.allowed and many.index == 1, many  # the limit with the least remaining binds


async def test_allow(redis):
    app = create_app(redis=redis, prefix=RUN, limit=5, period=PERIOD)
    async with client(app, "203.0.113.1") as c:
        got = await until_denied(c, "/api/hello")
        assert [r.status_code for r in got] == [200] * 5 + [429], [r.status_code for r in got]
        for i, r in enumerate(got):
            assert r.headers.get("ratelimit-policy") == f'"default";q=5;w={PERIOD}', r.headers.get("ratelimit-policy")
            name, rem, t = parse_ratelimit(r.headers.get("ratelimit"))
            assert name == "default"
            assert rem == max(0, 4 - i), f"remaining after request {i + 1}: {rem}"
            assert 1 <= t <= 2 * PERIOD, t
            if r.status_code == 200:
                assert "retry-after" not in r.headers
        check_denied(got[5], "default")
        assert (await c.get("/api/hello")).status_code == 429  # denials charge nothing; still 0 left
    async with client(app, "203.0.113.2") as other:  # another client is unaffected
        r = await other.get("/api/hello")
        assert r.status_code == 200 and parse_ratelimit(r.headers["ratelimit"])[1] == 4


async def test_api_key(redis):
    app = create_app(redis=redis, prefix=RUN, limit=2, period=PERIOD)
    async with client(app, "203.0.113.10") as c:
        got = await until_denied(c, "/api/hello", {"x-api-key": "secret-a"})
        assert [r.status_code for r in got] == [200, 200, 429]
        assert (await c.get("/api/hello", headers={"x-api-key": "secret-b"})).status_code == 200
    keys = [k.decode() for k in await redis.keys(RUN + "*")]
    assert keys and not any("secret" in k for k in keys), keys


async def test_gcra_cost(redis):
    app = create_app(redis=redis, prefix=RUN, limit=10, period=PERIOD)
    async with client(app, "203.0.113.20") as c:
        got = await until_denied(c, "/api/report")
        assert [r.status_code for r in got] == [200, 200, 429]
        assert [parse_ratelimit(r.headers["ratelimit"])[1] for r in got] == [5, 0, 0]
        for r in got:
            assert r.headers["ratelimit-policy"] == f'"reports";q=10;w={PERIOD}'
        ra = check_denied(got[2], "reports")
        assert 29 <= ra <= 30, ra  # GCRA at 10 per 60 s: 5 units come back after 30 s


async def test_allowmany(redis):
    app = create_app(redis=redis, prefix=RUN, user_limit=3, ip_limit=5, period=PERIOD)
    policy = f'"user";q=3;w={PERIOD}, "ip";q=5;w={PERIOD}'
    async with client(app, "203.0.113.30") as c:
        # User A: 3 allowed (the user limit binds), the 4th denied by "user".
        a = await until_denied(c, "/api/many", {"x-user-id": "a"})
        assert [r.status_code for r in a] == [200, 200, 200, 429]
        assert all(r.headers["ratelimit-policy"] == policy for r in a)
        assert [parse_ratelimit(r.headers["ratelimit"])[1] for r in a] == [2, 1, 0, 0]
        check_denied(a[3], "user")
        # User B on the same IP: the IP has 2 left (denials charged nothing),
        # so B gets 2 and is then denied by "ip" though B's own limit has 1 left.
        b = await until_denied(c, "/api/many", {"x-user-id": "b"})
        assert [r.status_code for r in b] == [200, 200, 429]
        assert [parse_ratelimit(r.headers["ratelimit"])[:2] for r in b] == [("ip", 1), ("ip", 0), ("ip", 0)]
        check_denied(b[2], "ip")
        # The all-or-nothing denial did not charge user B: 2 of 3 used.
        peek = await redis.execute_command("RL.PEEK", f"{RUN}many:user:b", 3, PERIOD)
        assert int(peek[0]) == 1 and int(peek[2]) == 0, peek
        # An anonymous request has only the (exhausted) IP limit.
        anon = await c.get("/api/many")
        assert anon.status_code == 429 and anon.headers["ratelimit-policy"] == f'"ip";q=5;w={PERIOD}'
    async with client(app, "203.0.113.31") as elsewhere:  # user A from another IP: still "user"
        r = await elsewhere.get("/api/many", headers={"x-user-id": "a"})
        assert r.status_code == 429 and parse_ratelimit(r.headers["ratelimit"])[0] == "user"


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_unreachable(_redis):
    dead = create_client(f"redis://127.0.0.1:{closed_port()}", protocol=PROTOCOL)
    errors = []
    try:
        app = create_app(redis=dead, prefix=RUN, limit=1, period=PERIOD,
                         on_error=lambda err, scope: errors.append(err))
        async with client(app) as c:
            for _ in range(3):
                t0 = time.monotonic()
                r = await c.get("/api/hello")
                assert r.status_code == 200, r.status_code
                assert time.monotonic() - t0 < 1.0, "fail-open must not wait"
                assert "ratelimit" not in r.headers and "ratelimit-policy" not in r.headers
        assert len(errors) == 3, errors
        app = create_app(redis=dead, prefix=RUN, limit=1, period=PERIOD, fail_closed=True,
                         on_error=lambda err, scope: None)
        async with client(app) as c:
            r = await c.get("/api/many", headers={"x-user-id": "z"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1", (r.status_code, r.headers)
    finally:
        await dead.aclose()


class FakeRedis:
    """Stands in for a redis.asyncio client: answers each command from `replies`."""

    def __init__(self, replies):
        self.replies = replies

    async def execute_command(self, command, *args):
        return self.replies[command]


class CaptureLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.getMessage()}")


async def ok(scope, receive, send):  # a bare ASGI app behind the middleware
    await JSONResponse({"ok": True})(scope, receive, send)


# What a RESP3 map looks like to redis-py: a dict (keys as bytes, or str with
# decode_responses). The rest: replies of the wrong shape.
MAP = {b"allowed": 1, b"limit": 5, b"remaining": 4, b"retry_after_ms": 0, b"reset_after_ms": 60000}
UNREADABLE = [
    ("a map (dict)", MAP, {**MAP, b"index": 0}),
    ("a map (dict, str keys)", {k.decode(): v for k, v in MAP.items()}, {"allowed": 1, "index": 0}),
    ("a flat key/value list", [x for kv in MAP.items() for x in kv], [x for kv in MAP.items() for x in kv] + [b"index", 0]),
    ("too short", [1, 5, 4, 0], [1, 5, 4, 0, 60000]),
    ("too long", [1, 5, 4, 0, 60000, 0], [1, 5, 4, 0, 60000, 0, 0]),
    ("bytes", [b"1", b"5", b"4", b"0", b"60000"], [b"1", b"5", b"4", b"0", b"60000", b"0"]),
    ("booleans", [True, 5, 4, 0, 60000], [True, 5, 4, 0, 60000, 0]),
    ("allowed not 0/1", [2, 5, 4, 0, 60000], [2, 5, 4, 0, 60000, 0]),
    ("index out of range", None, [1, 5, 4, 0, 60000, 2]),
]


async def test_unreadable_reply(_redis):
    """A reply of the wrong shape never escapes as a 500 nor is guessed at: it
    is counted and logged, then fail-open serves (200, no headers) and
    fail-closed answers 503 with Retry-After."""
    logger = logging.getLogger("turnstile")
    capture = CaptureLog()
    logger.addHandler(capture)
    try:
        for what, allow_reply, many_reply in UNREADABLE:
            for fail_closed in (False, True):
                capture.lines.clear()
                on_error_calls = []
                fake = FakeRedis({"RL.ALLOW": allow_reply, "RL.ALLOWMANY": many_reply})
                one = RateLimitMiddleware(ok, redis=fake, limit=5, period=PERIOD, fail_closed=fail_closed)
                many = RateLimitManyMiddleware(ok, redis=fake, fail_closed=fail_closed, limits=[
                    Limit(name="user", key=lambda s: "user:u", limit=5, period=PERIOD),
                    Limit(name="ip", key=lambda s: "ip:i", limit=5, period=PERIOD),
                ], on_error=lambda err, scope: on_error_calls.append(err))
                apps = [("/many", many)] if allow_reply is None else [("/one", one), ("/many", many)]
                before = middleware.stats["unreadable_replies"]
                for path, mw in apps:
                    label = f"{what}, {path}, {'fail-closed' if fail_closed else 'fail-open'}"
                    async with client(mw) as c:
                        r = await c.get(path)
                    if fail_closed:
                        assert r.status_code == 503 and r.headers["retry-after"] == "1", (label, r.status_code)
                    else:
                        assert r.status_code == 200 and r.json() == {"ok": True}, (label, r.status_code, r.text)
                    assert "ratelimit" not in r.headers and "ratelimit-policy" not in r.headers, label
                    assert mw.unreadable_replies == 1, (label, mw.unreadable_replies)
                n = len(apps)
                assert middleware.stats["unreadable_replies"] - before == n, what
                assert len(capture.lines) == n, capture.lines
                for line in capture.lines:
                    assert re.match(r"ERROR turnstile: unreadable RL\.ALLOW(MANY)? reply: expected ", line), line
                    assert line.endswith("failing closed (503)" if fail_closed
                                         else "failing open (request served without a limit)"), line
                # A custom on_error is still called, and does not silence the log line.
                assert len(on_error_calls) == 1 and isinstance(on_error_calls[0], UnreadableReply), on_error_calls
        # The example app (Starlette, per-route middleware) behaves the same.
        fake = FakeRedis({"RL.ALLOW": MAP, "RL.ALLOWMANY": {**MAP, b"index": 0}})
        for fail_closed, status in ((False, 200), (True, 503)):
            capture.lines.clear()
            app = create_app(redis=fake, prefix=RUN, fail_closed=fail_closed, on_error=lambda err, scope: None)
            async with client(app) as c:
                for path in ("/api/hello", "/api/report", "/api/many"):
                    r = await c.get(path, headers={"x-user-id": "u"})
                    assert r.status_code == status, (path, fail_closed, r.status_code, r.text)
            assert len(capture.lines) == 3, capture.lines
    finally:
        logger.removeHandler(capture)


# ---------------------------------------------------------------- concurrency

async def leases_held(redis, key):
    """Live leases on `key`, from Turnstile's own bookkeeping (RL.LEASES)."""
    return len(await redis.execute_command("RL.LEASES", key))


async def eventually(what, cond, seconds=5.0):
    """Waits (bounded) until `cond()` holds: releases land after the
    response, so tests wait for them, never for a fixed time."""
    deadline = time.monotonic() + seconds
    while not await cond():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.01)


class Gate:
    """An export job the test controls, counting what runs at once."""

    def __init__(self):
        self.running = 0
        self.max_running = 0
        self.open = asyncio.Event()

    async def __call__(self, request):
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.open.wait()
        finally:
            self.running -= 1


async def test_concurrency_cap(redis):
    """20 at once with a cap of 3: 3 run, 17 get 429; every lease released after."""
    gate = Gate()
    ip = "203.0.113.60"
    key = f"{RUN}export:ip:{ip}"
    async with client(create_app(redis=redis, prefix=RUN, concurrency=3, export_job=gate), ip=ip) as c:
        answered = 0

        async def one():
            nonlocal answered
            r = await c.get("/api/export")
            answered += 1
            return r

        pending = [asyncio.ensure_future(one()) for _ in range(20)]
        # The gate opens only once all 17 denials are in: a request still on
        # its way would find a lease freed.
        await eventually("17 requests answered", lambda: _true(answered == 17))
        assert gate.running == 3, gate.running
        assert await leases_held(redis, key) == 3
        gate.open.set()
        got = await asyncio.gather(*pending)
    assert sorted(r.status_code for r in got) == [200] * 3 + [429] * 17, [r.status_code for r in got]
    for r in got:
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1"
            assert json.loads(r.content)["violated-policies"] == ["exports"]
    assert gate.max_running == 3
    await eventually("every lease released", lambda: _eq(leases_held(redis, key), 0))


async def _true(v):
    return v


async def _eq(coro, want):
    return await coro == want


async def test_concurrency_under_load(redis):
    """8 rounds of 25 concurrent requests, jobs of random length: never more
    than the cap at once, by the app's count and by Turnstile's."""
    cap = 4
    state = {"running": 0, "max": 0, "served": 0}

    async def job(request):
        state["running"] += 1
        state["served"] += 1
        state["max"] = max(state["max"], state["running"])
        await asyncio.sleep(random.uniform(0.001, 0.015))
        state["running"] -= 1

    ip = "203.0.113.61"
    key = f"{RUN}export:ip:{ip}"
    ok = denied = 0
    async with client(create_app(redis=redis, prefix=RUN, concurrency=cap, export_job=job), ip=ip) as c:
        for _ in range(8):
            got = await asyncio.gather(*(c.get("/api/export") for _ in range(25)))
            for r in got:
                assert r.status_code in (200, 429), r.status_code
                ok += r.status_code == 200
                denied += r.status_code == 429
            assert await leases_held(redis, key) <= cap
    assert state["max"] <= cap, state
    assert ok == state["served"] and ok >= 8 * cap, (ok, state)
    print(f"#    200 requests: {ok} served, {denied} denied, at most {state['max']} at once")
    await eventually("every lease released", lambda: _eq(leases_held(redis, key), 0))


async def test_concurrency_after_errors(redis):
    """A job that raises gives its lease back every time (with a leak, the
    third call would be a 429)."""
    calls = 0

    async def job(request):
        nonlocal calls
        calls += 1
        raise RuntimeError("export failed")

    ip = "203.0.113.62"
    key = f"{RUN}export:ip:{ip}"
    app = create_app(redis=redis, prefix=RUN, concurrency=2, export_job=job)
    transport = httpx.ASGITransport(app=app, client=(ip, 40000), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://example.test") as c:
        for i in range(6):
            r = await c.get("/api/export")
            assert r.status_code == 500, (i, r.status_code)
            await eventually("the lease released after the error", lambda: _eq(leases_held(redis, key), 0))
    assert calls == 6


async def test_concurrency_client_gone(redis):
    """A client that goes away (http.disconnect, as uvicorn sends it) frees
    its slot while the app still runs; a cancelled request frees its too."""
    gate = Gate()
    ip = "203.0.113.63"
    key = f"{RUN}export:ip:{ip}"
    mw = ConcurrencyLimitMiddleware(lambda s, r, se: gate(None), redis=redis, prefix=RUN, limit=1, ttl="30s",
                                    key=lambda scope: f"export:ip:{ip}")
    gone = asyncio.Event()
    sent = []

    async def receive():
        if not sent:
            sent.append(1)
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "client": (ip, 1)}
    first = asyncio.ensure_future(mw(scope, receive, send))
    await eventually("the first request runs", lambda: _true(gate.running == 1))
    assert await leases_held(redis, key) == 1
    gone.set()
    await eventually("the departed client's lease released", lambda: _eq(leases_held(redis, key), 0))
    assert gate.running == 1, "the app itself goes on"
    # A request cancelled mid-flight (a server shutting down) releases too.
    sent.clear()
    gone.clear()
    second = asyncio.ensure_future(mw(scope, receive, send))
    await eventually("the second request runs", lambda: _true(gate.running == 2))
    assert await leases_held(redis, key) == 1
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert await leases_held(redis, key) == 0
    gate.open.set()
    await first


async def test_read_acquire(_redis):
    assert read_acquire([1, 3, 2, 30000, 30000, b"abc"]).lease == "abc"
    assert read_acquire([0, 3, 0, 1200, 30000, None]).allowed is False
    for bad in ([1, 3, 2, 30000, 30000, None], [0, 3, 0, 1, 1, b"x"], [1, 3, 2, 1, 1], {b"allowed": 1}):
        try:
            read_acquire(bad)
        except UnreadableReply:
            continue
        raise AssertionError(f"accepted {bad!r}")


async def main(port):
    redis = create_client(f"redis://127.0.0.1:{port}", timeout=2, protocol=PROTOCOL)
    await redis.ping()
    failed = 0
    tests = (test_protocol_and_reply_shape, test_allow, test_api_key, test_gcra_cost, test_allowmany,
             test_unreachable, test_unreadable_reply, test_concurrency_cap, test_concurrency_under_load,
             test_concurrency_after_errors, test_concurrency_client_gone, test_read_acquire)
    try:
        for test in tests:
            t0 = time.monotonic()
            try:
                await test(redis)
                print(f"ok   {test.__name__} ({(time.monotonic() - t0) * 1000:.0f} ms)")
            except Exception:
                failed += 1
                print(f"FAIL {test.__name__}")
                traceback.print_exc()
    finally:
        keys = await redis.keys(RUN + "*")
        if keys:
            await redis.execute_command("RL.RESET", *keys)
        await redis.aclose()
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    port = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TURNSTILE_PORT")
    if not port:
        sys.exit("usage: python test_app.py PORT (a running Turnstile)")
    sys.exit(asyncio.run(main(int(port))))
