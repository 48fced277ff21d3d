'use strict';
// Runs the example app against a real Turnstile:
//   TURNSTILE_PORT=6379 [TURNSTILE_PROTOCOL=2|3] node --test test.js
// TURNSTILE_PROTOCOL makes every client connect with RESP2 or RESP3 (RESP3
// needs ioredis 6; unset: the client's default), and the connection is checked
// to really speak it. Every run uses its own key prefix, so reruns against the
// same server start from empty limits.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const express = require('express');
const { createApp, createClient } = require('./app');
const { rateLimit, rateLimitMany, readReply, stats } = require('./middleware');

const PORT = Number(process.env.TURNSTILE_PORT);
if (!PORT) {
  console.error('set TURNSTILE_PORT to the port of a running Turnstile');
  process.exit(2);
}
const PROTOCOL = process.env.TURNSTILE_PROTOCOL ? Number(process.env.TURNSTILE_PROTOCOL) : undefined;
if (PROTOCOL !== undefined && PROTOCOL !== 2 && PROTOCOL !== 3) {
  console.error(`TURNSTILE_PROTOCOL must be 2 or 3, got ${process.env.TURNSTILE_PROTOCOL}`);
  process.exit(2);
}
const IOREDIS_VERSION = require('ioredis/package.json').version;
if (PROTOCOL === 3 && Number(IOREDIS_VERSION.split('.')[0]) < 6) {
  console.error(`TURNSTILE_PROTOCOL=3 needs ioredis 6 or later; this is ioredis ${IOREDIS_VERSION}, which speaks RESP2 only`);
  process.exit(2);
}
const RUN = `test:${process.pid}:${Date.now().toString(36)}:`;
const PERIOD = 60;

const POLICY_RE = /^"([^"]+)";r=(\d+);t=(\d+)$/;

function parseRateLimit(h) {
  const m = POLICY_RE.exec(h || '');
  assert.ok(m, `RateLimit header malformed: ${JSON.stringify(h)}`);
  return { name: m[1], r: Number(m[2]), t: Number(m[3]) };
}

async function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

