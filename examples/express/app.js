'use strict';
// A small Express app wired to Turnstile. Run it with `node app.js` (see
// ../README.md for the environment variables); test.js builds it with
// createApp() against a running Turnstile.

const express = require('express');
const Redis = require('ioredis');
const { rateLimit, rateLimitMany, concurrencyLimit } = require('./middleware');

const IOREDIS_MAJOR = Number(require('ioredis/package.json').version.split('.')[0]);

// An ioredis client suited to a limiter in the request path: never queue
// commands while disconnected (a request should get a decision or fail fast,
// not wait for a reconnect), and bound every command's time.
//
// protocol: 2 or 3 (RESP2 / RESP3), or undefined for the client's default
// (ioredis 6: RESP3; ioredis 5: RESP2, the only one it speaks). The limiter
// replies are the same array in both, so the middleware works either way.
function createClient(url = process.env.TURNSTILE_URL || 'redis://127.0.0.1:6379',
  { protocol = process.env.TURNSTILE_PROTOCOL ? Number(process.env.TURNSTILE_PROTOCOL) : undefined } = {}) {
  if (protocol !== undefined && protocol !== 2 && protocol !== 3) throw new TypeError(`protocol must be 2 or 3, got ${protocol}`);
  if (protocol === 3 && IOREDIS_MAJOR < 6) {
    // ioredis 5 ignores an unknown `protocol` option and would quietly speak RESP2.
    throw new Error(`ioredis ${require('ioredis/package.json').version} cannot speak RESP3 (ioredis 6 can)`);
  }
  const client = new Redis(url, {
    ...(protocol !== undefined && IOREDIS_MAJOR >= 6 ? { protocol } : {}),
    lazyConnect: true,           // connect() below, so startup can wait for "ready"
    enableOfflineQueue: false,   // while disconnected, commands fail at once
    maxRetriesPerRequest: 0,     // a command lost with its connection is not replayed
    commandTimeout: Number(process.env.TURNSTILE_TIMEOUT_MS || 250),
    connectTimeout: 1000,
    retryStrategy: (times) => Math.min(times * 100, 2000), // keep reconnecting in the background
  });
  // Without a listener ioredis logs every failed reconnect as an unhandled error.
  client.on('error', () => {});
  return client;
}

// What /api/export does: a slow job (here, a wait). Tests pass their own.
const defaultExport = () => new Promise((resolve) => setTimeout(resolve, 200));

function createApp({ redis, prefix = 'rl:', limit = 10, period = 60, ipLimit = 20, userLimit = 100,
  concurrency = 2, leaseTtl = '30s', exportJob = defaultExport, failClosed = false, onError, logger } = {}) {
  const app = express();
  // Behind one trusted proxy on loopback, req.ip is the X-Forwarded-For client.
  app.set('trust proxy', 'loopback');

  // Each route gets its own key space: two policies on the same Turnstile key
  // would share (and fight over) one counter.
  const common = { redis, failClosed, onError, logger };

  // One limit per client: the (hashed) X-Api-Key, else the IP.
  app.get('/api/hello', rateLimit({ ...common, prefix: `${prefix}hello:`, limit, period }), (req, res) => {
    res.json({ hello: 'world' });
  });

  // A costlier endpoint: each call consumes 5 units, using GCRA.
  app.get('/api/report', rateLimit({ ...common, prefix: `${prefix}report:`, name: 'reports', limit, period, algo: 'gcra',
    cost: 5, key: (req) => `ip:${req.ip}` }), (req, res) => {
    res.json({ report: 'ok' });
  });

  // Per-user AND per-IP at once with RL.ALLOWMANY. The user would normally
  // come from authentication; here it is the X-User-Id header.
  app.get('/api/many', rateLimitMany({
    ...common,
    prefix: `${prefix}many:`,
    limits: [
      { name: 'user', key: (req) => (req.get('x-user-id') ? `user:${req.get('x-user-id')}` : null), limit: userLimit, period },
      { name: 'ip', key: (req) => `ip:${req.ip}`, limit: ipLimit, period },
    ],
  }), (req, res) => {
    res.json({ user: req.get('x-user-id') || null });
  });

  // A slow endpoint capped by requests in flight, not per period: at most
  // `concurrency` exports at once per client (RL.ACQUIRE, released when the
  // response ends, however it ends).
  const inFlight = concurrencyLimit({ ...common, prefix: `${prefix}export:`, name: 'exports', limit: concurrency,
    ttl: leaseTtl, key: (req) => `ip:${req.ip}` });
  app.get('/api/export', inFlight, async (req, res) => {
    await exportJob(req);
    res.json({ export: 'done' });
  });

  return app;
}

async function main() {
  const redis = createClient();
  try {
    await redis.connect();
  } catch (err) {
    // Fail-open default: serve anyway; the client keeps reconnecting.
    console.warn(`turnstile not reachable yet (${err.message}); serving without limits until it is`);
  }
  const app = createApp({
    redis,
    limit: Number(process.env.LIMIT || 10),
    period: process.env.PERIOD || 60,
    failClosed: process.env.FAIL_CLOSED === '1',
  });
  const port = Number(process.env.PORT || 3000);
  app.listen(port, () => console.log(`example listening on http://127.0.0.1:${port}`));
}

if (require.main === module) main();

module.exports = { createApp, createClient, IOREDIS_MAJOR };
