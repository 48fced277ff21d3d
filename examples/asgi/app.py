"""A small Starlette app wired to Turnstile.

    TURNSTILE_URL=redis://127.0.0.1:6379 uvicorn app:app --port 8000

(see ../README.md for the other environment variables); test_app.py builds it
with create_app() against a running Turnstile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route

from middleware import (ConcurrencyLimitMiddleware, Limit, RateLimitManyMiddleware, RateLimitMiddleware, client_ip,
                        create_client, header)


async def hello(request):
    return JSONResponse({"hello": "world"})


async def report(request):
    return JSONResponse({"report": "ok"})


async def many(request):
    return JSONResponse({"user": request.headers.get("x-user-id")})


async def default_export(request):
    """What /api/export does: a slow job (here, a wait). Tests pass their own."""
    await asyncio.sleep(0.2)


def export_endpoint(job):
    async def export(request):
        await job(request)
        return JSONResponse({"export": "done"})
    return export


def user_key(scope):
    # The user would normally come from authentication; here it is a header.
    uid = header(scope, b"x-user-id")
    return f"user:{uid}" if uid else None


def ip_key(scope):
    ip = client_ip(scope)
    return f"ip:{ip}" if ip else None


def create_app(*, redis, prefix="rl:", limit=10, period=60, ip_limit=20, user_limit=100,
               concurrency=2, lease_ttl="30s", export_job=default_export,
               fail_closed=False, on_error=None, lifespan=None) -> Starlette:
    # Each route gets its own key space (prefix): two policies on the same
    # Turnstile key would share, and fight over, one counter.
    common = dict(redis=redis, fail_closed=fail_closed, on_error=on_error)
    return Starlette(
        routes=[
            # One limit per client: the (hashed) X-Api-Key, else the IP.
            Route("/api/hello", hello, middleware=[
                Middleware(RateLimitMiddleware, prefix=f"{prefix}hello:", limit=limit, period=period, **common)]),
            # A costlier endpoint: 5 units per call, GCRA.
            Route("/api/report", report, middleware=[
                Middleware(RateLimitMiddleware, prefix=f"{prefix}report:", name="reports", limit=limit,
                           period=period, algo="gcra", cost=5, key=ip_key, **common)]),
            # Per-user AND per-IP at once with RL.ALLOWMANY.
            Route("/api/many", many, middleware=[
                Middleware(RateLimitManyMiddleware, limits=[
                    Limit(name="user", key=user_key, limit=user_limit, period=period),
                    Limit(name="ip", key=ip_key, limit=ip_limit, period=period),
                ], prefix=f"{prefix}many:", **common)]),
            # A slow endpoint capped by requests in flight, not per period:
            # at most `concurrency` exports at once per client (RL.ACQUIRE,
            # released when the request ends, however it ends).
            Route("/api/export", export_endpoint(export_job), middleware=[
                Middleware(ConcurrencyLimitMiddleware, prefix=f"{prefix}export:", name="exports",
                           limit=concurrency, ttl=lease_ttl, key=ip_key, **common)]),
        ],
        lifespan=lifespan,
    )


def _from_env() -> Starlette:
    # redis-py connects on first use, so the app starts (and fails open) even
    # while Turnstile is down, and reconnects by itself when it comes back.
    protocol = os.environ.get("TURNSTILE_PROTOCOL")  # 2 or 3; unset: redis-py's default
    redis = create_client(os.environ.get("TURNSTILE_URL", "redis://127.0.0.1:6379"),
                          timeout=float(os.environ.get("TURNSTILE_TIMEOUT_MS", "250")) / 1000,
                          protocol=int(protocol) if protocol else None)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await redis.aclose()

    return create_app(redis=redis, limit=int(os.environ.get("LIMIT", "10")),
                      period=os.environ.get("PERIOD", "60"),
                      fail_closed=os.environ.get("FAIL_CLOSED") == "1", lifespan=lifespan)


app = _from_env()
