"""Tenant budgets and fair share between tenants, live (issue 26 item 5).

The backends are fakes (fakehttp) that bill a fixed compute time per request through
Tierserve-Compute-Ms, so what a tenant spends is exact: with a usage pool at 3600 an hour and
1000 ms per request, each request costs 1.00. What depends on this machine's speed (how long a
request takes through the router) is measured in the test and sizes the waits.
"""
import json
import threading
import time

from conftest import run_tierbench
from fakehttp import FakeHTTP, echo_id
from helpers import metric
from test_router import Router, post_once, wait_until

REPLY = json.dumps({"model_name": "demo", "model_version": "1", "outputs": []}).encode()


class Billing(FakeHTTP):
    """A healthy fake worker: each request takes `delay` s and reports 1000 ms of compute;
    it records the request id of each request in the order it finished (the tests send ids
    that start with the tenant's name)."""
    status = {**FakeHTTP.status, "models": [{"name": "demo", "version": "1", "ready": True}]}

    def __init__(self, delay=0.0):
        self.delay = delay  # (a test may wrap respond to hold requests)
        self.done = []
        self.lock = threading.Lock()
        super().__init__()

    def respond(self, c, head, body):
        time.sleep(self.delay)
        rid = next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                    if line.lower().startswith(b"x-request-id:")), "")
        with self.lock:
            self.done.append(rid.split("-")[0])
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTierserve-Compute-Ms: 1000\r\n" +
                  echo_id(head) + b"Content-Length: %d\r\n\r\n" % len(REPLY) + REPLY)
        return True


def healthy(r, n):
    wait_until(lambda: sum(p["healthy"] for p in r.status()["pools"]) >= n, 15, f"{n} healthy backends")


def test_soft_budget_demotes_to_cpu_and_hard_budget_refuses_naming_it(tmp_path):
    gpu, cpu = Billing(), Billing()
    r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
tenants:
  - {{name: acme, budget: {{soft_per_hour: 3, hard_per_hour: 5, hard_per_day: 100}}}}
  - {{name: globex}}
pools:
  - {{name: gpu, kind: gpu, min_tier: cpu, backends: ["127.0.0.1:{gpu.port}"], cost: {{model: usage, usd_per_hour: 3600}}}}
  - {{name: cpu, kind: cpu, backends: ["127.0.0.1:{cpu.port}"], cost: {{model: usage, usd_per_hour: 3600}}}}
""", tmp_path)
    try:
        healthy(r, 2)
        acme = {"X-Tenant": "acme", "X-Priority": "urgent"}
        pools = []
        for _ in range(5):  # 1.00 each: 3 within budget, then 2 past the soft one
            code, headers, raw = post_once(r, "demo", acme)
            assert code == 200, raw
            pools.append(headers["X-Tierrouter-Pool"])
        assert pools == ["gpu", "gpu", "gpu", "cpu", "cpu"], pools  # demoted: CPU only
        # 5.00 spent: the hard per-hour budget; 429 naming it, with the time the hour frees it
        code, headers, raw = post_once(r, "demo", acme)
        assert code == 429, raw
        assert json.loads(raw)["error"] == "tenant budget 'acme' hard per-hour budget 5.00 spent"
        assert 3400 <= int(headers["Retry-After"]) <= 3600, headers  # when its first minute leaves the hour
        # another tenant is not touched
        code, headers, _ = post_once(r, "demo", {"X-Tenant": "globex", "X-Priority": "urgent"})
        assert (code, headers["X-Tierrouter-Pool"]) == (200, "gpu")
        assert metric(r, "tierrouter_tenant_demoted_total", tenant="acme", required=True) == 2
        assert metric(r, "tierrouter_tenant_refused_total", tenant="acme", reason="budget", required=True) == 1
        assert metric(r, "tierrouter_tenant_budget_used_ratio", tenant="acme", window="hour", budget="hard",
                      required=True) == 1.0
        assert metric(r, "tierrouter_tenant_budget_spent_usd", tenant="acme", window="day", required=True) == 5.0
        # demoted urgent ran as normal: counted at that priority
        assert metric(r, "tierrouter_requests_total", pool="cpu", priority="normal", outcome="success") == 2
        t = {x["name"]: x for x in r.status()["tenants"]}
        assert t["acme"]["state"] == "hard" and t["acme"]["refused"] == 1 and t["globex"]["state"] == "ok"
        # tierbench cost shows budget use (only tenants with a budget)
        code, out, err = run_tierbench("cost", "--router", f"http://{r.url}", "--markdown", "-")
        assert code == 0, err
        rows = [line for line in out.splitlines() if line.startswith("| acme | hard |")]
        assert rows == ["| acme | hard | 5.000000 | 166.7% | 100.0% | 5.000000 | no budget | 5.0% | 2 | 1 |"], out
        assert "| globex |" not in out.split("## Tenant budgets")[1]
    finally:
        assert r.stop() == 0
        gpu.close()
        cpu.close()


def test_a_bursting_tenant_does_not_starve_another(tmp_path):
    """One slot, a burst of requests from one tenant, more than the admission queue holds;
    then one request from a quiet tenant. A full queue makes the burst give up a place to it
    (not 503), and fair share serves it next, not after the burst. The worker holds its one
    request until the queue is set up, so nothing here depends on this machine's speed."""
    w = Billing()
    w.gate = threading.Event()
    queue, burst = 8, 12
    r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
