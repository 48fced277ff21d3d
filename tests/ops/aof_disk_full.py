#!/usr/bin/env python3
"""A full disk under the append-only file, for real: the file on a 4 MiB
tmpfs, one client pipelining writes on new keys until well after the disk
filled, then SIGKILL, and a restart (on a copy of the directory, on a disk
with room) to see which acknowledged writes survived.

Needs root (it mounts the tmpfs). Runs against turnstile (RL.ALLOW, a new
key each) or, with --redis, against redis-server (SET, a new key each), so
the two can be compared on the same setup:

    python3 tests/ops/aof_disk_full.py path/to/turnstile [everysec|always]
    python3 tests/ops/aof_disk_full.py --redis redis-server [everysec|always]

Reports, for `everysec`: writes acknowledged after the first failed write
(INFO's aof_last_write_status turned err), the errors answered, what PING
and a read answered meanwhile, and how many acknowledged writes the
restarted server lacks. For `always`: whether PING and INFO answered at all
after the disk filled, and whether the process exited. With turnstile it
fails (exit 1) if an acknowledged write is lost, if a write is
acknowledged after the failure was seen (everysec), or if the server does
not exit (always).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import benchlib  # noqa: E402

BATCH = 64
LOAD_SECONDS = 6.0


def mount_tmpfs(size="4m"):
    d = tempfile.mkdtemp(prefix="turnstile-diskfull-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d], check=True)
    return d


def start(kind, binary, port, d, mode):
    log = open(os.path.join(tempfile.gettempdir(), f"diskfull-{kind}-{port}.log"), "a")
    if kind == "redis":
        argv = [binary, "--port", str(port), "--save", "", "--dir", d, "--appendonly", "yes",
                "--appendfsync", mode, "--auto-aof-rewrite-percentage", "0"]
    else:
        argv = [binary, "--port", str(port), "--metrics-addr", "off", "--log-level", "info",
                "--snapshot", os.path.join(d, "dump.tsnap"), "--snapshot-interval", "3600",
                "--appendonly", "yes", "--appendfsync", mode, "--auto-aof-rewrite-percentage", "0"]
    p = subprocess.Popen(argv, stdout=log, stderr=log)
    benchlib.wait_ping(port, p, kind)
    return p, log.name


def write_cmd(kind, i):
    key = b"key:%08d" % i
    if kind == "redis":
        return key, benchlib.encode(b"SET", key, b"v" * 16)
    return key, benchlib.encode(b"RL.ALLOW", key, b"10", b"1d", b"ALGO", b"fixed")


def read_replies(s, buf, n):
    """Reads n replies (simple, error, integer or an array of integers);
    returns them (the first line of each) and what is left over."""
    out = []
    while len(out) < n:
        lines = buf.split(b"\r\n")
        out, i = [], 0
        while i < len(lines) - 1 and len(out) < n:
            line = lines[i]
            if line.startswith(b"*"):
                k = int(line[1:])
                if i + k >= len(lines) - 1:
                    break
                out.append(line)
                i += k + 1
            else:
                out.append(line)
                i += 1
        if len(out) == n:
            return out, b"\r\n".join(lines[i:])
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return out, buf


def ask(port, *args, timeout=2.0):
    """One command on a fresh connection: its first reply line, or
    'timeout' / 'closed'."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.sendall(benchlib.encode(*args))
        buf = b""
        while b"\r\n" not in buf:
            c = s.recv(1 << 16)
            if not c:
                return "closed"
            buf += c
        # INFO's bulk: read it whole.
        if buf.startswith(b"$"):
            n = int(buf.split(b"\r\n", 1)[0][1:])
            while len(buf) < len(buf.split(b"\r\n", 1)[0]) + 2 + n + 2:
                buf += s.recv(1 << 16)
            return buf.split(b"\r\n", 1)[1].decode(errors="replace")
        return buf.split(b"\r\n")[0].decode(errors="replace")
    except socket.timeout:
        return "timeout"
    except (ConnectionError, OSError):
        return "closed"


