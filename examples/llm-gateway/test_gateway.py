"""Drives the LLM gateway in-process (httpx.ASGITransport) against a real
Turnstile on the real clock:

    python test_gateway.py PORT        (or TURNSTILE_PORT=PORT python test_gateway.py)

TURNSTILE_PROTOCOL=2|3 makes the client speak RESP2 or RESP3 (checked).
Every run uses its own key prefix and RL.RESETs its keys at the end.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import re
import sys
import time
import traceback
import uuid

import httpx

from app import create_app
from gateway import create_client, default_estimate, read_reply

PROTOCOL = int(os.environ["TURNSTILE_PROTOCOL"]) if os.environ.get("TURNSTILE_PROTOCOL") else None
RUN = f"test:{os.getpid()}:{uuid.uuid4().hex[:8]}:"
RL_RE = re.compile(r'"monthly-tokens";r=(\d+);t=(\d+)')


def client(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway.test")


def chat(prompt="hello", max_tokens=100, **extra):
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, **extra}


async def call(c, token, body):
    return await c.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {token}"})


def ratelimit(r):
    m = RL_RE.fullmatch(r.headers.get("ratelimit", ""))
    assert m, f"RateLimit header malformed: {r.headers.get('ratelimit')!r}"
    return int(m.group(1)), int(m.group(2))


def seconds_to_next_month(offset_minutes=0):
    """Seconds from now to the first of next month, 00:00 at the offset."""
    tz = dt.timezone(dt.timedelta(minutes=offset_minutes))
    now = dt.datetime.now(tz)
    first = (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=32)).replace(day=1)
    return (first - now).total_seconds()


def key_of(app, token):
    return app.prefix + hashlib.sha256(token.encode()).hexdigest()[:32]


async def used(redis, app, token):
    """Tokens the key has used this month, as Turnstile holds them."""
    key = key_of(app, token)
    r = read_reply(await redis.execute_command("RL.PEEK", key, app.budget, *app.period))
    return app.budget - (r.remaining + 1 if r.allowed else 0)


async def test_protocol(redis):
    info = await redis.execute_command("CLIENT", "INFO")
    info = info.decode() if isinstance(info, bytes) else str(info)
    resp = int(re.search(r"\bresp=(\d)", info).group(1))
    if PROTOCOL:
        assert resp == PROTOCOL, f"asked for RESP{PROTOCOL}, connection says: {info}"
    for bad in ({b"allowed": 1}, [1, 2, 3], [2, 1, 1, 1, 1]):
        try:
            read_reply(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")


async def test_refunds_what_the_estimate_overstated(redis):
    app = create_app(redis, budget=10_000, prefix=RUN)
    body = chat(max_tokens=500, x_used=120)
    assert default_estimate(httpx.Request("POST", "/", json=body).content) > 500
    async with client(app) as c:
        r = await call(c, "key-a", body)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["total_tokens"] == 120
        assert await used(redis, app, "key-a") == 120
        remaining, t = ratelimit(r)
        assert remaining == 10_000 - 120, remaining
        assert abs(t - seconds_to_next_month()) <= 3, (t, seconds_to_next_month())


async def test_charges_what_the_estimate_understated(redis):
    app = create_app(redis, budget=10_000, prefix=RUN)
    async with client(app) as c:
        for _ in range(3):
            r = await call(c, "key-b", chat(max_tokens=10, x_used=900))
            assert r.status_code == 200, r.text
        assert await used(redis, app, "key-b") == 2_700
        assert ratelimit(r)[0] == 10_000 - 2_700


async def test_an_overdraft_denies_until_next_month(redis):
    for tz, offset in ((None, 0), ("+05:30", 330), ("-08:00", -480)):
        app = create_app(redis, budget=1_000, prefix=RUN + f"{offset}:", tz=tz)
        async with client(app) as c:
            # The estimate fits; the call used far more: the budget is overdrawn.
            r = await call(c, "key-c", chat(max_tokens=100, x_used=5_000))
            assert r.status_code == 200, r.text
            assert ratelimit(r)[0] == 0
            assert await used(redis, app, "key-c") == 1_000  # all of it, and more
            r = await call(c, "key-c", chat(max_tokens=1))
            assert r.status_code == 429, r.status_code
            retry = int(r.headers["retry-after"])
            want = seconds_to_next_month(offset)
            assert abs(retry - want) <= 3, f"TZ {tz}: Retry-After {retry}, next month in {want:.0f} s"
            assert r.json()["violated-policies"] == ["monthly-tokens"]
            # Another key has its own budget.
            assert (await call(c, "key-d", chat(max_tokens=1, x_used=1))).status_code == 200


async def test_a_failed_call_gives_the_estimate_back(redis):
    app = create_app(redis, budget=10_000, prefix=RUN)
    async with client(app) as c:
        r = await call(c, "key-e", chat(max_tokens=800, x_fail=True))
        assert r.status_code == 500
        assert await used(redis, app, "key-e") == 0


async def test_what_can_never_fit_and_who_is_unknown(redis):
    app = create_app(redis, budget=50, prefix=RUN)
    async with client(app) as c:
        r = await call(c, "key-f", chat(max_tokens=5_000))
        assert r.status_code == 413, r.status_code
        assert await redis.exists(key_of(app, "key-f")) == 0
        r = await c.post("/v1/chat/completions", json=chat())
        assert r.status_code == 401


async def test_turnstile_down_fails_closed():
    dead = create_client("redis://127.0.0.1:1", timeout=0.2)
    app = create_app(dead, budget=100, prefix=RUN)
    async with client(app) as c:
        r = await call(c, "key-g", chat(max_tokens=1))
        assert r.status_code == 503, r.status_code
    await dead.aclose()


async def main(port):
    redis = create_client(f"redis://127.0.0.1:{port}", timeout=2, protocol=PROTOCOL)
    await redis.ping()
    failed = 0
    tests = (test_protocol, test_refunds_what_the_estimate_overstated, test_charges_what_the_estimate_understated,
             test_an_overdraft_denies_until_next_month, test_a_failed_call_gives_the_estimate_back,
             test_what_can_never_fit_and_who_is_unknown)
    try:
        for test in (*tests, test_turnstile_down_fails_closed):
            t0 = time.monotonic()
            try:
                await (test(redis) if test in tests else test())
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
    print(f"{len(tests) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    port = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TURNSTILE_PORT")
    if not port:
        sys.exit("usage: python test_gateway.py PORT (a running Turnstile)")
    sys.exit(asyncio.run(main(int(port))))
