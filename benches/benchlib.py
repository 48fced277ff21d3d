"""Helpers shared by the benchmark harnesses in this directory (compare.py,
memory.py, scale.py). Python 3 standard library only.

- servers: start `target/release/turnstile` or `redis-server` on a free
  loopback port, wait for PING, and make sure they die with this process
  (try/finally in the callers, plus atexit and a SIGTERM handler here);
- redis-benchmark: run it, parse its CSV, and charge the server the CPU time
  its threads spent meanwhile (/proc/<pid>/stat, user + system);
- a small RESP client for INFO, CONFIG SET, RL.STATE and the like;
- a fast pipelined loader: raw RESP commands written in large batches over
  one non-blocking socket, replies counted rather than parsed;
- /proc readings (VmRSS) and the marked-section rewrite of
  docs/performance.md.
"""

import atexit
import csv
import io
import os
import platform
import random
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURNSTILE = ROOT / "target/release/turnstile"
DOC = ROOT / "docs/performance.md"


INSTALL_HINT = ("Debian/Ubuntu: sudo apt-get install redis-server redis-tools; "
                "macOS: brew install redis")


def require(*tools):
    """Stops before anything starts if a command the harness needs is not
    on PATH, saying how to install it."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        hint = INSTALL_HINT if any(t.startswith("redis") for t in missing) else ""
        if "cargo" in missing:
            hint += ("; " if hint else "") + "cargo: install Rust with rustup"
        sys.exit(f"{Path(sys.argv[0]).name}: {', '.join(missing)} not found on PATH; "
                 f"install first ({hint})")


def free_ports(n):
    """`n` distinct free loopback ports, chosen below the kernel's ephemeral
    range: a port the kernel picked (bind to port 0) and that was let go
    can be taken, before the server binds it, as the local port of any
    outgoing connection on the machine (a benchmark's clients; CI once lost
    a cluster node that way). Below the range, only a server can take it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    socks = []
    try:
        while len(socks) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", rng.randrange(10000, max(low, 10001))))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


def wait_ping(port, proc, what):
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"{what} exited during startup")
        r = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
        if r.stdout.strip() == "PONG":
            return
        time.sleep(0.05)
    sys.exit(f"{what} does not answer PING on port {port}")


def cargo_bench_binary(name):
    """Builds the named `harness = false` bench (a file under benches/) in release and
    returns its executable's path: the load tools the harnesses run."""
    r = subprocess.run(["cargo", "bench", "--bench", name, "--no-run"], cwd=ROOT,
                       capture_output=True, text=True)
    m = re.search(rf"Executable .*\((.*{name}-[0-9a-f]+)\)", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"cannot build benches/{name}.rs:\n{r.stderr[-2000:]}")
    return ROOT / m.group(1)


