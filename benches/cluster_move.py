#!/usr/bin/env python3
"""Moving slots with their keys: Turnstile beside Redis 7, same redis-cli.

    python3 benches/cluster_move.py [--keys N] [--bin PATH] [--redis-server PATH] [--runs N]
        [--trace N] [--client-gc] [--pin] [--rust-client] [--slowest N] [--sched]
        [--rt-client] [--node-timeout MS] [--only turnstile|redis]

For each server: three empty primaries made a cluster by `redis-cli
--cluster create`, N limiter keys written (Turnstile: `RL.ALLOW k 100 1h`,
one window record; Redis: the same limiter the Redis way, an `INCR` counter
with `EXPIRE`), a fourth primary added and given a quarter of the slots by
`redis-cli --cluster rebalance --cluster-use-empty-masters`, then those
slots moved back by `reshard`. Meanwhile one RedisCluster client sends one
request after another to random keys and records each one's latency.
Prints the time of each move, the CPU time its four nodes spent in it
(user + system, from /proc/PID/stat), the CPU time the virtual machine's
host stole meanwhile (/proc/stat: a host that steals time slows and
stalls both servers, and no trace inside the machine shows it), and the
client's median, p99 and
worst latency during it: of the requests begun while `redis-cli` ran (the
client starts a second before, beside the main thread's own work; those
requests are not the move's). Needs redis-cli, redis-server and the redis
package.

The worst request is one in some 20,000, and the client is a Python
process on the same cores: what it measures follows the client as much as
either server. So that it measures the servers:

- The client's cyclic garbage collector is off during each move (objects
  alive before it are frozen first, `gc.freeze`): a full collection walks
  every object the process holds (redis-py's 16,384-entry slot map among
  them), 15-114 ms in one request seen here, on whichever server happened
  to be measured when it fell due; with the servers measured one after the
  other in one process, mostly the second. `--client-gc` leaves it on;
  either way the collections during a move are counted and printed.
- `redis-cli`'s output goes to a file, not a pipe this process reads, so
  no thread of the client's takes its interpreter lock for each dot it
  prints (with `--trace` a thread reads it, to time-stamp it).
- `--runs N` measures the two servers N times each, alternated (Turnstile,
  Redis, then Redis, Turnstile, ...), each run a fresh cluster, and prints
  per move the median and the maximum over runs of each figure: the worst
  latency of one run is a sample of the machine's moment, and two servers
  measured at different moments are compared only over several.

`--pin` gives the client a core of its own: the client runs on the
first CPU, the nodes and `redis-cli` on the others, as a client on its
own machine would (with `--rust-client` this process, which then only
waits, goes with the nodes, and the compiled client has the first CPU to
itself). A request then waits only for its node (and the node
for the other nodes and `redis-cli` beside it), not for a core the client
shares with them. The kernel's threads still run on either core, and
they made most of the worst requests measured here (`--sched`).

`--rust-client` measures with a compiled cluster client instead,
`benches/cluster_probe.rs` (the `redis` crate's, which follows MOVED and
ASK and reloads its map in the background): redis-py's own reload after
a MOVED costs 4-7 ms of its CPU, as much as the worst either server adds,
and a plain request was seen to spend 13 ms on the client's core
(`perf sched`), so with redis-py the worst request measures the client
more than the servers. Without a trace.

`--sched` (with `--pin --rust-client`) records the whole run with `perf
sched record` and matches each slow request with what else ran on the two
cores meanwhile. On this machine the worst request of a move, on either
server, was most often a kernel thread (`kdamond`, `rcu_preempt`,
`kcompactd`, a `kworker`) running 2-8 ms on the client's core, or a
process start (`redis-cli`'s) on the servers' core: the machine's moment,
not the server. So beside the worst request it reports the worst one
during which nothing but the move ran: no process or kernel thread other
than the nodes, `redis-cli`, the client and the idle loop held a core for
0.5 ms or more, and the client itself did not run that long (the redis
crate reloading its slot map, most likely). Each task is summed over
its runs in the request. A second recording samples every busy CPU's
clock 4,000 times a second: the part of a task's run in which its CPU
took no sample is time that virtual CPU did not run (its host ran
something else), named "the host": not the task's, nor the move's. A
request that waits with both cores idle is listed as "idle" and counted
as the move's. This machine's second CPU, the nodes', records no switch
out of the idle loop, and takes no clock sample while idle (the first
CPU takes both), so `perf sched timehist` counts the idle time before a
run as the run's: the idle span is ended at the CPU's first clock
sample after it went idle. A task woken while its CPU was idle
(`sched_waking`, on record on the waker's CPU) had that CPU to run on
from the wake-up: the rest of the idle span is the host's, which did
not run the virtual CPU (a guest kernel runs it at once), and is named
"the host (this CPU did not run a task woken on it)". A span idle until
a wake-up not on record (a timer on the CPU itself, or the disk) stays
the move's. Needs `perf` (linux-perf) and root.

`--rt-client` (with `--pin --rust-client`) runs the compiled client
`SCHED_FIFO` on its core, so that a kernel thread there waits for it (it
is awake only between a reply and its next request). `redis-cli`, perf
and this harness then run on the client's core too, below the client,
which takes the core back the moment a reply wakes it: the servers' core
holds the nodes alone, as the servers' machine would, and the worst
request measures the nodes and any kernel thread that lands there.
Without it, `redis-cli` and the harness share the nodes' core, and its
start and the harness's reading of /proc after the move held requests
there for 1-3 ms (`--sched`). Needs root.

`--trace N` also lists each move's N slowest requests: when they started
(ms into the move), which node served them, what the client did on the
way (MOVED, ASK, TRYAGAIN, a slot map reload, a new connection; redis-py
reloads its whole map on every fifth MOVED, and the reload closes the
connection it asked on) and what `redis-cli` had last printed. The hooks
record only those events, so the requests themselves run as without it.
"""

import argparse
import bisect
import gc
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time

import benchlib
import redis
import redis.cluster
import redis.exceptions
from redis.cluster import ClusterNode, RedisCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A request slower than this (seconds) is counted: the worst is one
# request, how many come near it says more.
SLOW = 0.005

# Both servers' --cluster-node-timeout (`--node-timeout`).
NODE_TIMEOUT_MS = 5000

# With `--pin`, the CPUs the nodes and redis-cli run on (the client has
# the rest); None leaves every process free to run anywhere.
SERVER_CPUS = None
# With `--pin`, the client's CPU.
CLIENT_CPUS = None

