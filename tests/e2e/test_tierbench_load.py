"""tierbench load against live servers: raw fake backends (fakehttp.py) for exact control, and
a real router in front of real CPU workers.

What is held: every scheduled request ends exactly once (replied + failed == scheduled, each
failure by kind); latency runs from the scheduled time, so a stalled server shows even when
the loader has few connections (and the closed-loop view, --latency-from send, hides it);
the headers of the mix arrive at the backend; the per-pool table matches what the backends
behind the router counted; a trace is replayed at its times (tolerance: 50 ms per request, on
a shared, loaded machine; typically under 5 ms).
"""
import csv
import io
import json
import pathlib
import re
import socket
import threading
import time

import numpy as np

from conftest import ROOT, start_worker, run_tierbench as tierbench
from helpers import free_port
from fakehttp import FakeHTTP, echo_id
from test_router import Router, config, worker_requests

META = {"name": "demo", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}]}
REPLY = json.dumps({"model_name": "demo", "outputs": []}).encode()
TOLERANCE_S = 0.05


def rows(path):
    return list(csv.DictReader(io.StringIO(pathlib.Path(path).read_text())))


def header(head, name):
    m = re.search(rb"(?im)^" + name.encode() + rb": *([!-~]+)\r?$", head)
    return m.group(1).decode() if m else None


class Kserve(FakeHTTP):
    """Answers the metadata and every inference with a fixed 200, logging (arrival time,
    head, body) per inference. plan(i, head) may return 'close', a status, or a delay."""

    def __init__(self, plan=None, stall=None):
        self.plan = plan
        self.stall = stall  # (start, length, delay) in seconds after the first inference
        self.log = []
        self.first = None
        self.lock = threading.Lock()
        super().__init__()

    def respond(self, c, head, body):
        if head.startswith(b"GET /v2/models/"):
            m = json.dumps(META).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(m)
                      + echo_id(head) + b"\r\n" + m)
            return True
        now = time.monotonic()
        with self.lock:
            self.first = self.first if self.first is not None else now
            self.log.append((now, head, body))
        rid = header(head, "X-Request-Id") or "tb--1"
        what = self.plan(int(rid.split("-")[1]), head) if self.plan else None
        if self.stall and self.stall[0] <= now - self.first < self.stall[0] + self.stall[1]:
            time.sleep(self.stall[2])
        if what == "close":
            c.shutdown(socket.SHUT_RDWR)
            return False
        if isinstance(what, float):
            time.sleep(what)
        status = what if isinstance(what, int) else 200
        c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (status, len(REPLY))
                  + echo_id(head) + b"\r\n" + REPLY)
        return True


def write_trace(path, lines):
    path.write_text("t_s,priority,tenant,data_class,model,size\n" + "".join(l + "\n" for l in lines))
    return path


def test_every_scheduled_request_ends_once_by_kind(tmp_path):
    # i % 5 == 1: 503; i % 7 == 2: connection closed with no reply; i % 11 == 3: a reply after
    # the 0.3 s timeout. Everything else 200.
    def plan(i, head):
        return 503 if i % 5 == 1 else "close" if i % 7 == 2 else 0.6 if i % 11 == 3 else None

    f = Kserve(plan)
    try:
        rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{f.port}", "--rate", "150", "--duration", "1",
                                 "--fixed", "--timeout", "0.3", "--connections", "8", "--json", tmp_path / "s.json",
                                 "--requests", tmp_path / "r.csv", "--csv", tmp_path / "s.csv")
    finally:
        f.close()
    assert rc == 0, err
    s = json.loads((tmp_path / "s.json").read_text())["all"]
    r = rows(tmp_path / "r.csv")
    n = 150
    assert s["scheduled"] == len(r) == n
    assert s["replied"] + s["failed"] == n
    want = {"ok": 0, "http_5xx": 0, "io": 0, "timeout": 0}
    for q in r:
        i = int(q["i"])
        kind = "http_5xx" if i % 5 == 1 else "io" if i % 7 == 2 else "timeout" if i % 11 == 3 else "ok"
        want[kind] += 1
        got = {"none": "ok" if q["status"] == "200" else "http_5xx" if q["status"] == "503" else q["status"]}.get(
            q["error"], q["error"])
        assert got == kind, q
    for k, v in want.items():
        assert s[k] == v, (k, s)
    assert s["connect"] == s["cancelled"] == s["http_4xx"] == 0
    table = rows(tmp_path / "s.csv")
    assert table[0]["name"] == "all" and int(table[0]["scheduled"]) == n


