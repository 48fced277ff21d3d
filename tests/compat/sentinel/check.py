#!/usr/bin/env python3
"""Real Redis Sentinels watching a Turnstile primary.

    check.py path/to/turnstile

Starts Turnstile and three `redis-sentinel` processes (Debian's) on free
loopback ports, each told `sentinel monitor turnstile 127.0.0.1 PORT 2`, and
checks what Sentinel needs of a primary today:

- each Sentinel sees a primary (`role:master` and `run_id` from `INFO`,
  `PING` answered) with no down flags;
- the Sentinels find each other through the `__sentinel__:hello` channel
  of the primary (they `PUBLISH` there and `SUBSCRIBE` to it): each lists
  the other two;
- redis-py's `Sentinel` discovers the primary and a `master_for` client
  decides limits through it;
- once the primary is stopped, the Sentinels agree that it is down
  (`o_down`, by quorum).

Failover itself needs replicas (replication, to come): the Sentinels here
have none to promote. Exit status 0 when every check passed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benches"))
from benchlib import free_ports  # noqa: E402

import redis  # noqa: E402
from redis.sentinel import Sentinel  # noqa: E402

MASTER = "turnstile"
failures = []
procs = []


def check(ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""),
          flush=True)
    if not ok:
        failures.append(what)
    return ok


def wait_for(what, fn, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (redis.RedisError, OSError) as e:
            last = e
        time.sleep(0.2)
    check(False, what, f"not within {timeout} s (last: {last!r})")
    return None


def master_state(sentinel_port):
    """SENTINEL MASTER as a dict."""
    c = redis.Redis(port=sentinel_port, decode_responses=True, socket_timeout=2)
    flat = c.execute_command("SENTINEL", "MASTER", MASTER)
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[0::2], flat[1::2]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    if not shutil.which("redis-sentinel"):
        sys.exit("redis-sentinel is not installed (apt-get install redis-sentinel)")
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-sentinel."))
    tport, *sports = free_ports(4)
    log = open(tmp / "turnstile.log", "w")
    t = subprocess.Popen([binary, "--port", str(tport), "--metrics-addr", "off"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(t)
    wait_for("turnstile answers PING",
             lambda: redis.Redis(port=tport, socket_timeout=1).ping(), 10)
    for p in sports:
        conf = tmp / f"sentinel-{p}.conf"
        conf.write_text(
            f"port {p}\nbind 127.0.0.1\ndir {tmp}\nlogfile {tmp}/sentinel-{p}.log\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {tport} 2\n"
            f"sentinel down-after-milliseconds {MASTER} 1000\n"
            f"sentinel failover-timeout {MASTER} 10000\n")
        procs.append(subprocess.Popen(["redis-sentinel", str(conf)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    for p in sports:
        wait_for(f"sentinel {p} is up", lambda: redis.Redis(port=p, socket_timeout=1).ping(), 10)

    for p in sports:
        state = wait_for(
            f"sentinel {p} sees the primary and both other sentinels",
            lambda: (lambda s: s if s.get("flags") == "master"
                     and int(s.get("num-other-sentinels", 0)) == 2 else None)(master_state(p)),
            40)
        if state:
            check(True, f"sentinel {p}: flags={state['flags']}, "
                        f"num-other-sentinels={state['num-other-sentinels']}, "
                        f"run-id={state.get('runid', '?')[:8]}...")
            check(len(state.get("runid", "")) == 40, f"sentinel {p} read the primary's run_id")

    sentinel = Sentinel([("127.0.0.1", p) for p in sports], socket_timeout=2)
    check(sentinel.discover_master(MASTER) == ("127.0.0.1", tport),
          "redis-py Sentinel discovers the primary", str(sentinel.discover_master(MASTER)))
    primary = sentinel.master_for(MASTER, socket_timeout=2)
    reply = primary.execute_command("RL.ALLOW", "sentinel:check", 2, 60)
    check(reply[0] == 1, "a master_for client decides a limit", repr(reply))

    t.send_signal(signal.SIGTERM)
    t.wait(timeout=10)
    for p in sports:
        if wait_for(f"sentinel {p} agrees the stopped primary is down (o_down)",
                    lambda: "o_down" in master_state(p).get("flags", ""), 30):
            check(True, f"sentinel {p}: the stopped primary is o_down")

    if failures:
        for p in sports:
            print(f"--- sentinel-{p}.log (last lines)")
            print("".join(open(tmp / f"sentinel-{p}.log").readlines()[-15:]))
        print(f"sentinel check: {len(failures)} failed: {failures}")
        return 1
    print("sentinel check: every check passed")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        code = main()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    sys.exit(code)
