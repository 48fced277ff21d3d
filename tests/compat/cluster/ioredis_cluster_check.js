#!/usr/bin/env node
// ioredis `Cluster` against a three-node Turnstile cluster.
//
// Usage: node ioredis_cluster_check.js live|down HOST P1 P2 P3
//
// live: RL.ALLOW on many keys through the Cluster client (ioredis does not
// know RL.* commands, so it sends them to some node and follows the MOVED it
// gets back): every key admits exactly its limit, the keys are spread over
// all three nodes; RL.ALLOWMANY with hash tags is all-or-nothing; keys in two
// slots answer CROSSSLOT.
// down: the node on P3 was killed; a fresh Cluster client still gets answers
// for keys of the live nodes, and an error (not a hang) for the dead node's.
//
// ioredis is taken from $IOREDIS, else tests/compat/node/node_modules/ioredis
// (`npm ci` there pins ioredis 5.8.2).
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');

const IOREDIS = path.resolve(process.env.IOREDIS || path.join(__dirname, '..', 'node', 'node_modules', 'ioredis'));
const Redis = require(IOREDIS);
// ioredis's own slot function (its dependency), to know which node owns a key.
const keySlot = require(require.resolve('cluster-key-slot', { paths: [IOREDIS] }));

const [mode, host, ...portArgs] = process.argv.slice(2);
const ports = portArgs.map(Number);
if (!['live', 'down'].includes(mode) || !host || ports.length !== 3 || ports.some((p) => !p)) {
  console.error('usage: node ioredis_cluster_check.js live|down HOST P1 P2 P3');
  process.exit(2);
}
const RUN = `${process.pid}.${Date.now()}`;

// A reply that never comes must fail the check, not hang CI.
const watchdog = setTimeout(() => {
  console.error(`ioredis cluster check FAILED (${mode}): timed out after 60 s`);
  process.exit(1);
}, 60000);

function cluster(startPorts) {
  const c = new Redis.Cluster(startPorts.map((port) => ({ host, port })), {
    // ioredis's ready check sends CLUSTER INFO to a random known node, which
    // may be the dead one: retry the cluster connection a few times (as the
    // default strategy does, but not for ever).
    clusterRetryStrategy: (times) => (times > 20 ? null : 100),
    maxRedirections: 16,
    retryDelayOnFailover: 50,
    retryDelayOnClusterDown: 50,
    slotsRefreshTimeout: 2000,
    redisOptions: {
      connectTimeout: 2000,
      maxRetriesPerRequest: 1,
      retryStrategy: () => null,
    },
  });
  c.on('error', () => {}); // reported through the commands that fail
  return c;
}

// A plain connection to one node, for CLUSTER SLOTS / DBSIZE / exact errors.
async function plain(port) {
  const r = new Redis({ host, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000 });
  r.on('error', () => {});
  await r.connect();
  return r;
}

async function ranges(port) {
  const r = await plain(port);
  const slots = await r.call('CLUSTER', 'SLOTS');
  r.disconnect();
  for (const e of slots) {
    assert.equal(e.length, 3, `CLUSTER SLOTS entry ${JSON.stringify(e)}`);
    assert.equal(e[2].length, 4, `CLUSTER SLOTS node ${JSON.stringify(e[2])}`);
  }
  return slots.map((e) => [e[0], e[1], Number(e[2][1])]);
}

function ownerOf(rs, key) {
  const slot = keySlot(key);
  const r = rs.find(([a, b]) => slot >= a && slot <= b);
  assert.ok(r, `no owner for slot ${slot} of ${key}`);
  return r[2];
}

async function dbsizes() {
  const out = {};
  for (const p of ports) {
    const r = await plain(p);
    out[p] = await r.dbsize();
    r.disconnect();
  }
  return out;
}

