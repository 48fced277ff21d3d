'use strict';
// Express middleware that asks Turnstile (RL.ALLOW / RL.ALLOWMANY, over an
// ioredis client, RESP2 or RESP3) whether a request may proceed, and maps the answer onto
// HTTP: 429 + Retry-After when denied, and the IETF RateLimit-Policy /
// RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10,
// structured-field form) on every limited response. concurrencyLimit caps
// requests in flight instead (RL.ACQUIRE / RL.RELEASE). See ../README.md.

const crypto = require('node:crypto');

const ALGOS = new Set(['window', 'log', 'gcra', 'fixed']);
const UNIT_MS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };
const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';

// Turnstile durations: whole seconds (60) or a whole number with a unit
// (250ms, 10s, 15m, 1h, 1d). Returns milliseconds; throws on anything else so
// a misconfiguration fails at startup, not as a silent fail-open per request.
function parsePeriod(period) {
  const m = /^([1-9][0-9]*)(ms|s|m|h|d)?$/.exec(String(period));
  if (!m) throw new TypeError(`invalid period ${JSON.stringify(period)}: use whole seconds or e.g. 250ms, 10s, 15m, 1h, 1d`);
  return Number(m[1]) * UNIT_MS[m[2] || 's'];
}

function positiveInt(name, v) {
  if (!Number.isSafeInteger(v) || v <= 0) throw new TypeError(`${name} must be a positive integer, got ${v}`);
  return v;
}