# `--rt-client`: the compiled client runs SCHED_FIFO at this priority.
RT_CLIENT = False
RT_PRIORITY = 50


def to_server_cpus():
    """A child's start: onto the servers' CPUs when pinned."""
    if SERVER_CPUS is not None:
        os.sched_setaffinity(0, SERVER_CPUS)


def tool_cpus():
    """Where `redis-cli`, perf and this harness run when pinned: beside the
    nodes, or with `--rt-client` on the client's CPU, where the real-time
    client takes the core back the moment a reply wakes it, so that they
    hold up neither it nor the nodes (as on a real deployment, where the
    operator's tool and the measuring are on other machines)."""
    return CLIENT_CPUS if RT_CLIENT else SERVER_CPUS


def to_tool_cpus():
    """A tool's start (`redis-cli`, perf): onto `tool_cpus()` when pinned."""
    if SERVER_CPUS is not None:
        os.sched_setaffinity(0, tool_cpus())


def to_client_cpus():
    """The compiled client's start: onto its own CPU when pinned, and with
    `--rt-client` in the real-time class, ahead of the kernel's threads."""
    if CLIENT_CPUS is not None:
        os.sched_setaffinity(0, CLIENT_CPUS)
    if RT_CLIENT:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))


class Trace:
    """What the client did during each request, from hooks on redis-py."""

    probe = None  # the Probe thread whose requests are traced
    events = None  # this request's events, or None when not tracing

    @classmethod
    def note(cls, *what):
        if cls.events is not None and threading.current_thread() is cls.probe:
            cls.events.append((time.perf_counter(), *what))

    @classmethod
    def install(cls):
        for name, kind in (("MovedError", "MOVED"), ("AskError", "ASK"), ("TryAgainError", "TRYAGAIN"),
                           ("ClusterDownError", "CLUSTERDOWN")):
            exc = getattr(redis.exceptions, name)
            init = exc.__init__

            def hooked(self, *a, _init=init, _kind=kind, **k):
                _init(self, *a, **k)
                Trace.note(_kind, str(self.args[0]) if self.args else "")
            exc.__init__ = hooked
        init_map = redis.cluster.NodesManager.initialize

        def initialize(self):
            t, cpu = time.perf_counter(), time.thread_time()
            init_map(self)
            Trace.note("reload", f"{(time.perf_counter() - t) * 1e3:.2f} ms "
                       f"(client CPU {(time.thread_time() - cpu) * 1e3:.2f})")
        redis.cluster.NodesManager.initialize = initialize
        connect = redis.connection.AbstractConnection.connect

        tcp = redis.connection.Connection._connect

        def hooked_connect(self):
            new = self._sock is None
            t, cpu = time.perf_counter(), time.thread_time()
            connect(self)
            if new:
                Trace.note("connect", f"{getattr(self, 'port', '?')} {(time.perf_counter() - t) * 1e3:.2f} ms "
                           f"(TCP {getattr(self, '_tcp_ms', 0):.2f}, client CPU {(time.thread_time() - cpu) * 1e3:.2f})")
        redis.connection.AbstractConnection.connect = hooked_connect

        def hooked_tcp(self):
            t = time.perf_counter()
            sock = tcp(self)
            self._tcp_ms = (time.perf_counter() - t) * 1e3
            return sock
        redis.connection.Connection._connect = hooked_tcp
        command = redis.Redis.execute_command

        def hooked_command(self, *args, **options):
            t = time.perf_counter()
            try:
                return command(self, *args, **options)
            finally:
                port = self.connection_pool.connection_kwargs.get("port")
                Trace.note(" ".join(map(str, args[:2])), f"{port} {(time.perf_counter() - t) * 1e3:.2f} ms")
        redis.Redis.execute_command = hooked_command


class ClientGc:
    """The client's own garbage collections, timed (`gc.callbacks`)."""

    done = []  # (start, end, generation)
    _start = None

    @classmethod
    def callback(cls, phase, info):
        if phase == "start":
            cls._start = time.perf_counter()
        elif cls._start is not None:
            cls.done.append((cls._start, time.perf_counter(), info["generation"]))
            cls._start = None

    @classmethod
    def during(cls, t0, t1):
        """The collections that overlapped [t0, t1]."""
        return [(a, b, g) for a, b, g in cls.done if b >= t0 and a <= t1]


