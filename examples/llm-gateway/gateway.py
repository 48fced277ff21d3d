"""An LLM-gateway middleware (pure ASGI, redis-py asyncio) that enforces a
monthly token budget per API key with Turnstile:

1. before the call, an estimate of the tokens it will use is taken from the
   budget: RL.ALLOW <key> <budget> 1mo ALGO fixed [TZ ±HH:MM] COST <estimate>;
   a denial is a 429 with Retry-After (the next month's first second, at
   the offset's midnight) and the RateLimit header fields;
2. after the call, the difference between the real count (the response's
   `usage.total_tokens`, as OpenAI-compatible APIs report it) and the
   estimate is settled: RL.CHARGE <key> <budget> 1mo <more> ALGO fixed when
   it used more (which may overdraw the budget: the key is then denied until
   the month ends), RL.REFUND <key> <less> when it used less. A failed call
   with no usage gives the whole estimate back.

It depends on nothing else in this repository: copy it. See README.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Callable, Optional

import redis.asyncio as aioredis

log = logging.getLogger("turnstile.llm")

Scope = dict
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


def create_client(url: str = "redis://127.0.0.1:6379", timeout: float = 0.25,
                  protocol: Optional[int] = None) -> aioredis.Redis:
    """A redis-py asyncio client for the request path: every command bounded
    by `timeout` seconds, never retried. protocol: 2, 3 or None (default)."""
    if protocol not in (None, 2, 3):
        raise ValueError(f"protocol must be 2 or 3, got {protocol!r}")
    kw = {} if protocol is None else {"protocol": protocol}
    return aioredis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                             retry_on_timeout=False, health_check_interval=0, **kw)


@dataclass
class Reply:
    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int


def read_reply(reply) -> Reply:
    """RL.ALLOW / RL.CHARGE / RL.PEEK answer five integers, RESP2 and RESP3
    alike; anything else is refused rather than read as allowed."""
    if (not isinstance(reply, (list, tuple)) or len(reply) != 5
            or not all(type(x) is int for x in reply) or reply[0] not in (0, 1)):
        raise ValueError(f"not a limiter reply: {reply!r}")
    return Reply(reply[0] == 1, *reply[1:])


def default_estimate(body: bytes) -> int:
    """A cheap upper-ish estimate of an OpenAI-style chat request: about four
    characters a token for the prompt, plus the completion's `max_tokens`
    (256 if absent)."""
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        req = {}
    if not isinstance(req, dict):
        req = {}
    prompt = json.dumps(req.get("messages", req.get("prompt", "")))
    max_tokens = req.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 0:
        max_tokens = 256
    return max(1, math.ceil(len(prompt) / 4) + max_tokens)


def default_usage(status: int, body: bytes) -> Optional[int]:
    """Tokens the call used, from an OpenAI-style `usage.total_tokens`;
    None when the response reports none."""
    try:
        used = json.loads(body).get("usage", {}).get("total_tokens")
    except (ValueError, AttributeError):
        return None
    return used if type(used) is int and used >= 0 else None


def api_key(scope: Scope) -> Optional[str]:
    """The caller: a hash of its bearer token (the token itself never becomes
    a key name a KEYS or MONITOR would show)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization" and value.startswith(b"Bearer "):
            return hashlib.sha256(value[7:]).hexdigest()[:32]
    return None


class TokenBudgetMiddleware:
    """Monthly token budget per API key, estimate before, settle after.

    budget: tokens per calendar month. tz: "+HH:MM"/"-HH:MM" for a month
    that turns at that offset's midnight (None: UTC). estimate(body) and
    usage(status, body) may be replaced for other APIs. A request with no
    API key is refused with 401; one whose estimate alone exceeds the whole
    budget with 413 (it could never fit). When Turnstile cannot be reached
    the call is refused with 503 (fail_closed=True, the default: a budget
    someone is billed by should not open up) or let through unmetered."""

    def __init__(self, app, *, redis: aioredis.Redis, budget: int, prefix: str = "llm:",
                 tz: Optional[str] = None, estimate: Callable[[bytes], int] = default_estimate,
                 usage: Callable[[int, bytes], Optional[int]] = default_usage,
                 key: Callable[[Scope], Optional[str]] = api_key, fail_closed: bool = True):
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")
        self.app, self.redis, self.budget, self.prefix = app, redis, budget, prefix
        self.period = ["1mo", "ALGO", "fixed"] + (["TZ", tz] if tz else [])
        self.estimate, self.usage, self.key, self.fail_closed = estimate, usage, key, fail_closed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        who = self.key(scope)
        if who is None:
            await _respond(send, 401, [], b"an API key is required\n")
            return
        key = self.prefix + who
        body = await _read_body(receive)
        estimate = self.estimate(body)
        if estimate > self.budget:
            await _respond(send, 413, [], b"this request alone exceeds the monthly token budget\n")
            return
        try:
            reply = read_reply(await self.redis.execute_command(
                "RL.ALLOW", key, self.budget, *self.period, "COST", estimate))
        except Exception as err:  # unreachable, timeout, error reply, unreadable reply
            log.warning("turnstile: budget check failed: %r", err)
            if self.fail_closed:
                await _respond(send, 503, [(b"retry-after", b"1")], b"token budget unavailable\n")
            else:
                await self.app(scope, _replay(body), send)
            return
        if not reply.allowed:
            retry = max(1, math.ceil(reply.retry_after_ms / 1000))
            problem = json.dumps({"type": QUOTA_EXCEEDED, "title": "Token budget exhausted",
                                  "violated-policies": ["monthly-tokens"]}).encode()
            await _respond(send, 429, [*self._headers(0, retry), (b"retry-after", str(retry).encode()),
                                       (b"content-type", b"application/problem+json")], problem)
            return

        # Buffer the upstream response to read its usage, then settle.
        start, chunks = None, []

        async def capture(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, _replay(body), capture)
        except Exception:
            await self._settle(key, estimate, 0)  # the call never happened
            raise
        status = start["status"] if start else 500
        out = b"".join(chunks)
        used = self.usage(status, out)
        left = await self._settle(key, estimate, 0 if used is None and status >= 400 else
                                  estimate if used is None else used)
        headers = [*start.get("headers", []), *self._headers(*left)] if start else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    async def _settle(self, key: str, estimate: int, used: int):
        """Charges or refunds the difference; returns (remaining, reset s)."""
        try:
            if used > estimate:
                r = read_reply(await self.redis.execute_command(
                    "RL.CHARGE", key, self.budget, *self.period[:1], used - estimate, *self.period[1:]))
                return max(0, r.remaining), math.ceil(r.reset_after_ms / 1000)
            if used < estimate:
                await self.redis.execute_command("RL.REFUND", key, estimate - used)
            r = read_reply(await self.redis.execute_command("RL.PEEK", key, self.budget, *self.period))
            # A peek reports what one more token would leave: add it back.
            return (r.remaining + 1 if r.allowed else 0), math.ceil(r.reset_after_ms / 1000)
        except Exception:
            # The response is already computed: serve it, and say so loudly.
            log.exception("turnstile: settling %d tokens (estimated %d) failed", used, estimate)
            return 0, 0

    def _headers(self, remaining: int, t: int):
        return [(b"ratelimit-policy", f'"monthly-tokens";q={self.budget}'.encode()),
                (b"ratelimit", f'"monthly-tokens";r={remaining};t={t}'.encode())]


async def _read_body(receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _replay(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _respond(send, status: int, headers: list, body: bytes):
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
