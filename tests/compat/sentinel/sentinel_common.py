"""What the Sentinel checks beside this file (check.py, failover.py,
cluster_failover.py) share: the run's record (checks, failures, child
processes, logs), polling, short-lived connections, the RL.ALLOW decision
and count, server and redis-sentinel processes, the Sentinel and
INFO replication queries, a client thread deciding limits in a paced loop,
and the end of a run.

A script imports it by name (its own directory is sys.path[0]); importing
it also puts benches/ on sys.path, for `from benchlib import ...`.
"""

import collections
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
if str(ROOT / "benches") not in sys.path:
    sys.path.insert(0, str(ROOT / "benches"))
from benchlib import die_with_parent  # noqa: E402

import redis  # noqa: E402

failures = []       # the `what` of every failed check
procs = []          # every child process, killed by run() on the way out
logs = []           # (name, path) printed on failure
alive = {}          # name -> process that must be running now (a wait ends if one exits)
clients = []        # the client threads (PacedClient): a wait ends if one crashed
T0 = time.monotonic()


# ------------------------------------------------------------- checks, waits

def stamp():
    return f"[{time.monotonic() - T0:5.1f}s]"


def check(ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""),
          flush=True)
    if not ok:
        failures.append(what)
    return ok


def note(what):
    print(f"     {what}", flush=True)


def died():
    """Why a wait cannot succeed any more: a client thread crashed, or a
    process that must be running exited; None if neither."""
    for c in clients:
        if c.crash:
            return f"the {c.label} failed: {c.crash}"
    for name, p in alive.items():
        if p.poll() is not None:
            return f"{name} exited with status {p.returncode}"
    return None


def wait_for(what, fn, timeout, interval=0.1):
    """Polls `fn` until it returns something true, for `timeout` s at most;
    ends early, failed, if a process that must be running has exited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        reason = died()
        if reason:
            check(False, what, reason)
            return None
        try:
            last = fn()
            if last:
                return last
        except (redis.RedisError, OSError) as e:
            last = e
        time.sleep(interval)
    check(False, what, f"not within {timeout} s (last: {last!r})")
    return None


# ---------------------------------------------------------------- connections

def conn(port, timeout=2):
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True,
                       socket_timeout=timeout, socket_connect_timeout=timeout)


def ask(port, *args):
    c = conn(port)
    try:
        return c.execute_command(*args)
    finally:
        c.close()


def info_repl(port):
    c = conn(port)
    try:
        return c.info("replication")
    finally:
        c.close()


def repl_summary(port):
    """INFO replication of `port` on one line."""
    i = info_repl(port)
    if i.get("role") == "master":
        return (f"{port} role:master master_repl_offset:{i.get('master_repl_offset')} "
                f"connected_slaves:{i.get('connected_slaves')}")
    return (f"{port} role:{i.get('role')} master_port:{i.get('master_port')} "
            f"master_link_status:{i.get('master_link_status')} "
            f"slave_repl_offset:{i.get('slave_repl_offset')}")


def follows(port, primary):
    """`port` is a replica of `primary` with its link up."""
    i = info_repl(port)
    return (i.get("role") == "slave" and i.get("master_port") == primary
            and i.get("master_link_status") == "up")


def decide(client, key, limit):
    """RL.ALLOW key limit 1h ALGO fixed -> [allowed, limit, remaining,
    retry_after_ms, reset_after_ms]; admitted when allowed is 1."""
    reply = client.execute_command("RL.ALLOW", key, limit, "1h", "ALGO", "fixed")
    if not isinstance(reply, list) or len(reply) != 5:
        raise redis.ResponseError(f"bad RL.ALLOW reply {reply!r}")
    return int(reply[0]) == 1


def server_count(client, key, limit):
    """The admissions the server counted for `key` (RL.PEEK, same limit)."""
    allowed, _limit, remaining, _retry, _reset = client.execute_command(
        "RL.PEEK", key, limit, "1h", "ALGO", "fixed")
    # PEEK's remaining is what one more request would leave.
    return limit - int(remaining) - int(allowed)


# ------------------------------------------------------------------ sentinels

def as_dicts(reply):
    """SENTINEL REPLICAS/SENTINELS: a list of flat [field, value, ...] lists
    (RESP2) or of maps (RESP3)."""
    return [r if isinstance(r, dict) else dict(zip(r[0::2], r[1::2])) for r in reply]


def sentinel_master(port, name):
    """SENTINEL MASTER `name` of Sentinel `port` as a dict."""
    return as_dicts([ask(port, "SENTINEL", "MASTER", name)])[0]


def master_port_by(port, name):
    reply = ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
    return int(reply[1]) if reply else None


def agreed_primary(sentinel_ports, name):
    """The port every Sentinel names as `name`'s primary, None until they agree."""
    ports = {master_port_by(sp, name) for sp in sentinel_ports}
    return ports.pop() if len(ports) == 1 else None


