#!/usr/bin/env python3
"""Policies and the rate limit service through the clients users have.

    check.py BIN

Starts BIN (a release Turnstile) on free ports with policies.yaml beside this
file, the rate limit service on (`--rls-port 0 --rls-headers yes`), and then:

- gRPC, with grpcio and stubs generated here from Envoy's own .proto files
  (the ones the server is built from, found through `cargo metadata`):
  ShouldRateLimit (limits, nested descriptors, unlimited, shadow mode,
  hits_addend, a limit override, an unknown domain, the IETF headers, the
  UNAVAILABLE answer for a request it cannot decide) and the gRPC health
  service;
- envoyproxy/ratelimit's `POST /json` on the metrics port (200, then 429);
- RL.CHECK, RL.ALLOW ... POLICY and RL.POLICY through redis-py, over RESP3
  (redis-py 8's default) and RESP2.

Prints what it checked; exits 1 on the first failure, with the server log.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RLS_SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
checks = 0


def check(cond, what, detail=""):
    global checks
    if not cond:
        raise AssertionError(f"{what}: {detail}")
    checks += 1
    print(f"ok {what}")


def proto_root():
    """Envoy's .proto files, as the envoy-types crate the server builds with ships them."""
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    for pkg in meta["packages"]:
        if pkg["name"] == "envoy-types":
            return Path(pkg["manifest_path"]).parent / "proto"
    sys.exit("check.py: envoy-types is not among the server's dependencies")


def generate_stubs(out):
    """The Python modules of rls.proto and everything it imports."""
    import grpc_tools
    from grpc_tools import protoc

    root = proto_root()
    includes = [p for p in root.iterdir() if p.is_dir()]
    bundled = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*
    want, seen = ["envoy/service/ratelimit/v3/rls.proto"], set()
    while want:
        name = want.pop()
        if name in seen or name.startswith("google/protobuf/"):
            continue
        seen.add(name)
        path = next((d / name for d in includes if (d / name).is_file()), None)
        if path is None:
            sys.exit(f"check.py: {name} is in none of {root}'s directories")
        want += re.findall(r'^import\s+(?:public\s+)?"([^"]+)";', path.read_text(), re.M)
    args = ["protoc", f"-I{bundled}", *(f"-I{d}" for d in includes),
            f"--python_out={out}", f"--grpc_python_out={out}", *sorted(seen)]
    if protoc.main(args) != 0:
        sys.exit("check.py: protoc failed")
    # Generated packages import one another as top-level packages.
    for d in Path(out).rglob("*"):
        if d.is_dir():
            (d / "__init__.py").touch()
    sys.path.insert(0, str(out))
    print(f"generated stubs for {len(seen)} .proto files from {root}")


