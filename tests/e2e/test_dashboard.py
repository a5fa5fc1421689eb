"""The dashboard, end to end: real workers behind a real router, opened in a real browser.

Both programs serve GET /dashboard (the page, /dashboard/app.js, /dashboard/app.css) from
files compiled in. The browser half runs tests/browser/dashboard.mjs (playwright-core driving
Debian's /usr/bin/chromium); scripts/setup.sh installs both, so a missing one fails the test
rather than skipping it. Screenshots go to $TIERSERVE_DASHBOARD_SHOTS (a folder) when set,
else to the test's tmp dir; the paths are printed.
"""
import json
import math
import os
import pathlib
import re
import shutil
import socket
import subprocess
import threading

import numpy as np

from conftest import ROOT, start_worker, track
import helpers
from helpers import get_json, wait_until
from fakehttp import FakeHTTP
from llm_fixture import write_tiny_llm
from promtext import parse_strict

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
    return helpers.request(port, method, path, body, headers, timeout)


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


class Router(helpers.Router):
    """A router with a gpu and a cpu pool on those workers' ports, the admin and worker
    tokens set; its /admin/status is read with the admin token."""

    def __init__(self, tmp, gpu_ports, cpu_ports, extra="", pool_extra=""):
        backends = lambda ports: "[" + ", ".join(f'"127.0.0.1:{p}"' for p in ports) + "]"
        super().__init__(
            f"address: 127.0.0.1\nprobe_interval_ms: 100\nadmin_token: {ADMIN_TOKEN}\nworker_token: {WORKER_TOKEN}\n"
            f"{extra}pools:\n"
            f"  - name: gpu\n    kind: gpu\n    sensitive: false\n    min_tier: cpu\n    backends: {backends(gpu_ports)}\n"
            f"{pool_extra}"
            f"  - name: cpu\n    kind: cpu\n    sensitive: true\n    min_tier: cpu\n    backends: {backends(cpu_ports)}\n"
            f"{pool_extra}", tmp, status_headers=bearer(ADMIN_TOKEN))


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
    return get_json(w, "/v2/status", bearer(WORKER_TOKEN))


def llm_status(w):
    return helpers.llm_status(w, "chat", bearer(WORKER_TOKEN))


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


# ---- LLM serving on both pages --------------------------------------------------------------

NUM = r"\d+(?:\.\d+)?"
TTFT_TARGET_MS, ITL_TARGET_MS, TOKEN_PRICE = 500, 250, 0.002


