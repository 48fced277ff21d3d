#!/usr/bin/env python3
"""Generates tests/compat/diff_cases/scripts_generated.txt: a corpus of Lua
scripts (EVAL, EVALSHA, EVAL_RO, SCRIPT) and data-type commands with random
arguments, for differential.py to run on Turnstile and on redis-server and
compare byte for byte, in RESP2 and RESP3.

    python3 tests/compat/gen_script_cases.py [--seed N] [--cases N]

The output is checked in (CI compares, it does not generate), so a failure
names a line anyone can rerun. The seed is fixed: the same corpus every
time. Each script is built from fragments that exercise one rule at a time
(Lua to RESP conversions, redis.call/pcall and their errors, the four
libraries Redis loads, the data types limiter scripts use) with random
values, edge values included (0, negatives, 2^53, huge strings, empty
strings, nils in tables). Nothing depends on time or on randomness on the
server: every reply is a function of the commands.
"""

import argparse
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent / "diff_cases" / "scripts_generated.txt"

INTS = [0, 1, -1, 2, 7, 10, 100, -100, 2**31 - 1, -(2**31), 2**53, -(2**53), 2**62, 12345678901]
FLOATS = ["0.5", "-0.5", "1.5", "3.99", "-3.99", "1e3", "2.5e-3", "123456.789", "1/3", "-7/2"]
STRINGS = ["''", "'a'", "'hello world'", "'42'", "'-17'", "'3.5'", "'\\0x'", "string.rep('z', 300)", "'ok'", "'err'"]
KEYS = ["k1", "k2", "{t}a", "{t}b"]


