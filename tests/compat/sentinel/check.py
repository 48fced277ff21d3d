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

import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from sentinel_common import (ask, check, conclude, procs, run, sentinel_master, start_sentinel,
                             wait_for)
from benchlib import free_ports  # sentinel_common puts benches/ on sys.path

from redis.sentinel import Sentinel

MASTER = "turnstile"


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
    wait_for("turnstile answers PING", lambda: ask(tport, "PING"), 10)
    for p in sports:
        start_sentinel(tmp, p, [(MASTER, tport)],
                       {"down-after-milliseconds": 1000, "failover-timeout": 10000})
    for p in sports:
        wait_for(f"sentinel {p} is up", lambda: ask(p, "PING"), 10)

    for p in sports:
        state = wait_for(
            f"sentinel {p} sees the primary and both other sentinels",
            lambda: (lambda s: s if s.get("flags") == "master"
                     and int(s.get("num-other-sentinels", 0)) == 2 else None)(
                         sentinel_master(p, MASTER)),
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
                    lambda: "o_down" in sentinel_master(p, MASTER).get("flags", ""), 30):
            check(True, f"sentinel {p}: the stopped primary is o_down")
    return conclude("sentinel check", tmp)


if __name__ == "__main__":
    run(main, "sentinel check")
