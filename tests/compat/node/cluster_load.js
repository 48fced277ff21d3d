// ioredis's Cluster client as one of the clients of tests/ops/cluster_grow.py:
// limited requests to its own keys while slots move, following MOVED and ASK.
//
//   node cluster_load.js PORT KEYS LIMIT [PASSWORD]
//
// SIGUSR1 pauses it (no new request; "paused" on stdout once none is in
// flight), SIGUSR2 resumes it, SIGTERM ends it: it then prints one JSON line
// {sent, admitted, errors} per key, for the judge.
"use strict";
const Redis = require("ioredis");

const [port, nkeys, limit, password] = process.argv.slice(2);
const cluster = new Redis.Cluster([{ host: "127.0.0.1", port: Number(port) }], {
  redisOptions: password ? { password } : {},
  // A request whose connection dies is not resent: its fate is unknown,
  // and a resend could count twice.
  retryDelayOnFailover: 100,
  maxRedirections: 64,
});
const keys = Array.from({ length: Number(nkeys) }, (_, i) => `io:${i}`);
const sent = {};
const admitted = {};
const unknown = new Set();
const errors = [];
let paused = false;
let stopping = false;
let inFlight = 0;

async function loop() {
  while (!stopping) {
    if (paused) {
      if (inFlight === 0 && paused !== "told") {
        paused = "told";
        process.stdout.write("paused\n");
      }
      await new Promise((r) => setTimeout(r, 5));
      continue;
    }
    const k = keys[Math.floor(Math.random() * keys.length)];
    inFlight++;
    try {
      const reply = await cluster.call("RL.ALLOW", `lim:${k}`, limit, "1h", "ALGO", "log");
      sent[k] = (sent[k] || 0) + 1;
      admitted[k] = (admitted[k] || 0) + Number(reply[0]);
    } catch (e) {
      unknown.add(k);
      if (!paused) errors.push(String(e.message || e));
    } finally {
      inFlight--;
    }
  }
}

process.on("SIGUSR1", () => { paused = true; });
process.on("SIGUSR2", () => { paused = false; });
process.on("SIGTERM", () => { stopping = true; });

Promise.all([loop(), loop()]).then(() => {
  const out = { sent: {}, admitted: {}, errors };
  for (const k of keys) {
    if (unknown.has(k) || !sent[k]) continue;
    out.sent[k] = sent[k];
    out.admitted[k] = admitted[k] || 0;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  cluster.disconnect();
});