def test_a_dead_port_is_counted_as_connect_errors(tmp_path):
    rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{free_port()}", "--input", "input:FP32:-1,4",
                             "--rate", "50", "--duration", "0.5", "--fixed", "--json", "-", "--quiet")
    assert rc == 0, err
    s = json.loads(out)["all"]
    assert s["scheduled"] == 25 and s["connect"] == 25 and s["failed"] == 25 and s["replied"] == 0


def stall_run(tmp_path, mode):
    """One connection, 1000 requests/s for 2 s; the server holds every reply that arrives in
    [0.5, 1.5) s for 300 ms. Returns the (p50, p99) latency of the requests scheduled in
    the stall, as the loader reports them in `mode`."""
    f = Kserve(stall=(0.5, 1.0, 0.3))
    try:
        rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{f.port}", "--rate", "1000", "--duration", "2",
                                 "--fixed", "--connections", "1", "--latency-from", mode, "--quiet",
                                 "--requests", tmp_path / f"{mode}.csv")
    finally:
        f.close()
    assert rc == 0, err
    r = rows(tmp_path / f"{mode}.csv")
    assert len(r) == 2000 and all(q["status"] == "200" for q in r)
    lat = sorted(float(q["latency_s"]) for q in r if 0.5 <= float(q["sched_s"]) < 1.5)
    assert len(lat) == 1000
    return lat[len(lat) // 2 - 1], lat[int(0.99 * len(lat)) - 1]


def test_latency_counts_from_the_schedule_so_a_stall_shows(tmp_path):
    p50, p99 = stall_run(tmp_path, "schedule")
    # each request scheduled in the stall waited for the one connection until it was over
    assert p99 >= 0.3 and p50 >= 0.3, (p50, p99)
    # the closed-loop view: only the few requests that were on the wire in the stall saw
    # it, so the same check fails when latency is measured from the actual send time
    p50s, p99s = stall_run(tmp_path, "send")
    assert p99s < 0.3 and p50s < 0.3, (p50s, p99s)


def test_the_mix_arrives_as_headers_and_bodies_follow_the_metadata(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [
        "0.00,urgent,acme,public,demo,1", "0.01,normal,globex,sensitive,demo,3",
        "0.02,batch,acme,sensitive,demo,7", "0.03,normal,initech,public,demo,2"])
    for body in ("binary", "json"):
        f = Kserve()
        try:
            rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{f.port}", "--trace", trace, "--body", body,
                                     "--deadline-ms", "urgent=250,batch=9000", "--api-key", "globex=k-9", "--quiet")
        finally:
            f.close()
        assert rc == 0, err
        got = {int(header(h, "X-Request-Id").split("-")[1]): (h, b) for _, h, b in f.log}
        assert sorted(got) == [0, 1, 2, 3]
        want = [("urgent", "public", "acme", "250", 1), ("normal", "sensitive", "globex", None, 3),
                ("batch", "sensitive", "acme", "9000", 7), ("normal", "public", "initech", None, 2)]
        for i, (prio, dclass, tenant, deadline, size) in enumerate(want):
            h, b = got[i]
            assert h.startswith(b"POST /v2/models/demo/infer HTTP/1.1\r\n")
            assert header(h, "X-Priority") == prio and header(h, "X-Data-Class") == dclass
            assert header(h, "X-Deadline-Ms") == deadline
            if tenant == "globex":
                assert header(h, "X-Api-Key") == "k-9" and header(h, "X-Tenant") is None
            else:
                assert header(h, "X-Tenant") == tenant and header(h, "X-Api-Key") is None
            if body == "binary":
                n = int(header(h, "Inference-Header-Content-Length"))
                head = json.loads(b[:n])
                [inp] = head["inputs"]
                assert inp["name"] == "input" and inp["datatype"] == "FP32" and inp["shape"] == [size, 4]
                x = np.frombuffer(b[n:], np.float32)
                assert len(b) - n == inp["parameters"]["binary_data_size"] == size * 16
                assert ((x >= 0) & (x < 1)).all()
            else:
                assert header(h, "Inference-Header-Content-Length") is None
                [inp] = json.loads(b)["inputs"]
                assert inp["shape"] == [size, 4] and len(inp["data"]) == size * 4


