#!/usr/bin/env node
// ioredis side of tests/compat/sentinel/failover.py: decides limits through
// Sentinel (`new Redis({sentinels, name})`) in a paced loop and reports.
//
//     node ioredis_loop.js --server redis|turnstile --sentinels P1,P2,P3
//         [--name turnstile] [--prefix fo:js:] [--keys 5] [--limit 2000] [--rate 400]
//
// stdout: one JSON line per event, bounded:
//   {"type":"tick", ...}     cumulative counts, every 200 ms
//   {"type":"summary", ...}  once, at the end
// stdin: a line `kill T_KILL_MS T_DEAD_MS` (wall clock, ms since the epoch,
// Python's time.time() * 1000: when the primary was sent SIGKILL and when
// it was reaped) says when the failover began. Every time here is wall
// clock too (performance.timeOrigin + performance.now(), sub-ms), so the
// two processes compare times directly. The summary then carries the
// failover time (first decision answered whose request was sent after
// T_DEAD, minus T_KILL) and the admissions of the 1000 ms before T_KILL.
// The loop stops when stdin closes, or on SIGTERM/SIGINT.
//
// Errors (connection lost, no master yet, READONLY from a replica, a
// command timing out) are counted; the loop then waits 50 ms and retries.
// ioredis's hidden retries are off so that every decision the server
// counted is one the loop saw or failed: no offline queue (a command sent
// while reconnecting fails at once) and no resend of commands in flight
// when the connection dropped.
"use strict";

const path = require("path");
const { performance } = require("perf_hooks");
const Redis = require(path.join(__dirname, "..", "node", "node_modules", "ioredis"));

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) {
    if (dflt === undefined) {
      process.stderr.write(`ioredis_loop.js: --${name} is required\n`);
      process.exit(2);
    }
    return dflt;
  }
  return process.argv[i + 1];
}

const SERVER = arg("server");
const SENTINELS = arg("sentinels").split(",").map((p) => ({ host: "127.0.0.1", port: Number(p) }));
const NAME = arg("name", "turnstile");
const PREFIX = arg("prefix", "fo:js:");
const NKEYS = Number(arg("keys", "5"));
const LIMIT = Number(arg("limit", "2000"));
const RATE = Number(arg("rate", "400"));
const KEYS = Array.from({ length: NKEYS }, (_, i) => `${PREFIX}${i}`);

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The decision, per kind of server (the same drivers as failover.py's).
const DRIVERS = {
  // RL.ALLOW key limit period ALGO fixed -> [allowed, limit, remaining, retry_after_ms, reset_after_ms]
  turnstile: async (redis, key) => {
    const reply = await redis.call("RL.ALLOW", key, LIMIT, "1h", "ALGO", "fixed");
    if (!Array.isArray(reply) || reply.length !== 5) throw new Error(`bad RL.ALLOW reply ${JSON.stringify(reply)}`);
    return Number(reply[0]) === 1;
  },
  // Real Redis, for dry runs: INCR, admitted while the count is within the limit.
  redis: async (redis, key) => (await redis.incr(key)) <= LIMIT,
};
const decide = DRIVERS[SERVER];
if (!decide) {
  process.stderr.write(`ioredis_loop.js: unknown --server ${SERVER}\n`);
  process.exit(2);
}

const redis = new Redis({
  sentinels: SENTINELS,
  name: NAME,
  role: "master",
  sentinelRetryStrategy: () => 50,
  retryStrategy: () => 50, // reconnect (asking the Sentinels again) every 50 ms
  connectTimeout: 1000,
  commandTimeout: 500, // as redis-py's socket_timeout=0.5
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  maxRetriesPerRequest: 0,
});

const admitted = Object.fromEntries(KEYS.map((k) => [k, 0]));
const denied = Object.fromEntries(KEYS.map((k) => [k, 0]));
const admittedAt = Object.fromEntries(KEYS.map((k) => [k, []])); // [start, end] of each admission
const successes = []; // [start, end] of every answered decision
let ok = 0;
let okAfterKill = 0;
let errors = 0;
let connErrors = 0;
let lastError = null;
const errorKinds = {};
let kill = null; // {kill, dead} wall ms
let stopping = false;

redis.on("error", (e) => {
  connErrors += 1;
  lastError = String(e && e.message);
});

function tick() {
  return {
    type: "tick",
    t: now(),
    status: redis.status,
    ok,
    ok_after_kill: okAfterKill,
    errors,
    conn_errors: connErrors,
    admitted,
    denied,
    last_error: lastError,
  };
}

function summary() {
  const s = tick();
  s.type = "summary";
  s.error_kinds = errorKinds;
  if (kill) {
    const first = successes.find(([start]) => start >= kill.dead);
    s.failover_ms = first ? first[1] - kill.kill : null;
    // Admissions that a replica may not have had when the primary died:
    // those answered in the 1000 ms before the kill (or in flight at it).
    s.lag_window = Object.fromEntries(
      KEYS.map((k) => [k, admittedAt[k].filter(([st, en]) => st < kill.kill && en >= kill.kill - 1000).length]),
    );
  }
  s.ok_before_kill = successes.filter(([, end]) => !kill || end < kill.kill).length;
  return s;
}

async function loop() {
  const interval = 1000 / RATE;
  let next = now();
  let i = 0;
  while (!stopping) {
    const key = KEYS[i % KEYS.length];
    i += 1;
    const start = now();
    let verdict;
    try {
      verdict = await decide(redis, key);
    } catch (e) {
      errors += 1;
      const msg = String(e && e.message);
      lastError = msg;
      const kind = msg.split(/[ :]/)[0] || "?";
      errorKinds[kind] = (errorKinds[kind] || 0) + 1;
      await sleep(50);
      next = now();
      continue;
    }
    const end = now();
    ok += 1;
    if (kill && start >= kill.dead) okAfterKill += 1;
    successes.push([start, end]);
    if (verdict) {
      admitted[key] += 1;
      admittedAt[key].push([start, end]);
    } else {
      denied[key] += 1;
    }
    next += interval;
    const wait = next - now();
    if (wait > 0) await sleep(wait);
    else if (wait < -50) next = now(); // fell behind (an outage): no burst to catch up
  }
}

const ticker = setInterval(() => process.stdout.write(JSON.stringify(tick()) + "\n"), 200);

let stdinBuf = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  stdinBuf += chunk;
  let nl;
  while ((nl = stdinBuf.indexOf("\n")) >= 0) {
    const line = stdinBuf.slice(0, nl).trim();
    stdinBuf = stdinBuf.slice(nl + 1);
    const m = /^kill (\S+) (\S+)$/.exec(line);
    if (m) kill = { kill: Number(m[1]), dead: Number(m[2]) };
  }
});
process.stdin.on("end", () => { stopping = true; });
process.stdin.on("error", () => { stopping = true; });
process.on("SIGTERM", () => { stopping = true; });
process.on("SIGINT", () => { stopping = true; });

const done = loop();
// A hard bound of its own: never outlive a lost parent for long.
const bound = setTimeout(() => { stopping = true; }, 300000);
done.then(() => {
  clearInterval(ticker);
  clearTimeout(bound);
  process.stdout.write(JSON.stringify(summary()) + "\n", () => {
    redis.disconnect();
    process.exit(0);
  });
});
