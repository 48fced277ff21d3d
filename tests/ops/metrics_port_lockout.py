#!/usr/bin/env python3
"""Can a health check reach the metrics port while it is busy? Starts the
given binary (127.0.0.1 only), fills `--metrics-addr` with IDLE ordinary
keep-alive clients (each sends `GET /metrics` every 2 s on its connection
and reconnects if closed, as a scraper does) and SLOW slowloris clients
(each sends a request line, then one header byte a second, and reconnects
when closed), then probes `/healthz` PROBES times on fresh connections
(1 s budget each, 50 ms apart) and prints how many answered 200.

    python3 tests/ops/metrics_port_lockout.py path/to/turnstile [--idle 64] [--slow 16] [--probes 80]

Bounded: at most about PROBES x 1.05 s of probing plus 5 s of set-up.
Exit status 0 if every probe answered, 1 otherwise.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import benchlib  # noqa: E402

HOST = "127.0.0.1"


def get(sock, path, keep_alive):
    """One request on `sock`; True if it was answered 200 (body read)."""
    conn = "keep-alive" if keep_alive else "close"
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: {conn}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return False
        body += chunk
    return head.startswith(b"HTTP/1.1 200")


class Idle(threading.Thread):
    """An ordinary keep-alive poller: one request every 2 s, reconnecting
    when the server closes it."""

    def __init__(self, port, stop, ready):
        super().__init__(daemon=True)
        self.port, self.stop, self.ready = port, stop, ready
        self.reconnects = 0

    def run(self):
        first = True
        while not self.stop.is_set():
            try:
                with socket.create_connection((HOST, self.port), timeout=3) as s:
                    while not self.stop.is_set():
                        if not get(s, "/metrics", True):
                            break
                        if first:
                            self.ready.release()
                            first = False
                        self.stop.wait(2)
            except OSError:
                pass
            if first:
                self.ready.release()
                first = False
            self.reconnects += 1
            self.stop.wait(0.1)


class Slowloris(threading.Thread):
    """A request line, then a header byte a second, for as long as the
    server keeps the connection; then again on a new one."""

    def __init__(self, port, stop):
        super().__init__(daemon=True)
        self.port, self.stop = port, stop

    def run(self):
        while not self.stop.is_set():
            try:
                with socket.create_connection((HOST, self.port), timeout=3) as s:
                    s.sendall(f"GET /healthz HTTP/1.1\r\nHost: {HOST}\r\n".encode())
                    while not self.stop.wait(1):
                        s.sendall(b"X")
            except OSError:
                pass
            self.stop.wait(0.05)


def probe(port):
    """Latency in seconds of one `/healthz` on a fresh connection, or
    None if it was not answered 200 within 1 s."""
    started = time.monotonic()
    try:
        with socket.create_connection((HOST, port), timeout=1) as s:
            s.settimeout(max(0.01, 1 - (time.monotonic() - started)))
            if get(s, "/healthz", False):
                return time.monotonic() - started
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--idle", type=int, default=64)
    ap.add_argument("--slow", type=int, default=16)
    ap.add_argument("--probes", type=int, default=80)
    opts = ap.parse_args()
    benchlib.raise_nofile(4096)
    port, mport = benchlib.free_ports(2)
    tmp = tempfile.mkdtemp()
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen([opts.binary, "--bind", HOST, "--port", str(port),
                          "--metrics-addr", f"{HOST}:{mport}"], stdout=log, stderr=log)
    stop = threading.Event()
    try:
        benchlib.wait_ping(port, p, "turnstile")
        assert probe(mport) is not None, "the metrics port does not answer at all"
        ready = threading.Semaphore(0)
        idle = [Idle(mport, stop, ready) for _ in range(opts.idle)]
        for t in idle:
            t.start()
        for _ in idle:
            ready.acquire(timeout=5)
        slow = [Slowloris(mport, stop) for _ in range(opts.slow)]
        for t in slow:
            t.start()
        time.sleep(1)
        answered = []
        for _ in range(opts.probes):
            took = probe(mport)
            if took is not None:
                answered.append(took)
            time.sleep(0.05)
        stop.set()
        answered.sort()
        median = f"{answered[len(answered) // 2] * 1000:.1f} ms" if answered else "-"
        worst = f"{answered[-1] * 1000:.1f} ms" if answered else "-"
        reconnects = sum(t.reconnects for t in idle)
        print(f"{opts.idle} idle keep-alive + {opts.slow} slowloris: /healthz answered "
              f"{len(answered)} of {opts.probes} (median {median}, slowest {worst}); "
              f"keep-alive clients reconnected {reconnects} times")
        return 0 if len(answered) == opts.probes else 1
    finally:
        stop.set()
        p.terminate()
        p.wait(timeout=15)


if __name__ == "__main__":
    sys.exit(main())
