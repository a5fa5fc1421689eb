"""tierrouter with more than one pool of a kind, per-model pools, and large replies.

Every "GPU" worker here runs EXECUTION_MODE=cpu behind a pool with min_tier cpu (this machine
has no GPU); the policy and routing code cannot tell the difference.
"""
import concurrent.futures as cf
import hashlib
import json
import socket
import struct
import threading
import time
import urllib.request

import pytest

from conftest import SANITIZED, start_worker
from helpers import metric, rss_kb, wait_until
from rawhttp import read_to_close
from fakehttp import FakeHTTP, echo_id
from test_router import DEMO, Router, pools_config, post_once, worker_requests


def pool_status(r, name):
    return next(p for p in r.status()["pools"] if p["name"] == name)


@pytest.fixture()
def four_pools(tmp_path):
    """Two GPU pools, a general CPU pool and a CPU-only pool that may take sensitive data."""
    ws = {n: start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"}) for n in ("gpu-a", "gpu-b", "cpu", "vault")}
    r = Router(pools_config([("gpu-a", "gpu", False, [ws["gpu-a"].port], None),
                             ("gpu-b", "gpu", False, [ws["gpu-b"].port], None),
                             ("cpu", "cpu", False, [ws["cpu"].port], None),
                             ("vault", "cpu", True, [ws["vault"].port], None)]), tmp_path)
    r.wait_healthy(4)
    yield r, ws
    assert r.stop() == 0
    for w in ws.values():
        w.stop()


def test_sensitive_goes_only_to_the_pool_marked_for_it(four_pools):
    r, ws = four_pools
    before = {n: worker_requests(w) for n, w in ws.items()}
    for prio in ("urgent", "normal", "batch"):
        for _ in range(5):
            code, headers, _ = post_once(r, "demo", {"X-Data-Class": "sensitive", "X-Priority": prio})
            assert code == 200 and headers["X-Tierrouter-Pool"] == "vault"
    after = {n: worker_requests(w) for n, w in ws.items()}
    # counted where the work ran: only the vault's worker saw them
    assert {n: after[n] - before[n] for n in ws} == {"gpu-a": 0, "gpu-b": 0, "cpu": 0, "vault": 15}


def test_repository_index_lists_what_pools_without_a_model_list_serve(four_pools):
    r, ws = four_pools
    body = urllib.request.urlopen(urllib.request.Request(f"http://{r.url}/v2/repository/index", data=b"",
                                                         method="POST"), timeout=5).read()
    assert json.loads(body) == [{"name": "demo", "version": "1", "state": "READY"}]


def test_concurrent_traffic_uses_both_gpu_pools(four_pools):
    r, ws = four_pools
    with cf.ThreadPoolExecutor(8) as ex:
        pools = list(ex.map(lambda _: post_once(r, "demo")[1]["X-Tierrouter-Pool"], range(240)))
    assert pools.count("gpu-a") > 0 and pools.count("gpu-b") > 0, pools
    assert pools.count("cpu") + pools.count("vault") == 0  # no pressure: GPU-first


def test_losing_one_gpu_pool_keeps_urgent_on_the_other(four_pools):
    r, ws = four_pools
    ws["gpu-a"].proc.kill()
    wait_until(lambda: pool_status(r, "gpu-a")["healthy"] == 0, 10, what="gpu-a ejected")
    wait_until(lambda: pool_status(r, "gpu-a")["policy"]["hard_failover"], 10, what="gpu-a hard failover")
    for _ in range(10):
        code, headers, _ = post_once(r, "demo", {"X-Priority": "urgent"})
        assert code == 200 and headers["X-Tierrouter-Pool"] == "gpu-b"  # still a GPU
    st = r.status()
    assert st["lead_gpu_pool"] == "gpu-a" and st["hard_failover"] is True
    assert pool_status(r, "gpu-b")["policy"]["hard_failover"] is False
    assert metric(r, "tierrouter_hard_failover", pool="gpu-a") == 1
    assert metric(r, "tierrouter_hard_failover", pool="gpu-b") == 0
    assert metric(r, "tierrouter_policy_events_total", pool="gpu-a", event="hard_failover") >= 1
    # and with no GPU pool left, urgent traffic fails over to the CPU pools
    ws["gpu-b"].proc.kill()
    wait_until(lambda: pool_status(r, "gpu-b")["healthy"] == 0, 10, what="gpu-b ejected")
    for _ in range(10):
        code, headers, _ = post_once(r, "demo", {"X-Priority": "urgent"})
        assert code == 200 and headers["X-Tierrouter-Pool"] in ("cpu", "vault")


def test_pools_serve_only_their_models(tmp_path):
    """`models` maps a logical name to the pool's physical model; a pool that does not list
    a name never gets its requests, even when it is the only pool with room."""
    a = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    b = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(pools_config([("gpu", "gpu", False, [a.port], [("demo", "demo")]),
                             ("cpu", "cpu", False, [b.port], [("demo-cheap", "demo")])]), tmp_path)
    try:
        r.wait_healthy(2)
        for model, pool, w in (("demo", "gpu", a), ("demo-cheap", "cpu", b)):
            n0 = worker_requests(w)
            for _ in range(5):
                code, headers, _ = post_once(r, model)
                assert code == 200 and headers["X-Tierrouter-Pool"] == pool
            assert worker_requests(w) - n0 == 5
        # the repository index a Triton client reads lists the logical names
        import tritonlike
        c = tritonlike.TritonLikeClient(r.url)
        index = {e["name"]: e for e in c.get_model_repository_index()}
        assert set(index) == {"demo", "demo-cheap"}
        assert all(e["state"] == "READY" and e["version"] == "1" for e in index.values()), index
        assert "model_repository" in c.get_server_metadata()["extensions"]
        a.proc.kill()  # the only pool serving "demo" is gone: 503, never the other pool
        wait_until(lambda: pool_status(r, "gpu")["healthy"] == 0, 10, what="gpu ejected")
        index = {e["name"]: e for e in c.get_model_repository_index()}
        assert index["demo"]["state"] == "UNAVAILABLE" and index["demo-cheap"]["state"] == "READY"
        n0 = worker_requests(b)
        code, _, body = post_once(r, "demo")
        assert code == 503 and b"demo" in body
        assert worker_requests(b) == n0
        assert post_once(r, "nothing-serves-this")[0] == 404
    finally:
        assert r.stop() == 0
        a.stop()
        b.stop()


def test_more_pools_than_supported_is_refused(tmp_path):
    import subprocess
    from conftest import sanitizer_env
    from test_router import ROUTER_BIN
    cfg = tmp_path / "many.yaml"
    cfg.write_text(pools_config([(f"p{i}", "cpu", False, [1000 + i], None) for i in range(9)]))
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env=dict(__import__("os").environ, **sanitizer_env()))
    assert p.returncode == 64 and b"pools" in p.stderr, p.stderr