def llm_repo(tmp_path):
    """The demo model and the tiny decoder (public name "chat") in one repository; the context
    is long enough that a greedy generation of 30000 tokens is still running when the pages
    look (it ends only when the test closes it)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "demo").symlink_to(DEMO / "demo")
    write_tiny_llm(repo / "chat" / "1", context=32768)
    return repo


class LongStream:
    """A /v1 stream through the router, read by a thread (so nothing backs up) until close()."""

    def __init__(self, port):
        body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 30000, "temperature": 0, "stream": True}).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.got = b""
        while b'"content":"' not in self.got.split(b"\r\n\r\n", 1)[-1].replace(b'"content":""', b""):
            chunk = self.sock.recv(65536)
            assert chunk, self.got
            self.got += chunk
        assert self.got.startswith(b"HTTP/1.1 200"), self.got[:300]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        try:
            while not self.stop.is_set() and self.sock.recv(65536):
                pass
        except OSError:
            pass

    def close(self):
        self.stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=10)


def layout_text(lay):
    """What app.js layoutText() shows for /v2/status models[].layout."""
    t = lay["threads"]
    return (f"{t} intra-op thread{'' if t == 1 else 's'}" + (f" × {lay['instances']} " + ("runners sharing one session" if lay.get("shared") else "instances")
               if lay["instances"] > 1 else "")
            + f", spinning {'on' if lay['spinning'] else 'off'}" + (", pinned" if lay["pinned"] else "")
            + f" ({lay['source']})")


def worker_metrics(w):
    code, _, body = request(w.port, "GET", "/metrics", bearer(WORKER_TOKEN))
    assert code == 200
    return parse_strict(body.decode())


def test_dashboard_shows_llm_serving(tmp_path):
    """After /v1 traffic the worker page has an LLM card (sequences, KV cache place and size,
    TTFT and inter-token p95, tokens/s) and the router page the pool's "LLM streams" block and
    each backend's sequences and KV cache place, red where the worker fell back to the host."""
    shots = pathlib.Path(os.environ.get("TIERSERVE_DASHBOARD_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    repo = llm_repo(tmp_path)
    env = {"EXECUTION_MODE": "cpu", "TIERSERVE_AUTH_TOKEN": WORKER_TOKEN}
    # this one measures its layouts at load (issue 24): the pages show the choice and its figures
    w = start_worker(repo, tmp_path, env={**env, "TIERSERVE_TUNE": "1"})
    # the second worker's bound KV path fails its load-time check: it serves from the host
    # path, and /v2/status says "host (fallback): ..."
    fb = start_worker(repo, tmp_path, env={**env, "TIERSERVE_FAULT_INJECT_KV_WRITEBACK": "1"})
    r = Router(tmp_path, [w.port], [fb.port],
               extra=f"slo_ttft_ms: {{urgent: {TTFT_TARGET_MS}}}\nslo_itl_ms: {{urgent: {ITL_TARGET_MS}}}\n",
               pool_extra=f"    cost: {{model: usage, usd_per_hour: 4.0, usd_per_1k_tokens: {TOKEN_PRICE}}}\n")
    pages, stream = [], None
    try:
        r.wait_healthy(2)
        good, bad = llm_status(w), llm_status(fb)
        assert good["kv_cache"] == "host-bound" and "fallback" not in good["kv_cache_note"], good
        assert bad["kv_cache"] == "host" and "fallback" in bad["kv_cache_note"], bad

        rp = Page(f"http://127.0.0.1:{r.port}/dashboard", shots / "dashboard-router-llm.png")
        pages.append(rp)
        snap = rp.send(login=ADMIN_TOKEN)
        # before any /v1: no LLM streams block, no affinity block, but each backend's LLM as its probe saw it
        assert [p["llm"] for p in snap["pools"]] == [None, None], snap["pools"]
        assert [p["affinity"] for p in snap["pools"]] == [None, None], snap["pools"]
        cards = {c["backend"]: c for c in snap["cards"]}
        row = cards[f"127.0.0.1:{w.port}"]["llm"]
        assert [(x["model"], x["backend-llm-running"], x["backend-llm-waiting"]) for x in row] == [("chat", "0", "0")], row
        assert row[0]["kv"] == {"text": "KV host-bound", "title": good["kv_cache_note"], "fallback": False, "red": False}
        row = cards[f"127.0.0.1:{fb.port}"]["llm"]
        assert row[0]["kv"]["text"] == "KV host (fallback)" and row[0]["kv"]["red"], row
        assert row[0]["kv"]["title"] == bad["kv_cache_note"][:319], row  # the router keeps 319 bytes

        wp = Page(f"http://127.0.0.1:{w.port}/dashboard", shots / "dashboard-worker-llm.png")
        pages.append(wp)
        snap = wp.send(login=WORKER_TOKEN)
        # the page has read the token counter a second apart: a rate can be shown from here on
        snap = wp.send(wait_css="[data-testid=llm-tps]", text="0 (last 10 s) · 0 tokens since start")
        assert snap["found"], snap["llm_cards"]
        (card,) = snap["llm_cards"]
        assert card["model"] == "chat" and card["kv"]["text"] == "KV host-bound" and not card["kv"]["red"], card
        assert card["kv"]["title"] == good["kv_cache_note"] and card["fields"]["kv-note"] == good["kv_cache_note"]
        assert card["fields"]["llm-ttft"] == "—" and card["fields"]["llm-itl"] == "—", card
        # the layout each model runs with, and the figures it was chosen from
        st = get_json(w.port, "/v2/status", bearer(WORKER_TOKEN))
        lays = {m["name"]: m["layout"] for m in st["models"]}
        lay = lays["chat"]
        assert card["fields"]["llm-layout"] == layout_text(lay), card["fields"]
        if len(os.sched_getaffinity(0)) >= 2:
            assert lay["source"] == "measured" and lay["measured"], lay
            figs = card["fields"]["llm-layout-figures"]
            assert figs.count("tokens/s") == len(lay["measured"]) and figs.count("▶ ") == 1, figs
            pick = next(c for c in lay["measured"] if c["chosen"])
            assert f"▶ {pick['threads']}t" in figs and f"at {pick['batch']} = {math.floor(pick['runs_per_s'] + 0.5)} tokens/s" in figs, figs
        else:  # one usable core: one layout, nothing to search, and the status says so
            assert not lay["measured"] and "1 usable core" in lay["note"], lay
        (inf,) = snap["cards"]
        assert layout_text(lays["demo"]) in inf["text"] and layout_text(lay) in inf["text"], inf["text"]

        # a generation in progress: one sequence running, its KV cache allocated
        stream = LongStream(r.port)
        seq = f"running 1 / waiting 0 · batch limit {good['batch_limit']}"
        snap = wp.send(wait_css="[data-testid=llm-seq]", text=seq, timeout_ms=20000)
        assert snap["found"], snap["llm_cards"]
        kv_mib = re.fullmatch(rf"({NUM}) MiB \(FP32, 512 B/token\)", snap["llm_cards"][0]["fields"]["llm-kv-bytes"])
        # the cache: 512 B x (prompt + 30000) = 14.7 MiB; the gauge adds the bound path's decode-batch
        # tensors, which grow with the tokens generated so far (how far the stream got before this
        # snapshot depends on the machine's speed: 17 MiB seen pinned to one core), at most as much again
        assert kv_mib and 14 < float(kv_mib.group(1)) < 30, snap["llm_cards"]
        snap = rp.send(wait_css=f"[data-backend='127.0.0.1:{w.port}'] [data-testid=backend-llm-running]", text="1",
                       timeout_ms=20000)
        assert snap["found"], snap["cards"]
        stream.close()
        stream = None
        wait_until(lambda: llm_status(w)["running"] == 0, what="the cancelled sequence to leave")

        # one short urgent stream, read to its end, and two inferences
        body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12,
                           "temperature": 0, "stream": True}).encode()
        code, h, reply = request(r.port, "POST", "/v1/chat/completions",
                                 {"X-Priority": "urgent", "Content-Type": "application/json"}, body, timeout=60)
        assert code == 200 and reply.rstrip().endswith(b"data: [DONE]"), reply[-300:]
        assert h["x-tierrouter-pool"] == "gpu", h
        for _ in range(2):
            assert request(w.port, "POST", "/v2/models/demo/infer", bearer(WORKER_TOKEN), BODY)[0] == 200

        # the worker page: everything it shows is what /metrics and /v2/status say
        m = worker_metrics(w)
        lbl = (("model", "chat"), ("version", "1"))
        gen = int(m[("tierserve_generation_tokens_total", lbl)])
        n_ttft = int(m[("tierserve_time_to_first_token_seconds_count", lbl)])
        n_itl = int(m[("tierserve_inter_token_latency_seconds_count", lbl)])
        assert n_ttft == 2 and gen > 12, (gen, n_ttft)
        snap = wp.send(wait_for=f"{gen} tokens since start", timeout_ms=10000)
        assert snap["found"], snap["llm_cards"]
        f = snap["llm_cards"][0]["fields"]
        assert f["llm-seq"] == f"running 0 / waiting 0 · batch limit {good['batch_limit']}", f
        assert f["llm-kv-bytes"] == "0 B (FP32, 512 B/token)", f
        assert re.fullmatch(rf"{NUM} ms \(2 since start\)", f["llm-ttft"]), f
        assert re.fullmatch(rf"{NUM} ms \({n_itl} gaps since start\)", f["llm-itl"]), f
        assert re.fullmatch(rf"{NUM} \(last 10 s\) · {gen} tokens since start", f["llm-tps"]), f
        # the Inference card's latency leaves the LLM's requests out: only the 2 inferences
        (inf,) = snap["cards"]
        assert "(2 requests since start)" in inf["text"], inf["text"]
        check_no_leaks(snap)
        wp.send(shot="")

        # the router page: the pool that served /v1 has the block, per priority against targets
        st = r.status()
        gpu = next(p for p in st["pools"] if p["name"] == "gpu")
        assert next(p for p in st["pools"] if p["name"] == "cpu")["llm"] is None
        tok = f"{gpu['llm']['prompt_tokens']} in / {gpu['llm']['completion_tokens']} out"
        snap = rp.send(wait_css="[data-pool=gpu] [data-testid=llm-tokens]", text=tok, timeout_ms=10000)
        assert snap["found"], snap["pools"]
        pools = {p["pool"]: p for p in snap["pools"]}
        assert pools["cpu"]["llm"] is None, pools["cpu"]
        block = pools["gpu"]["llm"]
        rows = {x["priority"]: x["cells"] for x in block["rows"]}
        assert set(rows) == {"urgent", "normal"}, rows
        assert rows["urgent"][1] == "1" and rows["normal"][1] == "1", rows  # streams timed
        assert re.fullmatch(rf"{NUM} ms / {TTFT_TARGET_MS} ms", rows["urgent"][2]), rows
        assert re.fullmatch(rf"{NUM} ms / {ITL_TARGET_MS} ms", rows["urgent"][3]), rows
        assert re.fullmatch(rf"{NUM} ms / —", rows["normal"][2]), rows
        u = gpu["llm"]["priorities"]["urgent"]
        assert rows["urgent"][4] == f"{u['prompt_tokens']} / {u['completion_tokens']}", rows
        f = block["fields"]
        assert re.fullmatch(rf"{NUM} / {NUM} \(last 10 s\)", f["llm-tokens-rate"]), f
        cost = re.fullmatch(rf"\$({NUM}) \(last 10 s\)", f["llm-cost"])
        assert cost and float(cost.group(1)) >= TOKEN_PRICE * 0.999, f  # the token price, plus compute
        row = {c["backend"]: c for c in snap["cards"]}[f"127.0.0.1:{w.port}"]["llm"][0]
        assert (row["backend-llm-running"], row["backend-llm-waiting"]) == ("0", "0"), row

        # a pool whose first /v1 request ends between two polls: its rates and cost still
        # count that request (the page's windows start before the block shows)
        body = json.dumps({"model": "chat", "prompt": "hello", "max_tokens": 8, "temperature": 0}).encode()
        code, h, reply = request(r.port, "POST", "/v1/completions",
                                 {"X-Data-Class": "sensitive", "Content-Type": "application/json"}, body, timeout=60)
        assert code == 200 and h["x-tierrouter-pool"] == "cpu", (code, h, reply)
        usage = json.loads(reply)["usage"]
        tok = f"{usage['prompt_tokens']} in / {usage['completion_tokens']} out"
        snap = rp.send(wait_css="[data-pool=cpu] [data-testid=llm-tokens]", text=tok, timeout_ms=10000)
        assert snap["found"], snap["pools"]
        f = {p["pool"]: p for p in snap["pools"]}["cpu"]["llm"]["fields"]
        assert re.fullmatch(rf"{NUM} / {NUM} \(last 10 s\)", f["llm-tokens-rate"]), f
        cost = re.fullmatch(rf"\$({NUM}) \(last 10 s\)", f["llm-cost"])
        assert cost and float(cost.group(1)) >= TOKEN_PRICE * 0.999, f
        check_no_leaks(snap)

        # prefix affinity: one conversation opening sent twice (the second reuses the first's
        # prompt blocks); each pool's block reads exactly what /admin/status says: the tries
        # placed by prefix, and the workers' cached tokens of the prompt tokens
        opening = "Tell me about " + " ".join(["parcels", "refunds", "couriers", "invoices"] * 12)
        body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": opening}], "max_tokens": 4,
                           "temperature": 0}).encode()
        cached = 0
        for _ in range(2):
            code, h, reply = request(r.port, "POST", "/v1/chat/completions", {"Content-Type": "application/json"},
                                     body, timeout=60)
            assert code == 200 and h["x-tierrouter-pool"] == "gpu", (code, h, reply)
            cached += json.loads(reply)["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0
        st = r.status()
        want = {}
        for p in st["pools"]:
            a, x = p["affinity"], p["prefix"]
            share = math.floor(x["hit_rate"] * 1000 + 0.5) / 10
            want[p["name"]] = {"affinity-placed": f"hit {a['hit']} · miss {a['miss']} · overflow {a['overflow']}",
                               "affinity-cached": f"{x['cached_tokens']} of {x['prompt_tokens']} ({share:g}%)"}
        assert st["pools"][0]["prefix"]["cached_tokens"] >= cached, st["pools"][0]
        snap = rp.send(wait_css="[data-pool=gpu] [data-testid=affinity-cached]", text=want["gpu"]["affinity-cached"],
                       timeout_ms=10000)
        assert snap["found"], (want, snap["pools"])
        assert {p["pool"]: p["affinity"] for p in snap["pools"]} == want, snap["pools"]
        check_no_leaks(snap)
        rp.send(shot="")
        print(f"screenshots: {rp.png} {wp.png}")
    finally:
        if stream:
            stream.close()
        for p in pages:
            p.close()
        assert r.stop() == 0
        for x in (w, fb):
            x.stop()


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