def q(s):
    """Single-quote a case-file word (differential.py decodes \\n etc.)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\x27").replace("\n", "\\n") + "'"


def lua_value(r, depth=0):
    """A Lua expression for a value whose RESP form is well defined."""
    kind = r.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return str(r.choice(INTS))
    if kind == 1:
        return r.choice(FLOATS)
    if kind == 2:
        return r.choice(STRINGS)
    if kind == 3:
        return r.choice(["true", "false", "nil"])
    if kind == 4:
        return "{ok=" + r.choice(["'OK'", "'fine'", "'a b'"]) + "}"
    if kind == 5:
        return "{err=" + r.choice(["'ERR bad'", "'MYERR custom'", "'no prefix'"]) + "}"
    if kind == 6:
        n = r.randrange(0, 5)
        return "{" + ", ".join(lua_value(r, depth + 1) for _ in range(n)) + "}"
    if kind == 7:
        return "{" + ", ".join(lua_value(r, depth + 1) for _ in range(r.randrange(1, 4))) + ", nil, 99}"
    return "redis.status_reply(" + r.choice(["'PONG'", "'x'"]) + ")"


def resp3_value(r):
    kind = r.randrange(6)
    if kind == 0:
        return "{map={a=1}}"
    if kind == 1:
        return "{set={'x'}}"
    if kind == 2:
        return "{double=" + r.choice(["1.5", "-2", "0", "1e100", "0.1"]) + "}"
    if kind == 3:
        return "{big_number='" + r.choice(["123456789012345678901234567890", "-1", "0"]) + "'}"
    if kind == 4:
        return "{verbatim_string={format='txt', string='hi'}}"
    return r.choice(["true", "false", "nil"])


def call_fragment(r):
    """A redis.call or redis.pcall over the string and data-type commands."""
    k = "KEYS[1]"
    cmds = [
        f"redis.call('SET', {k}, {r.choice(STRINGS)})",
        f"redis.call('GET', {k})",
        f"redis.call('INCRBY', {k}, {r.choice(INTS[:8])})",
        f"redis.pcall('INCR', {k})",
        f"redis.call('DEL', {k})",
        f"redis.call('EXISTS', {k})",
        f"redis.pcall('LPUSH', {k}, 'a', 'b')",
        f"redis.pcall('RPUSH', {k}, {r.choice(INTS[:6])})",
        f"redis.pcall('LRANGE', {k}, 0, -1)",
        f"redis.pcall('LINDEX', {k}, {r.choice([0, 1, -1, 5])})",
        f"redis.pcall('LTRIM', {k}, 0, {r.choice([0, 1, 3])})",
        f"redis.pcall('LLEN', {k})",
        f"redis.pcall('ZADD', {k}, {r.choice(INTS[:6])}, 'm{r.randrange(4)}')",
        f"redis.pcall('ZADD', {k}, 'NX', 'CH', 1.5, 'm1', 2, 'm2')",
        f"redis.pcall('ZCARD', {k})",
        f"redis.pcall('ZSCORE', {k}, 'm1')",
        f"redis.pcall('ZRANGE', {k}, 0, -1, 'WITHSCORES')",
        f"redis.pcall('ZRANGEBYSCORE', {k}, '-inf', '+inf')",
        f"redis.pcall('ZREMRANGEBYSCORE', {k}, '-inf', {r.choice([0, 1, 100])})",
        f"redis.pcall('ZCOUNT', {k}, 0, 10)",
        f"redis.pcall('HSET', {k}, 'f', {r.choice(INTS[:6])})",
        f"redis.pcall('HINCRBY', {k}, 'f', {r.choice(INTS[:6])})",
        f"redis.pcall('HGET', {k}, 'f')",
        f"redis.pcall('HGETALL', {k})",
        f"redis.pcall('HMGET', {k}, 'f', 'g')",
        f"redis.pcall('TYPE', {k})",
        f"redis.pcall('PEXPIRE', {k}, 100000)",
        f"redis.pcall('TTL', {k})",
        "redis.pcall('NOSUCHCOMMAND', 'x')",
        "redis.pcall('GET')",
        f"redis.pcall('SET', {k})",
        "redis.pcall('PING')",
        "redis.pcall('ECHO', 'e')",
    ]
    return r.choice(cmds)


def lib_fragment(r):
    choices = [
        "cjson.encode(" + r.choice(["{1,2,3}", "{a=1}", "{}", "'s'", "12", "1.5", "{true,false}", "{{1},{2}}", "{'a\\n'}"]) + ")",
        "cjson.encode(cjson.decode(" + repr(r.choice(['[1,2,3]', '{"a":[1,{"b":null}]}', '"x"', '3.25', '[]', '{}', '[true,false,null]'])) + "))",
        "cjson.decode(" + repr(r.choice(['[1,2,3]', '{"a":1}', '"x"', '7', '[1,"2",[3]]'])) + ")",
        "redis.pcall and pcall(cjson.decode, " + repr(r.choice(['[1,2', '{"a"', 'nul', ''])) + ")",
        "bit.band(" + str(r.choice(INTS[:10])) + ", " + str(r.choice(INTS[:10])) + ")",
        "bit.bor(" + str(r.choice(INTS[:6])) + ", 255)",
        "bit.bxor(" + str(r.choice(INTS[:6])) + ", 1)",
        "bit.lshift(1, " + str(r.randrange(0, 40)) + ")",
        "bit.rshift(" + str(r.choice(INTS[:6])) + ", " + str(r.randrange(0, 33)) + ")",
        "bit.arshift(-256, " + str(r.randrange(0, 9)) + ")",
        "bit.tohex(" + str(r.choice(INTS[:10])) + ")",
        "bit.tobit(" + str(r.choice(INTS)) + ")",
        "bit.bnot(" + str(r.choice(INTS[:6])) + ")",
        "struct.pack('>I2', " + str(r.randrange(0, 65536)) + ")",
        "{struct.unpack('>i4', struct.pack('>i4', " + str(r.choice(INTS[:10])) + "))}",
        "struct.size('>iHb')",
        "{struct.unpack('BBB', 'abc')}",
        "cmsgpack.pack(" + r.choice(["1", "'a'", "{1,2}", "{a=1}", "-1", "300", "70000", "true", "{}"]) + ")",
        "{cmsgpack.unpack(cmsgpack.pack(" + r.choice(["1", "'abc'", "{1,2,3}", "-5", "65536", "{true}"]) + "))}",
        "redis.sha1hex(" + r.choice(["''", "'abc'", "'return 1'"]) + ")",
        "string.format('%d %s %5.2f', 3, 'x', 1.5)",
        "tostring(" + r.choice(FLOATS + [str(i) for i in INTS[:6]]) + ")",
        "tonumber(" + r.choice(["'12'", "'0x10'", "' 7 '", "'1e2'", "'x'"]) + ")",
        "string.len(" + r.choice(STRINGS) + ")",
        "#KEYS + #ARGV",
        "ARGV[1]",
        "KEYS[1]",
        "type(" + r.choice(["KEYS", "ARGV", "redis", "cjson", "os", "io", "loadstring", "require", "dofile", "print"]) + ")",
        "math.floor(" + r.choice(FLOATS) + ")",
        "table.concat({" + ", ".join(r.choice(["'a'", "'b'", "1"]) for _ in range(3)) + "}, ',')",
        "select('#', 1, nil, 3)",
        "unpack({1, 2, 3})",
    ]
    return r.choice(choices)


def error_script(r):
    return r.choice([
        "error('plain')",
        "error({err='TABLEERR from table'})",
        "error(123)",
        "return redis.call('NOSUCH')",
        "return redis.call('GET')",
        "return redis.call('INCR', KEYS[1])",
        "local x = undefined_global + 1",
        "newglobal = 1",
        "return redis.error_reply('MY custom')",
        "return redis.error_reply('no code here')",
        "return redis.call('SET', KEYS[1])",
        "return {err='ERR from table'}",
        "return redis.setresp(4)",
        "return redis.call()",
        "return redis.call({})",
        "return redis.call('GET', {})",
        "return cjson.decode('[')",
        "return struct.pack('>Z', 1)",
        "return string.rep('x', -1) .. nil",
        "return loadstring('return 1')()",
        "return (nil)()",
        "return #nil",
        "local t = setmetatable({}, {__index = function() error('meta') end}) return t.x",
        "return redis.call('EVAL', 'return 1', 0)",
        "return redis.call('MULTI')",
        "return redis.call('SCRIPT', 'FLUSH')",
    ])


def gen_case(r, i):
    lines = [f"!case generated {i}"]
    # A little state first, of a random type.
    setup = r.choice([
        "SET k1 10", "SET k1 text", "RPUSH k1 a b c", "ZADD k1 1 m1 2 m2", "HSET k1 f 5 g x", "",
    ])
    if setup:
        lines.append(setup)
    kind = r.randrange(10)
    key = "k1" if r.random() < 0.7 else r.choice(KEYS)
    argv = [str(r.choice(INTS[:8])), r.choice(["a", "b", "", "3.5"])]
    if kind <= 2:
        body = f"return {lua_value(r)}"
    elif kind == 3:
        body = f"redis.setresp(3) return {resp3_value(r)}"
    elif kind == 4:
        body = f"return {call_fragment(r)}"
    elif kind == 5:
        body = f"local a = {call_fragment(r)} local b = {call_fragment(r)} return {{a, b}}"
    elif kind == 6:
        body = f"return {lib_fragment(r)}"
    elif kind == 7:
        body = error_script(r)
    elif kind == 8:
        body = f"redis.setresp(3) return {call_fragment(r)}"
    else:
        body = f"local ok, e = pcall(function() {error_script(r)} end) return {{tostring(ok), type(e)}}"
    cmd = r.choice(["EVAL", "EVAL", "EVAL", "EVAL_RO"])
    lines.append(f"{cmd} {q(body)} 1 {key} {' '.join(q(a) for a in argv)}")
    if r.random() < 0.3:
        # The same script by its SHA1, now that EVAL cached it.
        lines.append(f"SCRIPT LOAD {q(body)}")
    lines.append(f"TYPE {key}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--cases", type=int, default=400)
    opts = ap.parse_args()
    r = random.Random(opts.seed)
    out = [
        "# Generated by tests/compat/gen_script_cases.py --seed "
        f"{opts.seed} --cases {opts.cases}: do not edit by hand, rerun it.",
        "# Lua scripts and data-type commands with random arguments; see the",
        "# generator's docstring. Format: tests/compat/differential.py.",
        "",
    ]
    for i in range(opts.cases):
        out += gen_case(r, i)
        out.append("")
    OUT.write_text("\n".join(out))
    print(f"wrote {OUT} ({opts.cases} cases)")


if __name__ == "__main__":
    main()
