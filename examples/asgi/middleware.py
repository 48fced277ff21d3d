"""Pure-ASGI rate-limit middleware backed by Turnstile (RL.ALLOW / RL.ALLOWMANY
over redis-py's asyncio client, RESP2 or RESP3). Works with any ASGI app: Starlette, FastAPI,
or a bare ASGI callable.

On every limited HTTP request it asks Turnstile for a decision and maps it onto
HTTP: 429 + Retry-After when denied, and the IETF RateLimit-Policy / RateLimit
header fields (draft-ietf-httpapi-ratelimit-headers-10, structured-field form)
on allowed and denied responses alike. ConcurrencyLimitMiddleware caps
requests in flight instead (RL.ACQUIRE / RL.RELEASE). See ../README.md.
"""

from __future__ import annotations

import base64
import hashlib
import asyncio
import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, Sequence, Union

import redis.asyncio as aioredis

log = logging.getLogger("turnstile")

Scope = dict
KeyFunc = Callable[[Scope], Optional[str]]
CostFunc = Callable[[Scope], int]

ALGOS = {"window", "log", "gcra", "fixed"}
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


def create_client(url: str = "redis://127.0.0.1:6379", timeout: float = 0.25,
                  protocol: Optional[int] = None) -> aioredis.Redis:
    """A redis-py asyncio client suited to a limiter in the request path:
    connecting and every command are bounded by `timeout` seconds, and a
    failed command is not retried (the middleware decides what to do).

    protocol: 2 or 3 (RESP2 / RESP3), or None for redis-py's default. The
    limiter replies are the same array in both, so the middleware works
    either way."""
    if protocol not in (None, 2, 3):
        raise ValueError(f"protocol must be 2 or 3, got {protocol!r}")
    kw = {} if protocol is None else {"protocol": protocol}
    return aioredis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry_on_timeout=False,
        health_check_interval=0,
        **kw,
    )


class UnreadableReply(Exception):
    """A limiter reply this middleware cannot read: a map (a dict), another
    length, non-integers, `allowed` not 0 or 1. It is never guessed at: it is
    counted, logged, and then handled like any other Turnstile failure (fail
    open or fail closed)."""

    def __init__(self, command: str, expected: str, reply):
        text = repr(reply)
        if len(text) > 200:
            text = text[:200] + "..."
        kind = type(reply).__name__
        if isinstance(reply, dict):
            kind += " (a RESP3 map?)"
        super().__init__(f"unreadable {command} reply: expected {expected}, got {kind}: {text}")
        self.command = command
        self.reply = reply


# Process-wide counters, readable by the app (e.g. for a metrics endpoint):
# "unreadable_replies" counts replies rejected by read_reply in any middleware
# of this module, "failures" every Turnstile failure (unreachable, timeout,
# error reply, unreadable reply). Each middleware instance also has its own
# `unreadable_replies` and `failures` attributes.
stats = {"unreadable_replies": 0, "failures": 0}


@dataclass(frozen=True)
class Reply:
    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    index: Optional[int] = None  # RL.ALLOWMANY: the binding limit, 0-based


def read_reply(command: str, reply, length: Optional[int] = None) -> Reply:
    """Reads a limiter reply positionally. Turnstile replies with the same list
    of integers in RESP2 and RESP3:

        RL.ALLOW / RL.PEEK: [allowed, limit, remaining, retry_after_ms, reset_after_ms]
        RL.ALLOWMANY:       the same, then the binding limit's 0-based index

    Anything else raises UnreadableReply: unpacking a dict would yield its
    keys (allowed = b"allowed", truthy) and limit nothing."""
    if length is None:
        length = 6 if command.upper() == "RL.ALLOWMANY" else 5
    expected = f"a list of {length} integers"
    if (not isinstance(reply, (list, tuple)) or len(reply) != length
            or not all(type(x) is int for x in reply)):  # not bool, not bytes, not float
        raise UnreadableReply(command, expected, reply)
    if reply[0] not in (0, 1):
        raise UnreadableReply(command, expected + " with allowed 0 or 1", reply)
    return Reply(reply[0] == 1, *reply[1:])


def parse_period(period: Union[int, str]) -> int:
    """Turnstile durations: whole seconds (60) or a whole number with a unit
    (250ms, 10s, 15m, 1h, 1d). Returns milliseconds. Raises ValueError, so a
    misconfiguration fails at startup rather than failing open per request."""
    m = re.fullmatch(r"([1-9][0-9]*)(ms|s|m|h|d)?", str(period))
    if not m:
        raise ValueError(f"invalid period {period!r}: use whole seconds or e.g. 250ms, 10s, 15m, 1h, 1d")
    return int(m.group(1)) * UNIT_MS[m.group(2) or "s"]


