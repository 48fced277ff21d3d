#!/usr/bin/env node
// The Node limiter libraries that keep their limiter in Lua, run unchanged
// against two servers (Turnstile and redis-server) with the same scenario;
// prints a JSON summary per server and exits non-zero if an outcome the
// library documents is not met or the two summaries differ.
//
//   node node_libs.js --a PORT --b PORT [--host H]
//
// - rate-limiter-flexible RateLimiterRedis (the atomic one: EVAL/EVALSHA of
//   SET NX EX, INCRBY, PTTL, EXPIRE) through ioredis 6 and node-redis 6, both
//   at their defaults (RESP3 where they negotiate it): consume x7 with 5
//   points, get, penalty, reward, block, delete. msBeforeNext is compared
//   in whole seconds rounded up.
// - express-rate-limit with rate-limit-redis (SCRIPT LOAD at start, then
//   EVALSHA), a real Express app on an ephemeral port, through node-redis
//   and through ioredis: 5 per minute, 5 x 200 then 429, and the
//   RateLimit headers' remaining counts.
// Keys under compat:libs:node:. Exits after 60 s at the latest.
'use strict';

const assert = require('node:assert/strict');
const http = require('node:http');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { createClient } = require('redis');
const Redis = require('ioredis');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const portA = Number(opt('--a'));
const portB = Number(opt('--b'));
const host = opt('--host', '127.0.0.1');
if (!portA || !portB) {
  console.error('usage: node node_libs.js --a PORT --b PORT [--host H]');
  process.exit(2);
}
const PREFIX = 'compat:libs:node:';
setTimeout(() => {
  console.error('node libs FAILED: timed out after 60 s');
  process.exit(1);
}, 60_000).unref();

const secs = (ms) => (ms === undefined || ms === null ? null : Math.ceil(ms / 1000));
const summary = (r) => r && ({
  remaining: r.remainingPoints,
  consumed: r.consumedPoints,
  first: r.isFirstInDuration,
  secs: secs(r.msBeforeNext),
});

async function flexible(clientKind, port) {
  let client;
  if (clientKind === 'ioredis') {
    client = new Redis({ host, port, enableOfflineQueue: true, lazyConnect: false });
  } else {
    client = createClient({ socket: { host, port } });
    await client.connect();
  }
  const limiter = new RateLimiterRedis({
    storeClient: client,
    useRedisPackage: clientKind === 'node-redis',
    keyPrefix: PREFIX + 'rlf:' + clientKind,
    points: 5,
    duration: 60,
  });
  const out = { consume: [] };
  await limiter.delete('user');
  for (let i = 0; i < 7; i++) {
    try {
      out.consume.push(['resolved', summary(await limiter.consume('user'))]);
    } catch (r) {
      if (r instanceof Error) throw r;
      out.consume.push(['rejected', summary(r)]);
    }
  }
  out.get = summary(await limiter.get('user'));
  await limiter.delete('user');
  out.penalty = summary(await limiter.penalty('user', 2));
  out.reward = summary(await limiter.reward('user', 1));
  out.block = summary(await limiter.block('blocked', 30));
  try {
    await limiter.consume('blocked');
    out.blockedConsume = 'resolved';
  } catch (r) {
    if (r instanceof Error) throw r;
    out.blockedConsume = ['rejected', secs(r.msBeforeNext)];
  }
  out.deleted = await limiter.delete('blocked');
  out.afterDelete = summary(await limiter.get('blocked'));
  assert.deepEqual(out.consume.map((c) => c[0]),
    ['resolved', 'resolved', 'resolved', 'resolved', 'resolved', 'rejected', 'rejected']);
  assert.equal(out.deleted, true);
  await (clientKind === 'ioredis' ? client.quit() : client.quit());
  return out;
}

async function expressApp(clientKind, port) {
  let client;
  let sendCommand;
  if (clientKind === 'ioredis') {
    client = new Redis({ host, port });
    sendCommand = (command, ...args) => client.call(command, ...args);
  } else {
    client = createClient({ socket: { host, port } });
    await client.connect();
    sendCommand = (...args) => client.sendCommand(args);
  }
  const app = express();
  app.use(rateLimit({
    windowMs: 60_000,
    limit: 5,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    store: new RedisStore({ sendCommand, prefix: PREFIX + 'erl:' + clientKind + ':' }),
  }));
  app.get('/', (_req, res) => res.send('ok'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const { port: httpPort } = server.address();
  const get = () => new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port: httpPort, path: '/' }, (res) => {
      res.resume();
      res.on('end', () => resolve([res.statusCode, res.headers.ratelimit || null]));
    }).on('error', reject);
  });
  const out = [];
  for (let i = 0; i < 7; i++) out.push(await get());
  server.close();
  await client.quit();
  const codes = out.map((r) => r[0]);
  assert.deepEqual(codes, [200, 200, 200, 200, 200, 429, 429]);
  // "limit=5, remaining=4, reset=60": the reset is time, not compared.
  return out.map(([code, h]) => [code, h && h.replace(/,? ?reset=\d+/, '')]);
}

async function run(name, fn) {
  const results = {};
  for (const [label, port] of [['a', portA], ['b', portB]]) {
    try {
      results[label] = await fn(port);
    } catch (e) {
      results[label] = { FAILED: String(e && e.stack || e) };
    }
  }
  const a = JSON.stringify(results.a);
  const b = JSON.stringify(results.b);
  const ok = a === b && !('FAILED' in results.a) && !('FAILED' in results.b);
  console.log(`--- ${name}: ${ok ? 'passed' : 'FAILED'}`);
  console.log('    a:', a);
  if (!ok) console.log('    b:', b);
  return ok;
}

(async () => {
  let ok = true;
  for (const kind of ['ioredis', 'node-redis']) {
    ok = (await run(`rate-limiter-flexible RateLimiterRedis (${kind})`, (p) => flexible(kind, p))) && ok;
    ok = (await run(`express-rate-limit + rate-limit-redis (${kind})`, (p) => expressApp(kind, p))) && ok;
  }
  process.exit(ok ? 0 : 1);
})();
