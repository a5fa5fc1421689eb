"""The router's access log and `tierbench trace`: real traffic in, a replayable trace out.

A real router (access_log on) in front of real CPU workers gets a known sequence of requests
(priorities, tenants, data classes, models, spacing); its log is converted, and the trace
must hold exactly those requests, in order, at their offsets; `tierbench sim --trace` then
replays it and accounts for every arrival. The converter alone is checked on a synthetic log
full of junk, and the access line on hostile names (no workers needed for those).
"""
import json
import time

import numpy as np
import pytest

from conftest import start_worker, run_tierbench as tierbench
from helpers import post
from test_router import DEMO, Router, pools_config

# A request's trace offset is the router's arrival time (the line's ts minus duration_ms);
# the client's send time is the reference. Both sides see the same loop delays, so they
# agree far closer than this; the gaps between requests (>= 0.25 s) keep the order unambiguous.
OFFSET_TOLERANCE_S = 0.12
TENANTS = "tenants:\n  - {name: acme}\n  - {name: beta}\n"


def infer_body(rows):
    x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [rows, 4],
                                   "data": x.ravel().tolist()}]}).encode()


def trace_rows(text):
    rows = [l.split(",") for l in text.splitlines() if l and not l.startswith(("#", "t_s,"))]
    return [(float(t), p, ten, dc, m, int(s)) for t, p, ten, dc, m, s in rows]


# (gap before it in s, priority, tenant header, data class, model, rows)
SEQUENCE = [
    (0.0, "urgent", "acme", "public", "demo", 1),
    (0.3, "normal", "beta", "public", "alias", 2),
    (0.25, "batch", "acme", "sensitive", "demo", 3),
    (0.5, "normal", None, "public", "demo", 1),  # no tenant header: "unknown"
    (0.25, "urgent", "beta", "sensitive", "alias", 4),
    (0.4, "batch", "beta", "public", "nope", 1),  # no pool serves it: still an arrival (404)
    (0.3, "normal", "acme", "public", "demo", 8),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trace")
    gpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "1"})
    cpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "1"})
    models = [("demo", "demo"), ("alias", "demo")]
    r = Router(pools_config([("gpu", "gpu", False, [gpu.port], models), ("cpu", "cpu", True, [cpu.port], models)],
                            "access_log: true\n" + TENANTS), tmp)
    r.wait_healthy(2)
    yield r, tmp
    assert r.stop() == 0
    for w in (gpu, cpu):
        w.stop()


