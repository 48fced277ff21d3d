'use strict';
// Runs the example app against a real Turnstile:
//   TURNSTILE_PORT=6379 node --test test.js
// Every run uses its own key prefix, so reruns against the same server start
// from empty limits.

const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const Redis = require('ioredis');
const { createApp, createClient } = require('./app');

const PORT = Number(process.env.TURNSTILE_PORT);
if (!PORT) {
  console.error('set TURNSTILE_PORT to the port of a running Turnstile');
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
