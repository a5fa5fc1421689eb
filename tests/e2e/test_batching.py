"""Dynamic batching and queue policies end to end (Triton's config.yaml fields).

Requests fired together at a batching model must come back with exactly their own rows,
for every batchable datatype; requests of different shapes never share a Run(); queue
timeouts and bounds answer 504 / 503 without disturbing the others.
"""
import concurrent.futures as cf
import json
import re
import shutil
import threading

import numpy as np
import pytest

from conftest import start_worker
from helpers import metric, wait_until
import tritonlike

DTYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
          "FP16", "FP32", "FP64", "BYTES", "BF16"]
BATCH_CFG = ("max_batch_size: 16\n"
             "dynamic_batching:\n  max_queue_delay_microseconds: 50000\n")


def values(dt, rows, cols, seed):
    rng = np.random.default_rng(seed)
    if dt == "BYTES":
        return np.array([[f"r{seed}-{i}-{j}\x00é".encode() for j in range(cols)] for i in range(rows)],
                        dtype=object)
    if dt == "BOOL":
        return rng.integers(0, 2, (rows, cols)).astype(bool)
    if dt == "BF16":
        return rng.standard_normal((rows, cols)).astype(np.float32)
    np_dt = tritonlike.triton_to_np_dtype(dt)
    if np.issubdtype(np_dt, np.integer):
        info = np.iinfo(np_dt)
        return rng.integers(info.min, info.max, (rows, cols), dtype=np_dt, endpoint=True)
    return rng.standard_normal((rows, cols)).astype(np_dt)


@pytest.fixture(scope="module")
def batch_repo(test_repo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("batchrepo")
    for dt in DTYPES:
        name = f"identity_{dt.lower()}"
        shutil.copytree(test_repo / name, repo / name)
        (repo / name / "config.yaml").write_text(BATCH_CFG)
    shutil.copytree(test_repo / "simple_fp32", repo / "simple_fp32")
    (repo / "simple_fp32" / "config.yaml").write_text(BATCH_CFG)
    shutil.copytree(test_repo / "fixed_shape", repo / "fixed_shape")
    (repo / "fixed_shape" / "config.yaml").write_text(BATCH_CFG)
    shutil.copytree(test_repo / "slow", repo / "slow")
    (repo / "slow" / "config.yaml").write_text(
        "max_batch_size: 64\n"
        "dynamic_batching:\n"
        "  priority_levels: 2\n  default_priority_level: 2\n"
        "  default_queue_policy:\n    max_queue_size: 6\n"
        "  priority_queue_policy:\n"
        "    2:\n      max_queue_size: 6\n      default_timeout_microseconds: 30000000\n"
        "      allow_timeout_override: true\n")
    return repo


@pytest.fixture(scope="module")
def worker(batch_repo, tmp_path_factory):
    w = start_worker(batch_repo, tmp_path_factory.mktemp("bw"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "1"})
    yield w
    assert w.stop() == 0


def fire(url, model, payloads, binary=True, **kw):
    """Sends every payload at once, each on its own connection; returns the results."""
    def one(p):
        c = tritonlike.TritonLikeClient(url)
        return c.infer(model, p, binary_inputs=binary, binary_outputs=binary, **kw)
    with cf.ThreadPoolExecutor(len(payloads)) as ex:
        return list(ex.map(one, payloads))


def assert_own_rows(dt, datas, results):
    """Each identity reply holds exactly the rows its own request sent."""
    for d, r in zip(datas, results):
        got = r.as_numpy("OUTPUT0")
        if dt == "BF16":
            # the client sends the top 16 bits of each float32 (truncation)
            want = (d.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
            np.testing.assert_array_equal(got.astype(np.float32), want)
        elif dt == "BYTES":
            assert got.tolist() == d.tolist()
        else:
            assert got.dtype == d.dtype and got.shape == d.shape
            np.testing.assert_array_equal(got, d)


@pytest.mark.parametrize("dt", DTYPES)
def test_each_request_gets_its_own_rows(worker, dt):
    model = f"identity_{dt.lower()}"
    before = worker.http("GET", "/metrics")[2].decode()
    lbl = f'model="{model}",version="1"'
    runs0 = metric(before, "tierserve_batch_size_count", lbl)
    rows_sum0 = metric(before, "tierserve_batch_size_sum", lbl)
    datas = [values(dt, 1 + i % 3, 5, seed=i) for i in range(10)]
    results = fire(worker.url, model, [[("INPUT0", d, dt)] for d in datas])
    assert_own_rows(dt, datas, results)
    after = worker.http("GET", "/metrics")[2].decode()
    runs = metric(after, "tierserve_batch_size_count", lbl) - runs0
    batched = metric(after, "tierserve_batch_size_sum", lbl) - rows_sum0
    assert batched == 10          # every request ran exactly once
    assert runs < 10, "no batch was formed"  # and some of them shared a Run()


def test_json_requests_batch_too(worker):
    datas = [values("FP32", 2, 5, seed=100 + i) for i in range(6)]
    results = fire(worker.url, "identity_fp32", [[("INPUT0", d, "FP32")] for d in datas], binary=False)
    for d, r in zip(datas, results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), d)


def test_mixed_shapes_never_share_a_run(worker):
    # width 5 and width 7 alternate; a wrongly merged batch could not be split back right
    datas = [values("INT32", 1 + i % 2, 5 if i % 2 else 7, seed=200 + i) for i in range(12)]
    results = fire(worker.url, "identity_int32", [[("INPUT0", d, "INT32")] for d in datas])
    for d, r in zip(datas, results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), d)


