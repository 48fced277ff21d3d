#!/usr/bin/env python3
"""Runs the shell examples of the docs and compares what they print with
what the docs show.

    python3 tests/docs/check.py BINARY [--only PATH] [--verbose]

Reads README.md, docs/*.md and examples/README.md. A fenced block is a
shell example when its language is sh, shell, bash or console, or when it
has no language and a line starts with `$ `. Each example runs against a
fresh server started from BINARY on free ports (127.0.0.1), in a scratch
directory shared by the page's examples:

- a block whose lines start with `$ ` is a transcript: each command runs
  and its output (stdout and stderr) must match the lines that follow it;
- any other shell block runs whole under `set -e` and must exit 0.

Markers, HTML comments on the lines just above a fence (CONTRIBUTING.md,
"Docs examples"):

    <!-- doc-check: skip REASON -->   not runnable here, and why
    <!-- doc-check: vary REGEX -->    text matching REGEX in the shown
                                      output stands for any text
    <!-- doc-check: file NAME -->     (on a non-shell block) write the
                                      block to NAME in the scratch directory

In shown output, a line `...` stands for any number of lines, and an
annotation (two spaces, `#`, text) at a line's end is not compared.
`redis-cli` runs with `--no-raw` (as at a terminal) against the block's
server; `turnstile` and `target/release/turnstile` are BINARY; 6379 and
9898 in commands are the server's and its metrics port, and the real
ports in the output read back as 6379 and 9898. A transcript whose first
command is `$ turnstile ARGS &` starts its server with ARGS instead.

Exit status 0 when every example passes, 1 otherwise, 2 on bad usage.
Python 3 standard library only.
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"sh", "shell", "bash", "console"}
MARKER = re.compile(r"^<!--\s*doc-check:\s*(\w+)\s*(.*?)\s*-->\s*$")
ANNOTATION = re.compile(r"\s{2,}#.*$")
FENCE = re.compile(r"^(\s*)```+\s*([\w+-]*)")
DOC_PORT, DOC_METRICS = "6379", "9898"
CMD_TIMEOUT = 60


def pages(only):
    if only:
        return [ROOT / p for p in only]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples/README.md"]


class Block:
    def __init__(self, page, line, lang, text, markers):
        self.page, self.line, self.lang, self.text = page, line, lang, text
        self.skip = [v for k, v in markers if k == "skip"]
        self.vary = [v for k, v in markers if k == "vary"]
        self.files = [v for k, v in markers if k == "file"]
        self.bad = [k for k, _ in markers if k not in ("skip", "vary", "file")]

    @property
    def where(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def is_transcript(self):
        return any(ln.startswith("$ ") for ln in self.text.splitlines())

    @property
    def is_shell(self):
        return self.lang in SHELL_LANGS or (self.lang == "" and self.is_transcript)


def blocks(page):
    """Every fenced block of a page, with the markers just above it."""
    lines = page.read_text().splitlines()
    out, markers, i = [], [], 0
    while i < len(lines):
        m = MARKER.match(lines[i].strip())
        if m:
            markers.append((m.group(1), m.group(2)))
            i += 1
            continue
        f = FENCE.match(lines[i])
        if f:
            indent, lang = len(f.group(1)), f.group(2)
            body, j = [], i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
                j += 1
            out.append(Block(page, i + 1, lang, "\n".join(body) + "\n", markers))
            markers, i = [], j + 1
            continue
        if lines[i].strip() and markers:
            raise SystemExit(f"{page.relative_to(ROOT)}:{i + 1}: doc-check marker not followed by a code block")
        i += 1
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """BINARY on free ports; its real ports read back from its log."""

    def __init__(self, binary, args, cwd):
        args = list(args)
        self.metrics = None
        want_metrics = True
        for flag, value in (("--port", "0"), ("--metrics-addr", "127.0.0.1:0")):
            if flag in args:
                k = args.index(flag)
                if flag == "--metrics-addr" and args[k + 1] == "off":
                    want_metrics = False
                    continue
                args[k + 1] = value
            else:
                args += [flag, value]
        self.log = open(Path(cwd) / "server.log", "w+")
        env = dict(os.environ, NO_COLOR="1")
        self.proc = subprocess.Popen(
            [binary, *args], cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline:
            text = Path(self.log.name).read_text()
            p = re.search(r"turnstile listening local=[\d.]+:(\d+)", text)
            m = re.search(r"metrics listening on http://[\d.]+:(\d+)", text)
            if p and (m or not want_metrics):
                self.port, self.metrics = p.group(1), m.group(1) if m else None
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not start ({shlex.join(args)}):\n{Path(self.log.name).read_text()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def prelude(binary, server):
    """Shell functions and variables the example runs under."""
    return "\n".join([
        f"export TS_BIN={shlex.quote(binary)}",
        f"export TS_PORT={server.port}",
        'turnstile() { "$TS_BIN" "$@"; }',
        'redis-cli() { command redis-cli -p "$TS_PORT" --no-raw "$@"; }',
        "export -f turnstile redis-cli",
        "",
    ])


def to_server(cmd, server):
    """A documented command pointed at this block's server."""
    cmd = re.sub(r"(^|[\s;&|(])target/release/turnstile\b", r"\1turnstile", cmd)
    cmd = re.sub(rf"\b{DOC_PORT}\b", server.port, cmd)
    if server.metrics:
        cmd = re.sub(rf"\b{DOC_METRICS}\b", server.metrics, cmd)
    return cmd


