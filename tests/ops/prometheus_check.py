#!/usr/bin/env python3
"""The Grafana dashboard, checked against a real Prometheus scraping a real Turnstile.

    python3 tests/ops/prometheus_check.py target/release/turnstile

Needs the `prometheus` binary (Debian's `prometheus` package: /usr/bin/prometheus;
`promtool` from the same package is used if present) and redis-py (`pip install redis`).

1. Static checks of grafana/dashboards/turnstile.json: the datasource is the
   DS_PROMETHEUS template variable in every panel and target, $job/$instance
   select every series, rate windows are $__rate_interval (or $__range), panel
   ids are unique and the grid is 24 wide; the provisioning files point where
   docker-compose.yml mounts things; `promtool check config` on
   prometheus/prometheus.yml.
2. Starts Turnstile (free ports, --maxclients small) and Prometheus (temp
   config scraping Turnstile's /metrics every second, temp TSDB, 127.0.0.1 only).
3. Drives traffic with redis-py for a few seconds: RL.ALLOW on all four
   algorithms (allowed and limited), CL.THROTTLE, RL.ALLOWMANY, RL.CHECK on a
   policy file (enforced and shadow-mode policies), POST /json, SET/GET, a
   failing INCR, keys with 100 ms TTLs, one protocol error and one connection
   refused at --maxclients. Every reply is tallied.
4. Once Prometheus has scraped after the traffic, checks the scraped counters
   against the tallies (decisions, units, near-limit admissions, commands,
   histogram counts, protocol errors, rejections, expired keys, clients, keys).
5. Evaluates EVERY PromQL expression of the dashboard (every target's `expr`,
   with $__rate_interval, $__range, $job and $instance substituted as Grafana
   would, for one instance and for "All") through /api/v1/query, and every
   label_values() variable query through /api/v1/series: each must succeed and
   return at least one series with a finite value.

Everything is bounded in time (hard limit 110 s), listens on 127.0.0.1 only,
and every process started is killed at the end, failure or not. Exits 0 only
if every check passed.
"""

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

try:
    import redis
except ImportError:  # pragma: no cover - environment problem, said clearly
    sys.exit("prometheus_check: redis-py is missing (pip install redis)")

ROOT = Path(__file__).resolve().parents[2]
# The latency histogram's bucket count, read from the source so the check
# follows the code: the explicit bounds plus +Inf.
EXPECTED_BUCKETS = int(re.search(r"LATENCY_BUCKETS: \[f64; (\d+)\]",
                                 (ROOT / "src/metrics/mod.rs").read_text()).group(1)) + 1
HARD_LIMIT_S = 110
TRAFFIC_S = 6.0
MAXCLIENTS = 8
SCRAPE_S = 1
JOB = "turnstile"
# What Grafana would put in place of its interval variables. The rate window
# spans the whole traffic phase (which ends a few seconds before the queries).
RATE_INTERVAL = "30s"
RANGE = "5m"
ALGOS = ("window", "log", "gcra", "fixed")
# The policies RL.CHECK and /json are checked against: `user` admits 5 a
# minute per value, `trial` 1 per value in shadow mode.
POLICIES = """
domain: dash
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
      algorithm: window
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
      algorithm: window
"""

T0 = time.monotonic()
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Timeout(Exception):
    pass


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


# ----------------------------------------------------------------- results

class Report:
    def __init__(self):
        self.passed = []
        self.failed = []
        self.notes = []

    def check(self, ok, what, detail=""):
        (self.passed if ok else self.failed).append((what, detail))
        if not ok:
            log(f"FAIL {what}: {detail}")
        return ok

    def note(self, msg):
        self.notes.append(msg)
        log(f"note: {msg}")


R = Report()


# ----------------------------------------------------------------- processes

class Procs:
    """Every process started here, killed at exit whatever happens."""

    def __init__(self):
        self.procs = []

    def start(self, name, argv, logfile, env=None):
        f = open(logfile, "wb")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        f.close()
        self.procs.append((name, p))
        return p

    def stop(self, name, p, grace=5.0):
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        return p.returncode

    def stop_all(self):
        for name, p in reversed(self.procs):
            try:
                rc = self.stop(name, p)
                log(f"stopped {name} (pid {p.pid}, exit {rc})")
            except Exception as e:  # keep killing the others
                log(f"could not stop {name} (pid {p.pid}): {e}")
        self.procs.clear()


def free_port():
    sys.path.insert(0, str(ROOT / "benches"))
    from benchlib import free_port as below_ephemeral_range
    return below_ephemeral_range()


def wait_for(what, fn, timeout, interval=0.1):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # not ready yet
            last = e
        time.sleep(interval)
    raise Timeout(f"{what} not ready after {timeout:.0f}s" + (f" (last error: {last})" if last else ""))


