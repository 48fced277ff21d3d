#!/usr/bin/env python3
"""Differential test: the same commands against Turnstile and against Redis,
every reply compared byte for byte, in RESP2 and in RESP3.

Usage:
  differential.py --a PORT --b PORT [options] CASEFILE|DIR...
      run every case on server A and on server B (A: the server under test,
      B: the oracle, normally redis-server) and compare the raw reply bytes
  differential.py --only PORT [options] CASEFILE|DIR...
      run every case on one server and print each reply (to write or check
      case files against Redis alone)

Options:
  --proto 2|3|both   protocols to run (default both); RESP3 sends HELLO 3 first
                     on every connection and compares from the next command on
  --host HOST        default 127.0.0.1
  --a-name/--b-name  labels in the report (default "turnstile" and "redis")
  --timeout S        reply timeout per command (default 5 s)
  --budget S         the whole run must end within S seconds (default 120)
  -k TEXT            run only the cases whose name contains TEXT
  --max-diffs N      print at most N differences in full (default 200; all
                     are counted, and every differing case is listed)
  -v                 print every command and reply while comparing

Both servers get FLUSHALL before every case, so point this only at servers
you own. The cases run on A, then on B (never interleaved), so --a and --b may
be the same port: that runs every case twice on one server, which shows
whether the cases are deterministic.

Case file format (stdlib shlex, posix mode; one command per line):
  # comment                      whole-line comments; blank lines are skipped
  !case NAME                     starts a new case: fresh connections, FLUSHALL
                                 (lines before the first !case form one case
                                 named after the file)
  SET k v                        a command on connection 1
  @2 SET k v                     a command on connection 2 (@1..@9; each
                                 connection is opened on first use)
  ?shape TTL k                   compare only the reply's shape: types,
                                 aggregate lengths and nulls, not scalar
                                 values (for inherently varying replies;
                                 keep these rare). Combines with @N, in
                                 either order.
  !sleep 0.05                    sleep (for cases that need real time, e.g.
                                 a watched key expiring)
  !close 2                       close connection 2 (the next use reopens it)
  !read 2                        read the next reply on connection 2 without
                                 sending anything (a Pub/Sub message), and
                                 compare it as a command's reply
Words are shlex-quoted (an unquoted # starts a comment); after unquoting,
\\xNN, \\r, \\n, \\t and \\\\ are decoded to bytes (write them inside single
quotes), so binary values can be written.

A command whose reply does not come within --timeout, or whose connection
closes, records <timeout> or <connection closed> as its reply (and that
connection is reopened for later commands), so it shows up as a difference.

Exit status: 0 when every reply matched, 1 on any difference (each one
printed with case file, line, command, protocol and both replies' bytes),
2 on a usage error, a bad case file, or a server that cannot be reached.
The last line is "differential: N passed, N failed" (commands compared).
"""

import argparse
import os
import re
import shlex
import socket
import sys
import time

# ---------------------------------------------------------------------------
# RESP reader: the exact bytes of one complete reply


class Incomplete(Exception):
    """The buffer ends before the reply does."""


class ProtocolError(Exception):
    """The bytes are not RESP."""


LINE_TYPES = b"+-:_,#("
BLOB_TYPES = b"$!="  # length-prefixed
AGG_TYPES = b"*~>"  # count elements
MAP_TYPES = b"%|"  # count pairs (| is an attribute: a reply follows it)


