"""tierbench cost: the router's cost figures as a report, a history file and a weekly report.

A real router over two real workers (a usage-priced "GPU" pool, a fixed-price CPU pool that
takes sensitive data), an admin token, two tenants, a little concurrent load. The report's
figures must be /admin/cost's and /admin/status's own: fetched just before and just after the
run, whatever did not move in between must be in the report exactly; the fixed pool, which
accrues each tick by the clock, must lie between the two.
"""
import csv
import io
import json
import threading
import time

import pytest

from conftest import start_worker
from promtext import parse_strict
from helpers import get_json, metrics_text
from test_router import DEMO, Router, post_once
from test_tierbench_load import tierbench

TOKEN = "cost-admin-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HEADER = ("ts,window_s,section,name,requests,cost_usd,usd_per_request,backend_hours,compute_hours,"
          "p50_ms,p95_ms,p99_ms")
BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                               "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()


def post(port, key, priority):
    """One inference as that tenant at that priority (it must succeed): the pool that served it."""
    code, headers, body = post_once(port, "demo", {"Content-Type": "application/json", "X-Api-Key": key,
                                                   "X-Priority": priority}, BODY)
    assert code == 200, (code, body)
    return headers.get("X-Tierrouter-Pool")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cost")
    gpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    router = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
admin_token: {TOKEN}
tenants:
  - {{name: acme, api_key: acme-key-0001}}
  - {{name: clinic, api_key: clinic-key-0001, sensitive: true}}
pools:
  - name: gpu
    kind: gpu
    min_tier: cpu
    backends: ["127.0.0.1:{gpu.port}"]
    cost: {{model: usage, usd_per_hour: 3600}}
  - name: cpu
    kind: cpu
    sensitive: true
    backends: ["127.0.0.1:{cpu.port}"]
    cost: {{model: fixed, usd_per_hour: 36}}