def cpu_ns(pid):
    """CPU time (ns) of `pid`, user and system, every thread it ever ran
    included (/proc/<pid>/stat, in clock ticks: 10 ms). Not the sum of the
    live threads' schedstat: a thread that exits meanwhile (tokio's
    blocking pool gives idle threads back) takes its time with it, which
    made some runs' CPU per operation negative."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def thread_cpu_ns(pid, name_prefix):
    """CPU time (ns) of the threads of `pid` whose name starts with
    `name_prefix` (Linux truncates thread names to 15 bytes)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip().startswith(name_prefix[:15]):
                total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def rss_bytes(pid):
    """Resident set size of `pid` (VmRSS in /proc/<pid>/status), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def redis_benchmark(port, pid, args, n, pipeline=1, clients=50, randomkeys=100000):
    """One redis-benchmark run of one test. Returns ops/s, p50/p99/max
    latency (ms) from its CSV, and the server's CPU per operation (us)."""
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-r", str(randomkeys), "-n", str(n), "--csv"]
    if pipeline > 1:
        cmd += ["-P", str(pipeline)]
    cmd += args
    before = cpu_ns(pid)
    start = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - start
    after = cpu_ns(pid)
    if r.returncode != 0 or "error" in (r.stdout + r.stderr).lower():
        sys.exit(f"redis-benchmark failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    rows = [row for row in csv.reader(io.StringIO(r.stdout)) if row and row[0] != "test"]
    if len(rows) != 1:
        sys.exit(f"unexpected redis-benchmark output for {' '.join(cmd)}:\n{r.stdout}")
    row = rows[0]
    return {
        "ops": float(row[1]),
        "p50": float(row[4]),
        "p99": float(row[6]),
        "max": float(row[7]),
        "cpu_us": (after - before) / 1000 / n,
        "seconds": elapsed,
    }


def alternating_medians(servers, args, n, pipeline, reps, randomkeys=100000, clients=50):
    """Runs one redis-benchmark test `reps` times on each server of the
    dict `servers`, alternating their order each round, the idle ones
    paused. `args` may be a dict {name: args}: each server its own test.
    Returns {name: (median ops/s, median server CPU us/op)}."""
    runs = {w: [] for w in servers}
    for rep in range(reps):
        order = list(servers) if rep % 2 == 0 else list(reversed(servers))
        for which in order:
            for other in servers.values():
                other.pause()
            s = servers[which]
            s.resume()
            test = args[which] if isinstance(args, dict) else args
            runs[which].append(redis_benchmark(s.port, s.pid, test, n, pipeline=pipeline,
                                               clients=clients, randomkeys=randomkeys))
    for s in servers.values():
        s.resume()
    return {w: (statistics.median(r["ops"] for r in runs[w]),
                statistics.median(r["cpu_us"] for r in runs[w])) for w in runs}


def raise_nofile(want):
    """Raise this process's open-file limit (inherited by the servers and
    redis-benchmark started from it) to at least `want`, within the hard
    limit. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft


# ---------------------------------------------------------------- servers

_live = []


def _cleanup():
    for s in list(_live):
        s.stop()


atexit.register(_cleanup)


def _on_term(signum, frame):
    sys.exit(128 + signum)  # unwinds try/finally, then atexit


signal.signal(signal.SIGTERM, _on_term)
signal.signal(signal.SIGHUP, _on_term)


def die_with_parent():
    """In the child before exec: SIGKILL when the harness dies, however it
    dies (even SIGKILL, which no cleanup handler sees), so no server is
    ever left running (Linux's PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """A server process on a free loopback port, stopped at exit."""

    def __init__(self, kind, argv, port):
        self.kind, self.port = kind, port
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)
        self.pid = self.proc.pid
        _live.append(self)
        try:
            wait_ping(port, self.proc, kind)
        except SystemExit:
            self.stop()
            raise

    def pause(self):
        """SIGSTOP: an idle server's threads (its expiry sweeper walking
        millions of keys) then take no CPU from the server being measured."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)

    def stop(self):
        if self in _live:
            _live.remove(self)
        if self.proc.poll() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            self.proc.kill()
            self.proc.wait()

    def rss(self):
        return rss_bytes(self.pid)

    def client(self):
        return Client(self.port)


_binary = None


def pin_turnstile(binary=None):
    """Copies target/release/turnstile (or `binary`, another build to
    compare) to a temporary directory and starts every later server from
    the copy, so a rebuild during a long run (by someone else working in
    this tree) cannot mix two builds in one table."""
    global _binary
    source = Path(binary) if binary else TURNSTILE
    if not source.exists():
        sys.exit(f"{source} is missing: run `cargo build --release`")
    tmp = tempfile.mkdtemp(prefix="turnstile-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    _binary = Path(tmp) / "turnstile"
    shutil.copy2(source, _binary)


def start_turnstile(*extra, metrics="off", binary=None):
    """A Turnstile server: `binary` if given, else the pinned or built one."""
    binary = Path(binary) if binary else _binary or TURNSTILE
    if not binary.exists():
        sys.exit(f"{binary} is missing: run `cargo build --release`")
    port = free_port()
    return Server("turnstile", [str(binary), "--port", str(port), "--metrics-addr", metrics,
                                "--log-level", "warn", *extra], port)


def start_redis(*extra):
    port = free_port()
    return Server("redis-server", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", *extra], port)


def build_release():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)


def redis_version():
    text = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return next((w[2:] for w in text.split() if w.startswith("v=")), text.strip())


def build_line():
    """The commit the binary was built from, and whether the tree had
    uncommitted changes."""
    r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or "unknown commit"


def machine_line():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               "unknown CPU")
    return (f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} on {os.cpu_count()} cores "
            f"({cpu}), {platform.system()} {platform.release()}")


# ---------------------------------------------------------------- RESP

def encode(*args):
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def template(*args, key_format):
    """A command with one argument `key_format` (a bytes %-format of one
    integer that always formats to the same length, such as b"k:%014d"),
    as one bytes %-format: `template(...) % i` is the command for key i."""
    width = len(key_format % 0)
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if a is None:
            parts.append(b"$%d\r\n" % width + key_format + b"\r\n")
        else:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n" % len(a) + a.replace(b"%", b"%%") + b"\r\n")
    return b"".join(parts)


class RespError(Exception):
    pass


class Client:
    """A minimal blocking RESP2 client."""

    def __init__(self, port, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def close(self):
        self.file.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, *args):
        self.sock.sendall(encode(*args))
        reply = self._read()
        if isinstance(reply, RespError):
            raise reply
        return reply

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.file.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"unexpected reply line {line!r}")

    def info(self, section=None):
        text = (self("INFO", section) if section else self("INFO")).decode()
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def pairs(self, *args):
        """A flat [k, v, k, v...] reply (RESP2 map) as a dict."""
        r = self(*args)
        if r is None:
            return None
        return {r[i].decode() if isinstance(r[i], bytes) else r[i]: r[i + 1] for i in range(0, len(r), 2)}


def pipeline(port, batches, inflight=4, timeout=120):
    """Sends `batches` (an iterable of (payload bytes, reply lines expected))
    over one connection, up to `inflight` batches ahead of their replies,
    and waits for every reply. Replies are counted by their CRLF-terminated
    lines, not parsed, which is enough for commands whose replies have a
    known number of lines (RL.ALLOW: an array of 5 integers, 6 lines; SET:
    1; ZADD: 1). Any error reply aborts with its text. Returns the number
    of reply lines read."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    it = iter(batches)
    out = memoryview(b"")
    targets = deque()  # cumulative line counts at which each sent batch is answered
    expected = got = 0
    carry = b"\r\n"  # the last 2 bytes read: a line (error "-...") may start at byte 0
    exhausted = False
    registered = None
    try:
        while True:
            while not out and not exhausted and len(targets) < inflight:
                try:
                    payload, lines = next(it)
                except StopIteration:
                    exhausted = True
                    break
                out = memoryview(payload)
                expected += lines
                targets.append(expected)
            if exhausted and not out and got >= expected:
                break
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
            if want != registered:
                if registered is None:
                    sel.register(sock, want)
                else:
                    sel.modify(sock, want)
                registered = want
            events = sel.select(timeout)
            if not events:
                raise TimeoutError(f"no progress for {timeout}s: {got} of {expected} reply lines")
            for _, mask in events:
                if mask & selectors.EVENT_WRITE and out:
                    try:
                        sent = sock.send(out)
                    except BlockingIOError:
                        sent = 0
                    out = out[sent:]
                if mask & selectors.EVENT_READ:
                    try:
                        data = sock.recv(1 << 20)
                    except BlockingIOError:
                        continue
                    if not data:
                        raise ConnectionError(f"server closed the connection after {got} reply lines")
                    buf = carry + data
                    if buf.count(b"\r\n-") > carry.count(b"\r\n-"):
                        at = buf.index(b"\r\n-") + 2
                        raise RespError("error reply while loading: "
                                        + buf[at:buf.find(b"\r\n", at)].decode(errors="replace"))
                    got += buf.count(b"\r\n") - carry.count(b"\r\n")
                    carry = buf[-2:]
                    while targets and got >= targets[0]:
                        targets.popleft()
        if got != expected:
            raise RuntimeError(f"read {got} reply lines, expected {expected}")
        return got
    finally:
        sel.close()
        sock.close()


def keyed_batches(tmpl, start, stop, lines_per_reply, batch=10_000):
    """Batches of `tmpl % i` for i in [start, stop)."""
    for lo in range(start, stop, batch):
        hi = min(stop, lo + batch)
        yield b"".join([tmpl % i for i in range(lo, hi)]), (hi - lo) * lines_per_reply


# ---------------------------------------------------------------- docs

def write_section(name, heading, prose, block):
    """Puts `block` between `<!-- name:begin -->` and `<!-- name:end -->` in
    docs/performance.md, replacing what was there. If the markers are
    missing, appends a new `## heading` section with `prose` and the
    markers at the end of the file. Nothing else in the file changes."""
    start, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    body = f"{start}\n{block.rstrip()}\n{end}"
    if start in text and end in text and text.index(start) < text.index(end):
        text = text[: text.index(start)] + body + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n## {heading}\n\n{prose.rstrip()}\n\n{body}\n"
    DOC.write_text(text)
    print(f"wrote {DOC}", file=sys.stderr)