def http_post(url, body, timeout=5):
    req = urllib.request.Request(url, data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


# ----------------------------------------------------------------- static

def static_checks(dash_path):
    dash = json.loads(dash_path.read_text())
    tvars = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = tvars.get("DS_PROMETHEUS", {})
    R.check(ds.get("type") == "datasource" and ds.get("query") == "prometheus",
            "dashboard: DS_PROMETHEUS is a datasource variable of type prometheus", json.dumps(ds)[:200])
    for name in ("job", "instance"):
        v = tvars.get(name, {})
        R.check(v.get("type") == "query" and (v.get("datasource") or {}).get("uid") == "${DS_PROMETHEUS}",
                f"dashboard: ${name} is a query variable on ${{DS_PROMETHEUS}}", json.dumps(v)[:200])
    R.check(bool(dash.get("uid")) and dash.get("title"), "dashboard: has uid and title")

    ids, exprs, bad = set(), [], []
    panels = list(dash.get("panels", []))
    for p in list(panels):
        panels.extend(p.get("panels", []))  # panels inside collapsed rows
    for p in panels:
        pid = p.get("id")
        if pid in ids:
            bad.append(f"duplicate panel id {pid}")
        ids.add(pid)
        g = p.get("gridPos", {})
        if g.get("x", 0) + g.get("w", 0) > 24:
            bad.append(f"panel {pid} wider than the grid: {g}")
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
            bad.append(f"panel {pid} ({p.get('title')}) datasource is {p.get('datasource')}")
        targets = p.get("targets", [])
        if not targets:
            bad.append(f"panel {pid} ({p.get('title')}) has no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            bad.append(f"panel {pid} refIds {refs}")
        for t in targets:
            if (t.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
                bad.append(f"panel {pid} target {t.get('refId')} datasource is {t.get('datasource')}")
            e = t.get("expr", "")
            if not e.strip():
                bad.append(f"panel {pid} target {t.get('refId')} has no expr")
                continue
            exprs.append((p, t, e))
            for m in re.finditer(r"\bturnstile_[a-z_]+", e):
                sel = e[m.end():]
                brace = re.match(r"\{([^}]*)\}", sel)
                if not brace or 'job=~"$job"' not in brace.group(1) or 'instance=~"$instance"' not in brace.group(1):
                    bad.append(f"panel {pid} ({p.get('title')}): {m.group(0)} not selected by $job and $instance")
            for w in re.findall(r"\[([^\]]*)\]", e):
                if w not in ("$__rate_interval", "$__range"):
                    bad.append(f"panel {pid} ({p.get('title')}): range [{w}] is not $__rate_interval/$__range")
    R.check(not bad, "dashboard: structure (ids, grid, datasources, selectors, rate windows)", "; ".join(bad))
    R.check(len(exprs) > 0, "dashboard: has PromQL targets")
    log(f"dashboard: {len(panels)} panels, {len(exprs)} PromQL targets")

    # Provisioning: what the files say must agree with docker-compose.yml.
    texts = {}
    for rel in ("grafana/provisioning/dashboards/turnstile.yml",
                "grafana/provisioning/datasources/prometheus.yml",
                "prometheus/prometheus.yml", "docker-compose.yml"):
        f = ROOT / rel
        if R.check(f.is_file(), f"file exists: {rel}"):
            texts[rel] = f.read_text()
    try:
        import yaml  # optional: PyYAML may not be installed where this runs
    except ImportError:
        yaml = None
        R.note("PyYAML not installed: provisioning files checked as text only")
        for rel, needles in (
                ("grafana/provisioning/dashboards/turnstile.yml", ["/var/lib/grafana/dashboards"]),
                ("grafana/provisioning/datasources/prometheus.yml", ["http://prometheus:9090", "uid: prometheus"]),
                ("prometheus/prometheus.yml", ["turnstile:9898", "scrape_interval: 5s"]),
                ("docker-compose.yml", ["./grafana/dashboards:/var/lib/grafana/dashboards",
                                        "./prometheus/prometheus.yml:", "TURNSTILE_METRICS_ADDR: 0.0.0.0:9898"])):
            missing = [n for n in needles if n not in texts.get(rel, "")]
            R.check(not missing, f"text: {rel} mentions {needles}", f"missing {missing}")
    if yaml and len(texts) == 4:
        docs = {}
        for rel, t in texts.items():
            try:
                docs[rel] = yaml.safe_load(t)
                R.check(True, f"yaml parses: {rel}")
            except yaml.YAMLError as e:
                R.check(False, f"yaml parses: {rel}", str(e))
        if len(docs) == 4:
            provider = docs["grafana/provisioning/dashboards/turnstile.yml"]["providers"][0]
            dsrc = docs["grafana/provisioning/datasources/prometheus.yml"]["datasources"][0]
            compose = docs["docker-compose.yml"]["services"]
            mounts = compose["grafana"]["volumes"]
            dash_dir = provider["options"]["path"]
            R.check(any(m.startswith("./grafana/dashboards:" + dash_dir) for m in mounts),
                    "provisioning: dashboard provider path is where compose mounts grafana/dashboards",
                    f"{dash_dir} vs {mounts}")
            R.check(any(m.startswith("./grafana/provisioning/") for m in mounts),
                    "provisioning: compose mounts grafana/provisioning", str(mounts))
            R.check(dsrc["type"] == "prometheus" and dsrc["url"] == "http://prometheus:9090"
                    and dsrc["uid"] == (tvars.get("DS_PROMETHEUS", {}).get("current") or {}).get("value"),
                    "provisioning: datasource is http://prometheus:9090 with the uid the dashboard defaults to",
                    json.dumps(dsrc))
            prom = docs["prometheus/prometheus.yml"]
            jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
            tj = jobs.get(JOB, {})
            targets = [t for sc in tj.get("static_configs", []) for t in sc.get("targets", [])]
            R.check(targets == ["turnstile:9898"] and tj.get("scrape_interval") == "5s",
                    "prometheus.yml: job turnstile scrapes turnstile:9898 every 5s", json.dumps(tj))
            env = compose["turnstile"].get("environment", {})
            R.check(env.get("TURNSTILE_METRICS_ADDR") == "0.0.0.0:9898" and env.get("TURNSTILE_BIND") == "0.0.0.0"
                    and (env.get("TURNSTILE_PROTECTED_MODE") == "no" or "TURNSTILE_REQUIREPASS" in env),
                    "compose: turnstile listens on 0.0.0.0, metrics on 0.0.0.0:9898, protected mode handled",
                    json.dumps(env))
            R.check(any("prometheus/prometheus.yml" in v for v in compose["prometheus"].get("volumes", [])),
                    "compose: prometheus mounts prometheus/prometheus.yml")
    return dash, exprs


def promtool_check(prom_bin):
    promtool = shutil.which("promtool") or str(Path(prom_bin).with_name("promtool"))
    if not Path(promtool).exists():
        R.note("promtool not found: prometheus/prometheus.yml not checked with it")
        return
    p = subprocess.run([promtool, "check", "config", str(ROOT / "prometheus/prometheus.yml")],
                       capture_output=True, text=True, timeout=20)
    R.check(p.returncode == 0, "promtool check config prometheus/prometheus.yml", (p.stdout + p.stderr).strip())


# ----------------------------------------------------------------- servers

def start_turnstile(procs, binary, tmp):
    logfile = tmp / "turnstile.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
    env["NO_COLOR"] = "1"
    (tmp / "policies.yaml").write_text(POLICIES)
    p = procs.start("turnstile", [binary, "--bind", "127.0.0.1", "--port", "0",
                                  "--metrics-addr", "127.0.0.1:0",
                                  "--policies", str(tmp / "policies.yaml"),
                                  # Durability: snapshots every second and
                                  # the append-only file, in the temp dir.
                                  "--snapshot", str(tmp / "dump.tsnap"),
                                  "--appendonly", "yes",
                                  "--maxclients", str(MAXCLIENTS)], logfile, env=env)

    def addrs():
        if p.poll() is not None:
            raise Timeout(f"turnstile exited with {p.returncode}: {logfile.read_text()[-2000:]}")
        text = ANSI.sub("", logfile.read_text(errors="replace"))
        m = re.search(r"metrics listening on http://([0-9.]+:\d+)/metrics", text)
        s = re.search(r"turnstile listening local=([0-9.]+):(\d+)", text)
        return (int(s.group(2)), m.group(1)) if m and s else None

    port, metrics = wait_for("turnstile", addrs, 10)
    status, body = http_get(f"http://{metrics}/healthz")
    R.check(status == 200, "turnstile /healthz answers 200", body)
    log(f"turnstile pid {p.pid}: redis port {port}, metrics http://{metrics}/metrics")
    return p, port, metrics


def start_replica(procs, binary, tmp, primary_port):
    logfile = tmp / "replica.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTILE_")}
    env["NO_COLOR"] = "1"
    p = procs.start("replica", [binary, "--bind", "127.0.0.1", "--port", "0", "--metrics-addr", "off",
                                "--replicaof", f"127.0.0.1:{primary_port}"], logfile, env=env)

    def synced():
        if p.poll() is not None:
            raise Timeout(f"replica exited with {p.returncode}: {logfile.read_text()[-2000:]}")
        return "replica synchronised" in logfile.read_text(errors="replace")

    wait_for("the replica's full copy", synced, 10)
    log(f"replica pid {p.pid} follows 127.0.0.1:{primary_port}")
    return p


def start_prometheus(procs, prom_bin, tmp, metrics_addr):
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_S}s\n"
        f"  evaluation_interval: {SCRAPE_S}s\n"
        "scrape_configs:\n"
        f"  - job_name: {JOB}\n"
        f"    scrape_interval: {SCRAPE_S}s\n"
        f"    scrape_timeout: {SCRAPE_S}s\n"
        f"    static_configs:\n"
        f"      - targets: ['{metrics_addr}']\n")
    last = None
    for attempt in range(3):  # the free port may be taken between probe and bind
        port = free_port()
        data = tmp / f"tsdb{attempt}"
        logfile = tmp / f"prometheus{attempt}.log"
        p = procs.start("prometheus", [prom_bin, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                                       f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
                                       "--storage.tsdb.retention.time=1h"], logfile)
        base = f"http://127.0.0.1:{port}"

        def ready():
            if p.poll() is not None:
                raise Timeout(f"prometheus exited with {p.returncode}: {logfile.read_text()[-2000:]}")
            return http_get(base + "/-/ready", timeout=2)[0] == 200

        try:
            wait_for("prometheus", ready, 20, interval=0.2)
            log(f"prometheus pid {p.pid} on {base}")
            return p, base
        except Timeout as e:
            last = e
            procs.stop("prometheus", p)
    raise last


