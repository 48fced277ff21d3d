// RL.CHECK, RL.ALLOW ... POLICY and RL.POLICY through ioredis 6 (RESP3 by
// default) and over RESP2, against a Turnstile started by check.py with
// policies.yaml. Usage: node check.js PORT
"use strict";
const assert = require("node:assert/strict");
const Redis = require("ioredis");

const port = Number(process.argv[2]);
if (!port) {
  console.error("usage: node check.js PORT");
  process.exit(2);
}

async function run(protocol) {
  const opts = { port, host: "127.0.0.1", lazyConnect: true };
  if (protocol) opts.protocol = protocol;
  const r = new Redis(opts);
  await r.connect();
  const hello = await r.call("HELLO");
  // RESP3 maps arrive as objects (or Maps), RESP2 as flat arrays.
  const proto = Array.isArray(hello) ? hello[hello.indexOf("proto") + 1]
    : hello instanceof Map ? hello.get("proto") : hello.proto;
  const tag = `ioredis ${require("ioredis/package.json").version} RESP${proto}`;
  const addr = `198.51.100.${proto}`;
  for (let n = 0; n < 4; n++) {
    const got = await r.call("RL.CHECK", "edge", "remote_address", addr);
    assert.deepEqual(got.slice(0, 3), [n < 3 ? 1 : 0, 3, Math.max(0, 2 - n)], `${tag}: RL.CHECK call ${n + 1}`);
    assert.equal(String(got[5]), "edge.remote_address", `${tag}: RL.CHECK names the policy`);
    console.log(`ok ${tag}: RL.CHECK call ${n + 1} of 3 a minute`);
  }
  const login = await r.call("RL.CHECK", "edge", "path", "/login", "method", "POST");
  assert.equal(String(login[5]), "login-posts");
  console.log(`ok ${tag}: RL.CHECK of a nested descriptor names its policy`);
  const key = `app:tenant:node:${proto}`;
  const seen = [];
  for (let i = 0; i < 6; i++) seen.push((await r.call("RL.ALLOW", key, "POLICY", "tenant-gcra"))[0]);
  assert.deepEqual(seen, [1, 1, 1, 1, 1, 0], `${tag}: RL.ALLOW POLICY`);
  console.log(`ok ${tag}: RL.ALLOW key POLICY tenant-gcra admits 5 then denies`);
  await assert.rejects(r.call("RL.ALLOW", key, "POLICY", "no-such-policy"), /no-such-policy/);
  console.log(`ok ${tag}: RL.ALLOW with an unknown policy fails, naming it`);
  const got = await r.call("RL.POLICY", "GET", "tenant-gcra");
  assert.match(JSON.stringify(got, (_, v) => (v instanceof Map ? Object.fromEntries(v) : v)), /gcra/);
  console.log(`ok ${tag}: RL.POLICY GET shows the algorithm`);
  r.disconnect();
  return proto;
}

(async () => {
  const def = await run(undefined);
  assert.equal(def, 3, "ioredis 6 negotiates RESP3 by default");
  await run(2);
  console.log("ioredis policies check: passed");
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
