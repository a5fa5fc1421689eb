"""The dashboard, end to end: real workers behind a real router, opened in a real browser.

Both programs serve GET /dashboard (the page, /dashboard/app.js, /dashboard/app.css) from
files compiled in. The browser half runs tests/browser/dashboard.mjs (playwright-core driving
Debian's /usr/bin/chromium); scripts/setup.sh installs both, so a missing one fails the test
rather than skipping it. Screenshots go to $TIERSERVE_DASHBOARD_SHOTS (a folder) when set,
else to the test's tmp dir; the paths are printed.
"""
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import numpy as np

from conftest import BIN, ROOT, SANITIZER_MARKERS, sanitizer_env, start_worker, track
from fakehttp import FakeHTTP

ROUTER_BIN = str(pathlib.Path(BIN).with_name("tierrouter"))
DEMO = ROOT / "models"
BROWSER_DIR = ROOT / "tests" / "browser"
CHROMIUM = "/usr/bin/chromium"
# tier -> chip text: what src/common/tier.c tier_chip_name() writes (DESIGN: the dashboard chip)
CHIP = {"tensorrt": "TensorRT", "cuda": "CUDA", "cpu": "CPU", "cpu-fallback": "CPU (fallback)"}
WORKER_TOKEN = "worker-token-123"
ADMIN_TOKEN = "admin-token-456"
FAULT_RUN = 3
ASSETS = {"/dashboard": "text/html; charset=utf-8", "/dashboard/app.js": "text/javascript; charset=utf-8",
          "/dashboard/app.css": "text/css; charset=utf-8", "/dashboard/program.json": "application/json"}
BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4],
                               "data": np.arange(8, dtype=np.float32).tolist()}]}).encode()


