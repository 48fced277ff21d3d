#!/usr/bin/env python3
"""Real Redis Sentinels watching a Turnstile primary.

    check.py path/to/turnstile [--users]

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

Failover itself is failover.py's. With `--users`, Turnstile runs on an
ACL file with the `default` user off: the Sentinels log in as a
`sentinel` user holding only what Redis's documentation gives Sentinel
(`sentinel auth-user` / `auth-pass`), and the redis-py client as an `app`
user; `CLIENT LIST` must show the Sentinels' connections as that user.
Exit status 0 when every check passed.
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

import redis
from redis.sentinel import Sentinel

MASTER = "turnstile"

# Redis's documented least privilege for Sentinel ("ACL rules for
# Sentinel"), and a client user; `default` off, so nothing runs unnamed.
USERS = (
    "user default off\n"
    "user sentinel on >sentinel-pw allchannels +multi +slaveof +ping +exec +subscribe "
    "+config|rewrite +role +publish +info +client|setname +client|kill +script|kill\n"
    "user app on >app-pw ~* &* +@all\n"
)


def refused(port):
    """Whether an unnamed client is refused (NOAUTH) by `port`."""
    try:
        ask(port, "PING")
    except redis.exceptions.AuthenticationError:
        return True
    except redis.exceptions.ResponseError as e:
        return "NOAUTH" in str(e)
    return False


def main():
    args = [a for a in sys.argv[1:] if a != "--users"]
    users = "--users" in sys.argv[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    binary = args[0]
    if not shutil.which("redis-sentinel"):
        sys.exit("redis-sentinel is not installed (apt-get install redis-sentinel)")
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-sentinel."))
    tport, *sports = free_ports(4)
    log = open(tmp / "turnstile.log", "w")
    argv = [binary, "--port", str(tport), "--metrics-addr", "off"]
    settings = {"down-after-milliseconds": 1000, "failover-timeout": 10000}
    login = {}
    if users:
        (tmp / "users.acl").write_text(USERS)
        argv += ["--aclfile", str(tmp / "users.acl")]
        settings.update({"auth-user": "sentinel", "auth-pass": "sentinel-pw"})
        login = {"username": "app", "password": "app-pw"}
    t = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    procs.append(t)
    if users:
        wait_for("turnstile refuses the default user", lambda: refused(tport), 10)
        wait_for("turnstile answers the app user's PING",
                 lambda: redis.Redis(port=tport, socket_timeout=2, **login).ping(), 10)
    else:
        wait_for("turnstile answers PING", lambda: ask(tport, "PING"), 10)
    for p in sports:
        start_sentinel(tmp, p, [(MASTER, tport)], settings)
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
    primary = sentinel.master_for(MASTER, socket_timeout=2, **login)
    reply = primary.execute_command("RL.ALLOW", "sentinel:check", 2, 60)
    check(reply[0] == 1, "a master_for client decides a limit", repr(reply))
    if users:
        clients = redis.Redis(port=tport, decode_responses=True, **login).client_list()
        by_sentinel = [c for c in clients if c.get("user") == "sentinel"]
        check(len(by_sentinel) >= 3, f"the Sentinels are logged in as their user ({len(by_sentinel)} connections)",
              repr([(c.get("addr"), c.get("user")) for c in clients]))
        check(all(c.get("user") in ("sentinel", "app") for c in clients), "no connection runs as default",
              repr([(c.get("addr"), c.get("user")) for c in clients]))
        denied = [e for e in redis.Redis(port=tport, decode_responses=True, **login).acl_log()
                  if e.get("username") == "sentinel"]
        check(not denied, "Sentinel was refused nothing (ACL LOG)", repr(denied))

    t.send_signal(signal.SIGTERM)
    t.wait(timeout=10)
    for p in sports:
        if wait_for(f"sentinel {p} agrees the stopped primary is down (o_down)",
                    lambda: "o_down" in sentinel_master(p, MASTER).get("flags", ""), 30):
            check(True, f"sentinel {p}: the stopped primary is o_down")
    return conclude("sentinel check", tmp)


if __name__ == "__main__":
    run(main, "sentinel check")