class Prom:
    def __init__(self, base):
        self.base = base

    def api(self, path, params, timeout=10):
        data = urllib.parse.urlencode(params, doseq=True).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:  # 400/422 carry a JSON error body
            try:
                return json.loads(e.read())
            except Exception:
                return {"status": "error", "error": f"HTTP {e.code}"}

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("/api/v1/query", params)

    def value(self, expr, at=None):
        """The single value of an instant query, or None."""
        r = self.query(expr, at)
        res = r.get("data", {}).get("result", []) if r.get("status") == "success" else []
        if len(res) != 1:
            return None
        return float(res[0]["value"][1])

    def values(self, expr, label, at=None):
        r = self.query(expr, at)
        res = r.get("data", {}).get("result", []) if r.get("status") == "success" else []
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in res}


# ----------------------------------------------------------------- traffic

def decision(reply):
    """(allowed, limit, remaining, index) from an RL.* reply, RESP2 or RESP3."""
    if isinstance(reply, dict):
        g = {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
        return bool(g["allowed"]), g["limit"], g["remaining"], g.get("index")
    return bool(reply[0]), reply[1], reply[2], (reply[5] if len(reply) > 5 else None)


class Tally:
    def __init__(self):
        self.decisions = {(a, r): 0 for a in ALGOS for r in ("allowed", "limited")}
        self.units = {a: 0 for a in ALGOS}
        self.near = {a: 0 for a in ALGOS}
        self.commands = {}  # (command, status) -> n
        self.expiring = []
        self.plain_keys = set()
        self.protocol_errors = 0
        self.rejected = 0
        self.connections = 0
        self.day = int(time.time() // 86400)
        self.policy = {}  # (policy, stat) -> hits
        self.rls = {"ok": 0, "over_limit": 0, "error": 0}

    def cmd(self, name, ok=True):
        k = (name, "ok" if ok else "error")
        self.commands[k] = self.commands.get(k, 0) + 1

    def hit(self, policy, *stats):
        for stat in ("total_hits",) + stats:
            self.policy[(policy, stat)] = self.policy.get((policy, stat), 0) + 1

    def decide(self, algo, allowed, limit, remaining, charged):
        self.decisions[(algo, "allowed" if allowed else "limited")] += 1
        if allowed:
            self.units[algo] += charged
            if remaining * 10 < limit:
                self.near[algo] += 1


def raw_exchange(port, payload, timeout=3.0):
    """Sends payload on a fresh connection; returns everything read until close or timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(payload)
        chunks = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                b = s.recv(4096)
            except socket.timeout:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def protocol_error(port, tally):
    reply = raw_exchange(port, b"*1\r\n$x\r\n")
    tally.connections += 1
    tally.protocol_errors += 1
    R.check(reply.startswith(b"-ERR"), "traffic: malformed request answered with -ERR and closed", repr(reply[:100]))


def reject_one(port, tally, already_connected):
    """Fills --maxclients with idle sockets until one connection is refused."""
    held, rejected_reply = [], None
    try:
        for _ in range(MAXCLIENTS - already_connected + 3):
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
            s.sendall(b"PING\r\n")
            data = b""
            while b"\r\n" not in data:
                b = s.recv(1024)
                if not b:
                    break
                data += b
            if data.startswith(b"+PONG"):
                held.append(s)
                tally.connections += 1
                tally.cmd("ping")
                continue
            rejected_reply = data
            s.close()
            tally.rejected += 1
            break
    finally:
        for s in held:
            s.close()
    R.check(rejected_reply is not None and b"max number of clients" in rejected_reply,
            f"traffic: connection {len(held) + already_connected + 1} refused at --maxclients {MAXCLIENTS}",
            repr(rejected_reply))


def scrape_direct(metrics_addr):
    """Unlabelled samples of Turnstile's /metrics, read directly."""
    _, body = http_get(f"http://{metrics_addr}/metrics")
    out = {}
    for line in body.splitlines():
        m = re.fullmatch(r"([a-z_]+) (\S+)", line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def drive(port, metrics_addr, tally):
    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=5)
    r.ping()
    tally.connections += 1
    tally.cmd("ping")
    # Connection set-up commands (HELLO, CLIENT SETINFO) are not tallied:
    # only the commands below are compared exactly.
    start = time.monotonic()
    events_done = False
    i = 0
    while time.monotonic() - start < TRAFFIC_S:
        p = r.pipeline(transaction=False)
        expect = []
        for algo in ALGOS:
            key = f"rl:{algo}:{i}"
            for n in range(8):  # limit 5 with 8 calls: allowed, then limited
                cost = 2 if n == 1 else 1
                # Fixed windows are aligned on multiples of the period: with a
                # day, their keys do not expire during the test (unless it
                # straddles midnight UTC, which the checks allow for).
                period = 86400 if algo == "fixed" else 60
                p.execute_command("RL.ALLOW", key, 5, period, "ALGO", algo, "COST", cost)
                expect.append(("rl", algo, cost))
        for n in range(6):  # burst 3 (4 at once), then limited; the key lives ~4 min
            p.execute_command("CL.THROTTLE", f"cl:{i}", 3, 10, 600)
            expect.append(("cl", "gcra", 1))
        limits = (("log", f"many:user:{i % 3}", 3, 60), ("fixed", "many:ip", 10_000, 86400))
        for n in range(3):
            args = []
            for algo, key, limit, period in limits:
                args += ["LIMIT", key, limit, period, "ALGO", algo]
            p.execute_command("RL.ALLOWMANY", *args)
            expect.append(("many", limits, 1))
        for n in range(7):  # user: 5 a minute per value, then denied
            p.execute_command("RL.CHECK", "dash", "user", f"u{i}")
            expect.append(("check", n))
        for n in range(3):  # trial: 1 per value, then denied in shadow mode
            p.execute_command("RL.CHECK", "dash", "trial", f"t{i}")
            expect.append(("shadow", n))
        p.set(f"plain:{i}", "v")
        expect.append(("set", f"plain:{i}"))
        p.get(f"plain:{i}")
        expect.append(("get",))
        p.set("notanumber", "abc")
        expect.append(("set", "notanumber"))
        p.execute_command("INCR", "notanumber")  # r.incr() sends INCRBY
        expect.append(("incr-error",))
        for j in range(5):
            p.set(f"ttl:{i}:{j}", "v", px=100)
            expect.append(("ttl", f"ttl:{i}:{j}"))
        replies = p.execute(raise_on_error=False)
        for e, rep in zip(expect, replies):
            kind = e[0]
            if kind == "rl":
                allowed, limit, remaining, _ = decision(rep)
                tally.cmd("rl.allow")
                tally.decide(e[1], allowed, limit, remaining, e[2])
            elif kind == "cl":
                limited, limit, remaining = rep[0], rep[1], rep[2]
                tally.cmd("cl.throttle")
                tally.decide("gcra", not limited, limit, remaining, 1)
            elif kind == "many":
                allowed, limit, remaining, index = decision(rep)
                tally.cmd("rl.allowmany")
                # One decision, under the binding limit's algorithm; units
                # under every limit when admitted.
                binding = e[1][index][0]
                tally.decide(binding, allowed, limit, remaining, 0)
                if allowed:
                    for algo, *_ in e[1]:
                        tally.units[algo] += e[2]
            elif kind == "check":
                allowed, limit, remaining, _ = decision(rep)
                R.check(allowed == (e[1] < 5) and limit == 5, "traffic: RL.CHECK admits 5 per value", repr(rep))
                tally.cmd("rl.check")
                tally.decide("window", allowed, limit, remaining, 1)
                # Near: past 80% of the limit (the 5th admission).
                tally.hit("dash.user", *(("within_limit",) + (("near_limit",) if e[1] == 4 else ()))
                          if allowed else ("over_limit",))
            elif kind == "shadow":
                allowed, limit, remaining, _ = decision(rep)
                R.check(allowed and limit == 1, "traffic: RL.CHECK in shadow mode allows", repr(rep))
                tally.cmd("rl.check")
                # The decision is taken and counted: the 2nd and 3rd are
                # limited, though let through.
                tally.decide("window", e[1] == 0, 1, 0, 1)
                tally.hit("dash.trial", *(("within_limit", "near_limit") if e[1] == 0
                                          else ("over_limit", "shadow_mode")))
            elif kind == "set":
                tally.cmd("set")
                if not e[1].startswith("ttl:"):
                    tally.plain_keys.add(e[1])
            elif kind == "ttl":
                tally.cmd("set")
                tally.expiring.append(e[1])
            elif kind == "get":
                tally.cmd("get")
            elif kind == "incr-error":
                R.check(isinstance(rep, redis.ResponseError), "traffic: INCR on a non-number fails", repr(rep))
                tally.cmd("incr", ok=False)
        for n in range(6):  # the same through POST /json: 5 OK, then 429
            status, _ = http_post(f"http://{metrics_addr}/json", json.dumps({
                "domain": "dash", "descriptors": [{"entries": [{"key": "user", "value": f"j{i}"}]}]}))
            R.check(status == (200 if n < 5 else 429), "traffic: POST /json admits 5 per value", str(status))
            tally.rls["ok" if status == 200 else "over_limit"] += 1
            tally.decide("window", status == 200, 5, 4 - n, 1)
            tally.hit("dash.user", *(("within_limit",) + (("near_limit",) if n == 4 else ()))
                      if status == 200 else ("over_limit",))
        if not events_done and time.monotonic() - start > TRAFFIC_S / 3:
            protocol_error(port, tally)
            reject_one(port, tally, already_connected=1)
            events_done = True
        i += 1
        time.sleep(0.1)
    # Every TTL key has passed its 100 ms and reads as absent.
    time.sleep(0.2)
    p = r.pipeline(transaction=False)
    for k in tally.expiring:
        p.get(k)
    gone = p.execute()
    for _ in gone:
        tally.cmd("get")
    R.check(all(v is None for v in gone), "traffic: keys SET with PX 100 are gone after 300 ms")
    # A read leaves an expired key in place (it still counts in DBSIZE and
    # turnstile_keys) until the sweeper removes it and counts it as expired:
    # wait for that, so the key counts below are settled.
    try:
        wait_for("the sweeper to expire every PX 100 key",
                 lambda: scrape_direct(metrics_addr).get("turnstile_keys_expired_total", 0) >= len(tally.expiring),
                 15, interval=0.2)
    except Timeout as e:
        R.check(False, "traffic: expired keys swept", str(e))
    durability_and_scripts(r, metrics_addr, tally)
    dbsize = r.dbsize()
    tally.cmd("dbsize")
    r.close()
    r.connection_pool.disconnect()
    for a in ALGOS:
        R.check(tally.decisions[(a, "allowed")] > 0 and tally.decisions[(a, "limited")] > 0,
                f"traffic: algorithm {a} has both allowed and limited decisions",
                f"{tally.decisions[(a, 'allowed')]} allowed, {tally.decisions[(a, 'limited')]} limited")
    log(f"traffic: {i} rounds in {time.monotonic() - start:.1f}s, "
        f"{sum(tally.decisions.values())} decisions, {len(tally.expiring)} expiring keys, dbsize {dbsize}")
    return dbsize


def durability_and_scripts(r, metrics_addr, tally):
    """What the Durability and Scripts rows show beyond series at 0: a script,
    a transaction and an append-only file rewrite (auth failures and clock
    steps stay at 0: no password is set, the clock does not step). None of it
    makes a key or a decision, so the exact checks are not disturbed."""
    def rewrites_ok():
        _, body = http_get(f"http://{metrics_addr}/metrics")
        m = re.search(r'^turnstile_aof_rewrites_total\{result="ok"\} (\S+)$', body, re.M)
        return float(m.group(1)) if m else 0

    R.check(r.eval("return 1", 0) == 1, "traffic: EVAL runs a script")
    p = r.pipeline(transaction=True)
    p.ping()
    R.check(p.execute() == [True], "traffic: MULTI/PING/EXEC runs")
    tally.cmd("ping")  # counted as it runs, at EXEC
    before = rewrites_ok()
    R.check(before >= 1, "traffic: the append-only file's base was written at start", str(before))
    r.execute_command("BGREWRITEAOF")
    try:
        wait_for("BGREWRITEAOF to finish",
                 lambda: rewrites_ok() > before,
                 15, interval=0.1)
    except Timeout as e:
        R.check(False, "traffic: BGREWRITEAOF counted", str(e))


# ----------------------------------------------------------------- checks

def check_scraped(prom, tally, dbsize, instance, at):
    sel = f'job="{JOB}",instance="{instance}"'

    def eq(what, expr, expected, label=None):
        got = prom.value(expr, at)
        R.check(got is not None and got == expected, f"metrics: {what}", f"{expr} = {got}, expected {expected}")

    for (algo, result), n in tally.decisions.items():
        eq(f"decisions {algo}/{result} match the replies",
           f'turnstile_decisions_total{{{sel},algorithm="{algo}",result="{result}"}}', n)
    for algo, n in tally.units.items():
        eq(f"units consumed by {algo}", f'turnstile_units_consumed_total{{{sel},algorithm="{algo}"}}', n)
    for algo, n in tally.near.items():
        eq(f"near-limit admissions by {algo}", f'turnstile_near_limit_decisions_total{{{sel},algorithm="{algo}"}}', n)
    for (cmd, status), n in sorted(tally.commands.items()):
        eq(f"commands {cmd}/{status}", f'turnstile_commands_total{{{sel},command="{cmd}",status="{status}"}}', n)
    for cmd in ("rl.allow", "cl.throttle", "rl.allowmany", "get", "set"):
        total = tally.commands.get((cmd, "ok"), 0) + tally.commands.get((cmd, "error"), 0)
        # Latency is sampled (the first of each command on a connection,
        # then one in LATENCY_SAMPLE_EVERY at random), so the histogram holds
        # a share of the commands: at least one, at most all, and _count
        # equals +Inf.
        count = prom.value(f'turnstile_command_duration_seconds_count{{{sel},command="{cmd}"}}', at)
        inf = prom.value(f'turnstile_command_duration_seconds_bucket{{{sel},command="{cmd}",le="+Inf"}}', at)
        R.check(count is not None and 1 <= count <= total and inf == count,
                f"metrics: latency histogram for {cmd} samples its commands",
                f"count {count}, +Inf {inf}, commands {total}")
        buckets = prom.values(f'turnstile_command_duration_seconds_bucket{{{sel},command="{cmd}"}}', "le", at)
        ordered = [buckets[k] for k in sorted(buckets, key=lambda s: float(s))]
        R.check(len(ordered) == EXPECTED_BUCKETS and ordered == sorted(ordered),
                f"metrics: {cmd} histogram has {EXPECTED_BUCKETS} cumulative buckets", str(buckets))
    for (policy, stat), n in sorted(tally.policy.items()):
        eq(f"policy {policy} {stat}",
           f'turnstile_policy_hits_total{{{sel},domain="dash",policy="{policy}",stat="{stat}"}}', n)
    for code, n in tally.rls.items():
        eq(f"rate limit service calls {code}", f'turnstile_rls_requests_total{{{sel},code="{code}"}}', n)
    eq("policies loaded", f"turnstile_policies_loaded{{{sel}}}", 2)
    eq("policy loads ok (the start)", f'turnstile_policy_reloads_total{{{sel},result="ok"}}', 1)
    eq("protocol errors", f"turnstile_protocol_errors_total{{{sel}}}", tally.protocol_errors)
    eq("connections rejected for maxclients",
       f'turnstile_connections_rejected_total{{{sel},reason="maxclients"}}', tally.rejected)
    eq("max clients", f"turnstile_max_clients{{{sel}}}", MAXCLIENTS)
    eq("connected clients back to 0 once every client left", f"turnstile_connected_clients{{{sel}}}", 0)
    if int(time.time() // 86400) != tally.day:
        # Fixed windows of a day end at midnight UTC: their keys may have
        # expired during this run, so the key counts are not known exactly.
        R.note("the run straddled midnight UTC: expired/keys counts checked loosely")
        got = prom.value(f"turnstile_keys_expired_total{{{sel}}}", at)
        R.check(got is not None and got >= len(tally.expiring), "metrics: keys expired >= the PX 100 keys", str(got))
    else:
        eq("keys expired (the PX 100 keys)", f"turnstile_keys_expired_total{{{sel}}}", len(tally.expiring))
        eq("keys = DBSIZE", f"turnstile_keys{{{sel}}}", dbsize)
    eq("keys evicted (no memory limit)", f"turnstile_keys_evicted_total{{{sel}}}", 0)
    eq("keys without expiry = the plain SETs",
       f"turnstile_keys{{{sel}}} - turnstile_keys_with_expiry{{{sel}}}", len(tally.plain_keys))
    eq("build info", f"turnstile_build_info{{{sel}}}", 1)
    eq("the append-only file is on", f"turnstile_aof_enabled{{{sel}}}", 1)
    eq("the append-only file's writes succeed", f"turnstile_aof_last_write_ok{{{sel}}}", 1)
    eq("no append-only file rewrite failed", f'turnstile_aof_rewrites_total{{{sel},result="error"}}', 0)
    for expr, least in ((f'turnstile_aof_rewrites_total{{{sel},result="ok"}}', 2),  # the start's, BGREWRITEAOF
                        (f'turnstile_snapshots_total{{{sel},result="ok"}}', 1),
                        (f'turnstile_scripts_total{{{sel},result="ok"}}', 1),
                        (f'turnstile_transactions_total{{{sel},result="executed"}}', 1)):
        got = prom.value(expr, at)
        R.check(got is not None and got >= least, f"metrics: {expr} >= {least}", str(got))
    got = prom.value(f"turnstile_aof_fsync_lag_seconds{{{sel}}}", at)
    R.check(got is not None and 0 <= got < 2, "metrics: append-only file fsync lag under 2 s (everysec)", str(got))
    got = prom.value(f"turnstile_connections_received_total{{{sel}}}", at)
    R.check(got is not None and got >= tally.connections, "metrics: connections received >= connections made",
            f"{got} vs {tally.connections}")
    for name in ("turnstile_memory_used_bytes", "turnstile_net_input_bytes_total",
                 "turnstile_net_output_bytes_total", "turnstile_uptime_seconds"):
        got = prom.value(f"{name}{{{sel}}}", at)
        R.check(got is not None and got > 0, f"metrics: {name} > 0", str(got))
    got = prom.value(f"turnstile_memory_max_bytes{{{sel}}}", at)
    R.check(got == 0, "metrics: turnstile_memory_max_bytes is 0 (no limit)", str(got))


def grafana_regex_escape(v):
    # What Grafana's Prometheus datasource does to a multi-value/All variable's
    # values before putting them in a =~ matcher (and the PromQL string escape).
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", v)


def interpolate(expr, instance_value):
    out = (expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE)
           .replace("$__interval", "2s").replace("$job", JOB).replace("$instance", instance_value))
    left = re.findall(r"\$\{?\w+", out)
    return out, left


def check_dashboard_queries(prom, dash, exprs, instance, at):
    modes = (("instance", grafana_regex_escape(instance)), ("All", ".*"))
    n_ok = 0
    for p, t, expr in exprs:
        for mode, inst in modes:
            q, left = interpolate(expr, inst)
            what = f"panel {p['id']} \"{p['title']}\" {t['refId']} ({mode})"
            if left:
                R.check(False, f"query {what}", f"unknown variables {left} in {expr}")
                continue
            r = prom.query(q, at)
            if r.get("status") != "success":
                R.check(False, f"query {what}", f"{r.get('errorType')}: {r.get('error')}\n      {q}")
                continue
            data = r["data"]
            res = data["result"]
            if data["resultType"] == "scalar":
                res = [{"metric": {}, "value": res}]
            finite = [s for s in res if math.isfinite(float(s["value"][1]))]
            if R.check(bool(finite), f"query {what}",
                       f"{len(res)} series, none with a finite value\n      {q}"):
                n_ok += 1
                if mode == "instance":
                    vals = ", ".join(f"{json.dumps(s['metric'], sort_keys=True)}={float(s['value'][1]):.4g}"
                                     for s in finite[:3])
                    more = f" (+{len(finite) - 3} more)" if len(finite) > 3 else ""
                    log(f"ok {what}: {vals}{more}")
            if r.get("warnings"):
                R.note(f"{what}: warnings {r['warnings']}")
    log(f"dashboard queries: {n_ok} of {2 * len(exprs)} returned data")

    # Template variables: label_values(metric{selector}, label) through the series API.
    for v in dash["templating"]["list"]:
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
        m = re.fullmatch(r"\s*label_values\((.+),\s*(\w+)\)\s*", q)
        if not R.check(bool(m), f"variable ${v['name']} is a label_values() query", q):
            continue
        match, label = m.group(1), m.group(2)
        match = match.replace("$job", JOB).replace("$instance", ".*")
        r = prom.api("/api/v1/series", {"match[]": match, "start": f"{at - 300:.3f}", "end": f"{at:.3f}"})
        got = sorted({s.get(label) for s in r.get("data", []) if s.get(label)}) if r.get("status") == "success" else []
        expected = JOB if label == "job" else instance
        R.check(expected in got, f"variable ${v['name']}: {q} lists {expected}", f"{r.get('error')} {got}")


# ----------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("turnstile", help="path to the turnstile binary (target/release/turnstile)")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    ap.add_argument("--dashboard", default=str(ROOT / "grafana/dashboards/turnstile.json"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, TSDB)")
    args = ap.parse_args()

    binary = str(Path(args.turnstile).resolve())
    if not os.access(binary, os.X_OK):
        sys.exit(f"prometheus_check: not an executable: {binary}")
    if not os.access(args.prometheus, os.X_OK):
        sys.exit(f"prometheus_check: prometheus not found ({args.prometheus}); apt-get install -y prometheus")

    def on_alarm(*_):
        raise Timeout(f"hard time limit of {HARD_LIMIT_S}s reached")

    def on_term(signum, _):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(HARD_LIMIT_S)

    procs = Procs()
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-promcheck."))
    error = None
    try:
        ver = subprocess.run([args.prometheus, "--version"], capture_output=True, text=True, timeout=10)
        log(f"using {args.prometheus}: {(ver.stdout or ver.stderr).splitlines()[0]}")
        dash, exprs = static_checks(Path(args.dashboard))
        promtool_check(args.prometheus)

        ts_proc, port, metrics_addr = start_turnstile(procs, binary, tmp)
        # A replica of it, so the replication row has a replica to show.
        start_replica(procs, binary, tmp, port)
        prom_proc, base = start_prometheus(procs, args.prometheus, tmp, metrics_addr)
        prom = Prom(base)
        up = f'up{{job="{JOB}"}}'
        wait_for("first scrape of turnstile", lambda: prom.value(up) == 1, 15, interval=0.25)
        log("prometheus scrapes turnstile (up == 1)")

        tally = Tally()
        dbsize = drive(port, metrics_addr, tally)
        # A scrape that began after every client had left, and enough samples
        # in the rate window.
        t_end = time.time()
        wait_for("a scrape after the traffic",
                 lambda: (prom.value(f"timestamp({up})") or 0) > t_end + 1.0, 30, interval=0.25)
        at = time.time()
        samples = prom.value(f"count_over_time({up}[1m])", at)
        R.check(samples is not None and samples >= 5, "prometheus scraped turnstile at least 5 times",
                f"{samples} samples")
        failures = prom.value(f"count_over_time(({up} == 0)[1m])", at)
        R.check(not failures, "every scrape succeeded", f"{failures} failed scrapes")
        instance = metrics_addr

        check_scraped(prom, tally, dbsize, instance, at)
        check_dashboard_queries(prom, dash, exprs, instance, at)

        # Graceful shutdown of the server under test.
        rc = procs.stop("turnstile", ts_proc)
        R.check(rc == 0, "turnstile exits 0 on SIGTERM", f"exit {rc}")
    except (Timeout, Exception) as e:  # report, then clean up below
        error = e
        R.check(False, "run", f"{type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
        procs.stop_all()
        if R.failed or args.keep:
            log(f"logs kept in {tmp}")
            for f in sorted(tmp.glob("*.log")):
                text = f.read_text(errors="replace").strip()
                if text and R.failed:
                    print(f"--- {f.name} (last lines)\n" + "\n".join(text.splitlines()[-15:]))
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"prometheus_check: {len(R.passed)} checks passed, {len(R.failed)} failed "
          f"in {time.monotonic() - T0:.1f}s")
    for what, detail in R.failed:
        print(f"  FAILED {what}\n      {detail}")
    for n in R.notes:
        print(f"  note: {n}")
    if error is not None and not isinstance(error, Timeout):
        import traceback
        traceback.print_exception(type(error), error, error.__traceback__)
    sys.exit(1 if R.failed else 0)


if __name__ == "__main__":
    main()