class LiveCli:
    """`redis-cli` run with its output time-stamped as it comes."""

    def __init__(self, args):
        self.lines = []  # (perf_counter, text)
        self.p = subprocess.Popen(["stdbuf", "-o0", "redis-cli", *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=to_tool_cpus)
        self.p.stdin.write(b"yes\n")
        self.p.stdin.close()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        line = b""
        fd = self.p.stdout.fileno()
        while True:
            b = os.read(fd, 4096)
            if not b:
                break
            now = time.perf_counter()
            for part in b.splitlines(keepends=True):
                line += part
                if line.endswith(b"\n") or line.endswith(b"#"):
                    self.lines.append((now, line.decode(errors="replace").rstrip()))
                    line = b""

    def wait(self):
        self.p.wait()
        self.reader.join()
        if self.p.returncode != 0:
            raise SystemExit("redis-cli: " + "\n".join(t for _, t in self.lines[-20:]))

    def before(self, t):
        """The last thing printed before `t`, with how long before."""
        last = None
        for at, text in self.lines:
            if at > t:
                break
            last = (at, text)
        if last is None:
            return "-"
        return f"{(t - last[0]) * 1e3:.1f} ms after {last[1][-60:]!r}"


def cli(*args):
    r = subprocess.run(["redis-cli", *args], capture_output=True, text=True, timeout=1800, input="yes\n",
                       preexec_fn=to_tool_cpus)
    if r.returncode != 0:
        raise SystemExit(f"redis-cli {' '.join(args)}: {r.stdout}{r.stderr}")
    return r.stdout


class Sched:
    """`--sched`: the run recorded by `perf sched record` on the monotonic
    clock the compiled client stamps its requests with, then each slow
    request matched with the tasks that held a core while it waited."""

    # Overlap with a request that makes a task its cause (seconds).
    HELD = 0.0005
    # The CPU clock's sampling rate (Hz): beside the scheduler's events, a
    # sample of every CPU this often (the nodes' takes none idle). A
    # span of a task's run with none on its CPU is time that virtual CPU
    # did not run (its host ran something else), which no task shows.
    CLOCK_HZ = 4000

    def __init__(self):
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix="cluster-move-sched-", dir=shm)
        self.path = os.path.join(self.dir, "sched.data")
        self.clock_path = os.path.join(self.dir, "clock.data")
        # perf itself with the tools (`tool_cpus`): off the client's core
        # unless the client is real-time there.
        self.ps = []
        for what, args, path in (
                ("perf sched record", ["perf", "sched", "record", "-k", "CLOCK_MONOTONIC", "-a", "-o", self.path],
                 self.path),
                ("perf record", ["perf", "record", "-e", "cpu-clock", "-F", str(self.CLOCK_HZ), "-a", "-k",
                                 "CLOCK_MONOTONIC", "-o", self.clock_path], self.clock_path)):
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=to_tool_cpus)
            self.ps.append(p)
            for _ in range(100):
                if os.path.exists(path) and os.path.getsize(path) > 0:
                    break
                if p.poll() is not None:
                    self.abandon()
                    raise SystemExit(f"{what} failed: {p.stderr.read().decode(errors='replace')}")
                time.sleep(0.05)
        time.sleep(0.5)
        self.runs = {}
        self.cpu_samples = {}

    def stop(self):
        for p in self.ps:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.ps:
            p.wait()

    def abandon(self):
        """The run failed: the recordings stop and their files go."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def finish(self):
        """Stops the recordings and reads who ran where, when, and when the
        machine ran at all."""
        self.stop()
        out = subprocess.run(["perf", "sched", "timehist", "--next", "-i", self.path], capture_output=True, text=True)
        clock = subprocess.run(["perf", "script", "-i", self.clock_path, "-F", "cpu,time"], capture_output=True,
                               text=True)
        events = subprocess.run(["perf", "script", "-i", self.path, "-F", "time,event,trace"], capture_output=True,
                                text=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        if out.returncode != 0:
            raise SystemExit(f"perf sched timehist failed: {out.stderr[-2000:]}")
        for what in (clock, events):
            if what.returncode != 0:
                raise SystemExit(f"perf script failed: {what.stderr[-2000:]}")
        # Per CPU, (when, thread) of each wake-up of a thread last run
        # there (`sched_waking`, stamped on the waker's CPU: a node's
        # thread woken by the client's request is on record even though
        # the nodes' CPU's switch out of idle is not).
        wakings = {}
        waking_re = re.compile(r"^\s*(\d+\.\d+):\s+sched:sched_waking:.*\bpid=(\d+) prio=\S+ target_cpu=(\d+)")
        for line in events.stdout.splitlines():
            if m := waking_re.match(line):
                wakings.setdefault(int(m[3]), []).append((float(m[1]), int(m[2])))
        for ws in wakings.values():
            ws.sort()
        # Per thread, (start, cpu) of each of its runs.
        thread_runs = {}
        for line in clock.stdout.splitlines():
            m = re.match(r"^\s*\[(\d+)\]\s+(\d+\.\d+):", line)
            if m:
                self.cpu_samples.setdefault(int(m[1]), []).append(float(m[2]))
        for ts in self.cpu_samples.values():
            ts.sort()
        line_re = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
        idle_re = re.compile(r"^\s*(\d+\.\d+)\s+\[(\d+)\]\s+<idle>\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
        next_re = re.compile(r"next: .*\[(\d+)\]\s*$")
        # Per CPU: its last switch went into the idle loop, and the
        # switch out of it is not on record yet.
        into_idle = {}
        for line in out.stdout.splitlines():
            m = line_re.match(line)
            if m:
                end, cpu, comm, pid, tid = float(m[1]), int(m[2]), m[3].strip(), int(m[5] or m[4]), int(m[4])
                run = float(m[8]) / 1e3
            elif m := idle_re.match(line):
                # The idle loop, pid 0: no task had the core.
                end, cpu, comm, pid, tid = float(m[1]), int(m[2]), "<idle>", 0, 0
                run = float(m[5]) / 1e3
            else:
                continue
            begin = end - run
            if comm != "<idle>" and into_idle.get(cpu):
                # The switch out of the idle loop is missing (this
                # machine's second CPU records none: 41 switches into it,
                # none out, in a test), so timehist counts the idle time
                # as this task's run. The CPU's first clock sample after
                # the switch into idle (it takes none idle) is when it
                # ran again, within one sample period.
                ts = self.cpu_samples.get(cpu, [])
                j = bisect.bisect_left(ts, begin)
                start = ts[j] if j < len(ts) and ts[j] < end else end
                if start > begin:
                    self.runs.setdefault(cpu, []).append((begin, start, "<idle>", 0))
                begin = start
            if comm != "<idle>":
                thread_runs.setdefault(tid, []).append((begin, cpu))
            nxt = next_re.search(line)
            into_idle[cpu] = comm != "<idle>" and nxt is not None and nxt[1] == "0"
            self.runs.setdefault(cpu, []).append((begin, end, comm, pid))
        for r in self.runs.values():
            r.sort()
        for r in thread_runs.values():
            r.sort()
        for cpu, rs in self.runs.items():
            self.runs[cpu] = list(self.woken_waits(cpu, rs, wakings.get(cpu, []), thread_runs))
        self.starts = {cpu: [r[0] for r in rs] for cpu, rs in self.runs.items()}
        # The longest run on record bounds how far back a window must look.
        self.longest = max((e - b for rs in self.runs.values() for b, e, _, _ in rs), default=0.0)

    # How far before an idle span's start (seconds) a wake-up may be
    # stamped and still fall in it: the span starts at a switch into
    # idle on its CPU; the wake-up is stamped on the waker's.
    WOKEN_SLACK = 0.0005

    def woken_waits(self, cpu, runs, woken, thread_runs):
        """`cpu`'s runs, each idle span split where a thread was woken
        for this CPU (`woken`: (when, thread), sorted) that ran here next,
        once the span was over: from that wake-up on, the CPU had a task
        to run and ran nothing. A guest kernel runs a task woken for an
        idle CPU at once (the wake-up interrupts it), so that wait is the
        host's, which did not run the virtual CPU: "<woken>". The part
        before the wake-up stays idle, the move's: it may be a timer on
        the CPU itself, whose wake-ups this machine's second CPU does not
        record when it leaves idle."""
        for a, b, comm, pid in runs:
            if comm != "<idle>":
                yield a, b, comm, pid
                continue
            w = None
            i = bisect.bisect_left(woken, (a - self.WOKEN_SLACK,))
            while i < len(woken) and woken[i][0] < b:
                when, tid = woken[i]
                starts = thread_runs.get(tid, [])
                j = bisect.bisect_left(starts, (when,))
                if j < len(starts) and starts[j][0] >= b - 5e-6 and starts[j][1] == cpu:
                    w = max(when, a)
                    break
                i += 1
            if w is None or w >= b:
                yield a, b, comm, pid
                continue
            if w > a:
                yield a, w, "<idle>", 0
            yield w, b, "<woken>", 0

    def runs_within(self, cpu, t0, t1):
        """The runs on `cpu` that overlap [t0, t1], in order."""
        rs = self.runs.get(cpu, [])
        i = bisect.bisect_left(self.starts.get(cpu, []), t0 - self.longest)
        while i < len(rs) and rs[i][0] < t1:
            if rs[i][1] > t0:
                yield rs[i]
            i += 1

    def cpu_stood_still(self, cpu, t0, t1):
        """How much of [t0, t1] one CPU took no clock sample in, counting
        only gaps of two sample periods or more (seconds): its virtual CPU
        did not run, whatever task the kernel had on it. A task's run
        spans such a gap, since the guest cannot tell."""
        ts = self.cpu_samples.get(cpu, [])
        i = bisect.bisect_left(ts, t0)
        gap_min = 2.0 / self.CLOCK_HZ
        total, last = 0.0, t0
        while i < len(ts) and ts[i] < t1:
            if ts[i] - last >= gap_min:
                total += ts[i] - last
            last = ts[i]
            i += 1
        if t1 - last >= gap_min:
            total += t1 - last
        return total

    def held(self, t0, t1, own):
        """What had each core during [t0, t1], summed over its runs, as
        (cpu, who, seconds, ours), for each who with HELD or more:
        `own` maps a pid to what it is in the move (a node, the client);
        redis-cli is the move's too. The part of a task's run in which
        its CPU took no clock sample is the host's. A core with no task
        is "idle": neither the move's nor another's, so it does not make
        the request count as disturbed, unless a task was woken for it
        meanwhile ("<woken>": the host's from the wake-up on)."""
        sums = {}

        def add(cpu, who, seconds, ours):
            entry = sums.setdefault((cpu, who, ours), [0.0, 0])
            entry[0] += seconds
            entry[1] += 1

        for cpu in self.runs:
            for b, e, comm, pid in self.runs_within(cpu, t0, t1):
                overlap = min(e, t1) - max(b, t0)
                if comm == "<idle>":
                    add(cpu, "idle", overlap, True)
                    continue
                if comm == "<woken>":
                    add(cpu, "the host (this CPU did not run a task woken on it)", overlap, False)
                    continue
                stalled = self.cpu_stood_still(cpu, max(b, t0), min(e, t1))
                if stalled > 0:
                    add(cpu, "the host (this CPU did not run)", stalled, False)
                overlap -= stalled
                if overlap <= 0:
                    continue
                if pid in own:
                    # The client running while its request waits is its
                    # own work (most likely the redis crate reloading its
                    # slot map).
                    who = own[pid] if own[pid] == "client" else f"{own[pid]} {comm}"
                    add(cpu, who, overlap, own[pid] != "client")
                elif comm in ("redis-cli", "stdbuf"):
                    add(cpu, "redis-cli", overlap, True)
                elif pid == os.getpid() or comm.startswith("python"):
                    # This process, or a child of it not yet redis-cli.
                    add(cpu, "this harness", overlap, False)
                else:
                    add(cpu, comm, overlap, False)
        out = [(cpu, who if n == 1 else f"{who} ({n} runs)", sec, ours)
               for (cpu, who, ours), (sec, n) in sums.items() if sec >= self.HELD]
        return sorted(out, key=lambda h: (str(h[0]), -h[2]))

    def stalls(self, t0, t1, cpus):
        """Over [t0, t1] on `cpus`: how long tasks ran (seconds), and how
        much of that their CPU took no clock sample in (the host did not
        run it; only gaps of two sample periods or more count)."""
        busy = stalled = 0.0
        for cpu in cpus:
            for b, e, comm, _ in self.runs_within(cpu, t0, t1):
                lo, hi = max(b, t0), min(e, t1)
                if comm == "<idle>":
                    continue
                busy += hi - lo
                # A woken task's wait on its idle CPU is all stall.
                stalled += hi - lo if comm == "<woken>" else self.cpu_stood_still(cpu, lo, hi)
        return busy, stalled

    def judge(self, move, kind, what, show):
        """Prints the move's `show` slowest requests with what held the
        cores, and sets `move.clean`: the worst request during which only
        the move's own processes ran (ms)."""
        slow = sorted(move.slow_reqs, key=lambda r: -r[1])
        if show:
            print(f"\n{kind} {what}: {show} slowest, with what held a core for 0.5 ms or more of each, summed"
                  " over its runs")
        move.clean = None
        for n, (began, lat) in enumerate(slow):
            held = self.held(began, began + lat, move.own)
            said = "; ".join(f"{'' if c == '-' else f'cpu{c} '}{who} {sec * 1e3:.1f} ms"
                             for c, who, sec, _ in held) or "nothing"
            if n < show:
                print(f"  {lat * 1e3:6.2f} ms at {began:.6f}: {said}")
            if move.clean is None and all(ours for *_, ours in held):
                move.clean = lat * 1e3
                if n >= show:
                    if show:
                        print(f"  the worst with only the move running: {lat * 1e3:.2f} ms at {began:.6f}: {said}")
                    break
        if move.clean is None:
            # No request over 1 ms ran with only the move: at most that.
            move.clean = 1.0


class Cluster:
    def __init__(self, kind, binary, base):
        self.kind, self.binary, self.base = kind, binary, base
        self.root = tempfile.mkdtemp(prefix=f"cluster-move-{kind}-")
        self.procs = []

    def start(self, port):
        d = os.path.join(self.root, str(port))
        os.makedirs(d)
        if self.kind == "redis":
            args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                    "--appendonly", "yes", "--save", "", "--dir", d]
        else:
            args = [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "yes", "--metrics-addr", "off"]
        log = open(os.path.join(d, "log"), "wb")
        p = subprocess.Popen(args, cwd=d, stdout=log, stderr=log, preexec_fn=to_server_cpus)
        self.procs.append(p)
        for _ in range(200):
            try:
                redis.Redis(port=port).ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise SystemExit(f"{self.kind} on {port} did not start:\n" + open(os.path.join(d, "log")).read()[-2000:])

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def during(began, t0, t1):
    """The requests that began while the move ran (from t0 to t1): the
    second before it, the client warming up beside the main thread's own
    work, is no part of the move."""
    return [i for i, t in enumerate(began) if t0 <= t <= t1]