def test_a_trace_is_replayed_at_its_times(tmp_path):
    times = [0.0, 0.05, 0.05, 0.05, 0.2, 0.21, 0.5, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0, 1.3]
    trace = write_trace(tmp_path / "t.csv", [f"{t:.4f},normal,acme,public,demo,1" for t in times])
    f = Kserve()
    try:
        rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{f.port}", "--trace", trace, "--quiet",
                                 "--requests", tmp_path / "r.csv")
    finally:
        f.close()
    assert rc == 0, err
    arrived = {int(header(h, "X-Request-Id").split("-")[1]): t for t, h, _ in f.log}
    assert sorted(arrived) == list(range(len(times)))
    for i, t in enumerate(times):
        assert abs((arrived[i] - arrived[0]) - t) <= TOLERANCE_S, (i, t, arrived[i] - arrived[0])
    for q in rows(tmp_path / "r.csv"):
        assert 0 <= float(q["sent_s"]) - float(q["sched_s"]) <= TOLERANCE_S, q


def test_pool_table_matches_what_the_backends_behind_the_router_counted(tmp_path):
    gpu, cpu = Kserve(), Kserve()
    r = Router(config([gpu.port], [cpu.port]), tmp_path)
    try:
        r.wait_healthy(2)
        rc, out, err = tierbench("load", "--url", f"http://{r.url}", "--rate", "100", "--duration", "1",
                                 "--sensitive", "0.4", "--seed", "3", "--json", tmp_path / "s.json",
                                 "--requests", tmp_path / "r.csv")
    finally:
        assert r.stop() == 0
        gpu.close()
        cpu.close()
    assert rc == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["all"]["ok"] == s["all"]["scheduled"] > 50
    # the inferences each backend answered (its log; the metadata GET is not logged)
    served = {"gpu": len(gpu.log), "cpu": len(cpu.log)}
    assert s["all"]["served_by_pool"] == served and min(served.values()) > 0
    assert s["pools"]["gpu"]["ok"] == served["gpu"] and s["pools"]["cpu"]["ok"] == served["cpu"]
    for q in rows(tmp_path / "r.csv"):  # sensitive data only on the sensitive pool
        assert q["data_class"] == "public" or q["pool"] == "cpu", q
    assert "gpu" in out and "cpu" in out


def test_real_router_and_cpu_workers(tmp_path):
    """A router with a 'GPU' pool (EXECUTION_MODE=cpu worker, min_tier cpu) and a CPU pool,
    real demo workers: every request served, the pools' counts those of the workers."""
    demo = ROOT / "models"
    g = start_worker(demo, tmp_path, env={"EXECUTION_MODE": "cpu"})
    c = start_worker(demo, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([g.port], [c.port]), tmp_path)
    try:
        r.wait_healthy(2)
        g0, c0 = worker_requests(g), worker_requests(c)
        for body in ("binary", "json"):
            rc, out, err = tierbench("load", "--url", f"http://{r.url}", "--rate", "60", "--duration", "1",
                                     "--sensitive", "0.3", "--size-max", "4", "--body", body,
                                     "--mix", "urgent=1,normal=1,batch=1", "--json", tmp_path / f"{body}.json")
            assert rc == 0, err
        gd, cd = worker_requests(g) - g0, worker_requests(c) - c0
    finally:
        assert r.stop() == 0
        g.stop()
        c.stop()
    gpu = cpu = 0
    for body in ("binary", "json"):
        s = json.loads((tmp_path / f"{body}.json").read_text())
        assert s["all"]["ok"] == s["all"]["scheduled"] > 30, s["all"]
        gpu += s["all"]["served_by_pool"].get("gpu", 0)
        cpu += s["all"]["served_by_pool"].get("cpu", 0)
    assert (gpu, cpu) == (gd, cd)


def test_bad_arguments_exit_64_naming_the_problem(tmp_path):
    for args, needle in [((), "--url"), (("--url", "https://x:1"), "not http://"),
                         (("--url", "http://127.0.0.1:1", "--connections", "0"), "--connections"),
                         (("--url", "http://127.0.0.1:1", "--trace", "x.csv", "--rate", "3"), "not both"),
                         (("--url", "http://127.0.0.1:1", "--input", "x:NOPE:1"), "datatype"),
                         (("--url", "http://127.0.0.1:1", "--kill", "1:gpu"), "--kill")]:
        rc, out, err = tierbench("load", *args)
        assert rc == 64 and needle in err, (args, rc, err)