def sentinel_ready(port, name, replica_ports):
    """Sentinel `port` lists `replica_ports` as replicas of `name` without
    down flags, and knows both other Sentinels."""
    replicas = as_dicts(ask(port, "SENTINEL", "REPLICAS", name))
    up = {int(r["port"]) for r in replicas
          if not {"s_down", "o_down", "disconnected"} & set(r["flags"].split(","))}
    sentinels = as_dicts(ask(port, "SENTINEL", "SENTINELS", name))
    others = [s for s in sentinels
              if not {"s_down", "disconnected"} & set(s["flags"].split(","))]
    return set(replica_ports) <= up and len(others) == 2


def start_sentinel(tmp, port, masters, settings):
    """redis-sentinel on `port`, monitoring each (name, primary port) of
    `masters` with quorum 2 and `settings` ({option: value}, written per
    name in this order); its log is tmp/sentinel-PORT.log."""
    conf = tmp / f"sentinel-{port}.conf"
    text = f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {tmp}\nlogfile \"\"\n"
    for name, primary in masters:
        text += f"sentinel monitor {name} 127.0.0.1 {primary} 2\n"
        text += "".join(f"sentinel {opt} {name} {value}\n" for opt, value in settings.items())
    conf.write_text(text)
    log_path = tmp / f"sentinel-{port}.log"
    logs.append((f"sentinel {port}", log_path))
    with open(log_path, "w") as log:
        p = subprocess.Popen(["redis-sentinel", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    procs.append(p)
    alive[f"sentinel {port}"] = p
    return p


# ------------------------------------------------------------------ processes

class ServerProcess:
    """A server (redis-server or Turnstile) on a fixed loopback port, so a
    restart takes the same port back; it runs in tmp/KIND-PORT and logs to
    tmp/KIND-PORT.log (every start appended, after a `=== argv` line)."""

    ping_interval = 0.1     # s between PINGs while it starts

    def __init__(self, kind, port, tmp):
        self.name = f"{kind} {port}"
        self.port = port
        self.dir = tmp / f"{kind}-{port}"
        self.dir.mkdir()
        self.log = tmp / f"{kind}-{port}.log"
        logs.append((self.name, self.log))
        self.proc = None

    def launch(self, argv):
        with open(self.log, "a") as log:
            log.write(f"=== {' '.join(argv)}\n")
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.dir,
                                         preexec_fn=die_with_parent)
        procs.append(self.proc)
        alive[self.name] = self.proc

    def answers(self):
        return wait_for(f"{self.name} answers PING", lambda: ask(self.port, "PING"), 10,
                        interval=self.ping_interval)

    def kill(self):
        del alive[self.name]
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


# --------------------------------------------------------------------- client

class PacedClient(threading.Thread):
    """Decides limits on `keys` round-robin, `rate` decisions/s (unpaced
    once `fast` is set), until stopped; after an error of `retried` it
    waits 50 ms and goes on. A subclass gives `decide(key)`; it may count
    answered decisions (`answered`) and choose the keys whose decisions
    after the kill count in ok_after_kill (`after_kill`). Once constructed,
    a crash of its loop ends every wait_for."""

    retried = (redis.RedisError, OSError)

    def __init__(self, label, client, keys, rate):
        super().__init__(daemon=True, name=label.replace(" ", "-"))
        self.label = label
        self.client = client
        self.keys = keys
        self.rate = rate
        self.stop_event = threading.Event()
        self.fast = False
        self.admitted = {k: 0 for k in keys}
        self.denied = {k: 0 for k in keys}
        self.admitted_at = {k: [] for k in keys}        # (start, end), monotonic
        self.ok = 0
        self.errors = 0
        self.error_kinds = collections.Counter()
        self.last_error = None
        self.t_dead = None                              # set by main once the primary is reaped
        self.ok_after_kill = 0
        self.crash = None
        clients.append(self)

    def decide(self, key):
        raise NotImplementedError

    def answered(self, key, start, end):
        """A decision on `key` sent at `start` was answered at `end`."""

    def after_kill(self, key):
        """Whether a decision on `key` after the kill counts in ok_after_kill."""
        return True

    def run(self):
        try:
            self.loop()
        except BaseException as e:  # a bug here: say so rather than stop quietly
            self.crash = repr(e)
            raise

    def loop(self):
        interval = 1.0 / self.rate
        nxt = time.monotonic()
        i = 0
        while not self.stop_event.is_set():
            key = self.keys[i % len(self.keys)]
            i += 1
            start = time.monotonic()
            try:
                verdict = self.decide(key)
            except self.retried as e:
                self.errors += 1
                self.error_kinds[type(e).__name__] += 1
                self.last_error = repr(e)
                self.stop_event.wait(0.05)
                nxt = time.monotonic()
                continue
            end = time.monotonic()
            self.ok += 1
            if self.t_dead is not None and start >= self.t_dead and self.after_kill(key):
                self.ok_after_kill += 1
            self.answered(key, start, end)
            if verdict:
                self.admitted[key] += 1
                self.admitted_at[key].append((start, end))
            else:
                self.denied[key] += 1
            if self.fast:
                continue
            nxt += interval
            wait = nxt - time.monotonic()
            if wait > 0:
                self.stop_event.wait(wait)
            elif wait < -0.05:
                nxt = time.monotonic()   # fell behind (an outage): no burst to catch up

    def stop(self):
        self.stop_event.set()
        self.join(timeout=5)
        return not self.is_alive()

    def lag_window(self, t_kill, window):
        """Per key: the admissions answered in the `window` s before t_kill
        (what a replica may not have received)."""
        return {k: sum(1 for s, e in v if s < t_kill and e >= t_kill - window)
                for k, v in self.admitted_at.items()}


# ------------------------------------------------------------- end of a run

def print_logs():
    for name, path in logs:
        try:
            lines = open(path, errors="replace").readlines()[-25:]
        except OSError:
            continue
        print(f"--- {name}: {path} (last {len(lines)} lines)")
        print("".join(lines), end="")


def conclude(title, tmp, keep=False):
    """The end of a run: how long it took, then the logs' last lines and the
    failed checks (the files in `tmp` kept), or the passing line (`tmp`
    removed unless `keep`). Returns the exit status."""
    print(f"run took {time.monotonic() - T0:.1f} s", flush=True)
    if failures:
        print_logs()
        print(f"{title}: {len(failures)} failed: {failures}; files kept in {tmp}")
        return 1
    print(f"{title}: every check passed" + (f"; files kept in {tmp}" if keep else ""))
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def run(main, title):
    """Runs `main` (returning the exit status) and exits with its status; an
    unexpected error is shown with the logs. Every client thread is told to
    stop and every child process is killed on the way out."""
    code = 1
    try:
        code = main()
    except Exception:  # an unexpected error: show it with the logs, never leave a process
        traceback.print_exc()
        print_logs()
        print(f"{title}: stopped by an unexpected error", flush=True)
    finally:
        for c in clients:
            c.stop_event.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    sys.exit(code)