def _positive_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v >= 2**63:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return v


def sf_string(s: str) -> str:
    """A policy name as a structured-field String: printable ASCII, with " and \\ escaped."""
    if not re.fullmatch(r"[\x20-\x7e]*", s):
        raise ValueError(f"policy name must be printable ASCII: {s!r}")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header(scope: Scope, name: bytes) -> Optional[str]:
    """First value of a request header (name in lower case), or None."""
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None


def client_ip(scope: Scope) -> Optional[str]:
    """The peer address. Behind a proxy, let the server rewrite it from
    X-Forwarded-For (uvicorn --proxy-headers --forwarded-allow-ips=...)."""
    client = scope.get("client")
    return client[0] if client else None


def _hashed(s: str) -> str:
    # Never put raw credentials into limiter keys (SCAN, KEYS, RL.STATE show them).
    return base64.urlsafe_b64encode(hashlib.sha256(s.encode()).digest()).decode()[:22]


def default_key(scope: Scope) -> Optional[str]:
    """The (hashed) X-Api-Key header if present, else the client IP."""
    api_key = header(scope, b"x-api-key")
    if api_key:
        return f"key:{_hashed(api_key)}"
    ip = client_ip(scope)
    return f"ip:{ip}" if ip else None


@dataclass
class Limit:
    """One quota policy: `key(scope)` returns the limiter key for a request
    (None leaves this limit out for that request); `name` names the policy
    in the RateLimit-Policy / RateLimit header fields."""

    name: str
    key: KeyFunc
    limit: int
    period: Union[int, str]
    algo: Optional[str] = None
    burst: Optional[int] = None
    # filled in by __post_init__
    args: list = field(init=False, repr=False)
    policy_item: str = field(init=False, repr=False)

    def __post_init__(self):
        _positive_int("limit", self.limit)
        period_ms = parse_period(self.period)
        opts: list = []
        if self.algo is not None:
            self.algo = str(self.algo).lower()
            if self.algo not in ALGOS:
                raise ValueError(f"unknown algo {self.algo!r}: use window, log, gcra or fixed")
            opts += ["ALGO", self.algo]
        if self.burst is not None:
            if self.algo != "gcra":
                raise ValueError('burst is only valid with algo "gcra"')
            opts += ["BURST", _positive_int("burst", self.burst)]
        self.args = [self.limit, str(self.period), *opts]
        # w is whole seconds (the draft has no sub-second windows): round up.
        w = max(1, math.ceil(period_ms / 1000))
        self.policy_item = f"{sf_string(self.name)};q={self.limit};w={w}"


