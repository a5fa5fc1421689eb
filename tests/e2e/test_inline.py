"""The idle-worker fast path (TIERSERVE_INLINE_MAX_US): a lone request for a fast model on a
worker with nothing else to do runs on the event loop thread instead of being handed to a
runner thread and back. It must give the same answers, never apply under concurrent load,
never bypass the batcher, and never run a slow model on the loop."""
import concurrent.futures as cf
import json
import shutil
import time

import numpy as np
import pytest

from conftest import ROOT, start_worker
from helpers import metric
from gen_demo import demo_reference

X = np.random.default_rng(11).uniform(0, 8, (1, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory, test_repo):
    root = tmp_path_factory.mktemp("inline-repo")
    shutil.copytree(ROOT / "models" / "demo", root / "demo", ignore=shutil.ignore_patterns("*.md"))
    shutil.copytree(ROOT / "models" / "demo", root / "demo_batched", ignore=shutil.ignore_patterns("*.md"))
    (root / "demo_batched" / "config.yaml").write_text(
        "max_batch_size: 8\ndynamic_batching:\n  max_queue_delay_microseconds: 100\n")
    shutil.copytree(test_repo / "slow", root / "slow")
    return root


def infer(w, model, x=X):
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}]}).encode()
    code, _, text = w.http("POST", f"/v2/models/{model}/infer", body)
    assert code == 200, text
    return json.loads(text)


def slow_binary(w, rows, parameters=None, expect=200):
    """`slow` with its rows as binary data: the JSON part stays small, so however many rows
    the request is decoded on the loop and may be considered for running there (a JSON body
    over 64 KiB goes to the decode pool, which always hands off)."""
    x = np.full((rows, 512), 0.5, dtype=np.float32).tobytes()
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 512],
                        "parameters": {"binary_data_size": len(x)}}]}
    if parameters:
        body["parameters"] = parameters
    hdr = json.dumps(body).encode()
    code, _, text = w.http("POST", "/v2/models/slow/infer", hdr + x,
                           headers={"Inference-Header-Content-Length": str(len(hdr))}, timeout=120)
    assert code == expect, (parameters, code, text[:200])


def inline_runs(w):
    return json.loads(w.http("GET", "/v2/status")[2])["inline_runs"]


def test_idle_worker_runs_fast_requests_inline_with_the_same_answers(repo, tmp_path):
    # a generous bound, so that a slow (sanitizer) build still counts the demo model as fast
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": "5000"})
    try:
        rng = np.random.default_rng(3)
        for _ in range(40):
            x = rng.uniform(0, 8, (1, 4)).astype(np.float32)
            out = {o["name"]: o for o in infer(w, "demo", x)["outputs"]}
            ref = demo_reference(x)
            assert np.allclose(out["probabilities"]["data"], ref["probabilities"].ravel(), atol=1e-6)
            assert out["label"]["data"] == ref["label"].ravel().tolist()
        n = inline_runs(w)
        # the first requests seed the Run() average and the idle streak through the runners
        assert n >= 25, n
        assert metric(w, "tierserve_inline_runs_total") == n
    finally:
        w.stop()


def slow_rtt_us(w, n=12, rows=None):
    """The fastest of n round trips of `slow` (one row as JSON, or `rows` rows as binary
    data): an upper bound on its Run() (the workers the tests start measure no layout),
    mostly Run() (about 1.5 ms for a row here, the rest some 0.2 ms)."""
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        if rows:
            slow_binary(w, rows)
        else:
            assert slow_json(w)[0] == 200
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def slow_json(w, parameters=None):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512], "data": [1.0] * 512}]}
    if parameters:
        body["parameters"] = parameters
    return w.http("POST", "/v2/models/slow/infer", json.dumps(body).encode())


def test_never_inline_under_concurrency_for_batching_or_slow_models(repo, tmp_path):
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"})
    try:
        for _ in range(20):
            infer(w, "demo")  # idle: inline from here on
        n0 = inline_runs(w)
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda _: infer(w, "demo"), range(800)))
        share = (inline_runs(w) - n0) / 800
        print(f"share of 800 requests at concurrency 16 run inline: {share:.3f}")
        assert share < 0.5  # concurrent clients go to the runners
        n1 = inline_runs(w)
        for _ in range(30):
            infer(w, "demo_batched")  # the batcher decides, always
        assert inline_runs(w) == n1
        slow_us = slow_rtt_us(w)
    finally:
        w.stop()
    # `slow` (about 1.5 ms a row here) is under the default bound on a machine twice as fast: a bound
    # a quarter of its own measured round trip keeps it a slow model on any machine
    bound = max(1, int(slow_us / 4))
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": str(bound)})
    try:
        for _ in range(12):
            assert slow_json(w)[0] == 200
        assert inline_runs(w) == 0, (slow_us, bound)
    finally:
        w.stop()