""", tmp, status_headers=AUTH)
    router.wait_healthy(2)
    # a little load: four clients at once, every priority, both tenants
    errors, sent = [], {"gpu": 0, "cpu": 0}
    lock = threading.Lock()

    def client(i):
        try:
            for k in range(12):
                key = "clinic-key-0001" if (i + k) % 4 == 0 else "acme-key-0001"
                pool = post(router.port, key, ("urgent", "normal", "batch")[k % 3])
                with lock:
                    sent[pool] += 1
        except Exception as e:  # reported below, in the test's thread
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # the fixed pool's cost lands at the next tick
    deadline = time.time() + 10
    while {p["name"]: p for p in get_json(router.port, "/admin/cost?window=300", AUTH)["pools"]}["cpu"]["cost_usd"] == 0:
        assert time.time() < deadline, "the fixed pool never accrued"
        time.sleep(0.05)
    yield {"router": router, "sent": sent, "tmp": tmp}
    assert router.stop() == 0
    for w in (gpu, cpu):
        assert w.stop() == 0, w.log_text()[-4000:]


def csv_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def figures(port):
    cost = get_json(port, "/admin/cost?window=300", AUTH)
    status = get_json(port, "/admin/status", AUTH)
    return cost, status


def run_report(stack, *extra):
    tmp = stack["tmp"]
    out_csv, out_md = tmp / "report.csv", tmp / "report.md"
    before = figures(stack["router"].port)
    rc, so, se = tierbench("cost", "--router", f"http://{stack['router'].url}", "--token", TOKEN, "--window", "300",
                           "--csv", out_csv, "--markdown", out_md, *extra)
    after = figures(stack["router"].port)
    assert rc == 0, se
    return before, after, out_csv.read_text(), out_md.read_text()


def test_report_figures_are_the_routers(stack):
    # the fixed pool ticks by the clock: a tick between the two reads moves its pool, the
    # tenants it served and their priorities. The figures are read again until one run falls
    # between two ticks (how often one does not depends on the machine, not on the code)
    for _ in range(5):
        before, after, text, md = run_report(stack)
        if all(before[0][k] == after[0][k] for k in ("pools", "tenants", "priorities")):
            break
    assert text.splitlines()[0] == HEADER
    rows = csv_rows(text)
    got = {(r["section"], r["name"]): r for r in rows}
    assert {r["window_s"] for r in rows} == {"300"}
    checked_exact = 0
    for key, section in (("pools", "pool"), ("tenants", "tenant"), ("priorities", "priority")):
        b = {e["name"]: e for e in before[0][key]}
        a = {e["name"]: e for e in after[0][key]}
        assert {n for s, n in got if s == section} == set(b), (section, set(b))
        for name, e in b.items():
            r = got[(section, name)]
            assert int(r["requests"]) == e["requests"] == a[name]["requests"]  # no load now
            if e["cost_usd"] == a[name]["cost_usd"]:
                assert float(r["cost_usd"]) == e["cost_usd"], (section, name, r, e)
                assert float(r["usd_per_request"]) == e["usd_per_request"], (section, name, r, e)
                checked_exact += 1
            else:  # the fixed pool accrued a tick in between
                assert e["cost_usd"] <= float(r["cost_usd"]) <= a[name]["cost_usd"], (section, name, r, e)
    # the usage pool and the tenant that only used it do not move: exact
    assert before[0]["pools"][0]["name"] == "gpu"
    gpu = got[("pool", "gpu")]
    assert float(gpu["cost_usd"]) == before[0]["pools"][0]["cost_usd"] > 0
    assert int(gpu["requests"]) == stack["sent"]["gpu"] and int(got[("pool", "cpu")]["requests"]) == stack["sent"]["cpu"]
    assert checked_exact >= 4
    # hours: exact where the price model makes cost a measure of time, absent where it does not
    assert float(gpu["compute_hours"]) == pytest.approx(float(gpu["cost_usd"]) / 3600, rel=1e-9)
    assert gpu["backend_hours"] == ""
    cpu = got[("pool", "cpu")]
    assert float(cpu["backend_hours"]) == pytest.approx(float(cpu["cost_usd"]) / 36, rel=1e-9)
    assert cpu["compute_hours"] == ""
    # P50/P95/P99 per priority: /admin/status's last 60 s, unchanged since the load
    for prio in ("urgent", "normal", "batch"):
        s_b, s_a, r = before[1]["slo"][prio], after[1]["slo"][prio], got[("latency", prio)]
        assert s_b == s_a
        assert int(r["requests"]) == s_b["requests_60s"] > 0
        for q in ("p50_ms", "p95_ms", "p99_ms"):
            assert float(r[q]) == s_b[q], (prio, q, r, s_b)
    # the Markdown carries the same figures
    assert f"| gpu | usage | 3600 | 1 (1) | {stack['sent']['gpu']} | {gpu['cost_usd']} | {gpu['usd_per_request']} |" in md
    assert "| cpu | fixed | 36 | 1 (1) |" in md
    assert "## Not measured by the router" in md


def test_history_file_accumulates(stack):
    hist = stack["tmp"] / "history.csv"
    run_report(stack, "--append", hist)
    first = hist.read_text().splitlines()
    assert first[0] == HEADER and len(first) > 10
    time.sleep(1.1)  # a new second: the second run's rows carry a later timestamp
    run_report(stack, "--append", hist)
    lines = hist.read_text().splitlines()
    assert lines[: len(first)] == first and lines.count(HEADER) == 1
    assert len(lines) == 2 * len(first) - 1
    ts = sorted({r["ts"] for r in csv_rows("\n".join(lines))})
    assert len(ts) == 2 and ts[0] < ts[1]
    # the history renders: the two runs' windows are the hours covered
    out = stack["tmp"] / "week.csv"
    rc, so, se = tierbench("cost", "--weekly", hist, "--csv", out)
    assert rc == 0, se
    week = [r for r in csv_rows(out.read_text()) if r["day"] == "week"]
    assert float(week[0]["covered_hours"]) == pytest.approx(2 * 300 / 3600)


def test_append_refuses_a_file_that_is_not_a_history(stack):
    other = stack["tmp"] / "other.csv"
    other.write_text("a,b,c\n1,2,3\n")
    rc, so, se = tierbench("cost", "--router", f"http://{stack['router'].url}", "--token", TOKEN,
                           "--markdown", stack["tmp"] / "x.md", "--append", other)
    assert rc == 64 and "not a tierbench cost history" in se, se
    assert other.read_text() == "a,b,c\n1,2,3\n"


def test_wrong_token_fails_naming_the_status(stack):
    rc, so, se = tierbench("cost", "--router", f"http://{stack['router'].url}", "--token", "wrong-token-123")
    assert rc == 1 and "status 401" in se, se
    rc, so, se = tierbench("cost", "--token", TOKEN)
    assert rc == 64 and "--router" in se, se


def hist_line(ts, section, name, requests="", usd="", bh="", ch="", p95="", p99="", window=3600):
    per = f"{float(usd) / int(requests):.9f}" if usd and requests and int(requests) else ""
    return f"{ts},{window},{section},{name},{requests},{usd},{per},{bh},{ch},,{p95},{p99}"


def test_weekly_report_from_a_synthetic_history(tmp_path):
    lines = [HEADER]
    # nine days, 2026-03-01 .. 03-09; the report keeps the 7 up to the newest (03-03 .. 03-09)
    for day in range(1, 10):
        for hour in (0, 12):  # two runs a day, an hour each
            ts = f"2026-03-{day:02d}T{hour:02d}:00:00Z"
            lines.append(hist_line(ts, "pool", "gpu", 100 * day, f"{day:.9f}", ch=f"{day / 3600:.10g}"))
            lines.append(hist_line(ts, "pool", "cpu", 10, "0.500000000", bh="1"))
            lines.append(hist_line(ts, "tenant", "acme", 100 * day + 10, f"{day + 0.5:.9f}"))
            lines.append(hist_line(ts, "priority", "urgent", 100 * day + 10, f"{day + 0.5:.9f}"))
            lines.append(hist_line(ts, "latency", "urgent", 50, p95=f"{day * 10 + hour}", p99=f"{day * 20 + hour}"))
    hist = tmp_path / "h.csv"
    hist.write_text("\n".join(lines) + "\n")
    out_csv, out_md = tmp_path / "w.csv", tmp_path / "w.md"
    rc, so, se = tierbench("cost", "--weekly", hist, "--csv", out_csv, "--markdown", out_md)
    assert rc == 0, se
    rows = csv_rows(out_csv.read_text())
    days = sorted({r["day"] for r in rows} - {"week"})
    assert days == [f"2026-03-{d:02d}" for d in range(3, 10)]
    by = {(r["day"], r["section"], r["name"]): r for r in rows}
    week_gpu = by[("week", "pool", "gpu")]
    assert int(week_gpu["requests"]) == sum(2 * 100 * d for d in range(3, 10))
    assert float(week_gpu["cost_usd"]) == pytest.approx(sum(2 * d for d in range(3, 10)))
    assert float(by[("week", "pool", "cpu")]["backend_hours"]) == 14
    assert by[("week", "pool", "cpu")]["compute_hours"] == ""
    assert float(by[("2026-03-05", "pool", "gpu")]["cost_usd"]) == 10
    assert float(by[("2026-03-05", "pool", "gpu")]["covered_hours"]) == 2
    assert float(by[("week", "pool", "gpu")]["covered_hours"]) == 14
    # the trend: each day's worst p95/p99 (the 12:00 run)
    for d in range(3, 10):
        r = by[(f"2026-03-{d:02d}", "latency", "urgent")]
        assert (float(r["worst_p95_ms"]), float(r["worst_p99_ms"])) == (d * 10 + 12, d * 20 + 12)
    md = out_md.read_text()
    assert "2026-03-03 to 2026-03-09" in md and "Covered: 14.0 of 168 hours" in md
    assert "| 2026-03-09 | 102 | 192 | - | - | - | - |" in md
    assert "| 2026-03-05 | 2.0 | 10.000000 | 1.000000 | 11.000000 |" in md
    assert "2026-03-02" not in md


@pytest.mark.parametrize("bad, needle", [
    ("ts,what\n", "h.csv:1: not a tierbench cost history"),
    (HEADER + "\n2026-03-01T00:00:00Z,3600,pool,gpu,x,1,,,,,,\n", "h.csv:2: not a history row"),
    (HEADER + "\n2026-13-01T00:00:00Z,3600,pool,gpu,1,1,,,,,,\n", "h.csv:2: not a history row"),
    (HEADER + "\n2026-03-01T00:00:00Z,3600,pool,gpu,1,1,,,,,\n", "h.csv:2: not a history row"),
    (HEADER + "\n", "no rows"),
])
def test_weekly_refuses_a_bad_history_naming_the_line(tmp_path, bad, needle):
    hist = tmp_path / "h.csv"
    hist.write_text(bad)
    rc, so, se = tierbench("cost", "--weekly", hist)
    assert rc == 64 and needle in se, se


def test_fixed_pool_cost_is_shared_by_the_tenants_it_served(stack):
    """The fixed pool's cost goes to the requests it served in each tick, so the tenant
    that used it pays a share; the router's book starts at start-up, so nothing served
    before its first tick goes free."""
    tenants = {t["name"]: t for t in get_json(stack["router"].port, "/admin/cost?window=300", AUTH)["tenants"]}
    assert stack["sent"]["cpu"] > 0
    assert tenants["clinic"]["cost_usd"] > 0, tenants


def cost_series(port):
    """tierrouter_cost_usd_total from /metrics: {(pool, tenant, priority): USD} (totals since
    start, not windowed, so nothing ages out between two reads)."""
    out = {}
    for (name, labels), v in parse_strict(metrics_text(port, AUTH)).items():
        if name == "tierrouter_cost_usd_total":
            d = dict(labels)
            out[d["pool"], d["tenant"], d["priority"]] = v
    return out


def test_idle_fixed_pool_cost_goes_to_tenant_idle_at_the_pools_rate(stack):
    """The rule, not the router's own figures: with no load, the fixed pool (36 USD/h x 1
    backend = 0.01 USD/s) accrues 0.01 USD per second of idle time, and every tick of it
    bills tenant "idle" (never "unknown" or a tenant that used it earlier).

    The ticks' times are not visible, so they are bracketed by reads: /metrics is read in a
    loop; between the first read that shows the pool's total changed and the last, it moved
    by rate x (tick B - tick A), tick A after the read before that change was sent and
    before the changed read was answered (likewise B). The bounds come from those read
    times alone, so a slow machine only widens them."""
    rate = 36 / 3600.0
    idle = ("cpu", "idle", "normal")

    def pool_total(s):
        return sum(v for k, v in s.items() if k[0] == "cpu")

    reads = []  # (sent, answered, series)
    changes, t_end = [], None
    while t_end is None or time.monotonic() < t_end:
        t0 = time.monotonic()
        s = cost_series(stack["router"].port)
        reads.append((t0, time.monotonic(), s))
        if len(reads) > 1 and pool_total(s) != pool_total(reads[-2][2]):
            changes.append(len(reads) - 1)
        if t_end is None and changes:
            t_end = time.monotonic() + 2.0  # two seconds of ticks after the first seen
        assert time.monotonic() - reads[0][0] < 30, "the fixed pool's cost never moved"
        time.sleep(0.01)
    i, j = changes[0], changes[-1]
    assert j > i, "one change seen in two seconds: the pool does not tick"
    first, last = reads[i][2], reads[j][2]
    grew = pool_total(last) - pool_total(first)
    lo = rate * (reads[j - 1][0] - reads[i][1])
    hi = rate * (reads[j][1] - reads[i - 1][0])
    eps = 1e-9 * len(last)  # each series is printed to 9 decimals
    assert lo - eps <= grew <= hi + eps, (lo, grew, hi)
    # all of it went to idle: no other (tenant, priority) of the pool moved, and nothing at
    # all was billed to unknown (every request here carried a known key)
    assert last.get(idle, 0) - first.get(idle, 0) == pytest.approx(grew, abs=eps), (first, last)
    for k in set(first) | set(last):
        if k != idle:
            assert first.get(k, 0) == last.get(k, 0), (k, first.get(k), last.get(k))
    assert not [k for k in last if k[1] == "unknown"], last
    tenants = {t["name"]: t for t in get_json(stack["router"].port, "/admin/cost?window=300", AUTH)["tenants"]}
    assert tenants["idle"]["cost_usd"] > 0 and tenants["idle"]["requests"] == 0, tenants
    assert tenants["unknown"]["cost_usd"] == 0, tenants
