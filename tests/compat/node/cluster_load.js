// ioredis's Cluster client as one of the clients of tests/ops/cluster_grow.py:
// limited requests to its own keys while slots move, following MOVED and ASK.
//
//   node cluster_load.js PORT KEYS LIMIT [PASSWORD]
//
// SIGUSR1 pauses it (no new request; "paused" on stdout once none is in
// flight), SIGUSR2 resumes it, SIGTERM ends it: it then prints one JSON line
// {sent, admitted, errors, closed} for the judge.
"use strict";
const Redis = require("ioredis");

const [port, nkeys, limit, password] = process.argv.slice(2);
const cluster = new Redis.Cluster([{ host: "127.0.0.1", port: Number(port) }], {
  redisOptions: password ? { password } : {},
  // A request whose connection closes is not resent: its fate is unknown,
  // and a resend counts twice if the first one ran. ioredis resends such a
  // request after retryDelayOnFailover (default 100 ms) unless it is 0, and
  // it closes a node's connection itself when a slots refresh no longer
  // lists the node (a node whose last slot moved away), requests in flight
  // on it included: with 100 here, one key in five runs showed 18
  // admissions where the server counted 20.
  retryDelayOnFailover: 0,
  maxRedirections: 64,
});
const keys = Array.from({ length: Number(nkeys) }, (_, i) => `io:${i}`);
const sent = {};
const admitted = {};
const unknown = new Set();
const errors = [];
let closed = 0;
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
      const msg = String(e.message || e);
      // The connection closed under the request (see above): its fate is
      // unknown, so the key is not judged; counted, not an error.
      if (msg === "Connection is closed.") closed++;
      else if (!paused) errors.push(msg);
    } finally {
      inFlight--;
    }
  }
}

process.on("SIGUSR1", () => { paused = true; });
process.on("SIGUSR2", () => { paused = false; });
process.on("SIGTERM", () => { stopping = true; });

Promise.all([loop(), loop()]).then(() => {
  const out = { sent: {}, admitted: {}, errors, closed };
  for (const k of keys) {
    if (unknown.has(k) || !sent[k]) continue;
    out.sent[k] = sent[k];
    out.admitted[k] = admitted[k] || 0;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  cluster.disconnect();
});