class _Base:
    def __init__(self, app, *, redis: aioredis.Redis, prefix: str = "rl:",
                 cost: Union[int, CostFunc, None] = None, fail_closed: bool = False,
                 fail_closed_retry_after: int = 1,
                 on_error: Optional[Callable[[BaseException, Scope], None]] = None):
        if redis is None:
            raise ValueError("redis (a redis.asyncio client) is required")
        if cost is not None and not callable(cost):
            _positive_int("cost", cost)
        self.app = app
        self.redis = redis
        self.prefix = prefix
        self.cost = cost
        self.fail_closed = bool(fail_closed)
        self.fail_closed_retry_after = _positive_int("fail_closed_retry_after", fail_closed_retry_after)
        self.on_error = on_error
        self.unreadable_replies = 0
        self.failures = 0

    def _cost_args(self, scope) -> list:
        if self.cost is None:
            return []
        c = self.cost(scope) if callable(self.cost) else self.cost
        return [] if c == 1 else ["COST", _positive_int("cost", c)]

    async def _decide(self, scope) -> Optional[tuple]:
        """Returns (Reply, RateLimit-Policy value, binding policy name), or None
        when no limit applies to this request. Raises on Turnstile failures,
        UnreadableReply on a reply it cannot read."""
        raise NotImplementedError

    def _failed(self, err: BaseException, scope) -> None:
        """Counts and logs a failure, saying whether the request fails open or
        closed. An unreadable reply is always logged (as an error) and counted,
        even with a custom on_error: it means a client or server that does not
        match this code, not a passing outage."""
        action = "failing closed (503)" if self.fail_closed else "failing open (request served without a limit)"
        stats["failures"] += 1
        self.failures += 1
        if isinstance(err, UnreadableReply):
            stats["unreadable_replies"] += 1
            self.unreadable_replies += 1
            log.error("turnstile: %s; %s", err, action)
        elif self.on_error is None:
            log.warning("turnstile: %r; %s", err, action)
        if self.on_error is not None:
            try:
                self.on_error(err, scope)
            except Exception:  # a broken hook must not turn the failure into a 500
                log.exception("turnstile: on_error raised; %s", action)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan, websocket: not limited here
            await self.app(scope, receive, send)
            return
        try:
            decision = await self._decide(scope)
        except Exception as err:  # unreachable, timeout, error reply, unreadable reply, key bug
            self._failed(err, scope)
            if not self.fail_closed:
                await self.app(scope, receive, send)  # fail open, without headers
                return
            await _respond(send, 503, [(b"retry-after", str(self.fail_closed_retry_after).encode()),
                                       (b"content-type", b"text/plain; charset=utf-8")],
                           b"rate limiter unavailable\n")
            return
        if decision is None:
            await self.app(scope, receive, send)
            return

        reply, policy_header, name = decision
        r = max(0, reply.remaining)
        headers = [(b"ratelimit-policy", policy_header.encode())]
        if reply.allowed:
            # t: seconds until the key is back to full capacity.
            t = max(0, math.ceil(reply.reset_after_ms / 1000))
            headers.append((b"ratelimit", f"{sf_string(name)};r={r};t={t}".encode()))

            async def send_with_headers(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), *headers]}
                await send(message)

            await self.app(scope, receive, send_with_headers)
            return

        # Denied. Retry-After is at least 1 s so a client never retries at
        # once; t is the same value: the draft (section 6) says Retry-After
        # SHOULD NOT point earlier than t, and it is when quota is next
        # available for this request, which is what t means in draft-10.
        retry_after = max(1, math.ceil(reply.retry_after_ms / 1000))
        headers.append((b"ratelimit", f"{sf_string(name)};r={r};t={retry_after}".encode()))
        headers.append((b"retry-after", str(retry_after).encode()))
        headers.append((b"content-type", b"application/problem+json"))
        body = json.dumps({"type": QUOTA_EXCEEDED, "title": "Too Many Requests",
                           "violated-policies": [name]}).encode()
        await _respond(send, 429, headers, body)


async def _respond(send, status: int, headers: list, body: bytes):
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class RateLimitMiddleware(_Base):
    """One limit per request key: RL.ALLOW <prefix+key> <limit> <period>
    [ALGO a] [BURST b] [COST n].

    key(scope) returns the key (default: hashed X-Api-Key, else the client IP);
    None skips limiting. cost is an int or a function of the scope."""

    def __init__(self, app, *, redis: aioredis.Redis, limit: int, period: Union[int, str],
                 algo: Optional[str] = None, burst: Optional[int] = None, name: str = "default",
                 key: KeyFunc = default_key, **kw):
        super().__init__(app, redis=redis, **kw)
        self.policy = Limit(name=name, key=key, limit=limit, period=period, algo=algo, burst=burst)

    async def _decide(self, scope):
        k = self.policy.key(scope)
        if k is None:
            return None
        reply = await self.redis.execute_command(
            "RL.ALLOW", self.prefix + k, *self.policy.args, *self._cost_args(scope))
        return read_reply("RL.ALLOW", reply), self.policy.policy_item, self.policy.name


class RateLimitManyMiddleware(_Base):
    """Several limits at once with RL.ALLOWMANY (all-or-nothing: one denial
    charges none), e.g. per user AND per IP. RateLimit-Policy lists every
    limit that applied to the request; RateLimit reports the binding one (the
    one that denied, or else the one with the least remaining)."""

    def __init__(self, app, *, redis: aioredis.Redis, limits: Sequence[Limit], **kw):
        super().__init__(app, redis=redis, **kw)
        if not limits:
            raise ValueError("limits must not be empty")
        if len({l.name for l in limits}) != len(limits):
            raise ValueError("limit names must be unique")
        self.limits = list(limits)

    async def _decide(self, scope):
        active, args = [], self._cost_args(scope)
        for l in self.limits:
            k = l.key(scope)
            if k is None:
                continue
            active.append(l)
            args += ["LIMIT", self.prefix + k, *l.args]
        if not active:
            return None
        raw = await self.redis.execute_command("RL.ALLOWMANY", *args)
        reply = read_reply("RL.ALLOWMANY", raw)
        if not 0 <= reply.index < len(active):
            raise UnreadableReply("RL.ALLOWMANY", f"a binding index below {len(active)} (the limits sent)", raw)
        return reply, ", ".join(l.policy_item for l in active), active[reply.index].name