class BigBackend(FakeHTTP):
    """Answers every inference with a Content-Length reply of `size` patterned bytes, as fast
    as the socket takes them, with `headers` (raw lines) added."""

    def __init__(self, size, headers=b""):
        self.size = size
        self.headers = headers
        self.block = hashlib.sha256(b"tierrouter").digest() * 2048  # 64 KiB
        super().__init__()

    def respond(self, c, head, body):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" + echo_id(head) + self.headers
                  + b"Content-Length: %d\r\n\r\n" % self.size)
        left = self.size
        while left:
            piece = self.block[:min(left, len(self.block))]
            c.sendall(piece)
            left -= len(piece)
        return True


def test_large_reply_streams_to_a_slow_client_in_bounded_memory(tmp_path):
    size = 48 << 20
    be = BigBackend(size)
    # ASan keeps freed memory in quarantine; a small one keeps RSS meaningful
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]), tmp_path,
               env={"ASAN_OPTIONS": "quarantine_size_mb=4:detect_leaks=1:halt_on_error=1"} if SANITIZED else None)
    try:
        r.wait_healthy(1)
        rss0 = rss_kb(r.proc.pid)
        s = socket.create_connection(("127.0.0.1", r.port), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}).encode()
        s.sendall(b"POST /v2/models/blob/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"\r\n\r\n" not in got:
            data = s.recv(65536)
            assert data, f"connection closed inside the reply head: {got[:200]!r}"
            got += data
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Content-Length: %d" % size in head and b"chunked" not in head.lower()  # length kept
        h = hashlib.sha256(rest)
        n, peak, done = len(rest), [0], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kb(r.proc.pid) - rss0)
                time.sleep(0.005)
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            while n < size:  # a slow reader: about 40 MB/s at most
                data = s.recv(min(65536, size - n))
                assert data, f"reply cut short at {n} bytes"
                h.update(data)
                n += len(data)
                time.sleep(0.0015)
        finally:
            done.set()
            sampler.join()
        s.close()
        peak = peak[0]
        want = hashlib.sha256()
        for k in range(0, size, len(be.block)):
            want.update(be.block[:min(len(be.block), size - k)])
        assert h.hexdigest() == want.hexdigest()
        print(f"router RSS growth while passing {size >> 20} MiB to a slow client: {peak / 1024:.1f} MiB")
        assert peak < 16 * 1024, f"router RSS grew {peak} KiB"  # far below the reply's size
        assert metric(r, "tierrouter_stream_pauses_total") >= 1
        assert r.proc.poll() is None
    finally:
        assert r.stop() == 0
        be.close()


