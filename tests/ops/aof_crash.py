#!/usr/bin/env python3
"""SIGKILL during pipelined load, with the append-only file on, against
the release binary: clients count every decision acknowledged to them,
the server is killed mid-pipeline, restarted on the same file, and each
key's count compared with what its clients were told.

- `--appendfsync always`: no acknowledged decision may be lost.
- `--appendfsync everysec`: at most about one second of them (a SIGKILL
  leaves what was written in the page cache; it is an OS crash that
  would lose the unsynced second).

    python3 tests/ops/aof_crash.py path/to/turnstile
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import benchlib  # noqa: E402

KEYS = 200
CLIENTS = 4
BATCH = 64
LIMIT = 10**12
LOAD_SECONDS = 2.0


def start(binary, port, tmp, mode):
    log = open(os.path.join(tmp, "log"), "a")
    p = subprocess.Popen([binary, "--port", str(port), "--metrics-addr", "off", "--log-level", "warn",
                          "--snapshot", os.path.join(tmp, "dump.tsnap"), "--snapshot-interval", "3600",
                          "--appendonly", "yes", "--appendfsync", mode], stdout=log, stderr=log)
    benchlib.wait_ping(port, p, "turnstile")
    return p


def allow(key):
    return benchlib.encode(b"RL.ALLOW", key, str(LIMIT), b"1d", b"ALGO", b"fixed")


def client(port, n, acked):
    """Sends batches of BATCH decisions on keys n, n+CLIENTS, ... and counts
    each reply as it arrives, until the connection dies."""
    s = socket.create_connection(("127.0.0.1", port))
    mine = [k for k in range(KEYS) if k % CLIENTS == n]
    i = 0
    try:
        while True:
            keys = [mine[(i + j) % len(mine)] for j in range(BATCH)]
            i += BATCH
            s.sendall(b"".join(allow(b"k%d" % k) for k in keys))
            buf = b""
            got = 0
            while got < BATCH:
                chunk = s.recv(65536)
                if not chunk:
                    return
                buf += chunk
                lines = buf.split(b"\r\n")
                whole = (len(lines) - 1) // 6
                for r in range(got, whole):
                    head, allowed = lines[r * 6], lines[r * 6 + 1]
                    if head != b"*5" or allowed != b":1":
                        raise SystemExit(f"unexpected reply {lines[r * 6:r * 6 + 6]}")
                    acked[keys[r]] += 1
                got = whole
    except (ConnectionError, OSError):
        return


def counts(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"".join(benchlib.encode(b"RL.PEEK", b"k%d" % k, str(LIMIT), b"1d", b"ALGO", b"fixed")
                       for k in range(KEYS)))
    buf = b""
    while buf.count(b"\r\n") < KEYS * 6:
        buf += s.recv(65536)
    lines = buf.split(b"\r\n")
    # remaining = limit - count - 1 (a request of cost 1 would leave it).
    return [LIMIT - 1 - int(lines[k * 6 + 3][1:]) for k in range(KEYS)]


def run(binary, mode):
    port = benchlib.free_port()
    tmp = tempfile.mkdtemp(prefix=f"turnstile-aof-{mode}-")
    p = start(binary, port, tmp, mode)
    acked = [0] * KEYS
    threads = [threading.Thread(target=client, args=(port, n, acked)) for n in range(CLIENTS)]
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(LOAD_SECONDS)
    os.kill(p.pid, signal.SIGKILL)
    killed = time.time()
    p.wait()
    for t in threads:
        t.join(timeout=10)
    total = sum(acked)
    rate = total / (killed - t0)
    size = os.path.getsize(os.path.join(tmp, "appendonly.aof"))
    p = start(binary, port, tmp, mode)
    found = counts(port)
    p.terminate()
    p.wait(timeout=10)
    lost = sum(max(0, a - f) for a, f in zip(acked, found))
    extra = sum(max(0, f - a) for a, f in zip(acked, found))
    print(f"appendfsync {mode}: {total} decisions acknowledged in {killed - t0:.1f} s ({rate:.0f}/s), "
          f"SIGKILL mid-pipeline, file {size} bytes; after restart: {lost} acknowledged decisions lost, "
          f"{extra} counted but never acknowledged (in flight at the kill)")
    if total == 0:
        sys.exit(f"{mode}: no decision was acknowledged: the load did not run")
    return lost, rate


def main():
    binary = sys.argv[1]
    started = time.time()
    lost, _ = run(binary, "always")
    if lost != 0:
        sys.exit(f"appendfsync always lost {lost} acknowledged decisions")
    lost, rate = run(binary, "everysec")
    if lost > rate * 1.0:
        sys.exit(f"appendfsync everysec lost {lost} acknowledged decisions, more than a second's ({rate:.0f})")
    print(f"aof_crash: ok in {time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