def _line(buf, pos):
    """The line starting at pos (without CRLF) and the position after it."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return buf[pos:end], end + 2


def _count(text, what):
    try:
        return int(text)
    except ValueError:
        raise ProtocolError(f"bad {what} length {text!r}") from None


def parse(buf, pos=0):
    """Parses one reply at buf[pos:]. Returns (node, end): node is
    (type_byte, value) where value is the line (bytes) for simple types, the
    blob (bytes, or None for a null) for length-prefixed ones, and a list of
    nodes (or None for a null array) for aggregates; an attribute's node is
    ('|', [attr pairs..., the reply it annotates]). Raises Incomplete."""
    if pos >= len(buf):
        raise Incomplete
    t = buf[pos]
    head, p = _line(buf, pos + 1)
    if t in LINE_TYPES:
        return (chr(t), head), p
    if t in BLOB_TYPES:
        if head == b"?":
            raise ProtocolError("streamed strings ($?) are not supported")
        n = _count(head, chr(t))
        if n < 0:
            if t != ord("$") or n != -1:
                raise ProtocolError(f"bad null {chr(t)}{n}")
            return (chr(t), None), p
        if len(buf) < p + n + 2:
            raise Incomplete
        if buf[p + n:p + n + 2] != b"\r\n":
            raise ProtocolError(f"{chr(t)}{n} blob not followed by CRLF")
        return (chr(t), buf[p:p + n]), p + n + 2
    if t in AGG_TYPES or t in MAP_TYPES:
        if head == b"?":
            raise ProtocolError("streamed aggregates are not supported")
        n = _count(head, chr(t))
        if n < 0:
            if t != ord("*") or n != -1:
                raise ProtocolError(f"bad null {chr(t)}{n}")
            return (chr(t), None), p
        items = []
        for _ in range(n * 2 if t in MAP_TYPES else n):
            node, p = parse(buf, p)
            items.append(node)
        if t == ord("|"):
            node, p = parse(buf, p)  # the reply the attribute annotates
            items.append(node)
        return (chr(t), items), p
    raise ProtocolError(f"unknown reply type byte {bytes([t])!r} at {buf[pos:pos + 40]!r}")


def shape(node):
    """A reply with its scalar values dropped: types, nulls and aggregate
    lengths only."""
    t, v = node
    if isinstance(v, list):
        return (t, len(v), tuple(shape(x) for x in v))
    return (t, v is None)


class Conn:
    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, words):
        out = [b"*%d\r\n" % len(words)]
        for w in words:
            out.append(b"$%d\r\n%s\r\n" % (len(w), w))
        self.sock.sendall(b"".join(out))

    def read_reply(self):
        """(raw bytes, node) of the next complete reply."""
        while True:
            try:
                node, end = parse(self.buf)
            except Incomplete:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed by the server")
                self.buf += chunk
                continue
            raw, self.buf = self.buf[:end], self.buf[end:]
            return raw, node

    def call(self, words):
        self.send(words)
        return self.read_reply()


# ---------------------------------------------------------------------------
# case files

ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|r|n|t|\\)")


def decode_word(word):
    raw = word.encode("utf-8", "surrogateescape")

    def sub(m):
        e = m.group(1)
        if e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        return {b"r": b"\r", b"n": b"\n", b"t": b"\t", b"\\": b"\\"}[e]

    return ESCAPE.sub(sub, raw)


class CaseFileError(Exception):
    pass


class Step:
    """One line of a case: a command (conn, words, shape_only) or a
    directive (kind, arg)."""

    def __init__(self, path, lineno, text, kind, conn=1, words=None, shape_only=False, arg=None):
        self.path, self.lineno, self.text = path, lineno, text
        self.kind, self.conn, self.words, self.shape_only, self.arg = kind, conn, words, shape_only, arg

    def where(self):
        return f"{self.path}:{self.lineno}"


class Case:
    def __init__(self, path, name, lineno):
        self.path, self.name, self.lineno = path, name, lineno
        self.steps = []


def load_cases(path):
    cases = []
    current = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}:{lineno}"
        if text.startswith("!case"):
            name = text[len("!case"):].strip()
            if not name:
                raise CaseFileError(f"{where}: !case needs a name")
            current = Case(path, name, lineno)
            cases.append(current)
            continue
        if current is None:
            current = Case(path, os.path.basename(path), lineno)
            cases.append(current)
        try:
            words = shlex.split(text, comments=True, posix=True)
        except ValueError as e:
            raise CaseFileError(f"{where}: {e}: {text}") from None
        if not words:
            continue
        if words[0] == "!sleep":
            if len(words) != 2:
                raise CaseFileError(f"{where}: usage: !sleep SECONDS")
            secs = float(words[1])
            if not 0 <= secs <= 5:
                raise CaseFileError(f"{where}: !sleep {secs}: keep sleeps between 0 and 5 s")
            current.steps.append(Step(path, lineno, text, "sleep", arg=secs))
            continue
        if words[0] == "!close":
            if len(words) != 2 or not re.fullmatch(r"[1-9]", words[1]):
                raise CaseFileError(f"{where}: usage: !close N (1..9)")
            current.steps.append(Step(path, lineno, text, "close", conn=int(words[1])))
            continue
        if words[0] == "!read":
            if len(words) != 2 or not re.fullmatch(r"[1-9]", words[1]):
                raise CaseFileError(f"{where}: usage: !read N (1..9)")
            current.steps.append(Step(path, lineno, text, "read", conn=int(words[1]), words=[]))
            continue
        if words[0].startswith("!"):
            raise CaseFileError(f"{where}: unknown directive {words[0]}")
        conn, shape_only = 1, False
        while words and (re.fullmatch(r"@[0-9]+", words[0]) or words[0] == "?shape"):
            w = words.pop(0)
            if w == "?shape":
                shape_only = True
            else:
                conn = int(w[1:])
                if not 1 <= conn <= 9:
                    raise CaseFileError(f"{where}: connection {w}: use @1..@9")
        if not words:
            raise CaseFileError(f"{where}: no command after the prefixes: {text}")
        current.steps.append(Step(path, lineno, text, "cmd", conn=conn,
                                  words=[decode_word(w) for w in words], shape_only=shape_only))
    for c in cases:
        if not any(s.kind in ("cmd", "read") for s in c.steps):
            raise CaseFileError(f"{c.path}:{c.lineno}: case {c.name!r} has no command")
    return cases


def case_files(args):
    files = []
    for p in args:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".txt"))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise CaseFileError(f"no such case file or directory: {p}")
    if not files:
        raise CaseFileError("no case files (*.txt) given")
    return files


# ---------------------------------------------------------------------------
# running


TIMEOUT_REPLY = b"<timeout: no complete reply>"
CLOSED_REPLY = b"<connection closed>"


class Server:
    def __init__(self, name, host, port, timeout):
        self.name, self.host, self.port, self.timeout = name, host, port, timeout

    def connect(self, proto):
        c = Conn(self.host, self.port, self.timeout)
        if proto == 3:
            raw, node = c.call([b"HELLO", b"3"])
            if node[0] != "%":
                c.close()
                raise RuntimeError(f"{self.name} (port {self.port}): HELLO 3 answered {raw!r}, not a map")
        return c

    def flushall(self):
        try:
            c = Conn(self.host, self.port, self.timeout)
        except OSError as e:
            raise RuntimeError(f"{self.name}: cannot connect to {self.host}:{self.port}: {e}") from None
        try:
            raw, _ = c.call([b"FLUSHALL"])
        finally:
            c.close()
        if raw != b"+OK\r\n":
            raise RuntimeError(f"{self.name} (port {self.port}): FLUSHALL answered {raw!r}")

    def run_case(self, case, proto, deadline):
        """The replies to every command of the case, in order, as a list of
        (step, raw, node or None)."""
        self.flushall()
        conns = {}
        out = []
        try:
            for step in case.steps:
                if time.monotonic() > deadline:
                    raise TimeoutError("the run's --budget ran out")
                if step.kind == "sleep":
                    time.sleep(step.arg)
                    continue
                if step.kind == "close":
                    c = conns.pop(step.conn, None)
                    if c:
                        c.close()
                    continue
                c = conns.get(step.conn)
                if c is None:
                    c = conns[step.conn] = self.connect(proto)
                try:
                    raw, node = c.read_reply() if step.kind == "read" else c.call(step.words)
                except socket.timeout:
                    raw, node = TIMEOUT_REPLY, None
                except (ConnectionError, OSError):
                    raw, node = CLOSED_REPLY, None
                except ProtocolError as e:
                    raw, node = b"<protocol error: " + str(e).encode() + b">", None
                if node is None:
                    conns.pop(step.conn).close()
                out.append((step, raw, node))
        finally:
            for c in conns.values():
                c.close()
        return out


def show_cmd(step):
    if step.kind == "read":
        return f"!read {step.conn}"
    prefix = f"@{step.conn} " if step.conn != 1 else ""
    if step.shape_only:
        prefix += "?shape "
    return prefix + " ".join(shlex.quote(w.decode("utf-8", "backslashreplace")) for w in step.words)


def main():
    ap = argparse.ArgumentParser(usage=argparse.SUPPRESS, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=int, help="port of the server under test")
    ap.add_argument("--b", type=int, help="port of the oracle (redis-server)")
    ap.add_argument("--only", type=int, help="run on this one port and print replies")
    ap.add_argument("--a-name", default="turnstile")
    ap.add_argument("--b-name", default="redis")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--proto", choices=["2", "3", "both"], default="both")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("-k", dest="select", help="only cases whose name contains this")
    ap.add_argument("--max-diffs", type=int, default=200)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args()
    if args.only is None and (args.a is None or args.b is None):
        ap.error("give --a PORT and --b PORT, or --only PORT")
    if args.only is not None and (args.a is not None or args.b is not None):
        ap.error("--only excludes --a/--b")

    try:
        cases = [c for f in case_files(args.cases) for c in load_cases(f)]
    except (CaseFileError, OSError, ValueError) as e:
        print(f"differential: {e}", file=sys.stderr)
        return 2
    if args.select:
        cases = [c for c in cases if args.select in c.name]
        if not cases:
            print(f"differential: no case name contains {args.select!r}", file=sys.stderr)
            return 2
    protos = [2, 3] if args.proto == "both" else [int(args.proto)]
    deadline = time.monotonic() + args.budget

    try:
        if args.only is not None:
            srv = Server("server", args.host, args.only, args.timeout)
            n = 0
            for proto in protos:
                for case in cases:
                    print(f"=== RESP{proto} {case.path}:{case.lineno} {case.name}")
                    for step, raw, _ in srv.run_case(case, proto, deadline):
                        n += 1
                        print(f"  {step.lineno:4} {show_cmd(step)}\n       -> {raw!r}")
            print(f"differential: ran {n} commands in {len(cases)} cases on port {args.only}")
            return 0

        a = Server(args.a_name, args.host, args.a, args.timeout)
        b = Server(args.b_name, args.host, args.b, args.timeout)
        passed = failed = 0
        failed_cases = []
        for proto in protos:
            for case in cases:
                ra = a.run_case(case, proto, deadline)
                rb = b.run_case(case, proto, deadline)
                assert len(ra) == len(rb)
                case_failed = False
                for (step, raw_a, node_a), (_, raw_b, node_b) in zip(ra, rb):
                    if step.shape_only and node_a is not None and node_b is not None:
                        same = shape(node_a) == shape(node_b)
                    else:
                        same = raw_a == raw_b
                    if args.verbose:
                        print(f"  RESP{proto} {step.where()} {show_cmd(step)} -> {raw_b!r}"
                              + ("" if same else f" (but {args.a_name}: {raw_a!r})"))
                    if same:
                        passed += 1
                        continue
                    failed += 1
                    case_failed = True
                    if failed > args.max_diffs:
                        continue
                    how = "reply shape" if step.shape_only else "reply bytes"
                    print(f"DIFF {step.where()} RESP{proto} case {case.name!r}: {how} differ\n"
                          f"  command: {show_cmd(step)}\n"
                          f"  {args.a_name:>10}: {raw_a!r}\n"
                          f"  {args.b_name:>10}: {raw_b!r}")
                if case_failed:
                    failed_cases.append(f"RESP{proto} {case.path}:{case.lineno} {case.name}")
        if passed + failed == 0:
            print("differential: no command was compared", file=sys.stderr)
            return 2
        if failed > args.max_diffs:
            print(f"differential: {failed - args.max_diffs} more differences not shown (--max-diffs)")
        if failed_cases:
            print(f"\ndifferential: {len(failed_cases)} case runs differ between "
                  f"{args.a_name} (port {args.a}) and {args.b_name} (port {args.b}):")
            for c in failed_cases:
                print(f"  {c}")
        print(f"differential: {passed} passed, {failed} failed")
        return 1 if failed else 0
    except (OSError, RuntimeError, TimeoutError, ProtocolError) as e:
        print(f"differential: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
