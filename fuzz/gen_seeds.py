#!/usr/bin/env python3
"""Writes the checked-in seed corpora under fuzz/corpus/ from the test suites.

    python3 fuzz/gen_seeds.py        # rewrites fuzz/corpus/{decoder,commands,raw_commands}

- decoder: the byte-string literals of tests/it/decoder.rs that look like
  protocol input (RESP frames, inline lines, the malformed cases), alone and
  a few concatenated into pipelines; each behind the target's 3-byte prefix
  (split point, read size).
- raw_commands: the command lines of tests/it/limiter_commands.rs,
  tests/it/server_commands.rs, tests/it/transactions.rs (MULTI ... EXEC in
  order), tests/it/string_commands.rs and the docs/commands.md examples, grouped into
  short sessions, RESP-encoded (a few inline), behind the 1-byte prefix;
  and a few stress sessions: RL.ALLOWMANY with thousands of clauses, log
  keys with huge limits.
- commands: the same sessions in the `commands` target's script format
  (every argument a literal, clock advances between commands), so the
  fuzzer starts from real command lines and mutates them towards the
  dictionary.

Deterministic: the same tests give the same files. Keep the corpora small
(tens of files); the fuzzer grows its own copy (fuzz/run.sh).
"""

import os
import re
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def rust_bytes(body):
    """The value of a Rust byte-string literal's body (between the quotes)."""
    out = bytearray()
    i = 0
    simple = {"r": 13, "n": 10, "t": 9, "0": 0, "\\": 92, '"': 34, "'": 39}
    while i < len(body):
        c = body[i]
        if c == "\\":
            e = body[i + 1]
            if e in simple:
                out.append(simple[e])
                i += 2
            elif e == "x":
                out.append(int(body[i + 2 : i + 4], 16))
                i += 4
            else:
                raise ValueError(body)
        else:
            out += c.encode()
            i += 1
    return bytes(out)


def decoder_literals():
    src = read("tests/it/decoder.rs")
    lits = []
    for m in re.finditer(r'b"((?:[^"\\]|\\.)*)"', src):
        b = rust_bytes(m.group(1))
        if b and (b"\r" in b or b"\n" in b or b[:1] in (b"*", b"$")) and b not in lits:
            lits.append(b)
    return lits


def command_lines():
    """Argument lists of the tests' commands (`&["RL.ALLOW", "k", ...]`)."""
    names = set(re.findall(r'name:\s*"([a-z.]+)"', read("src/cmd/registry/table.rs")))
    lines = []
    for rel in (
        "tests/it/limiter_commands.rs",
        "tests/it/server_commands.rs",
        "tests/it/transactions.rs",
        "tests/it/string_commands.rs",
    ):
        for m in re.finditer(r'&\[\s*("(?:[^"\\]|\\.)*"(?:\s*,\s*"(?:[^"\\]|\\.)*")*)\s*,?\s*\]', read(rel)):
            args = [rust_bytes(a) for a in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))]
            if args[0].decode().lower() in names and args not in lines:
                lines.append(args)
    for m in re.finditer(r"^> (.*)$", read("docs/commands.md"), re.M):
        lines.append([a.encode() for a in m.group(1).split()])
    return lines


