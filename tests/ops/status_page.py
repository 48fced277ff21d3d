#!/usr/bin/env python3
"""The status page in a real browser: Debian's `chromium`, headless, driven
over the DevTools protocol (`--remote-debugging-pipe`, so no library is
needed), loads `/` of a release server's `--metrics-addr` while traffic
runs. In the rendered page, at 1280x900 and at a phone's 390x844, it checks:
the role and version, a chart drawn from live data with labelled axes
(round decisions/s ticks, HH:MM time ticks) over a fixed five-minute window
(ten seconds of data are not stretched across the width), chart text drawn
at its real size (not stretched sideways), the key this script drove over
its limit heading the denied table, a shadow-mode policy's key in the
shadow table, the replication and memory panels within the first 900 px at
1280x900, and no horizontal scrolling at 390 px. A second server, with no
policies and no --maxmemory, must hide the shadow table and show memory as
text, not an empty bar. Screenshots: 1280x900 (docs/img/status-page.png,
the one docs/operations.md shows, or --screenshot) and the phone
(--phone-screenshot).

    apt-get install -y chromium
    python3 tests/ops/status_page.py path/to/turnstile [--screenshot PATH] [--phone-screenshot PATH]
"""
import argparse
import base64
import fcntl
import json
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
DESKTOP = (1280, 900, False)
PHONE = (390, 844, True)

# What the checks read from the rendered page. Panels are found by their
# headings, so the checks do not depend on the page's ids or classes.
MEASURE = r"""(() => {
  const box = (e) => { if (!e) return null; const b = e.getBoundingClientRect();
    return {top: b.top, bottom: b.bottom, left: b.left, right: b.right, width: b.width, height: b.height,
            shown: b.width > 0 && b.height > 0 && getComputedStyle(e).visibility !== "hidden"}; };
  const panel = (title) => [...document.querySelectorAll("section")]
    .find((s) => (s.querySelector("h2")?.textContent || "").trim().startsWith(title)) || null;
  const text = (id) => document.getElementById(id)?.textContent || "";
  const svg = document.querySelector("svg");
  const labels = svg ? [...svg.querySelectorAll("text")].filter((t) => t.getBBox().width > 0) : [];
  // Rendered size over drawn size of each label: 1 by 1 when not stretched.
  const scales = labels.map((t) => { const b = t.getBBox(), r = t.getBoundingClientRect();
    return [r.width / b.width, r.height / b.height]; });
  const lines = svg ? [...svg.querySelectorAll("polyline")].map((l) => ({
    id: l.id, points: l.getAttribute("points").trim().split(/\s+/).filter(Boolean).length,
    width: l.getBoundingClientRect().width })) : [];
  const bars = [...document.querySelectorAll(".bar")].map(box).filter((b) => b.shown);
  return JSON.stringify({
    loaded: document.body.dataset.loaded || "",
    role: text("role"), version: text("version"),
    samples: +(svg?.dataset.samples || 0), peak: +(svg?.dataset.max || 0), chart: box(svg),
    labels: labels.map((t) => t.textContent.trim()), scales, lines,
    denied: text("top-denied"), shadowText: text("top-shadow"), policies: text("policies"),
    memoryText: text("memory"), bars,
    replication: box(panel("Replication")), memory: box(panel("Memory")), shadow: box(panel("Top shadow")),
    scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth,
  });
})()"""


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no chromium: apt-get install -y chromium")