async function withApp(opts, fn) {
  const server = await listen(createApp(opts));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    await fn(base);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

let redis;
test.before(async () => {
  redis = createClient(`redis://127.0.0.1:${PORT}`);
  await redis.connect();
});
test.after(async () => {
  if (!redis) return;
  // Leave nothing behind: forget every key this run created.
  const keys = await redis.keys(`${RUN}*`);
  if (keys.length) await redis.call('RL.RESET', ...keys);
  redis.disconnect();
});

// Sends up to `max` requests until one is 429; returns all responses.
async function untilDenied(url, headers = {}, max = 50) {
  const out = [];
  for (let i = 0; i < max; i++) {
    const res = await fetch(url, { headers });
    out.push({ status: res.status, headers: res.headers, body: await res.text() });
    if (res.status === 429) return out;
  }
  assert.fail(`no 429 after ${max} requests to ${url}`);
}

test(`the client speaks RESP${PROTOCOL || '(default)'} and RL.PEEK / RL.ALLOW / RL.ALLOWMANY reply with positional arrays`, async () => {
  const info = String(await redis.call('CLIENT', 'INFO'));
  const resp = Number((/\bresp=(\d)/.exec(info) || [])[1]);
  console.log(`# ioredis ${IOREDIS_VERSION}, connection resp=${resp}`);
  if (PROTOCOL) assert.equal(resp, PROTOCOL, `asked for RESP${PROTOCOL}, connection says: ${info}`);
  const key = `${RUN}shape`;
  const peek = await redis.call('RL.PEEK', key, '5', String(PERIOD));
  const p = readReply('RL.PEEK', peek);
  assert.deepEqual([p.allowed, p.limit, p.remaining], [true, 5, 4], JSON.stringify(peek));
  const allow = readReply('RL.ALLOW', await redis.call('RL.ALLOW', key, '5', String(PERIOD)));
  assert.equal(allow.allowed, true);
  assert.equal(allow.remaining, 4);
  const many = readReply('RL.ALLOWMANY', await redis.call('RL.ALLOWMANY', 'LIMIT', key, '5', String(PERIOD),
    'LIMIT', `${RUN}shape2`, '2', String(PERIOD)));
  assert.equal(many.allowed, true);
  assert.equal(many.index, 1, 'the limit with the least remaining binds');
});

function checkDenied(res, policyName) {
  assert.equal(res.status, 429);
  const ra = res.headers.get('retry-after');
  assert.match(ra, /^[1-9][0-9]*$/, `Retry-After must be a positive integer, got ${ra}`);
  assert.ok(Number(ra) <= 2 * PERIOD, `Retry-After ${ra} beyond two periods`);
  const rl = parseRateLimit(res.headers.get('ratelimit'));
  assert.equal(rl.name, policyName);
  assert.equal(rl.r, 0);
  assert.equal(rl.t, Number(ra), 'on a 429, t equals Retry-After');
  assert.match(res.headers.get('content-type'), /^application\/problem\+json/);
  const problem = JSON.parse(res.body);
  assert.equal(problem.type, 'https://iana.org/assignments/http-problem-types#quota-exceeded');
  assert.deepEqual(problem['violated-policies'], [policyName]);
  return Number(ra);
}

test('RL.ALLOW: passes `limit` requests with decreasing RateLimit, then 429', async () => {
  await withApp({ redis, prefix: RUN, limit: 5, period: PERIOD }, async (base) => {
    const got = await untilDenied(`${base}/api/hello`, { 'x-forwarded-for': '203.0.113.1' });
    assert.deepEqual(got.map((r) => r.status), [200, 200, 200, 200, 200, 429]);
    got.forEach((r, i) => {
      assert.equal(r.headers.get('ratelimit-policy'), `"default";q=5;w=${PERIOD}`);
      const rl = parseRateLimit(r.headers.get('ratelimit'));
      assert.equal(rl.name, 'default');
      assert.equal(rl.r, Math.max(0, 4 - i), `remaining after request ${i + 1}`);
      assert.ok(rl.t >= 1 && rl.t <= 2 * PERIOD, `t=${rl.t}`);
      if (r.status === 200) assert.equal(r.headers.get('retry-after'), null);
    });
    checkDenied(got[5], 'default');
    // Still denied, nothing charged by denials: remaining stays 0.
    const again = await fetch(`${base}/api/hello`, { headers: { 'x-forwarded-for': '203.0.113.1' } });
    assert.equal(again.status, 429);
    // Another client is unaffected.
    const other = await fetch(`${base}/api/hello`, { headers: { 'x-forwarded-for': '203.0.113.2' } });
    assert.equal(other.status, 200);
    assert.equal(parseRateLimit(other.headers.get('ratelimit')).r, 4);
  });
});

test('RL.ALLOW: an API key gets its own budget, whatever the IP', async () => {
  await withApp({ redis, prefix: RUN, limit: 2, period: PERIOD }, async (base) => {
    const a = await untilDenied(`${base}/api/hello`, { 'x-api-key': 'secret-a', 'x-forwarded-for': '203.0.113.10' });
    assert.deepEqual(a.map((r) => r.status), [200, 200, 429]);
    const b = await fetch(`${base}/api/hello`, { headers: { 'x-api-key': 'secret-b', 'x-forwarded-for': '203.0.113.10' } });
    assert.equal(b.status, 200);
    // The raw API key never reaches Turnstile.
    const keys = await redis.keys(`${RUN}*`);
    assert.ok(keys.length > 0 && keys.every((k) => !k.includes('secret')), keys.join(' '));
  });
});

test('RL.ALLOW with ALGO gcra and COST 5', async () => {
  await withApp({ redis, prefix: RUN, limit: 10, period: PERIOD }, async (base) => {
    const got = await untilDenied(`${base}/api/report`, { 'x-forwarded-for': '203.0.113.20' });
    assert.deepEqual(got.map((r) => r.status), [200, 200, 429]);
    assert.deepEqual(got.map((r) => parseRateLimit(r.headers.get('ratelimit')).r), [5, 0, 0]);
    got.forEach((r) => assert.equal(r.headers.get('ratelimit-policy'), `"reports";q=10;w=${PERIOD}`));
    const ra = checkDenied(got[2], 'reports');
    // GCRA at 10 per 60 s: 5 units come back after 30 s.
    assert.ok(ra >= 29 && ra <= 30, `Retry-After ${ra}`);
  });
});

test('RL.ALLOWMANY: the per-user limit, then the per-IP limit, deny', async () => {
  await withApp({ redis, prefix: RUN, userLimit: 3, ipLimit: 5, period: PERIOD }, async (base) => {
    const ip = '203.0.113.30';
    const policy = `"user";q=3;w=${PERIOD}, "ip";q=5;w=${PERIOD}`;
    // User A: 3 allowed (user limit binds), 4th denied by "user".
    const a = await untilDenied(`${base}/api/many`, { 'x-user-id': 'a', 'x-forwarded-for': ip });
    assert.deepEqual(a.map((r) => r.status), [200, 200, 200, 429]);
    a.forEach((r) => assert.equal(r.headers.get('ratelimit-policy'), policy));
    assert.deepEqual(a.map((r) => parseRateLimit(r.headers.get('ratelimit')).r), [2, 1, 0, 0]);
    checkDenied(a[3], 'user');
    // User B on the same IP: the IP has 2 left (denials charged nothing), so
    // B gets 2 and is then denied by "ip" though B's own limit has 1 left.
    const b = await untilDenied(`${base}/api/many`, { 'x-user-id': 'b', 'x-forwarded-for': ip });
    assert.deepEqual(b.map((r) => r.status), [200, 200, 429]);
    assert.deepEqual(b.map((r) => parseRateLimit(r.headers.get('ratelimit')).name), ['ip', 'ip', 'ip']);
    assert.deepEqual(b.map((r) => parseRateLimit(r.headers.get('ratelimit')).r), [1, 0, 0]);
    checkDenied(b[2], 'ip');
    // The all-or-nothing denial did not charge user B.
    const state = await redis.call('RL.PEEK', `${RUN}many:user:b`, '3', String(PERIOD));
    assert.equal(Number(state[2]), 0, 'B has charged 2 of 3: PEEK (cost 1) leaves 0');
    // An anonymous request has only the IP limit, which is exhausted.
    const anon = await fetch(`${base}/api/many`, { headers: { 'x-forwarded-for': ip } });
    assert.equal(anon.status, 429);
    assert.equal(anon.headers.get('ratelimit-policy'), `"ip";q=5;w=${PERIOD}`);
    // User A from another IP is still limited by the user limit.
    const elsewhere = await fetch(`${base}/api/many`, { headers: { 'x-user-id': 'a', 'x-forwarded-for': '203.0.113.31' } });
    assert.equal(elsewhere.status, 429);
    assert.equal(parseRateLimit(elsewhere.headers.get('ratelimit')).name, 'user');
  });
});

async function closedPort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

test('Turnstile unreachable: fail open by default, 503 when failClosed', async () => {
  const dead = createClient(`redis://127.0.0.1:${await closedPort()}`);
  await dead.connect().catch(() => {});
  const errors = [];
  try {
    await withApp({ redis: dead, prefix: RUN, limit: 1, period: PERIOD, onError: (e) => errors.push(e) }, async (base) => {
      for (let i = 0; i < 3; i++) {
        const t0 = Date.now();
        const res = await fetch(`${base}/api/hello`);
        assert.equal(res.status, 200);
        assert.ok(Date.now() - t0 < 1000, 'fail-open must not wait');
        assert.equal(res.headers.get('ratelimit'), null);
        assert.equal(res.headers.get('ratelimit-policy'), null);
      }
    });
    assert.equal(errors.length, 3);
    await withApp({ redis: dead, prefix: RUN, limit: 1, period: PERIOD, failClosed: true, onError: () => {} }, async (base) => {
      const res = await fetch(`${base}/api/many`, { headers: { 'x-user-id': 'z' } });
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '1');
    });
  } finally {
    dead.disconnect();
  }
});

