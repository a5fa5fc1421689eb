"""Rolling restarts under load lose nothing: tierrouter in front of three real workers, a
closed-loop load through it, and the workers restarted one at a time (SIGTERM, wait for the
exit, start again on the same port, wait until the router takes it back) 20 times in all
(6 in the ASan build).

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
import socket
import threading
import time

import numpy as np

from conftest import SANITIZED, start_worker
from helpers import Router, request, wait_until
from test_router_drain import _closed_by_peer
from fakehttp import FakeHTTP, echo_id

# 20 restarts in the normal build; under ASan (each worker start there costs seconds) 6, two of
# each worker: enough to run the drain, the keep-alive close and the router's resend under the
# sanitizers, which is what that build is for; the count of lost requests over many cycles
# is the normal build's to hold
RESTARTS = 6 if SANITIZED else 20
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
    # restarts measure lost requests, not the ejection backoff. Probes every 250 ms (the
    # default; each may take twice that): with this load on two cores a healthy worker's
    # probe can take over 200 ms, and a pool with every worker unready is another test
    backends = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    r = Router(f"""address: 127.0.0.1
probe_interval_ms: 250
retry: {{budget_ratio: 0, min_concurrency: 1}}
ejection: {{base_ms: 100, max_ms: 500}}
deadline_ms: {{normal: 30000}}
pools:
  - name: cpu
    kind: cpu
    backends: [{backends}]
""", tmp_path)
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


def _read_reply(sock):
    """One HTTP/1.1 reply with a Content-Length from sock: (status, headers lower-cased, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a reply head: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed inside a reply body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_draining_worker_closes_its_keepalive_connections(tmp_path, test_repo):
    """What the router counts on when a worker drains: its idle keep-alive connection is
    closed at SIGTERM (not left for the exit to cut under a request), the request in flight
    is answered in full with `Connection: close` and `Tierserve-Draining: 1`, and a new
    request is refused with 503 saying the same, before the worker exits 0."""
    repo = tmp_path / "slowrepo"
    shutil.copytree(test_repo / "slow", repo / "slow")
    w = _worker(repo, tmp_path)
    body = _body(1024)  # long enough to be in flight when SIGTERM comes

    def send(sock, b):
        sock.sendall(f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(b)}\r\n\r\n".encode() + b)

    idle = socket.create_connection(("127.0.0.1", w.port), timeout=30)
    send(idle, _body(1))
    status, headers, _ = _read_reply(idle)
    assert status == 200 and headers.get("connection") != "close"  # kept alive, now idle
    busy = socket.create_connection(("127.0.0.1", w.port), timeout=30)
    send(busy, body)
    wait_until(lambda: w.get_json("/v2/status")[1]["in_flight"] >= 1, 10, "the slow request in flight",
               interval=0.005)
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait_log("SIGTERM received", timeout=10)
    assert _closed_by_peer(idle, 5), "the idle keep-alive connection stayed open while the worker drained"
    late = socket.create_connection(("127.0.0.1", w.port), timeout=30)
    send(late, _body(1))
    status, headers, _ = _read_reply(late)
    assert status == 503 and headers.get("tierserve-draining") == "1" and headers.get("connection") == "close", headers
    status, headers, reply = _read_reply(busy)
    assert status == 200 and json.loads(reply)["outputs"][0]["shape"] == [1024, 512]
    assert headers.get("connection") == "close" and headers.get("tierserve-draining") is None, headers
    assert w.proc.wait(timeout=30) == 0
    for s in (idle, busy, late):
        s.close()


class _ClosesKeptAlive(FakeHTTP):
    """A backend that answers the first request on each connection (keep-alive) and closes
    the connection, unanswered, when the next request arrives on it: the keep-alive race
    of a worker that closes an idle connection just as the router reuses it, every time."""

    answered = set()  # the connections (by id) that have had their one reply

    def respond(self, c, head, body):
        if id(c) in self.answered:
            c.close()
            return False
        self.answered.add(id(c))
        reply = b'{"outputs": []}'
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + echo_id(head) +
                  f"Content-Length: {len(reply)}\r\n\r\n".encode() + reply)
        return True


def test_request_on_a_kept_alive_connection_closed_under_it_is_resent(tmp_path):
    """The only backend closes each reused connection before a byte of the reply: every
    request is still answered (resent on a new connection, to the same backend since there
    is no other), with the retry budget off."""
    bad = _ClosesKeptAlive()
    r = Router(f"""address: 127.0.0.1
probe_interval_ms: 250
retry: {{budget_ratio: 0, min_concurrency: 0}}
pools:
  - name: cpu
    kind: cpu
    backends: ["127.0.0.1:{bad.port}"]
""", tmp_path)
    try:
        r.wait_healthy(1)
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})
        codes = [request(r, "POST", "/v2/models/m/infer", body).status for _ in range(6)]
        assert codes == [200] * 6, codes
    finally:
        assert r.stop() == 0
        bad.close()