def start_server(bin_path, log):
    proc = subprocess.Popen(
        [bin_path, "--port", "0", "--bind", "127.0.0.1", "--metrics-addr", "127.0.0.1:0",
         "--rls-port", "0", "--rls-headers", "yes", "--policies", str(HERE / "policies.yaml"),
         "--log-level", "info"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
    wanted = {
        "resp": r"turnstile listening local=127\.0\.0\.1:(\d+)",
        "metrics": r"metrics listening on http://127\.0\.0\.1:(\d+)/metrics",
        "rls": r"rate limit service \(gRPC\) listening on 127\.0\.0\.1:(\d+)",
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"check.py: the server exited ({proc.returncode}) during start-up")
        text = re.sub(r"\x1b\[[0-9;]*m", "", Path(log.name).read_text())
        ports = {k: re.search(p, text) for k, p in wanted.items()}
        if all(ports.values()):
            return proc, {k: int(m.group(1)) for k, m in ports.items()}
        time.sleep(0.05)
    proc.kill()
    sys.exit("check.py: no listening lines within 30 s")


def grpc_checks(port):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=10)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", RLS_SERVICE):
        got = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        check(got.status == health_pb2.HealthCheckResponse.SERVING,
              f"gRPC health: {service or 'the server'} is SERVING", str(got))

    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    Resp = rls_pb2.RateLimitResponse

    def desc(*pairs, hits=None, limit=None):
        d = ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in pairs])
        if hits is not None:
            d.hits_addend.value = hits
        if limit is not None:
            d.limit.requests_per_unit, d.limit.unit = limit
        return d

    def ask(domain, *descriptors, hits=0):
        return stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits), timeout=5)

    def headers(resp):
        return {h.key: h.value for h in resp.response_headers_to_add}

    # 3 a minute per address: OK, OK, OK, then OVER_LIMIT.
    for n in range(4):
        r = ask("edge", desc(("remote_address", "10.0.0.1")))
        s = r.statuses[0]
        if n < 3:
            check(r.overall_code == Resp.OK and s.limit_remaining == 2 - n,
                  f"ShouldRateLimit: call {n + 1} of 3 a minute is OK, {2 - n} left", str(r))
        else:
            check(r.overall_code == Resp.OVER_LIMIT and s.code == Resp.OVER_LIMIT and s.limit_remaining == 0,
                  "ShouldRateLimit: the 4th call is OVER_LIMIT", str(r))
            check(0 < s.duration_until_reset.seconds <= 60,
                  "ShouldRateLimit: duration_until_reset within the minute", str(s.duration_until_reset))
            h = headers(r)
            check(h.get("RateLimit-Policy") == '"edge.remote_address";q=3;w=60'
                  and h.get("RateLimit", "").startswith('"edge.remote_address";r=0;t=')
                  and int(h.get("Retry-After", "0")) > 0,
                  "ShouldRateLimit: draft-10 RateLimit-Policy, RateLimit and Retry-After headers", str(h))
        check(s.current_limit.requests_per_unit == 3 and s.current_limit.unit == Resp.RateLimit.MINUTE
              and s.current_limit.name == "edge.remote_address",
              f"ShouldRateLimit: current_limit of call {n + 1} is 3 a MINUTE, named", str(s.current_limit))

    # Two descriptors, statuses in request order; a nested one by its name.
    r = ask("edge", desc(("path", "/login"), ("method", "POST")), desc(("remote_address", "10.0.0.2")))
    check(r.overall_code == Resp.OK and [s.current_limit.name for s in r.statuses]
          == ["login-posts", "edge.remote_address"] and [s.limit_remaining for s in r.statuses] == [1, 2],
          "ShouldRateLimit: two descriptors, statuses in request order", str(r))
    # All or nothing: login-posts goes over, so the address is not charged.
    ask("edge", desc(("path", "/login"), ("method", "POST")))
    r = ask("edge", desc(("path", "/login"), ("method", "POST")), desc(("remote_address", "10.0.0.2")))
    check(r.overall_code == Resp.OVER_LIMIT and r.statuses[0].code == Resp.OVER_LIMIT
          and r.statuses[1].code == Resp.OK,
          "ShouldRateLimit: one descriptor over makes the request OVER_LIMIT", str(r))
    r = ask("edge", desc(("remote_address", "10.0.0.2"), hits=0))
    check(r.statuses[0].limit_remaining == 2,
          "ShouldRateLimit: a denied request charged nothing (hits_addend 0 looks)", str(r))

    r = ask("edge", desc(("path", "/static/app.js")))
    check(r.overall_code == Resp.OK and r.statuses[0].limit_remaining == 4294967295,
          "ShouldRateLimit: unlimited answers OK with limit_remaining 2^32-1", str(r))
    for n in range(2):
        r = ask("edge", desc(("plan", "trial")))
        check(r.overall_code == Resp.OK, f"ShouldRateLimit: shadow mode lets call {n + 1} of 1 an hour through",
              str(r))
    r = ask("edge", desc(("remote_address", "10.0.0.3")), hits=3)
    check(r.overall_code == Resp.OK and r.statuses[0].limit_remaining == 0,
          "ShouldRateLimit: request hits_addend 3 charges 3", str(r))
    r = ask("edge", desc(("remote_address", "10.0.0.4"), limit=(1, Resp.RateLimit.HOUR)))
    r2 = ask("edge", desc(("remote_address", "10.0.0.4"), limit=(1, Resp.RateLimit.HOUR)))
    check(r.overall_code == Resp.OK and r2.overall_code == Resp.OVER_LIMIT
          and r2.statuses[0].current_limit.requests_per_unit == 1
          and r2.statuses[0].current_limit.unit == Resp.RateLimit.HOUR,
          "ShouldRateLimit: a descriptor's limit override (1 an HOUR) applies", f"{r} / {r2}")
    r = ask("nosuchdomain", desc(("remote_address", "10.0.0.1")))
    check(r.overall_code == Resp.OK and not r.statuses[0].HasField("current_limit"),
          "ShouldRateLimit: a domain no file names is OK, no current_limit", str(r))
    try:
        ask("", desc(("remote_address", "10.0.0.1")))
        check(False, "ShouldRateLimit: an empty domain is refused", "it was answered")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE,
              "ShouldRateLimit: an empty domain is UNAVAILABLE (Envoy's failure_mode_deny applies)", str(e))
    channel.close()