class Probe(threading.Thread):
    """One client, one request at a time, each one's latency recorded."""

    def __init__(self, rc, kind, keys, trace=False):
        super().__init__(daemon=True)
        self.rc, self.kind, self.keys, self.trace = rc, kind, keys, trace
        self.lat = []
        self.began = []  # each request's start (perf_counter)
        self.starts = []  # with --trace: each request's start and key
        self.events = {}  # with --trace: request index -> what the client did
        self.errors = 0
        self.error_seen = []  # the first few errors, as the client raised them
        self.stop = threading.Event()

    def run(self):
        rnd = random.Random(7)
        if self.trace:
            Trace.probe = self
            self.tid = threading.get_native_id()
        while not self.stop.is_set():
            k = f"k:{rnd.randrange(self.keys)}"
            if self.trace:
                Trace.events = []
            t = time.perf_counter()
            try:
                if self.kind == "redis":
                    self.rc.execute_command("INCR", k)
                else:
                    self.rc.execute_command("RL.ALLOW", k, 100, "1h")
            except Exception as e:  # noqa: BLE001 - counted, not hidden
                self.errors += 1
                if len(self.error_seen) < 3:
                    self.error_seen.append(repr(e)[:120])
                Trace.note("error", repr(e)[:80])
            self.lat.append(time.perf_counter() - t)
            self.began.append(t)
            if self.trace:
                self.starts.append((t, k))
                if Trace.events:
                    self.events[len(self.lat) - 1] = Trace.events
        Trace.events = None

    def switches(self):
        """The probe thread's context switches so far: (waits, preempted)."""
        with open(f"/proc/self/task/{self.tid}/status") as f:
            v = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
        return int(v["voluntary_ctxt_switches"]), int(v["nonvoluntary_ctxt_switches"])

    def during(self, t0, t1):
        return during(self.began, t0, t1)

    def worst(self, t0, t1):
        """What the client did during the move's slowest request (with
        `--trace`): 'plain' (no redirect, reload or new connection),
        or its events, and any garbage collection of the client's."""
        moved = self.during(t0, t1)
        i = max(moved, key=lambda i: self.lat[i])
        t = self.began[i]
        evs = [x[0] for _, *x in self.events.get(i, [])] if self.trace else ["?"]
        kinds = [k for k in ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "reload", "connect", "error") if k in evs]
        what = "+".join(kinds) if self.trace and kinds else ("plain" if self.trace else "-")
        gcs = ClientGc.during(t, t + self.lat[i])
        if gcs:
            what += f" (client GC {sum(b - a for a, b, _ in gcs) * 1e3:.1f} ms)"
        return what

    def report(self, what, kind, t0, t1, live, n):
        """The n slowest requests, with what happened on the way."""
        slot_of = self.rc.keyslot
        moved = self.during(t0, t1)
        order = sorted(moved, key=lambda i: -self.lat[i])[:n]
        # The move's start on CLOCK_MONOTONIC (perf's clock): a node's
        # `perf trace`/`perf sched` events line up with the requests.
        median = statistics.median(self.lat[i] for i in moved)
        print(f"\n{kind} {what}: {n} slowest of {len(moved)} (median {median * 1e3:.2f} ms;"
              f" move started at {t0:.6f} s monotonic; client thread {self.tid})")
        for i in order:
            t, k = self.starts[i]
            slot = slot_of(k)
            owner = self.rc.nodes_manager.slots_cache[slot][0].port
            ev = "; ".join(f"+{(at - t) * 1e3:.2f} {' '.join(x)}" for at, *x in self.events.get(i, []))
            gcs = "".join(f"; client GC gen{g} {(b - a) * 1e3:.2f} ms"
                          for a, b, g in ClientGc.during(t, t + self.lat[i]))
            print(f"  {self.lat[i] * 1e3:6.2f} ms at {(t - t0) * 1e3:8.1f} ms  slot {slot:5} now on {owner}"
                  f"  [{(ev or 'plain') + gcs}]  cli: {live.before(t) if live else '-'}")
        took = {}
        for evs in self.events.values():
            for _, kind_, *x in evs:
                m = re.search(r"([\d.]+) ms", x[0] if x else "")
                took.setdefault(kind_, []).append(float(m.group(1)) if m else None)
        for kind_, ms in sorted(took.items()):
            ms = sorted(v for v in ms if v is not None)
            print(f"  {kind_}: {len(took[kind_])} times" + (
                f", median {statistics.median(ms):.2f} ms, max {ms[-1]:.2f} ms" if ms else ""))


