#!/usr/bin/env node
// ioredis compatibility check for Turnstile.
// Usage: node ioredis_check.js PORT [HOST]
'use strict';

const assert = require('node:assert/strict');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const host = process.argv[3] || '127.0.0.1';
if (!port) {
  console.error('usage: node ioredis_check.js PORT [HOST]');
  process.exit(2);
}

// A reply that never comes must fail the check, not hang CI.
const watchdog = setTimeout(() => {
  console.error('ioredis check FAILED: timed out after 20 s');
  process.exit(1);
}, 20000);

async function expectError(promise, want, what) {
  let reply;
  try {
    reply = await promise;
  } catch (e) {
    assert.equal(e.message, want, `${what}: error text`);
    return;
  }
  assert.fail(`${what}: expected error ${JSON.stringify(want)}, got reply ${JSON.stringify(reply)}`);
}

async function main() {
  const p = 'compat:ioredis:';
  // ioredis runs INFO as its ready check before it sends anything else.
  const r = new Redis({
    port, host, lazyConnect: true, maxRetriesPerRequest: 0,
    retryStrategy: () => null, connectTimeout: 5000,
  });
  r.on('error', (e) => { console.error('ioredis connection error:', e.message); });
  await r.connect();
  assert.equal(r.status, 'ready', 'connected and ready');

  assert.equal(await r.ping(), 'PONG', 'PING');
  assert.equal(await r.set(p + 's', 'hello'), 'OK', 'SET');
  assert.equal(await r.get(p + 's'), 'hello', 'GET');
  assert.equal(await r.get(p + 'missing'), null, 'GET missing key');
  await r.del(p + 'n');
  assert.equal(await r.incr(p + 'n'), 1, 'INCR new key');
  assert.equal(await r.incr(p + 'n'), 2, 'INCR');
  assert.equal(await r.incrby(p + 'n', 40), 42, 'INCRBY');
  assert.equal(await r.mset(p + 'a', '1', p + 'b', '2'), 'OK', 'MSET');
  assert.deepEqual(await r.mget(p + 'a', p + 'missing', p + 'b'), ['1', null, '2'], 'MGET');
  assert.equal(await r.expire(p + 'a', 100), 1, 'EXPIRE');
  const ttl = await r.ttl(p + 'a');
  assert.ok(ttl >= 98 && ttl <= 100, `TTL after EXPIRE 100: ${ttl}`);

  // pipeline of 1000 commands, every reply checked
  const pipe = r.pipeline();
  const n = 250;
  for (let i = 0; i < n; i++) {
    const k = `${p}pipe:${i}`;
    pipe.set(k, String(i));
    pipe.incr(k);
    pipe.get(k);
    pipe.del(k);
  }
  const res = await pipe.exec();
  assert.equal(res.length, 4 * n, 'pipeline reply count');
  for (let i = 0; i < n; i++) {
    const got = res.slice(4 * i, 4 * i + 4);
    for (const [err] of got) assert.equal(err, null, `pipeline error for key ${i}: ${err}`);
    assert.deepEqual(got.map(([, v]) => v), ['OK', i + 1, String(i + 1), 1], `pipeline replies for key ${i}`);
  }

  await expectError(r.call('foo', 'bar'),
    "ERR unknown command 'foo', with args beginning with: 'bar' ", 'unknown command');
  await expectError(r.call('get'),
    "ERR wrong number of arguments for 'get' command", 'GET arity');
  await expectError(r.incr(p + 's'), 'ERR value is not an integer or out of range', 'INCR non-integer');
  assert.equal(await r.ping(), 'PONG', 'PING after errors');

  assert.equal(await r.del(p + 's', p + 'n', p + 'a', p + 'b'), 4, 'DEL');
  assert.equal(await r.quit(), 'OK', 'QUIT');
  console.log(`ioredis ${require('ioredis/package.json').version}: OK`);
}

main().then(() => clearTimeout(watchdog), (e) => {
  console.error('ioredis check FAILED:', e && e.message ? e.message : e);
  process.exit(1);
});