def test_two_input_model_and_selected_outputs(worker):
    pairs = [(values("FP32", 1 + i % 4, 16, seed=300 + i), values("FP32", 1 + i % 4, 16, seed=400 + i))
             for i in range(8)]
    def one(i):
        a, b = pairs[i]
        c = tritonlike.TritonLikeClient(worker.url)
        outs = ["OUTPUT0", "OUTPUT1"] if i % 2 == 0 else [("OUTPUT1", i % 4 == 1)]
        return c.infer("simple_fp32", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], outputs=outs)
    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    for i, r in enumerate(results):
        a, b = pairs[i]
        if i % 2 == 0:
            np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        else:
            assert r.as_numpy("OUTPUT0") is None
        np.testing.assert_allclose(r.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_status_says_who_batches(worker):
    _, st = worker.get_json("/v2/status")
    by = {m["name"]: m for m in st["models"]}
    assert by["identity_fp32"]["batching"] is True
    assert by["fixed_shape"]["batching"] is False
    assert "no batch dimension" in by["fixed_shape"]["batching_note"]
    assert by["slow"]["priority_levels"] == 2
    cfg = worker.get_json("/v2/models/identity_fp32/config")[1]
    assert cfg["max_batch_size"] == 16
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 50000


def test_batch_larger_than_max_is_refused(worker):
    c = tritonlike.TritonLikeClient(worker.url)
    with pytest.raises(tritonlike.InferenceServerException) as e:
        c.infer("identity_fp32", [("INPUT0", np.zeros((17, 2), np.float32), "FP32")])
    assert e.value.status() == "400" and "max_batch_size 16" in str(e.value)


def slow_arrivals(worker):
    """How many `slow` requests the worker has taken in so far: those answered (any
    outcome, a refusal too) plus those still in flight (nothing else runs meanwhile)."""
    text = worker.http("GET", "/metrics")[2].decode()
    answered = sum(float(v) for v in re.findall(
        r'^tierserve_requests_total\{model="slow",[^}]*\} (\S+)$', text, re.M))
    in_flight = float(re.search(r"^tierserve_in_flight (\S+)$", text, re.M).group(1))
    return int(answered + in_flight)


def slow_successes(worker):
    """How many `slow` requests the worker has answered with success so far (its own count,
    ahead of any client thread that has yet to record its reply)."""
    text = worker.http("GET", "/metrics")[2].decode()
    return int(sum(float(v) for v in re.findall(
        r'^tierserve_requests_total\{model="slow",[^}]*outcome="success"\} (\S+)$', text, re.M)))


def wait_arrivals(worker, n, timeout=20):
    """Waits until the worker has taken in n `slow` requests (slow_arrivals)."""
    wait_until(lambda: slow_arrivals(worker) >= n, timeout, lambda: f"{n} slow arrivals, not {slow_arrivals(worker)}",
               interval=0.002)


def test_priority_and_queue_timeout_and_bounds(worker):
    """slow: one runner, level 2 queue of 6. A level-1 request overtakes queued level-2 ones;
    a level-2 request with a short timeout times out in the queue (504) or finds it full
    (503) without touching the others; beyond the bound, 503 + Retry-After. Each request is
    sent only once the worker has taken in the ones before it (its metrics say so)."""
    x = values("FP32", 64, 512, seed=1)
    done_order, lock = [], threading.Lock()

    def track(tag, **kw):
        c = tritonlike.TritonLikeClient(worker.url)
        try:
            c.infer("slow", [("x", x, "FP32")], request_id=tag, **kw)
            r = (tag, 200, "", {})
        except tritonlike.InferenceServerException as e:
            r = (tag, int(e.status()), str(e), e.headers() if callable(getattr(e, "headers", None)) else {})
        with lock:
            done_order.append(r)
        return r

    base = slow_arrivals(worker)
    base_ok = slow_successes(worker)
    with cf.ThreadPoolExecutor(20) as ex:
        # every request has 64 rows, a full batch: they run one at a time, ~tens of ms each
        futs = [ex.submit(track, f"low{i}") for i in range(7)]   # 1 running + 6 queued
        wait_arrivals(worker, base + 7)
        futs.append(ex.submit(track, "short", timeout=1000))       # 1 ms allowed in the queue
        wait_arrivals(worker, base + 8)
        futs.append(ex.submit(track, "urgent", priority=1))
        wait_arrivals(worker, base + 9)
        # the worker's own count of lows answered by then ('short' never succeeds): a client
        # thread may not have recorded its reply yet, so done_order would undercount them
        lows_done = slow_successes(worker) - base_ok
        futs += [ex.submit(track, f"flood{i}") for i in range(8)]
        results = [f.result() for f in futs]
    by_tag = {t: (code, msg, h) for t, code, msg, h in results}
    assert by_tag["urgent"][0] == 200
    assert [by_tag[f"low{i}"][0] for i in range(7)] == [200] * 7
    # 'short' either timed out in the queue or found it full; never ran
    assert by_tag["short"][0] in (503, 504), by_tag["short"]
    flood = [by_tag[f"flood{i}"] for i in range(8)]
    rejected = [f for f in flood if f[0] == 503]
    assert rejected, "the bounded queue never refused"
    assert all(f[0] in (200, 503) for f in flood)
    assert all("queue for priority level 2 is full" in f[1] for f in rejected)
    # the urgent request overtook every low one still queued when it arrived: one runner
    # runs one 64-row request at a time, in dispatch order
    assert lows_done <= 4, f"{lows_done} low requests finished before 'urgent' arrived: nothing to overtake"
    order = [t for t, *_ in done_order if t.startswith(("low", "urgent"))]
    assert order.index("urgent") <= lows_done + 1, (lows_done, order)


def test_queue_timeout_answers_504_and_spares_the_rest(worker):
    x = values("FP32", 64, 512, seed=2)
    def one(tag, **kw):
        c = tritonlike.TritonLikeClient(worker.url)
        try:
            r = c.infer("slow", [("x", x, "FP32")], request_id=tag, **kw)
            return tag, 200, r.as_numpy("y")
        except tritonlike.InferenceServerException as e:
            return tag, int(e.status()), str(e)
    base = slow_arrivals(worker)
    with cf.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(one, f"a{i}") for i in range(4)]
        wait_arrivals(worker, base + 4)  # 1 running, 3 queued ahead of 'short'
        futs.append(ex.submit(one, "short", timeout=2000))
        results = [f.result() for f in futs]
    by = {t: (c, v) for t, c, v in results}
    assert by["short"][0] == 504 and "timed out" in by["short"][1] and "queue" in by["short"][1]
    ys = [by[f"a{i}"] for i in range(4)]
    assert all(c == 200 for c, _ in ys)
    for _, y in ys[1:]:
        np.testing.assert_array_equal(y, ys[0][1])


