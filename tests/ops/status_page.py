#!/usr/bin/env python3
"""The status page in a real browser: Debian's `chromium`, headless, loads
`/` of a release server's `--metrics-addr` while traffic runs, and the
rendered DOM (`--dump-dom` after a virtual-time budget) must show the
server's role and version, a chart drawn from live data (samples with a
non-zero rate), a key this script drove over its limit at the top of the
denied table, and a shadow-mode policy's key in the shadow table. Then it
takes the screenshot `docs/operations.md` shows (docs/img/status-page.png,
or the path given).

    apt-get install -y chromium redis-tools
    python3 tests/ops/status_page.py path/to/turnstile [--screenshot PATH]
"""
import argparse
import html.parser
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import benchlib  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
POLICIES = """domain: edge
descriptors:
  - key: path
    value: /login
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 100
"""
NOISY = "tenant:acme-noisy"


class Dom(html.parser.HTMLParser):
    """Elements by id (their attributes) and the text inside each id'd
    element's subtree."""

    def __init__(self):
        super().__init__()
        self.attrs, self.text, self.open = {}, {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.attrs["body"] = a
        ident = a.get("id")
        if ident:
            self.attrs[ident] = a
            self.text[ident] = ""
        if tag not in ("br", "img", "meta", "input", "link", "polyline"):
            self.open.append(ident)

    def handle_endtag(self, tag):
        if tag not in ("br", "img", "meta", "input", "link", "polyline") and self.open:
            self.open.pop()

    def handle_data(self, data):
        for ident in self.open:
            if ident:
                self.text[ident] += data


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium: apt-get install -y chromium")


def browse(url, *extra):
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--window-size=1280,1000", "--virtual-time-budget=6000", *extra, url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def drive(port, stop):
    """Traffic until `stop`: the noisy key far over its limit, ten quieter
    ones, and shadow-mode checks, so the chart has both lines."""
    with benchlib.Client(port) as c:
        i = 0
        while not stop.is_set():
            c("RL.ALLOW", NOISY, "10", "60")
            c("RL.ALLOW", f"tenant:{i % 10}", "1000", "60")
            if i % 3 == 0:
                c("RL.CHECK", "edge", "path", "/login")
            if i % 5 == 0:
                c("RL.CHECK", "edge", "remote_address", f"10.0.0.{i % 7}")
            i += 1
            time.sleep(0.002)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--screenshot", default=os.path.join(ROOT, "docs", "img", "status-page.png"))
    opts = ap.parse_args()
    started = time.monotonic()
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "edge.yaml"), "w") as f:
        f.write(POLICIES)
    port, mport = benchlib.free_ports(2)
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen([opts.binary, "--port", str(port), "--metrics-addr", f"127.0.0.1:{mport}",
                          "--policies", tmp, "--maxmemory", "256mb"], stdout=log, stderr=log)
    stop = threading.Event()
    failures = []
    try:
        benchlib.wait_ping(port, p, "turnstile")
        t = threading.Thread(target=drive, args=(port, stop), daemon=True)
        t.start()
        # Five one-second samples of live traffic before the page loads.
        time.sleep(6)
        url = f"http://127.0.0.1:{mport}/"
        dom = Dom()
        dom.feed(browse(url, "--dump-dom"))

        def check(ok, what, got):
            print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {got!r}"))
            if not ok:
                failures.append(what)

        check(dom.attrs.get("body", {}).get("data-loaded") == "yes", "the page loaded /status.json",
              dom.attrs.get("body"))
        check("primary" in dom.text.get("role", ""), "role shown", dom.text.get("role"))
        check("version" in dom.text.get("version", ""), "version shown", dom.text.get("version"))
        chart = dom.attrs.get("chart", {})
        samples = int(chart.get("data-samples", "0"))
        peak = float(chart.get("data-max", "0"))
        check(samples >= 3, "the chart has live samples", chart)
        check(peak > 1, "the chart's rates are not zero", chart)
        for line in ("line-allowed", "line-denied"):
            points = dom.attrs.get(line, {}).get("points", "").split()
            check(len(points) == samples, f"{line} drawn, one point a sample", points)
        denied = dom.text.get("top-denied", "")
        check(denied.strip().startswith(NOISY), "the noisy key heads the top denied table", denied)
        shadow = dom.text.get("top-shadow", "")
        check("/login" in shadow, "the shadow policy's key in the shadow table", shadow)
        check("edge" in dom.text.get("policies", ""), "policies listed", dom.text.get("policies"))
        check("of 256.0 MiB" in dom.text.get("memory", ""), "memory against --maxmemory",
              dom.text.get("memory"))
        os.makedirs(os.path.dirname(os.path.abspath(opts.screenshot)), exist_ok=True)
        browse(url, f"--screenshot={os.path.abspath(opts.screenshot)}")
        check(os.path.getsize(opts.screenshot) > 10_000, f"screenshot written to {opts.screenshot}",
              os.path.getsize(opts.screenshot))
    finally:
        stop.set()
        p.terminate()
        p.wait(timeout=15)
    print(f"{len(failures)} failed, {time.monotonic() - started:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
