#!/usr/bin/env node
// node-redis (v4) compatibility check for Turnstile.
// Usage: node node_redis_check.js PORT [HOST]
'use strict';

const assert = require('node:assert/strict');
const { createClient } = require('redis');

const port = Number(process.argv[2]);
const host = process.argv[3] || '127.0.0.1';
if (!port) {
  console.error('usage: node node_redis_check.js PORT [HOST]');
  process.exit(2);
}

// A reply that never comes must fail the check, not hang CI.
const watchdog = setTimeout(() => {
  console.error('node-redis check FAILED: timed out after 20 s');
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
  const p = 'compat:noderedis:';
  const c = createClient({
    socket: { port, host, connectTimeout: 5000, reconnectStrategy: false },
    name: 'compat-node-redis', // sent as CLIENT SETNAME during the handshake
  });
  c.on('error', (e) => { console.error('node-redis connection error:', e.message); });
  await c.connect();
  assert.ok(c.isReady, 'connected and ready');

  assert.equal(await c.ping(), 'PONG', 'PING');
  assert.equal(await c.clientGetName(), 'compat-node-redis', 'CLIENT GETNAME after handshake SETNAME');
  assert.equal(await c.set(p + 's', 'hello'), 'OK', 'SET');
  assert.equal(await c.get(p + 's'), 'hello', 'GET');
  assert.equal(await c.get(p + 'missing'), null, 'GET missing key');
  await c.del(p + 'n');
  assert.equal(await c.incr(p + 'n'), 1, 'INCR new key');
  assert.equal(await c.incr(p + 'n'), 2, 'INCR');
  assert.equal(await c.incrBy(p + 'n', 40), 42, 'INCRBY');
  assert.equal(await c.mSet([p + 'a', '1', p + 'b', '2']), 'OK', 'MSET');
  assert.deepEqual(await c.mGet([p + 'a', p + 'missing', p + 'b']), ['1', null, '2'], 'MGET');
  assert.equal(await c.set(p + 'e', 'v', { EX: 100 }), 'OK', 'SET EX');
  const ttl = await c.ttl(p + 'e');
  assert.ok(ttl >= 98 && ttl <= 100, `TTL after SET EX 100: ${ttl}`);

  // pipeline of 1000 commands (no MULTI), every reply checked
  const m = c.multi();
  const n = 250;
  for (let i = 0; i < n; i++) {
    const k = `${p}pipe:${i}`;
    m.set(k, String(i));
    m.incr(k);
    m.get(k);
    m.del(k);
  }
  const res = await m.execAsPipeline();
  assert.equal(res.length, 4 * n, 'pipeline reply count');
  for (let i = 0; i < n; i++) {
    assert.deepEqual(res.slice(4 * i, 4 * i + 4), ['OK', i + 1, String(i + 1), 1], `pipeline replies for key ${i}`);
  }
  // 1000 concurrent commands: node-redis writes them as one pipeline
  const many = await Promise.all(Array.from({ length: 1000 }, (_, i) => c.echo(`m${i}`)));
  many.forEach((v, i) => assert.equal(v, `m${i}`, `auto-pipelined ECHO ${i}`));

  await expectError(c.sendCommand(['foo', 'bar']),
    "ERR unknown command 'foo', with args beginning with: 'bar' ", 'unknown command');
  await expectError(c.sendCommand(['get']),
    "ERR wrong number of arguments for 'get' command", 'GET arity');
  await expectError(c.incr(p + 's'), 'ERR value is not an integer or out of range', 'INCR non-integer');
  assert.equal(await c.ping(), 'PONG', 'PING after errors');

  assert.equal(await c.del([p + 's', p + 'n', p + 'a', p + 'b', p + 'e']), 5, 'DEL');
  assert.equal(await c.quit(), 'OK', 'QUIT');
  console.log(`node-redis ${require('redis/package.json').version}: OK`);
}

main().then(() => clearTimeout(watchdog), (e) => {
  console.error('node-redis check FAILED:', e && e.message ? e.message : e);
  process.exit(1);
});
