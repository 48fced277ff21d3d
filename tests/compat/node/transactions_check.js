#!/usr/bin/env node
// MULTI/EXEC/WATCH through node-redis v4 and ioredis.
// Usage: node transactions_check.js PORT [HOST]
// Touches only keys under compat:tx:node:; exits non-zero on the first failed
// assertion, and after 30 s at the latest.
'use strict';

const assert = require('node:assert/strict');
const { createClient, WatchError, MultiErrorReply } = require('redis');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const host = process.argv[3] || '127.0.0.1';
if (!port) {
  console.error('usage: node transactions_check.js PORT [HOST]');
  process.exit(2);
}

const watchdog = setTimeout(() => {
  console.error('node transactions check FAILED: timed out after 30 s');
  process.exit(1);
}, 30000);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Resolves to the error a promise rejects with; fails if it resolves.
async function rejection(promise, what) {
  let reply;
  try {
    reply = await promise;
  } catch (e) {
    return e;
  }
  assert.fail(`${what}: expected an error, got reply ${JSON.stringify(reply)}`);
}

async function nodeRedis() {
  const p = 'compat:tx:node:nr:';
  const mk = () => {
    const c = createClient({ socket: { port, host, connectTimeout: 5000, reconnectStrategy: false } });
    c.on('error', (e) => { console.error('node-redis connection error:', e.message); });
    return c;
  };
  const c = mk();
  const other = mk();
  await c.connect();
  await other.connect();
  await c.del([p + 'k', p + 'n', p + 'w', p + 's', p + 'q', p + 'q2', p + 'x']);

  // multi ... exec: every reply, transformed by node-redis
  const res = await c.multi()
    .set(p + 'k', 'v')
    .get(p + 'k')
    .incr(p + 'n')
    .incrBy(p + 'n', 10)
    .expire(p + 'n', 100)
    .ttl(p + 'n')
    .mGet([p + 'k', p + 'missing'])
    .exists([p + 'k', p + 'n', p + 'missing'])
    .get(p + 'missing')
    .ping()
    .exec();
  assert.deepEqual(res, ['OK', 'v', 1, 11, true, 100, ['v', null], 2, null, 'PONG'],
    'node-redis multi().exec() replies');

  // an empty multi
  assert.deepEqual(await c.multi().exec(), [], 'node-redis empty multi().exec()');

  // a run-time error inside EXEC: MultiErrorReply with the replies in place
  await c.set(p + 's', 'notanumber');
  const rt = await rejection(c.multi().incr(p + 'n').incr(p + 's').incr(p + 'n').exec(),
    'node-redis run-time error in EXEC');
  assert.ok(rt instanceof MultiErrorReply, `run-time error type: ${rt && rt.constructor.name}`);
  assert.deepEqual(rt.errorIndexes, [1], 'run-time error index');
  assert.equal(rt.replies[0], 12, 'reply before the run-time error');
  assert.equal(rt.replies[1].message, 'ERR value is not an integer or out of range',
    'the run-time error in place');
  assert.equal(rt.replies[2], 13, 'reply after the run-time error');

  // a queue-time error: nothing written
  await c.set(p + 'q', 'before');
  const qe = await rejection(
    c.multi().set(p + 'q', 'after').addCommand(['NOSUCHCOMMAND', 'x']).set(p + 'q2', 'x').exec(),
    'node-redis queue-time error');
  assert.equal(qe.message, 'EXECABORT Transaction discarded because of previous errors.',
    'node-redis queue-time error text');
  assert.equal(await c.get(p + 'q'), 'before', 'node-redis aborted transaction left the key');
  assert.equal(await c.exists(p + 'q2'), 0, 'node-redis aborted transaction created no key');
  assert.deepEqual(await c.multi().set(p + 'q', 'after').get(p + 'q').exec(), ['OK', 'after'],
    'node-redis transaction after an aborted one');

  // watch, another client writes: WatchError
  await c.set(p + 'w', '1');
  const we = await rejection(c.executeIsolated(async (iso) => {
    await iso.watch(p + 'w');
    const cur = await iso.get(p + 'w');
    await other.set(p + 'w', 'changed');
    return iso.multi().set(p + 'w', cur + '+mine').exec();
  }), 'node-redis watch then another client writes');
  assert.ok(we instanceof WatchError, `expected WatchError, got ${we && we.constructor.name}: ${we && we.message}`);
  assert.equal(await c.get(p + 'w'), 'changed', 'node-redis aborted watch transaction wrote nothing');

  // watch, nobody writes: runs
  const ok = await c.executeIsolated(async (iso) => {
    await iso.watch(p + 'w');
    const cur = await iso.get(p + 'w');
    return iso.multi().set(p + 'w', cur + '+mine').exec();
  });
  assert.deepEqual(ok, ['OK'], 'node-redis watch without interference');
  assert.equal(await c.get(p + 'w'), 'changed+mine', 'node-redis value after the watched transaction');

  // watch, then unwatch, another client writes: runs
  const un = await c.executeIsolated(async (iso) => {
    await iso.watch(p + 'w');
    await other.del(p + 'w');
    assert.equal(await iso.unwatch(), 'OK', 'UNWATCH reply');
    return iso.multi().set(p + 'w', 'x').exec();
  });
  assert.deepEqual(un, ['OK'], 'node-redis transaction after UNWATCH');

  await c.del([p + 'k', p + 'n', p + 'w', p + 's', p + 'q', p + 'q2']);
  await c.quit();
  await other.quit();
  console.log('node-redis transactions: OK');
}

