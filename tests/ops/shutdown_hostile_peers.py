#!/usr/bin/env python3
"""SIGTERM with hostile peers attached, against the release binary: three
fake replicas that sent `PSYNC ? -1` and never read (a 60 MiB key pending
for each) and 200 connections to `--rls-port` that never send the HTTP/2
preface. The process must exit 0, final snapshot written, within 10 s
(`docs/reliability.md`: the drain's bound is 5 s, the snapshot follows).

    python3 tests/ops/shutdown_hostile_peers.py path/to/turnstile
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import benchlib  # noqa: E402


def main():
    binary = sys.argv[1]
    port, rls = benchlib.free_ports(2)
    tmp = tempfile.mkdtemp()
    snap = os.path.join(tmp, "dump.tsnap")
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen([binary, "--port", str(port), "--metrics-addr", "off", "--rls-port", str(rls),
                          "--snapshot", snap, "--snapshot-interval", "3600"], stdout=log, stderr=log)
    benchlib.wait_ping(port, p, "turnstile")
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(benchlib.encode(b"SET", b"big", b"x" * (60 << 20)))
    assert c.recv(100) == b"+OK\r\n"
    replicas = []
    for _ in range(3):
        r = socket.socket()
        r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        r.connect(("127.0.0.1", port))
        r.sendall(benchlib.encode(b"PSYNC", b"?", b"-1"))
        replicas.append(r)
    flood = [socket.create_connection(("127.0.0.1", rls)) for _ in range(200)]
    time.sleep(1)
    t0 = time.time()
    p.terminate()
    try:
        code = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit("shutdown with hostile peers: still running 10 s after SIGTERM")
    took = time.time() - t0
    print(f"shutdown with 3 non-reading replicas and 200 silent rls connections: exit {code} after {took:.2f} s")
    if code != 0 or not os.path.exists(snap):
        sys.exit(f"shutdown with hostile peers: exit {code}, snapshot written: {os.path.exists(snap)}")
    del replicas, flood


if __name__ == "__main__":
    main()
