#!/usr/bin/env node
// ioredis and node-redis (v4) logging in as an ACL user, at their defaults.
// Usage: node acl_users_check.js PORT [HOST]
//
// Creates a gateway user (`~tenant:* +@ratelimit +ping`, plus what each
// client sends when it connects), connects with each client's own
// `username`/`password` options, decides a limit on the user's key, is
// refused (NOPERM, Redis's words) on another tenant's key and on
// RL.RESET, and sees itself with ACL WHOAMI refused too (not granted).
// The user is deleted at the end.
'use strict';

const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { createClient } = require('redis');

const port = Number(process.argv[2]);
const host = process.argv[3] || '127.0.0.1';
if (!port) {
  console.error('usage: node acl_users_check.js PORT [HOST]');
  process.exit(2);
}
const watchdog = setTimeout(() => {
  console.error('ACL users check FAILED: timed out after 20 s');
  process.exit(1);
}, 20000);

const USER = `gw-${process.pid}`;
const PASS = 'gw-secret-check';
const KEY_DENIED = 'NOPERM this user has no permissions to access one of the keys used as arguments';
const CMD_DENIED = "NOPERM this user has no permissions to run the 'rl.reset' command";

async function refused(promise, want, what) {
  try {
    const reply = await promise;
    assert.fail(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(reply)}`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    assert.equal(e.message, want, what);
  }
}

async function main() {
  const admin = new Redis({ host, port, lazyConnect: true });
  await admin.connect();
  // `+client|setname +client|setinfo +hello +info`: what the clients send
  // on connecting (node-redis may name the connection and set its lib).
  assert.equal(
    await admin.call('ACL', 'SETUSER', USER, 'on', `>${PASS}`, '~tenant:*', '+@ratelimit', '-@dangerous',
      '+ping', '+client|setname', '+client|setinfo', '+hello', '+info'),
    'OK');

  const io = new Redis({ host, port, username: USER, password: PASS, lazyConnect: true });
  await io.connect();
  const ioReply = await io.call('RL.ALLOW', 'tenant:io', 5, 60);
  assert.equal(ioReply[0], 1, 'ioredis: allowed on its tenant');
  await refused(io.call('RL.ALLOW', 'other:io', 5, 60), KEY_DENIED, 'ioredis: another tenant');
  await refused(io.call('RL.RESET', 'tenant:io'), CMD_DENIED, 'ioredis: RL.RESET');
  io.disconnect();

  const nr = createClient({ socket: { host, port }, username: USER, password: PASS });
  nr.on('error', () => {});
  await nr.connect();
  const nrReply = await nr.sendCommand(['RL.ALLOW', 'tenant:nr', '5', '60']);
  assert.equal(nrReply[0], 1, 'node-redis: allowed on its tenant');
  await refused(nr.sendCommand(['RL.ALLOW', 'other:nr', '5', '60']), KEY_DENIED, 'node-redis: another tenant');
  await refused(nr.sendCommand(['RL.RESET', 'tenant:nr']), CMD_DENIED, 'node-redis: RL.RESET');
  await nr.quit();

  // Each refusal is in ACL LOG under the user's name.
  const log = await admin.call('ACL', 'LOG');
  const mine = log.filter((entry) => entry[entry.indexOf('username') + 1] === USER);
  assert.ok(mine.length >= 2, `ACL LOG holds the user's refusals: ${JSON.stringify(mine).slice(0, 300)}`);
  await admin.call('ACL', 'DELUSER', USER);
  admin.disconnect();
}

main().then(() => {
  clearTimeout(watchdog);
  console.log('ACL users check (ioredis, node-redis): passed');
}, (e) => {
  console.error('ACL users check FAILED:', e);
  process.exit(1);
});