def test_instances_get_their_own_cores(tmp_path, test_repo):
    """Two CPU instances of one model: a session each, and each runner thread pinned to its
    own core (read back from /proc, not from our own status)."""
    import os
    repo = tmp_path / "repo"
    shutil.copytree(test_repo / "demo", repo / "demo")
    (repo / "demo" / "config.yaml").write_text("instance_group:\n  - count: 2\n    kind: KIND_CPU\n")
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"})
    try:
        _, st = w.get_json("/v2/status")
        places = st["models"][0]["instance_cpus"]
        assert st["models"][0]["instances"] == 2 and len(places) == 2
        ncpu = os.cpu_count()
        if ncpu >= 2:
            assert not set(places[0]) & set(places[1]), places
        pinned = []
        for tid in os.listdir(f"/proc/{w.proc.pid}/task"):
            comm = open(f"/proc/{w.proc.pid}/task/{tid}/comm").read().strip()
            if comm.startswith("run-demo"):
                status = open(f"/proc/{w.proc.pid}/task/{tid}/status").read()
                allowed = [l.split(":")[1].strip() for l in status.splitlines()
                           if l.startswith("Cpus_allowed_list")][0]
                pinned.append(allowed)
        assert sorted(pinned) == sorted(str(p[0]) for p in places), (pinned, places)
        msgs = [l["msg"] for l in w.log_lines()]
        assert any(m.startswith("instance 0 on CPU(s) ") for m in msgs)
        assert any(m.startswith("instance 1 on CPU(s) ") for m in msgs)
        # and both instances serve correct results
        from gen_demo import demo_reference
        x = values("FP32", 3, 4, seed=9)
        for r in fire(w.url, "demo", [[("input", x, "FP32")]] * 6):
            np.testing.assert_allclose(r.as_numpy("probabilities"),
                                       demo_reference(x)["probabilities"], rtol=1e-5, atol=1e-6)
    finally:
        assert w.stop() == 0