def test_live_traffic_becomes_the_same_trace_and_replays(stack):
    r, tmp = stack
    sent = []
    t_first = None
    for i, (gap, prio, tenant, dc, model, rows) in enumerate(SEQUENCE):
        if t_first is not None:
            time.sleep(max(0.0, t_first + sum(s[0] for s in SEQUENCE[:i + 1]) - time.monotonic()))
        body = infer_body(rows)
        h = {"X-Priority": prio, "X-Data-Class": dc, "X-Request-Id": f"seq-{i}"}
        if tenant:
            h["X-Tenant"] = tenant
        t = time.monotonic()
        t_first = t_first if t_first is not None else t
        code, _, _ = post(r.port, f"/v2/models/{model}/infer", body, h)
        assert code == (404 if model == "nope" else 200), (i, code)
        sent.append((t - t_first, len(body)))

    # the access lines themselves: one per request, the fields the docs promise
    deadline = time.time() + 5
    while time.time() < deadline:
        access = [l for l in r.log_lines(strict=True) if l.get("msg") == "access" and l["request_id"].startswith("seq-")]
        if len(access) == len(SEQUENCE):
            break
        time.sleep(0.05)
    assert [l["request_id"] for l in access] == [f"seq-{i}" for i in range(len(SEQUENCE))]
    for (gap, prio, tenant, dc, model, rows), (_, nbytes), l in zip(SEQUENCE, sent, access):
        assert (l["priority"], l["tenant"], l["data_class"], l["model"]) == (prio, tenant or "unknown", dc, model)
        assert l["request_bytes"] == str(nbytes) and l["retried"] == "0"
        assert float(l["duration_ms"]) >= 0
        if model == "nope":
            assert (l["status"], l["outcome"], l["pool"], l["backend"]) == ("404", "client_error", "none", "none"), l
        else:
            assert (l["status"], l["outcome"]) == ("200", "success"), l
            assert l["pool"] == ("cpu" if dc == "sensitive" else l["pool"]) and l["pool"] in ("gpu", "cpu")
            assert l["backend"].startswith("127.0.0.1:")

    # converted: exactly those requests, in order, at their offsets
    trace = tmp / "trace.csv"
    rc, _, err = tierbench("trace", "--access-log", r.log, "--out", trace, "--bytes-per-row", 16)
    assert rc == 0, err
    assert f"{len(SEQUENCE)} requests" in err and " 0 bad" in err, err
    got = trace_rows(trace.read_text())
    assert len(got) == len(SEQUENCE), got
    for (gap, prio, tenant, dc, model, rows), (t_sent, nbytes), row in zip(SEQUENCE, sent, got):
        assert row[1:5] == (prio, tenant or "unknown", dc, model), row
        assert row[5] == -(-nbytes // 16), row
        assert abs(row[0] - t_sent) <= OFFSET_TOLERANCE_S, (row, t_sent)
    assert got[0][0] == 0

    # and replayed: the simulator takes the file and accounts for every arrival
    rc, out, err = tierbench("sim", "--trace", trace, "--quiet", "--json", "-")
    assert rc == 0, err
    s = json.loads(out)
    assert s["arrivals"] == len(SEQUENCE)
    for name in ("urgent", "normal", "batch"):
        p = s["priorities"][name]
        assert p["arrivals"] == sum(1 for q in SEQUENCE if q[1] == name)
        assert sum(p[k] for k in ("served", "refused", "queue_timeout", "deadline", "failed")) == p["arrivals"], p


def test_access_line_survives_hostile_names(stack):
    """A model name with a quote, a backslash, braces and a byte that is not UTF-8, a request
    id with quotes, a tenant header that is no tenant: the line stays one JSON object with
    the values intact, and the converter counts it bad (a trace cannot hold that name)."""
    r, tmp = stack
    code, _, _ = post(r.port, "/v2/models/a%22b%5Cc%7D%7B%FF/infer", infer_body(1),
                   {"X-Request-Id": 'h"}{\\x', "X-Tenant": '"}\\', "X-Priority": "batch"})
    assert code == 404
    deadline = time.time() + 5
    mine = []
    while time.time() < deadline and not mine:
        mine = [l for l in r.log_lines(strict=True) if l.get("msg") == "access" and l["request_id"] == 'h"}{\\x']
        time.sleep(0.05)
    [l] = mine
    assert l["model"] == 'a"b\\c}{\ufffd' and l["tenant"] == "unknown" and l["priority"] == "batch"
    assert l["status"] == "404" and l["outcome"] == "client_error"
    rc, out, err = tierbench("trace", "--access-log", r.log)
    assert rc == 0, err
    assert "model is missing or not 1..63" in err and " 1 bad" in err, err


def test_access_log_is_off_by_default_and_on_by_variable(tmp_path):
    """No workers: a request for a model no pool serves is still an inference request."""
    cfg = pools_config([("cpu", "cpu", True, [1], None)])
    for env, want in (({}, 0), ({"TIERROUTER_ACCESS_LOG": "true"}, 1)):
        r = Router(cfg, tmp_path, env=env)
        try:
            code, _, _ = post(r.port, "/v2/models/m1/infer", infer_body(1), {})
            assert code in (404, 503), code
            time.sleep(0.2)  # the line is written before the reply; this is only slack
            n = sum(1 for l in r.log_lines(strict=True) if l.get("msg") == "access")
        finally:
            assert r.stop() == 0
        assert n == want, (env, n, r.log.read_text())


def test_converter_skips_log_lines_and_counts_junk(tmp_path):
    def line(ts, dur, prio="normal", tenant="acme", dc="public", model="demo", nbytes="100", **kw):
        d = {"ts": ts, "level": "info", "msg": "access", "request_id": "x", "priority": prio, "tenant": tenant,
             "data_class": dc, "pool": "gpu", "backend": "127.0.0.1:1", "status": "200", "outcome": "success",
             "duration_ms": dur, "request_bytes": nbytes, "retried": "0", "model": model}
        d.update(kw)
        return json.dumps(d)

    log = tmp_path / "router.log"
    log.write_text("\n".join([
        '{"ts":"2025-03-01T10:00:00.000000Z","level":"info","msg":"listening on 127.0.0.1:9000"}',
        "not json at all",
        # lines come in completion order: this one ends first but arrived second (01.5)
        line("2025-03-01T10:00:01.600000Z", "100.000", dc="sensitive", model="alias"),
        line("2025-03-01T10:00:02.000000Z", "1000.000", prio="urgent"),  # arrived 10:00:01.0
        "",
        '{"ts":"2025-03-01T10:00:01.7Z","level":"warn","msg":"backend 127.0.0.1:1 ejected"}',
        line("2025-03-01T10:00:03.000000Z", "0.000", prio="emergency"),  # bad priority
        line("2025-03-01T10:00:03.000000Z", "5.000", model="has space"),  # not a trace name
        line("yesterday", "5.000"),  # bad ts
        line("2025-03-01T10:00:03.000000Z", "-5"),  # bad duration
        '{"msg":"access","ts":"2025-03-01T10:00:0',  # cut short
        "x" * 20000,  # longer than any log line
        line("2025-03-01T10:00:04.250000Z", "250.000", prio="batch", tenant="unknown", nbytes="0"),  # 10:00:04.0
        "\x00\xff{}",
    ]) + "\n", encoding="utf-8", errors="surrogateescape")
    out = tmp_path / "t.csv"
    rc, _, err = tierbench("trace", "--access-log", log, "--out", out)
    assert rc == 0, err
    assert "3 requests" in err and "2 other log lines skipped" in err and "8 bad" in err, err
    assert "router.log:2: not a JSON log line" in err and "router.log:7: priority" in err, err
    assert trace_rows(out.read_text()) == [
        (0.0, "urgent", "acme", "public", "demo", 1),
        (0.5, "normal", "acme", "sensitive", "alias", 1),
        (3.0, "batch", "unknown", "public", "demo", 1),
    ]
    rc, sim_out, err = tierbench("sim", "--trace", out, "--quiet", "--json", "-")
    assert rc == 0, err
    assert json.loads(sim_out)["arrivals"] == 3

    # nothing usable: refused, saying why; no file
    junk = tmp_path / "junk.log"
    junk.write_text("junk\n" + '{"msg":"listening"}\n')
    rc, _, err = tierbench("trace", "--access-log", junk, "--out", tmp_path / "none.csv")
    assert rc == 64 and "no good access line" in err, err
    assert not (tmp_path / "none.csv").exists()
    rc, _, err = tierbench("trace", "--out", tmp_path / "x.csv")
    assert rc == 64 and "--access-log" in err, err