def resp(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def inline(args):
    return b" ".join(args) + b"\r\n"


def script(session):
    """A session in the `commands` target's format (fuzz_targets/commands.rs)."""
    out = bytearray()
    for n, args in enumerate(session):
        args = args[:16]
        out.append(len(args) - 1)  # op < 0xC0: a command of len(args) arguments
        for a in args:
            a = a[:255]
            out += bytes([0xF8, len(a)]) + a  # a literal argument
        if n % 3 == 2:
            out.append(0xC0 | (8 + n % 12))  # advance the clock 1 s .. 1 d
    return bytes(out)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    for t in ("decoder", "commands", "raw_commands"):
        shutil.rmtree(os.path.join(CORPUS, t), ignore_errors=True)

    # decoder: prefix = split point (u16 LE), read size byte (low 4 bits: size
    # 1..16; high 4 bits: the tiny max bulk length of the third Limits).
    lits = decoder_literals()
    for i, b in enumerate(lits):
        prefix = (len(b) // 2).to_bytes(2, "little") + bytes([(i * 7) & 0xFF])
        write("decoder", "test-%03d" % i, prefix + b)
    pipelines = [lits[i : i + 4] for i in range(0, len(lits), 9)]
    for i, group in enumerate(pipelines):
        b = b"".join(group)
        write("decoder", "pipeline-%02d" % i, (len(b) // 3).to_bytes(2, "little") + b"\x02" + b)

    # sessions of command lines, shared by raw_commands and commands
    lines = command_lines()
    per = max(1, len(lines) // 24)
    sessions = [lines[i : i + per] for i in range(0, len(lines), per)]
    for i, s in enumerate(sessions):
        if i % 5 == 4:
            data = b"".join(inline(a) for a in s if all(b" " not in x and x for x in a))
        else:
            data = b"".join(resp(a) for a in s)
        write("raw_commands", "session-%02d" % i, bytes([i % 4]) + data)
        write("commands", "session-%02d" % i, script(s))
    # work one request can demand: RL.ALLOWMANY at and past its cap of
    # 1,024 clauses, repeated keys among thousands, and log keys with huge
    # limits (refused, or capped by PRECISION) read and refunded
    stress = {
        "allowmany-1024": [
            ["RL.ALLOWMANY", "COST", "2"]
            + sum(
                (["LIMIT", "k%d" % i, str(i + 2), "%ds" % (i % 7 + 1), "ALGO", algo]
                 for i, algo in zip(range(1024), ["window", "log", "gcra", "fixed"] * 256)),
                [],
            ),
            ["RL.STATE", "k1"],
        ],
        "allowmany-over-cap": [
            ["RL.ALLOWMANY"] + sum((["LIMIT", "k%d" % i, "5", "10"] for i in range(3000)), []),
        ],
        "allowmany-repeated": [
            ["RL.ALLOWMANY"] + sum((["LIMIT", "k%d" % (i % 500), "5", "10"] for i in range(1000)), []),
        ],
        "log-huge-limits": [
            ["RL.ALLOW", "l", "9223372036854775807", "6d", "ALGO", "log"],
            ["RL.ALLOW", "l", "9223372036854775807", "6d", "ALGO", "log", "PRECISION", "495ms"],
            ["RL.ALLOW", "l", "1048576", "1h", "ALGO", "log", "PRECISION", "4ms", "COST", "1048576"],
            ["RL.PEEK", "l", "1048576", "1h", "ALGO", "log", "PRECISION", "4ms"],
            ["RL.ALLOW", "l", "1048576", "1h", "ALGO", "log", "COST", "9223372036854775807"],
            ["RL.REFUND", "l", "9223372036854775807"],
            ["RL.ALLOWMANY", "LIMIT", "l", "1048576", "1h", "ALGO", "log", "PRECISION", "4ms",
             "LIMIT", "m", "1000000000", "1d", "ALGO", "log"],
            ["RL.STATE", "l"],
        ],
        # inside EXEC the commands after a SUBSCRIBE still run, as in Redis
        # (the transaction model once compared them with a subscriber's
        # refusals)
        "exec-after-subscribe": [
            ["MULTI"], ["SUBSCRIBE", "a"], ["PUBLISH", "n", "10"], ["SET", "x", "1"],
            ["RL.ALLOW", "lim", "0", "60", "ALGO", "gcra"], ["EXEC"], ["GET", "x"], ["PING"],
        ],
        # EXEC and DISCARD unwatch every key, whether EXEC ran the queue
        # (alone, on the transaction model), aborted on a touched key, or
        # was discarded: the model, told only of the WATCH, once kept
        # watching and aborted the next transaction it ran itself
        "watch-ends-at-aborted-exec": [
            ["WATCH", "w"], ["SET", "w", "v"], ["MULTI"], ["SET", "x", "1"], ["EXEC"],
            ["MULTI"], ["SUBSCRIBE", "a"], ["SET", "y", "2"], ["EXEC"],
        ],
        "watch-ends-at-exec": [
            ["WATCH", "w"], ["MULTI"], ["SET", "x", "1"], ["EXEC"], ["SET", "w", "v"],
            ["MULTI"], ["SUBSCRIBE", "a"], ["SET", "y", "2"], ["EXEC"],
        ],
        "watch-ends-at-discard": [
            ["WATCH", "w"], ["SET", "w", "v"], ["MULTI"], ["DISCARD"],
            ["MULTI"], ["SUBSCRIBE", "a"], ["SET", "y", "2"], ["EXEC"],
        ],
    }
    for name, s in stress.items():
        s = [[a.encode() for a in args] for args in s]
        write("raw_commands", name, b"\x00" + b"".join(resp(a) for a in s))
        write("commands", name, script(s))
    print(
        "decoder: %d, raw_commands: %d, commands: %d seeds from %d literals and %d command lines"
        % (len(lits) + len(pipelines), len(sessions) + len(stress), len(sessions) + len(stress), len(lits), len(lines))
    )


if __name__ == "__main__":
    main()