// A stand-in for an ioredis client that answers every call with `reply`.
function fakeRedis(replies) {
  return { call: async (cmd) => (typeof replies === 'function' ? replies(cmd) : replies[cmd]) };
}

function captureLogger() {
  const lines = [];
  return { lines, warn: (m) => lines.push(`WARN ${m}`), error: (m) => lines.push(`ERROR ${m}`) };
}

async function withExpress(mount, fn) {
  const app = express();
  mount(app);
  app.use((req, res) => res.json({ ok: true }));
  const server = await listen(app);
  try {
    await fn(`http://127.0.0.1:${server.address().port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

// What a map reply looks like to JavaScript: an object (node-redis, ioredis 6
// with replyMapping "resp3") or a flat [key, value, ...] array (ioredis 6's
// default "legacy" mapping).
const MAP_OBJECT = { allowed: 1, limit: 5, remaining: 4, retry_after_ms: 0, reset_after_ms: 60000 };
const MAP_FLAT = Object.entries(MAP_OBJECT).flat();
const UNREADABLE = [
  ['a map (object)', MAP_OBJECT, { ...MAP_OBJECT, index: 0 }],
  ['a map (flat array)', MAP_FLAT, [...MAP_FLAT, 'index', 0]],
  ['a Map', new Map(Object.entries(MAP_OBJECT)), new Map(Object.entries({ ...MAP_OBJECT, index: 0 }))],
  ['too short', [1, 5, 4, 0], [1, 5, 4, 0, 60000]],
  ['too long', [1, 5, 4, 0, 60000, 0], [1, 5, 4, 0, 60000, 0, 0]],
  ['strings', ['1', '5', '4', '0', '60000'], ['1', '5', '4', '0', '60000', '0']],
  ['allowed not 0/1', [2, 5, 4, 0, 60000], [2, 5, 4, 0, 60000, 0]],
  ['index out of range', null, [1, 5, 4, 0, 60000, 2]],
];

test('an unreadable reply is counted and logged, then fail-open serves and fail-closed answers 503', async () => {
  for (const [what, allowReply, manyReply] of UNREADABLE) {
    const replies = { 'RL.ALLOW': allowReply, 'RL.ALLOWMANY': manyReply };
    for (const failClosed of [false, true]) {
      const logger = captureLogger();
      const onErrorCalls = [];
      const common = { redis: fakeRedis(replies), failClosed, logger, period: PERIOD };
      const one = rateLimit({ ...common, limit: 5, key: () => 'k' });
      const many = rateLimitMany({ ...common, limits: [
        { name: 'user', key: () => 'user:u', limit: 5, period: PERIOD },
        { name: 'ip', key: () => 'ip:i', limit: 5, period: PERIOD }],
      onError: (err) => onErrorCalls.push(err) });
      const before = stats.unreadableReplies;
      await withExpress((app) => {
        app.get('/one', one);
        app.get('/many', many);
      }, async (base) => {
        const paths = allowReply === null ? ['/many'] : ['/one', '/many'];
        for (const path of paths) {
          const res = await fetch(base + path);
          const body = await res.text();
          const label = `${what}, ${path}, ${failClosed ? 'fail-closed' : 'fail-open'}`;
          if (failClosed) {
            assert.equal(res.status, 503, label);
            assert.equal(res.headers.get('retry-after'), '1', label);
          } else {
            assert.equal(res.status, 200, `${label}: ${body}`);
            assert.deepEqual(JSON.parse(body), { ok: true }, label);
          }
          assert.equal(res.headers.get('ratelimit'), null, label);
          assert.equal(res.headers.get('ratelimit-policy'), null, label);
        }
        const n = paths.length;
        assert.equal(stats.unreadableReplies - before, n, `${what}: module counter`);
        assert.equal(one.stats.unreadableReplies + many.stats.unreadableReplies, n, `${what}: middleware counters`);
        assert.equal(logger.lines.length, n, logger.lines.join('\n'));
        for (const line of logger.lines) {
          assert.match(line, /^ERROR turnstile: unreadable RL\.ALLOW(MANY)? reply: expected /, line);
          assert.ok(line.endsWith(failClosed ? 'failing closed (503)' : 'failing open (request served without a limit)'), line);
        }
        // A custom onError is still called, and does not silence the log line.
        assert.equal(onErrorCalls.length, 1, what);
        assert.equal(onErrorCalls[0].name, 'UnreadableReplyError');
      });
    }
  }
});

test('readReply accepts exactly the positional arrays', () => {
  assert.deepEqual(readReply('RL.ALLOW', [0, 5, 0, 1500, 60000]),
    { allowed: false, limit: 5, remaining: 0, retryAfterMs: 1500, resetAfterMs: 60000 });
  assert.deepEqual(readReply('RL.ALLOWMANY', [1, 3, 2, 0, 60000, 1]),
    { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 60000, index: 1 });
  assert.throws(() => readReply('RL.ALLOW', [1, 3, 2, 0, 60000, 1]), { name: 'UnreadableReplyError' });
  assert.throws(() => readReply('RL.ALLOWMANY', [1, 3, 2, 0, 60000]), { name: 'UnreadableReplyError' });
  assert.throws(() => readReply('RL.PEEK', [1, 3, 2, 0.5, 60000]), { name: 'UnreadableReplyError' });
  assert.throws(() => readReply('RL.PEEK', null), { name: 'UnreadableReplyError' });
});

// ---------------------------------------------------------------- concurrency

// The leases held on a key, from Turnstile's own bookkeeping (RL.LEASES:
// one map or flat array per lease, in RESP3 and RESP2 alike).
async function leasesHeld(key) {
  return (await redis.call('RL.LEASES', key)).length;
}

// Waits (bounded) until `cond()` holds: releases are sent after the
// response, so the test waits for them to land, never for a fixed time.
async function eventually(what, cond, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// An export job the test controls, counting what runs at once.
function gatedJob() {
  const job = async () => {
    job.running++;
    job.maxRunning = Math.max(job.maxRunning, job.running);
    try {
      await job.gate;
    } finally {
      job.running--;
    }
  };
  job.running = 0;
  job.maxRunning = 0;
  job.gate = new Promise((r) => { job.open = r; });
  return job;
}

test('concurrencyLimit: 20 at once with a cap of 3: 3 run, 17 get 429, all leases released after', async () => {
  const job = gatedJob();
  await withApp({ redis, prefix: RUN, concurrency: 3, exportJob: job }, async (base) => {
    const ip = '203.0.113.50';
    const key = `${RUN}export:ip:${ip}`;
    let answered = 0;
    const pending = Array.from({ length: 20 }, () => fetch(`${base}/api/export`, { headers: { 'x-forwarded-for': ip } })
      .then(async (r) => {
        answered++;
        return { status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.text() };
      }));
    // The 17 denied answer at once; the 3 admitted wait at the gate (which
    // opens only once all 17 are in: a request still on its way would find
    // a lease freed).
    await eventually('17 requests answered', async () => answered === 17);
    assert.equal(job.running, 3);
    assert.equal(await leasesHeld(key), 3);
    job.open();
    const got = await Promise.all(pending);
    const statuses = got.map((r) => r.status).sort();
    assert.deepEqual(statuses, [...Array(3).fill(200), ...Array(17).fill(429)]);
    for (const r of got.filter((x) => x.status === 429)) {
      assert.equal(r.retryAfter, '1');
      assert.deepEqual(JSON.parse(r.body)['violated-policies'], ['exports']);
    }
    assert.equal(job.maxRunning, 3);
    await eventually('every lease released', async () => (await leasesHeld(key)) === 0);
  });
});

test('concurrencyLimit under bounded load: 8 rounds of 25 concurrent requests never run more than the cap', async () => {
  const CAP = 4;
  let running = 0;
  let maxRunning = 0;
  let served = 0;
  const job = async () => {
    running++;
    served++;
    maxRunning = Math.max(maxRunning, running);
    // Real work of a few ms, so requests overlap and finish in any order.
    await new Promise((r) => setTimeout(r, 1 + Math.floor(Math.random() * 15)));
    running--;
  };
  await withApp({ redis, prefix: RUN, concurrency: CAP, exportJob: job }, async (base) => {
    const ip = '203.0.113.51';
    const key = `${RUN}export:ip:${ip}`;
    let ok = 0;
    let denied = 0;
    for (let round = 0; round < 8; round++) {
      const got = await Promise.all(Array.from({ length: 25 }, () =>
        fetch(`${base}/api/export`, { headers: { 'x-forwarded-for': ip } }).then(async (r) => { await r.text(); return r.status; })));
      for (const s of got) {
        assert.ok(s === 200 || s === 429, `status ${s}`);
        if (s === 200) ok++; else denied++;
      }
      // Turnstile's own count never passes the cap either.
      assert.ok((await leasesHeld(key)) <= CAP);
    }
    assert.ok(maxRunning <= CAP, `${maxRunning} ran at once, cap ${CAP}`);
    assert.equal(ok, served);
    assert.ok(ok >= 8 * CAP, `at least the cap per round was served: ${ok}`);
    console.log(`# 200 requests: ${ok} served, ${denied} denied, at most ${maxRunning} at once`);
    await eventually('every lease released', async () => (await leasesHeld(key)) === 0);
  });
});