def from_server(text, server):
    text = re.sub(rf"\b{server.port}\b", DOC_PORT, text)
    if server.metrics:
        text = re.sub(rf"\b{server.metrics}\b", DOC_METRICS, text)
    return text


def run_shell(script, cwd, timeout=CMD_TIMEOUT):
    """Runs a bash script in its own process group; (status, output).
    Output goes to a file, so that what the script leaves running in the
    background cannot hold the run open; it is stopped afterwards."""
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(
            ["bash", "-c", script], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            status = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout} s"
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        out.seek(0)
        return status, out.read().decode(errors="replace")


def parse_transcript(text):
    """[(command, [shown output lines])] of a `$ ` block."""
    steps, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln.startswith("$ "):
            if steps:
                steps[-1][1].append(ln)
            elif ln.strip():
                raise ValueError(f"output before the first command: {ln!r}")
            i += 1
            continue
        cmd = ln[2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd += "\n" + re.sub(r"^> ", "", lines[i])
        steps.append((cmd, []))
        i += 1
    return steps


def line_pattern(shown, vary):
    """A regex for one shown line: its varying parts match any text."""
    shown = ANNOTATION.sub("", shown).rstrip()
    spans = sorted(m.span() for v in vary for m in re.finditer(v, shown) if m.end() > m.start())
    out, pos = "", 0
    for a, b in spans:
        if a < pos:
            continue
        out += re.escape(shown[pos:a]) + ".+?"
        pos = b
    return re.compile(out + re.escape(shown[pos:]) + r"\Z")


def matches(shown, got, vary):
    """Shown lines (with `...` lines) against the printed lines."""
    shown = [s for s in shown]
    while shown and not shown[-1].strip():
        shown.pop()
    got = [g.rstrip() for g in got]
    while got and not got[-1]:
        got.pop()
    pats = [None if s.strip() == "..." else line_pattern(s, vary) for s in shown]
    memo = {}

    def m(i, j):
        if (i, j) not in memo:
            if i == len(pats):
                r = j == len(got)
            elif pats[i] is None:
                r = m(i + 1, j) or (j < len(got) and m(i, j + 1))
            else:
                r = j < len(got) and bool(pats[i].match(got[j])) and m(i + 1, j + 1)
            memo[(i, j)] = r
        return memo[(i, j)]

    return m(0, 0)


def check_block(block, binary, workdir):
    """None when the block passes, else what went wrong."""
    steps = parse_transcript(block.text) if block.is_transcript else None
    server_args = []
    if steps and re.match(r"(target/release/)?turnstile\s+--.*&\s*$", steps[0][0]):
        server_args = shlex.split(steps[0][0])[1:-1]
        if steps[0][1] and any(s.strip() for s in steps[0][1]):
            return "a transcript's server command shows no output"
        steps = steps[1:]
    server = Server(binary, server_args, workdir)
    try:
        pre = prelude(binary, server)
        if steps is None:
            status, out = run_shell(pre + "set -e\n" + to_server(block.text, server), workdir)
            if status != 0:
                return f"exit status {status}; output:\n{indent(from_server(out, server))}"
            return None
        for cmd, shown in steps:
            status, out = run_shell(pre + to_server(cmd, server), workdir)
            got = from_server(out, server).splitlines()
            if isinstance(status, str) or not matches(shown, got, block.vary):
                return (f"$ {cmd}\n  shown:\n{indent(chr(10).join(shown))}\n"
                        f"  printed (status {status}):\n{indent(chr(10).join(got))}")
        return None
    finally:
        server.stop()


def indent(text):
    return "\n".join("    " + ln for ln in text.splitlines())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="the turnstile binary, e.g. target/release/turnstile")
    ap.add_argument("--only", action="append", help="a page (path from the repository root); repeatable")
    ap.add_argument("--verbose", action="store_true", help="list every example, passed and skipped ones too")
    a = ap.parse_args()
    binary = shutil.which(a.binary) or a.binary
    binary = str(Path(binary).resolve())
    if not os.access(binary, os.X_OK):
        print(f"not an executable: {a.binary}", file=sys.stderr)
        return 2
    if not shutil.which("redis-cli"):
        print("redis-cli is not installed (apt-get install redis-tools)", file=sys.stderr)
        return 2
    passed, skipped, failed = 0, [], []

    def fail(b, err):
        failed.append(b)
        print(f"FAIL  {b.where}\n{indent(err)}")

    for page in pages(a.only):
        with tempfile.TemporaryDirectory(prefix="doc-check.") as workdir:
            for b in blocks(page):
                if b.bad:
                    fail(b, f"unknown doc-check marker: {', '.join(b.bad)}")
                    continue
                for name in b.files:
                    (Path(workdir) / name).write_text(b.text)
                if not b.is_shell:
                    continue
                if b.skip:
                    if not all(r.strip() for r in b.skip):
                        fail(b, "doc-check: skip needs a reason")
                    else:
                        skipped.append((b, "; ".join(b.skip)))
                        if a.verbose:
                            print(f"skip  {b.where}: {'; '.join(b.skip)}")
                    continue
                try:
                    err = check_block(b, binary, workdir)
                except (RuntimeError, ValueError, re.error) as e:
                    err = str(e)
                if err:
                    fail(b, err)
                else:
                    passed += 1
                    if a.verbose:
                        print(f"ok    {b.where}")
    print(f"doc examples: {passed} passed, {len(skipped)} skipped (marked not runnable), {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