deadline_ms: {{urgent: 60000, normal: 60000, batch: 60000}}
admission: {{queue_size: {queue}, queue_timeout_ms: 60000}}
tenants: [{{name: hog}}, {{name: quiet}}]
pools:
  - {{name: cpu, kind: cpu, max_in_flight: 1, backends: ["127.0.0.1:{w.port}"]}}
""", tmp_path)
    codes, quiet = [], []

    def send(tenant, k, out):
        out.append(post_once(r, "demo", {"X-Tenant": tenant, "X-Request-Id": f"{tenant}-{k}"}, timeout=120)[0])

    threads = [threading.Thread(target=send, args=("hog", k, codes), daemon=True) for k in range(burst)]
    try:
        healthy(r, 1)
        w.delay = 0
        respond = w.respond
        w.respond = lambda c, head, body: w.gate.wait(60) and respond(c, head, body)
        for t in threads:
            t.start()
        # one held in the worker, the queue full, the rest refused at once
        wait_until(lambda: codes.count(503) == burst - 1 - queue, 30, "the burst's surplus refused")
        assert r.status()["admission_queue"]["normal"] == queue
        q = threading.Thread(target=send, args=("quiet", 0, quiet), daemon=True)
        q.start()
        # the quiet request took the place of the burst's newest one
        wait_until(lambda: codes.count(503) == burst - queue, 30, "a burst request giving its place up")
        w.gate.set()
        q.join(60)
        for t in threads:
            t.join(60)
        assert quiet == [200]
        # the one held, then the quiet one: not after the 7 the burst still had queued
        assert w.done[:2] == ["hog", "quiet"], w.done
        assert codes.count(200) == queue and len(codes) == burst, codes
    finally:
        w.gate.set()
        assert r.stop() == 0
        w.close()


def test_check_config_refuses_bad_budgets_naming_the_key(tmp_path):
    import subprocess
    from helpers import ROUTER_BIN
    base = 'pools: [{name: cpu, kind: cpu, backends: ["127.0.0.1:1"]}]\ntenants: [{name: acme, %s}]\n'
    for body, needle in [
        ("budget: {soft_per_hour: 20, hard_per_hour: 12}", "tenants[0].budget.soft_per_hour: 20 is above hard_per_hour 12"),
        ("budget: {soft_per_day: 9, hard_per_day: 8}", "tenants[0].budget.soft_per_day: 9 is above hard_per_day 8"),
        ("budget: {hard_per_hour: 50, hard_per_day: 40}", "tenants[0].budget.hard_per_hour: 50 is above hard_per_day 40"),
        ("budget: {hard_per_hour: -1}", "tenants[0].budget.hard_per_hour: -1 is not in 0..1e+09"),
        ("weight: 0.5, budget: {soft_pr_hour: 1}", "soft_pr_hour"),
        ("weight: 5000", "tenants[0].weight: 5000 is not in 0..1000"),
        ("weight: 2, budget: {soft_per_hour: 1, hard_per_hour: 2, soft_per_day: 10, hard_per_day: 20}", None),
    ]:
        cfg = tmp_path / "r.yaml"
        cfg.write_text(base % body)
        p = subprocess.run([ROUTER_BIN, "--check-config", "--config", str(cfg)], capture_output=True, timeout=15)
        if needle is None:
            assert p.returncode == 0, p.stderr
            assert b"tenants[0].budget.hard_per_day: 20" in p.stdout, p.stdout
        else:
            assert p.returncode == 64 and needle.encode() in p.stderr, (body, p.stderr)