def test_backend_client_errors_pass_through_with_their_message(four_pools):
    r, ws = four_pools
    body = json.dumps({"inputs": [{"name": "no_such_input", "datatype": "FP32", "shape": [1, 4],
                                   "data": [1, 2, 3, 4]}]}).encode()
    code, headers, text = post_once(r, "demo", body=body)
    assert code == 400 and b"no_such_input" in text  # the worker's own words
    assert headers.get("X-Tierrouter-Pool") in ("gpu-a", "gpu-b")
    assert metric(r, "tierrouter_requests_total", pool=headers["X-Tierrouter-Pool"], priority="normal",
                  outcome="client_error") >= 1


def test_hop_by_hop_headers_stop_at_the_router(tmp_path):
    """RFC 9110 7.6.1: Connection, Keep-Alive and the like, and every field the Connection
    header names, belong to one hop; end-to-end fields pass."""
    be = BigBackend(5, headers=b"Connection: keep-alive, X-Hop-Secret\r\nKeep-Alive: timeout=5\r\n"
                               b"X-Hop-Secret: 42\r\nX-Kept: yes\r\nTrailer: X-Nothing\r\n"
                               b"X-Tierrouter-Pool: forged\r\nX-Tierrouter-Backend: forged\r\n")
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        code, headers, body = post_once(r, "blob")
        assert code == 200 and len(body) == 5
        names = {k.lower() for k in headers}
        assert "x-kept" in names and "x-hop-secret" not in names
        assert "keep-alive" not in names and "trailer" not in names
        assert headers.get("Content-Length") == "5"
        # the router's own fields are written once, by the router: a backend cannot forge them
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        c.request("POST", "/v2/models/blob/infer", body=b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}')
        resp = c.getresponse()
        resp.read()
        pools = [v for k, v in resp.getheaders() if k.lower() == "x-tierrouter-pool"]
        backends = [v for k, v in resp.getheaders() if k.lower() == "x-tierrouter-backend"]
        c.close()
        assert pools == ["cpu"] and backends == [f"127.0.0.1:{be.port}"], resp.getheaders()
    finally:
        assert r.stop() == 0
        be.close()


@pytest.mark.parametrize("framing", [
    b"Content-Length: 13\r\nContent-Length: 14\r\n",
    b"Content-Length: 13\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip\r\n",
])
def test_ambiguous_framing_is_refused_and_the_connection_closed(four_pools, framing):
    """Request smuggling: a length two parties could read differently never reaches a worker."""
    from test_router import worker_seen
    r, ws = four_pools
    before = {n: worker_seen(w) for n, w in ws.items()}
    s = socket.create_connection(("127.0.0.1", r.port), timeout=5)
    s.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" + b'{"inputs": []}')
    got = b""
    while True:
        data = s.recv(65536)
        if not data:
            break  # closed by the router
        got += data
    s.close()
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert {n: worker_seen(w) for n, w in ws.items()} == before
    assert r.proc.poll() is None