def json_checks(port):
    body = json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "remote_address", "value": "10.9.9.9"}]}]}).encode()
    for n in range(4):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/json", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        got = json.loads(text)
        want = 200 if n < 3 else 429
        check(status == want and got["overallCode"] == ("OK" if n < 3 else "OVER_LIMIT"),
              f"POST /json call {n + 1}: HTTP {want}", f"{status} {got}")
        if n == 0:
            check(got["statuses"][0]["currentLimit"] == {"name": "edge.remote_address", "requestsPerUnit": 3,
                                                         "unit": "MINUTE"},
                  "POST /json: currentLimit in protojson", str(got))


def redis_checks(port):
    import redis

    check(redis.__version__.startswith("8."), "redis-py is 8.x", redis.__version__)
    for protocol in (None, 2):  # None: the client's default (RESP3 in redis-py 8)
        r = redis.Redis(port=port, **({} if protocol is None else {"protocol": protocol}))
        proto = r.execute_command("HELLO")[b"proto"] if protocol is None else 2
        tag = f"redis-py RESP{proto}"
        addr = f"192.0.2.{proto}"
        for n in range(4):
            got = r.execute_command("RL.CHECK", "edge", "remote_address", addr)
            want_allowed = 1 if n < 3 else 0
            check(got[0] == want_allowed and got[1] == 3 and got[2] == max(0, 2 - n)
                  and got[5] == b"edge.remote_address",
                  f"{tag}: RL.CHECK call {n + 1} of 3 a minute", repr(got))
        got = r.execute_command("RL.CHECK", "edge", "path", "/static/x")
        check(got[0] == 1 and got[1] == -1 and got[2] == -1,
              f"{tag}: RL.CHECK of an unlimited policy answers limit -1", repr(got))
        got = r.execute_command("RL.CHECK", "edge", "PEEK", "remote_address", addr)
        check(got[0] == 0, f"{tag}: RL.CHECK PEEK sees the limit reached", repr(got))
        key = f"app:tenant:{proto}"
        seen = [r.execute_command("RL.ALLOW", key, "POLICY", "tenant-gcra")[0] for _ in range(6)]
        check(seen == [1, 1, 1, 1, 1, 0], f"{tag}: RL.ALLOW key POLICY tenant-gcra admits 5 then denies",
              repr(seen))
        try:
            r.execute_command("RL.ALLOW", key, "POLICY", "no-such-policy")
            check(False, f"{tag}: RL.ALLOW with an unknown policy fails", "it was answered")
        except redis.ResponseError as e:
            check("no-such-policy" in str(e), f"{tag}: RL.ALLOW with an unknown policy fails, naming it", str(e))
        listed = r.execute_command("RL.POLICY", "LIST")
        check(b"tenant-gcra" in repr(listed).encode() and b"login-posts" in repr(listed).encode(),
              f"{tag}: RL.POLICY LIST names the policies", repr(listed)[:300])
        check(r.execute_command("RL.POLICY", "RELOAD") in (b"OK", "OK", True),
              f"{tag}: RL.POLICY RELOAD", "")
        r.close()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_path = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="turnstile-policies.") as tmp:
        (Path(tmp) / "stubs").mkdir()
        generate_stubs(Path(tmp) / "stubs")
        log_path = Path(tmp) / "turnstile.log"
        with open(log_path, "w") as log:
            proc, ports = start_server(bin_path, log)
            try:
                grpc_checks(ports["rls"])
                json_checks(ports["metrics"])
                redis_checks(ports["resp"])
                node = subprocess.run(["node", str(HERE / "check.js"), str(ports["resp"])], timeout=60)
                check(node.returncode == 0, "ioredis checks (check.js)", f"exit {node.returncode}")
            except BaseException:
                print("--- server log (last lines)\n" + "".join(log_path.read_text().splitlines(True)[-30:]))
                raise
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            check(proc.returncode == 0, "the server stops cleanly on SIGTERM", str(proc.returncode))
    print(f"policies check: {checks} checks passed")


if __name__ == "__main__":
    main()
