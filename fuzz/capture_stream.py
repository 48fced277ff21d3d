#!/usr/bin/env python3
"""Writes fuzz/corpus/replication_stream/ from a real primary's stream.

    python3 fuzz/capture_stream.py [BINARY]   # default target/release/turnstile

Starts the binary on a free port, writes keys of every kind (the four
limiter algorithms, CL.THROTTLE, leases, strings with and without a TTL,
lists, sorted sets, hashes), attaches as a replica (`PSYNC ? -1`), then
writes, deletes, expires and flushes while reading the stream, and asks for
an acknowledgement with WAIT (a GETACK frame). What the primary sent after
its `+FULLRESYNC` line is cut at frame boundaries into seeds: the copy, the
stream, both, each frame kind alone, and a few frames cut short; each seed
behind the target's one prefix byte (its read size). Keys and values are
fixed, but a copy's order and a limiter's state depend on the run:
re-running it writes other bytes of the same shapes.
"""

import os
import shutil
import socket
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus", "replication_stream")
KINDS = {1: "set", 2: "del", 3: "flush", 4: "ping", 5: "getack", 16: "snap", 17: "synced"}


def encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def call(sock, *args):
    sock.sendall(encode(*args))
    data = b""
    while not data.endswith(b"\r\n"):
        data += sock.recv(65536)
    return data


def frames(data):
    """(kind, bytes) of each whole frame; the rest is dropped."""
    out, at = [], 0
    while at + 5 <= len(data):
        (n,) = struct.unpack_from("<I", data, at + 1)
        if at + 5 + n > len(data):
            break
        out.append((data[at], data[at : at + 5 + n]))
        at += 5 + n
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "turnstile")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--metrics-addr", "off"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                c = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.05)
        for algo in ["window", "log", "gcra", "fixed"]:
            for i in range(3):
                call(c, "RL.ALLOW", f"rl:{algo}:{i}", 5, "10s", "ALGO", algo)
        call(c, "CL.THROTTLE", "cell", 4, 10, 60)
        call(c, "RL.ACQUIRE", "conc", 3, "30s")
        call(c, "SET", "plain", "v")
        call(c, "SET", "ttl", "v", "EX", 100)
        call(c, "RPUSH", "list", "a", "b", "c")
        call(c, "ZADD", "zs", 1, "m1", 2.5, "m2")
        call(c, "HSET", "h", "f", "1", "g", "x")
        rep = socket.create_connection(("127.0.0.1", port))
        rep.sendall(encode("PSYNC", "?", "-1"))
        rep.settimeout(0.3)
        data = b""
        while b"\r\n" not in data:
            data += rep.recv(65536)
        data = data.split(b"\r\n", 1)[1]
        for i in range(5):
            call(c, "RL.ALLOW", "rl:log:0", 5, "10s", "ALGO", "log")
            call(c, "INCR", "counter")
        call(c, "DEL", "plain")
        call(c, "PEXPIRE", "counter", 1)
        call(c, "WAIT", 1, 10)
        call(c, "FLUSHALL")
        call(c, "SET", "after", "flush")
        deadline = time.time() + 2
        while time.time() < deadline:
            try:
                got = rep.recv(65536)
            except socket.timeout:
                break
            if not got:
                break
            data += got
    finally:
        server.terminate()
        server.wait()

    all_frames = frames(data)
    copy = [f for k, f in all_frames if k in (16, 17)]
    stream = [f for k, f in all_frames if k not in (16, 17)]
    seeds = {
        "copy": b"".join(copy),
        "stream": b"".join(stream),
        "copy-then-stream": b"".join(f for _, f in all_frames),
    }
    seen = set()
    for k, f in all_frames:
        name = KINDS.get(k, str(k))
        if name not in seen:
            seen.add(name)
            seeds[f"one-{name}"] = f
    longest = max((f for _, f in all_frames), key=len)
    seeds["cut-short"] = longest[: len(longest) // 2]
    seeds["bad-kind"] = bytes([9, 0, 0, 0, 0])
    seeds["huge-length"] = bytes([1]) + struct.pack("<I", 0xFFFFFFF0) + longest[5:]
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for i, (name, body) in enumerate(sorted(seeds.items())):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([i % 32]) + body[: 64 * 1024])
    print(f"{len(seeds)} seeds from {len(all_frames)} frames ({len(data)} bytes) in {OUT}")


if __name__ == "__main__":
    main()