def test_token_stream_to_an_http10_client(tmp_path):
    """An HTTP/1.0 client cannot take chunks: the stream goes out raw and ends with the
    connection. The backend's last chunk comes after everything before it was written, so
    libevent finishes the client's request the moment the router ends it (a use-after-free
    before the router let go of the request first)."""
    from test_router import FakeBackend
    be = FakeBackend("stream")
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
            body = b'{"inputs":[{"name":"prompt","datatype":"BYTES","shape":[1],"data":["hi"]}]}'
            s.sendall(b"POST /v2/models/llm/infer HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            head, _, rest = read_to_close(s).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200"), head
            assert b"chunked" not in head.lower()
            assert all(b"token%d" % k in rest for k in range(5)), rest
        assert r.proc.poll() is None
    finally:
        assert r.stop() == 0
        be.close()


class FailingBackend(FakeHTTP):
    """Healthy to the router's probes; fails every inference: 'reset' aborts the connection
    (RST, no reply), '500' answers an error."""

    def __init__(self, mode):
        self.mode = mode
        super().__init__()

    def respond(self, c, head, body):
        if self.mode == "reset":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()
            return False
        msg = b'{"error":"injected failure"}'
        c.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n" + echo_id(head) +
                  b"Content-Length: %d\r\n\r\n" % len(msg) + msg)
        return True


@pytest.mark.parametrize("layout", ["alone", "second-vault"])
@pytest.mark.parametrize("mode", ["reset", "500"])
def test_a_failed_sensitive_try_is_retried_only_where_sensitive_data_may_go(tmp_path, mode, layout):
    """A sensitive request whose first try fails (the only backend of the first sensitive
    pool resets or answers 500) is retried, but only in a pool marked sensitive: with none
    other it fails; with a second one it is served there. Healthy non-sensitive pools (GPU
    and CPU) stand by the whole time and their workers never see one of these requests."""
    bad = FailingBackend(mode)
    ws = {n: start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
          for n in (("gpu", "cpu", "vault-b") if layout == "second-vault" else ("gpu", "cpu"))}
    pools = [("gpu", "gpu", False, [ws["gpu"].port], None),
             ("vault-a", "cpu", True, [bad.port], None),  # listed first: the first choice on a tie
             ("cpu", "cpu", False, [ws["cpu"].port], None)]
    if layout == "second-vault":
        pools.append(("vault-b", "cpu", True, [ws["vault-b"].port], None))
    r = Router(pools_config(pools), tmp_path)
    try:
        r.wait_healthy(len(pools))
        before = {n: worker_requests(w) for n, w in ws.items()}
        retries0 = r.status()["retries"]
        hdr = {"X-Data-Class": "sensitive"}
        got = [post_once(r, "demo", hdr) for _ in range(4)]
        assert bad.hits >= 1  # the first try did go to the failing sensitive backend
        assert r.status()["retries"] > retries0 or layout == "alone"
        after = {n: worker_requests(w) for n, w in ws.items()}
        assert after["gpu"] == before["gpu"] and after["cpu"] == before["cpu"], (before, after)
        if layout == "alone":
            # nowhere else may take it: an error (502 after the failed try, 503 once the
            # failing backend is ejected), never a non-sensitive pool's answer
            for code, headers, body in got:
                assert code in (502, 503) and "error" in json.loads(body), (code, body)
                assert headers.get("X-Tierrouter-Pool") in (None, "vault-a"), headers
        else:
            for code, headers, body in got:
                assert code == 200 and headers["X-Tierrouter-Pool"] == "vault-b", (code, headers, body)
            assert after["vault-b"] - before["vault-b"] == len(got)
    finally:
        assert r.stop() == 0
        bad.close()
        for w in ws.values():
            w.stop()