def request(port, method, path, headers=None, body=None, timeout=10):
    """One request on a fresh connection, sent once (no retry, no keep-alive)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


class Router:
    def __init__(self, tmp, gpu_ports, cpu_ports, extra="", pool_extra=""):
        backends = lambda ports: "[" + ", ".join(f'"127.0.0.1:{p}"' for p in ports) + "]"
        self.cfg = tmp / f"router-{time.monotonic_ns()}.yaml"
        self.cfg.write_text(
            f"address: 127.0.0.1\nprobe_interval_ms: 100\nadmin_token: {ADMIN_TOKEN}\nworker_token: {WORKER_TOKEN}\n"
            f"{extra}pools:\n"
            f"  - name: gpu\n    kind: gpu\n    sensitive: false\n    min_tier: cpu\n    backends: {backends(gpu_ports)}\n"
            f"{pool_extra}"
            f"  - name: cpu\n    kind: cpu\n    sensitive: true\n    min_tier: cpu\n    backends: {backends(cpu_ports)}\n"
            f"{pool_extra}")
        self.log = tmp / f"router-{time.monotonic_ns()}.log"
        env = {**os.environ, "TIERROUTER_PORT": "0", **sanitizer_env()}
        with open(self.log, "wb") as logf:
            self.proc = track(subprocess.Popen([ROUTER_BIN, "--config", str(self.cfg)], stderr=logf, env=env))
        self.port = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None and not self.port:
            m = re.search(r"listening on [^:]+:(\d+)", self.log.read_text())
            self.port = int(m.group(1)) if m else None
            time.sleep(0.05)
        assert self.port, self.log.read_text()

    def status(self):
        code, _, body = request(self.port, "GET", "/admin/status", bearer(ADMIN_TOKEN))
        assert code == 200, body
        return json.loads(body)

    def wait_healthy(self, n, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(p["healthy"] for p in self.status()["pools"]) >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"router never saw {n} healthy backends: {self.status()}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        text = self.log.read_text(errors="replace")
        assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]
        return code


def check_assets(port, who):
    for path, ctype in ASSETS.items():
        for method in ("GET", "HEAD"):
            code, h, body = request(port, method, path)  # no token: the files hold no data
            assert code == 200, (who, method, path, code, body)
            assert h["content-type"] == ctype, (who, path, h)
            assert h["cache-control"] == "no-store", (who, path, h)
            assert h["content-security-policy"].startswith("default-src 'self'"), (who, path, h)
            assert h["x-content-type-options"] == "nosniff", (who, path, h)
            if method == "GET":
                assert int(h["content-length"]) == len(body) > 0, (who, path)
    code, h, body = request(port, "GET", "/dashboard")
    html = body.decode()
    # no inline script (the CSP would block it) and nothing loaded from elsewhere
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), html
    assert not re.search(r"\bon[a-z]+\s*=", html), html
    assert "<style" not in html and "style=" not in html, html
    for asset in ("/dashboard", "/dashboard/app.js", "/dashboard/app.css"):
        text = request(port, "GET", asset)[2].decode()
        assert not re.search(r"https?://|['\"(]//|url\(|@import|@font-face", text, re.I), (who, asset)
    # errors keep the headers, and are JSON naming the problem
    code, h, body = request(port, "GET", "/dashboard/nope.js")
    assert code == 404 and h["cache-control"] == "no-store" and "content-security-policy" in h
    assert "no such dashboard file" in json.loads(body)["error"]
    code, h, body = request(port, "POST", "/dashboard", body=b"x")
    assert code == 405 and h["allow"] == "GET, HEAD" and json.loads(body)["error"]


def test_dashboard_files_headers_and_data_auth(tmp_path):
    w = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_AUTH_TOKEN": WORKER_TOKEN})
    r = Router(tmp_path, [w.port], [w.port])
    try:
        check_assets(w.port, "worker")
        check_assets(r.port, "router")
        assert json.loads(request(w.port, "GET", "/dashboard/program.json")[2]) == {"program": "tierserve"}
        assert json.loads(request(r.port, "GET", "/dashboard/program.json")[2]) == {"program": "tierrouter"}
        # the data the page polls stays behind each program's token
        for path in ("/v2/status", "/metrics"):
            assert request(w.port, "GET", path)[0] == 401, path
            assert request(w.port, "GET", path, bearer("wrong-token-000"))[0] == 401, path
            assert request(w.port, "GET", path, bearer(WORKER_TOKEN))[0] == 200, path
        assert request(r.port, "GET", "/admin/status")[0] == 401
        st = r.status()
        # what the pool cards and the timeline read
        assert isinstance(st["events"], list)
        sig = st["pools"][0]["policy"]["signals"]["queue_per_backend"]
        assert {"value", "hot", "high", "low"} <= set(sig), sig
    finally:
        assert r.stop() == 0
        assert w.stop() == 0


class Page:
    """A dashboard.mjs run: one page, kept open."""

    def __init__(self, url, png):
        node = shutil.which("node")
        assert node, "node is missing: scripts/setup.sh installs it"
        assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium"
        assert (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").exists(), \
            "tests/browser/node_modules lacks playwright-core: run scripts/setup.sh (npm ci in tests/browser)"
        self.png = png
        self.proc = track(subprocess.Popen([node, str(BROWSER_DIR / "dashboard.mjs"), url, str(png)], cwd=BROWSER_DIR,
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True))
        self.first = self.read()

    def read(self):
        line = self.proc.stdout.readline()  # dashboard.mjs ends itself after 60 s at most
        assert line, f"dashboard.mjs ended: {self.proc.stderr.read()}"
        out = json.loads(line)
        assert out["event"] != "error", f"{out['error']}\npage text: {out.get('page_text')}"
        return out

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"quit": true}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def worker_status(w):
    code, _, body = request(w.port, "GET", "/v2/status", bearer(WORKER_TOKEN))
    assert code == 200, body
    return json.loads(body)


def check_no_leaks(snap):
    """No console error (a CSP violation is one), no token in a URL, every data fetch with it."""
    assert snap["console_errors"] == [], snap["console_errors"]
    assert all("token" not in x["query"].lower() for x in snap["wire"]), snap["wire"]
    assert snap["navigations"] == 1 and snap["marker"] == "set-once", "the page was reloaded"


def test_dashboard_in_a_real_browser_follows_a_gpu_fault(tmp_path):
    shots = pathlib.Path(os.environ.get("TIERSERVE_DASHBOARD_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    faulty = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_AUTH_TOKEN": WORKER_TOKEN},
                          args=[f"--fault-inject-gpu-run={FAULT_RUN}"])
    good = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_AUTH_TOKEN": WORKER_TOKEN})
    r = Router(tmp_path, [faulty.port], [good.port])
    pages = []
    try:
        r.wait_healthy(2)
        tiers = {f"127.0.0.1:{w.port}": worker_status(w) for w in (faulty, good)}

        # the router's page asks for admin_token once, then shows every backend
        rp = Page(f"http://127.0.0.1:{r.port}/dashboard", shots / "dashboard-router.png")
        pages.append(rp)
        assert rp.first["login_visible"] and rp.first["cards"] == [], rp.first
        refused = [x for x in rp.first["wire"] if x["path"] == "/admin/status"]
        assert refused and all(x["status"] == 401 and not x["bearer"] for x in refused), rp.first["wire"]
        snap = rp.send(login=ADMIN_TOKEN)
        assert snap["title"] == "tierrouter" and not snap["login_visible"]
        assert {c["backend"]: c["chip"] for c in snap["cards"]} == \
            {addr: CHIP[st["tier"]] for addr, st in tiers.items()}, snap["cards"]
        assert {p["pool"] for p in snap["pools"]} == {"gpu", "cpu"}

        # a worker's page: its own card, behind its own token
        wp = Page(f"http://127.0.0.1:{faulty.port}/dashboard", shots / "dashboard-worker.png")
        pages.append(wp)
        assert wp.first["login_visible"] and wp.first["cards"] == []
        snap = wp.send(login=WORKER_TOKEN)
        st = tiers[f"127.0.0.1:{faulty.port}"]
        assert [c["chip"] for c in snap["cards"]] == [CHIP[st["tier"]]] == [st["tier_label"]], snap["cards"]
        assert not snap["cards"][0]["bad"], snap["cards"]
        data = [x for x in snap["wire"] if x["path"] in ("/v2/status", "/metrics") and x["status"] == 200]
        assert data and all(x["bearer"] for x in data), snap["wire"]
        assert not any(x["status"] == 200 and not x["bearer"] for x in snap["wire"] if x["path"] == "/v2/status")

        # the fault: the Nth run reports a CUDA error and the worker latches not-live
        for _ in range(FAULT_RUN + 5):
            request(faulty.port, "POST", "/v2/models/demo/infer", bearer(WORKER_TOKEN), BODY, timeout=30)
            if request(faulty.port, "GET", "/v2/health/live")[0] == 503:
                break
        assert request(faulty.port, "GET", "/v2/health/live")[0] == 503, faulty.log_text()[-2000:]

        # both open pages change by polling alone
        snap = wp.send(wait_for="GPU FAULT", timeout_ms=10000)
        assert snap["found"], snap["cards"]
        card = snap["cards"][0]
        assert card["bad"] and any(a.startswith("GPU FAULT, not live") for a in card["alerts"]), card
        check_no_leaks(snap)
        wp.send(shot="")

        snap = rp.send(wait_for="HARD FAILOVER: no healthy GPU backend", timeout_ms=10000)
        assert snap["found"], snap["pools"]
        snap = rp.send(wait_for="is now unhealthy", timeout_ms=5000)
        assert snap["found"], snap["timeline"]
        kinds = {e["kind"] for e in snap["timeline"]}
        assert {"hard_failover", "backend_unhealthy"} <= kinds, snap["timeline"]
        cards = {c["backend"]: c for c in snap["cards"]}
        fc = cards[f"127.0.0.1:{faulty.port}"]
        assert fc["bad"] and any(a.startswith("NOT LIVE") for a in fc["alerts"]), fc
        assert not cards[f"127.0.0.1:{good.port}"]["bad"]
        check_no_leaks(snap)
        assert all(x["bearer"] for x in snap["wire"] if x["path"] == "/admin/status" and x["status"] == 200)
        rp.send(shot="")
        print(f"screenshots: {rp.png} {wp.png}")
    finally:
        for p in pages:
            p.close()
        assert r.stop() == 0
        for w in (faulty, good):
            w.stop()


def test_router_keeps_a_bounded_view_of_each_backends_llms(tmp_path):
    """/admin/status shows the first 4 LLMs a backend's /v2/status lists (the rest counted),
    each note cut to 319 bytes at a character boundary, "fallback" read from the whole note,
    control characters as spaces, what the worker leaves out as null."""
    llm = lambda i: {"running": i, "waiting": 2 * i, "batch_limit": 16, "kv_cache_bytes": 1 << 40,
                     "kv_cache": "device", "kv_cache_note": f"note {i}"}
    models = [{"name": f"m{i}", "version": "1", "ready": True, "llm": llm(i)} for i in range(6)]
    models.insert(1, {"name": "plain", "version": "1", "ready": True})  # not an LLM: not shown
    models[0]["name"] = "m0\x01\n"
    models[0]["llm"]["kv_cache_note"] = "\u00e9" * 400 + " host (fallback): the end of a long note"
    models[2]["llm"] = {}  # an LLM whose worker says nothing about it

    class Fake(FakeHTTP):
        status = {**FakeHTTP.status, "models": models}

    fake = Fake()
    r = Router(tmp_path, [fake.port], [fake.port])
    try:
        r.wait_healthy(2)
        (be,) = next(p for p in r.status()["pools"] if p["name"] == "gpu")["backends"]
        assert be["llm_omitted"] == 2, be
        got = be["llm"]
        assert [x["model"] for x in got] == ["m0  ", "m1", "m2", "m3"], got
        assert got[0]["kv_cache_note"] == "\u00e9" * 159 and got[0]["kv_cache_fallback"] is True, got[0]
        assert got[1] == {"model": "m1", "version": "1", "running": None, "waiting": None, "batch_limit": None,
                          "kv_cache_bytes": None, "kv_cache": None, "kv_cache_note": "", "kv_cache_fallback": False}
        assert got[2] == {"model": "m2", "version": "1", "running": 2, "waiting": 4, "batch_limit": 16,
                          "kv_cache_bytes": 1 << 40, "kv_cache": "device", "kv_cache_note": "note 2",
                          "kv_cache_fallback": False}, got[2]
    finally:
        assert r.stop() == 0
        fake.close()