async function live() {
  const rs = await ranges(ports[0]);
  assert.deepEqual(rs.map((r) => r[2]), ports, 'CLUSTER SLOTS owners');
  const c = cluster([ports[2]]);
  const before = await dbsizes();
  const keys = Array.from({ length: 450 }, (_, i) => `io:${RUN}:k:${i}`);
  const limit = 3;
  for (let round = 0; round <= limit; round++) {
    // Many requests in flight at once over the cluster connections.
    const replies = await Promise.all(keys.map((k) => c.call('RL.ALLOW', k, limit, '1h', 'ALGO', 'log')));
    replies.forEach((r, i) => {
      if (round < limit) {
        assert.deepEqual(r.slice(0, 4), [1, limit, limit - 1 - round, -1], `${keys[i]} call ${round}`);
      } else {
        assert.deepEqual(r.slice(0, 3), [0, limit, 0], `${keys[i]} call ${round}`);
        assert.ok(r[3] > 0, `${keys[i]}: retry_after ${r[3]}`);
      }
    });
  }
  const after = await dbsizes();
  const want = Object.fromEntries(ports.map((p) => [p, 0]));
  for (const k of keys) want[ownerOf(rs, k)]++;
  for (const p of ports) {
    assert.equal(after[p] - before[p], want[p], `new keys on node ${p}`);
    assert.ok(want[p] > 0, `no keys on node ${p}`);
  }
  console.log(`  RL.ALLOW ${keys.length} keys x ${limit + 1}: exact; keys per node ${ports.map((p) => want[p]).join('/')}`);

  // RL.ALLOWMANY with hash tags, users on every node.
  const users = [];
  for (const p of ports) {
    let n = 0;
    for (let i = 0; n < 4 && i < 1000; i++) {
      const u = `iou${RUN}:${i}`;
      if (ownerOf(rs, u) === p) { users.push(u); n++; }
    }
  }
  await Promise.all(users.map(async (u) => {
    const args = ['RL.ALLOWMANY', 'LIMIT', `{${u}}:min`, 2, '1h', 'ALGO', 'log', 'LIMIT', `{${u}}:day`, 4, '1d', 'ALGO', 'gcra'];
    for (let n = 0; n < 2; n++) {
      const r = await c.call(...args);
      assert.deepEqual([r[0], r[1], r[2], r[5]], [1, 2, 1 - n, 0], `${u} call ${n}: ${r}`);
    }
    const r = await c.call(...args);
    assert.deepEqual([r[0], r[1], r[2], r[5]], [0, 2, 0, 0], `${u} 3rd: ${r}`);
    // The denied call charged nothing: the day limit has 2 of 4 used.
    const day = await c.call('RL.PEEK', `{${u}}:day`, 4, '1d', 'ALGO', 'gcra');
    assert.deepEqual(day.slice(0, 3), [1, 4, 1], `${u}: day after a denied call: ${day}`);
  }));
  console.log(`  RL.ALLOWMANY with hash tags, ${users.length} users on 3 nodes: all-or-nothing`);

  // Keys in two slots.
  await assert.rejects(
    c.call('RL.ALLOWMANY', 'LIMIT', '{a}:x', 1, '1h', 'LIMIT', '{b}:y', 1, '1h'),
    (e) => e.message === "CROSSSLOT Keys in request don't hash to the same slot",
  );
  // MOVED, word for word, on a plain connection.
  const r = await plain(ports[0]);
  await assert.rejects(r.call('RL.ALLOW', 'foo', 1, 1), (e) => e.message === `MOVED 12182 ${host}:${ports[2]}`);
  r.disconnect();
  c.disconnect();
}

async function down() {
  const dead = ports[2];
  const rs = await ranges(ports[0]);
  const c = cluster([ports[0], ports[1]]);
  const served = {};
  let slowest = 0;
  for (let i = 0; i < 60; i++) {
    const k = `iodown:${RUN}:k:${i}`;
    const p = ownerOf(rs, k);
    if (p === dead) continue;
    for (let n = 0; n < 3; n++) {
      const t = Date.now();
      const r = await c.call('RL.ALLOW', k, 2, '1h', 'ALGO', 'log');
      slowest = Math.max(slowest, Date.now() - t);
      assert.deepEqual(r.slice(0, 3), n < 2 ? [1, 2, 1 - n] : [0, 2, 0], `${k} (live node ${p}) call ${n}`);
    }
    served[p] = (served[p] || 0) + 1;
  }
  assert.ok(served[ports[0]] > 0 && served[ports[1]] > 0, `live nodes served ${JSON.stringify(served)}`);
  // ioredis does not know RL.* key positions, so it sends each call to a
  // random node first and follows MOVED: a first hop to the dead node costs a
  // failed connect before the retry, hence the slowest call.
  console.log(`  keys of the live nodes answered: ${JSON.stringify(served)}; slowest call ${slowest} ms`);
  let k;
  for (let i = 0; ; i++) { k = `iodead:${RUN}:${i}`; if (ownerOf(rs, k) === dead) break; }
  const t0 = Date.now();
  let err;
  try {
    const r = await c.call('RL.ALLOW', k, 2, '1h');
    assert.fail(`${k} (owned by the dead node) answered ${r}`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    err = e;
  }
  console.log(`  key of the dead node: "${err.message}" after ${Date.now() - t0} ms`);
  // Live nodes still answer after that failure.
  for (let i = 0; ; i++) {
    const k2 = `ioafter:${RUN}:${i}`;
    if (ownerOf(rs, k2) === dead) continue;
    const r = await c.call('RL.ALLOW', k2, 2, '1h');
    assert.equal(r[0], 1, `a live node after the failure: ${r}`);
    break;
  }
  c.disconnect();
}

(async () => {
  console.log(`ioredis ${require(path.join(IOREDIS, 'package.json')).version} Cluster check (${mode}) against ${host}:${ports.join(',')}`);
  await (mode === 'live' ? live() : down());
  clearTimeout(watchdog);
  console.log(`ioredis cluster check (${mode}): OK`);
  process.exit(0);
})().catch((e) => {
  console.error(`ioredis cluster check FAILED (${mode}): ${e.stack || e}`);
  process.exit(1);
});