// A policy name is sent as an sf-string: printable ASCII, with " and \ escaped.
function sfString(s) {
  if (!/^[\x20-\x7e]*$/.test(s)) throw new TypeError(`policy name must be printable ASCII: ${JSON.stringify(s)}`);
  return '"' + s.replace(/[\\"]/g, (c) => '\\' + c) + '"';
}

// One quota policy as configured: what goes to Turnstile and what goes into
// RateLimit-Policy.
function makePolicy(o) {
  const limit = positiveInt('limit', o.limit);
  const periodMs = parsePeriod(o.period);
  const algo = o.algo === undefined ? undefined : String(o.algo).toLowerCase();
  if (algo !== undefined && !ALGOS.has(algo)) throw new TypeError(`unknown algo ${o.algo}: use window, log, gcra or fixed`);
  if (o.burst !== undefined && algo !== 'gcra') throw new TypeError('burst is only valid with algo "gcra"');
  const burst = o.burst === undefined ? undefined : positiveInt('burst', o.burst);
  const name = o.name || 'default';
  const opts = [];
  if (algo) opts.push('ALGO', algo);
  if (burst !== undefined) opts.push('BURST', String(burst));
  return {
    name,
    limit,
    period: String(o.period),
    opts,
    // w is whole seconds (the draft has no sub-second windows): round up.
    policyItem: `${sfString(name)};q=${limit};w=${Math.max(1, Math.ceil(periodMs / 1000))}`,
  };
}

function ceilSeconds(ms) {
  return Math.max(0, Math.ceil(ms / 1000));
}

// A reply this middleware cannot read (a map from a server or client that
// names the fields, the wrong length, non-integers). It is never guessed at:
// it is counted, logged, and then handled like any other Turnstile failure
// (fail open or fail closed).
class UnreadableReplyError extends Error {
  constructor(command, expected, reply) {
    super(`unreadable ${command} reply: expected ${expected}, got ${describe(reply)}`);
    this.name = 'UnreadableReplyError';
    this.command = command;
    this.reply = reply;
  }
}

function describe(v) {
  let kind = Array.isArray(v) ? `an array of ${v.length}` : v === null ? 'null'
    : v instanceof Map ? 'a Map' : typeof v === 'object' ? 'an object (a map reply?)' : `a ${typeof v}`;
  let text;
  try {
    text = JSON.stringify(v instanceof Map ? Object.fromEntries(v) : v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x));
  } catch {
    text = String(v);
  }
  if (text && text.length > 200) text = text.slice(0, 200) + '...';
  return `${kind}: ${text}`;
}

// Process-wide counters, readable by the app (e.g. for a metrics endpoint):
// unreadableReplies counts replies rejected by readReply, over every
// middleware built by this module. Each middleware also has its own `stats`.
const stats = { unreadableReplies: 0, failures: 0 };

/**
 * Reads a limiter reply positionally. Turnstile replies with the same array of
 * integers in RESP2 and RESP3:
 *   RL.ALLOW / RL.PEEK: [allowed, limit, remaining, retry_after_ms, reset_after_ms]
 *   RL.ALLOWMANY:       the same, then the binding limit's 0-based index
 * Anything else (a map or object, another length, a non-integer, allowed not
 * 0 or 1) throws UnreadableReplyError: reading a map as an array would take
 * its keys for the values and, at best, limit nothing.
 */
function readReply(command, reply, length = command.toUpperCase() === 'RL.ALLOWMANY' ? 6 : 5) {
  const expected = `an array of ${length} integers`;
  if (!Array.isArray(reply) || reply.length !== length || !reply.every((x) => Number.isSafeInteger(x))) {
    throw new UnreadableReplyError(command, expected, reply);
  }
  if (reply[0] !== 0 && reply[0] !== 1) throw new UnreadableReplyError(command, `${expected} with allowed 0 or 1`, reply);
  const [allowed, limit, remaining, retryAfterMs, resetAfterMs, index] = reply;
  const out = { allowed: allowed === 1, limit, remaining, retryAfterMs, resetAfterMs };
  if (length === 6) out.index = index;
  return out;
}

// decision: readReply's result.
function applyDecision(res, policyHeader, policyName, decision) {
  const { allowed, remaining, retryAfterMs, resetAfterMs } = decision;
  const r = Math.max(0, remaining);
  res.set('RateLimit-Policy', policyHeader);
  if (allowed) {
    // t: seconds until the key is back to full capacity.
    res.set('RateLimit', `${sfString(policyName)};r=${r};t=${ceilSeconds(resetAfterMs)}`);
    return true;
  }
  // Denied. Retry-After is at least 1 s, so a client never retries at once.
  // t is the same value: the draft (section 6) says Retry-After SHOULD NOT
  // point earlier than t, and it is when quota is next available for this
  // request, which is what t means in draft-10.
  const retryAfter = Math.max(1, Math.ceil(retryAfterMs / 1000));
  res.set('RateLimit', `${sfString(policyName)};r=${r};t=${retryAfter}`);
  res.set('Retry-After', String(retryAfter));
  res.status(429).type('application/problem+json').send(JSON.stringify({
    type: QUOTA_EXCEEDED,
    title: 'Too Many Requests',
    'violated-policies': [policyName],
  }));
  return false;
}

// What to do when Turnstile gives no usable decision (connection refused,
// timeout, an error reply, or a reply it cannot read): fail open by default
// (serve the request, without RateLimit headers, since there is no decision
// to report), or fail closed with 503. Either way it is logged, saying which.
// An unreadable reply is always logged (as an error) and counted, even with
// a custom onError: it means a client or server that does not match this code,
// not a passing outage.
function onFailure(opts, mwStats, req, res, next, err) {
  const action = opts.failClosed ? 'failing closed (503)' : 'failing open (request served without a limit)';
  stats.failures++;
  mwStats.failures++;
  if (err instanceof UnreadableReplyError) {
    stats.unreadableReplies++;
    mwStats.unreadableReplies++;
    opts.logger.error(`turnstile: ${err.message}; ${action}`);
  } else if (!opts.onError) {
    opts.logger.warn(`turnstile: ${err.message}; ${action}`);
  }
  if (opts.onError) {
    try {
      opts.onError(err, req);
    } catch (hookErr) { // a broken hook must not turn the failure into a 500
      opts.logger.error(`turnstile: onError threw ${hookErr && hookErr.message}; ${action}`);
    }
  }
  if (!opts.failClosed) return next();
  res.set('Retry-After', String(opts.failClosedRetryAfter));
  res.status(503).type('text/plain').send('rate limiter unavailable\n');
}

function commonOptions(o) {
  if (!o || !o.redis) throw new TypeError('options.redis (an ioredis client) is required');
  const cost = o.cost === undefined ? undefined : o.cost;
  if (cost !== undefined && typeof cost !== 'function') positiveInt('cost', cost);
  if (o.onError !== undefined && typeof o.onError !== 'function') throw new TypeError('onError must be a function');
  if (o.logger !== undefined && (typeof o.logger.warn !== 'function' || typeof o.logger.error !== 'function')) {
    throw new TypeError('logger must have warn() and error() methods');
  }
  return {
    redis: o.redis,
    prefix: o.prefix === undefined ? 'rl:' : String(o.prefix),
    cost,
    failClosed: Boolean(o.failClosed),
    failClosedRetryAfter: o.failClosedRetryAfter === undefined ? 1 : positiveInt('failClosedRetryAfter', o.failClosedRetryAfter),
    onError: o.onError,
    logger: o.logger || console,
  };
}

function costArgs(opts, req) {
  if (opts.cost === undefined) return [];
  const c = typeof opts.cost === 'function' ? opts.cost(req) : opts.cost;
  return c === undefined || c === 1 ? [] : ['COST', String(positiveInt('cost', c))];
}

// Never put raw credentials into limiter keys (they show up in SCAN/KEYS and
// RL.STATE): hash the API key.
function hashed(s) {
  return crypto.createHash('sha256').update(s).digest('base64url').slice(0, 22);
}

// Default key: the API key header if present, else the client address
// (req.ip honours Express's "trust proxy" setting for X-Forwarded-For).
function defaultKey(req) {
  const apiKey = req.get('x-api-key');
  return apiKey ? `key:${hashed(apiKey)}` : `ip:${req.ip}`;
}

/**
 * rateLimit({ redis, limit, period, algo?, burst?, cost?, name?, key?, prefix?,
 *             failClosed?, failClosedRetryAfter?, onError?, logger? })
 *
 * One limit per request key: RL.ALLOW <prefix+key> <limit> <period> [ALGO a]
 * [BURST b] [COST n]. `key(req)` returns the key (default: hashed X-Api-Key,
 * else the client IP); returning null/undefined skips limiting. `cost` is a
 * number or a function of the request.
 */
function rateLimit(options) {
  const opts = commonOptions(options);
  const policy = makePolicy(options);
  const keyOf = options.key || defaultKey;
  const mwStats = { unreadableReplies: 0, failures: 0 };
  async function turnstileRateLimit(req, res, next) {
    let decision;
    try {
      const k = keyOf(req);
      if (k === null || k === undefined) return next();
      const reply = await opts.redis.call('RL.ALLOW', opts.prefix + k, String(policy.limit), policy.period,
        ...policy.opts, ...costArgs(opts, req));
      decision = readReply('RL.ALLOW', reply);
    } catch (err) {
      return onFailure(opts, mwStats, req, res, next, err);
    }
    if (applyDecision(res, policy.policyItem, policy.name, decision)) next();
  }
  turnstileRateLimit.stats = mwStats;
  return turnstileRateLimit;
}

/**
 * rateLimitMany({ redis, limits: [{ name, key, limit, period, algo?, burst? }, ...],
 *                 cost?, prefix?, failClosed?, failClosedRetryAfter?, onError?, logger? })
 *
 * Several limits at once with RL.ALLOWMANY (all-or-nothing: one denial charges
 * none). Each limit's `key(req)` returns its key (e.g. `user:${id}`), or
 * null/undefined to leave that limit out for this request (an anonymous
 * request has no per-user limit). RateLimit-Policy lists every limit that
 * applied; RateLimit reports the binding one (the one that denied, or the one
 * with the least remaining), named after its policy.
 */
function rateLimitMany(options) {
  const opts = commonOptions(options);
  if (!Array.isArray(options.limits) || options.limits.length === 0) throw new TypeError('options.limits must be a non-empty array');
  const limits = options.limits.map((l, i) => {
    if (typeof l.key !== 'function') throw new TypeError(`limits[${i}].key must be a function of the request`);
    if (!l.name) throw new TypeError(`limits[${i}].name is required (it names the policy in the headers)`);
    return { ...makePolicy(l), keyOf: l.key };
  });
  const names = new Set(limits.map((l) => l.name));
  if (names.size !== limits.length) throw new TypeError('limits[].name must be unique');
  const mwStats = { unreadableReplies: 0, failures: 0 };
  async function turnstileRateLimitMany(req, res, next) {
    let active, decision;
    try {
      active = [];
      const args = [...costArgs(opts, req)];
      for (const l of limits) {
        const k = l.keyOf(req);
        if (k === null || k === undefined) continue;
        active.push(l);
        args.push('LIMIT', opts.prefix + k, String(l.limit), l.period, ...l.opts);
      }
      if (active.length === 0) return next();
      const reply = await opts.redis.call('RL.ALLOWMANY', ...args);
      decision = readReply('RL.ALLOWMANY', reply);
      if (decision.index < 0 || decision.index >= active.length) {
        throw new UnreadableReplyError('RL.ALLOWMANY', `a binding index below ${active.length} (the limits sent)`, reply);
      }
    } catch (err) {
      return onFailure(opts, mwStats, req, res, next, err);
    }
    const binding = active[decision.index];
    const policyHeader = active.map((l) => l.policyItem).join(', ');
    if (applyDecision(res, policyHeader, binding.name, decision)) next();
  }
  turnstileRateLimitMany.stats = mwStats;
  return turnstileRateLimitMany;
}

/**
 * Reads RL.ACQUIRE's reply: RL.ALLOW's five integers, then the lease id (a
 * string when admitted, null when not). Anything else throws
 * UnreadableReplyError.
 */
function readAcquire(reply) {
  if (!Array.isArray(reply) || reply.length !== 6) {
    throw new UnreadableReplyError('RL.ACQUIRE', 'an array of 5 integers and a lease id', reply);
  }
  const decision = readReply('RL.ACQUIRE', reply.slice(0, 5));
  const lease = reply[5];
  const id = Buffer.isBuffer(lease) ? lease.toString() : lease;
  if (decision.allowed ? typeof id !== 'string' || id === '' : id !== null) {
    throw new UnreadableReplyError('RL.ACQUIRE', 'a lease id exactly when admitted', reply);
  }
  return { ...decision, lease: id };
}

/**
 * concurrencyLimit({ redis, limit, ttl, key?, name?, prefix?, cost?, retryAfter?,
 *                    failClosed?, failClosedRetryAfter?, onError?, logger? })
 *
 * At most `limit` requests in flight per key: RL.ACQUIRE <prefix+key> <limit>
 * <ttl> [COST n] when the request starts, RL.RELEASE once when its response
 * ends however it ends (sent, handler error turned into a 500, or the client
 * gone). `ttl` bounds how long a lease can outlive a crashed process: make it
 * longer than the slowest request (a lease past it is freed by Turnstile
 * whether or not it is released). A request over the cap gets 429 with
 * Retry-After `retryAfter` seconds (default 1: in-flight requests end soon;
 * Turnstile's own retry_after is when the oldest lease would lapse, a bound,
 * not an estimate). No RateLimit headers: they describe quotas, not
 * concurrency.
 */
function concurrencyLimit(options) {
  const opts = commonOptions(options);
  const limit = positiveInt('limit', options.limit);
  const ttl = String(options.ttl);
  parsePeriod(ttl);
  const retryAfter = options.retryAfter === undefined ? 1 : positiveInt('retryAfter', options.retryAfter);
  const name = options.name || 'concurrency';
  const keyOf = options.key || defaultKey;
  const mwStats = { unreadableReplies: 0, failures: 0, releaseFailures: 0 };
  async function turnstileConcurrencyLimit(req, res, next) {
    let key, decision;
    try {
      const k = keyOf(req);
      if (k === null || k === undefined) return next();
      key = opts.prefix + k;
      decision = readAcquire(await opts.redis.call('RL.ACQUIRE', key, String(limit), ttl, ...costArgs(opts, req)));
    } catch (err) {
      return onFailure(opts, mwStats, req, res, next, err);
    }
    if (!decision.allowed) {
      res.set('Retry-After', String(retryAfter));
      res.status(429).type('application/problem+json').send(JSON.stringify({
        type: QUOTA_EXCEEDED,
        title: 'Too Many Requests',
        detail: `at most ${limit} requests in flight`,
        'violated-policies': [name],
      }));
      return;
    }
    // 'finish': the response was handed to the OS; 'close': the connection
    // went first (client abort) or after. Whichever comes first releases.
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      opts.redis.call('RL.RELEASE', key, decision.lease).catch((err) => {
        // The lease lapses at its TTL anyway; say why it was held that long.
        mwStats.releaseFailures++;
        opts.logger.warn(`turnstile: RL.RELEASE failed (${err.message}); the lease lapses after ${ttl}`);
      });
    };
    res.once('finish', release);
    res.once('close', release);
    next();
  }
  turnstileConcurrencyLimit.stats = mwStats;
  return turnstileConcurrencyLimit;
}

module.exports = { rateLimit, rateLimitMany, concurrencyLimit, parsePeriod, readReply, readAcquire, UnreadableReplyError, stats };