async function ioredis() {
  const p = 'compat:tx:node:io:';
  const mk = () => {
    const r = new Redis({
      port, host, lazyConnect: true, maxRetriesPerRequest: 0,
      retryStrategy: () => null, connectTimeout: 5000,
    });
    r.on('error', (e) => { console.error('ioredis connection error:', e.message); });
    return r;
  };
  const r = mk();
  const other = mk();
  await r.connect();
  await other.connect();
  await r.del(p + 'k', p + 'n', p + 'w', p + 's', p + 'q', p + 'q2');

  // multi ... exec: [[err, reply], ...]
  const res = await r.multi()
    .set(p + 'k', 'v')
    .get(p + 'k')
    .incr(p + 'n')
    .incrby(p + 'n', 10)
    .expire(p + 'n', 100)
    .ttl(p + 'n')
    .mget(p + 'k', p + 'missing')
    .get(p + 'missing')
    .exec();
  assert.deepEqual(res, [[null, 'OK'], [null, 'v'], [null, 1], [null, 11], [null, 1], [null, 100],
    [null, ['v', null]], [null, null]], 'ioredis multi().exec() results');

  // a run-time error inside EXEC stays in place
  await r.set(p + 's', 'notanumber');
  const rt = await r.multi().incr(p + 'n').incr(p + 's').incr(p + 'n').exec();
  assert.equal(rt.length, 3, 'ioredis run-time error: result count');
  assert.deepEqual(rt[0], [null, 12], 'ioredis reply before the run-time error');
  assert.ok(rt[1][0] instanceof Error, `ioredis run-time error in place: ${JSON.stringify(rt[1])}`);
  assert.equal(rt[1][0].message, 'ERR value is not an integer or out of range', 'ioredis run-time error text');
  assert.deepEqual(rt[2], [null, 13], 'ioredis reply after the run-time error');

  // a queue-time error: EXECABORT, with the queue error in previousErrors, nothing written
  await r.set(p + 'q', 'before');
  const qe = await rejection(
    r.multi().set(p + 'q', 'after').call('NOSUCHCOMMAND', 'x').set(p + 'q2', 'x').exec(),
    'ioredis queue-time error');
  assert.equal(qe.message, 'EXECABORT Transaction discarded because of previous errors.',
    'ioredis EXECABORT text');
  assert.ok(Array.isArray(qe.previousErrors) && qe.previousErrors.length === 1,
    `ioredis previousErrors: ${JSON.stringify(qe.previousErrors)}`);
  assert.match(qe.previousErrors[0].message, /^ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'x' ?$/,
    'ioredis queue-time error text');
  assert.equal(await r.get(p + 'q'), 'before', 'ioredis aborted transaction left the key');
  assert.equal(await r.exists(p + 'q2'), 0, 'ioredis aborted transaction created no key');

  // a wrong-arity queue-time error
  const ae = await rejection(r.multi().set(p + 'q', 'after').call('GET').exec(), 'ioredis wrong arity');
  assert.equal(ae.message, 'EXECABORT Transaction discarded because of previous errors.', 'ioredis wrong arity EXECABORT');
  assert.equal(ae.previousErrors[0].message, "ERR wrong number of arguments for 'get' command",
    'ioredis wrong arity error text');
  assert.equal(await r.get(p + 'q'), 'before', 'ioredis wrong-arity transaction left the key');

  // watch, another client writes: exec resolves to null
  await r.set(p + 'w', '1');
  assert.equal(await r.watch(p + 'w'), 'OK', 'ioredis WATCH');
  await other.set(p + 'w', 'changed');
  assert.equal(await r.multi().set(p + 'w', 'mine').exec(), null, 'ioredis watched exec after a write');
  assert.equal(await r.get(p + 'w'), 'changed', 'ioredis aborted watch transaction wrote nothing');

  // watch, the key expires: null
  await r.set(p + 'w', 'short', 'PX', 50);
  await r.watch(p + 'w');
  await sleep(150);
  assert.equal(await r.multi().set(p + 'q2', 'x').exec(), null, 'ioredis watched exec after expiry');
  assert.equal(await r.exists(p + 'q2'), 0, 'ioredis expiry-aborted transaction wrote nothing');

  // watch, nobody writes: runs
  await r.watch(p + 'w');
  assert.deepEqual(await r.multi().set(p + 'w', 'mine').exec(), [[null, 'OK']], 'ioredis watched exec');

  await r.del(p + 'k', p + 'n', p + 'w', p + 's', p + 'q', p + 'q2');
  await r.quit();
  await other.quit();
  console.log('ioredis transactions: OK');
}

(async () => {
  try {
    await nodeRedis();
    await ioredis();
  } catch (e) {
    console.error('node transactions check FAILED:', e && e.stack ? e.stack : e);
    process.exit(1);
  }
  clearTimeout(watchdog);
})();
