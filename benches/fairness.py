#!/usr/bin/env python3
"""Fairness under a pipelining flood: one client writes pipelined commands
as fast as the server takes them while a second client does one round trip
every few milliseconds; prints the second client's latency (p50, p99,
worst) and the flood's rate, for each server given.

    python3 benches/fairness.py [BINARY ...] [--redis] [--seconds 10]
        [--interval-ms 2] [--flood set|allow|ping] [--threads 1]

Each BINARY is a Turnstile build (default target/release/turnstile), run
with `--threads 1` (the default on a 2-core host); `--redis` adds
`redis-server` on the same load. One server at a time, 127.0.0.1 only,
every run bounded by `--seconds`.

The flood runs in its own process (so its Python threads cannot hold the
probe's interpreter lock): a writer thread sends batches of 1,000 commands
back to back, never waiting for replies, and a reader thread drains the
replies, so the server is never blocked on a full socket and always has
input waiting: the load that starves the others if a connection serves
its input for as long as input is there. `--flood allow` floods RL.ALLOW
(Turnstile only); `set` (the default) and `ping` run on Redis too.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import benchlib

# Commands a flood write carries.
BATCH = 1000
# The flood's command, by its index; replies are counted by line ends.
FLOODS = {
    "set": lambda i: benchlib.encode("SET", f"flood:{i % 1000}", "xxx"),
    "ping": lambda i: benchlib.encode("PING"),
    "allow": lambda i: benchlib.encode("RL.ALLOW", f"flood:{i % 1000}", "1000000000", "60"),
}


def flood_child(port, seconds, kind):
    """Runs in a child process: floods `port` for `seconds`, then drains the
    replies still owed and prints how many commands were answered."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = b"".join(FLOODS[kind](i) for i in range(BATCH))
    # RL.ALLOW answers with an array of five integers: six lines a reply.
    lines_per_reply = 6 if kind == "allow" else 1
    sent = [0]
    done = threading.Event()

    def writer():
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sock.sendall(chunk)
            sent[0] += BATCH
        done.set()

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    lines = 0
    sock.settimeout(1.0)
    give_up = time.monotonic() + seconds + 60
    while time.monotonic() < give_up:
        if done.is_set() and lines >= sent[0] * lines_per_reply:
            break
        try:
            data = sock.recv(1 << 20)
        except socket.timeout:
            continue
        if not data:
            break
        lines += data.count(b"\n")
    print(lines // lines_per_reply, flush=True)
    sock.close()


def probe(port, seconds, interval):
    """One PING round trip every `interval` seconds for `seconds`; returns
    the latencies in ms."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ping = benchlib.encode("PING")
    out = []
    deadline = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        start = time.perf_counter()
        sock.sendall(ping)
        got = b""
        while not got.endswith(b"\r\n"):
            data = sock.recv(64)
            if not data:
                sys.exit("the server closed the probe's connection")
            got += data
        out.append((time.perf_counter() - start) * 1000)
        next_at += interval
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            next_at = time.monotonic()
    sock.close()
    return out


def measure(server, opts):
    """The probe's latencies and the flood's rate against one server."""
    child = subprocess.Popen([sys.executable, __file__, "--flood-child", str(server.port),
                              str(opts.seconds + 1.0), opts.flood],
                             stdout=subprocess.PIPE, text=True, preexec_fn=benchlib.die_with_parent)
    try:
        # The probe starts once the flood runs, and stops before it does.
        time.sleep(0.5)
        lat = probe(server.port, opts.seconds, opts.interval_ms / 1000)
        out, _ = child.communicate(timeout=opts.seconds + 90)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    answered = int(out.strip() or 0)
    lat.sort()
    return {
        "samples": len(lat),
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "max": lat[-1],
        "flood": answered / (opts.seconds + 1.0),
    }


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--flood-child":
        flood_child(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="*", type=Path)
    ap.add_argument("--redis", action="store_true", help="also redis-server on the same load")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval-ms", type=float, default=2.0)
    ap.add_argument("--flood", choices=sorted(FLOODS), default="set")
    ap.add_argument("--threads", default="1", help="Turnstile's --threads")
    ap.add_argument("--reps", type=int, default=1)
    opts = ap.parse_args()
    benchlib.require("redis-cli", *(["redis-server"] if opts.redis else []))
    runs = [(str(b), lambda b=b: benchlib.start_turnstile("--threads", opts.threads, binary=b))
            for b in (opts.binaries or [benchlib.TURNSTILE])]
    if opts.redis:
        if opts.flood == "allow":
            ap.error("--flood allow has no Redis equivalent")
        runs.append((f"redis-server {benchlib.redis_version()}", benchlib.start_redis))
    print(f"{benchlib.machine_line()}\nflood: {opts.flood}, batches of {BATCH}, one connection; "
          f"probe: PING every {opts.interval_ms} ms for {opts.seconds} s; "
          f"Turnstile --threads {opts.threads}\n")
    print("| server | probes | p50 ms | p99 ms | worst ms | flood commands/s |")
    print("|---|---|---|---|---|---|")
    for _ in range(opts.reps):
        for name, start in runs:
            server = start()
            try:
                r = measure(server, opts)
            finally:
                server.stop()
            print(f"| {name} | {r['samples']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} "
                  f"| {r['flood']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