@dataclass(frozen=True)
class Lease:
    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    lease: Optional[str]  # the lease id when admitted, else None


def read_acquire(reply) -> Lease:
    """Reads RL.ACQUIRE's reply: RL.ALLOW's five integers, then the lease id
    (bytes or str when admitted, None when not). Anything else raises
    UnreadableReply."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 6:
        raise UnreadableReply("RL.ACQUIRE", "a list of 5 integers and a lease id", reply)
    head = read_reply("RL.ACQUIRE", reply[:5])
    lease = reply[5]
    if isinstance(lease, bytes):
        lease = lease.decode("ascii", "replace")
    if (lease is None) == head.allowed or (lease is not None and (not isinstance(lease, str) or not lease)):
        raise UnreadableReply("RL.ACQUIRE", "a lease id exactly when admitted", reply)
    return Lease(head.allowed, head.limit, head.remaining, head.retry_after_ms, head.reset_after_ms, lease)


class ConcurrencyLimitMiddleware(_Base):
    """At most `limit` requests in flight per key: RL.ACQUIRE <prefix+key>
    <limit> <ttl> [COST n] when the request starts, RL.RELEASE once when it
    ends however it ends: the response sent, the app raising, the task
    cancelled, or the client gone (an `http.disconnect` after the request
    body, while the app still runs: its slot is freed then).

    `ttl` bounds how long a lease outlives a crashed process: make it longer
    than the slowest request (Turnstile frees a lease past it, released or
    not). Over the cap: 429 with Retry-After `retry_after` seconds (default
    1: in-flight requests end soon; Turnstile's own retry_after is when the
    oldest lease would lapse, a bound, not an estimate). No RateLimit header
    fields: they describe quotas, not concurrency."""

    def __init__(self, app, *, redis: aioredis.Redis, limit: int, ttl: Union[int, str],
                 name: str = "concurrency", key: KeyFunc = default_key, retry_after: int = 1, **kw):
        super().__init__(app, redis=redis, **kw)
        self.limit = _positive_int("limit", limit)
        parse_period(ttl)
        self.ttl = str(ttl)
        self.name = name
        self.key = key
        self.retry_after = _positive_int("retry_after", retry_after)
        self.release_failures = 0

    async def _release(self, key: str, lease: str):
        try:
            await self.redis.execute_command("RL.RELEASE", key, lease)
        except Exception as err:  # the lease lapses at its TTL anyway; say so
            self.release_failures += 1
            log.warning("turnstile: RL.RELEASE failed (%r); the lease lapses after %s", err, self.ttl)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            k = self.key(scope)
            if k is None:
                await self.app(scope, receive, send)
                return
            key = self.prefix + k
            got = read_acquire(await self.redis.execute_command(
                "RL.ACQUIRE", key, self.limit, self.ttl, *self._cost_args(scope)))
        except Exception as err:  # unreachable, timeout, error reply, unreadable reply, key bug
            self._failed(err, scope)
            if not self.fail_closed:
                await self.app(scope, receive, send)
                return
            await _respond(send, 503, [(b"retry-after", str(self.fail_closed_retry_after).encode()),
                                       (b"content-type", b"text/plain; charset=utf-8")],
                           b"rate limiter unavailable\n")
            return
        if not got.allowed:
            body = json.dumps({"type": QUOTA_EXCEEDED, "title": "Too Many Requests",
                               "detail": f"at most {self.limit} requests in flight",
                               "violated-policies": [self.name]}).encode()
            await _respond(send, 429, [(b"retry-after", str(self.retry_after).encode()),
                                       (b"content-type", b"application/problem+json")], body)
            return

        released = False

        async def release():
            nonlocal released
            if not released:
                released = True
                await self._release(key, got.lease)

        # The client going away shows as http.disconnect from receive() once
        # the request body is in. A watcher reads receive() for the app
        # (handing each message over one at a time, so a large body keeps its
        # backpressure) and then waits for that disconnect, so an app that
        # never reads (a GET handler) still gives its slot back.
        inbox: asyncio.Queue = asyncio.Queue(maxsize=1)

        async def app_receive():
            return await inbox.get()

        async def watch():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    await release()
                    while True:  # the app sees it whenever it asks
                        await inbox.put(message)
                await inbox.put(message)

        watcher = asyncio.ensure_future(watch())
        try:
            await self.app(scope, app_receive, send)
        finally:
            watcher.cancel()
            # Shielded: a cancelled request still gives its lease back.
            await asyncio.shield(release())