test('concurrencyLimit recovers after the handler throws: every 500 releases its lease', async () => {
  let calls = 0;
  const job = async () => {
    calls++;
    throw new Error('export failed');
  };
  await withApp({ redis, prefix: RUN, concurrency: 2, exportJob: job, logger: { warn() {}, error() {} } }, async (base) => {
    const ip = '203.0.113.52';
    const key = `${RUN}export:ip:${ip}`;
    // With a leak, the third call would be a 429.
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${base}/api/export`, { headers: { 'x-forwarded-for': ip } });
      await res.text();
      assert.equal(res.status, 500, `call ${i + 1}`);
      await eventually('the lease released after the 500', async () => (await leasesHeld(key)) === 0);
    }
    assert.equal(calls, 6);
  });
});

test('concurrencyLimit: a client that goes away releases its lease while the handler still runs', async () => {
  const job = gatedJob();
  await withApp({ redis, prefix: RUN, concurrency: 1, exportJob: job }, async (base) => {
    const ip = '203.0.113.53';
    const key = `${RUN}export:ip:${ip}`;
    const abort = new AbortController();
    const first = fetch(`${base}/api/export`, { headers: { 'x-forwarded-for': ip }, signal: abort.signal })
      .catch((e) => e.name);
    await eventually('the first request runs', async () => job.running === 1);
    const full = await fetch(`${base}/api/export`, { headers: { 'x-forwarded-for': ip } });
    assert.equal(full.status, 429, 'the cap of 1 is taken');
    await full.text();
    abort.abort();
    assert.equal(await first, 'AbortError');
    await eventually('the aborted request released its lease', async () => (await leasesHeld(key)) === 0);
    job.open();
  });
});

test('readAcquire accepts the lease reply and nothing else', () => {
  const { readAcquire, UnreadableReplyError } = require('./middleware');
  assert.deepEqual(readAcquire([1, 3, 2, 30000, 30000, 'abc']).lease, 'abc');
  assert.equal(readAcquire([0, 3, 0, 1200, 30000, null]).allowed, false);
  for (const bad of [[1, 3, 2, 30000, 30000, null], [0, 3, 0, 1, 1, 'x'], [1, 3, 2, 1, 1], { allowed: 1 }]) {
    assert.throws(() => readAcquire(bad), UnreadableReplyError, JSON.stringify(bad));
  }
});