class RustProbe:
    """The compiled client, `benches/cluster_probe.rs`, in the Probe's
    place (`--rust-client`): the same figures, without a trace. It runs
    until its input closes, then hands over every request's start and
    latency."""

    binary = None  # its path, built once by `build`

    @classmethod
    def build(cls):
        cls.binary = str(benchlib.cargo_bench_binary("cluster_probe"))

    def __init__(self, port, kind, keys):
        self.p = subprocess.Popen([self.binary, "--port", str(port), "--kind", kind, "--keys", str(keys)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=to_client_cpus)
        self.stop = self  # `stop.set()`, as the Probe's event
        self.lat, self.began, self.errors, self.error_seen = [], [], 0, []

    def start(self):
        if self.p.stdout.readline().strip() != "ready":
            raise SystemExit(f"cluster_probe did not connect (exit {self.p.wait()})")

    def set(self):
        self.p.stdin.close()

    def join(self):
        for line in self.p.stdout:
            t, took, ok, *err = line.split(" ", 3)
            self.began.append(int(t) / 1e9)
            self.lat.append(int(took) / 1e9)
            if ok == "0":
                self.errors += 1
                if len(self.error_seen) < 3:
                    self.error_seen.append(err[0].strip()[:120] if err else "?")
        if self.p.wait() != 0:
            raise SystemExit(f"cluster_probe failed (exit {self.p.returncode})")

    def during(self, t0, t1):
        return during(self.began, t0, t1)

    def worst(self, t0, t1):
        return "-"


def cpu_seconds(procs):
    """User + system CPU time the processes have used (clock ticks)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in procs:
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def machine_busy():
    """CPU time every process on the machine has used (seconds, /proc/stat:
    all but idle and iowait), and the part of it stolen: time this virtual
    machine's CPUs were ready and its host ran something else, which no
    task of its own shows (`perf sched` sees a request wait with nothing
    running)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(v) - v[3] - v[4]) / tick, v[7] / tick


