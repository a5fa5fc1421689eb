"""Rolling restarts under load lose nothing: tierrouter in front of three real workers, a
closed-loop load through it, and the workers restarted one at a time (SIGTERM, wait for the
exit, start again on the same port, wait until the router takes it back) 20 times in all.

What makes a request fail here is the keep-alive race: the router sends a request on a
pooled connection just as the draining (or exiting) worker closes it, or while the worker
refuses new work because it drains. A worker that drains says `Connection: close` on every
reply and closes its idle connections; the router sends a request that failed before any
byte of its reply arrived to another backend, and such a retry is never refused by the
retry budget (docs/router.md, "Retries"). Every client request is sent exactly once on a
fresh connection (helpers.request), so a request the router lost shows as a failure here,
never as a silent client-side re-send.
"""
import json
import shutil
import signal
import threading
import time

import numpy as np

from conftest import start_worker
from helpers import Router, request, wait_until
from test_router import pools_config

RESTARTS = 20
WORKERS = 3
CLIENTS_PER_WORKER = 3  # closed loop: one request running on each worker, two waiting


def _worker(repo, tmp_path, port=0):
    return start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "1"},
                        args=[f"--http-port={port}"] if port else ())


def _body(rows):
    x = np.random.default_rng(26).uniform(-1, 1, (rows, 512)).astype(np.float32)
    return json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 512],
                                   "data": x.ravel().tolist()}]}).encode()


def test_rolling_restarts_under_load_lose_nothing(tmp_path, test_repo):
    """The `slow` model, so that every SIGTERM finds requests in flight and waiting on the
    worker (it drains for a while, with its keep-alive connections open, while the router
    still sends it work until a probe or a reply says it drains): that is where requests
    were lost."""
    repo = tmp_path / "slowrepo"
    shutil.copytree(test_repo / "slow", repo / "slow")
    t0 = time.monotonic()
    workers = [_worker(repo, tmp_path) for _ in range(WORKERS)]
    start_s = (time.monotonic() - t0) / WORKERS  # one worker's start, measured on this machine
    ports = [w.port for w in workers]
    # no 5xx/timeout retry budget to speak of (ratio 0, floor 1): a retry the fix depends on
    # must not pass merely because the budget happened to have room. A worker that exits
    # with nothing in flight is gone before a probe sees it drain, so its connect failures
    # eject it, each time for longer (they double): capped here at 0.5 s, so that the 20
    # restarts measure lost requests, not the ejection backoff
    r = Router(pools_config([("cpu", "cpu", False, ports, None)],
                            "retry: {budget_ratio: 0, min_concurrency: 1}\n"
                            "ejection: {base_ms: 100, max_ms: 500}\n"
                            "deadline_ms: {normal: 30000}\n"), tmp_path)
    try:
        r.wait_healthy(WORKERS)

        def infer(body):
            return request(r, "POST", "/v2/models/slow/infer", body, timeout=60)

        # a request's size from a measurement: about 30 ms of work alone, so that a restart
        # always finds a few in flight however fast the machine is
        rows, one_s = 4, 0.0
        while True:
            t = time.monotonic()
            for _ in range(5):
                assert infer(_body(rows)).status == 200
            one_s = (time.monotonic() - t) / 5
            if one_s >= 0.03 or rows >= 256:
                break
            rows *= 2
        body = _body(rows)
        first = infer(body)
        assert first.status == 200, first
        want = np.array(json.loads(first.body)["outputs"][0]["data"], np.float32)

        def check(reply):
            if reply.status != 200:
                return f"{reply.status}: {reply.body[:300]!r}"
            got = np.array(json.loads(reply.body)["outputs"][0]["data"], np.float32)
            return "ok" if got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5) else "wrong y"

        n_threads = CLIENTS_PER_WORKER * WORKERS
        stop = threading.Event()
        sent = [0] * n_threads
        outcomes = [[] for _ in range(n_threads)]

        def load(k):
            while not stop.is_set():
                sent[k] += 1
                try:
                    outcomes[k].append(check(infer(body)))
                except Exception as e:  # noqa: BLE001 - every failure is recorded and fails the test
                    outcomes[k].append(f"{type(e).__name__}: {e}")

        def done():
            return sum(len(o) for o in outcomes)

        threads = [threading.Thread(target=load, args=(k,)) for k in range(n_threads)]
        for th in threads:
            th.start()
        retries_before = r.status()["retries"]
        try:
            wait_until(lambda: done() >= 50, 30, "the load to get going")
            per_cycle = []
            for i in range(RESTARTS):
                k = i % WORKERS
                c0 = time.monotonic()
                w = workers[k]
                w.proc.send_signal(signal.SIGTERM)
                assert w.proc.wait(timeout=30) == 0, w.log_text()[-2000:]
                workers[k] = _worker(repo, tmp_path, ports[k])
                wait_until(lambda: r.backend(ports[k])["healthy"], 10,
                           f"the router to take worker {k} back after restart {i + 1}", interval=0.01)
                # the load reaches the whole pool again before the next worker goes
                n = done()
                wait_until(lambda: done() >= n + 3 * WORKERS, 30, f"load after restart {i + 1}", interval=0.005)
                per_cycle.append(time.monotonic() - c0)
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=60)
        assert not any(th.is_alive() for th in threads), "a load thread hung"
        results = [x for o in outcomes for x in o]
        bad = [x for x in results if x != "ok"]
        retried = r.status()["retries"] - retries_before
        print(f"\n{RESTARTS} rolling restarts of {WORKERS} workers under {n_threads} closed-loop clients: "
              f"{len(results)} requests, {len(bad)} failed, {retried} retried by the router; "
              f"one request ({rows} rows) alone {one_s * 1e3:.1f} ms, a worker start {start_s:.2f} s, "
              f"a restart cycle {np.median(per_cycle):.2f} s median")
        # every request sent got exactly one reply, and it was a correct 200
        assert [len(o) for o in outcomes] == sent
        assert not bad, f"{len(bad)} of {len(results)} requests failed: {bad[:5]}"
    finally:
        assert r.stop() == 0
        for w in workers:
            w.stop()