def run(kind, binary, mode):
    mnt = mount_tmpfs()
    port = benchlib.free_port()
    p, logname = start(kind, binary, port, mnt, mode)
    acked, errors, first_error, after_refusal = [], 0, None, 0
    failed_at = [None]  # acked count when INFO first said err
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            info = ask(port, b"INFO", b"persistence", timeout=0.5)
            if "aof_last_write_status:err" in info and failed_at[0] is None:
                failed_at[0] = len(acked)
            time.sleep(0.05)

    w = threading.Thread(target=watch)
    w.start()
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    i, t0, buf, hung = 0, time.time(), b"", False
    try:
        while time.time() - t0 < LOAD_SECONDS:
            batch = [write_cmd(kind, i + j) for j in range(BATCH)]
            i += BATCH
            s.sendall(b"".join(c for _, c in batch))
            replies, buf = read_replies(s, buf, BATCH)
            for (key, _), r in zip(batch, replies):
                if r.startswith(b"-"):
                    errors += 1
                    first_error = first_error or r.decode()
                else:
                    acked.append(key)
                    if errors:
                        after_refusal += 1
    except socket.timeout:
        hung = True
    except (ConnectionError, OSError):
        pass
    # What PING, a read and INFO answer now.
    ping = ask(port, b"PING")
    read = ask(port, b"EXISTS", b"key:00000000")
    info = ask(port, b"INFO", b"persistence")
    status = next((ln for ln in info.splitlines() if ln.startswith("aof_last_write_status")), info[:40])
    stop.set()
    w.join()
    exited = p.poll()
    if exited is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    after_fail = len(acked) - failed_at[0] if failed_at[0] is not None else None
    # Restart on a copy with room, and look for every acknowledged key.
    copy = tempfile.mkdtemp(prefix="turnstile-diskfull-copy-")
    for name in os.listdir(mnt):
        src = os.path.join(mnt, name)
        (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, os.path.join(copy, name))
    subprocess.run(["umount", mnt], check=True)
    os.rmdir(mnt)
    p2, _ = start(kind, binary, port, copy, "everysec")
    s2 = socket.create_connection(("127.0.0.1", port), timeout=10)
    lost, buf2 = 0, b""
    for j in range(0, len(acked), 1000):
        part = acked[j:j + 1000]
        s2.sendall(b"".join(benchlib.encode(b"EXISTS", k) for k in part))
        replies, buf2 = read_replies(s2, buf2, len(part))
        lost += sum(1 for r in replies if r != b":1")
    p2.terminate()
    p2.wait(timeout=10)
    shutil.rmtree(copy)
    print(f"{kind} appendfsync {mode}: {len(acked)} writes acknowledged, {errors} refused "
          f"(first: {first_error}); acknowledged after the first failed write: {after_fail} "
          f"(after the first refusal: {after_refusal}); "
          f"client hung: {hung}; then PING: {ping!r}, EXISTS: {read!r}, INFO: {status!r}; "
          f"process exited by itself: {exited is not None} (status {exited}); "
          f"after SIGKILL and restart: {lost} of {len(acked)} acknowledged writes lost "
          f"(log {logname})")
    return dict(acked=len(acked), after_fail=after_fail, after_refusal=after_refusal, lost=lost,
                errors=errors, exited=exited, ping=ping)


def main():
    args = sys.argv[1:]
    kind = "turnstile"
    if args and args[0] == "--redis":
        kind = "redis"
        args = args[1:]
    if os.geteuid() != 0:
        print("aof_disk_full: skipped (needs root to mount a tmpfs)")
        return
    # A container without the right to mount cannot run this; the same
    # refusals are tested in-process (tests/it/aof.rs, a_full_disk_*).
    probe = tempfile.mkdtemp(prefix="turnstile-diskfull-probe-")
    tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe],
                           capture_output=True, text=True)
    if tried.returncode != 0:
        os.rmdir(probe)
        print(f"aof_disk_full: SKIPPED, this machine refuses to mount a tmpfs: {tried.stderr.strip()}")
        return
    subprocess.run(["umount", probe], check=True)
    os.rmdir(probe)
    binary = args[0]
    modes = args[1:] or ["everysec", "always"]
    ok = True
    for mode in modes:
        r = run(kind, binary, mode)
        if kind == "turnstile":
            # everysec: what was acknowledged before the failure was known
            # (one writer round, about a millisecond) may be lost, no more.
            if r["lost"] > (0 if mode == "always" else 5000):
                ok = False
            if mode == "everysec" and (r["errors"] == 0 or r["after_refusal"] > 0):
                ok = False
            if mode == "always" and r["exited"] in (None, 0):
                ok = False
    if not ok:
        sys.exit("aof_disk_full: FAILED")
    print("aof_disk_full: ok")


if __name__ == "__main__":
    main()