def node_switches(procs):
    """The nodes' threads' context switches so far, by thread:
    {(pid, tid): (name, waits, preempted)}, the name as /proc names it.
    A wait is a thread going to sleep and, later, another thread's work
    to wake it: on the servers' one core, each is a switch the request in
    flight may queue behind."""
    out = {}
    for p in procs:
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            try:
                with open(f"/proc/{p.pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                counts = {}
                with open(f"/proc/{p.pid}/task/{tid}/status") as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                            counts[key] = int(value)
                out[(p.pid, tid)] = (name, counts["voluntary_ctxt_switches"],
                                     counts["nonvoluntary_ctxt_switches"])
            except (FileNotFoundError, KeyError):
                pass
    return out


def switches_since(before, after):
    """`node_switches` during an interval, summed by thread name: {name:
    [waits, preempted]}. Each thread counts from its own count before (a
    thread that started meanwhile, from nothing); a thread that ended
    meanwhile counts nothing (tokio's blocking threads share the workers'
    name and end after 10 s idle: summed by name before and after, one
    that ended took its switches off the workers' count)."""
    out = {}
    for key, (name, waits, preempted) in after.items():
        _, waits0, preempted0 = before.get(key, (name, 0, 0))
        sums = out.setdefault(name, [0, 0])
        sums[0] += waits - waits0
        sums[1] += preempted - preempted0
    return out


def wait_ok(ports, timeout=60):
    """Until every node knows every slot's owner (`cluster_state:ok`) and
    every other node (past its handshake): `redis-cli` moves a slot with
    `SETSLOT ... NODE id`, which a node that has not met `id` refuses
    (Redis's "ERR Unknown node", seen with a 15 s node timeout)."""
    deadline = time.time() + timeout

    def ready(p):
        r = redis.Redis(port=p)
        if b"cluster_state:ok" not in r.execute_command("CLUSTER", "INFO"):
            return False
        lines = r.execute_command("CLUSTER", "NODES").decode().splitlines()
        return sum("handshake" not in line for line in lines) >= len(ports)
    for p in ports:
        while not ready(p):
            if time.time() > deadline:
                raise SystemExit(f"node {p} never reached cluster_state:ok with every node known")
            time.sleep(0.1)


def fill(port_base, kind, keys):
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", port_base)])
    pipe = rc.pipeline()
    for i in range(keys):
        if kind == "redis":
            pipe.incr(f"k:{i}")
            pipe.expire(f"k:{i}", 3600)
        else:
            pipe.execute_command("RL.ALLOW", f"k:{i}", 100, "1h")
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    return rc


def cli_quiet(args):
    """`redis-cli` with its output in a file: nothing in this process
    wakes for what it prints while the move runs."""
    with tempfile.TemporaryFile() as out:
        r = subprocess.run(["redis-cli", *args], stdout=out, stderr=subprocess.STDOUT, timeout=1800, input=b"yes\n",
                           preexec_fn=to_tool_cpus)
        if r.returncode != 0:
            out.seek(0)
            raise SystemExit(f"redis-cli {' '.join(args)}: {out.read()[-4000:].decode(errors='replace')}")


def measure(kind, binary, base, keys, trace=0, client_gc=False, rust_client=False, slowest=0):
    c = Cluster(kind, binary, base)
    try:
        for i in range(4):
            c.start(base + i)
        cli("--cluster", "create", *[f"127.0.0.1:{base + i}" for i in range(3)], "--cluster-yes")
        wait_ok([base + i for i in range(3)])
        rc = fill(base, kind, keys)
        cli("--cluster", "add-node", f"127.0.0.1:{base + 3}", f"127.0.0.1:{base}")
        wait_ok([base + i for i in range(4)])
        out = {}
        for what in ("rebalance", "reshard"):
            # What the process holds so far is no part of the move: frozen,
            # a collection during it does not walk it.
            gc.collect()
            gc.freeze()
            if not client_gc:
                gc.disable()
            probe = RustProbe(base, kind, keys) if rust_client else Probe(rc, kind, keys, trace=trace > 0)
            probe.start()
            time.sleep(1)
            if what == "rebalance":
                args = ["--cluster", "rebalance", f"127.0.0.1:{base}", "--cluster-use-empty-masters"]
            else:
                new = redis.Redis(port=base + 3).execute_command("CLUSTER", "MYID").decode()
                first = redis.Redis(port=base).execute_command("CLUSTER", "MYID").decode()
                n = sum(int(b) - int(a) + 1 for a, b, *rest in redis.Redis(port=base + 3).execute_command("CLUSTER", "SLOTS")
                        if rest[0][1] == base + 3)
                args = ["--cluster", "reshard", f"127.0.0.1:{base}", "--cluster-from", new, "--cluster-to", first,
                        "--cluster-slots", str(n), "--cluster-yes"]
            cpu = cpu_seconds(c.procs)
            gcs = len(ClientGc.done)
            busy = machine_busy()
            nodes0 = node_switches(c.procs)
            t = time.time()
            t0 = time.perf_counter()
            live = None
            if trace:
                sw0 = probe.switches()
                live = LiveCli(args)
                live.wait()
                sw1 = probe.switches()
                print(f"\n{kind} {what}: client thread waited {sw1[0] - sw0[0]} times, was preempted "
                      f"{sw1[1] - sw0[1]} times")
            elif slowest:
                live = LiveCli(args)
                live.wait()
            else:
                cli_quiet(args)
            took = time.time() - t
            t1 = time.perf_counter()
            cpu = cpu_seconds(c.procs) - cpu
            busy, stolen = (now - then for now, then in zip(machine_busy(), busy))
            switched = switches_since(nodes0, node_switches(c.procs))
            probe.stop.set()
            probe.join()
            collections = [(b - a) * 1e3 for a, b, _ in ClientGc.done[gcs:]]
            gc.enable()
            gc.unfreeze()
            if trace:
                probe.report(what, kind, t0, t1, live, trace)
            lat = sorted(probe.lat[i] for i in probe.during(t0, t1))
            if slowest:
                worst = sorted(probe.during(t0, t1), key=lambda i: -probe.lat[i])[:slowest]
                print(f"\n{kind} {what}: {slowest} slowest (move from {t0:.6f} to {t1:.6f} s, CLOCK_MONOTONIC):")
                for i in worst:
                    print(f"  {probe.lat[i] * 1e3:6.2f} ms at {probe.began[i]:.6f} ({(probe.began[i] - t0) * 1e3:8.1f} ms"
                          f" into the move)  cli: {live.before(probe.began[i])}", flush=True)
            out[what] = Move(took, cpu, statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99)] * 1e3,
                             lat[int(len(lat) * 0.999)] * 1e3, sum(x > SLOW for x in lat), lat[-1] * 1e3,
                             probe.errors, len(lat), probe.worst(t0, t1), len(collections),
                             max(collections, default=0.0), busy / took)
            out[what].stolen = stolen
            out[what].window = (t0, t1)
            out[what].switched = switched
            if rust_client:
                # For `--sched`: the requests over 1 ms, and whose the pids are.
                out[what].slow_reqs = [(probe.began[i], probe.lat[i]) for i in probe.during(t0, t1)
                                       if probe.lat[i] > 0.001]
                out[what].own = {p.pid: f"node {base + n}" for n, p in enumerate(c.procs)}
                out[what].own[probe.p.pid] = "client"
            for e in probe.error_seen:
                print(f"{kind} {what}: client error: {e}")
            wait_ok([base + i for i in range(4)])
        return out
    finally:
        c.stop()