def test_a_request_due_before_two_runs_takes_a_runner(repo, tmp_path):
    # A run on the loop has no deadline timer: a request whose timeout is shorter than the
    # model's typical Run() must go to a runner, whose timer ends it with a 504, not run to a
    # 200. 64 rows of `slow` (some 28 ms here) against a timeout of a quarter of that: the
    # loop's timers fire a few ms late when the model's threads hold both cores.
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": "100000"})
    try:
        rtt = slow_rtt_us(w, rows=64)  # seeds the estimate and the idle streak
        n0 = inline_runs(w)
        slow_binary(w, 64)
        assert inline_runs(w) == n0 + 1  # eligible: the loop runs `slow`
        due_us = max(1, int(rtt / 4))
        for _ in range(3):
            slow_binary(w, 64, {"timeout": due_us}, expect=504)
        assert inline_runs(w) == n0 + 1
    finally:
        w.stop()


def test_inline_can_be_switched_off(repo, tmp_path):
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": "0"})
    try:
        for _ in range(30):
            infer(w, "demo")
        assert inline_runs(w) == 0
    finally:
        w.stop()


def test_one_long_run_does_not_push_a_fast_model_off_the_loop(repo, tmp_path):
    # The inline bound compares the model's typical Run(), not its mean: on a shared machine
    # a preempted run costs 10-100x the usual one, and a mean kept a 60 us model off the loop
    # for dozens of requests after each such outlier. One request of 2048 rows stands in for
    # the outlier here (about 1 s of Run() against some 3 ms for one row); being 2048 times
    # the typical input it runs on a runner, and its time still reaches the estimate.
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": "20000"})
    try:
        def slow(rows):
            code, _, text = w.http("POST", "/v2/models/slow/infer", json.dumps(
                {"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 512],
                             "data": [0.5] * (rows * 512)}]}).encode(), timeout=120)
            assert code == 200, text
        for _ in range(12):
            slow(1)  # seeds the estimate and the idle streak
        n0 = inline_runs(w)
        slow(1)
        assert inline_runs(w) == n0 + 1  # one row of `slow` is well inside 20 ms: inline
        slow_binary(w, 2048)  # binary: small enough a JSON part to be considered for the loop
        n1 = inline_runs(w)
        assert n1 == n0 + 1  # 2048 rows are far past the typical input: a runner's, not the loop's
        for _ in range(12):
            slow(1)
        ran_inline = inline_runs(w) - n1
        print(f"one-row requests run inline after the long one: {ran_inline} of 12")
        assert ran_inline >= 10, ran_inline
    finally:
        w.stop()


def test_a_large_request_does_not_hold_the_loop_from_other_connections(repo, tmp_path):
    # The loop may run a fast model's typical request, so another connection waits at most
    # about one typical Run(). A request far larger than the typical one must not run there:
    # while 2048 rows of `slow` run (seconds against milliseconds for one row), a second
    # connection's request is answered in a fraction of that time.
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INLINE_MAX_US": "20000"})
    try:
        def slow(rows):
            slow_binary(w, rows)
        for _ in range(12):
            slow(1)  # the typical request: one row, inline from here on
        t = time.monotonic()
        slow(2048)
        long_s = time.monotonic() - t  # this machine's time for the large one
        for _ in range(12):
            slow(1)  # the streak and the estimates back to one row
        assert inline_runs(w) >= 10
        n0 = inline_runs(w)
        with cf.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(slow, 2048)
            time.sleep(long_s / 4)  # the large request is running by now
            t = time.monotonic()
            infer(w, "demo")
            waited = time.monotonic() - t
            fut.result()
        print(f"2048 rows took {long_s * 1e3:.0f} ms; a second connection waited {waited * 1e3:.0f} ms")
        assert waited < long_s / 2, (waited, long_s)
        assert inline_runs(w) == n0  # neither ran inline: one is large, the other was not alone
    finally:
        w.stop()