class Browser:
    """Headless Chromium over `--remote-debugging-pipe`: commands on its fd
    3, replies and events on its fd 4, each a JSON text ending in NUL."""

    def __init__(self, tmp):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # Out of the way of 3 and 4 before they are put there in the child.
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]

        def fds():
            os.dup2(hi[0], 3)
            os.dup2(hi[1], 4)

        self.p = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={tmp}/chromium", "--no-first-run",
             "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=fds)
        for fd in (to_chrome_r, from_chrome_w, *hi):
            os.close(fd)
        self.buf, self.next_id = b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session or hasattr(self, "session"):
            msg["sessionId"] = session or self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_chrome, 1 << 16)
                if not chunk:
                    sys.exit("chromium closed its pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"{method}: {reply['error']}")
                return reply["result"]
        sys.exit(f"{method}: no reply")

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r["result"].get("value")

    def load(self, url, size):
        width, height, mobile = size
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 15
        while self.evaluate("document.body && document.body.dataset.loaded") != "yes":
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(0.5)  # layout and the resize observer settle
        return json.loads(self.evaluate(MEASURE))

    def screenshot(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        self.p.kill()
        self.p.wait(timeout=15)


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


class Server:
    def __init__(self, binary, tmp, name, *args):
        self.port, self.mport = benchlib.free_ports(2)
        log = open(os.path.join(tmp, f"{name}.log"), "w")
        self.p = subprocess.Popen([binary, "--port", str(self.port), "--metrics-addr",
                                   f"127.0.0.1:{self.mport}", *args], stdout=log, stderr=log)
        benchlib.wait_ping(self.port, self.p, "turnstile")
        self.url = f"http://127.0.0.1:{self.mport}/"

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=15)


failures = []


def check(ok, what, got):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {got!r}"))
    if not ok:
        failures.append(what)


def check_chart(m, where):
    labels = m["labels"]
    numbers = [t for t in labels if t.replace(".", "", 1).rstrip("kM").isdigit()]
    times = [t for t in labels if len(t) == 5 and t[2] == ":" and t.replace(":", "").isdigit()]
    check(len(numbers) >= 3, f"{where}: the y axis has round decisions/s ticks", labels)
    check(any("decisions/s" in t for t in labels), f"{where}: the y axis says decisions/s", labels)
    check(len(times) >= 2, f"{where}: the x axis has HH:MM time ticks", labels)
    stretched = [s for s in m["scales"] if abs(s[0] - 1) > 0.05 or abs(s[1] - 1) > 0.05]
    check(m["scales"] and not stretched, f"{where}: chart text drawn at its real size", m["scales"])
    # A fixed five-minute window: a few seconds of data take a sliver of the
    # width at the right, not all of it.
    width = m["chart"]["width"]
    spans = [line["width"] for line in m["lines"]]
    check(m["samples"] <= 30 and all(s < width * 0.15 for s in spans),
          f"{where}: {m['samples']} s of samples drawn in a fixed 5-minute window", (spans, width))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--screenshot", default=os.path.join(ROOT, "docs", "img", "status-page.png"))
    ap.add_argument("--phone-screenshot", default=None)
    opts = ap.parse_args()
    started = time.monotonic()
    tmp = tempfile.mkdtemp()
    phone_shot = opts.phone_screenshot or os.path.join(tmp, "status-page-phone.png")
    bare_shot = os.path.join(tmp, "status-page-bare.png")
    with open(os.path.join(tmp, "edge.yaml"), "w") as f:
        f.write(POLICIES)
    browser = Browser(tmp)
    busy = Server(opts.binary, tmp, "busy", "--policies", tmp, "--maxmemory", "256mb")
    bare = None
    stop = threading.Event()
    try:
        t = threading.Thread(target=drive, args=(busy.port, stop), daemon=True)
        t.start()
        # Five one-second samples of live traffic before the page loads.
        time.sleep(6)
        m = browser.load(busy.url, DESKTOP)
        check(m["loaded"] == "yes", "the page loaded /status.json", m["loaded"])
        check("primary" in m["role"], "role shown", m["role"])
        check("version" in m["version"], "version shown", m["version"])
        check(m["samples"] >= 3, "the chart has live samples", m["samples"])
        check(m["peak"] > 1, "the chart's rates are not zero", m["peak"])
        for line in m["lines"]:
            check(line["points"] == m["samples"], f"{line['id']} drawn, one point a sample", line)
        check_chart(m, "1280x900")
        check(m["denied"].strip().startswith(NOISY), "the noisy key heads the top denied table",
              m["denied"])
        check(m["shadow"] and m["shadow"]["shown"] and "/login" in m["shadowText"],
              "the shadow policy's key in the shadow table", (m["shadow"], m["shadowText"]))
        check("edge" in m["policies"], "policies listed", m["policies"])
        check("of 256.0 MiB" in m["memoryText"] and m["bars"], "memory against --maxmemory, with a bar",
              (m["memoryText"], m["bars"]))
        for name in ("replication", "memory"):
            box = m[name]
            check(box and box["shown"] and box["bottom"] <= 900,
                  f"1280x900: the {name} panel within the first 900 px", box)
        # The width used: the server's own panels beside the chart, not under it.
        check(m["replication"] and m["replication"]["top"] < m["chart"]["bottom"]
              and m["replication"]["left"] >= m["chart"]["right"],
              "1280x900: the replication panel beside the chart", (m["replication"], m["chart"]))
        check(m["scrollWidth"] <= m["clientWidth"], "1280x900: no horizontal scrolling",
              (m["scrollWidth"], m["clientWidth"]))
        browser.screenshot(opts.screenshot)
        check(os.path.getsize(opts.screenshot) > 10_000, f"screenshot written to {opts.screenshot}",
              os.path.getsize(opts.screenshot))

        m = browser.load(busy.url, PHONE)
        check(m["loaded"] == "yes", "390x844: the page loaded", m["loaded"])
        check_chart(m, "390x844")
        check(m["scrollWidth"] <= m["clientWidth"], "390x844: no horizontal scrolling",
              (m["scrollWidth"], m["clientWidth"]))
        check(m["chart"]["right"] <= 390, "390x844: the chart fits the width", m["chart"])
        browser.screenshot(phone_shot)
        print(f"     phone screenshot: {phone_shot}")

        bare = Server(opts.binary, tmp, "bare")
        m = browser.load(bare.url, DESKTOP)
        check(m["loaded"] == "yes", "bare server: the page loaded", m["loaded"])
        check(not (m["shadow"] and m["shadow"]["shown"]),
              "no shadow policy and no shadow data: no shadow table", m["shadow"])
        check("no --maxmemory" in m["memoryText"] and "used" in m["memoryText"] and not m["bars"],
              "no --maxmemory: memory as text, no empty bar", (m["memoryText"], m["bars"]))
        browser.screenshot(bare_shot)
        print(f"     bare-server screenshot: {bare_shot}")
    finally:
        stop.set()
        browser.close()
        busy.stop()
        if bare:
            bare.stop()
    print(f"{len(failures)} failed, {time.monotonic() - started:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