class Move:
    """One move's figures in one run."""

    def __init__(self, took, cpu, median, p99, p999, slow, worst, errors, requests, cause, gcs, gc_max, busy):
        self.took, self.cpu, self.median, self.p99, self.worst = took, cpu, median, p99, worst
        self.p999, self.slow = p999, slow
        self.errors, self.requests, self.cause, self.gcs, self.gc_max = errors, requests, cause, gcs, gc_max
        # The machine's cores busy during the move, every process's work
        # (the nodes', the client's, redis-cli's and anyone else's).
        self.busy = busy
        # CPU time the host took from this machine during the move (s).
        self.stolen = 0.0
        # The nodes' threads' context switches during the move, by name.
        self.switched = {}
        # With `--sched`: the worst request no other task held a core in.
        self.slow_reqs, self.own, self.clean = [], {}, None
        # The move's start and end (CLOCK_MONOTONIC seconds).
        self.window = None


def at_least(low):
    """An argparse type: an integer no less than `low`."""
    def parse(text):
        n = int(text)
        if n < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {n}")
        return n
    return parse


def main():
    global NODE_TIMEOUT_MS, SERVER_CPUS, CLIENT_CPUS, RT_CLIENT
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=at_least(1), default=100_000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/turnstile"))
    ap.add_argument("--redis-server", default=shutil.which("redis-server"))
    ap.add_argument("--trace", type=at_least(0), default=0, help="list each move's N slowest requests")
    ap.add_argument("--runs", type=at_least(1), default=1, help="measure each server N times, alternated")
    ap.add_argument("--client-gc", action="store_true",
                    help="leave the client's garbage collector on during the moves")
    ap.add_argument("--pin", action="store_true",
                    help="the client on the first CPU, the nodes and redis-cli on the others")
    ap.add_argument("--slowest", type=at_least(0), default=0,
                    help="print each move's N slowest requests: start (CLOCK_MONOTONIC: perf's clock with"
                    " `-k CLOCK_MONOTONIC`; its default is a few ms off), latency,"
                    " and what redis-cli had last printed")
    ap.add_argument("--rust-client", action="store_true",
                    help="measure with the compiled client, benches/cluster_probe.rs, not redis-py")
    ap.add_argument("--node-timeout", type=at_least(1), default=NODE_TIMEOUT_MS,
                    help="both servers' --cluster-node-timeout, ms")
    ap.add_argument("--sched", action="store_true",
                    help="record the run with perf sched and name what held the cores during each slow request;"
                    " report the worst request during which only the move ran (needs --pin --rust-client)")
    ap.add_argument("--rt-client", action="store_true",
                    help="run the compiled client SCHED_FIFO on its own core, so that no kernel thread there delays"
                    " it (needs --pin --rust-client and root)")
    ap.add_argument("--only", choices=("turnstile", "redis"),
                    help="measure one server only (a diagnosis; the comparison needs both)")
    a = ap.parse_args()
    NODE_TIMEOUT_MS = a.node_timeout
    if a.sched and not (a.pin and a.rust_client):
        raise SystemExit("--sched needs --pin and --rust-client: the client's core must be its own, and its"
                         " requests stamped on perf's clock")
    if a.rt_client and not (a.pin and a.rust_client):
        raise SystemExit("--rt-client needs --pin and --rust-client: a real-time client must have its core to itself")
    RT_CLIENT = a.rt_client
    # Said now, not as a child's failed start or a missing file mid-run.
    if a.rt_client and os.geteuid() != 0:
        raise SystemExit("--rt-client needs root: SCHED_FIFO is a privileged scheduling class")
    if a.sched and shutil.which("perf") is None:
        raise SystemExit("--sched needs perf (Debian: apt-get install linux-perf)")
    if a.rust_client:
        if a.trace:
            raise SystemExit("--trace follows redis-py's requests: not with --rust-client")
        RustProbe.build()
    if a.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs two CPUs")
        SERVER_CPUS = set(cpus[1:])
        CLIENT_CPUS = {cpus[0]}
        # Before any thread starts: each inherits its creator's CPUs. The
        # compiled client is a process of its own, so this one (which
        # then only waits, or reads redis-cli's output for `--slowest`)
        # leaves the client's core to it.
        os.sched_setaffinity(0, tool_cpus() if a.rust_client else CLIENT_CPUS)
    if a.trace:
        Trace.install()
    gc.callbacks.append(ClientGc.callback)
    servers = {"turnstile": (a.bin, 15001), "redis": (a.redis_server, 14001)}
    if a.only:
        servers = {a.only: servers[a.only]}
    results = {kind: [] for kind in servers}
    sched = Sched() if a.sched else None
    try:
        for run in range(a.runs):
            # T, R, then R, T: neither always goes first (a fresh machine,
            # the other's leftovers, the client process's own history).
            order = ("turnstile", "redis") if run % 2 == 0 else ("redis", "turnstile")
            for kind in (k for k in order if k in servers):
                binary, base = servers[kind]
                load = os.getloadavg()[0]
                m = measure(kind, binary, base, a.keys, a.trace, a.client_gc, a.rust_client, a.slowest)
                results[kind].append((load, m))
    except BaseException:
        # A recording left running would fill its file system.
        if sched:
            sched.abandon()
        raise
    if sched:
        sched.finish()
        for run in range(a.runs):
            for kind in results:
                for what, m in results[kind][run][1].items():
                    # At least the worst request is named, with or without `--slowest`.
                    sched.judge(m, kind, f"{what} (run {run + 1})", max(a.slowest, 1))
        if SERVER_CPUS is not None:
            # Whether one server's nodes meet more of the host's stalls
            # than the other's: their threads sleep and wake in different
            # ways, and the host stalls a CPU that does so (a spinning one
            # it leaves alone).
            print("\nThe nodes' core during each move: how long tasks ran on it, and the part of that in which it"
                  " took no clock sample for 0.5 ms or more (the host did not run it), median (max) over the runs:\n")
            print("| move | server | tasks ran (s) | the host did not run it (ms) | share |")
            print("|---|---|---|---|---|")
            for what in ("rebalance", "reshard"):
                for kind in results:
                    got = [sched.stalls(*r[1][what].window, SERVER_CPUS) for r in results[kind]
                           if r[1][what].window]
                    if not got:
                        continue
                    ran = [b for b, _ in got]
                    host = [st * 1e3 for _, st in got]
                    share = [st / b * 100 if b else 0.0 for b, st in got]
                    print(f"| {what} | {kind} | {statistics.median(ran):.2f} ({max(ran):.2f}) |"
                          f" {statistics.median(host):.1f} ({max(host):.1f}) |"
                          f" {statistics.median(share):.2f}% ({max(share):.2f}%) |")
    # With --sched, the worst request during which only the move ran.
    clean = (lambda m: f" {m.clean:.1f} |") if sched else (lambda m: "")
    print(f"\n{a.keys} keys; 4,096 slots moved each way; one client, one request at a time;"
          f" the client's GC {'on' if a.client_gc else 'off'} during the moves"
          f"{'; the client on a core of its own' if a.pin else ''}"
          f"; the client {'benches/cluster_probe.rs (Rust)' if a.rust_client else 'redis-py'}\n")
    print(f"| run | move | server | load | machine busy (of {os.cpu_count()} cores) | stolen by the host (ms) |"
          " time (s) | nodes' CPU (s) |"
          " client median (ms) | p99 (ms) | p99.9 (ms) | over 5 ms | worst (ms) | worst request |"
          " client GCs (longest ms) | errors | requests |" + (" worst, only the move running (ms) |" if sched else ""))
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if sched else ""))
    for run in range(a.runs):
        for what in ("rebalance", "reshard"):
            for kind in (k for k in ("redis", "turnstile") if k in servers):
                load, mv = results[kind][run]
                m = mv[what]
                print(f"| {run + 1} | {what} | {kind} | {load:.1f} | {m.busy:.2f} | {m.stolen * 1e3:.0f} |"
                      f" {m.took:.1f} | {m.cpu:.2f} |"
                      f" {m.median:.2f} |"
                      f" {m.p99:.2f} | {m.p999:.2f} | {m.slow} | {m.worst:.1f} | {m.cause} | {m.gcs} ({m.gc_max:.1f}) | {m.errors} |"
                      f" {m.requests} |" + clean(m))
    print(f"\nThe nodes' threads' context switches during each move, summed over the four nodes by thread name,"
          f" median over {a.runs} run(s) (waits: the thread slept and was woken; preempted: taken off its core):\n")
    print("| move | server | thread | waits | preempted | per slot moved |")
    print("|---|---|---|---|---|---|")
    for what in ("rebalance", "reshard"):
        for kind in (k for k in ("redis", "turnstile") if k in servers):
            ms = [mv[what] for _, mv in results[kind]]
            names = sorted({n for m in ms for n in m.switched},
                           key=lambda n: -statistics.median(sum(m.switched.get(n, [0, 0])) for m in ms))
            for n in names:
                waits = statistics.median(m.switched.get(n, [0, 0])[0] for m in ms)
                pre = statistics.median(m.switched.get(n, [0, 0])[1] for m in ms)
                if waits + pre:
                    print(f"| {what} | {kind} | {n} | {waits:.0f} | {pre:.0f} | {(waits + pre) / 4096:.2f} |")
    if a.runs > 1:
        print(f"\nOver {a.runs} runs each, median (max):\n")
        print("| move | server | time (s) | nodes' CPU (s) | p99 (ms) | p99.9 (ms) | over 5 ms | worst (ms) |"
              " moves whose worst was above the other server's in the same run |"
              + (" worst, only the move running (ms) | above the other's |" if sched else ""))
        print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if sched else ""))
        for what in ("rebalance", "reshard"):
            for kind in (k for k in ("redis", "turnstile") if k in servers):
                other = "redis" if kind == "turnstile" else "turnstile"
                ms = [mv[what] for _, mv in results[kind]]
                pairs = [(mine[1][what], theirs[1][what])
                         for mine, theirs in zip(results[kind], results.get(other, []))]

                def above(f):
                    # With `--only`, there is no other server to be above.
                    if other not in results:
                        return "-"
                    return f"{sum(f(mine) > f(theirs) for mine, theirs in pairs)} of {a.runs}"
                tail = ""
                if sched:
                    cleans = [m.clean for m in ms]
                    tail = f" {statistics.median(cleans):.1f} ({max(cleans):.1f}) | {above(lambda m: m.clean)} |"

                def mm(xs, f="{:.1f}"):
                    return f"{f.format(statistics.median(xs))} ({f.format(max(xs))})"
                print(f"| {what} | {kind} | {mm([m.took for m in ms])} | {mm([m.cpu for m in ms], '{:.2f}')} |"
                      f" {mm([m.p99 for m in ms], '{:.2f}')} | {mm([m.p999 for m in ms], '{:.2f}')} |"
                      f" {mm([m.slow for m in ms], '{:.0f}')} | {mm([m.worst for m in ms])} | {above(lambda m: m.worst)} |"
                      + tail)


if __name__ == "__main__":
    main()
