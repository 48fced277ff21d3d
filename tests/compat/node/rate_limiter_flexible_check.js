#!/usr/bin/env node
// rate-limiter-flexible 11 RateLimiterRedisNonAtomic (which runs every read and
// write as MULTI ... EXEC: GET+PTTL, SET EX, SET+PEXPIRE; DEL) through ioredis
// and through node-redis v4.
//
// Usage: node rate_limiter_flexible_check.js PORT [HOST] [--against PORT2]
//
// Runs one scenario per client, asserts the outcomes the library documents
// (points 5: seven consumes -> five resolved, two rejected; get, penalty,
// reward, block, set, delete), and prints a JSON summary of every result:
// resolved or rejected, remainingPoints, consumedPoints, isFirstInDuration,
// and msBeforeNext only as whole seconds rounded up (-1 for no expiry, null
// for none), so that two servers can be compared. With --against PORT2 it runs
// the same scenario against PORT2 too (normally a real redis-server) and
// requires both summaries to be equal, printing what differs otherwise.
// Touches only keys under compat:rlf:. Exits non-zero on any failure, and
// after 30 s at the latest.
'use strict';

const assert = require('node:assert/strict');
const { RateLimiterRedisNonAtomic } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const Redis = require('ioredis');

const args = process.argv.slice(2);
let against = null;
const ai = args.indexOf('--against');
if (ai >= 0) {
  against = Number(args[ai + 1]);
  args.splice(ai, 2);
}
const port = Number(args[0]);
const host = args[1] || '127.0.0.1';
if (!port || (ai >= 0 && !against)) {
  console.error('usage: node rate_limiter_flexible_check.js PORT [HOST] [--against PORT2]');
  process.exit(2);
}

const watchdog = setTimeout(() => {
  console.error('rate-limiter-flexible check FAILED: timed out after 30 s');
  process.exit(1);
}, 30000);

const secs = (ms) => (typeof ms !== 'number' ? null : ms < 0 ? -1 : Math.ceil(ms / 1000));

// A RateLimiterRes (or an error, or null) as plain, comparable data.
function describe(outcome, value) {
  if (value instanceof Error) return { outcome: 'error', message: value.message };
  if (value === null || value === undefined) return { outcome, value: null };
  if (typeof value !== 'object') return { outcome, value };
  return {
    outcome,
    remainingPoints: value.remainingPoints,
    consumedPoints: value.consumedPoints,
    isFirstInDuration: value.isFirstInDuration,
    secondsBeforeNext: secs(value.msBeforeNext),
  };
}

async function settle(promise) {
  try {
    return describe('resolved', await promise);
  } catch (e) {
    return describe(e instanceof Error ? 'error' : 'rejected', e);
  }
}

async function scenario(name, storeClient, extra, port) {
  const prefix = `compat:rlf:${name}`;
  const mk = (opts) => new RateLimiterRedisNonAtomic({ storeClient, keyPrefix: prefix, ...extra, ...opts });
  const limiter = mk({ points: 5, duration: 60 });
  const blocking = mk({ keyPrefix: prefix + ':blocking', points: 2, duration: 60, blockDuration: 30 });
  const forever = mk({ keyPrefix: prefix + ':forever', points: 3, duration: 0 });

  // leftovers of an interrupted run
  for (const l of [limiter, blocking, forever]) {
    for (const k of ['user1', 'user2', 'user3', 'user4', 'user5', 'nobody']) await l.delete(k);
  }

  const s = {};
  s.consume7 = [];
  for (let i = 0; i < 7; i++) s.consume7.push(await settle(limiter.consume('user1')));
  s.getAfter7 = await settle(limiter.get('user1'));
  s.getMissing = await settle(limiter.get('nobody'));

  s.penalty3 = await settle(limiter.penalty('user2', 3));
  s.reward2 = await settle(limiter.reward('user2', 2));
  s.consume2 = await settle(limiter.consume('user2', 2));
  s.consume3more = await settle(limiter.consume('user2', 3));
  s.getUser2 = await settle(limiter.get('user2'));

  s.block30 = await settle(limiter.block('user3', 30));
  s.consumeBlocked = await settle(limiter.consume('user3'));
  s.getBlocked = await settle(limiter.get('user3'));

  s.set2forever = await settle(limiter.set('user4', 2, 0));
  s.getSetForever = await settle(limiter.get('user4'));
  s.consumeSetForever = await settle(limiter.consume('user4'));

  s.consumeTooMany = await settle(limiter.consume('user5', 6));

  s.deleteUser1 = await settle(limiter.delete('user1'));
  s.deleteAgain = await settle(limiter.delete('user1'));
  s.getDeleted = await settle(limiter.get('user1'));
  s.consumeAfterDelete = await settle(limiter.consume('user1'));

  // blockDuration: the consume that crosses the limit blocks the key for 30 s
  s.blockingConsume = [];
  for (let i = 0; i < 4; i++) s.blockingConsume.push(await settle(blocking.consume('user1')));
  s.blockingGet = await settle(blocking.get('user1'));

  // duration 0: never expires
  s.foreverConsume = [];
  for (let i = 0; i < 4; i++) s.foreverConsume.push(await settle(forever.consume('user1')));
  s.foreverGet = await settle(forever.get('user1'));

  // the outcomes the library documents, whatever the server
  const where = `${name} on port ${port}`;
  const outcomes = s.consume7.map((r) => r.outcome);
  assert.deepEqual(outcomes, ['resolved', 'resolved', 'resolved', 'resolved', 'resolved', 'rejected', 'rejected'],
    `${where}: seven consumes of points 5`);
  assert.deepEqual(s.consume7.map((r) => r.consumedPoints), [1, 2, 3, 4, 5, 6, 7], `${where}: consumedPoints`);
  assert.deepEqual(s.consume7.map((r) => r.remainingPoints), [4, 3, 2, 1, 0, 0, 0], `${where}: remainingPoints`);
  assert.deepEqual(s.consume7.map((r) => r.secondsBeforeNext), [60, 60, 60, 60, 60, 60, 60], `${where}: seconds before next`);
  assert.equal(s.consume7[0].isFirstInDuration, true, `${where}: first consume is first in duration`);
  assert.deepEqual([s.getAfter7.consumedPoints, s.getAfter7.remainingPoints], [7, 0], `${where}: get after 7`);
  assert.deepEqual(s.getMissing, { outcome: 'resolved', value: null }, `${where}: get of a missing key`);
  assert.equal(s.penalty3.consumedPoints, 3, `${where}: penalty 3`);
  assert.equal(s.reward2.consumedPoints, 1, `${where}: reward 2`);
  assert.deepEqual([s.consume2.outcome, s.consume2.consumedPoints, s.consume2.remainingPoints], ['resolved', 3, 2],
    `${where}: consume 2 after penalty and reward`);
  assert.deepEqual([s.consume3more.outcome, s.consume3more.consumedPoints], ['rejected', 6], `${where}: consume past the limit`);
  assert.deepEqual([s.block30.outcome, s.block30.consumedPoints, s.block30.secondsBeforeNext], ['resolved', 6, 30],
    `${where}: block 30 s`);
  assert.deepEqual([s.consumeBlocked.outcome, s.consumeBlocked.consumedPoints, s.consumeBlocked.secondsBeforeNext],
    ['rejected', 7, 30], `${where}: consume of a blocked key`);
  assert.deepEqual([s.getSetForever.consumedPoints, s.getSetForever.secondsBeforeNext], [2, -1], `${where}: set without expiry`);
  assert.deepEqual([s.consumeSetForever.outcome, s.consumeSetForever.consumedPoints], ['resolved', 3], `${where}: consume after set`);
  assert.deepEqual([s.consumeTooMany.outcome, s.consumeTooMany.consumedPoints], ['rejected', 6], `${where}: consume 6 of 5`);
  assert.deepEqual([s.deleteUser1.value, s.deleteAgain.value], [true, false], `${where}: delete, delete again`);
  assert.deepEqual(s.getDeleted, { outcome: 'resolved', value: null }, `${where}: get after delete`);
  assert.deepEqual([s.consumeAfterDelete.outcome, s.consumeAfterDelete.consumedPoints], ['resolved', 1], `${where}: consume after delete`);
  assert.deepEqual(s.blockingConsume.map((r) => [r.outcome, r.consumedPoints, r.secondsBeforeNext]),
    [['resolved', 1, 60], ['resolved', 2, 60], ['rejected', 3, 30], ['rejected', 4, 30]], `${where}: blockDuration 30`);
  assert.deepEqual(s.foreverConsume.map((r) => [r.outcome, r.consumedPoints, r.secondsBeforeNext]),
    [['resolved', 1, -1], ['resolved', 2, -1], ['resolved', 3, -1], ['rejected', 4, -1]], `${where}: duration 0`);

  for (const l of [limiter, blocking, forever]) {
    for (const k of ['user1', 'user2', 'user3', 'user4', 'user5']) await l.delete(k);
  }
  return s;
}

async function runAll(port) {
  const io = new Redis({
    port, host, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 5000,
  });
  io.on('error', (e) => { console.error(`ioredis connection error (port ${port}):`, e.message); });
  await io.connect();
  const nr = createClient({ socket: { port, host, connectTimeout: 5000, reconnectStrategy: false } });
  nr.on('error', (e) => { console.error(`node-redis connection error (port ${port}):`, e.message); });
  await nr.connect();
  try {
    return {
      ioredis: await scenario('ioredis', io, {}, port),
      // node-redis v4 takes options objects (SET k v {EX}) and camelCase
      // methods (pTTL, pExpire): the library needs useRedisPackage for it
      'node-redis': await scenario('node-redis', nr, { useRedisPackage: true }, port),
    };
  } finally {
    io.disconnect();
    await nr.quit();
  }
}

// Lines that differ between two JSON renderings, with their paths.
function differences(a, b, path = '') {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    return keys.flatMap((k) => differences(a[k], b[k], path ? `${path}.${k}` : k));
  }
  return [`${path}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`];
}

(async () => {
  try {
    const summary = await runAll(port);
    if (against === null) {
      console.log(JSON.stringify(summary, null, 1));
      console.log(`rate-limiter-flexible (ioredis, node-redis) on port ${port}: OK`);
    } else {
      const oracle = await runAll(against);
      const diff = differences(summary, oracle);
      if (diff.length) {
        console.error(`rate-limiter-flexible summaries differ: port ${port} vs port ${against}:`);
        for (const d of diff) console.error('  ' + d);
        process.exit(1);
      }
      const n = JSON.stringify(summary).split('"outcome"').length - 1;
      console.log(`rate-limiter-flexible (ioredis, node-redis): port ${port} and port ${against} gave equal summaries (${n} results)`);
    }
  } catch (e) {
    console.error('rate-limiter-flexible check FAILED:', e && e.stack ? e.stack : e);
    process.exit(1);
  }
  clearTimeout(watchdog);
})();
